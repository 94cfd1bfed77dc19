//! [`to_value`]: one mysql_common [`MyValue`] of a [`MysqlColumn`] → one
//! [`faucet_core::Value`], by the MySQL table of docs/values.md and the policies in the module docs of
//! [`crate::mysql::value`]. The only function both the query source and the binlog reader
//! decode values with.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use base64::Engine as _;
use chrono::{Datelike as _, Timelike as _};
use mysql_async::Value as MyValue;

use faucet_core::value::Json;
use faucet_core::{Text, Value};

use super::column::{Kind, MysqlColumn, Origin};
use super::digits::{push_leading, push_padded, put_fixed};

/// Converts `value` of `column`.
///
/// # Errors
/// A message (the caller adds the table, row and column) when the value has a shape the
/// column's type cannot have, or text that is not valid in the column's charset.
pub fn to_value(column: &MysqlColumn, value: MyValue) -> Result<Value, String> {
    if matches!(value, MyValue::NULL) {
        return Ok(Value::Null);
    }
    match column.kind {
        Kind::TinyInt | Kind::SmallInt | Kind::MediumInt | Kind::Int | Kind::BigInt => {
            integer(column, value)
        }
        Kind::Year => year(value),
        Kind::Float => match value {
            MyValue::Float(f) => Ok(Value::Float(f32_to_f64(f))),
            // A FLOAT never holds more than f32 precision: shortest f32 form of it.
            MyValue::Double(d) => Ok(Value::Float(f32_to_f64(d as f32))),
            other => Err(shape("FLOAT", &other)),
        },
        Kind::Double => match value {
            MyValue::Double(d) => Ok(Value::Float(d)),
            MyValue::Float(f) => Ok(Value::Float(f64::from(f))),
            other => Err(shape("DOUBLE", &other)),
        },
        Kind::Decimal => match value {
            MyValue::Bytes(b) => {
                decimal_value(std::str::from_utf8(&b).map_err(|_| "DECIMAL text is not ASCII")?)
            }
            other => Err(shape("DECIMAL", &other)),
        },
        Kind::Bit => bit(column, value),
        Kind::Date => match value {
            MyValue::Date(y, m, d, ..) => Ok(date_text(y, m, d).map_or(Value::Null, Value::Date)),
            other => Err(shape("DATE", &other)),
        },
        Kind::DateTime => match value {
            MyValue::Date(y, mo, d, h, mi, s, us) => {
                Ok(
                    datetime_text((y, mo, d, h, mi, s, us), column.fraction, false)
                        .map_or(Value::Null, Value::Timestamp),
                )
            }
            other => Err(shape("DATETIME", &other)),
        },
        Kind::Timestamp => timestamp(column, value),
        Kind::Time => match value {
            MyValue::Time(neg, days, h, m, s, us) => Ok(Value::Interval(time_text(
                neg,
                days,
                h,
                m,
                s,
                us,
                column.fraction,
            ))),
            other => Err(shape("TIME", &other)),
        },
        Kind::Char | Kind::VarChar | Kind::Blob => {
            let mut bytes = bytes_of(value, "a string")?;
            if column.is_binary() {
                // BINARY(n) keeps its trailing zero bytes; the binlog strips them.
                if column.kind == Kind::Char && (bytes.len() as u64) < u64::from(column.length) {
                    bytes.resize(column.length as usize, 0);
                }
                Ok(Value::Bytes(bytes))
            } else {
                column.charset.decode(bytes).map(|s| Value::Text(s.into()))
            }
        }
        Kind::Enum => match value {
            MyValue::Bytes(b) => column.charset.decode(b).map(|s| Value::Text(s.into())),
            MyValue::Int(i) => enum_member(column, i),
            MyValue::UInt(u) => enum_member(column, i64::try_from(u).unwrap_or(i64::MAX)),
            other => Err(shape("ENUM", &other)),
        },
        Kind::Set => match (column.origin, value) {
            (Origin::Binlog, MyValue::Bytes(mask)) => set_members(column, &mask),
            (_, MyValue::Bytes(b)) => column.charset.decode(b).map(|s| Value::Text(s.into())),
            (_, other) => Err(shape("SET", &other)),
        },
        Kind::Json => {
            let bytes = bytes_of(value, "JSON text")?;
            // MySQL's JSON arrives as utf8mb4 text under the binary collation.
            let text = if column.is_binary() {
                String::from_utf8(bytes).map_err(|_| "JSON text is not UTF-8".to_owned())?
            } else {
                column.charset.decode(bytes)?
            };
            Json::parse(&text)
                .map(Value::Json)
                .map_err(|e| format!("not valid JSON: {e}"))
        }
        Kind::Geometry => {
            let bytes = bytes_of(value, "a geometry")?;
            geometry(&bytes)
        }
        // The binlog holds these as their stored bytes, as a BINARY(n) without its trailing
        // zero bytes (`0.0.0.0` arrives empty): padded back to 16 / 4 / 16.
        Kind::Uuid => match (column.origin, value) {
            (Origin::Binlog, MyValue::Bytes(b)) => {
                Ok(Value::Text(uuid_text(&padded::<16>(&b, "UUID")?).into()))
            }
            (_, v) => text_form(v, "UUID"),
        },
        Kind::Inet4 => match (column.origin, value) {
            (Origin::Binlog, MyValue::Bytes(b)) => {
                let b = padded::<4>(&b, "INET4")?;
                Ok(Value::Text(Ipv4Addr::from(b).to_string().into()))
            }
            (_, v) => text_form(v, "INET4"),
        },
        Kind::Inet6 => match (column.origin, value) {
            (Origin::Binlog, MyValue::Bytes(b)) => {
                let b = padded::<16>(&b, "INET6")?;
                Ok(Value::Text(Ipv6Addr::from(b).to_string().into()))
            }
            (_, v) => text_form(v, "INET6"),
        },
        Kind::Null => Ok(Value::Null),
    }
}

