//! [`MysqlColumn`]: what decoding a column's values needs, built either from a result set's
//! column definition ([`MysqlColumn::from_result_column`]) or from a binlog TABLE_MAP event's
//! per-column type, metadata bytes, signedness and charset ([`MysqlColumn::from_binlog`]),
//! so both paths decode through the one [`super::to_value`].

use mysql_async::consts::{ColumnFlags, ColumnType};

use faucet_core::DataType;

use super::charset::{BINARY_COLLATION, Charset, Collations};

/// The logical MySQL/MariaDB type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// TINYINT (1 byte).
    TinyInt,
    /// SMALLINT (2 bytes).
    SmallInt,
    /// MEDIUMINT (3 bytes).
    MediumInt,
    /// INT (4 bytes).
    Int,
    /// BIGINT (8 bytes).
    BigInt,
    /// FLOAT (32-bit).
    Float,
    /// DOUBLE.
    Double,
    /// DECIMAL / NUMERIC.
    Decimal,
    /// BIT(n), `bits` = n.
    Bit,
    /// DATE.
    Date,
    /// DATETIME(p).
    DateTime,
    /// TIMESTAMP(p).
    Timestamp,
    /// TIME(p).
    Time,
    /// YEAR.
    Year,
    /// CHAR(n) / BINARY(n): fixed length.
    Char,
    /// VARCHAR / VARBINARY.
    VarChar,
    /// TINY/MEDIUM/LONG TEXT and BLOB.
    Blob,
    /// ENUM.
    Enum,
    /// SET.
    Set,
    /// JSON (MySQL's type; MariaDB's JSON is LONGTEXT, recognised from the table's
    /// `json_valid` check, see [`MysqlColumn::with_declared_type`]).
    Json,
    /// GEOMETRY, POINT, … (4-byte SRID + WKB).
    Geometry,
    /// MariaDB UUID.
    Uuid,
    /// MariaDB INET4.
    Inet4,
    /// MariaDB INET6.
    Inet6,
    /// The NULL type of `SELECT NULL`.
    Null,
}

/// Where the values of a column come from: the two paths give some types in different raw
/// shapes, decoded to the same [`faucet_core::Value`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A binary-protocol result set (a prepared `SELECT`).
    ResultSet,
    /// A binlog row image (mysql_common's `BinlogValue::Value`): TIMESTAMP as epoch seconds
    /// text, YEAR as `1900 + n`, ENUM as its index, SET as a bit mask, BINARY(n) without its
    /// trailing zero bytes, UUID/INET as their stored bytes.
    Binlog,
}

/// One column, as far as decoding needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MysqlColumn {
    /// The column name.
    pub name: String,
    /// The logical type.
    pub kind: Kind,
    /// UNSIGNED (integers).
    pub unsigned: bool,
    /// The collation id of the bytes (63 = binary).
    pub collation: u16,
    /// The charset of that collation.
    pub charset: Charset,
    /// The widest character of that charset in bytes ([`Collations::max_len`]): a `CHAR(n)`
    /// or `VARCHAR(n)` is `n × max_len` bytes long.
    pub max_len: u8,
    /// CHAR/BINARY(n): the length in bytes (BINARY(n) values are padded back to it with
    /// zero bytes); 0 when unknown.
    pub length: u32,
    /// DATETIME/TIMESTAMP/TIME(p): p, the fraction digits (0..=6).
    pub fraction: u8,
    /// BIT(n): n.
    pub bits: u16,
    /// ENUM/SET: the members in definition order (needed for binlog values).
    pub members: Vec<String>,
    /// Where the values come from.
    pub origin: Origin,
}

impl MysqlColumn {
    /// A column of `kind` with everything else at its default (signed, utf8mb4, length and
    /// fraction 0, no members).
    pub fn new(name: impl Into<String>, kind: Kind, origin: Origin) -> Self {
        Self {
            name: name.into(),
            kind,
            unsigned: false,
            collation: 45,
            charset: Charset::Utf8,
            max_len: 4,
            length: 0,
            fraction: 0,
            bits: 0,
            members: Vec::new(),
            origin,
        }
    }

    /// The model of a result-set column (binary protocol).
    ///
    /// # Errors
    /// A message naming the type when faucet cannot decode it (VECTOR, an unknown type).
    pub fn from_result_column(
        column: &mysql_async::Column,
        collations: &Collations,
    ) -> Result<Self, String> {
        let flags = column.flags();
        let ty = column.column_type();
        let kind = match ty {
            ColumnType::MYSQL_TYPE_STRING if flags.contains(ColumnFlags::ENUM_FLAG) => Kind::Enum,
            ColumnType::MYSQL_TYPE_STRING if flags.contains(ColumnFlags::SET_FLAG) => Kind::Set,
            other => kind_of(other)?,
        };
        let mut c = Self::new(column.name_str(), kind, Origin::ResultSet);
        c.unsigned = flags.contains(ColumnFlags::UNSIGNED_FLAG);
        c.set_collation(column.character_set(), collations);
        c.length = column.column_length();
        if matches!(kind, Kind::DateTime | Kind::Timestamp | Kind::Time) {
            c.fraction = column.decimals().min(6);
        }
        if kind == Kind::Bit {
            c.bits = u16::try_from(column.column_length()).unwrap_or(64);
        }
        Ok(c)
    }

