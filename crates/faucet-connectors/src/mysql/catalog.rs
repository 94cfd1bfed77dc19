//! What `information_schema` says about a table, for every MySQL connector: declared
//! types (MariaDB's UUID/INET4/INET6/JSON, which neither a result set nor the binlog names),
//! nullability, the primary key and unique indexes.

use mysql_async::prelude::Queryable as _;

use faucet_core::FaucetError;

use crate::mysql::connection::{MysqlConnection, convert_rows};
use crate::mysql::table::quote_ident;
use crate::mysql::value::MysqlColumn;

/// What `information_schema` says about a table: its columns' declared types and
/// nullability, MariaDB JSON columns, the primary key and unique indexes. The binlog does not
/// say that a MariaDB column is UUID, INET4, INET6 or JSON: a binlog reader must
/// [`TableCatalog::declare`] its TABLE_MAP columns too (and reload after DDL).
#[derive(Debug, Clone, Default)]
pub struct TableCatalog {
    /// (column, DATA_TYPE lower case, nullable), in ordinal order.
    pub columns: Vec<(String, String, bool)>,
    /// Columns whose `json_valid` CHECK makes them MariaDB JSON.
    pub json: Vec<String>,
    /// The primary key's columns, in key order.
    pub primary_key: Option<Vec<String>>,
    /// Column sets of the primary key and every unique index without a prefix part.
    pub unique_sets: Vec<Vec<String>>,
}

impl TableCatalog {
    /// Reads the catalog of `db`.`table` (no columns: the table does not exist or is not
    /// visible to the user).
    ///
    /// # Errors
    /// [`FaucetError::Read`] / [`FaucetError::Connect`] from [`MysqlConnection::error`].
    pub async fn load(
        conn: &mut mysql_async::Conn,
        connection: &MysqlConnection,
        db: &str,
        table: &str,
    ) -> Result<Self, FaucetError> {
        let what = format!("reading the catalog of {db}.{table}");
        let err = |e| connection.error(&what, e);
        let bad =
            |m: String| FaucetError::read(connection.connector(), format!("{what}: {m}"), None);
        let columns: Vec<mysql_async::Row> = conn
            .exec(
                "SELECT COLUMN_NAME, LOWER(DATA_TYPE), IS_NULLABLE FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                (db, table),
            )
            .await
            .map_err(err)?;
        let columns = convert_rows::<(String, String, String)>(columns).map_err(bad)?;
        // MariaDB's JSON is LONGTEXT with CHECK (json_valid(`c`)); MySQL's CHECK_CONSTRAINTS
        // has no TABLE_NAME (and its JSON is a type of its own), so a failure here is ignored.
        let checks: Vec<String> = conn
            .exec::<mysql_async::Row, _, _>(
                "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS \
                 WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?",
                (db, table),
            )
            .await
            .ok()
            .and_then(|rows| convert_rows::<(String,)>(rows).ok())
            .unwrap_or_default()
            .into_iter()
            .map(|(c,)| c)
            .collect();
        let json = columns
            .iter()
            .filter(|(name, _, _)| {
                let clause = format!("json_valid({})", quote_ident(name));
                checks.iter().any(|c| c.trim() == clause)
            })
            .map(|(name, _, _)| name.clone())
            .collect();
        let stats: Vec<mysql_async::Row> = conn
            .exec(
                "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME, SUB_PART FROM \
                 information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
                 ORDER BY INDEX_NAME, SEQ_IN_INDEX",
                (db, table),
            )
            .await
            .map_err(err)?;
        let stats = convert_rows::<(String, i64, String, Option<i64>)>(stats).map_err(bad)?;
        let mut primary_key = None;
        let mut unique_sets = Vec::new();
        let mut i = 0;
        while i < stats.len() {
            let index = &stats[i].0;
            let mut cols = Vec::new();
            let mut usable = stats[i].1 == 0;
            while i < stats.len() && &stats[i].0 == index {
                cols.push(stats[i].2.clone());
                usable &= stats[i].3.is_none();
                i += 1;
            }
            if usable {
                if index == "PRIMARY" {
                    primary_key = Some(cols.clone());
                }
                unique_sets.push(cols);
            }
        }
        Ok(Self {
            columns: columns
                .into_iter()
                .map(|(n, t, null)| (n, t, null == "YES"))
                .collect(),
            json,
            primary_key,
            unique_sets,
        })
    }

