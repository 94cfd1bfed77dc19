//! The open binlog stream: events → pages of change records and bookmarks.
//!
//! * Transactions: a GTID event (MariaDB: without FL_STANDALONE; MySQL: followed by a `BEGIN`
//!   query) or a `BEGIN` query opens one; XID, or a `COMMIT`/`ROLLBACK` query, ends it. A
//!   standalone statement (DDL, TRUNCATE) is a transaction of its own. The position moves
//!   to the end of a transaction's commit event once it is read; DDL, an implicit commit,
//!   moves it only after what came before was delivered.
//! * Pages hold at most `batch_size` records and may end inside a transaction, never inside
//!   a change; the bookmark then names the transaction's start and how many of its changes
//!   were delivered ([`super::bookmark`]). Memory is one page plus the records of one rows
//!   event (the server caps an event at `binlog_row_event_max_size`, 8 KiB by default, plus
//!   at most one row), whatever the size of a transaction.
//! * A page is handed over once its oldest record has waited `max_page_delay`
//!   ([`faucet_core::ReadOptions::max_page_delay`]), or after [`IDLE_FLUSH`] without an event;
//!   an empty page carries a moved position at most every [`ADVANCE_INTERVAL`].
//! * Bounded runs stop once no transaction is open and the position reached the end of the
//!   binlog seen at start; the dump is requested non-blocking, so the server ends it at the
//!   end of its log and an idle server cannot keep the run waiting. Continuous runs ask for a
//!   heartbeat every [`HEARTBEAT`] and fail (retryably) after [`SILENCE_LIMIT`] without any
//!   event, heartbeats included.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use mysql_async::BinlogStream;
use mysql_async::binlog::events::{Event, EventData, TableMapEvent};
use tokio_util::sync::CancellationToken;

use faucet_core::{FaucetError, Page, PageBuilder, PageDeadline, Schema};

use super::CONNECTOR;
use super::bookmark::{CdcBookmark, InTxn, ServerIdentity};
use super::changes::{ChangeDecoder, Record, TxnContext, commit_ts_text};
use super::events::{self, Item};
use super::position::BinlogPos;
use super::statement::{self, Statement};
use crate::mysql::MysqlConnection;
use crate::mysql::catalog::TableCatalog;

/// A page in hand is handed over after this long without a new event.
pub(crate) const IDLE_FLUSH: Duration = Duration::from_secs(1);
/// An empty page carrying only a moved position is handed over at most this often.
pub(crate) const ADVANCE_INTERVAL: Duration = Duration::from_secs(10);
/// The heartbeat period a continuous run asks the server for.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(1);
/// A continuous stream silent this long (no event, no heartbeat) is taken as lost.
pub(crate) const SILENCE_LIMIT: Duration = Duration::from_secs(30);

/// The transaction being read.
struct Txn {
    ctx: TxnContext,
    /// Changes of listed tables consumed so far (delivered, or skipped as delivered before).
    units: u64,
    /// The first `skip` were delivered before (resuming inside this transaction).
    skip: u64,
    /// One statement without BEGIN/COMMIT: it ends with its Query event.
    standalone: bool,
}

/// A GTID event seen, its group not started yet (MySQL: the BEGIN or the DDL comes next).
struct PendingGtid {
    gtid: Option<String>,
    standalone: bool,
    commit_us: u64,
    start: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Streaming,
    /// The last page was handed over.
    Done,
}

enum Next {
    Event(Event),
    Idle,
    Ended,
    Cancelled,
}

/// How the stream was opened.
pub(crate) struct StreamStart {
    /// The dump, or `None` when a bounded run has nothing to read.
    pub(crate) binlog: Option<BinlogStream>,
    /// The change decoder for the listed tables.
    pub(crate) decoder: ChangeDecoder,
    /// The change record schema.
    pub(crate) schema: Arc<Schema>,
    /// Records per page (≥ 1).
    pub(crate) batch_size: usize,
    /// The longest the oldest record of a page waits before the page is handed over.
    pub(crate) max_page_delay: Duration,
    /// The run's cancellation.
    pub(crate) cancel: CancellationToken,
    /// Bounded: the end of the log to catch up to. Continuous: `None`.
    pub(crate) target: Option<BinlogPos>,
    /// Where the stream starts (the bookmark's, or the configured first start).
    pub(crate) from: CdcBookmark,
    /// Whether `from` is a stored bookmark (else the first page carries it even when empty).
    pub(crate) resumed: bool,
    /// For catalog lookups (declared column types of a changed table).
    pub(crate) connection: MysqlConnection,
}