    /// The model of a column of a binlog TABLE_MAP event: `column_type` and `meta` are
    /// `TableMapEvent::get_column_type(i)` / `get_column_metadata(i)`; `unsigned`,
    /// `collation` and `members` come from its optional metadata (`binlog_row_metadata=FULL`:
    /// signedness, column charset, ENUM/SET string values), `name` from its column names.
    ///
    /// # Errors
    /// A message naming the type when faucet cannot decode it.
    pub fn from_binlog(
        name: impl Into<String>,
        column_type: ColumnType,
        meta: &[u8],
        unsigned: bool,
        collation: u16,
        members: Vec<String>,
        collations: &Collations,
    ) -> Result<Self, String> {
        let byte = |i: usize| meta.get(i).copied().unwrap_or(0);
        let mut length = 0;
        let kind = match column_type {
            ColumnType::MYSQL_TYPE_STRING => {
                // meta[0] is the real type (ENUM/SET/STRING), with a long CHAR's length bits
                // folded in (mysql_common `BinlogValue`, MySQL bug #37426).
                let (b0, b1) = (byte(0), byte(1));
                let real = if (b0 & 0x30) != 0x30 { b0 | 0x30 } else { b0 };
                length = if (b0 & 0x30) != 0x30 {
                    u32::from(b1) | (u32::from((b0 & 0x30) ^ 0x30) << 4)
                } else {
                    u32::from(b1)
                };
                match real {
                    r if r == ColumnType::MYSQL_TYPE_ENUM as u8 => Kind::Enum,
                    r if r == ColumnType::MYSQL_TYPE_SET as u8 => Kind::Set,
                    _ => Kind::Char,
                }
            }
            other => kind_of(other)?,
        };
        let mut c = Self::new(name, kind, Origin::Binlog);
        c.unsigned = unsigned;
        c.set_collation(collation, collations);
        c.length = length;
        c.members = members;
        match column_type {
            ColumnType::MYSQL_TYPE_TIMESTAMP2
            | ColumnType::MYSQL_TYPE_DATETIME2
            | ColumnType::MYSQL_TYPE_TIME2 => c.fraction = byte(0).min(6),
            ColumnType::MYSQL_TYPE_BIT => c.bits = u16::from(byte(1)) * 8 + u16::from(byte(0)),
            _ => {}
        }
        Ok(c)
    }

    fn set_collation(&mut self, collation: u16, collations: &Collations) {
        self.collation = collation;
        self.charset = collations.charset(collation);
        self.max_len = collations.max_len(collation);
    }

    /// Refines the kind from the declared type of the column in the catalog
    /// (`information_schema.COLUMNS.DATA_TYPE`, lower case): MariaDB's `uuid`, `inet4`,
    /// `inet6`, and `json` (MariaDB's JSON is a LONGTEXT with a `json_valid` check, so the
    /// wire cannot tell). Other declared types leave the kind as the wire says.
    #[must_use]
    pub fn with_declared_type(mut self, data_type: &str) -> Self {
        match data_type {
            "uuid" => self.kind = Kind::Uuid,
            "inet4" => self.kind = Kind::Inet4,
            "inet6" => self.kind = Kind::Inet6,
            "json" => self.kind = Kind::Json,
            _ => {}
        }
        self
    }

    /// Whether the bytes are binary (collation 63), not text.
    pub fn is_binary(&self) -> bool {
        self.collation == BINARY_COLLATION || !self.charset.is_text()
    }

    /// The [`DataType`] of every value [`super::to_value`] makes for this column.
    pub fn data_type(&self) -> DataType {
        match self.kind {
            Kind::BigInt if self.unsigned => DataType::Numeric,
            Kind::TinyInt
            | Kind::SmallInt
            | Kind::MediumInt
            | Kind::Int
            | Kind::BigInt
            | Kind::Year => DataType::Int,
            Kind::Bit if self.bits >= 64 || self.bits == 0 => DataType::Numeric,
            Kind::Bit => DataType::Int,
            Kind::Float | Kind::Double => DataType::Float,
            Kind::Decimal => DataType::Numeric,
            Kind::Date => DataType::Date,
            Kind::DateTime => DataType::Timestamp,
            Kind::Timestamp => DataType::TimestampTz,
            Kind::Time => DataType::Interval,
            Kind::Char | Kind::VarChar | Kind::Blob if self.is_binary() => DataType::Bytes,
            Kind::Char
            | Kind::VarChar
            | Kind::Blob
            | Kind::Enum
            | Kind::Set
            | Kind::Uuid
            | Kind::Inet4
            | Kind::Inet6 => DataType::Text,
            Kind::Json | Kind::Geometry => DataType::Json,
            Kind::Null => DataType::Unknown,
        }
    }
}

