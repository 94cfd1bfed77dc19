//! The faucet value → BSON mapping: the inverse of [`super::value`], the one definition the
//! `mongodb` sink writes documents with (docs/values.md, "MongoDB").
//!
//! | faucet value | BSON | note |
//! |---|---|---|
//! | `Null` | Null | |
//! | `Bool` | Boolean | |
//! | `Int` | Int64 | faucet has one integer type, so every integer is an Int64 (a MongoDB Int32 read by `mongodb-cdc` comes back as Int64; queries compare numbers by value) |
//! | `Float` | Double | the exact double; NaN and ±Infinity too |
//! | `Numeric` | Decimal128, exactly its digits (`1.10` keeps its trailing zero) | more than 34 significant digits, or an exponent outside Decimal128's range, is a data error (never rounded, never through f64); `NaN`, `Infinity`, `-Infinity` are Decimal128's own |
//! | `Text` | String | |
//! | `Bytes` | Binary, subtype 0 | every byte |
//! | `Json` | the JSON value as BSON: objects as embedded documents (key order kept), arrays as arrays, strings, booleans, null; numbers below | an object whose first key starts with `$` is read as MongoDB Extended JSON (`{"$timestamp":…}`, `{"$binary":…}`, `{"$regularExpression":…}`, `{"$numberDecimal":"1.10"}`), so the forms `mongodb-cdc` gives such values go back as their BSON types |
//! | JSON numbers | an integer that fits 64 bits: Int64; a number whose double prints as the same text (`0.5`, `3.25`): Double; else Decimal128 with its exact digits (`1.10`, `1e3`, `12345678901234567890`) | one that fits none exactly is a data error |
//! | `TimestampTz`, `Timestamp` | Date (milliseconds since the epoch, UTC) | a `timestamp` without offset is taken as UTC; years outside 0000–9999 in faucet's expanded form (`+10000-…`, `-4712-…`) are read; `infinity` is a data error |
//! | `Date` | Date at 00:00:00 UTC | `infinity` is a data error |
//! | sub-millisecond digits | refused by default (`sub_millisecond: fail`: a data error naming the field and row); `sub_millisecond: truncate` drops them (toward the earlier instant) | a BSON Date holds milliseconds |
//! | `Time`, `TimeTz`, `Interval` | String, faucet's text (`13:45:00`, `P1Y2M`, `-838:59:59.000000`) | BSON has no such types |
//! | `Array` | Array, elements by these rules | |
//! | `Row` (nested row, a change record's `before` / `after`) | embedded Document, fields in the row's order | a field name holding U+0000 is a data error (BSON names are C strings) |
//!
//! Errors are messages for people; the sink wraps them in a [`faucet_core::FaucetError::Data`]
//! naming the collection, the page row and the field path (`after.created_at`).

use std::str::FromStr;

use faucet_core::value::{Row, Value};
use mongodb::bson::{Binary, Bson, DateTime, Decimal128, Document, spec::BinarySubtype};
use serde::Deserialize;

/// What a timestamp with digits beyond the millisecond becomes (`sub_millisecond`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubMillisecond {
    /// A data error naming the field and row (the default: nothing is rounded silently).
    #[default]
    Fail,
    /// The digits after the millisecond are dropped (toward the earlier instant).
    Truncate,
}

/// A failed conversion: the field path inside the value (`created_at`, `after.tags[2]`),
/// and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BsonError {
    /// Where in the value, dotted (`after.price`); empty for the value itself.
    pub path: String,
    /// Why it has no exact BSON form, and the fix.
    pub message: String,
}

impl BsonError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            path: String::new(),
            message: message.into(),
        }
    }

    /// The same error one level out: `outer` (a field name, or `[i]`) put before its path.
    pub fn under(mut self, outer: &str) -> Self {
        self.path = match (self.path.is_empty(), self.path.starts_with('[')) {
            (true, _) => outer.to_owned(),
            (false, true) => format!("{outer}{}", self.path),
            (false, false) => format!("{outer}.{}", self.path),
        };
        self
    }
}