/// A [`faucet_core::PageStream`] of change records.
pub(crate) struct CdcPageStream {
    binlog: Option<BinlogStream>,
    decoder: ChangeDecoder,
    schema: Arc<Schema>,
    batch_size: usize,
    max_page_delay: Duration,
    cancel: CancellationToken,
    target: Option<BinlogPos>,
    /// The file the stream is in.
    file: String,
    /// After the last transaction read completely.
    position: BinlogPos,
    gtid: Option<String>,
    position_time: Option<SystemTime>,
    server: ServerIdentity,
    format_seen: bool,
    txn: Option<Txn>,
    pending_gtid: Option<PendingGtid>,
    resume: Option<InTxn>,
    /// Records of the current rows event not yet in a page.
    pending: VecDeque<Record>,
    /// A standalone statement's end, committed once its records are delivered.
    deferred_commit: Option<u64>,
    last_emitted: Option<CdcBookmark>,
    last_advance: Instant,
    last_event: Instant,
    phase: Phase,
    connection: MysqlConnection,
    catalog_conn: Option<mysql_async::Conn>,
}

impl CdcPageStream {
    pub(crate) fn new(start: StreamStart) -> Self {
        let from = start.from;
        Self {
            phase: Phase::Streaming,
            binlog: start.binlog,
            decoder: start.decoder,
            schema: start.schema,
            batch_size: start.batch_size.max(1),
            max_page_delay: start.max_page_delay,
            cancel: start.cancel,
            target: start.target,
            file: from.position.file.clone(),
            position: from.position.clone(),
            gtid: from.gtid.clone(),
            position_time: None,
            server: from.server.clone(),
            format_seen: false,
            txn: None,
            pending_gtid: None,
            resume: from.in_txn.clone(),
            pending: VecDeque::new(),
            deferred_commit: None,
            last_emitted: start.resumed.then_some(from),
            last_advance: Instant::now(),
            last_event: Instant::now(),
            connection: start.connection,
            catalog_conn: None,
        }
    }

    /// The next page; `None` once the stream has ended.
    pub(crate) async fn next(&mut self) -> Result<Option<Page>, FaucetError> {
        if self.phase == Phase::Done {
            self.close().await;
            return Ok(None);
        }
        let mut page = PageBuilder::new(self.schema.clone(), self.batch_size.min(16_384));
        let mut deadline = PageDeadline::new(self.max_page_delay, IDLE_FLUSH);
        loop {
            self.drain_pending(&mut page);
            if self.pending.is_empty()
                && let Some(end) = self.deferred_commit.take()
            {
                self.commit(end)?;
            }
            deadline.note(page.is_empty());
            if page.len() >= self.batch_size {
                return Ok(Some(self.hand_over(page)));
            }
            if self.caught_up() {
                return self.last_page(page).await;
            }
            let Some(wait) = deadline.wait() else {
                return Ok(Some(self.hand_over(page)));
            };
            match self.next_event(wait).await? {
                Next::Cancelled => return self.last_page(page).await,
                Next::Ended => {
                    if self.target.is_some() && self.txn.is_none() && self.resume.is_none() {
                        // A non-blocking dump ends at the end of the log: nothing more to read.
                        self.target = Some(self.position.clone());
                        continue;
                    }
                    return Err(FaucetError::connect(
                        CONNECTOR,
                        format!(
                            "the server ended the binlog stream at {}{}",
                            self.position,
                            if self.txn.is_some() {
                                " inside a transaction"
                            } else {
                                ""
                            }
                        ),
                        None,
                    ));
                }
                Next::Idle => {
                    if self.target.is_none() && self.last_event.elapsed() >= SILENCE_LIMIT {
                        return Err(FaucetError::connect(
                            CONNECTOR,
                            format!(
                                "no binlog event or heartbeat for {}s: the connection to the \
                                 server is lost",
                                SILENCE_LIMIT.as_secs()
                            ),
                            None,
                        ));
                    }
                    let moved = self.last_emitted.as_ref() != Some(&self.bookmark());
                    if !page.is_empty()
                        || (moved && self.last_advance.elapsed() >= ADVANCE_INTERVAL)
                    {
                        return Ok(Some(self.hand_over(page)));
                    }
                }
                Next::Event(event) => {
                    self.last_event = Instant::now();
                    let declared = self.declared_for(&event).await?;
                    self.apply(&event, &declared)?;
                }
            }
        }
    }

