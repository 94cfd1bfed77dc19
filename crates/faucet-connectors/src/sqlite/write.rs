//! The rows of a page, inside its transaction: `append` as multi-row `INSERT`s, `upsert`
//! as `INSERT … ON CONFLICT (key) DO UPDATE` after the page's deletes and renames (change
//! records applied through [`faucet_core::change::collapse`]). Statements are prepared once
//! per shape and kept by sqlx (its statement cache), so a page of 10,000 rows is a few
//! statements, each `sqlite3_step`ped once.

use std::collections::HashMap;

use sqlx::sqlite::{SqliteArguments, SqliteConnection};
use sqlx::{Arguments as _, Sqlite};

use faucet_core::change::{self, ChangeLayout, Moved, moved_row_missing};
use faucet_core::{FaucetError, Page, Value, fault};

use super::failure::classify;
use super::table::TargetTable;
use super::value::{Affinity, Bound, bind};
use super::{CONNECTOR, Target, quoted};
use crate::sql::sink::keys::JsonKeys;

/// SQLite's limit of parameters per statement (`SQLITE_MAX_VARIABLE_NUMBER`, 32766 since
/// 3.32).
const MAX_PARAMS: usize = 32_766;
/// Rows per multi-row statement at most.
const MAX_ROWS: usize = 2_000;

/// What a writer keeps from page to page.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// The `table` of the change records written so far.
    pub(crate) source_table: Option<String>,
    /// Statement texts by (columns, rows, upsert): built once.
    sql: HashMap<(Vec<String>, usize, bool), String>,
}

fn rows_per(width: usize) -> usize {
    (MAX_PARAMS / width.max(1)).clamp(1, MAX_ROWS)
}

/// The data error for a value at `column` of page row `row` (0-based).
fn value_error(target: &Target<'_>, row: usize, column: &str, message: String) -> FaucetError {
    FaucetError::data(
        CONNECTOR,
        format!("{}, column {column}, page row {}", target.name, row + 1),
        format!("{message}; nothing of this page was committed"),
    )
}

/// Checks that every column of `names` exists in the table; their affinities.
fn affinities(
    names: &[&str],
    target: &Target<'_>,
    table: &TargetTable,
    changes_appended: bool,
) -> Result<Vec<Affinity>, FaucetError> {
    names
        .iter()
        .map(|n| {
            table.affinity(n).ok_or_else(|| {
                let columns: Vec<&str> = table.names().collect();
                crate::sql::sink::columns::unknown_field(
                    CONNECTOR,
                    &target.name,
                    n,
                    &columns,
                    changes_appended,
                )
            })
        })
        .collect()
}

/// Adds `value` to `args`.
fn push<'q>(
    args: &mut SqliteArguments<'q>,
    value: Bound<'q>,
) -> Result<(), sqlx::error::BoxDynError> {
    match value {
        Bound::Null => args.add(None::<i64>),
        Bound::Int(i) => args.add(i),
        Bound::Real(f) => args.add(f),
        Bound::Text(t) => args.add(t),
        Bound::Blob(b) => args.add(b),
    }
}

/// Rows of one statement: their arguments and page rows (for messages).
struct Batch<'q> {
    args: SqliteArguments<'q>,
    rows: Vec<usize>,
}

impl<'q> Batch<'q> {
    fn new() -> Self {
        Self {
            args: SqliteArguments::default(),
            rows: Vec::new(),
        }
    }

    /// Binds one row's `values` (in `names` order).
    fn row(
        &mut self,
        target: &Target<'_>,
        row: usize,
        names: &[&str],
        affinities: &[Affinity],
        values: impl Iterator<Item = &'q Value>,
    ) -> Result<(), FaucetError> {
        for ((v, a), n) in values.zip(affinities).zip(names) {
            let b = bind(v, *a).map_err(|m| value_error(target, row, n, m))?;
            push(&mut self.args, b).map_err(|e| value_error(target, row, n, e.to_string()))?;
        }
        self.rows.push(row);
        Ok(())
    }
}