/// The value of a text column (CHAR, VARCHAR, TEXT of a charset that is not `binary`)
/// from its bytes, borrowed (a binlog row image): the same [`Value::Text`] as [`to_value`]
/// makes of them, UTF-8 checked in place rather than copied first. `None` for any other
/// column (binary strings, and the UUID/INET/JSON types stored as strings), which go
/// through [`to_value`].
///
/// # Errors
/// As [`to_value`]: text that is not valid in the column's charset.
pub fn text_value(column: &MysqlColumn, bytes: &[u8]) -> Option<Result<Value, String>> {
    if !matches!(column.kind, Kind::Char | Kind::VarChar | Kind::Blob) || column.is_binary() {
        return None;
    }
    Some(column.charset.decode_text(bytes).map(Value::Text))
}

/// A DECIMAL's value from its text (a result set's, or a row image's digits): a
/// [`Value::Numeric`] of exactly that text.
///
/// # Errors
/// A message when the text is not a decimal number.
pub fn decimal_value(text: &str) -> Result<Value, String> {
    Value::numeric(text).map_err(|t| format!("`{t}` is not a DECIMAL"))
}

fn shape(what: &str, value: &MyValue) -> String {
    let kind = match value {
        MyValue::NULL => "NULL",
        MyValue::Bytes(_) => "bytes",
        MyValue::Int(_) => "a signed integer",
        MyValue::UInt(_) => "an unsigned integer",
        MyValue::Float(_) => "a FLOAT",
        MyValue::Double(_) => "a DOUBLE",
        MyValue::Date(..) => "a date",
        MyValue::Time(..) => "a time",
    };
    format!("a {what} column gave {kind}, which it cannot hold")
}

fn bytes_of(value: MyValue, what: &str) -> Result<Vec<u8>, String> {
    match value {
        MyValue::Bytes(b) => Ok(b),
        other => Err(format!("expected {what}, got {}", shape("text", &other))),
    }
}

/// `bytes` zero-padded to `N` bytes.
fn padded<const N: usize>(bytes: &[u8], what: &str) -> Result<[u8; N], String> {
    if bytes.len() > N {
        return Err(format!("a {what} of {} bytes (at most {N})", bytes.len()));
    }
    let mut out = [0u8; N];
    out[..bytes.len()].copy_from_slice(bytes);
    Ok(out)
}

fn text_form(value: MyValue, what: &str) -> Result<Value, String> {
    let bytes = bytes_of(value, what)?;
    String::from_utf8(bytes)
        .map(|s| Value::Text(s.into()))
        .map_err(|_| format!("{what} text is not UTF-8"))
}

