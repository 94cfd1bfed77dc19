//! The `postgres-cdc` source: PostgreSQL logical replication with the built-in `pgoutput`
//! plugin (PostgreSQL manual: "Logical Streaming Replication Protocol", "Logical Replication
//! Message Formats"), emitting the change records of docs/change-records.md.
//!
//! ```no_run
//! # async fn run() -> Result<(), faucet_core::FaucetError> {
//! use faucet_connectors::postgres::cdc::{PostgresCdcConfig, PostgresCdcSource};
//!
//! let source = PostgresCdcSource::new(PostgresCdcConfig::new(
//!     "postgres://replicator@localhost/shop",
//!     "faucet_slot",
//!     "faucet_pub",
//!     ["public.orders"],
//! ))?;
//! # let _ = source;
//! # Ok(())
//! # }
//! ```
//!
//! How it reads:
//! * [`PostgresCdcSource::open`] checks the prerequisites (module `catalog`), creates the
//!   slot when missing (and the publication when `create_publication` allows), then starts
//!   replication from the bookmark's LSN, or from the slot's own `confirmed_flush_lsn`
//!   without one (never from the current WAL position, which would skip changes: case 03).
//! * Pages hold at most `batch_size` change records and may end inside a transaction, never
//!   inside a change; memory is one page plus a bounded buffer of 4,096 events, whatever the
//!   size of a transaction. Replay is deterministic. A page is handed over once its oldest
//!   change has waited `max_page_delay` ([`faucet_core::ReadOptions`]), so a continuous run
//!   delivers a steady trickle within that bound.
//! * The slot's `confirmed_flush_lsn` moves only when the run loop reports a bookmark durable
//!   ([`faucet_core::PageStream::bookmark_durable`]), within the page delay (10 ms
//!   to 200 ms: the standby status interval follows it) and before the
//!   stream closes; never ahead of it (docs/run-loop.md, invariant 2).
//! * Bounded by default: catch up to `pg_current_wal_lsn()` as read at open, then end;
//!   `continuous: true` follows until the run is cancelled, then hands over the page in hand.
//!   A bounded run's pages carry their [`faucet_core::Extent`]: the WAL bytes from the start
//!   position to the page's, of those to the end position; a continuous run's carry none.
//!
//! Change records (docs/change-records.md), one per change, fields in this order:
//!
//! | field | value |
//! |---|---|
//! | `op` | `c` insert, `u` update, `d` delete, `t` truncate |
//! | `table` | `schema.table` |
//! | `lsn` | the commit LSN of the change's transaction (`X/X`), shared by its changes |
//! | `commit_ts` | the transaction's commit time, RFC 3339 in UTC |
//! | `before` | per REPLICA IDENTITY: the key columns (default, USING INDEX), the whole old row (FULL); null for inserts and truncates |
//! | `after` | the new row; null for deletes and truncates |
//! | `unchanged_toast` | names of columns left out of `after` because the server did not resend their unchanged TOASTed value (case 01); never turned into null. With REPLICA IDENTITY FULL the value is taken from the old row instead |
//!
//! A TRUNCATE gives one `t` record per published table it names, in the statement's order
//! (case 17). A column added or dropped mid-stream shows in the records after it (each
//! Relation message replaces the table's shape, case 26); an added column is also logged,
//! since the rows that got its default produced no change. Values are exact
//! (docs/values.md): the walsender session pins UTC, ISO dates, ISO 8601
//! intervals and hex bytea, whatever the role or database defaults.
//!
//! Bookmarks: `{"lsn": "X/X"}`, the end of the last transaction delivered completely (or a
//! keepalive's WAL position when no transaction was open), plus, when a page ended inside a
//! transaction, `"in_txn": {"final_lsn": "X/X", "xid": N, "skip": K}`: the stream resumes
//! at `lsn`, the server replays that transaction, and its first K changes are skipped.
//!
//! The replication connection is the `pgwire-replication` crate's client: a maintained
//! (2026), tokio-based pgoutput client with SCRAM/MD5 authentication whose background task
//! reads the socket into a bounded channel and answers keepalives itself, also while the
//! consumer is busy writing a page (so `wal_sender_timeout` never fires on a slow sink), and
//! which reports as flushed only the LSN it is given, starting from a separate
//! acknowledged position. TLS is not compiled in (as for the sqlx connections).

