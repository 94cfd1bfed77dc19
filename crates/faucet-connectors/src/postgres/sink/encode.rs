//! Values → `COPY ... FROM STDIN` text format (PostgreSQL manual, "COPY", "Text Format"):
//! columns separated by a tab, rows ending in `\n`, `\N` for NULL, and a backslash before
//! every backslash, newline, carriage return and tab inside a value. Each value is written in
//! the text *input* form of its type, which is the inverse of
//! [`crate::postgres::types::decode_text`], so values round-trip exactly:
//!
//! | [`Value`] | text |
//! |---|---|
//! | Int | digits |
//! | Numeric | its digits as given (`1.10`, `NaN`, `-Infinity`) |
//! | Float | shortest round-trip (`0.1`, `1e300`, `-0.0`), `NaN`, `Infinity`, `-Infinity` |
//! | Bool | `t` / `f` |
//! | Bytes | `\x` + hex |
//! | Json | its JSON text as held (json read from PostgreSQL: byte for byte as it was stored) |
//! | Date, Timestamp, TimestampTz | as held (`2024-02-29T12:45:00Z`, `infinity`), an expanded year in PostgreSQL's form (`-4712-01-01` → `4713-01-01 BC`, `+10000-01-01` → `10000-01-01`) |
//! | Time, TimeTz, Interval | as held (`13:45:00`, `P1D`) |
//! | Array | an array literal, every element double-quoted (`{"a,b",NULL}`), nested for more dimensions |
//! | Row | a JSON object (for a `jsonb` column) |

use faucet_core::Value;
use faucet_core::value::json::{write_i64, write_row, write_value};

use crate::postgres::datetime::pg_from_iso;

/// Appends `value` as one COPY text column (escaped, `\N` for NULL).
pub(crate) fn write_copy_value(out: &mut Vec<u8>, value: &Value, scratch: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"\\N"),
        Value::Bool(true) => out.push(b't'),
        Value::Bool(false) => out.push(b'f'),
        Value::Int(i) => write_i64(out, *i),
        Value::Numeric(n) => out.extend_from_slice(n.as_bytes()),
        Value::Float(f) => write_float(out, *f),
        Value::Text(s) => escape_into(out, s.as_bytes()),
        Value::Date(s) | Value::Timestamp(s) | Value::TimestampTz(s) => {
            escape_into(out, pg_from_iso(s).as_bytes());
        }
        Value::Time(s) | Value::TimeTz(s) | Value::Interval(s) => escape_into(out, s.as_bytes()),
        Value::Bytes(b) => {
            // `\x` with the backslash escaped for COPY.
            out.extend_from_slice(b"\\\\x");
            write_hex(out, b);
        }
        Value::Json(j) => escape_into(out, j.as_str().as_bytes()),
        Value::Row(_) | Value::Array(_) => {
            scratch.clear();
            write_text(scratch, value);
            escape_into(out, scratch);
        }
        // `Value` is non-exhaustive: a future variant is written in its JSON form.
        #[allow(unreachable_patterns)]
        other => {
            scratch.clear();
            write_value(scratch, other);
            escape_into(out, scratch);
        }
    }
}

/// The text input form of `value`, unescaped (for array elements and compound values).
pub(crate) fn write_text(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"NULL"),
        Value::Bool(true) => out.push(b't'),
        Value::Bool(false) => out.push(b'f'),
        Value::Int(i) => write_i64(out, *i),
        Value::Numeric(n) => out.extend_from_slice(n.as_bytes()),
        Value::Float(f) => write_float(out, *f),
        Value::Text(s) => out.extend_from_slice(s.as_bytes()),
        Value::Date(s) | Value::Timestamp(s) | Value::TimestampTz(s) => {
            out.extend_from_slice(pg_from_iso(s).as_bytes());
        }
        Value::Time(s) | Value::TimeTz(s) | Value::Interval(s) => {
            out.extend_from_slice(s.as_bytes())
        }
        Value::Bytes(b) => {
            out.extend_from_slice(b"\\x");
            write_hex(out, b);
        }
        Value::Json(j) => out.extend_from_slice(j.as_str().as_bytes()),
        Value::Row(row) => write_row(out, row),
        Value::Array(items) => write_array(out, items),
        #[allow(unreachable_patterns)]
        other => write_value(out, other),
    }
}

