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
//! * A page is handed over as soon as the stream is caught up (between transactions and no
//!   further event ready: [`faucet_core::PageDeadline`]), at the latest once its oldest record
//!   has waited `max_page_delay` ([`faucet_core::ReadOptions::max_page_delay`]), or after
//!   [`IDLE_FLUSH`] without an event;
//!   an empty page carries a moved position at most every [`ADVANCE_INTERVAL`].
//! * Bounded runs stop once no transaction is open and the position reached the end of the
//!   binlog seen at start; the dump is requested non-blocking, so the server ends it at the
//!   end of its log and an idle server cannot keep the run waiting. Continuous runs ask for a
//!   heartbeat every [`HEARTBEAT`] and fail (retryably) after [`SILENCE_LIMIT`] without any
//!   event, heartbeats included.
//! * The GTID state ([`GtidState`], MariaDB) or GTID set ([`MysqlGtidSet`], MySQL) follows
//!   every GTID event the stream passes, listed tables or not, and is in every bookmark. On
//!   MySQL a transaction without a GTID (anonymous: `gtid_mode` not ON) ends the set: from
//!   there on bookmarks have none (a set no longer says what was read).
//! * Carried over to another server ([`Carry`]: the dump started from a GTID state), the
//!   server skips, per domain, the transactions up to the state and sends the rest; events
//!   it skipped can lie after ones it sent, so a file position is safe only once every
//!   domain of the starting state has been passed (a transaction of it received). Until
//!   then bookmarks keep the old server's position, with `by_gtid` and the up-to-date GTID
//!   state (a resume starts by GTID again); the first commit after that moves the position,
//!   and the identity, to the new server's — as does a commit at whose end the server's own
//!   GTID state (`BINLOG_GTID_POS`) is the stream's (a domain with no new transaction). A
//!   bounded run on a carried-over stream ends when the non-blocking dump does. A MySQL
//!   stream carried over (`COM_BINLOG_DUMP_GTID`: the server skips the transactions of the
//!   set wherever they lie in its binlog) never settles: its bookmarks stay `by_gtid` with the
//!   up-to-date set, and every resume is by GTID set.
//! * Schema changes: a rows event whose table map's shape differs from the one delivered
//!   last is preceded by a schema-change record (module `super::shapes`); an `ALTER TABLE`
//!   that renames columns is noted for that comparison.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use mysql_async::BinlogStream;
use mysql_async::binlog::events::{Event, EventData, TableMapEvent};
use tokio_util::sync::CancellationToken;

use faucet_core::{FaucetError, Page, PageBuilder, PageDeadline, Schema};

use super::CONNECTOR;
use super::bookmark::{CdcBookmark, InTxn, ServerIdentity};
use super::changes::{ChangeDecoder, Record, TxnContext};
use super::events::{self, Item};
use super::gtid_set::MysqlGtidSet;
use super::position::{BinlogPos, GtidState};
use super::span::BinlogSpan;
use super::statement::{self, Statement};
use super::statement_scope::StatementScope;
use crate::mysql::MysqlConnection;
use crate::mysql::catalog::TableCatalog;

mod errors;
mod gtid;
mod lookups;
mod txn;

pub(crate) use errors::{gtid_stream_error, stream_error};
use errors::{protocol, short, undecodable};

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
    /// The shapes delivered before it: a bookmark inside it (or at its start) carries these,
    /// so a resume replays it with the same schema-change records ([`super::shapes`]).
    delivered: Arc<super::shapes::Delivered>,
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

/// What a dump by GTID starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CarryFrom {
    /// A MariaDB GTID state (`@slave_connect_state`).
    Mariadb(GtidState),
    /// A MySQL GTID set (`COM_BINLOG_DUMP_GTID`).
    Mysql(MysqlGtidSet),
}

impl std::fmt::Display for CarryFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Mariadb(state) => state.fmt(f),
            Self::Mysql(set) => set.fmt(f),
        }
    }
}

/// A dump started from a GTID state on a server other than the bookmark's (or from a
/// `by_gtid` bookmark).
pub(crate) struct Carry {
    /// The connected server, whose terms bookmarks take once the stream has settled.
    pub(crate) server: ServerIdentity,
    /// The GTID state or set the dump started from.
    pub(crate) from: CarryFrom,
}

/// A carried-over stream not settled on the new server's position yet.
struct Carrying {
    server: ServerIdentity,
    /// The state the dump started from, as text (for errors: MariaDB refuses a GTID start
    /// in the stream, after the dump request was accepted).
    from: String,
    /// Domains of the starting state no transaction of which was received yet (MariaDB).
    unpassed: BTreeSet<u32>,
    /// Whether the stream can settle on the new server's position (MariaDB; a MySQL stream
    /// carried over resumes by GTID set for good).
    settles: bool,
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
    /// Bounded: the binlog bytes from the start to `target`, for the pages' extents; `None`
    /// when continuous or not known.
    pub(crate) span: Option<BinlogSpan>,
    /// Where the stream starts (the bookmark's, or the configured first start).
    pub(crate) from: CdcBookmark,
    /// Set when the dump starts from `from`'s GTID state rather than its position.
    pub(crate) carry: Option<Carry>,
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
    span: Option<BinlogSpan>,
    /// The file the stream is in.
    file: String,
    /// After the last transaction read completely.
    position: BinlogPos,
    gtid: Option<String>,
    /// The GTID state at `position` (MariaDB), when known.
    gtid_state: Option<GtidState>,
    /// The GTID set before `position` (MySQL), when known.
    gtid_set: Option<MysqlGtidSet>,
    /// A transaction without a GTID was passed (MySQL): no set describes the position.
    gtid_set_lost: bool,
    /// Set while a carried-over stream has not settled.
    carry: Option<Carrying>,
    /// A bounded run's non-blocking dump ended at the end of the log.
    log_ended: bool,
    /// Carried over and not settled: the end of the transaction just committed, to ask the
    /// server whether its GTID state there is the stream's ([`Self::try_settle`]).
    settle_at: Option<BinlogPos>,
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
    /// Catalog answers about statement-logged changes (module `statement_scope`).
    scope: StatementScope,
    /// For the event being applied, a statement-logged change: why it may concern a
    /// listed table (`None`: proven not to, or not such a change).
    concern: Option<String>,
}

