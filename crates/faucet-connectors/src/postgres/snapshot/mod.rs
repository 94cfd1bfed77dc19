//! `faucet replicate`: a consistent initial copy of the published tables, then their change
//! stream, with no gap and no overlap, into any sink (an append sink included).
//!
//! [`PostgresReplicateSource`] takes a `postgres-cdc` configuration
//! ([`PostgresCdcConfig`]) and reads in two phases:
//!
//! 1. **Snapshot.** The slot is created on a replication session with
//!    `CREATE_REPLICATION_SLOT <slot> LOGICAL pgoutput (SNAPSHOT 'export')` (module
//!    `export`): the server returns the slot's *consistent point* C and the name of a
//!    snapshot that sees exactly the transactions committed before C. While that session
//!    stays open and idle, each table of `tables` (in config order) is read on an ordinary
//!    session that imports the snapshot (`BEGIN ISOLATION LEVEL REPEATABLE READ; SET
//!    TRANSACTION SNAPSHOT ...`), with the `postgres` query source's reader
//!    (`COPY (SELECT * ... ORDER BY <primary key>) TO STDOUT`, the shared type mapping).
//!    Each row becomes a change record with `op: "r"`, `table`, `lsn` = C (the consistent
//!    point of the snapshot the row was read in: a later one for a resumed copy),
//!    `commit_ts` null, `before` null, `after` the row, `unchanged_toast` `[]` (the fields
//!    of the `postgres-cdc` records, docs/change-records.md). A table with a primary
//!    key is read in key order, one page held back (see "Resuming" below).
//! 2. **Change stream.** Once the last table is read the replication session ends and the
//!    ordinary [`PostgresCdcSource`] streams the slot from C: every transaction committed
//!    after C, none before. Rows in the snapshot and changes in the stream therefore never
//!    overlap, and nothing falls between them.
//!
//! Bookmarks (module `bookmark`): during the copy `{"snapshot": {"slot_lsn": C, "tables":
//! {t: {"key", "parts", "dirty"}}, "unkeyed"}}` — per table, which primary-key ranges were
//! copied as of which consistent point; the page that finishes the last table carries
//! `{"lsn": C}`, the `postgres-cdc` bookmark of the consistent point, and from then on the
//! bookmarks are `postgres-cdc`'s (plus a `replicate` member after a resumed copy, until
//! the stream passes the copy's latest point). The slot's `confirmed_flush_lsn` stays at C
//! during the copy (nothing is acknowledged before the change stream starts), so the
//! changes after C are retained however long the copy takes, across interruptions too.
//!
//! **Resuming an interrupted copy.** The exported snapshot dies with the session that held
//! it, so a run that finds a snapshot bookmark:
//! 1. checks that the slot still exists and has not confirmed past C (else
//!    [`FaucetError::Bookmark`] with the fix: rerun from scratch);
//! 2. takes a new snapshot on a TEMPORARY slot (`<slot>_r<hex>`, dropped by the server when
//!    its session ends, also if the process dies) at a later consistent point C2;
//! 3. copies inside it only what is missing: the interrupted table after the last key whose
//!    bookmark was stored (`WHERE (pk) > (key)`, as the `postgres` query source resumes),
//!    then the tables not started; finished tables are not read again. A further
//!    interruption adds a third point C3, and so on: each table's history is a list of key
//!    ranges, each with its point;
//! 4. streams the slot from C and drops a change of key k committed at L when the range
//!    holding k was copied as of a point P with L < P (the copy holds it); see module
//!    `filter` for updates that move a key across ranges and for TRUNCATE. Keys are
//!    compared by the server, in the primary key's types and collations.
//!
//! The copy hands a page out only once the next one is read, so each bookmark also names
//! the page *in flight* after it (`dirty`). A crash between a page's write and its
//! bookmark may leave that page, read as of the old point, in the sink; its keys' changes
//! are therefore delivered from the old point on. A keyed upsert sink converges to the
//! source exactly in every case. An append sink gets each row exactly once, every change
//! exactly once outside those ranges, and inside them (one page per interruption) the
//! changes committed between the two snapshots delivered again — the at-least-once bound
//! of an append pipeline, which a crash between write and bookmark would cost anyway.
//!
//! **A table added to `tables` later** (after the copy finished, or on a state key `faucet
//! run` started): a run with a change-stream bookmark whose `copied` member lacks listed
//! tables copies just those in a new snapshot on a temporary slot at a new point C' — a
//! *late copy*, resumable as above — then streams the slot from the stored bookmark,
//! dropping their changes before C' with the same filter (their copy history: parts as of
//! C'); the other tables' changes flow on with no gap and no overlap. A bookmark without
//! `copied` (`faucet run`'s, or an older replicate's) counts only the tables of its history
//! as copied (module `bookmark`). A table removed from `tables` is dropped from `copied`
//! and from the history, so the filter does not wait for its points.
//!
//! Limits (precise):
//! * A table without a primary key is copied in one pass; its copy cannot continue
//!   mid-table, so a run interrupted while copying it fails with [`FaucetError::Bookmark`]
//!   ("snapshot interrupted while copying ..., which has no primary key") naming the fix.
//!   Interrupted before or after it, the copy resumes normally.
//! * A TRUNCATE of a table committed between the points of its ranges cannot be
//!   reconciled: [`FaucetError::Bookmark`] naming the table and the fix (rerun from scratch).
//! * Opened without a bookmark, the slot must not exist yet (it is created with the
//!   snapshot); an existing slot is refused with the fix. The first page after the slot is
//!   created is an empty one carrying the position, so only a process killed between the
//!   server creating the slot and that first bookmark being stored (milliseconds) leaves a
//!   slot without a bookmark, which the next run refuses that way.
//! * The replay guarantee is reported as non-deterministic (a snapshot cannot be read again
//!   after a crash), so `effectively_once` needs a keyed upsert sink.