/// One faucet value as BSON, by the module's table.
///
/// # Errors
/// [`BsonError`] for a value with no exact BSON form (see the table).
pub fn bson(value: &Value, sub_ms: SubMillisecond) -> Result<Bson, BsonError> {
    Ok(match value {
        Value::Null => Bson::Null,
        Value::Bool(b) => Bson::Boolean(*b),
        Value::Int(i) => Bson::Int64(*i),
        Value::Float(f) => Bson::Double(*f),
        Value::Numeric(text) => Bson::Decimal128(decimal(text).map_err(BsonError::new)?),
        Value::Text(t) => Bson::String(t.to_string()),
        Value::Bytes(b) => Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes: b.clone(),
        }),
        Value::Json(j) => {
            let tree: serde_json::Value = serde_json::from_str(j.as_str())
                .map_err(|e| BsonError::new(format!("the JSON value does not parse ({e})")))?;
            json(tree)?
        }
        Value::TimestampTz(t) | Value::Timestamp(t) => Bson::DateTime(DateTime::from_millis(
            millis(t, sub_ms).map_err(BsonError::new)?,
        )),
        Value::Date(d) if d.ends_with("infinity") => {
            return Err(BsonError::new(format!(
                "the date `{d}` has no BSON form (a Date is milliseconds since 1970)"
            )));
        }
        Value::Date(d) => Bson::DateTime(DateTime::from_millis(
            millis(&format!("{d}T00:00:00"), sub_ms).map_err(BsonError::new)?,
        )),
        Value::Time(t) | Value::TimeTz(t) | Value::Interval(t) => Bson::String(t.to_string()),
        Value::Array(items) => Bson::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| bson(v, sub_ms).map_err(|e| e.under(&format!("[{i}]"))))
                .collect::<Result<_, _>>()?,
        ),
        Value::Row(row) => Bson::Document(document(row, sub_ms)?),
        other => {
            return Err(BsonError::new(format!(
                "a {:?} value has no BSON form in this build",
                other.data_type()
            )));
        }
    })
}

/// A nested row as a document, fields in the row's order.
///
/// # Errors
/// As [`bson`], the path naming the field.
pub fn document(row: &Row, sub_ms: SubMillisecond) -> Result<Document, BsonError> {
    let mut doc = Document::new();
    for (field, value) in row.schema.fields().iter().zip(row.values.iter()) {
        let name = field.name.as_str();
        check_name(name).map_err(|e| e.under(name))?;
        doc.insert(name, bson(value, sub_ms).map_err(|e| e.under(name))?);
    }
    Ok(doc)
}

/// Refuses a field name BSON cannot hold (U+0000: names are C strings).
///
/// # Errors
/// [`BsonError`] saying why.
pub fn check_name(name: &str) -> Result<(), BsonError> {
    if name.contains('\0') {
        return Err(BsonError::new(
            "the field name holds U+0000, which a BSON field name cannot (a C string)",
        ));
    }
    Ok(())
}

/// A JSON tree as BSON (module table: numbers exact, `$`-objects as Extended JSON).
fn json(tree: serde_json::Value) -> Result<Bson, BsonError> {
    Ok(match tree {
        serde_json::Value::Null => Bson::Null,
        serde_json::Value::Bool(b) => Bson::Boolean(b),
        serde_json::Value::String(s) => Bson::String(s),
        serde_json::Value::Number(n) => json_number(&n.to_string()).map_err(BsonError::new)?,
        serde_json::Value::Array(items) => Bson::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| json(v).map_err(|e| e.under(&format!("[{i}]"))))
                .collect::<Result<_, _>>()?,
        ),
        serde_json::Value::Object(map) => {
            // An Extended JSON wrapper; otherwise (also a document whose first key starts with
            // `$` but is no wrapper) an embedded document.
            if map.keys().next().is_some_and(|k| k.starts_with('$'))
                && let Ok(b) = Bson::try_from(serde_json::Value::Object(map.clone()))
                && !matches!(b, Bson::Document(_))
            {
                return Ok(b);
            }
            let mut doc = Document::new();
            for (k, v) in map {
                check_name(&k).map_err(|e| e.under(&k))?;
                let value = json(v).map_err(|e| e.under(&k))?;
                doc.insert(k, value);
            }
            Bson::Document(doc)
        }
    })
}

/// A JSON number's text as BSON: Int64, else Double when the double prints the same, else an
/// exact Decimal128.
fn json_number(text: &str) -> Result<Bson, String> {
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Bson::Int64(i));
    }
    if let Ok(f) = text.parse::<f64>()
        && f.is_finite()
        && f.to_string() == text
    {
        return Ok(Bson::Double(f));
    }
    decimal(text).map(Bson::Decimal128).map_err(|e| {
        format!("the JSON number {text} fits neither a 64-bit integer, a double nor a Decimal128 exactly: {e}")
    })
}