    fn drain_pending(&mut self, page: &mut PageBuilder) {
        while page.len() < self.batch_size {
            let Some(record) = self.pending.pop_front() else {
                return;
            };
            let Some(txn) = self.txn.as_mut() else {
                return;
            };
            txn.units += 1;
            if txn.units > txn.skip {
                page.push_row(record);
            }
        }
    }

    /// Whether a bounded run has read everything it set out to.
    fn caught_up(&self) -> bool {
        self.target.as_ref().is_some_and(|target| {
            self.txn.is_none()
                && self.resume.is_none()
                && self.pending.is_empty()
                && self.deferred_commit.is_none()
                && self.position.reached(target)
        })
    }

    fn bookmark(&self) -> CdcBookmark {
        let in_txn = match &self.txn {
            Some(t) if t.units.max(t.skip) > 0 => Some(InTxn {
                start_pos: t.ctx.start_pos,
                gtid: t.ctx.gtid.as_ref().map(|g| g.to_string()),
                skip: t.units.max(t.skip),
            }),
            Some(_) => None,
            None => self.resume.clone(),
        };
        CdcBookmark {
            position: self.position.clone(),
            gtid: self.gtid.clone(),
            server: self.server.clone(),
            in_txn,
        }
    }

    fn hand_over(&mut self, page: PageBuilder) -> Page {
        let bookmark = self.bookmark();
        let json = bookmark.to_json();
        self.last_emitted = Some(bookmark);
        self.last_advance = Instant::now();
        page.finish(Some(json)).with_source_time(self.position_time)
    }

    async fn last_page(&mut self, page: PageBuilder) -> Result<Option<Page>, FaucetError> {
        self.phase = Phase::Done;
        if page.is_empty() && self.last_emitted.as_ref() == Some(&self.bookmark()) {
            self.close().await;
            return Ok(None);
        }
        let page = self.hand_over(page);
        self.close().await;
        Ok(Some(page))
    }

