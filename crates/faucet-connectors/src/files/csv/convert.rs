//! Reading a CSV field's text as its declared [`ColumnType`], into the normalised [`Value`]
//! forms of docs/values.md.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Timelike as _, Utc};
use faucet_core::{Json, Value};

use super::config::ColumnType;

/// `text` as a value of type `ty`; the error says what was expected.
pub(super) fn convert(ty: ColumnType, text: &str) -> Result<Value, String> {
    match ty {
        ColumnType::String => Ok(Value::Text(text.into())),
        ColumnType::Int => text
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|_| format!("`{text}` is not an int (a whole number within 64 bits)")),
        ColumnType::Float => parse_float(text).map(Value::Float),
        ColumnType::Numeric => Value::numeric(text).map_err(|_| {
            format!(
                "`{text}` is not a numeric (digits with an optional sign, fraction and \
                 exponent, like -12.50 or 1e-18; or NaN, Infinity, -Infinity)"
            )
        }),
        ColumnType::Bool => parse_bool(text).map(Value::Bool).ok_or_else(|| {
            format!("`{text}` is not a bool (true/false, t/f, yes/no, y/n, on/off, 1/0)")
        }),
        ColumnType::Date => parse_date(text).map(|t| Value::Date(t.into())),
        ColumnType::Timestamp => parse_timestamp(text).map(|t| Value::Timestamp(t.into())),
        ColumnType::Timestamptz => parse_timestamptz(text).map(|t| Value::TimestampTz(t.into())),
        ColumnType::Json => Json::parse(text)
            .map(Value::Json)
            .map_err(|e| format!("not a JSON document ({e})")),
    }
}

/// `text` as an `f64`. A finite number too large or too small for 64 bits is an error, as
/// in PostgreSQL's `float8` (Rust's parser would silently make it an infinity or zero);
/// `inf`, `infinity` and `NaN` (any case, optional sign) are accepted as themselves.
fn parse_float(text: &str) -> Result<f64, String> {
    let f = text
        .parse::<f64>()
        .map_err(|_| format!("`{text}` is not a float"))?;
    let digits = text.trim_start_matches(['+', '-']);
    if digits.starts_with(|c: char| c.is_ascii_alphabetic()) {
        // inf, infinity, nan: asked for by name.
        return Ok(f);
    }
    let mantissa = digits.split(['e', 'E']).next().unwrap_or(digits);
    let nonzero = mantissa.bytes().any(|b| matches!(b, b'1'..=b'9'));
    if f.is_infinite() || (f == 0.0 && nonzero) {
        return Err(format!(
            "`{text}` is out of range for a float (64 bits: magnitudes from about 4.9e-324 \
             to 1.8e308)"
        ));
    }
    Ok(f)
}

fn parse_bool(text: &str) -> Option<bool> {
    const TRUE: [&str; 6] = ["true", "t", "yes", "y", "on", "1"];
    const FALSE: [&str; 6] = ["false", "f", "no", "n", "off", "0"];
    if TRUE.iter().any(|t| t.eq_ignore_ascii_case(text)) {
        Some(true)
    } else if FALSE.iter().any(|f| f.eq_ignore_ascii_case(text)) {
        Some(false)
    } else {
        None
    }
}

fn parse_date(text: &str) -> Result<String, String> {
    if matches!(text, "infinity" | "-infinity") {
        return Ok(text.to_owned());
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map(|d| d.format("%Y-%m-%d").to_string())
        .map_err(|_| format!("`{text}` is not a date (YYYY-MM-DD)"))
}

/// A fraction of a second with more digits than nanoseconds would be cut silently by the
/// parser: refuse it instead (`None` when `text` has no such fraction).
fn overlong_fraction(text: &str) -> Option<String> {
    let (_, after_dot) = text.split_once('.')?;
    let digits = after_dot.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 9).then(|| {
        format!("`{text}` has {digits} fractional digits; at most 9 (nanoseconds) are kept")
    })
}