/// The most significant digits a Decimal128 holds.
const DECIMAL128_DIGITS: usize = 34;
/// The smallest and largest exponent of a Decimal128's coefficient.
const DECIMAL128_EXPONENT: std::ops::RangeInclusive<i64> = -6176..=6111;

/// `text` (faucet's numeric form: `-?digits(.digits)?([eE][+-]?digits)?`, `NaN`, `Infinity`,
/// `-Infinity`) as a Decimal128 holding exactly those digits.
///
/// # Errors
/// A message when it has more than 34 significant digits or an exponent out of range (the
/// `bson` crate would round or clamp it).
pub fn decimal(text: &str) -> Result<Decimal128, String> {
    let refuse = |why: &str| {
        format!(
            "the decimal {text} {why}, which a Decimal128 cannot hold exactly (34 significant \
             digits, exponents -6176 to 6111); faucet does not round it: narrow the source \
             column or cast it to text"
        )
    };
    if !matches!(text, "NaN" | "Infinity" | "-Infinity") {
        let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
        let (mantissa, exp) = match unsigned.find(['e', 'E']) {
            Some(at) => (&unsigned[..at], &unsigned[at + 1..]),
            None => (unsigned, "0"),
        };
        let exp: i64 = exp
            .parse()
            .map_err(|_| refuse("has an exponent out of range"))?;
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return Err(format!("`{text}` is not a decimal number"));
        }
        let digits = format!("{int}{frac}");
        let significant = digits.trim_start_matches('0').len();
        let frac_len = i64::try_from(frac.len()).unwrap_or(i64::MAX);
        let exponent = exp.saturating_sub(frac_len);
        if significant > DECIMAL128_DIGITS {
            return Err(refuse(&format!("has {significant} significant digits")));
        }
        // Past the largest exponent the coefficient takes trailing zeros (exact) while they
        // fit in 34 digits; below the smallest it would be rounded.
        let room = i64::try_from(DECIMAL128_DIGITS - significant.max(1)).unwrap_or(0);
        if exponent < *DECIMAL128_EXPONENT.start()
            || exponent > DECIMAL128_EXPONENT.end().saturating_add(room)
        {
            return Err(refuse("has an exponent out of range"));
        }
    }
    Decimal128::from_str(text).map_err(|e| refuse(&format!("does not parse ({e:?})")))
}

