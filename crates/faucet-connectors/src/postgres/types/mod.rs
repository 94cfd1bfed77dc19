//! PostgreSQL text output → faucet values, and faucet types → SQL types: the one type
//! mapping shared by the `postgres` query source, the `postgres-cdc` source and the
//! `postgres` sink (docs/values.md).
//!
//! Every value is read in PostgreSQL's *text* output form (what `COPY ... TO STDOUT`, the
//! simple-query protocol and pgoutput's text mode send), under the session settings of
//! [`SESSION_SETUP`], so one decoder serves every read path:
//!
//! | type (OID) | text | [`Value`] |
//! |---|---|---|
//! | int2/int4/int8, oid | `-42` | `Int` (exact) |
//! | numeric | `1.10`, `NaN`, `Infinity` | `Numeric` with exactly those digits |
//! | float4/float8 | `0.1`, `1e+300`, `NaN`, `-Infinity` | `Float` |
//! | bool | `t` / `f` | `Bool` |
//! | text, varchar, bpchar, name, "char", uuid, and every type without a decoder of its own (enum, composite, range, citext, inet, ...) | as is | `Text` |
//! | date | `2024-02-29`, `4713-01-01 BC`, `infinity` | `Date("2024-02-29")`, `Date("-4712-01-01")` |
//! | timestamp | `2024-02-29 13:45:00.123456` | `Timestamp("2024-02-29T13:45:00.123456")` |
//! | timestamptz | `2024-02-29 12:45:00.123456+00` | `TimestampTz("2024-02-29T12:45:00.123456Z")` |
//! | time / timetz | `13:45:00` / `13:45:00+01` | `Time` / `TimeTz("13:45:00+01:00")` |
//! | interval (`IntervalStyle=iso_8601`) | `P1Y2M3DT4H5M6.5S` | `Interval` (as is) |
//! | json, jsonb | `{"a": 1}` | `Json`, the text exactly as the server sent it ([`Json::verbatim`]: json keeps its input's whitespace, key order and duplicate keys; jsonb is the server's canonical output) |
//! | bytea (`bytea_output=hex`) | `\xdeadbeef` | `Bytes` (the legacy escape form is decoded too) |
//! | arrays (`_int4`, `_text`, ...) | `{"a,b",NULL}`, `[0:1]={x,y}` | `Array`, nested for more dimensions |
//!
//! A column's type OID is first resolved to the built-in OID read here by
//! [`super::type_catalog`] (domains by their base type, arrays by their element's), on every
//! read path. Infinities (`infinity`, `-infinity`) of date/timestamp/timestamptz are kept as
//! those words; years outside 1–9999 take ISO 8601's expanded form with astronomical
//! numbering (`4713-01-01 BC` → `-4712-01-01`, `10000-01-01` → `+10000-01-01`; module
//! [`super::datetime`]), which the sink writes back as PostgreSQL's text. An array's
//! non-default lower bounds (the `[0:1]=` prefix) are dropped, as PostgreSQL's own
//! `to_jsonb` does: the elements are kept, in order, and a sink writes them back with lower
//! bound 1.

use chrono::NaiveDateTime;
use faucet_core::{DataType, Json, Value};

use super::datetime::iso_from_pg;

/// The settings every faucet PostgreSQL session runs right after connecting, so that the
/// text forms decoded by [`decode_text`] are the ones documented there, and the sink's text
/// input is read the same way: UTC timestamps, ISO dates, ISO 8601 intervals, shortest-exact
/// floats (`extra_float_digits = 1`, the default since PostgreSQL 12), hex bytea, and
/// standard-conforming string literals (backslashes are plain characters in `'...'`).
pub(crate) const SESSION_SETUP: &str = "SET client_encoding = 'UTF8'; SET TimeZone = 'UTC'; \
     SET DateStyle = 'ISO'; SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 1; \
     SET bytea_output = 'hex'; SET standard_conforming_strings = on";

