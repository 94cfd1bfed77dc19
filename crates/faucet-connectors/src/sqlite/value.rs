//! faucet values as SQLite stores them, and the values refused because SQLite would change
//! them without a word.
//!
//! SQLite keeps one of five storage classes per value (NULL, INTEGER, REAL, TEXT, BLOB) and a
//! column only has an *affinity* (from its declared type, SQLite's "Determination Of Column
//! Affinity"): a TEXT value that looks like a number is stored as a number in an INTEGER,
//! REAL or NUMERIC column, a number in a TEXT column is stored as its text. This module
//! binds each value so that what is stored reads back as the value:
//!
//! | faucet value | stored as | `create_table` column |
//! |---|---|---|
//! | null | NULL | — |
//! | bool | INTEGER 0 / 1 | `INTEGER` |
//! | int | INTEGER | `INTEGER` |
//! | float | REAL; NaN as TEXT `NaN` (SQLite would store NULL); into a TEXT column its shortest round-trip text (SQLite's own rendering keeps 15 digits) | `REAL` |
//! | numeric (decimal) | TEXT, exactly as the source spelled it (`1.10`); into an INTEGER / REAL / NUMERIC column only when the number reads back as the same text, else a data error | `TEXT` |
//! | text, date, timestamp, timestamptz, time, timetz, interval | TEXT in faucet's form (docs/values.md: `2024-02-29T12:45:00.123456Z`, which SQLite's date functions read) | `TEXT` |
//! | json | TEXT, its compact JSON (SQLite's JSON functions read it) | `TEXT` |
//! | bytes | BLOB | `BLOB` |
//! | array, row (`before` / `after`) | TEXT, the JSON form | `TEXT` |
//!
//! A text (or decimal) into an INTEGER, REAL or NUMERIC column that SQLite would turn into
//! a number with another spelling (`007`, `1.50`, `+5`, ` 5`) is refused with a data error
//! naming the table, column and page row, never stored changed.

use std::borrow::Cow;

use faucet_core::value::json::write_value;
use faucet_core::{DataType, Value};

/// A column's affinity, from its declared type (SQLite's rules, in their order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Affinity {
    /// Declared type holds `INT`.
    Integer,
    /// Holds `CHAR`, `CLOB` or `TEXT`.
    Text,
    /// Holds `BLOB`, or no type at all: values are stored as given.
    Blob,
    /// Holds `REAL`, `FLOA` or `DOUB`.
    Real,
    /// Anything else (`NUMERIC`, `DECIMAL`, `BOOLEAN`, `DATE`, `JSON`, …).
    Numeric,
}

impl Affinity {
    /// The affinity of a column declared `declared` (`VARCHAR(10)`, `bigint`, empty).
    pub(crate) fn of(declared: &str) -> Self {
        let t = declared.to_ascii_uppercase();
        if t.contains("INT") {
            Self::Integer
        } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
            Self::Text
        } else if t.contains("BLOB") || t.trim().is_empty() {
            Self::Blob
        } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
            Self::Real
        } else {
            Self::Numeric
        }
    }

    /// Whether SQLite turns text that looks like a number into a number in such a column.
    fn converts_text(self) -> bool {
        matches!(self, Self::Integer | Self::Real | Self::Numeric)
    }
}

/// The column type `create_table` declares for a faucet type (the module's table).
pub(crate) fn column_type(data_type: &DataType) -> &'static str {
    match data_type {
        DataType::Bool | DataType::Int => "INTEGER",
        DataType::Float => "REAL",
        DataType::Bytes => "BLOB",
        _ => "TEXT",
    }
}

/// A value as it is bound to a statement parameter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bound<'v> {
    /// NULL.
    Null,
    /// INTEGER.
    Int(i64),
    /// REAL.
    Real(f64),
    /// TEXT.
    Text(Cow<'v, str>),
    /// BLOB.
    Blob(&'v [u8]),
}

/// `value` bound for a column of `affinity` (the module's table).
///
/// # Errors
/// Why the column would not keep it (the caller names table, column and row).
pub(crate) fn bind(value: &Value, affinity: Affinity) -> Result<Bound<'_>, String> {
    Ok(match value {
        Value::Null => Bound::Null,
        Value::Bool(b) => Bound::Int(i64::from(*b)),
        Value::Int(i) => Bound::Int(*i),
        Value::Float(f) if f.is_nan() => Bound::Text(Cow::Borrowed("NaN")),
        Value::Float(f) if affinity == Affinity::Text && f.is_finite() => {
            Bound::Text(Cow::Owned(format!("{f:?}")))
        }
        Value::Float(f) => Bound::Real(*f),
        Value::Numeric(t) => kept_text(t, affinity, "decimal")?,
        Value::Text(t) => kept_text(t, affinity, "text")?,
        Value::Date(t)
        | Value::Timestamp(t)
        | Value::TimestampTz(t)
        | Value::Time(t)
        | Value::TimeTz(t)
        | Value::Interval(t) => kept_text(t, affinity, "text")?,
        Value::Json(j) => kept_text(j.as_str(), affinity, "json")?,
        Value::Bytes(b) => Bound::Blob(b),
        // Arrays, nested rows and any later kind: the JSON form.
        _ => {
            let mut out = Vec::new();
            write_value(&mut out, value);
            Bound::Text(Cow::Owned(String::from_utf8_lossy(&out).into_owned()))
        }
    })
}

