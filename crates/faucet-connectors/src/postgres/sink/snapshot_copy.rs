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
//!   when there is one); a page of [`second_session::MIN_ROWS`] rows or more is parted in two
//!   by key and the second part copied at once on the sink's second session, which commits
//!   it just before the page's transaction ([`second_session`] gives the protocol; a key
//!   conflict in either part is a conflict of the page). A key the target already holds
//!   (23505 unique_violation on the key's unique index: a page written again after a crash
//!   between its write and its bookmark, a row another writer added) rolls the COPY back to
//!   the savepoint, the page is upserted instead and the target upserts from then on (every
//!   upsert target has that index: the sink refuses one without it before writing). A key
//!   twice in one page conflicts the same way (the upsert's collapsing keeps its last
//!   version). The plain path therefore
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

use faucet_core::Value;
use faucet_core::change::{ChangeLayout, Op};
use faucet_core::value::Row;
use faucet_core::{FaucetError, Page, fault};

use super::changes::KeyIds;
use super::nul::NulBytes;
use super::second_session::{self, SecondSession};
use super::table;
use super::write::{
    Buffers, CopyFailure, Target, check_columns, classify, column_list, copy_in, nul_error,
    refuses_a_value,
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
    let cols = column_list(names.iter().copied());
    let into = target.name.quoted();
    let copy = PlainCopy {
        into: &into,
        cols: &cols,
        rows: &rows,
        nul: target.nul,
    };
    let copied = if rows.len() < second_session::MIN_ROWS {
        copy.part(conn, (0..rows.len()).collect(), bufs).await
    } else {
        let key_at: Vec<usize> = target
            .key
            .iter()
            .filter_map(|k| names.iter().position(|n| n == k))
            .collect();
        copy.split(conn, target.second, &key_at, bufs).await
    };
    match copied {
        Ok(()) => {}
        Err(Failed {
            failure: CopyFailure::Sql(e),
            ..
        }) if is_key_conflict(&e) => {
            savepoint(conn, target, "ROLLBACK TO SAVEPOINT").await?;
            *path = SnapshotPath::Upsert;
            tracing::info!(
                table = %target.name,
                "a snapshot row's key is already in the target: this page and the target's \
                 later pages are upserted"
            );
            return Ok(false);
        }
        Err(Failed {
            failure: CopyFailure::Sql(e),
            rows: part,
            what,
        }) => return Err(classify(e, what, target.name, part.as_deref())),
        Err(Failed {
            failure: CopyFailure::Nul { row, column },
            rows: part,
            ..
        }) => {
            let row = part.and_then(|p| p.get(row).copied()).unwrap_or(row);
            return Err(nul_error(target, page, row, names[column]));
        }
    }
    if source_table.is_none() {
        *source_table = first.table.map(str::to_owned);
    }
    fault::point(fault::MID_PAGE);
    Ok(true)
}

/// A failed COPY of a part of a page (the whole page is one part): `rows` maps the part's
/// COPY lines to page rows (`None`: a failure of no row, the second session's `COMMIT`);
/// `what` failed.
struct Failed {
    failure: CopyFailure,
    rows: Option<Vec<usize>>,
    what: &'static str,
}

/// The `after` values of the page rows `part` of `rows`, in its order.
fn values<'r>(
    rows: &'r [SnapshotRow<'_>],
    part: &'r [usize],
) -> impl Iterator<Item = std::slice::Iter<'r, Value>> + Send {
    part.iter()
        .filter_map(|&i| rows.get(i))
        .map(|r| r.after.values.iter())
}

/// One plain COPY of a snapshot page into its target.
struct PlainCopy<'a, 'r> {
    into: &'a str,
    cols: &'a str,
    rows: &'a [SnapshotRow<'r>],
    nul: NulBytes,
}

impl PlainCopy<'_, '_> {
    /// Copies the page in two parts at once, one on `conn` (in the page's transaction) and
    /// one on the `second` session (taken while the first part is copied), which commits its
    /// part when both succeeded ([`second_session`]). A part the server refused is the error
    /// (its rows mapped); a second session that declined, or failed of its own (lost: it is
    /// dropped), leaves its part to `conn`; a `COMMIT` of the second session that fails is
    /// the page's error.
    async fn split(
        &self,
        conn: &mut PgConnection,
        second: &SecondSession,
        key_at: &[usize],
        bufs: &mut Buffers,
    ) -> Result<(), Failed> {
        let (one, two) = parts(self.rows, key_at, self.nul);
        let theirs = async {
            let mut claimed = second.begin().await?;
            let copied = claimed
                .copy(self.into, self.cols, values(self.rows, &two), self.nul)
                .await;
            Some((claimed, copied))
        };
        let (mine, theirs) = tokio::join!(self.part(conn, one, bufs), theirs);
        match (mine, theirs) {
            (Err(failed), theirs) => {
                if let Some((claimed, _)) = theirs {
                    claimed.rollback().await;
                }
                return Err(failed);
            }
            (Ok(()), None) => {}
            (Ok(()), Some((claimed, Ok(_)))) => {
                return claimed.commit().await.map_err(|e| Failed {
                    failure: CopyFailure::Sql(e),
                    rows: None,
                    what: "COMMIT of the second session's part of the page",
                });
            }
            (Ok(()), Some((claimed, Err(CopyFailure::Sql(e)))))
                if !db_error(&e).is_some_and(|d| refuses_a_value(d.code())) =>
            {
                tracing::warn!(
                    error = %e,
                    "the second session failed: its part of the page is copied by the page's \
                     session, and a new one opened for the next page"
                );
                claimed.drop_session();
            }
            (Ok(()), Some((claimed, Err(failure)))) => {
                claimed.rollback().await;
                return Err(Failed {
                    failure,
                    rows: Some(two),
                    what: "COPY",
                });
            }
        }
        self.part(conn, two, bufs).await
    }

    /// Copies the page rows `part` (indices into the page's rows, in order) on `conn`; a
    /// failure maps the part's COPY lines back to those page rows.
    async fn part(
        &self,
        conn: &mut PgConnection,
        part: Vec<usize>,
        bufs: &mut Buffers,
    ) -> Result<(), Failed> {
        match copy_in(
            conn,
            self.into,
            self.cols,
            values(self.rows, &part),
            self.nul,
            bufs,
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(failure) => Err(Failed {
                failure,
                rows: Some(part),
                what: "COPY",
            }),
        }
    }
}

/// The page rows of `rows` parted in two by the hash of their key (the values at `key_at`
/// as the target holds them), in page order within each part: rows of one key are in one
/// part.
fn parts(rows: &[SnapshotRow<'_>], key_at: &[usize], nul: NulBytes) -> (Vec<usize>, Vec<usize>) {
    use faucet_core::change::KeyIdentity as _;
    let mut ids = KeyIds::new(nul);
    let (mut one, mut two) = (
        Vec::with_capacity(rows.len() / 2 + 1),
        Vec::with_capacity(rows.len() / 2 + 1),
    );
    let mut key: Vec<&Value> = Vec::with_capacity(key_at.len());
    let mut text = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        key.clear();
        key.extend(key_at.iter().filter_map(|&k| r.after.values.get(k)));
        text.clear();
        ids.identify(&key, &mut text);
        if fnv1a(&text) >> 63 == 0 {
            one.push(i);
        } else {
            two.push(i);
        }
    }
    (one, two)
}

/// The 64-bit FNV-1a hash of `bytes` (a key's text is a few bytes: this is cheaper per row
/// than a keyed hasher; its high bits are the well-mixed ones).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
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