/// Built-in type OIDs (PostgreSQL `src/include/catalog/pg_type.dat`; stable across versions).
pub(crate) mod oid {
    /// boolean
    pub(crate) const BOOL: u32 = 16;
    /// bytea
    pub(crate) const BYTEA: u32 = 17;
    /// "char" (one byte)
    pub(crate) const CHAR: u32 = 18;
    /// name
    pub(crate) const NAME: u32 = 19;
    /// bigint
    pub(crate) const INT8: u32 = 20;
    /// smallint
    pub(crate) const INT2: u32 = 21;
    /// integer
    pub(crate) const INT4: u32 = 23;
    /// text
    pub(crate) const TEXT: u32 = 25;
    /// oid
    pub(crate) const OID: u32 = 26;
    /// json
    pub(crate) const JSON: u32 = 114;
    /// real
    pub(crate) const FLOAT4: u32 = 700;
    /// double precision
    pub(crate) const FLOAT8: u32 = 701;
    /// character(n)
    pub(crate) const BPCHAR: u32 = 1042;
    /// character varying
    pub(crate) const VARCHAR: u32 = 1043;
    /// date
    pub(crate) const DATE: u32 = 1082;
    /// time without time zone
    pub(crate) const TIME: u32 = 1083;
    /// timestamp without time zone
    pub(crate) const TIMESTAMP: u32 = 1114;
    /// timestamp with time zone
    pub(crate) const TIMESTAMPTZ: u32 = 1184;
    /// interval
    pub(crate) const INTERVAL: u32 = 1186;
    /// time with time zone
    pub(crate) const TIMETZ: u32 = 1266;
    /// numeric
    pub(crate) const NUMERIC: u32 = 1700;
    /// uuid
    pub(crate) const UUID: u32 = 2950;
    /// jsonb
    pub(crate) const JSONB: u32 = 3802;
    /// text[]
    pub(crate) const TEXT_ARRAY: u32 = 1009;
}

/// Array type OID → element type OID, for the element types faucet decodes
/// (`pg_type.dat`, the `array_type_oid` of each element type).
const ARRAYS: &[(u32, u32)] = &[
    (1000, oid::BOOL),
    (1001, oid::BYTEA),
    (1002, oid::CHAR),
    (1003, oid::NAME),
    (1005, oid::INT2),
    (1007, oid::INT4),
    (oid::TEXT_ARRAY, oid::TEXT),
    (1014, oid::BPCHAR),
    (1015, oid::VARCHAR),
    (1016, oid::INT8),
    (1021, oid::FLOAT4),
    (1022, oid::FLOAT8),
    (1028, oid::OID),
    (1115, oid::TIMESTAMP),
    (1182, oid::DATE),
    (1183, oid::TIME),
    (1185, oid::TIMESTAMPTZ),
    (1187, oid::INTERVAL),
    (1231, oid::NUMERIC),
    (1270, oid::TIMETZ),
    (2951, oid::UUID),
    (199, oid::JSON),
    (3807, oid::JSONB),
];

/// Whether [`decode_text`] has a decoder of its own for `type_oid` (a built-in scalar or
/// array type it reads; every other OID is resolved by [`super::type_catalog`] first).
pub(crate) fn is_decoded(type_oid: u32) -> bool {
    matches!(
        type_oid,
        oid::BOOL
            | oid::BYTEA
            | oid::CHAR
            | oid::NAME
            | oid::INT8
            | oid::INT2
            | oid::INT4
            | oid::TEXT
            | oid::OID
            | oid::JSON
            | oid::FLOAT4
            | oid::FLOAT8
            | oid::BPCHAR
            | oid::VARCHAR
            | oid::DATE
            | oid::TIME
            | oid::TIMESTAMP
            | oid::TIMESTAMPTZ
            | oid::INTERVAL
            | oid::TIMETZ
            | oid::NUMERIC
            | oid::UUID
            | oid::JSONB
    ) || element_oid(type_oid).is_some()
}

/// The element type OID of the array type `array_oid`, if it is one faucet knows.
pub(crate) fn element_oid(array_oid: u32) -> Option<u32> {
    ARRAYS
        .iter()
        .find(|(a, _)| *a == array_oid)
        .map(|(_, e)| *e)
}

/// The array type OID whose elements are `elem_oid`, if it is one faucet knows.
pub(crate) fn array_oid_of(elem_oid: u32) -> Option<u32> {
    ARRAYS.iter().find(|(_, e)| *e == elem_oid).map(|(a, _)| *a)
}

