//! The JSON form of a [`Value`] (docs/values.md), written straight
//! into a byte buffer: this is the jsonl sink's and the CDC record's hot path.
//!
//! Integers and numerics are written with exactly their digits; floats in the shortest form
//! that parses back to the same `f64`; NaN and infinities as the strings `"NaN"`,
//! `"Infinity"`, `"-Infinity"` (the spelling of PostgreSQL's `to_jsonb`); bytes as standard
//! base64; json values embedded as themselves.

use base64::Engine as _;

use super::{Row, Schema, Value};

/// Appends the JSON form of `value` to `out`.
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Int(i) => write_i64(out, *i),
        Value::Float(f) => write_f64(out, *f),
        Value::Numeric(n) => match &**n {
            "NaN" | "Infinity" | "-Infinity" => write_str(out, n),
            digits => out.extend_from_slice(digits.as_bytes()),
        },
        Value::Text(s) => write_str(out, s),
        Value::Date(s)
        | Value::Timestamp(s)
        | Value::TimestampTz(s)
        | Value::Time(s)
        | Value::TimeTz(s)
        | Value::Interval(s) => write_str(out, s),
        Value::Bytes(b) => {
            out.push(b'"');
            let start = out.len();
            let encoded_len = base64::encoded_len(b.len(), true).unwrap_or(0);
            out.resize(start + encoded_len, 0);
            let written = base64::engine::general_purpose::STANDARD
                .encode_slice(b, &mut out[start..])
                .unwrap_or(0);
            out.truncate(start + written);
            out.push(b'"');
        }
        // Valid JSON text already; a raw line break in it can only be whitespace between
        // tokens (strings escape theirs), written as a space so a line stays one line.
        Value::Json(j) => write_json_text(out, j.as_str()),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Row(row) => write_row(out, row),
    }
}

/// Appends valid JSON text as is, with its line breaks (`\n`, `\r`: insignificant whitespace
/// in valid JSON) as spaces.
fn write_json_text(out: &mut Vec<u8>, text: &str) {
    let start = out.len();
    out.extend_from_slice(text.as_bytes());
    if text.contains(['\n', '\r']) {
        for b in &mut out[start..] {
            if matches!(*b, b'\n' | b'\r') {
                *b = b' ';
            }
        }
    }
}

/// Appends a nested row as a JSON object, fields in schema order.
pub fn write_row(out: &mut Vec<u8>, row: &Row) {
    write_object(out, &row.schema, &row.values);
}

/// Appends the record of `values` (one per field of `schema`) as a JSON object, fields in
/// schema order: the jsonl sink's line without the newline (the sink itself reuses
/// pre-encoded keys), and a page row's JSON (`faucet_core::RowRef::write_json`).
pub fn write_object(out: &mut Vec<u8>, schema: &Schema, values: &[Value]) {
    out.push(b'{');
    for (i, (field, value)) in schema.fields().iter().zip(values).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, &field.name);
        out.push(b':');
        write_value(out, value);
    }
    out.push(b'}');
}

/// The record of `values` as a `serde_json::Value` object (field order kept), through the
/// same writer: handy for comparing sink output with source input in tests.
pub fn object_to_json(schema: &Schema, values: &[Value]) -> serde_json::Value {
    let mut out = Vec::with_capacity(64);
    write_object(&mut out, schema, values);
    // The writer emits valid JSON by construction.
    serde_json::from_slice(&out).unwrap_or(serde_json::Value::Null)
}

/// Appends `i`'s decimal digits (JSON and PostgreSQL's text form alike), without
/// allocating (the `itoa` crate).
pub fn write_i64(out: &mut Vec<u8>, i: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
}

/// Appends `f` in its shortest round-trip form; NaN and infinities as strings.
pub fn write_f64(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        write_str(out, "NaN");
    } else if f.is_infinite() {
        write_str(out, if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        let _ = serde_json::to_writer(&mut *out, &f);
    }
}

/// Appends `s` as a JSON string, escaping `"`, `\` and control characters.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Most strings need no escape: one branch-free (vectorizable) pass decides, then one copy.
    let any = bytes.iter().fold(0u8, |acc, &b| {
        acc | u8::from(b < 0x20) | u8::from(b == b'"') | u8::from(b == b'\\')
    });
    if any == 0 {
        out.extend_from_slice(bytes);
    } else {
        write_escaped(out, bytes);
    }
    out.push(b'"');
}

/// Per byte: 0 when it stands for itself in a JSON string, else the letter after the `\`
/// (`u` for `\u00XX`).
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[0x08] = b'b';
    table[0x0c] = b'f';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// The escaping loop of [`write_str`], for strings that need it: one table lookup per byte,
/// runs of plain bytes copied at once.
fn write_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = ESCAPE[usize::from(b)];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        if escape == b'u' {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(v: &Value) -> String {
        let mut out = Vec::new();
        write_value(&mut out, v);
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn verbatim_json_stays_on_one_line() {
        let j = crate::Json::verbatim("{\"a\" :\r\n [1, \"x\\ny\"],\n\"a\": 2 }").expect("json");
        assert_eq!(
            json(&Value::Json(j)),
            "{\"a\" :   [1, \"x\\ny\"], \"a\": 2 }"
        );
    }

    #[test]
    fn exact_numbers() {
        assert_eq!(json(&Value::Int(i64::MIN)), "-9223372036854775808");
        assert_eq!(json(&Value::Int(9_007_199_254_740_993)), "9007199254740993");
        assert_eq!(
            json(&Value::numeric("12345678901234567890.123456789").expect("numeric")),
            "12345678901234567890.123456789"
        );
        assert_eq!(json(&Value::numeric("1.10").expect("numeric")), "1.10");
        assert_eq!(json(&Value::numeric("NaN").expect("numeric")), "\"NaN\"");
        assert_eq!(json(&Value::Float(0.1)), "0.1");
        assert_eq!(json(&Value::Float(f64::NEG_INFINITY)), "\"-Infinity\"");
        let f: f64 = json(&Value::Float(1e300)).parse().expect("f64");
        assert_eq!(f, 1e300);
    }

    #[test]
    fn strings_bytes_and_arrays() {
        assert_eq!(
            json(&Value::Text("a\"b\\c\nd\r\u{1}é".into())),
            r#""a\"b\\c\nd\r\u0001é""#
        );
        assert_eq!(
            json(&Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef])),
            "\"3q2+7w==\""
        );
        assert_eq!(json(&Value::Bytes(vec![])), "\"\"");
        assert_eq!(
            json(&Value::Array(vec![Value::Text("NULL".into()), Value::Null])),
            r#"["NULL",null]"#
        );
    }

    #[test]
    fn strings_match_serde_json_with_and_without_escapes() {
        for s in [
            "",
            "plain ascii with spaces",
            "\"",
            "\\",
            "ends with a quote\"",
            "\u{1f}starts with a control",
            "mixed \"quotes\" and \\slashes\\ and\nlines\r\n\t",
            "é ü 漢字 \u{feff} \u{7f}",
            &"long run without escapes ".repeat(40),
        ] {
            let expected = serde_json::to_string(s).expect("serde");
            assert_eq!(json(&Value::Text(s.into())), expected, "{s:?}");
        }
    }

    #[test]
    fn every_control_character_round_trips() {
        let s: String = (0u8..0x80).map(char::from).collect();
        let parsed: String =
            serde_json::from_str(&json(&Value::Text(s.as_str().into()))).expect("json");
        assert_eq!(parsed, s);
    }
}
