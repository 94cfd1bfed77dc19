//! [`from_binlog`]: one binlog row-image value (mysql_common's `BinlogValue`) → one
//! [`faucet_core::Value`], through the same [`super::to_value`] as a SELECT's values; only
//! MySQL's binary JSON (JSONB), which SELECT never returns, is decoded here.

use mysql_async::binlog::value::BinlogValue;

use faucet_core::Value;

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

/// MySQL's `TIMEF_INT_OFS`: the offset of the integer part of a binlog TIME2 value.
const TIMEF_INT_OFS: i64 = 0x80_0000;

/// A TIME(1) or TIME(2) value of a row image (MySQL 5.6's TIME2 format: 3 bytes of integer
/// part, big-endian, offset by `TIMEF_INT_OFS` = 0x800000, then 1 byte of hundredths), decoded here
/// because mysql_common 0.37's `my_time_packed_from_binary` keeps that byte in a `u32` and
/// subtracts 0x100 from it for a negative value with a fraction: a panic in a debug build,
/// a wrong value in release (shared/notes/mysql.md). The arithmetic is MySQL's
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