/// Signed integers as [`Value::Int`]; BIGINT UNSIGNED always as [`Value::Numeric`] (exact up
/// to 18446744073709551615, and one type for the whole column); smaller UNSIGNED types fit
/// an i64.
fn integer(column: &MysqlColumn, value: MyValue) -> Result<Value, String> {
    let big_unsigned = column.kind == Kind::BigInt && column.unsigned;
    match value {
        MyValue::Int(i) if big_unsigned => {
            // mysql_common gives a BIGINT UNSIGNED as Int when told it is signed: reinterpret.
            Ok(Value::Numeric((i as u64).to_string().into()))
        }
        MyValue::Int(i) => Ok(Value::Int(i)),
        MyValue::UInt(u) if big_unsigned => Ok(Value::Numeric(u.to_string().into())),
        MyValue::UInt(u) => i64::try_from(u)
            .map(Value::Int)
            .map_err(|_| format!("{u} does not fit the column's integer type")),
        other => Err(shape("integer", &other)),
    }
}

/// YEAR as a number; 0 stays 0. The binlog gives `1900 + stored byte` as text, and a stored 0
/// (the year 0000) decodes as 1900 there, a year YEAR cannot hold (1901..=2155 or 0): it is 0.
fn year(value: MyValue) -> Result<Value, String> {
    let y = match value {
        MyValue::Int(i) => i,
        MyValue::UInt(u) => i64::try_from(u).map_err(|_| format!("YEAR {u}"))?,
        MyValue::Bytes(b) => std::str::from_utf8(&b)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or("YEAR text is not a number")?,
        other => return Err(shape("YEAR", &other)),
    };
    Ok(Value::Int(if y == 1900 { 0 } else { y }))
}

/// BIT(n) as the bits' unsigned number: [`Value::Int`] for n < 64, [`Value::Numeric`] for
/// BIT(64) (one type per column; values above i64::MAX stay exact).
fn bit(column: &MysqlColumn, value: MyValue) -> Result<Value, String> {
    let n: u64 = match value {
        MyValue::Bytes(b) => {
            if b.len() > 8 {
                return Err(format!("a BIT value of {} bytes", b.len()));
            }
            b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
        }
        MyValue::UInt(u) => u,
        MyValue::Int(i) => i as u64,
        other => return Err(shape("BIT", &other)),
    };
    if column.bits >= 64 || column.bits == 0 {
        Ok(Value::Numeric(n.to_string().into()))
    } else {
        i64::try_from(n)
            .map(Value::Int)
            .map_err(|_| format!("BIT value {n} wider than BIT({})", column.bits))
    }
}

/// `YYYY-MM-DD`, or `None` for a zero date or a date with a zero part (the zero-date policy:
/// NULL). Every real DATE (year ≤ 9999) is written into a stack buffer and kept inline in
/// its [`Text`]: no allocation.
fn date_text(y: u16, m: u8, d: u8) -> Option<Text> {
    if m == 0 || d == 0 {
        return None;
    }
    if y <= 9999 && m <= 99 && d <= 99 {
        let mut b = *b"0000-00-00";
        put_fixed(&mut b[0..4], u32::from(y));
        put_fixed(&mut b[5..7], u32::from(m));
        put_fixed(&mut b[8..10], u32::from(d));
        return std::str::from_utf8(&b).ok().map(Text::from);
    }
    date_text_long(y, m, d)
}

/// [`date_text`] part by part, for any parts.
fn date_text_long(y: u16, m: u8, d: u8) -> Option<Text> {
    if m == 0 || d == 0 {
        return None;
    }
    let mut out = Text::with_capacity(27);
    push_padded(&mut out, u64::from(y), 4);
    out.push('-');
    push_padded(&mut out, u64::from(m), 2);
    out.push('-');
    push_padded(&mut out, u64::from(d), 2);
    Some(out)
}

type DateParts = (u16, u8, u8, u8, u8, u8, u32);