/// A leap second (`23:59:60`) as PostgreSQL reads it: the first instant of the next minute
/// (`23:59:60.5` → `00:00:00.5` of the next day).
fn without_leap_second(t: NaiveDateTime) -> NaiveDateTime {
    if t.nanosecond() < 1_000_000_000 {
        return t;
    }
    t.with_nanosecond(t.nanosecond() - 1_000_000_000)
        .map_or(t, |t| t + chrono::TimeDelta::seconds(1))
}

fn parse_timestamp(text: &str) -> Result<String, String> {
    if matches!(text, "infinity" | "-infinity") {
        return Ok(text.to_owned());
    }
    if let Some(e) = overlong_fraction(text) {
        return Err(e);
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .map(|t| format_naive(&without_leap_second(t)))
        .ok_or_else(|| {
            format!(
                "`{text}` is not a timestamp without time zone (YYYY-MM-DD HH:MM:SS[.fraction]; \
                 a value with an offset needs the type timestamptz)"
            )
        })
}

fn parse_timestamptz(text: &str) -> Result<String, String> {
    if matches!(text, "infinity" | "-infinity") {
        return Ok(text.to_owned());
    }
    if let Some(e) = overlong_fraction(text) {
        return Err(e);
    }
    DateTime::parse_from_rfc3339(text)
        .ok()
        .or_else(|| {
            ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"]
                .iter()
                .find_map(|f| DateTime::parse_from_str(text, f).ok())
        })
        .map(|t| {
            let mut s = format_naive(&without_leap_second(t.with_timezone(&Utc).naive_utc()));
            s.push('Z');
            s
        })
        .ok_or_else(|| {
            format!(
                "`{text}` is not a timestamp with an offset (RFC 3339 like \
                 2024-02-29T12:45:00Z, or 2024-02-29 13:45:00+01); without an offset, declare \
                 the type timestamp"
            )
        })
}

/// `YYYY-MM-DDTHH:MM:SS` plus the fraction without trailing zeros (`.5`, `.123456`), as
/// PostgreSQL prints timestamps in JSON.
fn format_naive(t: &NaiveDateTime) -> String {
    let mut s = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = t.nanosecond() % 1_000_000_000;
    if nanos != 0 {
        let digits = format!("{nanos:09}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(ty: ColumnType, text: &str) -> Value {
        convert(ty, text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn numbers_keep_their_meaning() {
        assert_eq!(ok(ColumnType::Int, "-42"), Value::Int(-42));
        assert!(convert(ColumnType::Int, "9223372036854775808").is_err());
        assert!(convert(ColumnType::Int, "1.0").is_err());
        assert_eq!(ok(ColumnType::Float, "2.5e-3"), Value::Float(0.0025));
        assert_eq!(ok(ColumnType::Float, "5e-324"), Value::Float(5e-324));
        assert_eq!(ok(ColumnType::Float, "0e999"), Value::Float(0.0));
        assert_eq!(
            ok(ColumnType::Float, "-Infinity"),
            Value::Float(f64::NEG_INFINITY)
        );
        for out_of_range in ["1e309", "-1e400", "1e-400", "-0.0001e-330"] {
            let e = convert(ColumnType::Float, out_of_range).expect_err(out_of_range);
            assert!(e.contains("out of range"), "{e}");
        }
        assert_eq!(
            ok(ColumnType::Numeric, "12345678901234567890.123456789"),
            Value::numeric("12345678901234567890.123456789").expect("numeric")
        );
        assert_eq!(
            ok(ColumnType::Numeric, "1.10"),
            Value::numeric("1.10").expect("numeric")
        );
        assert!(convert(ColumnType::Numeric, "1,5").is_err());
        assert_eq!(ok(ColumnType::Bool, "YES"), Value::Bool(true));
        assert_eq!(ok(ColumnType::Bool, "0"), Value::Bool(false));
        assert!(convert(ColumnType::Bool, "maybe").is_err());
    }

    #[test]
    fn temporal_values_are_normalised() {
        assert_eq!(
            ok(ColumnType::Date, "2024-02-29"),
            Value::Date("2024-02-29".into())
        );
        assert!(convert(ColumnType::Date, "2023-02-29").is_err());
        // Years outside 1–9999: ISO 8601's expanded form, as the PostgreSQL paths give it.
        for (text, want) in [
            ("-4712-01-01", "-4712-01-01"),
            ("0000-12-31", "0000-12-31"),
            ("+10000-01-01", "+10000-01-01"),
        ] {
            assert_eq!(
                ok(ColumnType::Date, text),
                Value::Date(want.into()),
                "{text}"
            );
        }
        assert_eq!(
            ok(ColumnType::Timestamp, "-4712-01-01T00:00:00"),
            Value::Timestamp("-4712-01-01T00:00:00".into())
        );
        assert_eq!(
            ok(ColumnType::Timestamptz, "-4712-01-01T01:00:00+01:00"),
            Value::TimestampTz("-4712-01-01T00:00:00Z".into())
        );
        assert_eq!(
            ok(ColumnType::Timestamptz, "+10000-01-01 00:00:00Z"),
            Value::TimestampTz("+10000-01-01T00:00:00Z".into())
        );
        assert_eq!(
            ok(ColumnType::Timestamp, "2024-02-29 13:45:00.123450"),
            Value::Timestamp("2024-02-29T13:45:00.12345".into())
        );
        assert_eq!(
            ok(ColumnType::Timestamp, "2024-02-29T13:45:00"),
            Value::Timestamp("2024-02-29T13:45:00".into())
        );
        assert!(convert(ColumnType::Timestamp, "2024-02-29T13:45:00Z").is_err());
        assert_eq!(
            ok(ColumnType::Timestamptz, "2024-02-29T13:45:00.5+01:00"),
            Value::TimestampTz("2024-02-29T12:45:00.5Z".into())
        );
        assert_eq!(
            ok(ColumnType::Timestamptz, "2013-01-01T06:00:00Z"),
            Value::TimestampTz("2013-01-01T06:00:00Z".into())
        );
        assert_eq!(
            ok(ColumnType::Timestamptz, "2024-02-29 13:45:00-05"),
            Value::TimestampTz("2024-02-29T18:45:00Z".into())
        );
        assert!(convert(ColumnType::Timestamptz, "2024-02-29 13:45:00").is_err());
        // A leap second is the next minute's first instant, as PostgreSQL reads it.
        assert_eq!(
            ok(ColumnType::Timestamp, "2016-12-31 23:59:60"),
            Value::Timestamp("2017-01-01T00:00:00".into())
        );
        assert_eq!(
            ok(ColumnType::Timestamp, "2024-02-29 12:34:60.5"),
            Value::Timestamp("2024-02-29T12:35:00.5".into())
        );
        assert_eq!(
            ok(ColumnType::Timestamptz, "2016-12-31T23:59:60Z"),
            Value::TimestampTz("2017-01-01T00:00:00Z".into())
        );
        // Nine fractional digits are kept; a tenth would be cut, so it is refused.
        assert_eq!(
            ok(ColumnType::Timestamp, "2024-02-29 13:45:00.123456789"),
            Value::Timestamp("2024-02-29T13:45:00.123456789".into())
        );
        for ty in [ColumnType::Timestamp, ColumnType::Timestamptz] {
            let e = convert(ty, "2024-02-29 13:45:00.1234567891+00").expect_err("10 digits");
            assert!(e.contains("10 fractional digits"), "{e}");
        }
        match ok(ColumnType::Json, r#"{"a": [1, 2.50]}"#) {
            Value::Json(j) => assert_eq!(j.as_str(), r#"{"a":[1,2.50]}"#),
            other => panic!("expected json, got {other:?}"),
        }
    }
}