/// The faucet type of a column of type `type_oid`; unknown OIDs (enums, extension types such
/// as citext, domains not resolved by the caller) are [`DataType::Text`].
pub(crate) fn data_type_of(type_oid: u32) -> DataType {
    match type_oid {
        oid::BOOL => DataType::Bool,
        oid::INT2 | oid::INT4 | oid::INT8 | oid::OID => DataType::Int,
        oid::FLOAT4 | oid::FLOAT8 => DataType::Float,
        oid::NUMERIC => DataType::Numeric,
        oid::BYTEA => DataType::Bytes,
        oid::JSON | oid::JSONB => DataType::Json,
        oid::DATE => DataType::Date,
        oid::TIMESTAMP => DataType::Timestamp,
        oid::TIMESTAMPTZ => DataType::TimestampTz,
        oid::TIME => DataType::Time,
        oid::TIMETZ => DataType::TimeTz,
        oid::INTERVAL => DataType::Interval,
        other => match element_oid(other) {
            Some(elem) => DataType::Array(Box::new(data_type_of(elem))),
            None => DataType::Text,
        },
    }
}

/// The PostgreSQL column type the sink creates for a faucet type (`create_table: true`):
/// Int → `bigint`, Numeric → `numeric`, Float → `double precision`, Text → `text`,
/// Bool → `boolean`, Bytes → `bytea`, Json → `jsonb`, Date → `date`, Timestamp →
/// `timestamp`, TimestampTz → `timestamptz`, Time → `time`, TimeTz → `timetz`, Interval →
/// `interval`, Array(t) → `t[]` (PostgreSQL does not distinguish dimensions: an array of
/// arrays is also `t[]`), Unknown → `text`.
pub(crate) fn sql_type_of(data_type: &DataType) -> &'static str {
    match data_type {
        DataType::Array(inner) => {
            let mut elem = &**inner;
            while let DataType::Array(deeper) = elem {
                elem = deeper;
            }
            match elem {
                DataType::Bool => "boolean[]",
                DataType::Int => "bigint[]",
                DataType::Float => "double precision[]",
                DataType::Numeric => "numeric[]",
                DataType::Bytes => "bytea[]",
                DataType::Json => "jsonb[]",
                DataType::Date => "date[]",
                DataType::Timestamp => "timestamp[]",
                DataType::TimestampTz => "timestamptz[]",
                DataType::Time => "time[]",
                DataType::TimeTz => "timetz[]",
                DataType::Interval => "interval[]",
                _ => "text[]",
            }
        }
        DataType::Bool => "boolean",
        DataType::Int => "bigint",
        DataType::Float => "double precision",
        DataType::Numeric => "numeric",
        DataType::Bytes => "bytea",
        DataType::Json => "jsonb",
        DataType::Date => "date",
        DataType::Timestamp => "timestamp",
        DataType::TimestampTz => "timestamptz",
        DataType::Time => "time",
        DataType::TimeTz => "timetz",
        DataType::Interval => "interval",
        _ => "text",
    }
}

/// Decodes PostgreSQL's text output form of a value of type `type_oid` (see the module table).
/// SQL NULL never reaches this function: the caller maps it to [`Value::Null`].
///
/// # Errors
/// A message naming the type and the text when the text is not a valid value of that type
/// (the caller adds the column and row).
pub(crate) fn decode_text(type_oid: u32, text: &str) -> Result<Value, String> {
    match type_oid {
        oid::INT2 | oid::INT4 | oid::INT8 | oid::OID => text
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|e| format!("invalid integer `{text}`: {e}")),
        oid::NUMERIC => Value::numeric(text).map_err(|t| format!("invalid numeric `{t}`")),
        oid::FLOAT4 | oid::FLOAT8 => decode_float(text).map(Value::Float),
        oid::BOOL => match text {
            "t" => Ok(Value::Bool(true)),
            "f" => Ok(Value::Bool(false)),
            other => Err(format!("invalid boolean `{other}` (expected `t` or `f`)")),
        },
        oid::DATE => Ok(Value::Date(iso_from_pg(text).as_ref().into())),
        oid::TIMESTAMP => Ok(Value::Timestamp(decode_timestamp(text).into())),
        oid::TIMESTAMPTZ => decode_timestamptz(text).map(|t| Value::TimestampTz(t.into())),
        oid::TIME => Ok(Value::Time(text.into())),
        oid::TIMETZ => Ok(Value::TimeTz(normalize_offset(text).into())),
        oid::INTERVAL => Ok(Value::Interval(text.into())),
        oid::JSON | oid::JSONB => Json::verbatim(text)
            .map(Value::Json)
            .map_err(|e| format!("invalid json: {e}")),
        oid::BYTEA => decode_bytea(text).map(Value::Bytes),
        other => match element_oid(other) {
            Some(elem) => decode_array(elem, text),
            None => Ok(Value::Text(text.into())),
        },
    }
}

