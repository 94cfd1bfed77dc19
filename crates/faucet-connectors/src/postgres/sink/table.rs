//! The target table: what the catalog says about it, creating it from a page
//! (`create_table: true`), and the session's staging table for upserts.

use sqlx::Executor as _;
use sqlx::postgres::PgConnection;

use crate::sql::ident::quote_ident;
use faucet_core::{FaucetError, Page};

use crate::postgres::config::CONNECTOR;
use crate::postgres::ident::{MAX_IDENT_BYTES, TableName};
use crate::postgres::types::sql_type_of;

/// The staging table of an upsert session (`pg_temp`, emptied before every use).
pub(crate) const STAGE: &str = "pg_temp.faucet_stage";

/// An existing target table.
#[derive(Debug, Clone)]
pub(crate) struct TargetTable {
    /// Its column names, in table order.
    pub(crate) columns: Vec<String>,
    /// Their types (`format_type`: `bigint`, `character varying(20)`), in table order.
    pub(crate) types: Vec<String>,
    /// Whether each is `NOT NULL`, in table order.
    pub(crate) not_null: Vec<bool>,
}

pub(crate) fn write_err(message: String, e: sqlx::Error) -> FaucetError {
    FaucetError::write(CONNECTOR, message, Some(Box::new(e)))
}

/// Runs `create` (a `CREATE TABLE IF NOT EXISTS` of a table runs share, such as the commit
/// token and fence tables) outside any transaction; another run creating it at the same
/// moment ([`crate::postgres::failure::is_concurrent_create`]) counts as created.
///
/// # Errors
/// [`FaucetError::Write`] naming `what` (`the commit token table shop.faucet_commit_tokens`).
pub(crate) async fn create_shared(
    conn: &mut PgConnection,
    create: &str,
    what: &str,
) -> Result<(), FaucetError> {
    match sqlx::Executor::execute(&mut *conn, create).await {
        Ok(_) => Ok(()),
        Err(e) if crate::postgres::failure::is_concurrent_create(&e) => {
            tracing::debug!(%what, "created at the same moment by another run");
            Ok(())
        }
        Err(e) => Err(write_err(format!("cannot create {what}"), e)),
    }
}

/// The table `name`, or `None` when it does not exist.
///
/// # Errors
/// [`FaucetError::Write`] when the catalog cannot be read.
pub(crate) async fn load(
    conn: &mut PgConnection,
    name: &TableName,
) -> Result<Option<TargetTable>, FaucetError> {
    let err = |e| write_err(format!("cannot look up table {name}"), e);
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(name.quoted())
        .fetch_one(&mut *conn)
        .await
        .map_err(err)?;
    if exists.is_none() {
        return Ok(None);
    }
    let rows: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT attname::text, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute \
         WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    .bind(name.quoted())
    .fetch_all(&mut *conn)
    .await
    .map_err(err)?;
    let mut table = TargetTable {
        columns: Vec::with_capacity(rows.len()),
        types: Vec::with_capacity(rows.len()),
        not_null: Vec::with_capacity(rows.len()),
    };
    for (column, ty, not_null) in rows {
        table.columns.push(column);
        table.types.push(ty);
        table.not_null.push(not_null);
    }
    Ok(Some(table))
}

/// Whether table `name` holds a row (`SELECT EXISTS (SELECT 1 FROM name)`).
///
/// # Errors
/// [`FaucetError::Write`] when the table cannot be read.
pub(crate) async fn holds_data(
    conn: &mut PgConnection,
    name: &TableName,
) -> Result<bool, FaucetError> {
    let sql = format!("SELECT EXISTS (SELECT 1 FROM {})", name.quoted());
    sqlx::query_scalar(&sql)
        .fetch_one(conn)
        .await
        .map_err(|e| write_err(format!("cannot tell whether {name} holds data"), e))
}

/// Whether a primary key or a plain unique index covers exactly the `key` columns (what
/// `ON CONFLICT (key)` needs).
///
/// # Errors
/// [`FaucetError::Write`] when the catalog cannot be read.
pub(crate) async fn has_unique_key(
    conn: &mut PgConnection,
    name: &TableName,
    key: &[String],
) -> Result<bool, FaucetError> {
    let sets: Vec<Vec<String>> = sqlx::query_scalar(
        "SELECT array_agg(a.attname::text) \
         FROM pg_index i \
         CROSS JOIN LATERAL unnest(i.indkey::int2[]) AS k(attnum) \
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
         WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indisvalid \
           AND i.indpred IS NULL AND NOT (0 = ANY (i.indkey::int2[])) \
         GROUP BY i.indexrelid",
    )
    .bind(name.quoted())
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| write_err(format!("cannot read the indexes of {name}"), e))?;
    Ok(crate::sql::sink::keys::is_unique_key(&sets, key))
}

