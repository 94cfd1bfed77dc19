//! The `mysql-cdc` source: MySQL / MariaDB row changes read from the binary log as a
//! replica (mysql_async's binlog stream, `COM_BINLOG_DUMP` from a file and position),
//! emitting the change records of DESIGN.md. MariaDB 10.11 is tested; the MySQL-only paths
//! (its GTID events, `SHOW BINARY LOG STATUS`, `@@server_uuid`) follow its manual and are
//! not tested against a server.
//!
//! ```no_run
//! # fn build() -> Result<(), faucet_core::FaucetError> {
//! use faucet_connectors::mysql::cdc::{MysqlCdcConfig, MysqlCdcSource};
//!
//! let source = MysqlCdcSource::new(MysqlCdcConfig::new(
//!     "mysql://replicator:secret@localhost:3306/shop",
//!     4101,
//!     ["shop.orders"],
//! ))?;
//! # let _ = source;
//! # Ok(())
//! # }
//! ```
//!
//! How it reads:
//! * [`MysqlCdcSource::open`] checks the prerequisites (module `server`: binlog on, ROW
//!   format, FULL row image and metadata, no compression, the privileges, the server id),
//!   checks a bookmark against the server (same `server_id`/`server_uuid`, its binlog file
//!   still there, on MariaDB its GTID at that position), then registers as replica
//!   `server_id` and requests the binlog from the bookmark's position, or on a first run from
//!   `start` (the current end of the log by default).
//! * On MariaDB the session sets `@mariadb_slave_capability=4`, so the server sends its own
//!   GTID events rather than rewriting them into `BEGIN` queries and dummy events.
//! * Pages hold at most `batch_size` records and may end inside a transaction (the bookmark
//!   says how far, module `bookmark`). A page is handed over once its oldest record waited
//!   `max_page_delay`. A task reads and decodes the next page while the run loop writes the
//!   last one (a channel of one page between them): memory is two pages plus one rows
//!   event, whatever the size of a transaction.
//! * Bounded by default: catch up to the end of the log as read at open, then end (the dump is
//!   non-blocking, so an idle server ends it); `continuous: true` follows until the run is
//!   cancelled, then hands over the page in hand.
//! * Anything the reader cannot decode (unknown or compressed events, an incident, partial
//!   JSON, XA, a statement-logged change of a listed table, a table map without column names)
//!   stops the run with an error naming the event and its position. Nothing is skipped.
//!
//! The binlog has no acknowledgement: the server keeps files for `binlog_expire_logs_seconds`
//! (`expire_logs_days`) whatever the reader did. A bookmark whose file was purged is refused
//! ([`FaucetError::Bookmark`], not retryable) with how to start over.

pub(crate) mod bookmark;
pub(crate) mod changes;
mod config;
mod events;
pub(crate) mod position;
pub(crate) mod server;
mod statement;
mod stream;

use async_trait::async_trait;
use mysql_async::BinlogStreamRequest;
use mysql_async::prelude::Queryable;

use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

pub use config::{MysqlCdcConfig, StartPosition, ValidatedMysqlCdcConfig};

use bookmark::CdcBookmark;
use changes::{ChangeDecoder, record_schema};
use position::BinlogPos;
use server::ServerFacts;
use stream::{CdcPageStream, HEARTBEAT, StreamStart};

use crate::mysql::task_pages::TaskPages;
use crate::mysql::value::Collations;

/// The connector's name, in errors and summaries.
pub const CONNECTOR: &str = "mysql-cdc";

/// The `mysql-cdc` source. Built without I/O; [`Source::open`] and [`Source::check`]
/// connect.
#[derive(Debug)]
pub struct MysqlCdcSource {
    validated: ValidatedMysqlCdcConfig,
}

impl MysqlCdcSource {
    /// A source for `config`, validated without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the invalid field.
    pub fn new(config: MysqlCdcConfig) -> Result<Self, FaucetError> {
        Ok(Self::from_validated(config.validate()?))
    }

    /// A source for a config [`MysqlCdcConfig::validate`] accepted.
    pub fn from_validated(validated: ValidatedMysqlCdcConfig) -> Self {
        Self { validated }
    }

    /// The configuration.
    pub fn config(&self) -> &MysqlCdcConfig {
        &self.validated.config
    }

    async fn connect(&self) -> Result<mysql_async::Conn, FaucetError> {
        self.validated.connection.connect().await
    }

    /// Every prerequisite, on `conn`: settings, the REPLICATION SLAVE grant, the end of the
    /// log (binlog on, BINLOG MONITOR / REPLICATION CLIENT), the server id.
    async fn prerequisites(
        &self,
        conn: &mut mysql_async::Conn,
    ) -> Result<(ServerFacts, BinlogPos, Vec<String>), FaucetError> {
        let facts = server::facts(conn).await?;
        server::check_settings(conn).await?;
        server::check_replication_grant(conn).await?;
        let end = server::end_of_log(conn, facts.mariadb).await?;
        let files = server::binlog_files(conn).await?;
        server::check_server_id(conn, &facts, self.config().server_id).await?;
        self.warn_missing_tables(conn).await;
        Ok((facts, end, files))
    }