/// `YYYY-MM-DDTHH:MM:SS[.f…]` with `fraction` digits, then `Z` when `utc` (a TIMESTAMP), or
/// `None` for a zero date. Every real DATETIME/TIMESTAMP (year ≤ 9999, parts ≤ 99,
/// µs ≤ 999999) is written at once into a stack buffer and becomes its [`Text`] in one go
/// (inline up to 24 bytes: up to DATETIME(4), TIMESTAMP(3)); any other parts the long way,
/// to the same text.
fn datetime_text((y, mo, d, h, mi, s, us): DateParts, fraction: u8, utc: bool) -> Option<Text> {
    if mo == 0 || d == 0 {
        return None;
    }
    if y <= 9999 && mo <= 99 && d <= 99 && h <= 99 && mi <= 99 && s <= 99 && us <= 999_999 {
        let mut b = *b"0000-00-00T00:00:00.000000Z";
        put_fixed(&mut b[0..4], u32::from(y));
        put_fixed(&mut b[5..7], u32::from(mo));
        put_fixed(&mut b[8..10], u32::from(d));
        put_fixed(&mut b[11..13], u32::from(h));
        put_fixed(&mut b[14..16], u32::from(mi));
        put_fixed(&mut b[17..19], u32::from(s));
        put_fixed(&mut b[20..26], us);
        let mut len = match fraction.min(6) {
            0 => 19,
            digits => 20 + usize::from(digits),
        };
        if utc {
            b[len] = b'Z';
            len += 1;
        }
        return std::str::from_utf8(&b[..len]).ok().map(Text::from);
    }
    let mut out = datetime_text_long((y, mo, d, h, mi, s, us), fraction)?;
    if utc {
        out.push('Z');
    }
    Some(out)
}

/// [`datetime_text`] part by part, for any parts.
fn datetime_text_long((y, mo, d, h, mi, s, us): DateParts, fraction: u8) -> Option<Text> {
    let mut out = date_text_long(y, mo, d)?;
    out.push('T');
    push_hms(&mut out, u64::from(h), mi, s);
    push_fraction(&mut out, us, fraction);
    Some(out)
}

/// `HH:MM:SS`, the hours at least 2 digits (more when larger).
fn push_hms(out: &mut Text, hours: u64, m: u8, s: u8) {
    push_padded(out, hours, 2);
    out.push(':');
    push_padded(out, u64::from(m), 2);
    out.push(':');
    push_padded(out, u64::from(s), 2);
}

/// `.` and the first `digits` of the 6-digit microseconds (nothing for 0 digits).
fn push_fraction(out: &mut Text, micros: u32, digits: u8) {
    if digits == 0 {
        return;
    }
    out.push('.');
    push_leading(out, u64::from(micros), 6, usize::from(digits.min(6)));
}

/// TIMESTAMP(p) in UTC, `…Z`. The result set gives it in the session zone, which
/// [`SESSION_SETUP`](crate::mysql::connection::SESSION_SETUP) pins to `+00:00`; the binlog
/// gives epoch seconds (`"1709208000"` or `"1709208000.123000"` from mysql_common,
/// [`timestamp_from_epoch`] from a row image read directly), zone-free. The zero TIMESTAMP
/// (epoch 0 in the binlog, `0000-00-00 00:00:00` in a result set) is NULL.
fn timestamp(column: &MysqlColumn, value: MyValue) -> Result<Value, String> {
    match value {
        MyValue::Date(y, mo, d, h, mi, s, us) => {
            Ok(
                datetime_text((y, mo, d, h, mi, s, us), column.fraction, true)
                    .map_or(Value::Null, Value::TimestampTz),
            )
        }
        MyValue::Bytes(b) => {
            let s = std::str::from_utf8(&b).map_err(|_| "TIMESTAMP text is not ASCII")?;
            let (secs, micros) = match s.split_once('.') {
                Some((secs, frac)) => (secs, frac),
                None => (s, "0"),
            };
            let secs: i64 = secs.parse().map_err(|_| format!("TIMESTAMP `{s}`"))?;
            let micros: u32 = format!("{micros:0<6}")[..6]
                .parse()
                .map_err(|_| format!("TIMESTAMP `{s}`"))?;
            timestamp_from_epoch(column, secs, micros)
        }
        MyValue::Int(secs) => timestamp_from_epoch(column, secs, 0),
        other => Err(shape("TIMESTAMP", &other)),
    }
}

