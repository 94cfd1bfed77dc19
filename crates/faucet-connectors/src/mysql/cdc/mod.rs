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
//!   still there, on MariaDB the GTID state at that position — a NULL answer is a warning,
//!   not a refusal), then registers as replica `server_id` and requests the binlog from the
//!   bookmark's position, or on a first run from `start` (the current end of the log by
//!   default). A MariaDB bookmark of another server is carried over by its GTID state
//!   (`MysqlCdcSource::carry_over`: the dump starts from `@slave_connect_state`, after
//!   checks that the server holds the bookmark's transactions); on MySQL it is refused.
//! * `check()` has no bookmark to look at (the `Source` trait's probe takes none), so
//!   whether a stored bookmark will resume by position or be carried over is decided, and
//!   logged, when the run opens.
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
use position::{BinlogPos, GtidState, Holding, MariadbGtid};
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

    /// How to resume from bookmark `b` on the connected server: by file and position when
    /// `b` is this server's (`server_id` / `server_uuid` the same, its binlog file still
    /// there, on MariaDB the GTID state at the position the bookmark's), else by GTID
    /// ([`Self::carry_over`]). The returned bookmark is `b` with its GTID state filled in
    /// where an old bookmark had none and the server told it.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`]: the file was purged, the position's GTID state is another
    /// transaction's, or the bookmark cannot be carried over (see [`Self::carry_over`]).
    async fn plan_resume(
        &self,
        conn: &mut mysql_async::Conn,
        facts: &ServerFacts,
        files: &[String],
        mut b: CdcBookmark,
    ) -> Result<(CdcBookmark, Option<GtidState>), FaucetError> {
        let same_server = b.server.server_id == facts.identity.server_id
            && !(b.server.server_uuid.is_some()
                && facts.identity.server_uuid.is_some()
                && b.server.server_uuid != facts.identity.server_uuid);
        if b.by_gtid || !same_server {
            let state = self.carry_over(conn, facts, files, &b).await?;
            tracing::info!(
                source = CONNECTOR,
                from_server_id = b.server.server_id,
                server_id = facts.identity.server_id,
                gtid_state = %state,
                "the bookmark is carried over to this server by its GTID state"
            );
            b.gtid_state = Some(state.clone());
            return Ok((b, Some(state)));
        }
        server::require_file(files, &b.position)?;
        if facts.mariadb {
            let at = server::gtid_state_at(conn, &b.position).await?;
            match check_position(b.gtid.as_deref(), b.gtid_state.as_ref(), at.as_deref()) {
                PositionCheck::Verified(state) => {
                    if b.gtid_state.is_none() {
                        b.gtid_state = state;
                    }
                }
                PositionCheck::CannotVerify => tracing::warn!(
                    source = CONNECTOR,
                    position = %b.position,
                    "the server cannot compute the GTID state at the bookmark's position \
                     (BINLOG_GTID_POS is NULL: the file holds an event larger than the \
                     server's max_allowed_packet, or the position is not an event boundary); \
                     the position is not verified against the bookmark's GTID and is resumed \
                     as the server's own (same server_id)"
                ),
                PositionCheck::Differs => {
                    return Err(FaucetError::bookmark(
                        CONNECTOR,
                        format!(
                            "the bookmark says the GTID state at {} is {}, but this server's \
                             binlog has GTID state {} there: it is not the binlog the bookmark \
                             was read from (a rebuilt server with the same server_id?). Delete \
                             this pipeline's state and re-snapshot the tables",
                            b.position,
                            b.gtid_state
                                .as_ref()
                                .map(ToString::to_string)
                                .or_else(|| b.gtid.clone())
                                .unwrap_or_default(),
                            at.as_deref().unwrap_or("none"),
                        ),
                        None,
                    ));
                }
            }
        }
        Ok((b, None))
    }

    /// Carries bookmark `b`, made on another server (or carried over before and not yet
    /// settled: `by_gtid`), over to the connected one by its GTID state, and returns the
    /// state the dump starts from. MariaDB only: MySQL's GTID sets (`COM_BINLOG_DUMP_GTID`)
    /// are not implemented, and a bookmark from another MySQL server is refused.
    ///
    /// Checked before anything is read, each failure a [`FaucetError::Bookmark`] saying
    /// which:
    /// * the bookmark has a GTID state (`gtid_state`; an old bookmark's single `gtid` stands
    ///   for it only when the server has that one domain), and inside a transaction its GTID;
    /// * the server's `@@gtid_binlog_pos` reaches the state (and the partly delivered
    ///   transaction) in every domain: else it has not logged them (a replica that had not
    ///   caught up), and resuming would skip what it logs later under those numbers;
    /// * the same sequence number with another origin server is a diverged history;
    /// * the oldest binlog file left does not start past the state (`BINLOG_GTID_POS(file,
    ///   4)`): else the transactions between were purged.
    ///
    /// What cannot be checked here: that the server's transaction under a needed
    /// `domain-seq` with a larger number after it is *the same* transaction (a server that
    /// took writes of its own under the same domain, with `gtid_strict_mode` off). The dump
    /// is started with `@slave_gtid_strict_mode=1`, so the server itself refuses a state
    /// that is not in its binlog (error 1236, mapped by [`stream::gtid_stream_error`]); a
    /// divergence after the state's GTIDs is not detectable by a reader.
    async fn carry_over(
        &self,
        conn: &mut mysql_async::Conn,
        facts: &ServerFacts,
        files: &[String],
        b: &CdcBookmark,
    ) -> Result<GtidState, FaucetError> {
        let refuse = |why: String| {
            FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "the bookmark was made on the server with server_id {}{} at {}, but this \
                     one has server_id {}{} (a failover or a rebuilt server?): {why}",
                    b.server.server_id,
                    b.server
                        .server_uuid
                        .as_deref()
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default(),
                    b.position,
                    facts.identity.server_id,
                    facts
                        .identity
                        .server_uuid
                        .as_deref()
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default(),
                ),
                None,
            )
        };
        if !facts.mariadb {
            return Err(refuse(
                "its binlog positions do not apply here, and carrying a position over by GTID \
                 is implemented for MariaDB only. Point connection_url back at that server, or \
                 delete this pipeline's state and re-snapshot the tables from this one"
                    .to_owned(),
            ));
        }
        let current = server::gtid_binlog_pos(conn).await?;
        let needed = match (
            &b.gtid_state,
            b.gtid.as_deref().and_then(MariadbGtid::parse),
        ) {
            (Some(state), _) => state.clone(),
            (None, Some(g)) if current.len() == 1 && current.get(g.domain).is_some() => {
                GtidState::of(g)
            }
            (None, Some(g)) => {
                return Err(refuse(format!(
                    "the bookmark holds only its last GTID {g}, not the GTID state of every \
                     domain, and this server logs the domains {} (a bookmark of an older \
                     faucet): it cannot be carried over. Point connection_url back at that \
                     server and run once to refresh the bookmark, or delete this pipeline's \
                     state and re-snapshot the tables from this one",
                    current
                        .domains()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            (None, None) => {
                return Err(refuse(
                    "the bookmark has no GTID to carry the position over, and its binlog \
                     positions do not apply here. Point connection_url back at that server, or \
                     delete this pipeline's state and re-snapshot the tables from this one"
                        .to_owned(),
                ));
            }
        };
        let mut reach = needed.clone();
        if let Some(t) = &b.in_txn {
            let Some(g) = t.gtid.as_deref().and_then(MariadbGtid::parse) else {
                return Err(refuse(
                    "the bookmark is inside a transaction without a MariaDB GTID, which cannot \
                     be found on another server. Point connection_url back at that server to \
                     finish it"
                        .to_owned(),
                ));
            };
            reach.apply(g);
        }
        match current.holds(&reach) {
            Holding::Holds => {}
            Holding::Behind { needed, has } => {
                return Err(refuse(format!(
                    "this server's binlog has not logged transaction {needed} that the \
                     bookmark was read up to: in domain {} it ends at {} (@@gtid_binlog_pos {}). \
                     A replica that has not caught up? Wait until its @@gtid_binlog_pos \
                     reaches {reach}, or point connection_url back at that server; resuming \
                     now would lose or skip changes",
                    needed.domain,
                    has.map_or_else(|| "nothing".to_owned(), |g| g.to_string()),
                    current,
                )));
            }
            Holding::Diverged { needed, has } => {
                return Err(refuse(format!(
                    "this server logged {has} where the bookmark's server logged {needed}: a \
                     different transaction under the same domain and number, so the two \
                     histories diverged and no position on this server follows the bookmark. \
                     Delete this pipeline's state and re-snapshot the tables from this one"
                )));
            }
        }
        if let Some(oldest) = files.first() {
            let at_start = server::gtid_state_at(conn, &BinlogPos::new(oldest.clone(), 4))
                .await?
                .and_then(|s| GtidState::parse(&s));
            if let Some((want, first)) = at_start.and_then(|s| s.purged_past(&needed)) {
                return Err(refuse(format!(
                    "this server's oldest binlog `{oldest}` starts after {first}, but the \
                     bookmark needs the transactions of domain {} after {}: they were purged, \
                     and the changes in between are gone here. Re-snapshot the tables, delete this \
                     pipeline's state, and start again; keep binlogs longer than the longest \
                     pause (binlog_expire_logs_seconds / expire_logs_days)",
                    first.domain,
                    want.map_or_else(|| "its first".to_owned(), |g| g.to_string()),
                )));
            }
        }
        Ok(needed)
    }
}

/// What the GTID state a server computes at a bookmark's position (`BINLOG_GTID_POS`) says
/// about a bookmark of that server ([`check_position`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum PositionCheck {
    /// The state there is the bookmark's (or the bookmark has none to compare): the
    /// server's state there, when it told one.
    Verified(Option<GtidState>),
    /// The server could not compute it (NULL): the position is taken as the server's own,
    /// with a warning. MariaDB 10.11 answers NULL for every position after an event larger
    /// than its `max_allowed_packet` in the same file, and for a position that is not an
    /// event boundary (which the dump then refuses).
    CannotVerify,
    /// A different state: not the binlog the bookmark was read from.
    Differs,
}

/// The decision of [`PositionCheck`] for a bookmark with last GTID `gtid` and GTID state
/// `state` (either may be missing: older bookmarks, a first run on a server that could not
/// tell), given the server's answer `at` (`None`: NULL).
fn check_position(
    gtid: Option<&str>,
    state: Option<&GtidState>,
    at: Option<&str>,
) -> PositionCheck {
    let Some(at) = at else {
        return if gtid.is_none() && state.is_none() {
            PositionCheck::Verified(None)
        } else {
            PositionCheck::CannotVerify
        };
    };
    let Some(server_state) = GtidState::parse(at) else {
        return PositionCheck::CannotVerify;
    };
    let same = match (state, gtid) {
        (Some(state), _) => *state == server_state,
        (None, Some(gtid)) => at.split(',').any(|g| g.trim() == gtid),
        (None, None) => true,
    };
    if same {
        PositionCheck::Verified(Some(server_state))
    } else {
        PositionCheck::Differs
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

    /// Every page holds change records, of this module's one schema.
    fn record_schema(&self) -> Option<std::sync::Arc<faucet_core::Schema>> {
        Some(record_schema())
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
        let (start, carry) = match from {
            Some(b) => self.plan_resume(&mut conn, &facts, &files, b).await?,
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
                let gtid_state = if facts.mariadb {
                    server::gtid_state_at(&mut conn, &position)
                        .await?
                        .and_then(|s| GtidState::parse(&s))
                } else {
                    None
                };
                let first = CdcBookmark {
                    position,
                    gtid: None,
                    gtid_state,
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
        drop(conn);
        let target = (!self.config().continuous).then(|| end.clone());
        let nothing_to_read = carry.is_none()
            && target
                .as_ref()
                .is_some_and(|t| start.in_txn.is_none() && start.position.reached(t));
        let binlog = if nothing_to_read {
            None
        } else {
            let from = match &carry {
                Some(state) => DumpFrom::Gtid(state),
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
            decoder: ChangeDecoder::new(&self.validated.tables, collations),
            schema: record_schema(),
            batch_size: options.batch_size,
            max_page_delay: options.max_page_delay,
            cancel: options.cancel,
            target,
            carry: carry.map(|state| stream::Carry {
                server: facts.identity.clone(),
                state,
            }),
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
    /// Registers as replica `server_id` and requests the binlog from `from`: a file and
    /// position (`COM_BINLOG_DUMP`), or on MariaDB a GTID state (`@slave_connect_state`,
    /// `@slave_gtid_strict_mode=1`, file "" at 4: the server finds the position itself and
    /// refuses a state its binlog does not hold).
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
        conn.get_binlog_stream(request)
            .await
            .map_err(|e| match from {
                DumpFrom::Position(at) => stream::stream_error(e, at),
                DumpFrom::Gtid(state) => stream::gtid_stream_error(e, state),
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

    /// A NULL `BINLOG_GTID_POS` (the server cannot compute it) is not evidence of another
    /// binlog: the resume goes on with a warning; a different state is a refusal.
    #[test]
    fn a_null_gtid_state_cannot_verify_and_a_different_one_refuses() {
        let st = |t: &str| GtidState::parse(t).expect("state");
        let state = st("0-1-30,7-1-4");
        assert_eq!(
            check_position(Some("0-1-30"), Some(&state), None),
            PositionCheck::CannotVerify
        );
        assert_eq!(
            check_position(Some("0-1-30"), None, None),
            PositionCheck::CannotVerify
        );
        assert_eq!(
            check_position(None, None, None),
            PositionCheck::Verified(None),
            "nothing to verify"
        );
        // The server's order of domains is its own.
        assert_eq!(
            check_position(Some("0-1-30"), Some(&state), Some("7-1-4,0-1-30")),
            PositionCheck::Verified(Some(state.clone()))
        );
        assert_eq!(
            check_position(Some("0-1-30"), Some(&state), Some("0-1-30,7-1-5")),
            PositionCheck::Differs
        );
        assert_eq!(
            check_position(Some("0-1-30"), Some(&state), Some("0-1-30")),
            PositionCheck::Differs,
            "a domain missing"
        );
        // Old bookmarks: the last GTID must be in the state there, which then fills it in.
        assert_eq!(
            check_position(Some("0-1-30"), None, Some("7-1-4,0-1-30")),
            PositionCheck::Verified(Some(state))
        );
        assert_eq!(
            check_position(Some("0-1-30"), None, Some("0-1-29")),
            PositionCheck::Differs
        );
        assert_eq!(
            check_position(Some("0-1-30"), None, Some("not a state")),
            PositionCheck::CannotVerify
        );
        assert_eq!(
            check_position(None, None, Some("")),
            PositionCheck::Verified(Some(GtidState::default()))
        );
    }
}