    /// `column` with its declared type applied ([`MysqlColumn::with_declared_type`]; a
    /// `json_valid` check counts as `json`).
    pub fn declare(&self, column: MysqlColumn) -> MysqlColumn {
        let mut column = column;
        if let Some((_, data_type, _)) = self.columns.iter().find(|(n, _, _)| *n == column.name) {
            column = column.with_declared_type(data_type);
        }
        if self.json.contains(&column.name) {
            column = column.with_declared_type("json");
        }
        column
    }
}

/// The facts of one column that decide which values it holds exactly (the `mysql` sink's
/// checks of what MariaDB would convert silently, `sink/encode.rs`), from
/// `information_schema.COLUMNS`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnPrecision {
    /// COLUMN_NAME.
    pub name: String,
    /// DATA_TYPE, lower case (`datetime`, `binary`, …).
    pub data_type: String,
    /// COLUMN_TYPE as the catalog spells it (`datetime(3)`, `binary(16)`, `bigint(20)
    /// unsigned`, `enum('A','b')`: MariaDB writes type names in lower case, ENUM and SET
    /// members as declared); `canonical_type` (this module) gives the table maps' spelling.
    pub column_type: String,
    /// CHARACTER_MAXIMUM_LENGTH: characters of a CHAR/VARCHAR, bytes of a BINARY/VARBINARY.
    pub char_length: Option<u64>,
    /// NUMERIC_PRECISION: digits of a DECIMAL, bits of a BIT.
    pub numeric_precision: Option<u64>,
    /// NUMERIC_SCALE: fraction digits of a DECIMAL.
    pub numeric_scale: Option<u64>,
    /// DATETIME_PRECISION: fraction digits of a DATETIME, TIMESTAMP or TIME (0 to 6).
    pub datetime_precision: Option<u64>,
    /// NOT NULL without a default, neither AUTO_INCREMENT nor generated: an INSERT must give
    /// it a value.
    pub required: bool,
}

/// The [`ColumnPrecision`] of every column of `db`.`table`, in ordinal order (empty: no such
/// table, or not visible to the user).
///
/// # Errors
/// [`FaucetError::Read`] / [`FaucetError::Connect`] from [`MysqlConnection::error`].
pub async fn column_precisions(
    conn: &mut mysql_async::Conn,
    connection: &MysqlConnection,
    db: &str,
    table: &str,
) -> Result<Vec<ColumnPrecision>, FaucetError> {
    let what = format!("reading the column types of {db}.{table}");
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT COLUMN_NAME, LOWER(DATA_TYPE), COLUMN_TYPE, \
             CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, \
             IS_NULLABLE = 'NO' AND COLUMN_DEFAULT IS NULL \
             AND EXTRA NOT LIKE '%auto_increment%' AND EXTRA NOT LIKE '%GENERATED%' \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        .await
        .map_err(|e| connection.error(&what, e))?;
    type Facts = (
        String,
        String,
        String,
        Option<u64>,
        Option<u64>,
        Option<u64>,
        Option<u64>,
        bool,
    );
    let rows = convert_rows::<Facts>(rows)
        .map_err(|m| FaucetError::read(connection.connector(), format!("{what}: {m}"), None))?;
    Ok(rows
        .into_iter()
        .map(|f| ColumnPrecision {
            name: f.0,
            data_type: f.1,
            column_type: f.2,
            char_length: f.3,
            numeric_precision: f.4,
            numeric_scale: f.5,
            datetime_precision: f.6,
            required: f.7,
        })
        .collect())
}

