//! Snapshot rows into an empty target: plain `COPY target FROM STDIN`, no staging table and
//! no `ON CONFLICT`.
//!
//! An upsert target gets the rows of a snapshot (change records with `op: "r"`, e.g.
//! `faucet replicate`'s copy) as inserts of keys it does not hold yet when it was empty as
//! the copy began. For such a page the upsert (collapsed, staged COPY, then `INSERT … SELECT
//! … ON CONFLICT`) and a plain COPY of the records' `after` rows leave the same table, and
//! the plain COPY does half the server's work and none of the collapsing. So, per target of
//! a writer ([`SnapshotPath`]):
//!
//! * at its first page of only `op: "r"` records the writer asks once whether the target
//!   holds a row; empty, its snapshot pages take the plain COPY from then on, else (and
//!   after any page with another op) it upserts for the rest of the writer's life;
//! * the plain COPY runs under a savepoint in the page's transaction (with the commit token,
//!   when there is one). A key the target already holds (23505 unique_violation on the
//!   key's unique index: a page written again after a crash between its write and its
//!   bookmark, a row another writer added) rolls the COPY back to the savepoint, the page is
//!   upserted instead and the target upserts from then on (every upsert target has that
//!   index: the sink refuses one without it before writing). A key twice in one page conflicts
//!   the same way (the upsert's collapsing keeps its last version). The plain path therefore
//!   never fails where the upsert would succeed, and never leaves a different table: a key
//!   conflict is never an error of its own;
//! * a page the plain COPY does not take as it is — an `after` row without a key column,
//!   `after` rows of different columns, records of another source table than the writer's
//!   earlier ones — goes to the upsert, whose collapsing names the problem or handles it.
//!
//! A resumed copy meets a target that already holds the rows copied before the
//! interruption, so it upserts the rest of that table (the tables not started yet are empty
//! and take the plain COPY again).
//!
//! Differences a user can see: `COPY` fires the target's row-level `INSERT` triggers as the
//! upsert's `INSERT` does, but only `INSERT` statement-level triggers (the upsert's `INSERT
//! … ON CONFLICT DO UPDATE` fires `UPDATE` ones too).

use std::sync::Arc;

use sqlx::Executor as _;
use sqlx::postgres::PgConnection;

use faucet_core::change::{ChangeLayout, Op};
use faucet_core::value::Row;
use faucet_core::{FaucetError, Page, fault};

use super::table;
use super::write::{
    Buffers, CopyFailure, Target, check_columns, classify, column_list, copy_in, nul_error,
};
use crate::postgres::failure::db_error;

/// How a target of a writer takes pages of snapshot rows (see the module).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum SnapshotPath {
    /// No page of only snapshot rows met yet.
    #[default]
    Undecided,
    /// The target was empty at the first one: plain COPY.
    Copy,
    /// Upsert (the target held rows, a page had another op, or a key conflicted).
    Upsert,
}

/// The savepoint the plain COPY rolls back to on a key conflict.
const SAVEPOINT: &str = "faucet_snapshot_copy";

/// Writes the `after` rows of `page` into `target` with one plain COPY when `path` allows it
/// and the page is one the plain COPY takes; `Ok(false)` when the caller must upsert it
/// (nothing of it was written), `path` updated as the module says. `source_table` is the
/// writer's source table so far, set from the page when it was unset.
///
/// # Errors
/// As the upsert's: [`FaucetError::Data`] for a value the table cannot hold (naming column
/// and page row) or a field it does not have; [`FaucetError::Write`] otherwise.
pub(crate) async fn write(
    conn: &mut PgConnection,
    target: &Target<'_>,
    page: &Page,
    path: &mut SnapshotPath,
    source_table: &mut Option<String>,
    bufs: &mut Buffers,
) -> Result<bool, FaucetError> {
    if *path == SnapshotPath::Upsert {
        return Ok(false);
    }
    let Some(rows) = snapshot_rows(page) else {
        *path = SnapshotPath::Upsert;
        return Ok(false);
    };
    let Some(first) = rows.first() else {
        return Ok(false);
    };
    let columns = Arc::clone(&first.after.schema);
    let names: Vec<&str> = columns.names().collect();
    let plain = rows.iter().all(|r| {
        r.table == first.table
            && (Arc::ptr_eq(&r.after.schema, &columns)
                || r.after.schema.names().eq(names.iter().copied()))
    }) && target.key.iter().all(|k| names.contains(&k.as_str()))
        && source_table
            .as_deref()
            .is_none_or(|seen| first.table.is_none_or(|t| t == seen));
    if !plain {
        return Ok(false);
    }
    if *path == SnapshotPath::Undecided {
        let holds = table::holds_data(conn, target.name).await?;
        *path = if holds {
            SnapshotPath::Upsert
        } else {
            SnapshotPath::Copy
        };
        tracing::debug!(
            table = %target.name,
            plain_copy = !holds,
            "snapshot rows: the target {} when its first snapshot page came",
            if holds { "held rows (upsert)" } else { "was empty (plain COPY)" }
        );
        if holds {
            return Ok(false);
        }
    }
    check_columns(names.iter().copied(), target, false)?;
    savepoint(conn, target, "SAVEPOINT").await?;
    let values = rows.iter().map(|r| r.after.values.iter());
    let cols = column_list(names.iter().copied());
    match copy_in(conn, &target.name.quoted(), &cols, values, target.nul, bufs).await {
        Ok(_) => {}
        Err(CopyFailure::Sql(e)) if is_key_conflict(&e) => {
            savepoint(conn, target, "ROLLBACK TO SAVEPOINT").await?;
            *path = SnapshotPath::Upsert;
            tracing::info!(
                table = %target.name,
                "a snapshot row's key is already in the target: this page and the target's \
                 later pages are upserted"
            );
            return Ok(false);
        }
        Err(CopyFailure::Sql(e)) => return Err(classify(e, "COPY", target.name, None)),
        Err(CopyFailure::Nul { row, column }) => {
            return Err(nul_error(target, page, row, names[column]));
        }
    }
    if source_table.is_none() {
        *source_table = first.table.map(str::to_owned);
    }
    fault::point(fault::MID_PAGE);
    Ok(true)
}

/// One snapshot record of a page: its source table and its row.
struct SnapshotRow<'a> {
    table: Option<&'a str>,
    after: &'a Row,
}

/// The records of `page` when every one is a snapshot row (`op: "r"` with an `after` row),
/// in page order; `None` otherwise (plain rows, another op, a record that does not read).
fn snapshot_rows(page: &Page) -> Option<Vec<SnapshotRow<'_>>> {
    let layout = ChangeLayout::of(page.schema())?;
    page.rows()
        .map(|r| match layout.read(r.values()) {
            Ok(c) if c.op == Op::Read => c.after.map(|after| SnapshotRow {
                table: c.table,
                after,
            }),
            _ => None,
        })
        .collect()
}

/// 23505 unique_violation: a key the COPY wrote is in the table already (or twice in it).
fn is_key_conflict(e: &sqlx::Error) -> bool {
    db_error(e).is_some_and(|d| d.code() == "23505")
}

/// Runs `<what> faucet_snapshot_copy` (`SAVEPOINT`, `ROLLBACK TO SAVEPOINT`).
async fn savepoint(
    conn: &mut PgConnection,
    target: &Target<'_>,
    what: &str,
) -> Result<(), FaucetError> {
    conn.execute(format!("{what} {SAVEPOINT}").as_str())
        .await
        .map_err(|e| classify(e, what, target.name, None))?;
    Ok(())
}
