//! [`from_binlog`]: one binlog row-image value (mysql_common's `BinlogValue`) → one
//! [`faucet_core::Value`], through the same [`super::to_value`] as a SELECT's values; only
//! MySQL's binary JSON (JSONB), which SELECT never returns, is decoded here.

use mysql_async::binlog::value::BinlogValue;

use faucet_core::{Text, Value};

use super::column::MysqlColumn;
use super::convert::to_value;

/// The value of `column` in a binlog row image.
///
/// * `BinlogValue::Value`: by [`to_value`] (the column's origin is `Origin::Binlog`).
/// * `BinlogValue::Jsonb` (MySQL's JSON type; MariaDB logs JSON as text): the JSON document.
///   MySQL-only, so untested here; a document holding an opaque (binary-typed) scalar is an
///   error, never a lossy string.
/// * `BinlogValue::JsonDiff` (partial JSON updates): an error; the reader refuses the event
///   type before this is reached.
///
/// # Errors
/// A message naming what could not be decoded.
pub fn from_binlog(column: &MysqlColumn, value: BinlogValue<'_>) -> Result<Value, String> {
    match value {
        BinlogValue::Value(v) => to_value(column, v),
        BinlogValue::Jsonb(j) => serde_json::Value::try_from(j)
            .map(Value::json)
            .map_err(|e| format!("a binary JSON value that cannot be read: {e}")),
        BinlogValue::JsonDiff(_) => Err(
            "a partial JSON update (binlog_row_value_options=PARTIAL_JSON) has no full value"
                .to_owned(),
        ),
    }
}

/// Decimal digits per 4-byte group of MySQL's binary DECIMAL.
const DIG_PER_DEC: usize = 9;
/// Bytes of a group of 0…9 leading or trailing digits.
const DIG_TO_BYTES: [usize; DIG_PER_DEC + 1] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// The bytes a DECIMAL(`precision`, `scale`) takes in a row image (MySQL's
/// `decimal_bin_size`).
pub fn decimal_bin_size(precision: usize, scale: usize) -> usize {
    let intg = precision.saturating_sub(scale);
    (intg / DIG_PER_DEC) * 4
        + DIG_TO_BYTES[intg % DIG_PER_DEC]
        + (scale / DIG_PER_DEC) * 4
        + DIG_TO_BYTES[scale % DIG_PER_DEC]
}

/// A DECIMAL(`precision`, `scale`) of a row image (`stored`: its
/// [`decimal_bin_size`] bytes) as text, written straight from the stored groups of nine
/// digits into a stack buffer and made a [`Text`] at once (inline, no allocation, up to 24
/// characters). The text is exactly mysql_common's (`Decimal::read_bin`, then its
/// `Display`), which is the server's: leading zeros dropped (`0.50`, not `00.50`), `scale`
/// fraction digits, `-` for a negative value, and a zero of scale 0 as `0`; so it is the
/// text [`to_value`] reads from mysql_common's, without its three allocations per value,
/// and always a decimal number ([`faucet_core::Value::numeric`]'s shape).
///
/// # Errors
/// A message when `stored` is not `decimal_bin_size` bytes or `scale` exceeds `precision`.
pub fn decimal_text(stored: &[u8], precision: usize, scale: usize) -> Result<Text, String> {
    let bad = || {
        format!(
            "a DECIMAL({precision},{scale}) value of {} bytes that is not one",
            stored.len()
        )
    };
    if scale > precision
        || precision > MAX_PRECISION
        || stored.is_empty()
        || stored.len() != decimal_bin_size(precision, scale)
    {
        return Err(bad());
    }
    // The first bit is set for a value ≥ 0; a negative value has every bit inverted.
    let mask: i32 = if stored[0] & 0x80 == 0 { -1 } else { 0 };
    let mut rest = stored;
    let mut flip = 0x80u8;
    // The next group of `len` bytes: big-endian, sign-extended, the sign bit cleared.
    let mut group = |len: usize| -> Result<u32, String> {
        let (bytes, tail) = rest.split_at(len);
        rest = tail;
        let mut v = i32::from((bytes[0] ^ flip) as i8);
        flip = 0;
        for &b in &bytes[1..] {
            v = (v << 8) | i32::from(b);
        }
        u32::try_from(v ^ mask)
            .ok()
            .filter(|d| *d < 1_000_000_000)
            .ok_or_else(bad)
    };
    let intg = precision - scale;
    let mut out = Ascii::default();
    if mask != 0 {
        out.push(b'-');
    }
    let mut leading = true;
    let prefix = intg % DIG_PER_DEC;
    if prefix > 0 {
        let x = group(DIG_TO_BYTES[prefix])?;
        if x != 0 {
            leading = false;
            out.push_digits(x, 0);
        }
    }
    for _ in 0..intg / DIG_PER_DEC {
        let x = group(4)?;
        if !leading {
            out.push_digits(x, DIG_PER_DEC);
        } else if x != 0 {
            leading = false;
            out.push_digits(x, 0);
        }
    }
    if leading {
        if scale == 0 {
            // mysql_common: a value with no digit left is `0`, without a sign.
            return Ok(Text::from("0"));
        }
        out.push(b'0');
    }
    if scale > 0 {
        out.push(b'.');
        for _ in 0..scale / DIG_PER_DEC {
            out.push_digits(group(4)?, DIG_PER_DEC);
        }
        let suffix = scale % DIG_PER_DEC;
        if suffix > 0 {
            out.push_digits(group(DIG_TO_BYTES[suffix])?, suffix);
        }
    }
    Ok(out.text())
}

