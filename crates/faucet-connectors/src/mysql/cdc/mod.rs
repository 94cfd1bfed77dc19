//! The `mysql-cdc` source: MySQL / MariaDB row changes read from the binary log as a
//! replica (mysql_async's binlog stream, `COM_BINLOG_DUMP` from a file and position),
//! emitting the change records of docs/change-records.md. MariaDB 10.11 is tested; the MySQL-only paths
//! (its GTID events and GTID sets, `SHOW BINARY LOG STATUS`, `@@server_uuid`, the carry-over
//! by `COM_BINLOG_DUMP_GTID`) are written to its manual and unit-tested on the shapes it
//! gives, not tested against a server.
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
//!   still there, the position an event boundary inside it, on MariaDB the GTID state at
//!   that position the bookmark's: module `resume`), then registers as replica `server_id`
//!   and requests the binlog from the bookmark's position, or on a first run from `start`
//!   (the current end of the log by default). A bookmark of this server whose history is
//!   not the server's any more (`RESET MASTER`, a restore: the file number restarted, the
//!   position past a file's end, another or an unknown GTID state there) is refused as
//!   "history diverged: re-snapshot", never resumed by position or GTID. A MariaDB bookmark
//!   of another server is carried over by its GTID state (`MysqlCdcSource::carry_over`: the
//!   dump starts from `@slave_connect_state`, after checks that the server holds the
//!   bookmark's transactions), and so is a bookmark of this `server_id` whose file was purged
//!   from a binlog that goes on, or that logs to files of another name. A MySQL bookmark of another
//!   server is carried over by its GTID set (module `mysql_carry`: `COM_BINLOG_DUMP_GTID`
//!   after checks against `@@gtid_executed` and `@@gtid_purged`; untested against MySQL).
//! * `check()` has no bookmark to look at; `check_resume(bookmark)` (what `faucet doctor`
//!   asks with the pipeline's stored bookmark) runs the same checks as a run's open, queries
//!   only, and says whether the bookmark resumes by position or is carried over by GTID, or
//!   gives the refusal a run would meet.
//! * On MariaDB the session sets `@mariadb_slave_capability=4`, so the server sends its own
//!   GTID events rather than rewriting them into `BEGIN` queries and dummy events.
//! * Pages hold at most `batch_size` records and may end inside a transaction (the bookmark
//!   says how far, module `bookmark`). A page is handed over once its oldest record waited
//!   `max_page_delay`. A task reads and decodes the next page while the run loop writes the
//!   last one (a channel of one page between them): memory is two pages plus one rows
//!   event, whatever the size of a transaction.
//! * Bounded by default: catch up to the end of the log as read at open, then end (the dump is
//!   non-blocking, so an idle server ends it); `continuous: true` follows until the run is
//!   cancelled, then hands over the page in hand. A bounded run's pages carry their
//!   [`faucet_core::Extent`]: the binlog bytes from the start to the page's position, of those
//!   to the end, across files (module `span`); none when continuous, or carried over from
//!   another server.
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
pub(crate) mod gtid_set;
mod mysql_carry;
pub(crate) mod position;
mod resolve;
mod resume;
pub(crate) mod server;
pub(crate) mod shapes;
mod span;
mod statement;
mod statement_scope;
mod stream;

use async_trait::async_trait;
use mysql_async::BinlogStreamRequest;
use mysql_async::prelude::Queryable;

use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

pub use config::{MysqlCdcConfig, StartPosition, ValidatedMysqlCdcConfig};

use bookmark::CdcBookmark;
use changes::{ChangeDecoder, record_schema};
use gtid_set::MysqlGtidSet;
use position::{BinlogPos, GtidState};
use server::ServerFacts;
use stream::{CarryFrom, CdcPageStream, HEARTBEAT, StreamStart};

