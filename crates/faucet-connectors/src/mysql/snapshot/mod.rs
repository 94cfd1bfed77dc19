//! `faucet replicate` from MySQL / MariaDB: a consistent copy of the listed tables, then
//! their binlog changes from exactly the copy's point — no gap, no overlap — into any sink.
//! The contract of `postgres::snapshot`, on the binlog's terms.
//!
//! [`MysqlReplicateSource`] takes a `mysql-cdc` configuration ([`MysqlCdcConfig`]) and reads
//! in two phases:
//!
//! 1. **Snapshot.** One session opens a consistent-snapshot transaction and reads its exact
//!    binlog point C (module `point`: lock-free on MariaDB with `binlog_snapshot_file` /
//!    `binlog_snapshot_position`; on MySQL under a brief `FLUSH TABLES WITH READ LOCK`,
//!    untested). Inside it each table of `tables` (in config order) is read in primary-key
//!    order, in pages of `batch_size` rows (`SELECT * ... WHERE (pk) > (last) ORDER BY pk
//!    LIMIT n`, the `mysql` query source's plan, literals and value mapping, so a value reads
//!    the same as through the binlog). Each row becomes a change record with the fields of
//!    `mysql-cdc`'s: `op: "r"`, `table`, `binlog_file` / `binlog_pos` = C (the point of the
//!    snapshot the row was read in: a later one for a resumed copy), `gtid`, `commit_ts` and
//!    `before` null, `after` the row. A page is handed out only once the next one is read
//!    (see "Resuming").
//! 2. **Binlog.** Once the last table is read the snapshot's transaction ends and
//!    [`MysqlCdcSource`] reads the binlog from C: every transaction starting at or after C,
//!    none before. Rows in the snapshot and changes never overlap, and nothing falls between
//!    them.
//!
//! Bookmarks (module `bookmark`): during the copy `{"snapshot": {"start": <mysql-cdc bookmark
//! of C>, "gtid_state", "tables": {t: {"key", "parts", "dirty"}}}}` — per table, which
//! primary-key ranges were copied as of which point (`copy_history`); the page that
//! finishes the last table carries the `mysql-cdc` bookmark of C, and from then on the
//! bookmarks are `mysql-cdc`'s (plus a `replicate` member after a resumed copy, until the
//! binlog passes the copy's latest point). The binlog has no slot: the changes after C are
//! kept only as long as the server keeps its binlog files (`binlog_expire_logs_seconds`); a
//! resume whose file of C was purged is refused with [`FaucetError::Bookmark`].
//!
//! **Resuming an interrupted copy.** A snapshot dies with its session, so a run that finds a
//! snapshot bookmark takes a new snapshot at a later point C2 and copies inside it only
//! what is missing: the interrupted table after the last key whose bookmark was stored, then
//! the tables not started; finished tables are not read again (a further interruption adds
//! C3, and so on). It then reads the binlog from C and drops a change of key k in a
//! transaction starting at L when the range holding k was copied as of a point P with L < P
//! (the copy holds it); see module `filter` for updates that move a key across ranges and
//! for TRUNCATE. Keys are compared by the server, in the key columns' types and collations.
//!
//! Each bookmark of the copy also names the page *in flight* after it (`dirty`): a crash
//! between a page's write and its bookmark may leave that page, read as of the old point, in
//! the sink, so its keys' changes are delivered from the old point on. A keyed upsert sink
//! ends equal to the source in every case. An append sink gets each row exactly once, every
//! change exactly once outside those ranges, and inside them (one page per interruption)
//! the changes committed between the two snapshots again — the at-least-once bound of an
//! append pipeline, which a crash between write and bookmark costs anyway.
//!
//! **A table added to `tables` later** (after the copy finished, or on a state key `faucet
//! run` started): a run with a change-stream bookmark whose `copied` member lacks listed
//! tables copies just those in a new snapshot at a new point C' (a *late copy*, resumable
//! as above), then reads the binlog from the stored bookmark, dropping their changes before
//! C' with the same filter; the other tables' changes flow on with no gap and no overlap
//! (module `bookmark`, also for a bookmark without `copied`). A table removed from
//! `tables` is dropped from `copied` and from the history.
//!
//! Limits (precise):
//! * Every listed table needs a primary key whose columns can be compared exactly (not
//!   FLOAT, DOUBLE, ENUM, SET, JSON): a table without one is refused with
//!   [`FaucetError::Config`] at `tables` before any data moves.
//! * A TRUNCATE of a table committed between the points of its ranges cannot be
//!   reconciled: [`FaucetError::Bookmark`] naming the table and the fix (rerun from scratch).
//! * The replay guarantee is reported as non-deterministic (a snapshot cannot be read again
//!   after a crash), so `effectively_once` needs a keyed upsert sink.