/// The largest precision of a DECIMAL (MySQL's and MariaDB's `M`): a table map that
/// gives more is not one a server wrote.
const MAX_PRECISION: usize = 65;

/// A DECIMAL's text being written: a sign, at most [`MAX_PRECISION`] digits, a leading `0`
/// and a point fit (a push past the end is dropped, never a panic).
struct Ascii {
    buf: [u8; MAX_PRECISION + 3],
    len: usize,
}

impl Default for Ascii {
    fn default() -> Self {
        Self {
            buf: [b'0'; MAX_PRECISION + 3],
            len: 0,
        }
    }
}

impl Ascii {
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    /// `n`'s digits (n < 10⁹), zero-padded to `width` (1…9), or all of them for width 0.
    fn push_digits(&mut self, mut n: u32, width: usize) {
        let width = if width > 0 {
            width
        } else {
            let mut digits = 1;
            let mut m = n;
            while m >= 10 {
                m /= 10;
                digits += 1;
            }
            digits
        };
        let Some(dst) = self.buf.get_mut(self.len..self.len + width) else {
            return;
        };
        for b in dst.iter_mut().rev() {
            *b = b'0' + (n % 10) as u8;
            n /= 10;
        }
        self.len += width;
    }

    fn text(&self) -> Text {
        // Only ASCII is ever pushed.
        Text::from(std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default())
    }
}

/// MySQL's `TIMEF_INT_OFS`: the offset of the integer part of a binlog TIME2 value.
const TIMEF_INT_OFS: i64 = 0x80_0000;