impl CdcPageStream {
    pub(crate) fn new(start: StreamStart) -> Self {
        let mut from = start.from;
        if let Some(c) = &start.carry {
            // Carried over, nothing read yet: the same place as the bookmark resumed from.
            match &c.from {
                CarryFrom::Mariadb(state) => from.gtid_state = Some(state.clone()),
                CarryFrom::Mysql(set) => from.gtid_set = Some(set.clone()),
            }
            from.by_gtid = true;
        }
        Self {
            phase: Phase::Streaming,
            binlog: start.binlog,
            decoder: start.decoder,
            schema: start.schema,
            batch_size: start.batch_size.max(1),
            max_page_delay: start.max_page_delay,
            cancel: start.cancel,
            target: start.target,
            span: start.span,
            file: from.position.file.clone(),
            position: from.position.clone(),
            gtid: from.gtid.clone(),
            gtid_state: from.gtid_state.clone(),
            gtid_set: from.gtid_set.clone(),
            gtid_set_lost: false,
            carry: start.carry.map(|c| Carrying {
                server: c.server,
                unpassed: match &c.from {
                    CarryFrom::Mariadb(state) => state.domains().collect(),
                    CarryFrom::Mysql(_) => BTreeSet::new(),
                },
                settles: matches!(c.from, CarryFrom::Mariadb(_)),
                from: c.from.to_string(),
            }),
            log_ended: false,
            settle_at: None,
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
            scope: StatementScope::default(),
            concern: None,
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
            let between =
                self.txn.is_none() && self.pending.is_empty() && self.deferred_commit.is_none();
            let Some(wait) = deadline.wait(between) else {
                return Ok(Some(self.hand_over(page)));
            };
            match self.next_event(wait).await? {
                Next::Cancelled => return self.last_page(page).await,
                Next::Ended => {
                    if self.target.is_some() && self.txn.is_none() && self.resume.is_none() {
                        // A non-blocking dump ends at the end of the log: nothing more to read.
                        self.log_ended = true;
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
                    self.concern = self.statement_concern(&event).await?;
                    self.apply(&event, &declared)?;
                    if let Some(at) = self.settle_at.take() {
                        self.try_settle(at).await;
                    }
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
                && (self.log_ended || (self.carry.is_none() && self.position.reached(target)))
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
            gtid_state: self.gtid_state.clone(),
            gtid_set: self.gtid_set.clone(),
            by_gtid: self.carry.is_some(),
            server: self.server.clone(),
            in_txn,
        }
    }

    fn hand_over(&mut self, page: PageBuilder) -> Page {
        let bookmark = self.bookmark();
        let mut json = bookmark.to_json();
        // Between transactions every decoded record was delivered; inside one (or at its
        // start), the shapes as of its start (the resume replays it).
        let delivered = self
            .txn
            .as_ref()
            .map_or_else(|| self.decoder.delivered(), |t| t.delivered.clone());
        delivered.add_to(&mut json);
        self.last_emitted = Some(bookmark);
        self.last_advance = Instant::now();
        // A carried-over stream's position is the old server's until it settles.
        let extent = match (&self.span, &self.carry) {
            (Some(span), None) => span.extent(&self.position),
            _ => None,
        };
        page.finish(Some(json))
            .with_source_time(self.position_time)
            .with_extent(extent)
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
            received = faucet_core::ready_within(wait, binlog.next()) => match received {
                None => Ok(Next::Idle),
                Some(Some(Ok(event))) => Ok(Next::Event(event)),
                Some(None) => {
                    self.binlog = None;
                    Ok(Next::Ended)
                }
                Some(Some(Err(e))) => Err(match &self.carry {
                    Some(c) => gtid_stream_error(e, &c.from),
                    None => stream_error(e, &self.position),
                }),
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
                if to.reached(&self.position) && self.resume.is_none() && self.carry.is_none() {
                    self.position = to;
                }
            }
            // A heartbeat's position is the server's, not proof of what this stream read.
            Item::Heartbeat => {}
            Item::PreviousGtids(set) => {
                self.previous_gtids(set);
                self.advance_between(end);
            }
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
                if let Some(record) = self.decoder.shape_change(&shape, &ctx, &at) {
                    self.pending.push_back(record);
                }
                ChangeDecoder::rows(&shape, kind, &rows, &ctx, &at, &mut self.pending)?;
            }
        }
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
            Statement::Dml(_) => {
                if let Some(why) = self.concern.take() {
                    return Err(FaucetError::read(
                        CONNECTOR,
                        format!(
                            "a change at {at} is logged as an SQL statement, not as rows \
                             (binlog_format is STATEMENT or MIXED for the session that made \
                             it), and it may have changed a listed table: {why}. Which rows \
                             changed cannot be known. SET GLOBAL binlog_format = 'ROW' \
                             (sessions opened before keep their format; a session's SET SESSION \
                             binlog_format overrides it) and re-snapshot the tables changed \
                             since. The statement: `{}`",
                            short(sql)
                        ),
                        None,
                    ));
                }
            }
            ddl => {
                if ddl == Statement::Other
                    && let Some((table, renames)) = statement::column_renames(sql)
                {
                    self.decoder
                        .column_renames(&table.qualified_in(schema), renames);
                }
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