/// Creates the table `name` for `page`, with `key` as its primary key (`CREATE TABLE IF NOT
/// EXISTS`, in its own transaction); `apply_changes` as in [`columns_for`](crate::sql::sink::columns::columns_for). Returns `None`
/// when the page has no row to take the columns from (only deletes or truncates).
///
/// # Errors
/// [`FaucetError::Write`] when the statement fails; [`FaucetError::Config`] when a key
/// column is not a field of the page.
pub(crate) async fn create(
    conn: &mut PgConnection,
    name: &TableName,
    page: &Page,
    key: &[String],
    apply_changes: bool,
) -> Result<Option<TargetTable>, FaucetError> {
    let Some(columns) = crate::sql::sink::columns::columns_for(page, apply_changes) else {
        return Ok(None);
    };
    for (c, _) in &columns {
        check_field_name(name, c)?;
    }
    crate::sql::sink::keys::key_in_fields(key, columns.iter().map(|(c, _)| c.as_str()))?;
    let mut defs: Vec<String> = columns
        .iter()
        .map(|(c, t)| format!("{} {}", quote_ident(c), sql_type_of(t)))
        .collect();
    if !key.is_empty() {
        let cols: Vec<String> = key.iter().map(|k| quote_ident(k)).collect();
        defs.push(format!("PRIMARY KEY ({})", cols.join(", ")));
    }
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {} ({})",
        name.quoted(),
        defs.join(", ")
    );
    tracing::info!(sink = CONNECTOR, table = %name, %sql, "creating the target table");
    conn.execute(sql.as_str())
        .await
        .map_err(|e| write_err(format!("cannot create table {name}"), e))?;
    load(conn, name).await
}

/// Why `name` cannot be a PostgreSQL column name, if it cannot: empty, holding U+0000
/// (which no identifier can hold), or longer than [`MAX_IDENT_BYTES`] bytes (the server
/// would truncate it, so the column would not match the field). The one rule for a column
/// `create_table` makes and a schema change adds or renames.
pub(crate) fn column_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("a field has an empty name, which no PostgreSQL column can have".to_owned())
    } else if name.contains('\0') {
        Some(format!(
            "field {name:?} holds U+0000, which no PostgreSQL column name can hold"
        ))
    } else if name.len() > MAX_IDENT_BYTES {
        Some(format!(
            "field `{name}` is {} bytes, longer than PostgreSQL's limit of {MAX_IDENT_BYTES} \
             bytes for a column name (NAMEDATALEN - 1; the server would truncate it)",
            name.len()
        ))
    } else {
        None
    }
}

/// Checks that the records' field `field` can be a PostgreSQL column name
/// ([`column_name_problem`]). Done before anything is created.
///
/// # Errors
/// [`FaucetError::Data`] at `<table>, field <field>` naming what is wrong and the fix.
pub(crate) fn check_field_name(table: &TableName, field: &str) -> Result<(), FaucetError> {
    match column_name_problem(field) {
        None => Ok(()),
        Some(problem) => Err(FaucetError::data(
            CONNECTOR,
            format!("{table}, field {field:?}"),
            format!(
                "{problem}; rename the field in the source (a header cell, a JSON key, a \
                 column alias in a `query`), nothing was created"
            ),
        )),
    }
}

/// Drops `name` if it holds no row, taking an exclusive lock first (without waiting: a table
/// another session is using is left alone), in its own transaction.
///
/// # Errors
/// [`FaucetError::Write`] when a statement fails (a lock not granted at once included).
pub(crate) async fn drop_if_empty(
    conn: &mut PgConnection,
    name: &TableName,
) -> Result<(), FaucetError> {
    let quoted = name.quoted();
    let err = |e| write_err(format!("cannot drop the empty table {name}"), e);
    let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(err)?;
    tx.execute(format!("LOCK TABLE {quoted} IN ACCESS EXCLUSIVE MODE NOWAIT").as_str())
        .await
        .map_err(err)?;
    let any: bool = sqlx::query_scalar(&format!("SELECT EXISTS (SELECT 1 FROM {quoted})"))
        .fetch_one(&mut *tx)
        .await
        .map_err(err)?;
    if !any {
        tx.execute(format!("DROP TABLE {quoted}").as_str())
            .await
            .map_err(err)?;
        tracing::info!(table = %name, "dropped the table created for a page that failed");
    }
    tx.commit().await.map_err(err)?;
    Ok(())
}

/// Creates the session's staging table `stage` (`pg_temp.<name>`, [`STAGE`] or a routed
/// target's): the target's columns and types, no constraints (`CREATE TEMP TABLE ... AS
/// SELECT * FROM target WITH NO DATA`). It is emptied by a `TRUNCATE` before every use in a
/// page's transaction (`write::stage`), not `ON COMMIT DELETE ROWS`: PostgreSQL truncates
/// every such table of the session at each commit that touched any temporary table, so a
/// routed sink of n targets paid n truncations per page (200 targets: a page took seconds).
/// The rows of a target's last page stay staged until its next page.
///
/// # Errors
/// [`FaucetError::Write`].
pub(crate) async fn create_stage(
    conn: &mut PgConnection,
    stage: &str,
    name: &TableName,
) -> Result<(), FaucetError> {
    let plain = stage.strip_prefix("pg_temp.").unwrap_or(stage);
    let sql = format!(
        "DROP TABLE IF EXISTS {stage}; CREATE TEMP TABLE {plain} AS SELECT * FROM {} WITH NO DATA",
        name.quoted()
    );
    conn.execute(sql.as_str())
        .await
        .map_err(|e| write_err(format!("cannot create the staging table for {name}"), e))?;
    Ok(())
}