    async fn next_event(&mut self, wait: Duration) -> Result<Next, FaucetError> {
        let Some(binlog) = self.binlog.as_mut() else {
            return Ok(Next::Ended);
        };
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Ok(Next::Cancelled),
            received = tokio::time::timeout(wait, binlog.next()) => match received {
                Err(_) => Ok(Next::Idle),
                Ok(Some(Ok(event))) => Ok(Next::Event(event)),
                Ok(None) => {
                    self.binlog = None;
                    Ok(Next::Ended)
                }
                Ok(Some(Err(e))) => Err(stream_error(e, &self.position)),
            },
        }
    }

    fn at(&self, event: &Event) -> BinlogPos {
        let h = event.header();
        BinlogPos::new(
            self.file.clone(),
            u64::from(h.log_pos()).saturating_sub(u64::from(h.event_size())),
        )
    }

    /// For a table map of a listed table that differs from the one in hand: the table's
    /// declared columns, read from the catalog on a connection kept for this; else none.
    async fn declared_for(&mut self, event: &Event) -> Result<TableCatalog, FaucetError> {
        if event.header().event_type_raw() != mysql_async::binlog::EventType::TABLE_MAP_EVENT as u8
        {
            return Ok(TableCatalog::default());
        }
        let Ok(tme) = event.read_event::<TableMapEvent<'_>>() else {
            return Ok(TableCatalog::default());
        };
        if !self.decoder.needs_catalog(&tme, event.data()) {
            return Ok(TableCatalog::default());
        }
        if self.catalog_conn.is_none() {
            self.catalog_conn = Some(self.connection.connect().await?);
        }
        let Some(conn) = self.catalog_conn.as_mut() else {
            return Ok(TableCatalog::default());
        };
        let result = TableCatalog::load(
            conn,
            &self.connection,
            &tme.database_name(),
            &tme.table_name(),
        )
        .await;
        if result.is_err() {
            self.catalog_conn = None;
        }
        result
    }

    fn apply(&mut self, event: &Event, declared: &TableCatalog) -> Result<(), FaucetError> {
        let item = events::classify(event, self.format_seen, &self.file)
            .map_err(|e| FaucetError::read(CONNECTOR, e.to_string(), Some(Box::new(e))))?;
        let end = u64::from(event.header().log_pos());
        let at = self.at(event);
        if self.pending_gtid.is_some()
            && !matches!(item, Item::Query { .. } | Item::Heartbeat | Item::Ignored)
        {
            return Err(protocol(&format!(
                "a GTID event not followed by BEGIN or a statement, at {at}"
            )));
        }
        match item {
            Item::Rotate { to, fake } => {
                if self.txn.is_some() {
                    return Err(protocol(&format!("a Rotate inside a transaction, at {at}")));
                }
                if !fake {
                    self.decoder.clear();
                }
                self.file = to.file.clone();
                if to.reached(&self.position) && self.resume.is_none() {
                    self.position = to;
                }
            }
            // A heartbeat's position is the server's, not proof of what this stream read.
            Item::Heartbeat => {}
            Item::Ignored => {
                if event.header().event_type_raw()
                    == mysql_async::binlog::EventType::FORMAT_DESCRIPTION_EVENT as u8
                {
                    self.format_seen = true;
                }
                self.advance_between(end);
            }
            Item::Gtid {
                gtid,
                standalone,
                commit_us,
            } => {
                if self.txn.is_some() {
                    return Err(protocol(&format!(
                        "a GTID event inside a transaction, at {at}"
                    )));
                }
                let pending = PendingGtid {
                    gtid,
                    standalone,
                    commit_us,
                    start: at.pos,
                };
                if event.header().event_type_raw() == events::mariadb::GTID {
                    self.begin(pending)?;
                } else {
                    self.pending_gtid = Some(pending);
                }
            }
            Item::Query { schema, sql } => self.query(&schema, &sql, &at, end)?,
            Item::Xid => self.commit(end)?,
            Item::TableMap => {
                let tme = event
                    .read_event::<TableMapEvent<'_>>()
                    .map_err(|e| undecodable("TABLE_MAP", &at, e))?;
                self.decoder.table_map(&tme, event.data(), &at, declared)?;
            }
            Item::Rows(kind) => {
                if self.txn.is_none() {
                    return Err(protocol(&format!(
                        "a rows event outside a transaction, at {at}"
                    )));
                }
                let Some(EventData::RowsEvent(rows)) =
                    event.read_data().map_err(|e| undecodable("ROWS", &at, e))?
                else {
                    return Err(protocol(&format!("a rows event that is not one, at {at}")));
                };
                let Some(shape) = self.decoder.shape(rows.table_id(), &at)? else {
                    return Ok(());
                };
                let txn = self.txn.as_ref().map(|t| t.ctx.clone());
                let Some(ctx) = txn else {
                    return Ok(());
                };
                let mut out = Vec::new();
                ChangeDecoder::rows(&shape, kind, &rows, &ctx, &at, &mut out)?;
                self.pending.extend(out);
            }
        }
        Ok(())
    }

    /// Between transactions, an event boundary further on in the same file becomes the
    /// position (a resume from it loses nothing).
    fn advance_between(&mut self, end: u64) {
        if self.txn.is_none()
            && self.pending_gtid.is_none()
            && self.resume.is_none()
            && end > self.position.pos
            && self.file == self.position.file
        {
            self.position.pos = end;
        }
    }

    fn begin(&mut self, g: PendingGtid) -> Result<(), FaucetError> {
        let mut skip = 0;
        if let Some(r) = self.resume.take() {
            if g.start != r.start_pos || (r.gtid.is_some() && r.gtid != g.gtid) {
                return Err(FaucetError::bookmark(
                    CONNECTOR,
                    format!(
                        "the bookmark is inside the transaction at {}:{} (GTID {}), but the \
                         server's binlog has a transaction at {}:{} (GTID {}) there: the \
                         bookmark does not belong to this server's binlog; delete the state and \
                         re-snapshot the tables",
                        self.file,
                        r.start_pos,
                        r.gtid.as_deref().unwrap_or("none"),
                        self.file,
                        g.start,
                        g.gtid.as_deref().unwrap_or("none")
                    ),
                    None,
                ));
            }
            skip = r.skip;
        }
        self.txn = Some(Txn {
            ctx: TxnContext {
                file: self.file.as_str().into(),
                start_pos: g.start,
                gtid: g.gtid.map(Into::into),
                commit_ts: commit_ts_text(g.commit_us),
            },
            units: 0,
            skip,
            standalone: g.standalone,
        });
        self.position_time = Some(SystemTime::UNIX_EPOCH + Duration::from_micros(g.commit_us));
        Ok(())
    }

    fn commit(&mut self, end: u64) -> Result<(), FaucetError> {
        let txn = self
            .txn
            .take()
            .ok_or_else(|| protocol("a commit outside a transaction"))?;
        if !self.pending.is_empty() {
            return Err(protocol("a commit with changes not delivered"));
        }
        self.position = BinlogPos::new(self.file.clone(), end);
        self.gtid = txn.ctx.gtid.map(|g| g.to_string());
        Ok(())
    }

    fn query(
        &mut self,
        schema: &str,
        sql: &str,
        at: &BinlogPos,
        end: u64,
    ) -> Result<(), FaucetError> {
        let kind = statement::classify(sql);
        if let Some(g) = self.pending_gtid.take() {
            // MySQL: BEGIN opens the GTID's group; anything else is a group of one statement.
            let standalone = kind != Statement::Begin;
            self.begin(PendingGtid { standalone, ..g })?;
            if !standalone {
                return Ok(());
            }
        }
        match kind {
            Statement::Begin => {
                if self.txn.is_none() {
                    self.begin(PendingGtid {
                        gtid: None,
                        standalone: false,
                        commit_us: 0,
                        start: at.pos,
                    })?;
                }
                return Ok(());
            }
            Statement::Commit | Statement::Rollback => {
                return self.commit(end);
            }
            Statement::Xa => {
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!(
                        "an XA transaction at {at} (`{}`): XA is not supported",
                        short(sql)
                    ),
                    None,
                ));
            }
            _ => {}
        }
        let standalone = match &self.txn {
            None => {
                // A statement outside any group (a server without GTID events): its own.
                self.begin(PendingGtid {
                    gtid: None,
                    standalone: true,
                    commit_us: 0,
                    start: at.pos,
                })?;
                true
            }
            Some(t) => t.standalone,
        };
        match kind {
            Statement::Dml => {
                if let Some(t) = self.decoder.named_in(sql) {
                    return Err(FaucetError::read(
                        CONNECTOR,
                        format!(
                            "a change of {t} at {at} is logged as an SQL statement, not as rows \
                             (binlog_format is STATEMENT or MIXED for the session that made it): \
                             which rows changed cannot be known. SET GLOBAL binlog_format = \
                             'ROW' (sessions opened before keep their format) and re-snapshot \
                             the tables changed since"
                        ),
                        None,
                    ));
                }
            }
            ddl => {
                if let Some(txn) = &self.txn {
                    let records = self.decoder.ddl(&ddl, schema, sql, &txn.ctx, at)?;
                    self.pending.extend(records);
                }
            }
        }
        if standalone {
            if self.pending.is_empty() {
                self.commit(end)?;
            } else {
                // The DDL's `t` records are delivered first; the commit follows them.
                self.deferred_commit = Some(end);
            }
        }
        Ok(())
    }

    /// Ends the dump and the catalog connection (each given 5 s to close cleanly).
    pub(crate) async fn close(&mut self) {
        self.phase = Phase::Done;
        if let Some(binlog) = self.binlog.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), binlog.close()).await;
        }
        if let Some(conn) = self.catalog_conn.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), conn.disconnect()).await;
        }
    }
}