use crate::mysql::table::TableName;
use crate::mysql::task_pages::TaskPages;
use crate::mysql::value::Collations;
use crate::sql::table_pattern::empty_match;

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

    /// The tables `tables` names now: the listed ones and those its patterns match
    /// ([`resolve::tables_now`]); patterns that match nothing fail a bounded run and are
    /// warned about in a continuous one ([`empty_match`]).
    ///
    /// # Errors
    /// [`FaucetError::Read`] / [`FaucetError::Connect`] when the catalog cannot be read;
    /// [`FaucetError::Read`] when a bounded run's pattern matches nothing.
    pub(crate) async fn tables_now(
        &self,
        conn: &mut mysql_async::Conn,
    ) -> Result<Vec<TableName>, FaucetError> {
        let v = &self.validated;
        let (tables, empty) =
            resolve::tables_now(conn, &v.connection, &v.tables, &v.patterns).await?;
        empty_match(CONNECTOR, &empty, v.config.continuous)?;
        if !v.patterns.is_empty() {
            tracing::info!(
                tables = ?tables.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "the tables `tables` names now (its patterns matched against the catalog)"
            );
        }
        Ok(tables)
    }

    /// Every prerequisite, on `conn`: settings, the REPLICATION SLAVE grant, the end of the
    /// log (binlog on, BINLOG MONITOR / REPLICATION CLIENT), the server id. Returns the
    /// facts, the end of the log with (MySQL) its `Executed_Gtid_Set` text, and the binlog
    /// files.
    async fn prerequisites(
        &self,
        conn: &mut mysql_async::Conn,
    ) -> Result<(ServerFacts, (BinlogPos, Option<String>), Vec<String>), FaucetError> {
        let facts = server::facts(conn).await?;
        server::check_settings(conn).await?;
        server::check_replication_grant(conn).await?;
        let end = server::end_of_log(conn, facts.mariadb).await?;
        let files = server::binlog_files(conn).await?;
        server::check_server_id(conn, &facts, self.config().server_id).await?;
        Ok((facts, end, files))
    }

    /// On MySQL, the GTID set of a first run's start: at the end of the log with
    /// `gtid_mode=ON`, `executed` (the `Executed_Gtid_Set` of the `SHOW BINARY LOG STATUS`
    /// that gave the end); else none (no statement gives the set at another position, and
    /// with anonymous transactions a set is not a position). The server reads the set just
    /// before the position, and writes a transaction to the binlog before adding its GTID to
    /// the executed set, so a transaction committing in between can be before the position
    /// and not in the set (carried over later, it would be delivered again), never the other
    /// way round.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the set does not parse or `gtid_mode` cannot be read.
    async fn first_gtid_set(
        &self,
        conn: &mut mysql_async::Conn,
        at_end: bool,
        executed: Option<&str>,
    ) -> Result<Option<MysqlGtidSet>, FaucetError> {
        if !at_end || !server::mysql_gtid_mode_on(conn).await? {
            return Ok(None);
        }
        server::server_gtid_set("Executed_Gtid_Set (SHOW BINARY LOG STATUS)", executed).map(Some)
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

    /// Where a run without a bookmark starts on this server: `start` resolved against `end`
    /// (the end of the log now) and `files` (`SHOW BINARY LOGS`, oldest first).
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming `start.at.binlog_file` / `start.at.binlog_pos` when the
    /// server has no such file, or no event starts at that offset in it.
    async fn first_position(
        &self,
        conn: &mut mysql_async::Conn,
        files: &[String],
        end: &BinlogPos,
    ) -> Result<BinlogPos, FaucetError> {
        Ok(match &self.config().start {
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
                            "the server has no binlog file `{binlog_file}` (SHOW BINARY LOGS \
                             lists {})",
                            files.join(", ")
                        ),
                    ));
                }
                if let Some(why) = server::not_an_event_boundary(conn, &at).await? {
                    return Err(FaucetError::config(
                        "start.at.binlog_pos",
                        format!("{why}: give the offset of an event (SHOW BINLOG EVENTS)"),
                    ));
                }
                at
            }
        })
    }

    /// doctor's resume line when no bookmark is stored: where a run starts and what it
    /// reads, on the connected server.
    async fn first_run_note(&self) -> Result<String, FaucetError> {
        let mut conn = self.connect().await?;
        let (_, (end, _), files) = self.prerequisites(&mut conn).await?;
        let at = self.first_position(&mut conn, &files, &end).await?;
        let _ = conn.disconnect().await;
        let what = match &self.config().start {
            StartPosition::End => format!(
                "`end`, the end of the binlog when it starts (now {at}): changes committed \
                 before it are not read"
            ),
            StartPosition::Beginning => format!(
                "`beginning`, the oldest binlog file the server still has ({at}): every change \
                 logged since is read"
            ),
            StartPosition::At { .. } => format!("`at` {at}"),
        };
        Ok(format!(
            "no bookmark is stored yet: a run starts at `start`: {what}"
        ))
    }
}

