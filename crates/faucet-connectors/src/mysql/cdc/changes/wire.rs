//! How a row image's values are read: a per-column plan ([`Wire`]) chosen once per table
//! map, and the decoding of one value by it.

use mysql_async::Value as MyValue;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::ColumnType;
use mysql_common::io::ParseBuf;

use faucet_core::Value;

use crate::mysql::value::{
    Kind, MysqlColumn, decimal_bin_size, decimal_text, from_binlog, text_value, time2_hundredths,
    timestamp_from_epoch, to_value,
};

/// How one column's values are read from a row image: chosen once per table map from the
/// column's binlog type and metadata, so a row costs no per-value dispatch on them.
#[derive(Debug)]
pub(super) enum Wire {
    /// TINYINT, SMALLINT, MEDIUMINT, INT, BIGINT: a little-endian integer of `len` bytes
    /// (1, 2, 3, 4, 8): `Int` sign-extended, `UInt` when UNSIGNED, as mysql_common reads
    /// them — except that a signed MEDIUMINT is sign-extended too (mysql_common 0.37's
    /// `eat_i24_le` is not: it read -1 as 16777215, unlike SELECT).
    Int {
        /// The integer's bytes.
        len: usize,
        /// UNSIGNED.
        unsigned: bool,
    },
    /// DATETIME2 with `fsp` (0…6) fraction digits: 5 bytes, then 0…3 of fraction
    /// (mysql_common's `my_datetime_packed_from_binary`).
    DateTime2 {
        /// The table map's fraction digits.
        fsp: u8,
    },
    /// TIMESTAMP2 with `fsp` (0…6) fraction digits: the seconds since 1970 as a big-endian
    /// *unsigned* 32-bit number (MySQL's `my_timestamp_from_binary` reads them into a
    /// `uint32`; mysql_common 0.37 reads them as `i32`, wrong from 2038-01-19 03:14:08 on,
    /// which MariaDB 11.5+ stores), then 0…3 bytes of fraction as DATETIME2's.
    Timestamp2 {
        /// The table map's fraction digits.
        fsp: u8,
    },
    /// NEWDECIMAL(`precision`, `scale`): [`decimal_bin_size`] bytes, as text
    /// ([`decimal_text`]).
    Decimal {
        /// Digits in all.
        precision: usize,
        /// Digits after the point.
        scale: usize,
    },
    /// TIME(1), TIME(2): [`time2_hundredths`].
    Time2Hundredths,
    /// VARCHAR and the BLOB/TEXT types: a little-endian length of this many bytes
    /// ([`length_prefix`]), then the bytes.
    Prefixed(usize),
    /// Everything else, by mysql_common's `BinlogValue`: the real type, the table map's
    /// metadata bytes, UNSIGNED.
    Generic(ColumnType, Vec<u8>, bool),
}

impl Wire {
    /// The plan for `column`, whose binlog type is `ty` with metadata `meta`. The fast
    /// plans are taken only where the column's kind is the one the type decodes to, so every
    /// value still reaches [`from_binlog`] / [`to_value`] in the shape mysql_common gives.
    pub(super) fn of(column: &MysqlColumn, ty: ColumnType, meta: &[u8]) -> Self {
        let int = |len, kind| {
            if column.kind == kind {
                Some(Self::Int {
                    len,
                    unsigned: column.unsigned,
                })
            } else {
                None
            }
        };
        let plan = match ty {
            ColumnType::MYSQL_TYPE_TINY => int(1, Kind::TinyInt),
            ColumnType::MYSQL_TYPE_SHORT => int(2, Kind::SmallInt),
            ColumnType::MYSQL_TYPE_INT24 => int(3, Kind::MediumInt),
            ColumnType::MYSQL_TYPE_LONG => int(4, Kind::Int),
            ColumnType::MYSQL_TYPE_LONGLONG => int(8, Kind::BigInt),
            ColumnType::MYSQL_TYPE_DATETIME2 if column.kind == Kind::DateTime => {
                meta.first().map(|&fsp| Self::DateTime2 { fsp })
            }
            ColumnType::MYSQL_TYPE_TIMESTAMP2 if column.kind == Kind::Timestamp => {
                meta.first().map(|&fsp| Self::Timestamp2 { fsp })
            }
            ColumnType::MYSQL_TYPE_TIME2 if matches!(meta.first(), Some(1 | 2)) => {
                Some(Self::Time2Hundredths)
            }
            ColumnType::MYSQL_TYPE_NEWDECIMAL if column.kind == Kind::Decimal => match meta {
                [precision, scale, ..] => Some(Self::Decimal {
                    precision: usize::from(*precision),
                    scale: usize::from(*scale),
                }),
                _ => None,
            },
            _ => length_prefix(ty, meta).map(Self::Prefixed),
        };
        plan.unwrap_or_else(|| Self::Generic(ty, meta.to_vec(), column.unsigned))
    }
}

/// Why a value of a row image was not decoded.
pub(super) enum Undecoded {
    /// The image ends before the value does.
    Truncated,
    /// The bytes are not a value of the column (the message says why).
    Data(String),
}