fn short(sql: &str) -> String {
    sql.chars().take(80).collect()
}

fn protocol(what: &str) -> FaucetError {
    FaucetError::read(CONNECTOR, format!("unexpected binlog stream: {what}"), None)
}

fn undecodable(name: &str, at: &BinlogPos, e: std::io::Error) -> FaucetError {
    FaucetError::read(
        CONNECTOR,
        format!("the {name} event at {at} cannot be decoded"),
        Some(Box::new(e)),
    )
}

/// A dump error: the server's refusals (a purged or unknown position: 1236) are not
/// retryable; a lost connection is.
pub(crate) fn stream_error(e: mysql_async::Error, at: &BinlogPos) -> FaucetError {
    match &e {
        mysql_async::Error::Server(s) if s.code == 1236 => FaucetError::bookmark(
            CONNECTOR,
            format!(
                "the server cannot send its binlog from {at} ({}): the file was purged or the \
                 position is not an event boundary of this server's binlog; the changes after \
                 it cannot be read. Re-snapshot the tables, delete this pipeline's state, and \
                 start again",
                s.message
            ),
            Some(Box::new(e)),
        ),
        mysql_async::Error::Server(s) if s.code == 1227 || s.code == 1045 => FaucetError::read(
            CONNECTOR,
            format!(
                "the server refused the binlog dump ({}): GRANT REPLICATION SLAVE ON *.* TO the \
                 reading user",
                s.message
            ),
            Some(Box::new(e)),
        ),
        mysql_async::Error::Server(_) => FaucetError::read(
            CONNECTOR,
            format!("the server refused the binlog stream at {at}"),
            Some(Box::new(e)),
        ),
        _ => FaucetError::connect(
            CONNECTOR,
            format!("the binlog connection failed at {at}"),
            Some(Box::new(e)),
        ),
    }
}