/// A TIMESTAMP(p) of the binlog from its seconds since 1970 (UTC) and microseconds: the
/// [`Value::TimestampTz`] `…Z` with p fraction digits; epoch 0 with no microseconds (the zero
/// TIMESTAMP) is NULL. The seconds are any `i64`: a row image stores them as an unsigned
/// 32-bit number, past 2038-01-19 where a server allows it.
///
/// # Errors
/// A message when the seconds are outside chrono's range (never for a row image's).
pub fn timestamp_from_epoch(column: &MysqlColumn, secs: i64, micros: u32) -> Result<Value, String> {
    if secs == 0 && micros == 0 {
        return Ok(Value::Null);
    }
    let t = chrono::DateTime::from_timestamp(secs, micros.saturating_mul(1000))
        .ok_or_else(|| format!("TIMESTAMP {secs}.{micros:06} out of range"))?
        .naive_utc();
    let text = match u16::try_from(t.year()) {
        // Every TIMESTAMP a server can store: one stack buffer, no formatter.
        Ok(year) if year <= 9999 => datetime_text(
            (
                year,
                t.month() as u8,
                t.day() as u8,
                t.hour() as u8,
                t.minute() as u8,
                t.second() as u8,
                micros,
            ),
            column.fraction,
            true,
        ),
        _ => {
            let mut out = Text::from(t.format("%Y-%m-%dT%H:%M:%S").to_string());
            push_fraction(&mut out, micros, column.fraction);
            out.push('Z');
            Some(out)
        }
    };
    Ok(text.map_or(Value::Null, Value::TimestampTz))
}

/// TIME(p): `[-]HH:MM:SS[.f…]`, hours past 24 kept (`-838:59:59.000000`).
fn time_text(neg: bool, days: u32, h: u8, m: u8, s: u8, us: u32, fraction: u8) -> Text {
    let hours = u64::from(days) * 24 + u64::from(h);
    let mut out = Text::with_capacity(18);
    if neg {
        out.push('-');
    }
    push_hms(&mut out, hours, m, s);
    push_fraction(&mut out, us, fraction);
    out
}

/// ENUM index → member (1-based); 0 is MySQL's "error value", the empty string.
fn enum_member(column: &MysqlColumn, index: i64) -> Result<Value, String> {
    if index == 0 {
        return Ok(Value::Text("".into()));
    }
    usize::try_from(index - 1)
        .ok()
        .and_then(|i| column.members.get(i))
        .map(|m| Value::Text(m.as_str().into()))
        .ok_or_else(|| {
            format!(
                "ENUM index {index} but the column has {} members (binlog_row_metadata=FULL \
                 gives them)",
                column.members.len()
            )
        })
}

/// SET bit mask (little-endian bytes) → the members in definition order, comma-separated.
fn set_members(column: &MysqlColumn, mask: &[u8]) -> Result<Value, String> {
    let mut out = String::new();
    for (byte_i, &byte) in mask.iter().enumerate() {
        for bit in 0..8 {
            if byte & (1 << bit) == 0 {
                continue;
            }
            let i = byte_i * 8 + bit;
            let member = column.members.get(i).ok_or_else(|| {
                format!(
                    "SET bit {i} but the column has {} members (binlog_row_metadata=FULL \
                     gives them)",
                    column.members.len()
                )
            })?;
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(member);
        }
    }
    Ok(Value::Text(out.into()))
}

/// A spatial value (4-byte little-endian SRID, then WKB) → `{"srid":…,"wkb":"<base64>"}`.
fn geometry(bytes: &[u8]) -> Result<Value, String> {
    let Some((srid, wkb)) = bytes.split_first_chunk::<4>() else {
        return Err(format!(
            "a geometry of {} bytes, shorter than its SRID",
            bytes.len()
        ));
    };
    let srid = u32::from_le_bytes(*srid);
    let wkb = base64::engine::general_purpose::STANDARD.encode(wkb);
    Ok(Value::json(serde_json::json!({"srid": srid, "wkb": wkb})))
}

