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