/// Runs `sql` with `batch`'s arguments.
async fn run(
    conn: &mut SqliteConnection,
    target: &Target<'_>,
    sql: &str,
    batch: Batch<'_>,
    what: &str,
) -> Result<u64, FaucetError> {
    let rows = (batch.rows.first().copied(), batch.rows.last().copied());
    let done = sqlx::query_with::<Sqlite, _>(sql, batch.args)
        .execute(&mut *conn)
        .await
        .map_err(|e| {
            let at = match rows {
                (Some(a), Some(b)) if a != b => format!("{what} of page rows {}..{}", a + 1, b + 1),
                (Some(a), _) => format!("{what} of page row {}", a + 1),
                _ => what.to_owned(),
            };
            classify(e, &at, target)
        })?;
    Ok(done.rows_affected())
}

impl Scratch {
    /// `INSERT INTO t (names) VALUES (?, …), … [ON CONFLICT (key) DO UPDATE SET …]` for
    /// `rows` rows.
    fn insert(&mut self, target: &Target<'_>, names: &[&str], rows: usize, upsert: bool) -> &str {
        let id = (
            names.iter().map(|n| (*n).to_owned()).collect(),
            rows,
            upsert,
        );
        self.sql.entry(id).or_insert_with(|| {
            let cols: Vec<String> = names.iter().map(|n| quoted(n)).collect();
            let one = format!("({})", vec!["?"; names.len()].join(", "));
            let mut sql = format!(
                "INSERT INTO {} ({}) VALUES {}",
                quoted(target.name),
                cols.join(", "),
                vec![one.as_str(); rows].join(", ")
            );
            if upsert {
                let key: Vec<String> = target.upsert_key.iter().map(|k| quoted(k)).collect();
                let sets: Vec<String> = names
                    .iter()
                    .filter(|n| !target.upsert_key.iter().any(|k| k == *n))
                    .map(|n| format!("{0} = excluded.{0}", quoted(n)))
                    .collect();
                if sets.is_empty() {
                    sql.push_str(&format!(" ON CONFLICT ({}) DO NOTHING", key.join(", ")));
                } else {
                    sql.push_str(&format!(
                        " ON CONFLICT ({}) DO UPDATE SET {}",
                        key.join(", "),
                        sets.join(", ")
                    ));
                }
            }
            sql
        })
    }
}

/// Inserts `rows` (page row, values in `names` order), `rows_per` rows per statement.
async fn insert_rows<'v, I>(
    conn: &mut SqliteConnection,
    target: &Target<'_>,
    table: &TargetTable,
    scratch: &mut Scratch,
    (names, upsert, changes): (&[&str], bool, bool),
    rows: impl Iterator<Item = (usize, I)>,
) -> Result<(), FaucetError>
where
    I: Iterator<Item = &'v Value>,
{
    let affinities = affinities(names, target, table, changes)?;
    let per = rows_per(names.len());
    let what = if upsert { "upsert" } else { "INSERT" };
    let mut batch = Batch::new();
    for (row, values) in rows {
        batch.row(target, row, names, &affinities, values)?;
        if batch.rows.len() == per {
            let sql = scratch.insert(target, names, per, upsert).to_owned();
            run(
                conn,
                target,
                &sql,
                std::mem::replace(&mut batch, Batch::new()),
                what,
            )
            .await?;
        }
    }
    if !batch.rows.is_empty() {
        let sql = scratch
            .insert(target, names, batch.rows.len(), upsert)
            .to_owned();
        run(conn, target, &sql, batch, what).await?;
    }
    Ok(())
}

/// Appends every record of `page`.
///
/// # Errors
/// [`FaucetError::Data`] for a value the column would not keep or a field the table does
/// not have (naming column and page row); [`FaucetError::Write`] otherwise.
pub(crate) async fn append(
    conn: &mut SqliteConnection,
    target: &Target<'_>,
    table: &TargetTable,
    page: &Page,
    scratch: &mut Scratch,
) -> Result<(), FaucetError> {
    let names: Vec<&str> = page.schema().names().collect();
    let changes = ChangeLayout::of(page.schema()).is_some();
    let rows = page.rows().enumerate().map(|(i, r)| (i, r.values().iter()));
    insert_rows(conn, target, table, scratch, (&names, false, changes), rows).await?;
    fault::point(fault::MID_PAGE);
    Ok(())
}