mod bookmark;
mod export;
mod filter;
mod stream;

use std::collections::BTreeSet;

use async_trait::async_trait;

use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

use crate::copy_filter::FilteredChanges;
use crate::copy_history::{KeepCopied, StreamBookmark};
use crate::postgres::cdc::catalog;
use crate::postgres::cdc::client::{lsn_text, parse_lsn};
use crate::postgres::cdc::config::TableName;
use crate::postgres::cdc::{PostgresCdcConfig, PostgresCdcSource, ValidatedCdcConfig};
use crate::postgres::connection::PostgresUrl;

use bookmark::{Copied, SlotStart, SnapshotBookmark};
use export::{ExportedSnapshot, temporary_slot_name};
use filter::Filter;
use stream::ReplicateStream;

/// The connector's name, in errors and summaries.
pub const CONNECTOR: &str = "postgres-replicate";

/// Snapshot-then-CDC over a `postgres-cdc` configuration (see the module docs). Built
/// without I/O; [`Source::open`] connects.
#[derive(Debug)]
pub struct PostgresReplicateSource {
    cdc: PostgresCdcSource,
    connection: PostgresUrl,
}

impl PostgresReplicateSource {
    /// A source for `config`, validated without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the invalid field.
    pub fn new(config: PostgresCdcConfig) -> Result<Self, FaucetError> {
        Ok(Self::from_validated(config.validate()?))
    }