/// A TIME(1) or TIME(2) value of a row image (MySQL 5.6's TIME2 format: 3 bytes of integer
/// part, big-endian, offset by `TIMEF_INT_OFS` = 0x800000, then 1 byte of hundredths), decoded here
/// because mysql_common 0.37's `my_time_packed_from_binary` keeps that byte in a `u32` and
/// subtracts 0x100 from it for a negative value with a fraction: a panic in a debug build,
/// a wrong value in release (checked against MariaDB 10.11 here). The arithmetic is MySQL's
/// (`my_time_packed_from_binary` in `sql-common/my_time.cc`), the result mysql_common's own
/// [`time_from_packed`](mysql_common::binlog::misc::time_from_packed), so it then goes
/// through [`from_binlog`] like every other TIME.
pub fn time2_hundredths(bytes: [u8; 4]) -> mysql_common::Value {
    let mut int_part =
        ((i64::from(bytes[0]) << 16) | (i64::from(bytes[1]) << 8) | i64::from(bytes[2]))
            - TIMEF_INT_OFS;
    let mut frac = i64::from(bytes[3]);
    if int_part < 0 && frac > 0 {
        int_part += 1;
        frac -= 0x100;
    }
    mysql_common::binlog::misc::time_from_packed((int_part << 24) + frac * 10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MySQL's binary DECIMAL of `groups` (the leading group, full integer groups, full
    /// fraction groups, the trailing group, as numbers), as the server writes it.
    fn encode(negative: bool, precision: usize, scale: usize, digits: &[u64]) -> Vec<u8> {
        let intg = precision - scale;
        let mut lens = Vec::new();
        if !intg.is_multiple_of(DIG_PER_DEC) {
            lens.push(DIG_TO_BYTES[intg % DIG_PER_DEC]);
        }
        lens.extend(std::iter::repeat_n(
            4,
            intg / DIG_PER_DEC + scale / DIG_PER_DEC,
        ));
        if !scale.is_multiple_of(DIG_PER_DEC) {
            lens.push(DIG_TO_BYTES[scale % DIG_PER_DEC]);
        }
        let mut out = Vec::new();
        for (len, d) in lens.iter().zip(digits) {
            out.extend_from_slice(&(*d as u32).to_be_bytes()[4 - len..]);
        }
        if negative {
            out.iter_mut().for_each(|b| *b = !*b);
        }
        out[0] ^= 0x80;
        out
    }

    /// The groups' digit counts of DECIMAL(precision, scale), in order.
    fn group_digits(precision: usize, scale: usize) -> Vec<u32> {
        let intg = precision - scale;
        let mut out = Vec::new();
        if !intg.is_multiple_of(DIG_PER_DEC) {
            out.push((intg % DIG_PER_DEC) as u32);
        }
        out.extend(std::iter::repeat_n(
            9,
            intg / DIG_PER_DEC + scale / DIG_PER_DEC,
        ));
        if !scale.is_multiple_of(DIG_PER_DEC) {
            out.push((scale % DIG_PER_DEC) as u32);
        }
        out
    }

    #[test]
    fn decimals_read_as_mysql_common_reads_them() {
        use mysql_common::binlog::decimal::Decimal;
        let mut next = crate::test_rng();
        let mut checked = 0;
        for precision in 1..=65 {
            for scale in 0..=precision.min(30) {
                let groups = group_digits(precision, scale);
                assert_eq!(
                    decimal_bin_size(precision, scale),
                    encode(false, precision, scale, &vec![0; groups.len()]).len()
                );
                for round in 0..12 {
                    // Zeros (leading and inner) are the interesting cases: often zero groups.
                    let digits: Vec<u64> = groups
                        .iter()
                        .map(|&n| match (round + next()) % 4 {
                            0 => 0,
                            1 => 10u64.pow(n) - 1,
                            _ => next() % 10u64.pow(n),
                        })
                        .collect();
                    let negative = round % 2 == 1;
                    let stored = encode(negative, precision, scale, &digits);
                    let expected = Decimal::read_bin(&stored[..], precision, scale, false)
                        .expect("mysql_common reads it")
                        .to_string();
                    assert_eq!(
                        decimal_text(&stored, precision, scale).as_deref(),
                        Ok(expected.as_str()),
                        "DECIMAL({precision},{scale}) {digits:?} negative {negative}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
        let text =
            |negative, p, s, digits: &[u64]| decimal_text(&encode(negative, p, s, digits), p, s);
        assert_eq!(text(false, 12, 2, &[0, 0, 1]).as_deref(), Ok("0.01"));
        assert_eq!(text(false, 12, 2, &[0, 1234, 56]).as_deref(), Ok("1234.56"));
        assert_eq!(text(true, 5, 4, &[0, 10]).as_deref(), Ok("-0.0010"));
        assert_eq!(text(true, 10, 0, &[0, 0]).as_deref(), Ok("0"));
        assert_eq!(
            text(false, 20, 0, &[12, 0, 7]).as_deref(),
            Ok("12000000000000000007")
        );
        assert!(decimal_text(&[0x80], 12, 2).is_err());
        assert!(decimal_text(&[0x80, 0xff, 0xff, 0xff, 0xff, 0], 12, 2).is_err());
    }

    #[test]
    fn negative_times_with_hundredths_decode_as_mysql_stores_them() {
        // -00:00:01.5 as TIME(1): packed -(2^24 + 500000); integer part -2, byte -50.
        assert_eq!(
            time2_hundredths([0x7f, 0xff, 0xfe, 206]),
            mysql_common::Value::Time(true, 0, 0, 0, 1, 500_000)
        );
        // +00:00:01.25 as TIME(2).
        assert_eq!(
            time2_hundredths([0x80, 0x00, 0x01, 25]),
            mysql_common::Value::Time(false, 0, 0, 0, 1, 250_000)
        );
        // -838:59:59.00: no fraction, no borrow.
        let hms = (838_i64 << 12) | (59 << 6) | 59;
        let int = u32::try_from(TIMEF_INT_OFS - hms).expect("fits");
        let [_, a, b, c] = int.to_be_bytes();
        assert_eq!(
            time2_hundredths([a, b, c, 0]),
            mysql_common::Value::Time(true, 34, 22, 59, 59, 0)
        );
    }
}
