//! faucet values → bound parameters of the binary protocol, by the target column's declared
//! type (README, "mysql sink"). Nothing is coerced here: a value MySQL cannot hold (NaN, an
//! infinite date, an ISO 8601 duration into a TIME column) is an error for the caller to
//! name by row and column; a value the column cannot hold (out of range, too long, an
//! invalid date) is refused by the server under the session's strict `sql_mode`.

use mysql_async::Value as MyValue;

use faucet_core::Value;
use faucet_core::value::json::write_value;

/// Whether `text` is MySQL's TIME text, `[-]H…H:MM:SS[.f…]` (1 to 6 fraction digits): the
/// form a `Value::Interval` read from MySQL holds, which a TIME column takes as is.
pub(crate) fn is_mysql_time(text: &str) -> bool {
    let t = text.strip_prefix('-').unwrap_or(text);
    let (clock, fraction) = match t.split_once('.') {
        Some((c, f)) => (c, Some(f)),
        None => (t, None),
    };
    let mut parts = clock.split(':');
    let (Some(h), Some(m), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    digits(h)
        && m.len() == 2
        && s.len() == 2
        && digits(m)
        && digits(s)
        && fraction.is_none_or(|f| (1..=6).contains(&f.len()) && digits(f))
}

/// Whether `column_type` (DATA_TYPE, lower case) holds text, so a value's own text form is
/// written rather than a date or time literal.
fn is_text_column(column_type: &str) -> bool {
    matches!(
        column_type,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set"
    )
}

/// A date-time text in MySQL's literal form: `T` → space, a trailing `Z` dropped (the value
/// is in UTC, and every session of this sink runs with `time_zone = '+00:00'`).
fn datetime_literal(text: &str) -> String {
    let t = text.strip_suffix('Z').unwrap_or(text);
    t.replacen('T', " ", 1)
}

/// Whether a date or date-time text has a year MySQL cannot hold (PostgreSQL's `infinity`,
/// an ISO 8601 expanded year such as `-0044` or `+10000`).
fn out_of_mysql_years(text: &str) -> bool {
    text.starts_with(['+', '-']) || text.ends_with("infinity")
}

/// Whether `column_type` (DATA_TYPE) is an integer type.
fn is_integer_column(column_type: &str) -> bool {
    matches!(
        column_type,
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint"
    )
}

/// Why the server would store `value` in a `column_type` column as something else without a
/// warning (MariaDB converts bound parameters silently: `1.5` into INT is 2, `"1e3"` is
/// 1000, a number into ENUM/SET is a member's index, into YEAR `5` is 2005, into DATE a
/// packed date), or `None` when it would store the value itself. The strict `sql_mode` and
/// the warning check catch the rest (out of range, too long, invalid dates, DECIMAL
/// rounding).
fn coerced(value: &Value, column_type: &str) -> Option<String> {
    let integral_text = |t: &str| {
        let d = t.strip_prefix('-').unwrap_or(t);
        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
    };
    if is_integer_column(column_type) {
        let why = match value {
            Value::Float(f) if f.fract() != 0.0 => Some(format!("{f}")),
            Value::Numeric(n) if !integral_text(n) => Some(n.to_string()),
            Value::Text(t) if !integral_text(t) => Some(format!("text `{t}`")),
            _ => None,
        };
        return why.map(|v| {
            format!(
                "{v} is not an integer, and the {column_type} column would round or convert \
                 it silently; write it into a DECIMAL, DOUBLE or text column"
            )
        });
    }
    let number = matches!(value, Value::Int(_) | Value::Float(_) | Value::Numeric(_));
    match column_type {
        "enum" | "set" if number => Some(format!(
            "a number into an {} column is taken as a member's index, not its text; give the \
             member's text",
            column_type.to_uppercase()
        )),
        "year" if matches!(value, Value::Int(1..=99)) => Some(
            "a two-digit number into a YEAR column is read as 1970–2069 (5 is 2005); give the \
             full year"
                .to_owned(),
        ),
        "date" | "datetime" | "timestamp" if number => Some(format!(
            "a number into a {} column is read as a packed date (20240101); give a date text",
            column_type.to_uppercase()
        )),
        _ => None,
    }
}

/// The parameter for `value` written into a column of type `column_type` (DATA_TYPE, lower
/// case). `json` is scratch space for arrays and nested rows.
///
/// # Errors
/// What is wrong with the value, for the caller to name row and column by.
pub(crate) fn param(
    value: &Value,
    column_type: &str,
    json: &mut Vec<u8>,
) -> Result<MyValue, String> {
    let text = is_text_column(column_type);
    if let Some(why) = coerced(value, column_type) {
        return Err(why);
    }
    Ok(match value {
        Value::Null => MyValue::NULL,
        Value::Bool(b) => MyValue::Int(i64::from(*b)),
        Value::Int(i) => MyValue::Int(*i),
        Value::Float(f) if !f.is_finite() => {
            return Err(format!(
                "{f} has no MySQL form (MySQL stores no NaN or infinity)"
            ));
        }
        Value::Float(f) => MyValue::Double(*f),
        Value::Numeric(n) if matches!(&**n, "NaN" | "Infinity" | "-Infinity") => {
            return Err(format!(
                "numeric {n} has no MySQL form (DECIMAL holds no NaN or infinity)"
            ));
        }
        Value::Numeric(n) => MyValue::Bytes(n.as_bytes().to_vec()),
        Value::Text(t) => MyValue::Bytes(t.as_bytes().to_vec()),
        Value::Bytes(b) => MyValue::Bytes(b.clone()),
        Value::Json(j) => MyValue::Bytes(j.as_str().as_bytes().to_vec()),
        Value::Date(d) | Value::Timestamp(d) | Value::TimestampTz(d)
            if !text && out_of_mysql_years(d) =>
        {
            return Err(format!(
                "`{d}` is outside the years MySQL can store (1000 to 9999 for DATE and DATETIME)"
            ));
        }
        Value::Date(d) => MyValue::Bytes(d.as_bytes().to_vec()),
        Value::Timestamp(t) | Value::TimestampTz(t) if !text => {
            MyValue::Bytes(datetime_literal(t).into_bytes())
        }
        Value::Interval(i) if column_type == "time" && !is_mysql_time(i) => {
            return Err(format!(
                "interval `{i}` is an ISO 8601 duration, which a TIME column cannot hold \
                 (TIME takes MySQL's `[-]H:MM:SS[.ffffff]`, as read from a MySQL source); \
                 write it into a VARCHAR column instead"
            ));
        }
        Value::Timestamp(s)
        | Value::TimestampTz(s)
        | Value::Time(s)
        | Value::TimeTz(s)
        | Value::Interval(s) => MyValue::Bytes(s.as_bytes().to_vec()),
        Value::Array(_) | Value::Row(_) => {
            json.clear();
            write_value(json, value);
            MyValue::Bytes(json.clone())
        }
        other => {
            return Err(format!(
                "{other:?} has no MySQL form in this version of faucet"
            ));
        }
    })
}

/// An estimate of the bytes `value` takes in an `COM_STMT_EXECUTE` packet, to keep a
/// statement under `max_allowed_packet`.
pub(crate) fn wire_size(value: &MyValue) -> usize {
    match value {
        MyValue::Bytes(b) => b.len() + 9,
        _ => 12,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_time_text_is_recognised() {
        for ok in ["00:00:00", "-838:59:59.000000", "12:30:00.5", "1000:00:00"] {
            assert!(is_mysql_time(ok), "{ok}");
        }
        for bad in [
            "P1D",
            "PT1H",
            "1:2:3",
            "12:30",
            "12:30:00.1234567",
            "-",
            "a:bc:de",
        ] {
            assert!(!is_mysql_time(bad), "{bad}");
        }
    }

    #[test]
    fn values_are_written_in_mysql_literal_form_or_refused() {
        let mut s = Vec::new();
        let bytes = |v: MyValue| match v {
            MyValue::Bytes(b) => String::from_utf8(b).expect("utf8"),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            bytes(
                param(
                    &Value::TimestampTz("2024-02-29T12:45:00.123456Z".into()),
                    "datetime",
                    &mut s
                )
                .expect("ok")
            ),
            "2024-02-29 12:45:00.123456"
        );
        assert_eq!(
            bytes(
                param(
                    &Value::TimestampTz("2024-02-29T12:45:00Z".into()),
                    "varchar",
                    &mut s
                )
                .expect("ok")
            ),
            "2024-02-29T12:45:00Z"
        );
        for (v, t) in [
            (Value::Float(1.5), "int"),
            (Value::Numeric("2.5".into()), "bigint"),
            (Value::Numeric("1e3".into()), "int"),
            (Value::Text("1.5".into()), "int"),
            (Value::Text(" 12".into()), "smallint"),
            (Value::Int(2), "enum"),
            (Value::Int(3), "set"),
            (Value::Int(5), "year"),
            (Value::Int(20240101), "date"),
        ] {
            let e = param(&v, t, &mut s).expect_err("a silent conversion is refused");
            assert!(!e.is_empty(), "{v:?} into {t}");
        }
        for (v, t) in [
            (Value::Float(2.0), "int"),
            (Value::Numeric("-42".into()), "bigint"),
            (Value::Text("7".into()), "int"),
            (Value::Int(2024), "year"),
            (Value::Int(0), "year"),
            (Value::Text("b".into()), "enum"),
        ] {
            assert!(param(&v, t, &mut s).is_ok(), "{v:?} into {t}");
        }
        assert!(param(&Value::Interval("P1D".into()), "time", &mut s).is_err());
        assert!(param(&Value::Interval("P1D".into()), "varchar", &mut s).is_ok());
        assert!(param(&Value::Date("infinity".into()), "date", &mut s).is_err());
        assert!(param(&Value::Float(f64::NAN), "double", &mut s).is_err());
        assert!(param(&Value::Numeric("NaN".into()), "decimal", &mut s).is_err());
        assert_eq!(
            bytes(
                param(
                    &Value::Array(vec![Value::Int(1), Value::Null]),
                    "json",
                    &mut s
                )
                .expect("ok")
            ),
            "[1,null]"
        );
    }
}