#[async_trait]
impl Source for MysqlCdcSource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// A task reads the binlog and decodes its pages (`spawn_reader`).
    fn reads_in_task(&self) -> bool {
        true
    }

    /// The binlog replays the same changes in the same order from a position.
    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::Deterministic
    }

    /// Every page holds change records, of this module's one schema.
    fn record_schema(&self) -> Option<std::sync::Arc<faucet_core::Schema>> {
        Some(record_schema())
    }

    /// Each listed or matched table's primary key and unique keys, from
    /// `information_schema` ([`crate::mysql::catalog::TableCatalog`]); a table not on the
    /// server is left out. The patterns are matched at the time of asking, so a table
    /// created later is there once it exists.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] / [`FaucetError::Read`] when the catalog cannot be read.
    async fn table_keys(&self) -> Result<Option<Vec<faucet_core::keys::TableKeys>>, FaucetError> {
        let mut conn = self.connect().await?;
        let v = &self.validated;
        let (tables, _) =
            resolve::tables_now(&mut conn, &v.connection, &v.tables, &v.patterns).await?;
        let mut keys = Vec::with_capacity(tables.len());
        for t in &tables {
            let db = t.database.clone().unwrap_or_default();
            let catalog = crate::mysql::catalog::TableCatalog::load(
                &mut conn,
                &self.validated.connection,
                &db,
                &t.table,
            )
            .await?;
            if !catalog.columns.is_empty() {
                keys.push(faucet_core::keys::TableKeys {
                    table: t.to_string(),
                    primary_key: catalog.primary_key,
                    unique_sets: catalog.unique_sets,
                });
            }
        }
        let _ = conn.disconnect().await;
        Ok(Some(keys))
    }

    /// Each listed or matched table's columns in the catalog now, shaped as the table maps'
    /// are in the bookmark's `shapes` (`shapes::current`: `COLUMN_TYPE` in the table map's
    /// spelling, `int(11)` as `int`).
    ///
    /// # Errors
    /// [`FaucetError::Connect`] / [`FaucetError::Read`] when the catalog cannot be read.
    async fn current_shapes(
        &self,
    ) -> Result<Option<faucet_core::change::schema::Shapes>, FaucetError> {
        let mut conn = self.connect().await?;
        let v = &self.validated;
        let (tables, _) =
            resolve::tables_now(&mut conn, &v.connection, &v.tables, &v.patterns).await?;
        let shapes = shapes::current(&mut conn, &v.connection, &tables).await;
        let _ = conn.disconnect().await;
        shapes.map(Some)
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
        // The bookmark is read before connecting: another source's is named as such offline.
        let (from, copied) = crate::copy_history::split_resume(from, CONNECTOR)?;
        let delivered = from
            .as_ref()
            .map(shapes::Delivered::from_bookmark)
            .transpose()?
            .unwrap_or_default();
        let from = from.as_ref().map(CdcBookmark::from_json).transpose()?;
        let mut conn = self.connect().await?;
        let tables = self.tables_now(&mut conn).await?;
        // A replicate bookmark's `copied` member is carried on (`copy_history::KeepCopied`).
        let copied =
            crate::copy_history::keep_listed(copied, tables.iter().map(ToString::to_string));
        let (facts, (end, executed), files) = self.prerequisites(&mut conn).await?;
        self.warn_missing_tables(&mut conn).await;
        let resumed = from.is_some();
        let (start, carry) = match from {
            Some(b) => self.plan_resume(&mut conn, &facts, &files, b).await?,
            None => {
                let position = self.first_position(&mut conn, &files, &end).await?;
                let (gtid_state, gtid_set) = if facts.mariadb {
                    let state = server::gtid_state_at(&mut conn, &position)
                        .await?
                        .and_then(|s| GtidState::parse(&s));
                    (state, None)
                } else {
                    let at_end = matches!(self.config().start, StartPosition::End);
                    let set = self
                        .first_gtid_set(&mut conn, at_end, executed.as_deref())
                        .await?;
                    (None, set)
                };
                let first = CdcBookmark {
                    position,
                    gtid: None,
                    gtid_state,
                    gtid_set,
                    by_gtid: false,
                    server: facts.identity.clone(),
                    in_txn: None,
                };
                (first, None)
            }
        };
        let collations = Collations::load(&mut conn).await.map_err(|e| {
            self.validated
                .connection
                .error("reading the server's collations", e)
        })?;
        let target = (!self.config().continuous).then(|| end.clone());
        // A bounded run's progress: the binlog bytes to its end (not known when carried over
        // from another server, whose positions are not this binlog's).
        let span = match (&target, &carry) {
            (Some(end), None) => match server::binlog_sizes(&mut conn).await {
                Ok(sizes) => span::BinlogSpan::new(&sizes, &start.position, end),
                Err(e) => {
                    tracing::debug!(error = %e, "no binlog sizes: the progress is not known");
                    None
                }
            },
            _ => None,
        };
        drop(conn);
        let nothing_to_read = carry.is_none()
            && target
                .as_ref()
                .is_some_and(|t| start.in_txn.is_none() && start.position.reached(t));
        let binlog = if nothing_to_read {
            None
        } else {
            let from = match &carry {
                Some(CarryFrom::Mariadb(state)) => DumpFrom::Gtid(state),
                Some(CarryFrom::Mysql(set)) => DumpFrom::MysqlGtid(set),
                None => DumpFrom::Position(&start.position),
            };
            Some(self.dump(&facts, from, target.is_some()).await?)
        };
        tracing::info!(
            from = %start.position,
            by_gtid = ?carry.as_ref().map(ToString::to_string),
            in_txn = start.in_txn.is_some(),
            until = %target.as_ref().map_or_else(|| "cancelled".to_owned(), ToString::to_string),
            "mysql-cdc stream opened"
        );
        let stream = Box::new(spawn_reader(CdcPageStream::new(StreamStart {
            binlog,
            decoder: ChangeDecoder::new(&tables, &self.validated.patterns, collations)
                .with_delivered(delivered),
            schema: record_schema(),
            batch_size: options.batch_size,
            max_page_delay: options.max_page_delay,
            cancel: options.cancel,
            target,
            span,
            carry: carry.map(|from| stream::Carry {
                server: facts.identity.clone(),
                from,
            }),
            from: start,
            resumed,
            connection: self.validated.connection.clone(),
        })));
        Ok(crate::copy_history::KeepCopied::wrap(stream, copied))
    }

    /// Checks the prerequisites and how a run would resume from `from` (a stored bookmark),
    /// with the queries of [`Source::open`] and nothing registered or read from the binlog:
    /// `resumes at FILE:POS on this server`, or `will resume on this server (server_id N)
    /// by GTID state STATE: …` (carried over from another server, or from a position no
    /// longer in this server's binlog). A `faucet replicate` bookmark (a snapshot in
    /// progress) is not judged, only named (with which command continues it), without
    /// connecting. No bookmark (null): where a run starts (`start` resolved on this server).
    ///
    /// # Errors
    /// The [`FaucetError::Bookmark`] a run would meet (another server that cannot take the
    /// bookmark, a purged binlog, …), or the failing prerequisite.
    async fn check_resume(&self, from: &Bookmark) -> Result<Option<String>, FaucetError> {
        if from.is_null() {
            return self.first_run_note().await.map(Some);
        }
        if crate::copy_history::is_replicate_bookmark(from) {
            // Not judged here (`faucet replicate` reads it), but said: `faucet run` refuses it.
            return Ok(Some(
                "holds a `faucet replicate` bookmark (a snapshot copy in progress, or the \
                 history of one the binlog stream has not passed yet): `faucet replicate` with \
                 this config continues it, `faucet run` refuses it"
                    .to_owned(),
            ));
        }
        let (from, _) = crate::copy_history::split_resume(Some(from.clone()), CONNECTOR)?;
        let Some(from) = from else {
            return Ok(None);
        };
        let b = CdcBookmark::from_json(&from)?;
        let mut conn = self.connect().await?;
        let (facts, _, files) = self.prerequisites(&mut conn).await?;
        let from_server = b.server.server_id;
        let (b, carry) = self.plan_resume(&mut conn, &facts, &files, b).await?;
        let _ = conn.disconnect().await;
        Ok(Some(match carry {
            Some(state) => {
                let state = state.to_string();
                let state = if state.is_empty() {
                    "an empty GTID state (every transaction of this server's binlog is read \
                     again, from its start)"
                        .to_owned()
                } else {
                    format!("GTID state {state}")
                };
                format!(
                    "will resume on this server (server_id {}) by {state}: the bookmark was \
                     made at {} on server_id {from_server}, and is carried over",
                    facts.identity.server_id, b.position
                )
            }
            None => format!("resumes at {} on this server", b.position),
        }))
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
        self.tables_now(&mut conn).await?;
        self.warn_missing_tables(&mut conn).await;
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
    /// Registers as replica `server_id` and requests the binlog from `from`: a file and
    /// position (`COM_BINLOG_DUMP`), on MariaDB a GTID state (`@slave_connect_state`,
    /// `@slave_gtid_strict_mode=1`, file "" at 4: the server finds the position itself and
    /// refuses a state its binlog does not hold), or on MySQL a GTID set
    /// (`COM_BINLOG_DUMP_GTID` with the set's SIDs, file "" at 4: the server sends the
    /// transactions not in the set).
    async fn dump(
        &self,
        facts: &ServerFacts,
        from: DumpFrom<'_>,
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
        let (file, pos) = match from {
            DumpFrom::Position(at) => (at.file.as_bytes(), at.pos),
            // COM_BINLOG_DUMP_GTID: the server finds where to start from the set.
            DumpFrom::MysqlGtid(_) => (&b""[..], 4),
            DumpFrom::Gtid(state) => {
                // The state is digits, dashes and commas only (GtidState's own form).
                conn.query_drop(format!(
                    "SET @slave_connect_state = '{state}', @slave_gtid_strict_mode = 1"
                ))
                .await
                .map_err(setup_error)?;
                (&b""[..], 4)
            }
        };
        let mut request = BinlogStreamRequest::new(self.config().server_id)
            .with_filename(file)
            .with_pos(pos);
        if bounded {
            request = request.with_non_blocking();
        }
        if let DumpFrom::MysqlGtid(set) = from {
            request = request.with_gtid().with_gtid_set(set.sids());
        }
        conn.get_binlog_stream(request)
            .await
            .map_err(|e| match from {
                DumpFrom::Position(at) => stream::stream_error(e, at),
                DumpFrom::Gtid(state) => stream::gtid_stream_error(e, &state.to_string()),
                DumpFrom::MysqlGtid(set) => stream::gtid_stream_error(e, &set.to_string()),
            })
    }
}