/// `float4`/`float8` text: `NaN`, `Infinity`, `-Infinity` or a decimal (`1e+300`, `-0`).
fn decode_float(text: &str) -> Result<f64, String> {
    match text {
        "NaN" => Ok(f64::NAN),
        "Infinity" => Ok(f64::INFINITY),
        "-Infinity" => Ok(f64::NEG_INFINITY),
        _ => text
            .parse::<f64>()
            .map_err(|e| format!("invalid float `{text}`: {e}")),
    }
}

/// `2024-02-29 13:45:00.123456` → `2024-02-29T13:45:00.123456`, `4713-01-01 00:00:00 BC` →
/// `-4712-01-01T00:00:00`. `infinity` and `-infinity` are kept as PostgreSQL wrote them.
fn decode_timestamp(text: &str) -> String {
    let text = iso_from_pg(text);
    match text.find(' ') {
        Some(i) => {
            let mut out = String::with_capacity(text.len());
            out.push_str(&text[..i]);
            out.push('T');
            out.push_str(&text[i + 1..]);
            out
        }
        None => text.into_owned(),
    }
}

/// `2024-02-29 12:45:00.123456+00` → `2024-02-29T12:45:00.123456Z`. With `TimeZone=UTC` the
/// offset is always `+00`; any other offset (`+05:30`, `-08`) is converted to UTC, keeping
/// the fraction digits as given. Years outside 1–9999 take the expanded form
/// (`4713-01-01 00:00:00+00 BC` → `-4712-01-01T00:00:00Z`); `infinity` and `-infinity` are
/// kept as is.
fn decode_timestamptz(pg_text: &str) -> Result<String, String> {
    if matches!(pg_text, "infinity" | "-infinity") {
        return Ok(pg_text.to_owned());
    }
    let text = &*iso_from_pg(pg_text);
    // The offset starts at the last '+' or '-' after the time part.
    let time_start = text.find(' ').ok_or_else(|| bad_tstz(pg_text))?;
    let sign_at = text[time_start..]
        .rfind(['+', '-'])
        .map(|i| i + time_start)
        .ok_or_else(|| bad_tstz(pg_text))?;
    let (local, offset) = text.split_at(sign_at);
    let (whole, fraction) = match local.find('.') {
        Some(dot) => local.split_at(dot),
        None => (local, ""),
    };
    if offset == "+00" {
        let mut out = String::with_capacity(local.len() + 1);
        out.push_str(&whole[..time_start]);
        out.push('T');
        out.push_str(&whole[time_start + 1..]);
        out.push_str(fraction);
        out.push('Z');
        return Ok(out);
    }
    let seconds = offset_seconds(offset).ok_or_else(|| bad_tstz(pg_text))?;
    let naive = NaiveDateTime::parse_from_str(whole, "%Y-%m-%d %H:%M:%S")
        .map_err(|e| format!("{}: {e}", bad_tstz(pg_text)))?;
    let utc = naive - chrono::Duration::seconds(i64::from(seconds));
    Ok(format!("{}{fraction}Z", utc.format("%Y-%m-%dT%H:%M:%S")))
}

fn bad_tstz(text: &str) -> String {
    format!("invalid timestamptz `{text}`")
}

/// `+05`, `-08:00`, `+05:30:15` → seconds east of UTC.
fn offset_seconds(offset: &str) -> Option<i32> {
    let (sign, rest) = match offset.as_bytes().first()? {
        b'+' => (1, &offset[1..]),
        b'-' => (-1, &offset[1..]),
        _ => return None,
    };
    let mut total = 0i32;
    for (i, part) in rest.split(':').enumerate() {
        let n: i32 = part.parse().ok()?;
        total += n * [3600, 60, 1].get(i)?;
    }
    Some(sign * total)
}