mod bookmark;
pub(crate) mod catalog;
pub(crate) mod changes;
pub(crate) mod client;
pub(crate) mod config;
mod pgoutput;
mod relation_types;
pub(crate) mod resolve;
pub mod retention;
mod shapes;
pub(crate) mod slot_wait;
mod stream;

use async_trait::async_trait;

use faucet_core::{Bookmark, FaucetError, Page, PageStream, ReadOptions, ReplayGuarantee, Source};

pub use config::{PostgresCdcConfig, SlotInUse, ValidatedCdcConfig};

use crate::postgres::connection::PostgresUrl;
use bookmark::CdcBookmark;
use catalog::Wanted;
use changes::{ChangeDecoder, record_schema};
use config::TableName;
use stream::{CdcPageStream, StreamStart, stream_error};

use crate::sql::table_pattern::{TablePattern, empty_match};

/// The connector's name, in errors and summaries.
pub const CONNECTOR: &str = "postgres-cdc";

/// The `postgres-cdc` source. Built without I/O; [`Source::open`] and [`Source::check`]
/// connect.
#[derive(Debug)]
pub struct PostgresCdcSource {
    config: PostgresCdcConfig,
    connection: PostgresUrl,
    tables: Vec<TableName>,
    patterns: Vec<TablePattern>,
}