    /// A source for a config [`PostgresCdcConfig::validate`] accepted (no I/O, nothing
    /// parsed again).
    pub fn from_validated(validated: ValidatedCdcConfig) -> Self {
        let connection = validated.connection.clone();
        Self {
            cdc: PostgresCdcSource::from_validated(validated),
            connection,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PostgresCdcConfig {
        self.cdc.config()
    }

    /// The tables to copy and stream (the listed ones and those the patterns match at
    /// start), `schema.table`.
    fn listed(tables: &[TableName]) -> BTreeSet<String> {
        tables.iter().map(TableName::qualified).collect()
    }

    fn rerun(&self) -> String {
        format!(
            "Rerun from scratch: drop the slot (`SELECT pg_drop_replication_slot('{}')`) if it \
             exists, delete this pipeline's state entry, empty the target, and run `faucet \
             replicate` again",
            self.cdc.config().slot_name
        )
    }

    /// The slot's `confirmed_flush_lsn`, `None` when the slot does not exist.
    async fn slot_position(&self) -> Result<Option<Option<String>>, FaucetError> {
        let mut conn = self.connection.connect_sql().await?;
        sqlx::query_scalar(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(&self.cdc.config().slot_name)
        .fetch_optional(&mut conn)
        .await
        .map_err(|e| {
            FaucetError::read(
                CONNECTOR,
                "reading pg_replication_slots failed",
                Some(Box::new(e)),
            )
        })
    }

    /// Checks the server and the publication (creating it when allowed) and that the slot
    /// does not exist yet, then creates it with an exported snapshot.
    async fn start_snapshot(&self, tables: &[TableName]) -> Result<ExportedSnapshot, FaucetError> {
        let want = self.cdc.wanted(tables);
        let mut conn = self.connection.connect_sql().await?;
        catalog::check_server(&mut conn).await?;
        catalog::check_publication(&mut conn, &want, true).await?;
        drop(conn);
        if self.slot_position().await?.is_some() {
            return Err(FaucetError::read(
                CONNECTOR,
                format!(
                    "replication slot `{0}` already exists, but this pipeline has no bookmark: \
                     replicate creates its slot together with the snapshot. Drop it (`SELECT \
                     pg_drop_replication_slot('{0}')`) or choose another `slot_name`",
                    want.slot
                ),
                None,
            ));
        }
        ExportedSnapshot::create(&self.connection, want.slot, want.publication, false).await
    }

    /// Continues an interrupted copy: checks that the slot still holds every change since
    /// its consistent point, then takes a new snapshot on a temporary slot (when anything
    /// is left to copy).
    async fn resume_snapshot(
        &self,
        position: &SnapshotBookmark,
        tables: &[TableName],
    ) -> Result<Option<ExportedSnapshot>, FaucetError> {
        if let Some(table) = &position.start.unkeyed {
            return Err(FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "snapshot interrupted while copying {table}, which has no primary key: its \
                     copy cannot continue mid-table, and copying it again would deliver its \
                     rows twice. Give {table} a primary key, or leave it out of `tables`, and \
                     rerun from scratch. {}",
                    self.rerun()
                ),
                None,
            ));
        }
        let slot = &self.cdc.config().slot_name;
        let confirmed = match self.slot_position().await? {
            None => {
                return Err(FaucetError::bookmark(
                    CONNECTOR,
                    format!(
                        "the copy streams replication slot `{slot}` from {}, but the slot no \
                         longer exists, so the changes since then are lost. {}",
                        lsn_text(position.start.slot_lsn),
                        self.rerun()
                    ),
                    None,
                ));
            }
            Some(c) => c.as_deref().and_then(parse_lsn),
        };
        // A late copy streams from a `postgres-cdc` bookmark, which the slot may be ahead
        // of (a restored state): the stream then warns as `postgres-cdc` does.
        if let Some(c) = confirmed
            && position.start.stream.is_none()
            && c > position.start.slot_lsn
        {
            return Err(FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "snapshot interrupted, and replication slot `{slot}` already confirmed {} \
                     past its consistent point {}: the changes between them are no longer \
                     retained. {}",
                    lsn_text(c),
                    lsn_text(position.start.slot_lsn),
                    self.rerun()
                ),
                None,
            ));
        }
        let pending = tables.iter().any(|t| !position.holds(&t.qualified()));
        if !pending {
            return Ok(None);
        }
        // The tables to copy must be published before the new point, so that their
        // changes after it are in the stream.
        let mut conn = self.connection.connect_sql().await?;
        catalog::check_publication(&mut conn, &self.cdc.wanted(tables), true).await?;
        drop(conn);
        let temporary = temporary_slot_name(slot);
        let exported = ExportedSnapshot::create(
            &self.connection,
            &temporary,
            &self.cdc.config().publication,
            true,
        )
        .await?;
        tracing::info!(
            slot = %slot,
            consistent_point = %lsn_text(position.start.slot_lsn),
            resumed_at = %exported.consistent_point_text,
            "resuming the interrupted snapshot"
        );
        Ok(Some(exported))
    }
}