/// 16 bytes → `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (MariaDB 10.11's binlog holds a UUID in
/// this canonical byte order; checked for v1 and v4 UUIDs).
fn uuid_text(b: &[u8]) -> String {
    let mut out = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// A FLOAT's value as the f64 of its shortest round-trip decimal (`0.1f32` → `0.1`, not
/// `0.10000000149011612`): that decimal has at most 9 significant digits, so the f64
/// nearest to it prints back as the same decimal.
pub(crate) fn f32_to_f64(f: f32) -> f64 {
    if !f.is_finite() {
        return f64::from(f);
    }
    format!("{f}").parse::<f64>().unwrap_or(f64::from(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mysql::value::Charset;

    fn col(kind: Kind, origin: Origin) -> MysqlColumn {
        MysqlColumn::new("c", kind, origin)
    }

    fn json(column: &MysqlColumn, v: MyValue) -> String {
        let value = to_value(column, v).expect("converts");
        let mut out = Vec::new();
        faucet_core::value::json::write_value(&mut out, &value);
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn datetimes_read_the_same_by_the_short_and_the_long_way() {
        let mut next = crate::test_rng();
        for round in 0..20_000u32 {
            let parts: DateParts = (
                (next() % 10_000) as u16,
                (next() % 13) as u8,
                (next() % 32) as u8,
                (next() % 24) as u8,
                (next() % 60) as u8,
                (next() % 60) as u8,
                if round % 3 == 0 {
                    0
                } else {
                    (next() % 1_000_000) as u32
                },
            );
            for fraction in 0..=7 {
                assert_eq!(
                    datetime_text(parts, fraction, false),
                    datetime_text_long(parts, fraction),
                    "{parts:?} {fraction}"
                );
            }
        }
        assert_eq!(
            datetime_text((2024, 2, 29, 13, 45, 0, 123_000), 3, false).as_deref(),
            Some("2024-02-29T13:45:00.123")
        );
        assert_eq!(
            datetime_text((1000, 1, 1, 0, 0, 0, 1), 6, false).as_deref(),
            Some("1000-01-01T00:00:00.000001")
        );
        assert_eq!(datetime_text((2024, 0, 1, 0, 0, 0, 0), 0, false), None);
        assert_eq!(date_text(7, 3, 9).as_deref(), Some("0007-03-09"));
        assert_eq!(date_text(10_000, 3, 9).as_deref(), Some("10000-03-09"));
        // Out-of-range parts go the long way.
        assert_eq!(
            datetime_text((12_345, 1, 2, 100, 4, 5, 6), 2, false).as_deref(),
            Some("12345-01-02T100:04:05.00")
        );
    }

    #[test]
    fn numbers_are_exact() {
        let mut u = col(Kind::BigInt, Origin::ResultSet);
        u.unsigned = true;
        assert_eq!(json(&u, MyValue::UInt(u64::MAX)), "18446744073709551615");
        assert_eq!(json(&u, MyValue::Int(-1)), "18446744073709551615");
        let s = col(Kind::BigInt, Origin::ResultSet);
        assert_eq!(json(&s, MyValue::Int(i64::MIN)), "-9223372036854775808");
        let f = col(Kind::Float, Origin::ResultSet);
        assert_eq!(json(&f, MyValue::Float(0.1)), "0.1");
        assert_eq!(json(&f, MyValue::Float(3.402_823_5e38)), "3.4028235e+38");
        assert_eq!(json(&f, MyValue::Float(-1.5e-45)), "-1e-45");
        let d = col(Kind::Double, Origin::ResultSet);
        assert_eq!(json(&d, MyValue::Double(0.1)), "0.1");
        let dec = col(Kind::Decimal, Origin::ResultSet);
        assert_eq!(json(&dec, MyValue::Bytes(b"-0.0010".to_vec())), "-0.0010");
        let mut bit = col(Kind::Bit, Origin::ResultSet);
        bit.bits = 64;
        assert_eq!(
            json(&bit, MyValue::Bytes(vec![0xff; 8])),
            "18446744073709551615"
        );
        bit.bits = 3;
        assert_eq!(json(&bit, MyValue::Bytes(vec![5])), "5");
        let y = col(Kind::Year, Origin::Binlog);
        assert_eq!(json(&y, MyValue::Bytes(b"1900".to_vec())), "0");
        assert_eq!(json(&y, MyValue::Int(2155)), "2155");
    }

    #[test]
    fn fractions_are_the_first_digits_of_six() {
        for (micros, digits, expected) in [
            (0, 6, ".000000"),
            (1, 6, ".000001"),
            (123_000, 3, ".123"),
            (500_000, 1, ".5"),
            (999_999, 2, ".99"),
            (1_234_567, 3, ".123"),
        ] {
            let mut out = Text::default();
            push_fraction(&mut out, micros, digits);
            assert_eq!(out, expected, "{micros} {digits}");
        }
    }

    #[test]
    fn temporal_values() {
        let mut dt = col(Kind::DateTime, Origin::ResultSet);
        dt.fraction = 3;
        assert_eq!(
            json(&dt, MyValue::Date(2024, 2, 29, 13, 45, 0, 123_000)),
            "\"2024-02-29T13:45:00.123\""
        );
        assert_eq!(json(&dt, MyValue::Date(0, 0, 0, 0, 0, 0, 0)), "null");
        let d = col(Kind::Date, Origin::ResultSet);
        assert_eq!(
            json(&d, MyValue::Date(1, 1, 1, 0, 0, 0, 0)),
            "\"0001-01-01\""
        );
        assert_eq!(json(&d, MyValue::Date(2024, 0, 1, 0, 0, 0, 0)), "null");
        let mut ts = col(Kind::Timestamp, Origin::Binlog);
        ts.fraction = 6;
        assert_eq!(
            json(&ts, MyValue::Bytes(b"1709214300.000001".to_vec())),
            "\"2024-02-29T13:45:00.000001Z\""
        );
        assert_eq!(json(&ts, MyValue::Bytes(b"0".to_vec())), "null");
        ts.origin = Origin::ResultSet;
        assert_eq!(
            json(&ts, MyValue::Date(2024, 2, 29, 13, 45, 0, 1)),
            "\"2024-02-29T13:45:00.000001Z\""
        );
        let mut t = col(Kind::Time, Origin::ResultSet);
        t.fraction = 6;
        assert_eq!(
            json(&t, MyValue::Time(true, 34, 22, 59, 59, 0)),
            "\"-838:59:59.000000\""
        );
        t.fraction = 1;
        assert_eq!(
            json(&t, MyValue::Time(true, 0, 0, 0, 1, 500_000)),
            "\"-00:00:01.5\""
        );
    }

    #[test]
    fn strings_bytes_and_the_rest() {
        let mut b = col(Kind::Char, Origin::Binlog);
        b.collation = 63;
        b.charset = Charset::Binary;
        b.length = 4;
        assert_eq!(json(&b, MyValue::Bytes(vec![1])), "\"AQAAAA==\"");
        let mut latin1 = col(Kind::VarChar, Origin::Binlog);
        latin1.charset = Charset::from_name("latin1");
        latin1.collation = 8;
        assert_eq!(json(&latin1, MyValue::Bytes(vec![0xe9])), "\"é\"");
        let mut e = col(Kind::Enum, Origin::Binlog);
        e.members = vec!["a".into(), "b".into()];
        assert_eq!(json(&e, MyValue::Int(2)), "\"b\"");
        assert_eq!(json(&e, MyValue::Int(0)), "\"\"");
        assert!(to_value(&e, MyValue::Int(3)).is_err());
        let mut s = col(Kind::Set, Origin::Binlog);
        s.members = vec!["x".into(), "y".into(), "z".into()];
        assert_eq!(json(&s, MyValue::Bytes(vec![0b101])), "\"x,z\"");
        s.origin = Origin::ResultSet;
        assert_eq!(json(&s, MyValue::Bytes(b"x,z".to_vec())), "\"x,z\"");
        let j = col(Kind::Json, Origin::ResultSet);
        assert_eq!(
            json(&j, MyValue::Bytes(br#"{"a": [1, 2.50]}"#.to_vec())),
            r#"{"a":[1,2.50]}"#
        );
        assert!(to_value(&j, MyValue::Bytes(b"{".to_vec())).is_err());
        let g = col(Kind::Geometry, Origin::ResultSet);
        let mut point = 4326u32.to_le_bytes().to_vec();
        point.extend([1, 1, 0, 0, 0]);
        assert_eq!(
            json(&g, MyValue::Bytes(point)),
            r#"{"srid":4326,"wkb":"AQEAAAA="}"#
        );
        let u = col(Kind::Uuid, Origin::Binlog);
        let bytes: Vec<u8> = (0..16).map(|i| i * 17).collect();
        assert_eq!(
            json(&u, MyValue::Bytes(bytes)),
            "\"00112233-4455-6677-8899-aabbccddeeff\""
        );
        let i6 = col(Kind::Inet6, Origin::Binlog);
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        assert_eq!(json(&i6, MyValue::Bytes(v6.to_vec())), "\"::1\"");
        let i4 = col(Kind::Inet4, Origin::Binlog);
        assert_eq!(json(&i4, MyValue::Bytes(vec![10, 0, 0, 1])), "\"10.0.0.1\"");
        assert_eq!(json(&i4, MyValue::Bytes(vec![10])), "\"10.0.0.0\"");
        assert_eq!(json(&i4, MyValue::Bytes(vec![])), "\"0.0.0.0\"");
        assert!(to_value(&i4, MyValue::Bytes(vec![1; 5])).is_err());
        assert!(to_value(&col(Kind::Int, Origin::ResultSet), MyValue::Bytes(vec![])).is_err());
        assert_eq!(
            json(&col(Kind::Int, Origin::ResultSet), MyValue::NULL),
            "null"
        );
    }
}