/// The kind of a wire/binlog type code (ENUM/SET inside STRING are resolved by the callers).
fn kind_of(ty: ColumnType) -> Result<Kind, String> {
    use ColumnType as T;
    Ok(match ty {
        T::MYSQL_TYPE_TINY => Kind::TinyInt,
        T::MYSQL_TYPE_SHORT => Kind::SmallInt,
        T::MYSQL_TYPE_INT24 => Kind::MediumInt,
        T::MYSQL_TYPE_LONG => Kind::Int,
        T::MYSQL_TYPE_LONGLONG => Kind::BigInt,
        T::MYSQL_TYPE_FLOAT => Kind::Float,
        T::MYSQL_TYPE_DOUBLE => Kind::Double,
        T::MYSQL_TYPE_DECIMAL | T::MYSQL_TYPE_NEWDECIMAL => Kind::Decimal,
        T::MYSQL_TYPE_BIT => Kind::Bit,
        T::MYSQL_TYPE_DATE | T::MYSQL_TYPE_NEWDATE => Kind::Date,
        T::MYSQL_TYPE_DATETIME | T::MYSQL_TYPE_DATETIME2 => Kind::DateTime,
        T::MYSQL_TYPE_TIMESTAMP | T::MYSQL_TYPE_TIMESTAMP2 => Kind::Timestamp,
        T::MYSQL_TYPE_TIME | T::MYSQL_TYPE_TIME2 => Kind::Time,
        T::MYSQL_TYPE_YEAR => Kind::Year,
        T::MYSQL_TYPE_STRING => Kind::Char,
        T::MYSQL_TYPE_VARCHAR | T::MYSQL_TYPE_VAR_STRING => Kind::VarChar,
        T::MYSQL_TYPE_TINY_BLOB
        | T::MYSQL_TYPE_MEDIUM_BLOB
        | T::MYSQL_TYPE_LONG_BLOB
        | T::MYSQL_TYPE_BLOB => Kind::Blob,
        T::MYSQL_TYPE_ENUM => Kind::Enum,
        T::MYSQL_TYPE_SET => Kind::Set,
        T::MYSQL_TYPE_JSON => Kind::Json,
        T::MYSQL_TYPE_GEOMETRY => Kind::Geometry,
        T::MYSQL_TYPE_NULL => Kind::Null,
        other => return Err(format!("column type {other:?} is not supported by faucet")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binlog_metadata_shapes() {
        let c = Collations::builtin();
        // BINARY(4): STRING, real type 0xfe, length 4, collation 63.
        let bin = MysqlColumn::from_binlog(
            "b",
            ColumnType::MYSQL_TYPE_STRING,
            &[0xfe, 4],
            false,
            63,
            vec![],
            &c,
        )
        .expect("ok");
        assert_eq!(
            (bin.kind, bin.length, bin.is_binary()),
            (Kind::Char, 4, true)
        );
        assert_eq!(bin.data_type(), DataType::Bytes);
        // CHAR(255) utf8mb4 = 1020 bytes: the high length bits folded into meta[0].
        let long = MysqlColumn::from_binlog(
            "c",
            ColumnType::MYSQL_TYPE_STRING,
            &[0xce, 0xfc],
            false,
            45,
            vec![],
            &c,
        )
        .expect("ok");
        assert_eq!((long.kind, long.length), (Kind::Char, 1020));
        let e = MysqlColumn::from_binlog(
            "e",
            ColumnType::MYSQL_TYPE_STRING,
            &[0xf7, 1],
            false,
            45,
            vec!["a".into(), "b".into()],
            &c,
        )
        .expect("ok");
        assert_eq!(e.kind, Kind::Enum);
        let set = MysqlColumn::from_binlog(
            "s",
            ColumnType::MYSQL_TYPE_STRING,
            &[0xf8, 1],
            false,
            45,
            vec![],
            &c,
        )
        .expect("ok");
        assert_eq!(set.kind, Kind::Set);
        let bit = MysqlColumn::from_binlog(
            "bit",
            ColumnType::MYSQL_TYPE_BIT,
            &[0, 8],
            false,
            63,
            vec![],
            &c,
        )
        .expect("ok");
        assert_eq!((bit.bits, bit.data_type()), (64, DataType::Numeric));
        let t = MysqlColumn::from_binlog(
            "t",
            ColumnType::MYSQL_TYPE_TIME2,
            &[3],
            false,
            63,
            vec![],
            &c,
        )
        .expect("ok");
        assert_eq!((t.kind, t.fraction), (Kind::Time, 3));
        let u = MysqlColumn::from_binlog(
            "u",
            ColumnType::MYSQL_TYPE_LONGLONG,
            &[],
            true,
            63,
            vec![],
            &c,
        )
        .expect("ok");
        assert_eq!(u.data_type(), DataType::Numeric);
        assert!(
            MysqlColumn::from_binlog(
                "v",
                ColumnType::MYSQL_TYPE_VECTOR,
                &[],
                false,
                63,
                vec![],
                &c
            )
            .is_err()
        );
        let j = MysqlColumn::new("j", Kind::Blob, Origin::Binlog).with_declared_type("json");
        assert_eq!(j.data_type(), DataType::Json);
    }
}