/// One non-null value of `column` from a row image, read by its plan `wire`, by the one
/// MySQL value mapping ([`from_binlog`] / [`to_value`]). Most kinds are read here rather
/// than by mysql_common's `BinlogValue` (whose generic dispatch and allocations were most
/// of a row's decoding), to the same result:
/// * integers and DATETIME2, read into the `mysql_common::Value` mysql_common makes of them
///   ([`Wire::Int`], [`Wire::DateTime2`]);
/// * TIME(1), TIME(2), which mysql_common mis-decodes when negative ([`time2_hundredths`]);
/// * DECIMAL, its text straight from the stored digits ([`decimal_text`], inline in its
///   [`faucet_core::Text`]) instead of through mysql_common's `Decimal` and its `Display`
///   (three allocations per value): the `Value::Numeric` a SELECT's text gives;
/// * VARCHAR and the BLOB/TEXT types, whose bytes stay borrowed from the event: text goes
///   to [`text_value`] without a copy of its own (binary values are copied once, as
///   before).
pub(super) fn decode<'a>(
    column: &MysqlColumn,
    wire: &'a Wire,
    buf: &mut ParseBuf<'a>,
) -> Result<Value, Undecoded> {
    let raw: MyValue = match wire {
        Wire::Int { len, unsigned } => {
            let bytes = buf.checked_eat(*len).ok_or(Undecoded::Truncated)?;
            let bits = bytes
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            if *unsigned {
                MyValue::UInt(bits)
            } else {
                // Sign-extend from the integer's width.
                let shift = 64 - 8 * *len as u32;
                MyValue::Int(((bits << shift) as i64) >> shift)
            }
        }
        Wire::DateTime2 { fsp } => {
            let bytes = buf
                .checked_eat(5 + fraction_bytes(*fsp))
                .ok_or(Undecoded::Truncated)?;
            let packed =
                mysql_common::binlog::misc::my_datetime_packed_from_binary(bytes, u32::from(*fsp))
                    .map_err(|e| {
                        Undecoded::Data(format!("the binlog value does not decode: {e}"))
                    })?;
            mysql_common::binlog::misc::datetime_from_packed(packed)
        }
        Wire::Timestamp2 { fsp } => {
            let bytes = buf
                .checked_eat(4 + fraction_bytes(*fsp))
                .ok_or(Undecoded::Truncated)?;
            let (secs, fraction) = bytes.split_at(4);
            let secs = u32::from_be_bytes([secs[0], secs[1], secs[2], secs[3]]);
            // 0…3 big-endian bytes: hundredths, then ten-thousandths, then microseconds.
            let stored = fraction
                .iter()
                .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
            let micros = match fraction.len() {
                1 => stored * 10_000,
                2 => stored * 100,
                _ => stored,
            };
            return timestamp_from_epoch(column, i64::from(secs), micros).map_err(Undecoded::Data);
        }
        Wire::Time2Hundredths => {
            let bytes = buf.checked_eat(4).ok_or(Undecoded::Truncated)?;
            time2_hundredths([bytes[0], bytes[1], bytes[2], bytes[3]])
        }
        Wire::Decimal { precision, scale } => {
            let bytes = buf
                .checked_eat(decimal_bin_size(*precision, *scale))
                .ok_or(Undecoded::Truncated)?;
            return decimal_text(bytes, *precision, *scale)
                .map(Value::Numeric)
                .map_err(Undecoded::Data);
        }
        Wire::Prefixed(prefix) => {
            let len = buf.checked_eat(*prefix).ok_or(Undecoded::Truncated)?;
            let n = len
                .iter()
                .rev()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            let bytes = buf.checked_eat(n).ok_or(Undecoded::Truncated)?;
            if let Some(text) = text_value(column, bytes) {
                return text.map_err(Undecoded::Data);
            }
            MyValue::Bytes(bytes.to_vec())
        }
        Wire::Generic(ty, meta, unsigned) => {
            let raw: BinlogValue<'a> = buf
                .parse((*ty, &meta[..], *unsigned, false))
                .map_err(|e| Undecoded::Data(format!("the binlog value does not decode: {e}")))?;
            return from_binlog(column, raw).map_err(Undecoded::Data);
        }
    };
    to_value(column, raw).map_err(Undecoded::Data)
}

/// The bytes of fraction after a DATETIME2's or TIMESTAMP2's seconds, by its fraction digits
/// (MySQL's `my_datetime_packed_from_binary`, `my_timestamp_from_binary`).
fn fraction_bytes(fsp: u8) -> usize {
    match fsp {
        1 | 2 => 1,
        3 | 4 => 2,
        5 | 6 => 3,
        _ => 0,
    }
}

/// The bytes of the little-endian length before a VARCHAR's or a BLOB/TEXT's value, read
/// from the table map's metadata as mysql_common reads it (VARCHAR: 1 when its maximum
/// length in bytes is below 256, else 2; BLOB: the metadata byte, 1 to 4); `None` for
/// every other type.
fn length_prefix(ty: ColumnType, meta: &[u8]) -> Option<usize> {
    match ty {
        ColumnType::MYSQL_TYPE_VARCHAR | ColumnType::MYSQL_TYPE_VAR_STRING => {
            let [lo, hi, ..] = meta[..] else {
                return None;
            };
            Some(if u16::from_le_bytes([lo, hi]) < 256 {
                1
            } else {
                2
            })
        }
        ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB
        | ColumnType::MYSQL_TYPE_BLOB => match meta.first() {
            Some(&n @ 1..=4) => Some(usize::from(n)),
            _ => None,
        },
        _ => None,
    }
}
