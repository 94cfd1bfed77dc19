//! U+0000 (NUL) in values bound for PostgreSQL, which stores it nowhere: `text` (and every
//! character type) refuses the byte 0x00, `jsonb` refuses the escape `\u0000`. The sink
//! finds it in a value before the value is sent, so the error can name the column and the
//! record instead of the server's "invalid byte sequence for encoding "UTF8": 0x00", and
//! applies the `nul_bytes` policy ([`NulBytes`]).

use serde::Deserialize;

use faucet_core::{Json, Value};

/// What the `postgres` sink does with U+0000 in a value (`sink.config.nul_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NulBytes {
    /// Fail the page with a [`faucet_core::FaucetError::Data`] naming the column, the record
    /// (its key, or its source position) and the fix (the default: nothing is changed
    /// silently).
    #[default]
    Fail,
    /// Remove every U+0000 from the value (in text, and in the strings of JSON values).
    Strip,
    /// Replace every U+0000 by U+FFFD (the replacement character).
    Replace,
}

/// Whether `value` holds a U+0000 anywhere: a text-like value's character, a JSON value's
/// `\u0000` escape, or either inside an array or a nested row.
pub(crate) fn holds_nul(value: &Value) -> bool {
    match value {
        Value::Text(s) => s.contains('\0'),
        Value::Date(s)
        | Value::Timestamp(s)
        | Value::TimestampTz(s)
        | Value::Time(s)
        | Value::TimeTz(s)
        | Value::Interval(s) => s.contains('\0'),
        Value::Json(j) => json_has_nul(j.as_str()),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Row(row) => row.values.iter().any(holds_nul),
        _ => false,
    }
}

/// `value` with every U+0000 removed ([`NulBytes::Strip`]) or replaced by U+FFFD
/// ([`NulBytes::Replace`]); for [`NulBytes::Fail`], `value` as it is.
pub(crate) fn cleaned(value: &Value, policy: NulBytes) -> Value {
    let (text, escape) = match policy {
        NulBytes::Fail => return value.clone(),
        NulBytes::Strip => ("", ""),
        NulBytes::Replace => ("\u{fffd}", "\\ufffd"),
    };
    let fix = |s: &str| s.replace('\0', text);
    match value {
        Value::Text(s) => Value::Text(fix(s).into()),
        Value::Date(s) => Value::Date(fix(s).into()),
        Value::Timestamp(s) => Value::Timestamp(fix(s).into()),
        Value::TimestampTz(s) => Value::TimestampTz(fix(s).into()),
        Value::Time(s) => Value::Time(fix(s).into()),
        Value::TimeTz(s) => Value::TimeTz(fix(s).into()),
        Value::Interval(s) => Value::Interval(fix(s).into()),
        Value::Json(j) => Value::Json(
            Json::parse(&replace_json_nul(j.as_str(), escape)).unwrap_or_else(|_| j.clone()),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| cleaned(v, policy)).collect()),
        Value::Row(row) => Value::row(
            std::sync::Arc::clone(&row.schema),
            row.values.iter().map(|v| cleaned(v, policy)).collect(),
        ),
        other => other.clone(),
    }
}

/// Whether the JSON text `json` holds the escape `\u0000` (an escaped backslash followed
/// by `u0000` is not one).
fn json_has_nul(json: &str) -> bool {
    nul_escapes(json).next().is_some()
}

/// The byte offsets of the `\u0000` escapes in the JSON text `json`.
fn nul_escapes(json: &str) -> impl Iterator<Item = usize> + '_ {
    let b = json.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < b.len() {
            // Most JSON holds no escape at all: to the next backslash at memchr's speed.
            let Some(next) = memchr::memchr(b'\\', &b[i..]) else {
                i = b.len();
                break;
            };
            let at = i + next;
            // Every escape is a backslash and one character; `\u` has four hex digits more.
            i = at + 2;
            if b.get(at + 1) == Some(&b'u') {
                let digits = b.get(at + 2..at + 6);
                i = at + 6;
                if digits == Some(b"0000".as_slice()) {
                    return Some(at);
                }
            }
        }
        None
    })
}

/// `json` with each `\u0000` escape replaced by `with` (itself JSON string content).
fn replace_json_nul(json: &str, with: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut from = 0;
    for at in nul_escapes(json) {
        out.push_str(&json[from..at]);
        out.push_str(with);
        from = at + 6;
    }
    out.push_str(&json[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_found_in_text_json_arrays_and_rows() {
        assert!(holds_nul(&Value::Text("a\0b".into())));
        assert!(!holds_nul(&Value::Text("a\\u0000b".into())));
        let json = |s: &str| Value::Json(Json::parse(s).expect("json"));
        assert!(holds_nul(&json(r#"{"a": "x\u0000"}"#)));
        assert!(!holds_nul(&json(r#"{"a": "x\\u0000"}"#)));
        assert!(holds_nul(&Value::Array(vec![Value::Text("\0".into())])));
        assert!(!holds_nul(&Value::Int(0)));
    }

    #[test]
    fn strip_and_replace() {
        let t = Value::Text("a\0b".into());
        assert_eq!(cleaned(&t, NulBytes::Strip), Value::Text("ab".into()));
        assert_eq!(
            cleaned(&t, NulBytes::Replace),
            Value::Text("a\u{fffd}b".into())
        );
        let j = Value::Json(Json::parse(r#"["\u0000x","\\u0000"]"#).expect("json"));
        match cleaned(&j, NulBytes::Strip) {
            Value::Json(j) => assert_eq!(j.as_str(), r#"["x","\\u0000"]"#),
            other => panic!("{other:?}"),
        }
        match cleaned(&j, NulBytes::Replace) {
            Value::Json(j) => assert_eq!(j.as_str(), r#"["\ufffdx","\\u0000"]"#),
            other => panic!("{other:?}"),
        }
    }
}
