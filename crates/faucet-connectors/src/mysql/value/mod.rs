//! MySQL/MariaDB values → [`faucet_core::Value`], one mapping for every path (a `SELECT`'s
//! binary-protocol result set and the binlog's row images), following the MySQL
//! table of docs/values.md: build a [`MysqlColumn`] per column (from a result set's column definition,
//! [`MysqlColumn::from_result_column`], or from a TABLE_MAP event, [`columns_of_table_map`]),
//! then [`to_value`] each value.
//!
//! | MySQL / MariaDB type | [`faucet_core::Value`] | JSON |
//! |---|---|---|
//! | TINYINT … BIGINT (signed), INT UNSIGNED and smaller | `Int` | `-9223372036854775808` |
//! | BIGINT UNSIGNED | `Numeric` (every value of the column, exact) | `18446744073709551615` |
//! | DECIMAL | `Numeric`, the server's digits | `-0.0010` |
//! | FLOAT | `Float` of the shortest decimal that round-trips the f32 | `0.1` |
//! | DOUBLE | `Float` | shortest round-trip |
//! | BIT(n), n < 64 / BIT(64) | `Int` / `Numeric` | the bits as an unsigned number |
//! | DATE | `Date` | `"2024-02-29"` |
//! | DATETIME(p) | `Timestamp`, p fraction digits | `"2024-02-29T13:45:00.123"` |
//! | TIMESTAMP(p) | `TimestampTz`, UTC, p digits | `"2024-02-29T12:45:00.123Z"` |
//! | TIME(p) | `Interval`, MySQL's `[-]H…H:MM:SS[.f]` text | `"-838:59:59.000000"` |
//! | YEAR | `Int` | `2024`, `0` |
//! | CHAR, VARCHAR, TEXT (any charset), ENUM, SET | `Text`, transcoded to UTF-8 | `"café"` |
//! | BINARY(n), VARBINARY, BLOB | `Bytes`, every byte | base64 |
//! | JSON (MySQL; MariaDB's `json_valid` LONGTEXT) | `Json`, compact | the value itself |
//! | MariaDB UUID, INET4, INET6 | `Text`, the server's text form | `"::1"` |
//! | GEOMETRY, POINT, … | `Json` | `{"srid":4326,"wkb":"<base64>"}` |
//!
//! Policies for values with no exact form, the same on both paths:
//! * **zero dates**: a DATE, DATETIME or TIMESTAMP that is `0000-00-00`, or has a zero month
//!   or day (`2024-00-15`, allowed without `NO_ZERO_IN_DATE`), is `Null` — it names no day;
//!   JDBC's `zeroDateTimeBehavior=convertToNull` and Debezium do the same. A year 0 with a
//!   real month and day (`0000-01-01`) is kept.
//! * **TIME** is a signed duration up to ±838:59:59 (not a time of day), so it is a
//!   `Value::Interval` holding MySQL's own text (not ISO 8601): its JSON is
//!   `"-838:59:59.000000"` (docs/values.md), and a PostgreSQL sink stores it in an `interval` column, which
//!   reads that text.
//! * **BOOLEAN** is TINYINT(1): a number, `0` / `1` (MySQL has no boolean type; the wire
//!   cannot tell TINYINT(1) from TINYINT).
//! * **YEAR 0** stays `0`; the binlog's `1900` (mysql_common adds 1900 to the stored byte,
//!   also to the stored 0) is read as 0, since YEAR cannot hold 1900.
//! * **ENUM index 0** (the "error value" of an invalid insert in non-strict mode) is `""`,
//!   as a SELECT prints it.
//! * **text that is not valid in its charset**, and charsets faucet cannot transcode (dec8,
//!   hp8, swe7, keybcs2, armscii8, geostd8, cp850, cp852, macce), are a data error naming the
//!   column — never replacement characters.
//! * **TIMESTAMP** never depends on a time zone: result sets come in the session zone, which
//!   is pinned to `+00:00` on every connection; the binlog carries epoch seconds.
//! * **FLOAT** is widened to f64 through its shortest decimal, so `0.1` stays `0.1`;
//!   `Value::Float`'s JSON writes the shortest f64 form, which is that decimal.

mod binlog;
mod charset;
mod column;
mod convert;
mod digits;
mod table_map;

pub use binlog::{decimal_bin_size, decimal_text, from_binlog, time2_hundredths};
pub use charset::{BINARY_COLLATION, Charset, Collations};
pub use column::{Kind, MysqlColumn, Origin};
pub use convert::{decimal_value, text_value, timestamp_from_epoch, to_value};
pub use table_map::columns_of_table_map;