    /// Warns, naming them, about listed `tables` the server does not have (names match
    /// exactly, case included, as the binlog's table maps do): a typo reads nothing while the
    /// bookmark moves on. Not an error: a table created later is read from its creation.
    async fn warn_missing_tables(&self, conn: &mut mysql_async::Conn) {
        use mysql_async::prelude::Queryable as _;
        let mut missing = Vec::new();
        for t in &self.validated.tables {
            let db = t.database.clone().unwrap_or_default();
            let found: Result<Option<u8>, _> = conn
                .exec_first(
                    "SELECT 1 FROM information_schema.TABLES \
                     WHERE BINARY TABLE_SCHEMA = ? AND BINARY TABLE_NAME = ?",
                    (db, t.table.clone()),
                )
                .await;
            if let Ok(None) = found {
                missing.push(t.to_string());
            }
        }
        if !missing.is_empty() {
            tracing::warn!(
                source = CONNECTOR,
                "tables {} are not on the server (names match exactly, case included): their \
                 changes are read only once they exist; check `tables` for a typo",
                missing.join(", ")
            );
        }
    }

    /// Refuses a bookmark of another server, or one whose binlog is gone.
    async fn check_bookmark(
        &self,
        conn: &mut mysql_async::Conn,
        facts: &ServerFacts,
        files: &[String],
        b: &CdcBookmark,
    ) -> Result<(), FaucetError> {
        if b.server.server_id != facts.identity.server_id
            || (b.server.server_uuid.is_some()
                && facts.identity.server_uuid.is_some()
                && b.server.server_uuid != facts.identity.server_uuid)
        {
            return Err(FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "the bookmark was made on the server with server_id {}{}, but this one has \
                     server_id {}{} (a failover or a rebuilt server?): its binlog positions do \
                     not apply here. Point connection_url back at that server, or delete this \
                     pipeline's state and re-snapshot the tables from this one",
                    b.server.server_id,
                    b.server
                        .server_uuid
                        .as_deref()
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default(),
                    facts.identity.server_id,
                    facts
                        .identity
                        .server_uuid
                        .as_deref()
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default(),
                ),
                None,
            ));
        }
        server::require_file(files, &b.position)?;
        if facts.mariadb
            && let Some(gtid) = &b.gtid
        {
            let state = server::gtid_state_at(conn, &b.position).await?;
            let follows = state
                .as_deref()
                .is_some_and(|s| s.split(',').any(|g| g.trim() == gtid));
            if !follows {
                return Err(FaucetError::bookmark(
                    CONNECTOR,
                    format!(
                        "the bookmark says transaction {gtid} ends at {}, but this server's \
                         binlog has GTID state {} there: it is not the binlog the bookmark was \
                         read from (a rebuilt server?). Delete this pipeline's state and \
                         re-snapshot the tables",
                        b.position,
                        state.as_deref().unwrap_or("none (not an event boundary)")
                    ),
                    None,
                ));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Source for MysqlCdcSource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// The binlog replays the same changes in the same order from a position.
    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::Deterministic
    }

    /// Checks the prerequisites and the bookmark, then requests the binlog right after
    /// `from` (or from `start` without one).
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `from` is not a mysql-cdc bookmark, belongs to another
    /// server, or its binlog was purged; [`FaucetError::Read`] / [`FaucetError::Config`] for a
    /// failing prerequisite, with the fix; [`FaucetError::Connect`] when the server is
    /// unreachable.
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        // A replicate bookmark's `copied` member is carried on (`copy_history::KeepCopied`).
        let (from, copied) = crate::copy_history::carried_copied(
            from,
            CONNECTOR,
            self.validated.tables.iter().map(ToString::to_string),
        )?;
        let from = from.as_ref().map(CdcBookmark::from_json).transpose()?;
        let mut conn = self.connect().await?;
        let (facts, end, files) = self.prerequisites(&mut conn).await?;
        let resumed = from.is_some();
        let start = match from {
            Some(b) => {
                self.check_bookmark(&mut conn, &facts, &files, &b).await?;
                b
            }
            None => {
                let position = match &self.config().start {
                    StartPosition::End => end.clone(),
                    StartPosition::Beginning => BinlogPos::new(
                        files.first().cloned().unwrap_or_else(|| end.file.clone()),
                        4,
                    ),
                    StartPosition::At {
                        binlog_file,
                        binlog_pos,
                    } => {
                        let at = BinlogPos::new(binlog_file.clone(), *binlog_pos);
                        if !files.contains(binlog_file) {
                            return Err(FaucetError::config(
                                "start.at.binlog_file",
                                format!(
                                    "the server has no binlog file `{binlog_file}` (SHOW BINARY \
                                     LOGS lists {})",
                                    files.join(", ")
                                ),
                            ));
                        }
                        at
                    }
                };
                CdcBookmark {
                    position,
                    gtid: None,
                    server: facts.identity.clone(),
                    in_txn: None,
                }
            }
        };
        let collations = Collations::load(&mut conn).await.map_err(|e| {
            self.validated
                .connection
                .error("reading the server's collations", e)
        })?;
        drop(conn);
        let target = (!self.config().continuous).then(|| end.clone());
        let nothing_to_read = target
            .as_ref()
            .is_some_and(|t| start.in_txn.is_none() && start.position.reached(t));
        let binlog = if nothing_to_read {
            None
        } else {
            Some(self.dump(&facts, &start.position, target.is_some()).await?)
        };
        tracing::info!(
            from = %start.position,
            in_txn = start.in_txn.is_some(),
            until = %target.as_ref().map_or_else(|| "cancelled".to_owned(), ToString::to_string),
            "mysql-cdc stream opened"
        );
        let stream = Box::new(spawn_reader(CdcPageStream::new(StreamStart {
            binlog,
            decoder: ChangeDecoder::new(&self.validated.tables, collations),
            schema: record_schema(),
            batch_size: options.batch_size,
            max_page_delay: options.max_page_delay,
            cancel: options.cancel,
            target,
            from: start,
            resumed,
            connection: self.validated.connection.clone(),
        })));
        Ok(crate::copy_history::KeepCopied::wrap(stream, copied))
    }

    /// Verifies every prerequisite with queries only (nothing is registered or read from
    /// the binlog): binlog on, `binlog_format=ROW`, `binlog_row_image=FULL`,
    /// `binlog_row_metadata=FULL`, no binlog compression, REPLICATION SLAVE, BINLOG MONITOR
    /// (MariaDB) / REPLICATION CLIENT (MySQL), a `server_id` no replica uses, and that the
    /// `start.at` file exists.
    ///
    /// # Errors
    /// The first failing prerequisite, with its fix.
    async fn check(&self) -> Result<(), FaucetError> {
        let mut conn = self.connect().await?;
        let (_, _, files) = self.prerequisites(&mut conn).await?;
        if let StartPosition::At { binlog_file, .. } = &self.config().start
            && !files.contains(binlog_file)
        {
            return Err(FaucetError::config(
                "start.at.binlog_file",
                format!("the server has no binlog file `{binlog_file}`"),
            ));
        }
        Ok(())
    }
}