mod bookmark;
mod filter;
mod point;
mod stream;

use std::collections::BTreeSet;

use async_trait::async_trait;

use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

use crate::copy_filter::FilteredChanges;
use crate::copy_history::{KeepCopied, StreamBookmark};
use crate::mysql::cdc::bookmark::CdcBookmark;
use crate::mysql::cdc::{MysqlCdcConfig, MysqlCdcSource, ValidatedMysqlCdcConfig, server};
use crate::mysql::query::ReplicationMethod;
use crate::mysql::query::Target;
use crate::mysql::query::plan::Plan;
use crate::mysql::table::TableName;

use bookmark::{BinlogStart, Copied, SnapshotBookmark, single_gtid};
use filter::Filter;
use point::{SnapshotSession, cdc_point};
use stream::{ReplicateStream, no_primary_key};

/// The connector's name, in errors and summaries.
pub const CONNECTOR: &str = "mysql-replicate";

/// Snapshot-then-binlog over a `mysql-cdc` configuration (see the module docs). Built
/// without I/O; [`Source::open`] connects.
#[derive(Debug)]
pub struct MysqlReplicateSource {
    cdc: MysqlCdcSource,
    validated: ValidatedMysqlCdcConfig,
}

impl MysqlReplicateSource {
    /// A source for `config`, validated without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the invalid field.
    pub fn new(config: MysqlCdcConfig) -> Result<Self, FaucetError> {
        Ok(Self::from_validated(config.validate()?))
    }

    /// A source for a config [`MysqlCdcConfig::validate`] accepted.
    pub fn from_validated(validated: ValidatedMysqlCdcConfig) -> Self {
        Self {
            cdc: MysqlCdcSource::from_validated(validated.clone()),
            validated,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MysqlCdcConfig {
        &self.validated.config
    }

    /// Refuses a table of `tables` (listed, or matched by a pattern) without a usable
    /// primary key (before any data moves).
    async fn check_keys(
        &self,
        conn: &mut mysql_async::Conn,
        tables: &[TableName],
    ) -> Result<(), FaucetError> {
        for t in tables {
            let plan = Plan::describe(
                conn,
                &self.validated.connection,
                &Target::Table(t.clone()),
                ReplicationMethod::FullTable,
                &[],
            )
            .await?;
            if plan.order.is_none() {
                return Err(no_primary_key(&t.to_string()));
            }
        }
        Ok(())
    }

    /// Continues an interrupted copy: checks that the binlog since its first point is still
    /// there, then takes a new snapshot (when anything is left to copy).
    async fn resume_snapshot(
        &self,
        position: &SnapshotBookmark,
        tables: &[TableName],
    ) -> Result<Option<SnapshotSession>, FaucetError> {
        let mut conn = self.validated.connection.connect().await?;
        let facts = server::facts(&mut conn).await?;
        if facts.identity != position.start.cdc.server {
            return Err(FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "the interrupted snapshot was taken on the server with server_id {}, but \
                     this one has server_id {}: its binlog positions do not apply here. \
                     Delete this pipeline's state entry, empty the target, and run `faucet \
                     replicate` again",
                    position.start.cdc.server.server_id, facts.identity.server_id
                ),
                None,
            ));
        }
        let files = server::binlog_files(&mut conn).await?;
        server::require_file(&files, &position.start.cdc.position)?;
        let pending = tables.iter().any(|t| !position.holds(&t.to_string()));
        if !pending {
            return Ok(None);
        }
        self.check_keys(&mut conn, tables).await?;
        drop(conn);
        let session = SnapshotSession::start(&self.validated.connection, facts.mariadb).await?;
        tracing::info!(
            first_point = %position.start.cdc.position,
            resumed_at = %session.point,
            "resuming the interrupted snapshot"
        );
        Ok(Some(session))
    }
}