/// Each column of `db`.`table` with its type in the spelling of the binlog's table maps
/// ([`canonical_type`] of its `COLUMN_TYPE`, read by [`column_precisions`]), in ordinal order
/// (empty: no such table, or not visible to the user).
///
/// # Errors
/// As [`column_precisions`].
pub(crate) async fn spelled_types(
    conn: &mut mysql_async::Conn,
    connection: &MysqlConnection,
    db: &str,
    table: &str,
) -> Result<Vec<(String, String)>, FaucetError> {
    Ok(column_precisions(conn, connection, db, table)
        .await?
        .into_iter()
        .map(|c| {
            let spelled = canonical_type(&c.column_type);
            (c.name, spelled)
        })
        .collect())
}

/// A type as `information_schema.COLUMNS.COLUMN_TYPE` spells it (`int(11)`, `int(10) unsigned
/// zerofill`, `year(4)`, `float(7,3)`, `point`), in the spelling the binlog's table maps give
/// the same type (`mysql-cdc`'s schema shapes, `cdc::shapes::type_spelling`: `int`, `int
/// unsigned`, `year`, `float`, `geometry`). What is no type is dropped — integer display
/// widths, ZEROFILL (which implies UNSIGNED), YEAR's width, FLOAT/DOUBLE's (M,D) and
/// signedness (the table map has neither) — and a spatial type is `geometry` (the table map
/// says no more). Every other spelling is kept as given (`varchar(20)`, `decimal(10,2)
/// unsigned`, `datetime(6)`, `enum('A','b')`: members keep their case), so is a spelling of
/// another system (`character varying(20)`). The type names are compared ignoring case.
pub(crate) fn canonical_type(column_type: &str) -> String {
    let t = column_type.trim();
    let lower = t.to_ascii_lowercase();
    let (cut, zerofill) = match lower.strip_suffix(" zerofill") {
        Some(b) => (b.trim_end().len(), true),
        None => (lower.len(), false),
    };
    let unsigned = zerofill || lower[..cut].ends_with(" unsigned");
    let cut = if lower[..cut].ends_with(" unsigned") {
        lower[..cut].trim_end_matches(" unsigned").trim_end().len()
    } else {
        cut
    };
    let base = &lower[..cut];
    let name = base.split_once('(').map_or(base, |(n, _)| n.trim_end());
    let u = if unsigned { " unsigned" } else { "" };
    match name {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => format!("{name}{u}"),
        "year" | "float" | "double" => name.to_owned(),
        "point" | "linestring" | "polygon" | "multipoint" | "multilinestring" | "multipolygon"
        | "geometrycollection" | "geomcollection" => "geometry".to_owned(),
        _ if zerofill => format!("{}{u}", &t[..cut]),
        _ => t.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::canonical_type;

    #[test]
    fn column_types_are_spelled_as_the_table_maps_spell_them() {
        for (column_type, spelled) in [
            ("int(11)", "int"),
            ("INT(10) UNSIGNED", "int unsigned"),
            ("int(5) unsigned zerofill", "int unsigned"),
            ("tinyint(1)", "tinyint"),
            ("bigint(20) unsigned", "bigint unsigned"),
            ("year(4)", "year"),
            ("float(7,3)", "float"),
            ("double unsigned", "double"),
            ("point", "geometry"),
            ("decimal(10,2) unsigned zerofill", "decimal(10,2) unsigned"),
            ("varchar(20)", "varchar(20)"),
            ("decimal(10,2) unsigned", "decimal(10,2) unsigned"),
            ("datetime(6)", "datetime(6)"),
            ("enum('A','it''s')", "enum('A','it''s')"),
            ("character varying(20)", "character varying(20)"),
            ("int", "int"),
        ] {
            assert_eq!(canonical_type(column_type), spelled, "{column_type}");
        }
    }
}