/// `13:45:00+01` → `13:45:00+01:00`; offsets with minutes or seconds are kept as given.
fn normalize_offset(text: &str) -> String {
    match text.rfind(['+', '-']) {
        Some(i) if text.len() - i == 3 => format!("{text}:00"),
        _ => text.to_owned(),
    }
}

/// bytea text: the hex form `\x0a0b` (`bytea_output = hex`), or the legacy escape form
/// (printable bytes as themselves, `\\` for a backslash, `\ooo` octal for the rest).
pub(crate) fn decode_bytea(text: &str) -> Result<Vec<u8>, String> {
    let b = text.as_bytes();
    if let Some(hex) = b.strip_prefix(b"\\x") {
        if hex.len() % 2 != 0 {
            return Err(format!(
                "invalid bytea hex: odd number of digits in `{text}`"
            ));
        }
        return hex
            .chunks_exact(2)
            .map(|pair| match (hex_digit(pair[0]), hex_digit(pair[1])) {
                (Some(h), Some(l)) => Ok(h << 4 | l),
                _ => Err(format!("invalid bytea hex digit in `{text}`")),
            })
            .collect();
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
        } else if b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let digits = b
                .get(i + 1..i + 4)
                .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3');
            let Some(d) = digits else {
                return Err(format!("invalid bytea escape in `{text}`"));
            };
            out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
            i += 4;
        }
    }
    Ok(out)
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes an array literal whose elements are of type `elem_oid`: `{"a,b",c}`,
/// `{NULL,"NULL",""}` (an unquoted `NULL` is SQL NULL, a quoted one the text), backslash
/// escapes inside quotes, nesting `{{1,2},{3,4}}` (→ nested arrays), and a dimension prefix
/// `[0:1]={x,y}`, which is dropped (see the module docs).
pub(crate) fn decode_array(elem_oid: u32, text: &str) -> Result<Value, String> {
    let body = strip_dimensions(text);
    let mut parser = ArrayParser {
        text: body.as_bytes(),
        pos: 0,
        elem_oid,
    };
    let value = parser
        .array()
        .map_err(|e| format!("invalid array literal `{text}`: {e}"))?;
    if parser.pos != parser.text.len() {
        return Err(format!(
            "invalid array literal `{text}`: trailing characters"
        ));
    }
    Ok(value)
}

/// `[0:1]={x,y}` → `{x,y}`; `[1:2][1:2]={{..}}` → `{{..}}`.
fn strip_dimensions(text: &str) -> &str {
    if text.starts_with('[')
        && let Some(eq) = text.find("={")
    {
        return &text[eq + 1..];
    }
    text
}

struct ArrayParser<'a> {
    text: &'a [u8],
    pos: usize,
    elem_oid: u32,
}

impl ArrayParser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected `{}` at offset {}", c as char, self.pos))
        }
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// `{` elements `}`.
    fn array(&mut self) -> Result<Value, String> {
        self.expect(b'{')?;
        let mut items = Vec::new();
        self.skip_spaces();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_spaces();
            items.push(self.element()?);
            self.skip_spaces();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(format!("expected `,` or `}}` at offset {}", self.pos)),
            }
        }
    }

    fn element(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(b'{') => self.array(),
            Some(b'"') => {
                let text = self.quoted()?;
                decode_text(self.elem_oid, &text)
            }
            Some(_) => {
                let start = self.pos;
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}') {
                        break;
                    }
                    if c == b'\\' {
                        return Err(format!(
                            "backslash in an unquoted element at offset {}",
                            self.pos
                        ));
                    }
                    self.pos += 1;
                }
                let raw = std::str::from_utf8(&self.text[start..self.pos])
                    .map_err(|e| e.to_string())?
                    .trim_end();
                if raw.eq_ignore_ascii_case("NULL") {
                    Ok(Value::Null)
                } else {
                    decode_text(self.elem_oid, raw)
                }
            }
            None => Err("unexpected end".to_owned()),
        }
    }

    /// A double-quoted element: `\x` is `x` for any character `x`.
    fn quoted(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => {
                    let c = self
                        .text
                        .get(self.pos + 1)
                        .copied()
                        .ok_or("unterminated escape")?;
                    out.push(c);
                    self.pos += 2;
                }
                Some(c) => {
                    out.push(c);
                    self.pos += 1;
                }
                None => return Err("unterminated quoted element".to_owned()),
            }
        }
        String::from_utf8(out).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests;