impl MysqlCdcSource {
    /// Registers as replica `server_id` and requests the binlog from `at`.
    async fn dump(
        &self,
        facts: &ServerFacts,
        at: &BinlogPos,
        bounded: bool,
    ) -> Result<mysql_async::BinlogStream, FaucetError> {
        let mut conn = self.connect().await?;
        let setup_error = |e| {
            self.validated
                .connection
                .error("preparing the binlog dump", e)
        };
        if facts.mariadb {
            // MariaDB then sends its own GTID events, not BEGIN queries and dummy events.
            conn.query_drop("SET @mariadb_slave_capability = 4")
                .await
                .map_err(setup_error)?;
        }
        if !bounded {
            conn.query_drop(format!(
                "SET @master_heartbeat_period = {}",
                HEARTBEAT.as_nanos()
            ))
            .await
            .map_err(setup_error)?;
        }
        let mut request = BinlogStreamRequest::new(self.config().server_id)
            .with_filename(at.file.as_bytes())
            .with_pos(at.pos);
        if bounded {
            request = request.with_non_blocking();
        }
        conn.get_binlog_stream(request)
            .await
            .map_err(|e| stream::stream_error(e, at))
    }
}

/// The [`PageStream`] of a binlog read: a task runs the [`CdcPageStream`] (reading events
/// and decoding them into pages) and hands each page over a channel of one slot
/// ([`TaskPages`]), so the next page is read from the server and decoded while the run loop
/// writes, flushes and bookmarks the previous one. The task starts a page only once the
/// slot is free (the run loop took the one before), so memory is two pages plus one rows
/// event: the one being written and the one being read; while a finished page waits, the
/// task reads nothing and the server waits (TCP back-pressure). Pages arrive in order, an
/// error after the pages before it; dropping the stream stops the task (and with it the
/// dump connection).
fn spawn_reader(mut stream: CdcPageStream) -> TaskPages {
    let (tx, pages) = tokio::sync::mpsc::channel(1);
    let task = tokio::spawn(async move {
        loop {
            let Ok(slot) = tx.reserve().await else {
                // The run loop dropped the stream.
                break;
            };
            match stream.next().await {
                Ok(Some(page)) => slot.send(Ok(page)),
                Ok(None) => break,
                Err(e) => {
                    stream.close().await;
                    slot.send(Err(e));
                    return;
                }
            }
        }
        stream.close().await;
    });
    TaskPages::new(pages, task)
}