/// `text` bound as TEXT, unless the column would store it as a number that reads back
/// spelled otherwise.
fn kept_text<'v>(text: &'v str, affinity: Affinity, what: &str) -> Result<Bound<'v>, String> {
    if affinity.converts_text()
        && let Some(stored) = as_number(text)
        && stored != text
    {
        return Err(format!(
            "the {what} {text:?} would be stored as the number {stored} (the column's type \
             gives it {affinity:?} affinity, and SQLite converts text that looks like a \
             number), which reads back spelled otherwise; declare the column TEXT (or \
             without a type) to keep the value exactly"
        ));
    }
    Ok(Bound::Text(Cow::Borrowed(text)))
}

/// How SQLite renders the number it would store for `text`, when `text` is a number
/// literal (optional spaces and sign, digits, a point, an exponent); `None` for any other
/// text, which is kept as text.
fn as_number(text: &str) -> Option<String> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let literal = !t.is_empty()
        && t.bytes().any(|b| b.is_ascii_digit())
        && t.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'));
    if !literal {
        return None;
    }
    if let Ok(i) = t.parse::<i64>() {
        return Some(i.to_string());
    }
    let f: f64 = t.parse().ok()?;
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        // An integral REAL is stored as an INTEGER.
        return Some(format!("{}", f as i64));
    }
    Some(format!("{f:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_follows_sqlites_rules() {
        for (t, a) in [
            ("INTEGER", Affinity::Integer),
            ("bigint", Affinity::Integer),
            ("VARCHAR(10)", Affinity::Text),
            ("TEXT", Affinity::Text),
            ("", Affinity::Blob),
            ("BLOB", Affinity::Blob),
            ("double precision", Affinity::Real),
            ("DECIMAL(10,2)", Affinity::Numeric),
            ("DATETIME", Affinity::Numeric),
            ("JSON", Affinity::Numeric),
        ] {
            assert_eq!(Affinity::of(t), a, "{t}");
        }
    }

    #[test]
    fn values_are_kept_or_refused() {
        let text = |s: &str| Bound::Text(Cow::Owned(s.to_owned()));
        assert_eq!(
            bind(&Value::Bool(true), Affinity::Integer),
            Ok(Bound::Int(1))
        );
        assert_eq!(
            bind(&Value::Float(f64::NAN), Affinity::Real),
            Ok(text("NaN"))
        );
        assert_eq!(
            bind(&Value::Float(0.1 + 0.2), Affinity::Text),
            Ok(text("0.30000000000000004"))
        );
        assert_eq!(
            bind(&Value::Float(f64::INFINITY), Affinity::Real),
            Ok(Bound::Real(f64::INFINITY))
        );
        // Decimals stay exact: as text into TEXT / untyped columns, as a number only
        // when the number reads back as the same text.
        let dec = |s: &str| Value::Numeric(s.into());
        assert_eq!(bind(&dec("1.10"), Affinity::Text), Ok(text("1.10")));
        assert_eq!(bind(&dec("1.10"), Affinity::Blob), Ok(text("1.10")));
        assert_eq!(bind(&dec("1.5"), Affinity::Numeric), Ok(text("1.5")));
        assert_eq!(bind(&dec("12"), Affinity::Integer), Ok(text("12")));
        let err = bind(&dec("1.10"), Affinity::Numeric).expect_err("scale lost");
        assert!(err.contains("1.1") && err.contains("TEXT"), "{err}");
        for lossy in ["007", "+5", " 5", "1e3", "12345678901234567890"] {
            assert!(
                bind(&Value::Text(lossy.into()), Affinity::Integer).is_err(),
                "{lossy}"
            );
        }
        for kept in ["abc", "2024-02-29", "13:45:00", "-7", "NaN", "1-2"] {
            assert!(
                bind(&Value::Text(kept.into()), Affinity::Integer).is_ok(),
                "{kept}"
            );
        }
        assert_eq!(
            bind(&Value::Bytes(vec![0, 1]), Affinity::Text),
            Ok(Bound::Blob(&[0, 1]))
        );
        assert_eq!(column_type(&DataType::Numeric), "TEXT");
        assert_eq!(column_type(&DataType::Bool), "INTEGER");
    }
}