/// Where a dump starts.
#[derive(Debug, Clone, Copy)]
enum DumpFrom<'a> {
    /// A file and position of the server's own binlog.
    Position(&'a BinlogPos),
    /// A MariaDB GTID state (a bookmark carried over from another server).
    Gtid(&'a GtidState),
    /// A MySQL GTID set (`COM_BINLOG_DUMP_GTID`: a bookmark carried over from another
    /// server).
    MysqlGtid(&'a MysqlGtidSet),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// doctor's resume line on a `faucet replicate` bookmark names it and the command that
    /// continues it (a `faucet run` would refuse it), without connecting (port 1: nothing
    /// listens); no bookmark, nothing to say.
    #[tokio::test]
    async fn a_replicate_bookmark_is_named_by_the_resume_check() {
        let s = MysqlCdcSource::new(MysqlCdcConfig::new(
            "mysql://root@127.0.0.1:1/x",
            5,
            ["test.t"],
        ))
        .expect("valid");
        let note = s
            .check_resume(&serde_json::json!({"snapshot": {"tables": {}}}))
            .await
            .expect("not connected")
            .expect("a note");
        assert!(
            note.contains("`faucet replicate` bookmark") && note.contains("`faucet run` refuses"),
            "{note}"
        );
        // No bookmark: it connects to say where a run starts (nothing listens here).
        assert!(s.check_resume(&Bookmark::Null).await.is_err());
    }
}
