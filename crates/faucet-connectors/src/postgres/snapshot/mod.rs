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
//!    Each row becomes a change record with `op: "r"`, `table`, `lsn` = C, `commit_ts`
//!    null, `before` null, `after` the row, `unchanged_toast` `[]` (the fields of the
//!    `postgres-cdc` records, DESIGN.md "Change records").
//! 2. **Change stream.** Once the last table is read the replication session ends and the
//!    ordinary [`PostgresCdcSource`] streams the slot from C: every transaction committed
//!    after C, none before. Rows in the snapshot and changes in the stream therefore never
//!    overlap, and nothing falls between them.
//!
//! Bookmarks: during the snapshot `{"snapshot": {"slot_lsn": C, "done": [tables copied],
//! "table": t, "after_key": [last primary-key tuple of t delivered, as text]}}`; the page
//! that finishes the last table carries `{"lsn": C}`, the `postgres-cdc` bookmark of the
//! consistent point, and from then on the bookmarks are `postgres-cdc`'s. The slot's
//! `confirmed_flush_lsn` stays at C during the snapshot (nothing is acknowledged before the
//! change stream starts), so the changes after C are retained for the whole copy.
//!
//! Limits (precise):
//! * **An interrupted snapshot is not resumed.** The exported snapshot dies with the
//!   process that holds its session; a new one would be taken at a later point C2 > C, and
//!   the rows copied before the crash (as of C) and after it (as of C2) could not be
//!   reconciled with the change stream from C without per-key filtering, which is not
//!   implemented. Opening with a snapshot bookmark therefore fails with
//!   [`FaucetError::State`] ("snapshot interrupted: ...") naming what to drop and how to
//!   rerun; it never marks the snapshot done and never silently reloads or skips rows.
//!   A crash after the last table (bookmark `{"lsn": C}` or later) resumes normally.
//! * Opened without a bookmark, the slot must not exist yet (it is created with the
//!   snapshot); an existing slot is refused with the fix.
//! * A table without a primary key is copied in one pass (no mid-table bookmark).
//! * The replay guarantee is reported as non-deterministic (a snapshot cannot be read again
//!   after a crash), so `effectively_once` needs a keyed upsert sink.

mod bookmark;
mod export;
mod stream;

use async_trait::async_trait;
use secrecy::ExposeSecret;

use faucet_core::serde_json::json;
use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

use crate::postgres::cdc::catalog::{self, Wanted};
use crate::postgres::cdc::client::ConnectionParams;
use crate::postgres::cdc::config::TableName;
use crate::postgres::cdc::{PostgresCdcConfig, PostgresCdcSource};

use bookmark::SnapshotBookmark;
use export::ExportedSnapshot;
use stream::ReplicateStream;

/// The connector's name, in errors and summaries.
pub const CONNECTOR: &str = "postgres-replicate";

/// Snapshot-then-CDC over a `postgres-cdc` configuration (see the module docs). Built
/// without I/O; [`Source::open`] connects.
#[derive(Debug)]
pub struct PostgresReplicateSource {
    cdc: PostgresCdcSource,
    params: ConnectionParams,
    tables: Vec<TableName>,
}

impl PostgresReplicateSource {
    /// A source for `config`, validated without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the invalid field.
    pub fn new(config: PostgresCdcConfig) -> Result<Self, FaucetError> {
        let params = ConnectionParams::parse(config.connection_url.expose_secret())?;
        let tables = config.table_names()?;
        Ok(Self {
            cdc: PostgresCdcSource::new(config)?,
            params,
            tables,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PostgresCdcConfig {
        self.cdc.config()
    }

    fn wanted(&self) -> Wanted<'_> {
        let c = self.cdc.config();
        Wanted {
            database: self.params.database(),
            slot: &c.slot_name,
            publication: &c.publication,
            tables: &self.tables,
            create_publication: c.create_publication,
        }
    }

    /// Checks the server and the publication (creating it when allowed) and that the slot
    /// does not exist yet, then creates it with an exported snapshot.
    async fn start_snapshot(&self) -> Result<ExportedSnapshot, FaucetError> {
        let want = self.wanted();
        let mut conn = self.params.connect_sql().await?;
        catalog::check_server(&mut conn).await?;
        catalog::check_publication(&mut conn, &want, true).await?;
        let exists: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1")
                .bind(want.slot)
                .fetch_optional(&mut conn)
                .await
                .map_err(|e| {
                    FaucetError::read(
                        CONNECTOR,
                        "reading pg_replication_slots failed",
                        Some(Box::new(e)),
                    )
                })?;
        drop(conn);
        if exists.is_some() {
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
        ExportedSnapshot::create(&self.params, want.slot, want.publication).await
    }
}

/// The error for a snapshot bookmark: the snapshot cannot be continued (module docs).
fn interrupted(slot: &str, b: &SnapshotBookmark) -> FaucetError {
    FaucetError::state(
        CONNECTOR,
        format!(
            "snapshot interrupted: the copy made as of {} stopped in table {} after key {:?} \
             ({} table(s) finished), and its exported snapshot ended with the process, so it \
             cannot be continued without a gap or an overlap. Rerun from scratch: drop the \
             slot (`SELECT pg_drop_replication_slot('{slot}')`), delete this pipeline's state \
             entry, empty the target, and run `faucet replicate` again",
            b.slot_lsn,
            b.table.as_deref().unwrap_or("(between tables)"),
            b.after_key.as_deref().unwrap_or_default(),
            b.done.len()
        ),
    )
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

    /// Without a bookmark: creates the slot with an exported snapshot and copies the tables,
    /// then streams the slot. With a `postgres-cdc` bookmark: streams from it.
    ///
    /// # Errors
    /// [`FaucetError::State`] for a snapshot bookmark (an interrupted snapshot, see the
    /// module docs) or a malformed one; otherwise as [`PostgresCdcSource::open`], plus
    /// [`FaucetError::Read`] when the slot already exists on a first run.
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        if let Some(b) = &from {
            if let Some(s) = SnapshotBookmark::from_json(b)? {
                return Err(interrupted(&self.cdc.config().slot_name, &s));
            }
            return self.cdc.open(from, options).await;
        }
        let exported = self.start_snapshot().await?;
        let url = self.cdc.config().connection_url.clone();
        let options_sql = crate::postgres::config::parse_url(&url, "connection_url")?;
        let start = json!({"lsn": exported.consistent_point_text});
        Ok(Box::new(ReplicateStream::new(
            &self.cdc,
            options_sql,
            self.tables.iter().map(TableName::qualified).collect(),
            exported,
            start,
            options,
        )))
    }

    /// As `postgres-cdc`'s check (server, publication, slot or a free slot); nothing is
    /// created.
    async fn check(&self) -> Result<(), FaucetError> {
        self.cdc.check().await
    }
}
