//! The target table: what SQLite's catalog says about it (`PRAGMA table_info`,
//! `PRAGMA index_list`), creating it from a page (`create_table: true`), and dropping a table
//! this writer created for a page that failed.

use sqlx::Row as _;
use sqlx::sqlite::SqliteConnection;

use faucet_core::{FaucetError, Page};

use super::failure::classify;
use super::value::{Affinity, column_type};
use super::{Target, quoted};
use crate::sql::sink::columns::columns_for;
use crate::sql::sink::keys::key_in_fields;

/// An existing target table.
#[derive(Debug, Clone)]
pub(crate) struct TargetTable {
    /// (column, its affinity), in table order.
    pub(crate) columns: Vec<(String, Affinity)>,
    /// Columns an `INSERT` must give a value: NOT NULL without a default (not the rowid).
    pub(crate) required: Vec<String>,
    /// Column sets of the primary key and of every unique index without a `WHERE` or an
    /// expression.
    pub(crate) unique_sets: Vec<Vec<String>>,
}

impl TargetTable {
    /// The column names, in table order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> + Clone {
        self.columns.iter().map(|(n, _)| n.as_str())
    }

    /// The affinity of `column`, if it is a column.
    pub(crate) fn affinity(&self, column: &str) -> Option<Affinity> {
        self.columns
            .iter()
            .find(|(n, _)| n == column)
            .map(|(_, a)| *a)
    }
}

/// The table `target.name`, or `None` when it does not exist.
///
/// # Errors
/// [`FaucetError::Write`] when the catalog cannot be read (the file locked or unreadable
/// included).
pub(crate) async fn load(
    conn: &mut SqliteConnection,
    target: &Target<'_>,
) -> Result<Option<TargetTable>, FaucetError> {
    let err = |e| classify(e, &format!("looking up table {}", target.name), target);
    let info =
        sqlx::query("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?)")
            .bind(target.name)
            .fetch_all(&mut *conn)
            .await
            .map_err(err)?;
    if info.is_empty() {
        return Ok(None);
    }
    let mut columns = Vec::new();
    let mut required = Vec::new();
    let mut pk: Vec<(i64, String)> = Vec::new();
    for row in &info {
        let name: String = row.try_get(0).map_err(err)?;
        let declared: String = row.try_get(1).map_err(err)?;
        let not_null: bool = row.try_get(2).map_err(err)?;
        let default: Option<String> = row.try_get(3).map_err(err)?;
        let pk_at: i64 = row.try_get(4).map_err(err)?;
        let rowid = pk_at > 0 && declared.eq_ignore_ascii_case("INTEGER");
        if not_null && default.is_none() && !rowid {
            required.push(name.clone());
        }
        if pk_at > 0 {
            pk.push((pk_at, name.clone()));
        }
        columns.push((name, Affinity::of(&declared)));
    }
    pk.sort();
    let mut unique_sets: Vec<Vec<String>> = Vec::new();
    if !pk.is_empty() {
        unique_sets.push(pk.into_iter().map(|(_, n)| n).collect());
    }
    let indexes =
        sqlx::query("SELECT name FROM pragma_index_list(?) WHERE \"unique\" AND NOT partial")
            .bind(target.name)
            .fetch_all(&mut *conn)
            .await
            .map_err(err)?;
    for index in &indexes {
        let index: String = index.try_get(0).map_err(err)?;
        let cols = sqlx::query("SELECT name FROM pragma_index_info(?) ORDER BY seqno")
            .bind(&index)
            .fetch_all(&mut *conn)
            .await
            .map_err(err)?;
        let names: Vec<Option<String>> = cols
            .iter()
            .map(|c| c.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(err)?;
        // An expression part has no name: such an index is no conflict target of columns.
        if let Some(set) = names.into_iter().collect::<Option<Vec<String>>>()
            && !unique_sets.contains(&set)
        {
            unique_sets.push(set);
        }
    }
    Ok(Some(TargetTable {
        columns,
        required,
        unique_sets,
    }))
}

/// Creates the table for `page` (`CREATE TABLE IF NOT EXISTS`, outside any transaction),
/// with `target.key` as its primary key; `apply_changes` as in
/// [`columns_for`]. `None` when the page has no row to take the columns from (only deletes
/// or truncates).
///
/// # Errors
/// [`FaucetError::Config`] when a key column is not a field of the page;
/// [`FaucetError::Data`] for two fields SQLite takes for one column (names ignore ASCII
/// case); [`FaucetError::Write`] when the statement fails.
pub(crate) async fn create(
    conn: &mut SqliteConnection,
    target: &Target<'_>,
    page: &Page,
    apply_changes: bool,
) -> Result<Option<TargetTable>, FaucetError> {
    let Some(columns) = columns_for(page, apply_changes) else {
        return Ok(None);
    };
    for (i, (c, _)) in columns.iter().enumerate() {
        if let Some(problem) = super::config::column_name_problem(c) {
            return Err(FaucetError::data(
                super::CONNECTOR,
                format!("{}, field {c:?}", target.name),
                format!("field {c:?} {problem}; rename it in the source, nothing was created"),
            ));
        }
        if let Some((other, _)) = columns[..i].iter().find(|(o, _)| o.eq_ignore_ascii_case(c)) {
            return Err(FaucetError::data(
                super::CONNECTOR,
                format!("{}, fields {other:?} and {c:?}", target.name),
                format!(
                    "the records have fields {other:?} and {c:?}, which are one column name \
                     in SQLite (column names ignore ASCII case); rename one in the source, \
                     nothing was created"
                ),
            ));
        }
    }
    key_in_fields(target.record_key, columns.iter().map(|(c, _)| c.as_str()))?;
    let mut defs: Vec<String> = columns
        .iter()
        .map(|(c, t)| format!("{} {}", quoted(c), column_type(t)))
        .collect();
    if !target.record_key.is_empty() {
        let cols: Vec<String> = target.record_key.iter().map(|k| quoted(k)).collect();
        defs.push(format!("PRIMARY KEY ({})", cols.join(", ")));
    }
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {} ({})",
        quoted(target.name),
        defs.join(", ")
    );
    tracing::info!(sink = super::CONNECTOR, table = %target.name, %sql, "creating the target table");
    sqlx::query(&sql)
        .execute(&mut *conn)
        .await
        .map_err(|e| classify(e, &format!("creating table {}", target.name), target))?;
    load(conn, target).await
}