/// `{...}`: nested arrays as sub-literals, NULL as `NULL`, every other element quoted with
/// `"` and `\` escaped (PostgreSQL manual, "Array Value Input").
fn write_array(out: &mut Vec<u8>, items: &[Value]) {
    out.push(b'{');
    let mut element = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match item {
            Value::Null => out.extend_from_slice(b"NULL"),
            Value::Array(inner) => write_array(out, inner),
            other => {
                element.clear();
                write_text(&mut element, other);
                out.push(b'"');
                for &b in &element {
                    if b == b'"' || b == b'\\' {
                        out.push(b'\\');
                    }
                    out.push(b);
                }
                out.push(b'"');
            }
        }
    }
    out.push(b'}');
}

/// Shortest round-trip decimal (via serde_json's ryu), or PostgreSQL's special spellings.
fn write_float(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else {
        let _ = serde_json::to_writer(&mut *out, &f);
    }
}

fn write_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0xf)]);
    }
}

/// Appends `text` with COPY's escapes for backslash, newline, carriage return and tab.
pub(crate) fn escape_into(out: &mut Vec<u8>, text: &[u8]) {
    let mut start = 0;
    for (i, &b) in text.iter().enumerate() {
        let esc: &[u8] = match b {
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            _ => continue,
        };
        out.extend_from_slice(&text[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&text[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::types::{decode_array, decode_bytea, oid};

    fn copy(v: &Value) -> String {
        let mut out = Vec::new();
        write_copy_value(&mut out, v, &mut Vec::new());
        String::from_utf8(out).expect("utf8")
    }

    fn text(v: &Value) -> String {
        let mut out = Vec::new();
        write_text(&mut out, v);
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn scalars() {
        assert_eq!(copy(&Value::Null), "\\N");
        assert_eq!(copy(&Value::Int(i64::MIN)), "-9223372036854775808");
        assert_eq!(copy(&Value::numeric("1.10").expect("n")), "1.10");
        assert_eq!(copy(&Value::Float(0.1)), "0.1");
        assert_eq!(copy(&Value::Float(1e300)), "1e+300");
        assert_eq!(copy(&Value::Float(-0.0)), "-0.0");
        assert_eq!(copy(&Value::Float(f64::NAN)), "NaN");
        assert_eq!(copy(&Value::Float(f64::NEG_INFINITY)), "-Infinity");
        assert_eq!(copy(&Value::Bool(true)), "t");
        assert_eq!(
            copy(&Value::Text("a\tb\nc\\d\re".into())),
            "a\\tb\\nc\\\\d\\re"
        );
        assert_eq!(copy(&Value::Text("\\N".into())), "\\\\N");
        assert_eq!(copy(&Value::Bytes(vec![0xde, 0xad, 0x5c])), "\\\\xdead5c");
        assert_eq!(copy(&Value::Bytes(vec![])), "\\\\x");
        assert_eq!(
            copy(&Value::json(serde_json::json!({"a": "x\ny"}))),
            "{\"a\":\"x\\\\ny\"}"
        );
        assert_eq!(copy(&Value::Date("infinity".into())), "infinity");
    }

    #[test]
    fn arrays_round_trip_through_the_decoder() {
        let cases = [
            (
                oid::TEXT_ARRAY,
                Value::Array(vec![
                    Value::Text("a,b".into()),
                    Value::Text("NULL".into()),
                    Value::Null,
                    Value::Text("".into()),
                    Value::Text("say \"hi\"".into()),
                    Value::Text("back\\slash".into()),
                    Value::Text("{brace}".into()),
                ]),
            ),
            (
                1007,
                Value::Array(vec![
                    Value::Array(vec![Value::Int(1), Value::Int(2)]),
                    Value::Array(vec![Value::Int(3), Value::Null]),
                ]),
            ),
            (1001, Value::Array(vec![Value::Bytes(vec![0, 0x5c, 0xff])])),
            (1007, Value::Array(vec![])),
        ];
        for (array_oid, value) in cases {
            let literal = text(&value);
            let elem = crate::postgres::types::element_oid(array_oid).expect("array");
            assert_eq!(decode_array(elem, &literal), Ok(value.clone()), "{literal}");
        }
        assert_eq!(
            text(&Value::Array(vec![Value::Text("a,b".into()), Value::Null])),
            "{\"a,b\",NULL}"
        );
        assert_eq!(decode_bytea("\\x005cff"), Ok(vec![0, 0x5c, 0xff]));
    }
}