impl PostgresCdcSource {
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
        let ValidatedCdcConfig {
            config,
            connection,
            tables,
            patterns,
        } = validated;
        Self {
            config,
            connection,
            tables,
            patterns,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PostgresCdcConfig {
        &self.config
    }

    /// What the catalog checks need, for `tables` (what [`Self::tables_now`] found).
    pub(crate) fn wanted<'a>(&'a self, tables: &'a [TableName]) -> Wanted<'a> {
        Wanted {
            database: self.connection.database(),
            slot: &self.config.slot_name,
            publication: &self.config.publication,
            tables,
            patterns: &self.patterns,
            create_publication: self.config.create_publication,
            slot_in_use: self.config.slot_in_use,
        }
    }

    /// The tables `tables` names now: the listed ones and those its patterns match
    /// ([`resolve::tables_now`]); patterns that match nothing fail a bounded run and are
    /// warned about in a continuous one ([`empty_match`]).
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the catalog cannot be read or a bounded run's pattern
    /// matches nothing.
    pub(crate) async fn tables_now(
        &self,
        conn: &mut sqlx::PgConnection,
    ) -> Result<Vec<TableName>, FaucetError> {
        let (tables, empty) = resolve::tables_now(conn, &self.tables, &self.patterns).await?;
        empty_match(CONNECTOR, &empty, self.config.continuous)?;
        if !self.patterns.is_empty() {
            tracing::info!(
                tables = ?tables.iter().map(TableName::qualified).collect::<Vec<_>>(),
                "the tables `tables` names now (its patterns matched against the catalog)"
            );
        }
        Ok(tables)
    }
}

#[async_trait]
impl Source for PostgresCdcSource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// A replication slot replays the same changes in the same order from a position.
    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::Deterministic
    }

    /// Every page holds change records, of this module's one schema.
    fn record_schema(&self) -> Option<std::sync::Arc<faucet_core::Schema>> {
        Some(record_schema())
    }

    /// Each listed or matched table's primary key and unique indexes (the replica identity
    /// index among them), from `pg_index`; the patterns are matched at the time of asking, so
    /// a table created later is there once it exists.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] / [`FaucetError::Read`] when the catalog cannot be read.
    async fn table_keys(&self) -> Result<Option<Vec<faucet_core::keys::TableKeys>>, FaucetError> {
        let mut conn = self.connection.connect_sql().await?;
        let (tables, _) = resolve::tables_now(&mut conn, &self.tables, &self.patterns).await?;
        let mut keys = Vec::with_capacity(tables.len());
        for t in &tables {
            // A table not created yet is refused by `open`, with its fix; nothing to compare.
            let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
                .bind(t.quoted())
                .fetch_one(&mut conn)
                .await
                .map_err(|e| {
                    FaucetError::read(CONNECTOR, "looking up a table failed", Some(Box::new(e)))
                })?;
            if !exists {
                continue;
            }
            let catalog = crate::postgres::query::plan::table_keys(&mut conn, &t.quoted()).await?;
            keys.push(faucet_core::keys::TableKeys {
                table: t.qualified(),
                primary_key: catalog.primary_key,
                unique_sets: catalog.unique_sets,
            });
        }
        Ok(Some(keys))
    }

    /// Each listed or matched table's columns in the catalog now (`pg_attribute`, typed by
    /// `format_type` as a Relation message's are), as the bookmark's `shapes` hold them.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] / [`FaucetError::Read`] when the catalog cannot be read.
    async fn current_shapes(
        &self,
    ) -> Result<Option<faucet_core::change::schema::Shapes>, FaucetError> {
        let mut conn = self.connection.connect_sql().await?;
        let (tables, _) = resolve::tables_now(&mut conn, &self.tables, &self.patterns).await?;
        let names: Vec<(String, String)> =
            tables.iter().map(|t| (t.qualified(), t.quoted())).collect();
        shapes::current(&mut conn, &names).await.map(Some)
    }

    /// Without a bookmark the stream starts at the slot's confirmed position, which never
    /// passes a durable bookmark (case 03): a lost bookmark re-delivers at most the changes
    /// since the last acknowledgement, not the whole history.
    fn resumes_without_bookmark(&self) -> bool {
        true
    }

    /// The slot's retained WAL and retention horizon (module `retention`), on a session of
    /// the monitor's own.
    fn retention_monitor(&self) -> Option<Box<dyn faucet_core::RetentionMonitor>> {
        Some(Box::new(retention::SlotMonitor::new(
            self.connection.clone(),
            self.config.slot_name.clone(),
        )))
    }

    /// Prepares (slot, publication) and starts replication right after `from`.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `from` is not a postgres-cdc bookmark or points into a
    /// transaction the slot no longer replays; [`FaucetError::Read`] for a failing
    /// prerequisite (wal_level, REPLICATION, publication, tables, invalidated slot), with the
    /// fix; [`FaucetError::Connect`] when the server is unreachable or the slot is active in
    /// another process.
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        // The bookmark is read before connecting: another source's is named as such offline.
        let (from, copied) = crate::copy_history::split_resume(from, CONNECTOR)?;
        let announced = from
            .as_ref()
            .map(shapes::from_bookmark)
            .transpose()?
            .unwrap_or_default();
        let from = from.as_ref().map(CdcBookmark::from_json).transpose()?;
        let mut conn = self.connection.connect_sql().await?;
        let tables = self.tables_now(&mut conn).await?;
        // A replicate bookmark's `copied` member is carried on (`copy_history::KeepCopied`).
        let copied =
            crate::copy_history::keep_listed(copied, tables.iter().map(TableName::qualified));
        let prepared = catalog::prepare(&mut conn, &self.wanted(&tables), &self.connection).await;
        drop(conn);
        let prepared = prepared?;
        let start = match from {
            Some(b) => {
                if let Some(t) = b.in_txn
                    && prepared.confirmed_flush > t.final_lsn
                {
                    return Err(FaucetError::bookmark(
                        CONNECTOR,
                        format!(
                            "the bookmark is inside transaction {} committed at {}, but slot `{}` \
                             already confirmed {}: the rest of that transaction cannot be read \
                             again; delete the bookmark and resync the tables",
                            t.xid,
                            client::lsn_text(t.final_lsn),
                            self.config.slot_name,
                            client::lsn_text(prepared.confirmed_flush)
                        ),
                        None,
                    ));
                }
                if prepared.confirmed_flush > b.lsn {
                    tracing::warn!(
                        slot = %self.config.slot_name,
                        bookmark = %client::lsn_text(b.lsn),
                        confirmed_flush_lsn = %client::lsn_text(prepared.confirmed_flush),
                        "the slot is ahead of the bookmark (the state was restored or reset?); \
                         the server resumes from the slot's position"
                    );
                }
                b
            }
            None => CdcBookmark {
                lsn: prepared.confirmed_flush,
                in_txn: None,
            },
        };
        let target = (!self.config.continuous).then_some(prepared.wal_position);
        let nothing_to_read = target.is_some_and(|t| start.in_txn.is_none() && start.lsn >= t);
        let client = if nothing_to_read {
            None
        } else {
            let config = self.connection.replication_config(
                &self.config.slot_name,
                &self.config.publication,
                start.lsn,
                start.lsn,
                client::status_interval(options.max_page_delay),
            );
            Some(start_replication(config).await?)
        };
        tracing::info!(
            slot = %self.config.slot_name,
            from = %client::lsn_text(start.lsn),
            in_txn = start.in_txn.is_some(),
            until = %target.map_or_else(|| "cancelled".to_owned(), client::lsn_text),
            "postgres-cdc stream opened"
        );
        let stream = Box::new(CdcStream(CdcPageStream::new(StreamStart {
            client,
            decoder: ChangeDecoder::new(&tables, &self.patterns).with_shapes(announced),
            types: relation_types::RelationTypes::new(self.connection.clone()),
            schema: record_schema(),
            batch_size: options.batch_size,
            max_page_delay: options.max_page_delay,
            cancel: options.cancel,
            target,
            from: start,
        })));
        Ok(crate::copy_history::KeepCopied::wrap(stream, copied))
    }

    /// Verifies wal_level, the REPLICATION attribute, the publication and its tables, and the
    /// slot (right plugin and database, not invalidated, not active elsewhere) or a free slot
    /// for it, with catalog queries only: nothing is created and no change is consumed.
    ///
    /// # Errors
    /// The first failing prerequisite, with its fix.
    async fn check(&self) -> Result<(), FaucetError> {
        let mut conn = self.connection.connect_sql().await?;
        let tables = self.tables_now(&mut conn).await?;
        catalog::check(&mut conn, &self.wanted(&tables)).await
    }
}