/// Milliseconds since the Unix epoch of faucet's timestamp text
/// (`[+-]YYYY…-MM-DDTHH:MM:SS[.f…][Z|±HH:MM]`; without an offset, UTC).
fn millis(text: &str, sub_ms: SubMillisecond) -> Result<i64, String> {
    let bad = || {
        format!(
            "`{text}` is not a timestamp a BSON Date can hold (milliseconds since 1970 in \
             UTC; `infinity` has no BSON form)"
        )
    };
    let (sign, rest) = match text.as_bytes().first() {
        Some(b'-') => (-1, &text[1..]),
        Some(b'+') => (1, &text[1..]),
        _ => (1, text),
    };
    let (date, time) = rest.split_once('T').ok_or_else(bad)?;
    let mut date_parts = date.splitn(3, '-');
    let year: i64 = date_parts
        .next()
        .and_then(|y| y.parse().ok())
        .ok_or_else(bad)?;
    let month: i64 = date_parts
        .next()
        .and_then(|m| m.parse().ok())
        .ok_or_else(bad)?;
    let day: i64 = date_parts
        .next()
        .and_then(|d| d.parse().ok())
        .ok_or_else(bad)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    // The offset: `Z`, `±HH:MM`, or none (UTC).
    let (clock, offset_minutes) = if let Some(c) = time.strip_suffix('Z') {
        (c, 0)
    } else if time.len() > 6 && matches!(time.as_bytes()[time.len() - 6], b'+' | b'-') {
        let (c, off) = time.split_at(time.len() - 6);
        let (h, m) = off[1..].split_once(':').ok_or_else(bad)?;
        let minutes =
            h.parse::<i64>().map_err(|_| bad())? * 60 + m.parse::<i64>().map_err(|_| bad())?;
        (
            c,
            if off.starts_with('-') {
                -minutes
            } else {
                minutes
            },
        )
    } else {
        (time, 0)
    };
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut hms_parts = hms.splitn(3, ':');
    let mut next = || -> Result<i64, String> {
        hms_parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(bad)
    };
    let (h, m, s) = (next()?, next()?, next()?);
    if h > 24 || m > 59 || s > 60 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let (ms_digits, beyond) = fraction.split_at(fraction.len().min(3));
    if sub_ms == SubMillisecond::Fail && beyond.bytes().any(|b| b != b'0') {
        return Err(format!(
            "`{text}` has digits beyond the millisecond, which a BSON Date cannot hold; \
             faucet does not drop them silently: set the sink's `sub_millisecond: truncate` \
             to drop them, or round the source column to milliseconds (PostgreSQL \
             `timestamptz(3)`)"
        ));
    }
    let ms: i64 = format!("{ms_digits:0<3}").parse().map_err(|_| bad())?;
    let days = days_from_civil(sign * year, month, day);
    let seconds = days
        .checked_mul(86_400)
        .and_then(|d| d.checked_add(h * 3600 + m * 60 + s - offset_minutes * 60))
        .ok_or_else(bad)?;
    seconds
        .checked_mul(1000)
        .and_then(|x| x.checked_add(ms))
        .ok_or_else(bad)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`; the inverse of `value.rs`'s `civil_from_days`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mongodb::value;

    #[test]
    fn timestamps_round_trip_through_the_read_mapping() {
        for ms in [
            0_i64,
            1_709_210_700_123,
            -14_182_940_000,
            253_402_300_800_000,
            -62_198_755_200_001,
            -210_866_803_200_000,
        ] {
            let text = value::date_text(ms);
            assert_eq!(millis(&text, SubMillisecond::Fail), Ok(ms), "{text}");
        }
        assert_eq!(
            millis("2024-02-29T13:45:00.123+01:00", SubMillisecond::Fail),
            millis("2024-02-29T12:45:00.123Z", SubMillisecond::Fail)
        );
        assert_eq!(
            millis("2024-02-29T12:45:00", SubMillisecond::Fail),
            Ok(1_709_210_700_000)
        );
    }

    #[test]
    fn sub_milliseconds_are_refused_or_truncated_as_configured() {
        let t = "2024-02-29T12:45:00.123456Z";
        let e = millis(t, SubMillisecond::Fail).expect_err("refused");
        assert!(e.contains("sub_millisecond: truncate"), "{e}");
        assert_eq!(millis(t, SubMillisecond::Truncate), Ok(1_709_210_700_123));
        assert_eq!(
            millis("2024-02-29T12:45:00.123000Z", SubMillisecond::Fail),
            Ok(1_709_210_700_123)
        );
        assert_eq!(
            millis("1969-12-31T23:59:59.9999Z", SubMillisecond::Truncate),
            Ok(-1)
        );
        assert!(millis("infinity", SubMillisecond::Fail).is_err());
    }

    #[test]
    fn decimals_are_exact_or_refused() {
        for text in [
            "1.10",
            "-0",
            "0.0001",
            "1e3",
            "NaN",
            "Infinity",
            "-Infinity",
        ] {
            let d = decimal(text).expect(text);
            assert_eq!(
                value::value(Bson::Decimal128(d)),
                Value::numeric(&d.to_string()).expect("numeric"),
                "{text}"
            );
        }
        assert_eq!(decimal("1.10").expect("d").to_string(), "1.10");
        assert_eq!(
            decimal("1234567890123456789012345678901234").map(|d| d.to_string()),
            Ok("1234567890123456789012345678901234".to_owned())
        );
        assert!(decimal("12345678901234567890123456789012345").is_err());
        assert!(decimal("1e-7000").is_err());
        assert!(decimal("1e99999").is_err());
    }

    #[test]
    fn json_numbers_keep_their_value() {
        assert_eq!(json_number("5"), Ok(Bson::Int64(5)));
        assert_eq!(json_number("0.5"), Ok(Bson::Double(0.5)));
        assert!(matches!(json_number("1.10"), Ok(Bson::Decimal128(_))));
        assert!(matches!(
            json_number("12345678901234567890"),
            Ok(Bson::Decimal128(_))
        ));
    }

    #[test]
    fn extended_json_goes_back_to_its_type() {
        let ts = serde_json::json!({"$timestamp": {"t": 1_700_000_000, "i": 7}});
        assert_eq!(
            json(ts),
            Ok(Bson::Timestamp(mongodb::bson::Timestamp {
                time: 1_700_000_000,
                increment: 7
            }))
        );
        let plain = serde_json::json!({"a": [1, "x", null]});
        assert!(matches!(json(plain), Ok(Bson::Document(_))));
    }
}