/// Applies `page` as upserts and deletes by `target.upsert_key`.
///
/// # Errors
/// As [`append`]; plus [`FaucetError::Data`] for records without the key, and for a
/// key-changing update whose old row is not in the table ([`moved_row_missing`]).
pub(crate) async fn upsert(
    conn: &mut SqliteConnection,
    target: &Target<'_>,
    table: &TargetTable,
    page: &Page,
    scratch: &mut Scratch,
) -> Result<(), FaucetError> {
    let name = target.name.to_owned();
    let collapsed = change::collapse(
        page,
        target.upsert_key,
        CONNECTOR,
        &name,
        &mut scratch.source_table,
        &mut JsonKeys,
    )?;
    if collapsed.truncate {
        let sql = format!("DELETE FROM {}", quoted(target.name));
        run(conn, target, &sql, Batch::new(), "DELETE (a truncate)").await?;
    }
    let key: Vec<&str> = target.upsert_key.iter().map(String::as_str).collect();
    let key_aff = affinities(&key, target, table, false)?;
    let keyed = Keyed {
        target,
        key: &key,
        affinities: &key_aff,
        wheres: key
            .iter()
            .map(|n| format!("{} = ?", quoted(n)))
            .collect::<Vec<_>>()
            .join(" AND "),
    };
    let chains = collapsed.move_chains();
    if !chains.is_empty() {
        keyed.apply_moves(conn, &chains).await?;
    }
    // Deletes, many keys per statement: `(k1, k2) IN (VALUES (?, ?), …)` (row values).
    let deletes = collapsed.deletes();
    let per = rows_per(key.len());
    let mut batch = Batch::new();
    for (values, row) in deletes {
        batch.row(target, row, keyed.key, &key_aff, values.iter().copied())?;
        if batch.rows.len() == per {
            let sql = keyed.delete(per);
            run(
                conn,
                target,
                &sql,
                std::mem::replace(&mut batch, Batch::new()),
                "DELETE",
            )
            .await?;
        }
    }
    if !batch.rows.is_empty() {
        let sql = keyed.delete(batch.rows.len());
        run(conn, target, &sql, batch, "DELETE").await?;
    }
    for (names, group) in &crate::sql::sink::columns::upsert_layouts(&collapsed) {
        let group = group
            .iter()
            .map(|(columns, row)| (*row, columns.iter().map(|(_, v)| *v)));
        let complete = table.required.iter().all(|c| names.iter().any(|n| n == c));
        if complete {
            insert_rows(conn, target, table, scratch, (names, true, false), group).await?;
        } else {
            keyed.partial(conn, table, scratch, names, group).await?;
        }
        fault::point(fault::MID_PAGE);
    }
    Ok(())
}

/// Statements by the upsert key.
struct Keyed<'k> {
    target: &'k Target<'k>,
    key: &'k [&'k str],
    affinities: &'k [Affinity],
    /// `k1 = ? AND k2 = ?`.
    wheres: String,
}