struct CdcStream(CdcPageStream);

#[async_trait]
impl PageStream for CdcStream {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        self.0.next().await
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        let bookmark = CdcBookmark::from_json(bookmark)?;
        self.0.ack(&bookmark).await;
        Ok(())
    }

    fn reads_ahead(&self) -> bool {
        self.0.has_backlog()
    }
}

/// How many times opening the stream is tried when the walsender fails on an internal error.
const START_ATTEMPTS: u32 = 3;

/// Connects and sends `START_REPLICATION`, trying again (after 1 s, 2 s) when the
/// walsender stops on an internal error (SQLSTATE XX000) before the stream starts; every
/// other error is returned at once (see [`stream_error`]).
async fn start_replication(
    config: pgwire_replication::ReplicationConfig,
) -> Result<pgwire_replication::ReplicationClient, FaucetError> {
    let mut attempt = 1;
    loop {
        let started = async {
            let mut client = pgwire_replication::ReplicationClient::connect(config.clone()).await?;
            client.wait_started().await?;
            Ok(client)
        }
        .await;
        match started {
            Err(e) if attempt < START_ATTEMPTS && stream::is_internal_error(&e) => {
                tracing::warn!(error = %e, attempt, "postgres-cdc: starting the stream again");
                tokio::time::sleep(std::time::Duration::from_secs(u64::from(attempt))).await;
                attempt += 1;
            }
            other => return other.map_err(stream_error),
        }
    }
}