#[async_trait]
impl Source for MysqlReplicateSource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// The binlog after the snapshot is read as `mysql-cdc` reads it, in a task of its own.
    fn reads_in_task(&self) -> bool {
        true
    }

    /// A snapshot cannot be read again once its session ended.
    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::NonDeterministic
    }

    /// Every page holds change records, of this module's one schema.
    fn record_schema(&self) -> Option<std::sync::Arc<faucet_core::Schema>> {
        Some(crate::mysql::cdc::changes::record_schema())
    }

    /// The `mysql-cdc` source's keys of the listed tables (the copy and the stream write the
    /// same tables).
    ///
    /// # Errors
    /// As the `mysql-cdc` source's.
    async fn table_keys(&self) -> Result<Option<Vec<faucet_core::keys::TableKeys>>, FaucetError> {
        self.cdc.table_keys().await
    }

    /// Without a bookmark: checks the `mysql-cdc` prerequisites and the primary keys, takes
    /// the snapshot and copies the tables, then reads the binlog from its point. With a
    /// snapshot bookmark: copies what is missing inside a new snapshot, then reads the
    /// binlog from the first point through the filter (module docs). With a change-stream
    /// bookmark: reads from it, filtered while its `replicate` member says so.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `tables` for a table without a usable primary key;
    /// [`FaucetError::Bookmark`] for an interrupted snapshot whose binlog was purged or
    /// that was taken on another server, or a malformed bookmark; otherwise as
    /// [`MysqlCdcSource::open`].
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let connection = self.validated.connection.clone();
        // The patterns are matched once, here: the copy takes the tables they match now; a
        // table created later arrives through the binlog from its creation on.
        let mut conn = connection.connect().await?;
        let tables = self.cdc.tables_now(&mut conn).await?;
        drop(conn);
        if let Some(b) = &from {
            let position = match SnapshotBookmark::from_json(b)? {
                Some(position) => position,
                None => {
                    let listed: BTreeSet<String> = tables.iter().map(ToString::to_string).collect();
                    let StreamBookmark {
                        cdc,
                        history,
                        known,
                        missing,
                    } = StreamBookmark::<point::SnapshotPoint>::read(b, CONNECTOR, &listed)?;
                    if missing.is_empty() {
                        let start = cdc_point(&cdc);
                        let inner = self.cdc.open(Some(cdc), options).await?;
                        let filter = match (history, start) {
                            (Some(h), Some(start)) => Filter::new(h, start, connection),
                            _ => None,
                        };
                        let changes = Box::new(FilteredChanges { inner, filter });
                        return Ok(KeepCopied::wrap(changes, Some(known)));
                    }
                    // A late copy of the listed tables not copied before (module docs).
                    let start = CdcBookmark::from_json(&cdc)?;
                    tracing::info!(
                        tables = ?missing,
                        from = %start.position,
                        "copying the listed tables not copied before, then reading the binlog on"
                    );
                    SnapshotBookmark {
                        start: BinlogStart {
                            cdc: start,
                            gtid_state: None,
                        },
                        copied: history.unwrap_or_default(),
                        earlier: known,
                    }
                }
            };
            let session = self.resume_snapshot(&position, &tables).await?;
            return Ok(Box::new(ReplicateStream::new(
                &self.cdc, connection, tables, session, position, options,
            )));
        }
        self.cdc.check().await?;
        let mut conn = connection.connect().await?;
        let facts = server::facts(&mut conn).await?;
        self.check_keys(&mut conn, &tables).await?;
        drop(conn);
        let session = SnapshotSession::start(&connection, facts.mariadb).await?;
        let position = SnapshotBookmark {
            start: BinlogStart {
                cdc: CdcBookmark {
                    position: session.point.clone(),
                    gtid: single_gtid(session.gtid.as_deref()),
                    gtid_state: session
                        .gtid
                        .as_deref()
                        .and_then(crate::mysql::cdc::position::GtidState::parse),
                    // MySQL: @@gtid_executed read at the snapshot point.
                    gtid_set: session
                        .gtid
                        .as_deref()
                        .filter(|_| !facts.mariadb)
                        .and_then(|g| crate::mysql::cdc::gtid_set::MysqlGtidSet::parse(g).ok()),
                    by_gtid: false,
                    server: facts.identity,
                    in_txn: None,
                },
                gtid_state: session.gtid.clone(),
            },
            copied: Copied::default(),
            earlier: BTreeSet::new(),
        };
        Ok(Box::new(ReplicateStream::new(
            &self.cdc,
            connection,
            tables,
            Some(session),
            position,
            options,
        )))
    }

    /// As `mysql-cdc`'s check (binlog settings, privileges, server id), plus a usable
    /// primary key on every listed table; nothing is read.
    async fn check(&self) -> Result<(), FaucetError> {
        self.cdc.check().await?;
        let mut conn = self.validated.connection.connect().await?;
        let tables = self.cdc.tables_now(&mut conn).await?;
        self.check_keys(&mut conn, &tables).await
    }
}