impl Keyed<'_> {
    /// `DELETE FROM t WHERE (key) IN (VALUES (?, …), …)` for `rows` keys.
    fn delete(&self, rows: usize) -> String {
        let cols: Vec<String> = self.key.iter().map(|k| quoted(k)).collect();
        let one = format!("({})", vec!["?"; self.key.len()].join(", "));
        format!(
            "DELETE FROM {} WHERE ({}) IN (VALUES {})",
            quoted(self.target.name),
            cols.join(", "),
            vec![one.as_str(); rows].join(", ")
        )
    }

    fn batch<'v>(&self, row: usize, keys: &[&[&'v Value]]) -> Result<Batch<'v>, FaucetError> {
        let mut batch = Batch::new();
        for key in keys {
            for ((v, a), n) in key.iter().zip(self.affinities).zip(self.key) {
                let b = bind(v, *a).map_err(|m| value_error(self.target, row, n, m))?;
                push(&mut batch.args, b)
                    .map_err(|e| value_error(self.target, row, n, e.to_string()))?;
            }
        }
        batch.rows.push(row);
        Ok(batch)
    }

    async fn exists(
        &self,
        conn: &mut SqliteConnection,
        row: usize,
        key: &[&Value],
    ) -> Result<bool, FaucetError> {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE {})",
            quoted(self.target.name),
            self.wheres
        );
        let batch = self.batch(row, &[key])?;
        sqlx::query_scalar_with::<Sqlite, bool, _>(&sql, batch.args)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| classify(e, "SELECT of a moved row", self.target))
    }

    /// Renames the stored rows that key-changing updates moved, as [`Moved`] says (the
    /// same steps as every SQL sink: a chain already applied is skipped, the others run in
    /// source order, each must leave a row at its last key).
    async fn apply_moves(
        &self,
        conn: &mut SqliteConnection,
        chains: &[&[Moved<'_>]],
    ) -> Result<(), FaucetError> {
        let name = quoted(self.target.name);
        let sets: Vec<String> = self
            .key
            .iter()
            .map(|n| format!("{} = ?", quoted(n)))
            .collect();
        let rename = format!(
            "UPDATE {name} SET {} WHERE {}",
            sets.join(", "),
            self.wheres
        );
        let delete = format!("DELETE FROM {name} WHERE {}", self.wheres);
        let mut applied: Vec<&Moved<'_>> = Vec::new();
        let mut lasts: Vec<&Moved<'_>> = Vec::new();
        for chain in chains {
            let (Some(first), Some(last)) = (chain.first(), chain.last()) else {
                continue;
            };
            let at_last = self.exists(conn, last.row, &last.to).await?;
            let at_first = self.exists(conn, first.row, &first.from).await?;
            if at_last && (!at_first || last.keep_target) {
                continue;
            }
            applied.extend(chain.iter());
            lasts.push(last);
        }
        applied.sort_by_key(|m| m.row);
        for m in applied {
            if !self.exists(conn, m.row, &m.from).await? {
                continue;
            }
            run(
                conn,
                self.target,
                &delete,
                self.batch(m.row, &[&m.to])?,
                "DELETE",
            )
            .await?;
            let batch = self.batch(m.row, &[&m.to, &m.from])?;
            run(conn, self.target, &rename, batch, "UPDATE (a key change)").await?;
        }
        for last in lasts {
            if !self.exists(conn, last.row, &last.to).await? {
                return Err(moved_row_missing(CONNECTOR, self.target.name, last));
            }
        }
        Ok(())
    }

    /// Rows that leave out a column an `INSERT` needs (NOT NULL without a default, e.g. an
    /// unchanged TOAST value): SQLite checks NOT NULL before it looks for the conflict, so
    /// each row is an `UPDATE` of its columns; a row that matched none is inserted (and
    /// fails, naming the missing column: the table cannot hold it without that value).
    async fn partial<'v, I>(
        &self,
        conn: &mut SqliteConnection,
        table: &TargetTable,
        scratch: &mut Scratch,
        names: &[&str],
        group: impl Iterator<Item = (usize, I)>,
    ) -> Result<(), FaucetError>
    where
        I: Iterator<Item = &'v Value> + Clone,
    {
        let others: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !self.key.contains(n))
            .collect();
        affinities(names, self.target, table, false)?;
        let sets: Vec<String> = others
            .iter()
            .map(|n| format!("{} = ?", quoted(n)))
            .collect();
        let sql = format!(
            "UPDATE {} SET {} WHERE {}",
            quoted(self.target.name),
            sets.join(", "),
            self.wheres
        );
        let mut missing = Vec::new();
        for (row, values) in group {
            if others.is_empty() {
                missing.push((row, values));
                continue;
            }
            let by_name: Vec<(&str, &Value)> = names.iter().copied().zip(values.clone()).collect();
            let value_of = |n: &str| by_name.iter().find(|(c, _)| *c == n).map(|(_, v)| *v);
            let ordered: Vec<&str> = others.iter().chain(self.key).copied().collect();
            let order_aff: Vec<Affinity> = ordered
                .iter()
                .map(|n| table.affinity(n).unwrap_or(Affinity::Blob))
                .collect();
            let mut batch = Batch::new();
            let vals: Vec<&Value> = ordered
                .iter()
                .map(|n| value_of(n).unwrap_or(&Value::Null))
                .collect();
            batch.row(self.target, row, &ordered, &order_aff, vals.into_iter())?;
            if run(conn, self.target, &sql, batch, "UPDATE").await? == 0 {
                missing.push((row, values));
            }
        }
        insert_rows(
            conn,
            self.target,
            table,
            scratch,
            (names, true, false),
            missing.into_iter(),
        )
        .await
    }
}
