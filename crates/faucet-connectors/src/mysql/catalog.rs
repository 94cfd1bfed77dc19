//! What the catalog says about a table's columns that the wire does not: the declared type
//! (MariaDB's UUID, INET4 and INET6 arrive as bytes, both in result sets and in the binlog)
//! and MariaDB's JSON (a LONGTEXT with a `json_valid` CHECK). Shared by the `mysql` query
//! source and `mysql-cdc`, which refine their [`MysqlColumn`]s with [`declare`].

use mysql_async::prelude::Queryable as _;

use faucet_core::FaucetError;

use super::connection::MysqlConnection;
use super::table::quote_ident;
use super::value::MysqlColumn;

/// One column as `information_schema` declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeclaredColumn {
    /// `COLUMN_NAME`.
    pub(crate) name: String,
    /// `DATA_TYPE`, lower case (`uuid`, `int`, `longtext`).
    pub(crate) data_type: String,
    /// `IS_NULLABLE = 'YES'`.
    pub(crate) nullable: bool,
    /// MariaDB JSON: a `CHECK (json_valid(`name`))` on the table.
    pub(crate) json: bool,
}

/// The columns of `db.table` in ordinal order (empty when the table does not exist).
///
/// # Errors
/// The connection's error for a failing catalog query.
pub(crate) async fn declared_columns(
    conn: &mut mysql_async::Conn,
    connection: &MysqlConnection,
    db: &str,
    table: &str,
) -> Result<Vec<DeclaredColumn>, FaucetError> {
    let what = format!("reading the catalog of {db}.{table}");
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT COLUMN_NAME, LOWER(DATA_TYPE), IS_NULLABLE FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        .await
        .map_err(|e| connection.error(&what, e))?;
    let text = |r: &mysql_async::Row, i: usize| {
        r.get_opt::<Option<String>, _>(i)
            .and_then(Result::ok)
            .flatten()
            .unwrap_or_default()
    };
    // MariaDB's JSON is LONGTEXT with CHECK (json_valid(`c`)); MySQL's CHECK_CONSTRAINTS has
    // no TABLE_NAME (and its JSON is a type of its own), so a failure here is ignored.
    let checks: Vec<String> = conn
        .exec::<mysql_async::Row, _, _>(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS \
             WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?",
            (db, table),
        )
        .await
        .map(|rows| rows.iter().map(|r| text(r, 0)).collect())
        .unwrap_or_default();
    Ok(rows
        .iter()
        .map(|r| {
            let name = text(r, 0);
            let clause = format!("json_valid({})", quote_ident(&name));
            DeclaredColumn {
                json: checks.iter().any(|c| c.trim() == clause),
                data_type: text(r, 1),
                nullable: text(r, 2) == "YES",
                name,
            }
        })
        .collect())
}

/// `model` refined by its declared column of the same name, if any.
pub(crate) fn declare(mut model: MysqlColumn, declared: &[DeclaredColumn]) -> MysqlColumn {
    if let Some(d) = declared.iter().find(|d| d.name == model.name) {
        model = model.with_declared_type(&d.data_type);
        if d.json {
            model = model.with_declared_type("json");
        }
    }
    model
}
