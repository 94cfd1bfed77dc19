//! Snapshot rows into an empty target: plain `COPY target FROM STDIN`, no staging table and
//! no `ON CONFLICT`.
//!
//! An upsert target gets the rows of a snapshot (change records with `op: "r"`, e.g.
//! `faucet replicate`'s copy) as inserts of keys it does not hold yet when it was empty as
//! the copy began. For such a page the upsert (staged COPY, then `INSERT … SELECT … ON
//! CONFLICT`) and a plain COPY of the same collapsed rows leave the same table, and the plain
//! COPY does half the server's work. So, per target of a writer ([`SnapshotPath`]):
//!
//! * at its first page of only `op: "r"` records the writer asks once whether the target
//!   holds a row; empty, its snapshot pages take the plain COPY from then on, else (and
//!   after any page with another op) it upserts for the rest of the writer's life;
//! * the plain COPY runs under a savepoint in the page's transaction (with the commit token,
//!   when there is one). A key the target already holds (23505 unique_violation on the
//!   key's unique index: a page written again after a crash between its write and its
//!   bookmark, a row another writer added) rolls the COPY back to the savepoint, the page is
//!   upserted instead and the target upserts from then on. The plain path therefore never
//!   fails where the upsert would succeed, and never leaves a different table: a key
//!   conflict is never an error of its own.
//!
//! A resumed copy meets a target that already holds the rows copied before the
//! interruption, so it upserts the rest of that table (the tables not started yet are empty
//! and take the plain COPY again).
//!
//! Differences a user can see: `COPY` fires the target's row-level `INSERT` triggers as the
//! upsert's `INSERT` does, but only `INSERT` statement-level triggers (the upsert's `INSERT
//! … ON CONFLICT DO UPDATE` fires `UPDATE` ones too).

use sqlx::Executor as _;
use sqlx::postgres::PgConnection;

use faucet_core::change::{ChangeLayout, Collapsed, Op, Slot};
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

/// Writes the collapsed `page` into `target` with plain COPYs (one per column layout) when
/// `path` allows it; `Ok(false)` when the caller must upsert it (nothing of it was written),
/// `path` updated as the module says.
///
/// # Errors
/// As the upsert's: [`FaucetError::Data`] for a value the table cannot hold (naming column
/// and page row) or a field it does not have; [`FaucetError::Write`] otherwise.
pub(crate) async fn write(
    conn: &mut PgConnection,
    target: &Target<'_>,
    page: &Page,
    collapsed: &Collapsed<'_>,
    path: &mut SnapshotPath,
    bufs: &mut Buffers,
) -> Result<bool, FaucetError> {
    if *path == SnapshotPath::Upsert {
        return Ok(false);
    }
    if !only_inserts(page, collapsed) {
        *path = SnapshotPath::Upsert;
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
    savepoint(conn, target, "SAVEPOINT").await?;
    let quoted = target.name.quoted();
    for (names, group) in &crate::sql::sink::columns::upsert_layouts(collapsed) {
        check_columns(names.iter().copied(), target, false)?;
        let rows: Vec<usize> = group.iter().map(|(_, r)| *r).collect();
        let values = group.iter().map(|(c, _)| c.iter().map(|(_, v)| *v));
        let cols = column_list(names.iter().copied());
        match copy_in(conn, &quoted, &cols, values, target.nul, bufs).await {
            Ok(_) => {}
            Err(CopyFailure::Sql(e)) if is_key_conflict(&e) => {
                savepoint(conn, target, "ROLLBACK TO SAVEPOINT").await?;
                *path = SnapshotPath::Upsert;
                tracing::info!(
                    table = %target.name,
                    "a snapshot row's key is already in the target: this page and the \
                     target's later pages are upserted"
                );
                return Ok(false);
            }
            Err(CopyFailure::Sql(e)) => return Err(classify(e, "COPY", target.name, Some(&rows))),
            Err(CopyFailure::Nul { row, column }) => {
                let page_row = rows.get(row).copied().unwrap_or(row);
                return Err(nul_error(target, page, page_row, names[column]));
            }
        }
        fault::point(fault::MID_PAGE);
    }
    Ok(true)
}

/// Whether `page` holds only snapshot rows (`op: "r"` change records) and `collapsed` (the
/// page collapsed) only upserts: no truncate, no delete, no moved row.
fn only_inserts(page: &Page, collapsed: &Collapsed<'_>) -> bool {
    let Some(layout) = ChangeLayout::of(page.schema()) else {
        return false;
    };
    !collapsed.truncate
        && page
            .rows()
            .all(|r| layout.read(r.values()).is_ok_and(|c| c.op == Op::Read))
        && collapsed
            .slots
            .iter()
            .all(|s| matches!(s, Slot::Upsert { moved, .. } if moved.is_empty()))
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