/// Drops the table if it holds no row (a table this writer created for a page that
/// failed), in its own transaction; best effort.
///
/// # Errors
/// [`FaucetError::Write`] when a statement fails.
pub(crate) async fn drop_if_empty(
    conn: &mut SqliteConnection,
    target: &Target<'_>,
) -> Result<(), FaucetError> {
    let name = quoted(target.name);
    let err = |e| {
        classify(
            e,
            &format!("dropping the empty table {}", target.name),
            target,
        )
    };
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *conn)
        .await
        .map_err(err)?;
    let any: bool = match sqlx::query_scalar(&format!("SELECT EXISTS (SELECT 1 FROM {name})"))
        .fetch_one(&mut *conn)
        .await
    {
        Ok(any) => any,
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            return Err(err(e));
        }
    };
    if !any {
        if let Err(e) = sqlx::query(&format!("DROP TABLE {name}"))
            .execute(&mut *conn)
            .await
        {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            return Err(err(e));
        }
        tracing::info!(table = %target.name, "dropped the table created for a page that failed");
    }
    sqlx::query("COMMIT")
        .execute(&mut *conn)
        .await
        .map_err(err)?;
    Ok(())
}

/// Whether a table `name` exists in the file.
///
/// # Errors
/// [`FaucetError::Write`].
pub(crate) async fn exists(
    conn: &mut SqliteConnection,
    name: &str,
    target: &Target<'_>,
) -> Result<bool, FaucetError> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?)",
    )
    .bind(name)
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| classify(e, &format!("looking up table {name}"), target))
}