#[async_trait]
impl Source for PostgresReplicateSource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// A snapshot cannot be read again once its session ended.
    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::NonDeterministic
    }

    /// Every page holds change records, of this module's one schema.
    fn record_schema(&self) -> Option<std::sync::Arc<faucet_core::Schema>> {
        Some(crate::postgres::cdc::changes::record_schema())
    }

    /// The `postgres-cdc` source's keys of the listed tables (the copy and the stream write the
    /// same tables).
    ///
    /// # Errors
    /// As the `postgres-cdc` source's.
    async fn table_keys(&self) -> Result<Option<Vec<faucet_core::keys::TableKeys>>, FaucetError> {
        self.cdc.table_keys().await
    }

    /// Without a bookmark: creates the slot with an exported snapshot and copies the tables,
    /// then streams the slot. With a snapshot bookmark: copies what is missing inside a new
    /// snapshot, then streams the slot from its consistent point through the filter (module
    /// docs). With a change-stream bookmark: streams from it, filtered while its `replicate`
    /// member says so.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] for an interrupted snapshot that cannot continue (a table
    /// without a primary key was being copied, the slot is gone or moved past the consistent
    /// point) or a malformed bookmark; otherwise as [`PostgresCdcSource::open`], plus
    /// [`FaucetError::Read`] when the slot already exists on a first run.
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        // The sessions that copy tables use the URL parsed once by validation.
        let options_sql = self.connection.clone();
        // The patterns are matched once, here: the copy takes the tables they match now; a
        // table created later arrives through the stream from its creation on.
        let mut conn = self.connection.connect_sql().await?;
        let tables = self.cdc.tables_now(&mut conn).await?;
        drop(conn);
        if let Some(b) = &from {
            let position = match SnapshotBookmark::from_json(b)? {
                Some(position) => position,
                None => {
                    let StreamBookmark {
                        cdc,
                        history,
                        known,
                        missing,
                    } = StreamBookmark::read(b, CONNECTOR, &Self::listed(&tables))?;
                    let start = bookmark::cdc_position(&cdc);
                    if missing.is_empty() {
                        let inner = self.cdc.open(Some(cdc), options).await?;
                        let filter = match (history, start) {
                            (Some(h), Some(start)) => Filter::new(h, start, options_sql),
                            _ => None,
                        };
                        let changes = Box::new(FilteredChanges { inner, filter });
                        return Ok(KeepCopied::wrap(changes, Some(known)));
                    }
                    // A late copy of the listed tables not copied before (module docs).
                    let Some(slot_lsn) = start else {
                        return Err(FaucetError::bookmark(
                            CONNECTOR,
                            format!("the stored bookmark {cdc} has no `lsn` to stream from"),
                            None,
                        ));
                    };
                    tracing::info!(
                        tables = ?missing,
                        from = %lsn_text(slot_lsn),
                        "copying the listed tables not copied before, then streaming on"
                    );
                    SnapshotBookmark {
                        start: SlotStart {
                            slot_lsn,
                            unkeyed: None,
                            stream: Some(cdc),
                        },
                        copied: history.unwrap_or_default(),
                        earlier: known,
                    }
                }
            };
            let exported = self.resume_snapshot(&position, &tables).await?;
            return Ok(Box::new(ReplicateStream::new(
                &self.cdc,
                options_sql,
                tables,
                exported,
                position,
                options,
            )));
        }
        let exported = self.start_snapshot(&tables).await?;
        let position = SnapshotBookmark {
            start: SlotStart {
                slot_lsn: exported.consistent_point,
                unkeyed: None,
                stream: None,
            },
            copied: Copied::default(),
            earlier: BTreeSet::new(),
        };
        Ok(Box::new(ReplicateStream::new(
            &self.cdc,
            options_sql,
            tables,
            Some(exported),
            position,
            options,
        )))
    }

    /// As `postgres-cdc`'s check (server, publication, slot or a free slot); nothing is
    /// created.
    async fn check(&self) -> Result<(), FaucetError> {
        self.cdc.check().await
    }
}
