//! The open change stream: events from the replication session → pages of change records,
//! bookmarks, and acknowledgements.
//!
//! * Pages hold at most `batch_size` records and may end inside a transaction, never inside
//!   a change; the bookmark then names the transaction and how many of its changes were
//!   delivered ([`super::bookmark`]). Memory is one page plus the session's bounded event
//!   buffer, whatever the size of a transaction.
//! * A page is handed over as soon as the stream is caught up (between transactions and no
//!   further event ready: [`faucet_core::PageDeadline`]); at the latest once its oldest
//!   record has waited `max_page_delay`
//!   ([`faucet_core::ReadOptions::max_page_delay`]), however steady the traffic, so every
//!   change of a continuous run is delivered within that bound, and the slot's flush
//!   position follows within it too; and when the stream has been quiet for [`IDLE_FLUSH`]
//!   (which only matters when `max_page_delay` is longer). When only the position moved
//!   (transactions of other tables, WAL of other databases), an empty page carries the new
//!   bookmark at most every [`ADVANCE_INTERVAL`], so the slot does not pin WAL forever.
//! * The server hears a flush position only from [`CdcPageStream::ack`], which the run loop
//!   calls once a bookmark is durable (docs/run-loop.md, invariant 2, case 03); the session reports it
//!   within the standby status interval (the page delay, 10 to 200 ms), and before the
//!   stream closes.
//! * Bounded runs stop once no transaction is open and the position reached the WAL position
//!   seen at start (a Commit's end LSN, or a keepalive's WAL end, which the server sends when
//!   it has decoded everything up to it).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use pgwire_replication::{Lsn, PgWireError, ReplicationClient, ReplicationEvent};
use tokio_util::sync::CancellationToken;

use faucet_core::{Extent, ExtentUnit, FaucetError, Page, PageBuilder, PageDeadline, Schema};

use super::CONNECTOR;
use super::bookmark::{CdcBookmark, InTxn};
use super::changes::{ChangeDecoder, Record, TxnContext};
use super::client::lsn_text;
use super::pgoutput::{self, Message, RelationColumn};
use super::relation_types::RelationTypes;

/// A page in hand is handed over after this long without a new event.
pub(crate) const IDLE_FLUSH: Duration = Duration::from_secs(1);
/// An empty page carrying only a moved position is handed over at most this often.
pub(crate) const ADVANCE_INTERVAL: Duration = Duration::from_secs(10);
/// How long closing the stream waits for the last acknowledgement to be sent.
const ACK_FLUSH_WAIT: Duration = Duration::from_secs(5);

/// The transaction being read.
struct Txn {
    final_lsn: Lsn,
    xid: u32,
    ctx: TxnContext,
    /// Changes consumed so far (delivered, skipped as already delivered, or of other tables).
    units: u64,
    /// The first `skip` changes were delivered before (resuming inside this transaction).
    skip: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading.
    Streaming,
    /// The last page was handed over; close once its bookmark is durable.
    Last,
    /// Closed.
    Done,
}

enum Next {
    Event(ReplicationEvent),
    Idle,
    Cancelled,
}

/// How the stream was opened.
pub(crate) struct StreamStart {
    /// The session, or `None` when a bounded run has nothing to read.
    pub(crate) client: Option<ReplicationClient>,
    /// The change decoder for the configured tables.
    pub(crate) decoder: ChangeDecoder,
    /// The column type resolver of Relation messages.
    pub(crate) types: RelationTypes,
    /// The change record schema.
    pub(crate) schema: Arc<Schema>,
    /// Records per page (≥ 1).
    pub(crate) batch_size: usize,
    /// The longest the oldest record of a page waits before the page is handed over.
    pub(crate) max_page_delay: Duration,
    /// The run's cancellation.
    pub(crate) cancel: CancellationToken,
    /// Bounded: the WAL position to catch up to. Continuous: `None`.
    pub(crate) target: Option<Lsn>,
    /// Where the stream starts, and the partly delivered transaction, if any.
    pub(crate) from: CdcBookmark,
}

/// A [`faucet_core::PageStream`] of change records.
pub(crate) struct CdcPageStream {
    client: Option<ReplicationClient>,
    decoder: ChangeDecoder,
    types: RelationTypes,
    /// A Relation message whose column types were resolved ahead of its [`Self::apply`].
    resolved: Option<Vec<RelationColumn>>,
    schema: Arc<Schema>,
    batch_size: usize,
    max_page_delay: Duration,
    cancel: CancellationToken,
    target: Option<Lsn>,
    position: Lsn,
    /// When the source was at `position`, by the server's clock (a commit time, a
    /// keepalive's server time), in microseconds since 2000-01-01.
    position_time: Option<i64>,
    txn: Option<Txn>,
    resume: Option<InTxn>,
    pending_truncate: VecDeque<u32>,
    last_emitted: CdcBookmark,
    last_advance: Instant,
    durable: Lsn,
    /// The last page handed over was full: more changes are waiting (the run loop may read
    /// the next page while the sink writes that one, `PageStream::reads_ahead`).
    backlog: bool,
    /// The position the session reported from its start (the bookmark's).
    start_ack: Lsn,
    phase: Phase,
}

impl CdcPageStream {
    pub(crate) fn new(start: StreamStart) -> Self {
        let phase = if start.client.is_some() {
            Phase::Streaming
        } else {
            Phase::Done
        };
        Self {
            client: start.client,
            decoder: start.decoder,
            types: start.types,
            resolved: None,
            schema: start.schema,
            batch_size: start.batch_size.max(1),
            max_page_delay: start.max_page_delay,
            cancel: start.cancel,
            target: start.target,
            position: start.from.lsn,
            position_time: None,
            txn: None,
            resume: start.from.in_txn,
            pending_truncate: VecDeque::new(),
            last_emitted: start.from,
            last_advance: Instant::now(),
            durable: start.from.lsn,
            backlog: false,
            start_ack: start.from.lsn,
            phase,
        }
    }

    /// The next page; `None` once the stream has ended.
    pub(crate) async fn next(&mut self) -> Result<Option<Page>, FaucetError> {
        if self.phase != Phase::Streaming {
            self.close().await;
            return Ok(None);
        }
        let mut page = PageBuilder::new(self.schema.clone(), self.batch_size.min(16_384));
        let mut deadline = PageDeadline::new(self.max_page_delay, IDLE_FLUSH);
        loop {
            while page.len() < self.batch_size {
                let Some(oid) = self.pending_truncate.pop_front() else {
                    break;
                };
                if let Some(record) = self.truncate_unit(oid)? {
                    page.push_row(record);
                }
            }
            deadline.note(page.is_empty());
            if page.len() >= self.batch_size {
                return Ok(Some(self.hand_over(page)));
            }
            if self.caught_up() {
                return self.last_page(page).await;
            }
            let between = self.txn.is_none() && self.pending_truncate.is_empty();
            let Some(wait) = deadline.wait(between) else {
                return Ok(Some(self.hand_over(page)));
            };
            match self.next_event(wait).await? {
                Next::Cancelled => return self.last_page(page).await,
                Next::Idle => {
                    if !page.is_empty()
                        || (self.bookmark() != self.last_emitted
                            && self.last_advance.elapsed() >= ADVANCE_INTERVAL)
                    {
                        return Ok(Some(self.hand_over(page)));
                    }
                }
                Next::Event(event) => {
                    self.resolve_relation(&event).await?;
                    self.apply(event, &mut page)?;
                }
            }
        }
    }

    /// Told that `bookmark` is durable: report its position to the server as flushed. The
    /// last page's (a bounded run's) closes the stream; an earlier page's, told after the
    /// last page was read ahead ([`Self::has_backlog`]), does not.
    pub(crate) async fn ack(&mut self, bookmark: &CdcBookmark) {
        if bookmark.lsn > self.durable {
            self.durable = bookmark.lsn;
            if let Some(client) = &self.client {
                client.update_applied_lsn(self.durable);
            }
        }
        if self.phase == Phase::Last && *bookmark == self.last_emitted {
            self.close().await;
        }
    }

    /// Whether the last page handed over was full and the stream reads on: the next page is
    /// likely at hand (no idle wait), so it may be read before the last one is durable.
    pub(crate) fn has_backlog(&self) -> bool {
        self.backlog && self.phase == Phase::Streaming
    }

    /// Whether a bounded run has read everything it set out to.
    fn caught_up(&self) -> bool {
        self.target.is_some_and(|target| {
            self.txn.is_none()
                && self.resume.is_none()
                && self.pending_truncate.is_empty()
                && self.position >= target
        })
    }

    fn bookmark(&self) -> CdcBookmark {
        let in_txn = match &self.txn {
            // Resuming inside this transaction, its first `skip` changes were delivered
            // before, however few were consumed again so far.
            Some(t) if t.units.max(t.skip) > 0 => Some(InTxn {
                final_lsn: t.final_lsn,
                xid: t.xid,
                skip: t.units.max(t.skip),
            }),
            Some(_) => None,
            None => self.resume,
        };
        CdcBookmark {
            lsn: self.position,
            in_txn,
        }
    }

    fn hand_over(&mut self, page: PageBuilder) -> Page {
        self.backlog = page.len() >= self.batch_size;
        let bookmark = self.bookmark();
        self.last_emitted = bookmark;
        self.last_advance = Instant::now();
        let mut json = bookmark.to_json();
        super::shapes::add_to(&mut json, self.decoder.shapes());
        page.finish(Some(json))
            .with_source_time(self.position_time.map(server_time))
            .with_extent(self.extent())
    }

    /// How far along a bounded run is: the WAL bytes from its start to its position, of
    /// those from its start to its target (`pg_current_wal_lsn()` when it opened); `None`
    /// for a continuous run (no end).
    fn extent(&self) -> Option<Extent> {
        let target = self.target?;
        let total = target.0.saturating_sub(self.start_ack.0);
        let done = self.position.0.saturating_sub(self.start_ack.0);
        Some(Extent::exact(done, total, ExtentUnit::WalBytes))
    }

    /// The page in hand as the last one, or `None` (and close) when it would carry nothing new.
    async fn last_page(&mut self, page: PageBuilder) -> Result<Option<Page>, FaucetError> {
        if page.is_empty() && self.bookmark() == self.last_emitted {
            self.close().await;
            return Ok(None);
        }
        self.phase = Phase::Last;
        Ok(Some(self.hand_over(page)))
    }

    /// The next event, or [`Next::Idle`] after `wait` without one.
    async fn next_event(&mut self, wait: Duration) -> Result<Next, FaucetError> {
        let Some(client) = self.client.as_mut() else {
            return Ok(Next::Cancelled);
        };
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Ok(Next::Cancelled),
            received = faucet_core::ready_within(wait, client.recv()) => match received {
                None => Ok(Next::Idle),
                Some(Ok(Some(event))) => Ok(Next::Event(event)),
                Some(Ok(None)) => Err(FaucetError::connect(
                    CONNECTOR,
                    "the server ended the replication stream",
                    None,
                )),
                Some(Err(e)) => Err(stream_error(e)),
            },
        }
    }

    /// When `event` is a Relation message: resolves its column types (an async catalog
    /// lookup for a type not seen before), for [`Self::message`] to use.
    async fn resolve_relation(&mut self, event: &ReplicationEvent) -> Result<(), FaucetError> {
        let ReplicationEvent::XLogData { data, .. } = event else {
            return Ok(());
        };
        if data.first() != Some(&b'R') {
            return Ok(());
        }
        if let Ok(Message::Relation {
            oid,
            namespace,
            name,
            mut columns,
            ..
        }) = pgoutput::decode(data)
        {
            self.types
                .resolve(oid, &format!("{namespace}.{name}"), &mut columns)
                .await?;
            self.resolved = Some(columns);
        }
        Ok(())
    }

    fn apply(
        &mut self,
        event: ReplicationEvent,
        page: &mut PageBuilder,
    ) -> Result<(), FaucetError> {
        match event {
            ReplicationEvent::Begin {
                final_lsn,
                xid,
                commit_time_micros,
            } => self.begin(final_lsn, xid, commit_time_micros),
            ReplicationEvent::XLogData { data, .. } => {
                let message = pgoutput::decode(&data).map_err(|e| {
                    FaucetError::read(
                        CONNECTOR,
                        "cannot decode a pgoutput message",
                        Some(Box::new(e)),
                    )
                })?;
                self.message(message, page)
            }
            ReplicationEvent::Commit {
                lsn,
                end_lsn,
                commit_time_micros,
            } => {
                let txn = self
                    .txn
                    .take()
                    .ok_or_else(|| protocol("Commit without Begin"))?;
                if txn.final_lsn != lsn {
                    return Err(protocol(&format!(
                        "Commit at {} for the transaction that began with final LSN {}",
                        lsn_text(lsn),
                        lsn_text(txn.final_lsn)
                    )));
                }
                self.position = self.position.max(end_lsn);
                self.position_time = Some(commit_time_micros);
                Ok(())
            }
            ReplicationEvent::KeepAlive {
                wal_end,
                server_time_micros,
                ..
            } => {
                if self.txn.is_none() {
                    if let Some(r) = self.resume {
                        if wal_end > r.final_lsn {
                            return Err(lost_transaction(r));
                        }
                    } else {
                        if wal_end >= self.position {
                            self.position_time = Some(server_time_micros);
                        }
                        self.position = self.position.max(wal_end);
                    }
                }
                Ok(())
            }
            // Logical decoding messages (pg_logical_emit_message) are not change records.
            _ => Ok(()),
        }
    }

    fn begin(
        &mut self,
        final_lsn: Lsn,
        xid: u32,
        commit_time_micros: i64,
    ) -> Result<(), FaucetError> {
        if self.txn.is_some() {
            return Err(protocol("Begin inside an open transaction"));
        }
        let mut skip = 0;
        if let Some(r) = self.resume {
            if final_lsn == r.final_lsn {
                if xid != r.xid {
                    return Err(FaucetError::bookmark(
                        CONNECTOR,
                        format!(
                            "the bookmark is inside transaction {} committed at {}, but the \
                             server replays transaction {xid} there; the bookmark does not \
                             belong to this slot",
                            r.xid,
                            lsn_text(r.final_lsn)
                        ),
                        None,
                    ));
                }
                skip = r.skip;
                self.resume = None;
            } else if final_lsn > r.final_lsn {
                return Err(lost_transaction(r));
            } else {
                // Replication resumed at the end of the transaction before the bookmark's, so
                // that one comes first; anything earlier means the bookmark is not this slot's.
                return Err(FaucetError::bookmark(
                    CONNECTOR,
                    format!(
                        "the server replays transaction {xid} committed at {} before the \
                         bookmark's transaction {} committed at {}; the bookmark does not \
                         belong to this slot",
                        lsn_text(final_lsn),
                        r.xid,
                        lsn_text(r.final_lsn)
                    ),
                    None,
                ));
            }
        }
        self.txn = Some(Txn {
            final_lsn,
            xid,
            ctx: TxnContext {
                lsn: lsn_text(final_lsn),
                commit_ts: commit_ts_text(commit_time_micros),
            },
            units: 0,
            skip,
        });
        Ok(())
    }

    fn message(&mut self, message: Message<'_>, page: &mut PageBuilder) -> Result<(), FaucetError> {
        match message {
            Message::Relation {
                oid,
                namespace,
                name,
                replica_identity,
                mut columns,
            } => {
                if let Some(resolved) = self.resolved.take()
                    && resolved.len() == columns.len()
                {
                    columns = resolved;
                }
                self.decoder
                    .relation(oid, namespace, name, replica_identity, columns);
                Ok(())
            }
            Message::Truncate { oids, .. } => {
                if self.txn.is_none() {
                    return Err(protocol("Truncate outside a transaction"));
                }
                self.pending_truncate.extend(oids);
                Ok(())
            }
            Message::Ignored => Ok(()),
            change => {
                let txn = self
                    .txn
                    .as_mut()
                    .ok_or_else(|| protocol("a change outside a transaction"))?;
                txn.units += 1;
                if txn.units <= txn.skip {
                    // Delivered before: its table's shape was announced then.
                    self.decoder.shape_change(&change, None);
                    return Ok(());
                }
                // A schema change goes right before the change, in its unit.
                if let Some(record) = self.decoder.shape_change(&change, Some(&txn.ctx)) {
                    page.push_row(record);
                }
                if let Some(record) = self.decoder.change(&change, &txn.ctx)? {
                    page.push_row(record);
                }
                Ok(())
            }
        }
    }

    fn truncate_unit(&mut self, oid: u32) -> Result<Option<Record>, FaucetError> {
        let txn = self
            .txn
            .as_mut()
            .ok_or_else(|| protocol("Truncate outside a transaction"))?;
        txn.units += 1;
        if txn.units <= txn.skip {
            return Ok(None);
        }
        self.decoder.truncate(oid, &txn.ctx)
    }

    /// Sends the last acknowledgement and ends the session.
    async fn close(&mut self) {
        self.phase = Phase::Done;
        let Some(mut client) = self.client.take() else {
            return;
        };
        let metrics = client.metrics();
        let deadline = Instant::now() + ACK_FLUSH_WAIT;
        while self.durable > self.start_ack
            && metrics.last_applied_lsn() < self.durable
            && Instant::now() < deadline
            && client.is_running()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.durable > self.start_ack && metrics.last_applied_lsn() < self.durable {
            tracing::warn!(
                lsn = %lsn_text(self.durable),
                "could not report the last durable position to the server before closing; \
                 the next run resumes from the bookmark all the same"
            );
        }
        if let Err(e) = tokio::time::timeout(Duration::from_secs(5), client.shutdown()).await {
            tracing::debug!(error = %e, "the replication session did not close in time");
        }
    }
}

fn protocol(what: &str) -> FaucetError {
    FaucetError::read(
        CONNECTOR,
        format!("unexpected replication stream: {what}"),
        None,
    )
}

fn lost_transaction(r: InTxn) -> FaucetError {
    FaucetError::bookmark(
        CONNECTOR,
        format!(
            "the bookmark is inside transaction {} committed at {}, which the slot no longer \
             replays (its confirmed_flush_lsn passed it, or the slot was recreated): the rest of \
             that transaction cannot be read again; delete the bookmark and resync the tables",
            r.xid,
            lsn_text(r.final_lsn)
        ),
        None,
    )
}

/// Maps a replication session error: a slot held by another process (SQLSTATE 55006), a
/// walsender's internal error (XX000: the server process failed, not the request; the
/// subscriber side of PostgreSQL's own logical replication restarts after it) and lost
/// connections are retryable [`FaucetError::Connect`]s, server refusals are
/// [`FaucetError::Read`]s with the server's message.
pub(crate) fn stream_error(e: PgWireError) -> FaucetError {
    match &e {
        PgWireError::Server(message) if message.contains("55006") => FaucetError::connect(
            CONNECTOR,
            "the replication slot is active in another process: stop that consumer, or give \
             this pipeline its own `slot_name`",
            Some(Box::new(e)),
        ),
        _ if is_internal_error(&e) => FaucetError::connect(
            CONNECTOR,
            "the server's walsender stopped on an internal error (SQLSTATE XX000; seen under \
             concurrent DDL in the same database, e.g. `could not map filenode`): nothing was \
             acknowledged past the last durable page, so starting the stream again resumes \
             there, as PostgreSQL's own subscriptions do",
            Some(Box::new(e)),
        ),
        PgWireError::Server(_) => FaucetError::read(
            CONNECTOR,
            "the server refused the replication stream",
            Some(Box::new(e)),
        ),
        PgWireError::Auth(_) => FaucetError::connect(
            CONNECTOR,
            "authentication of the replication connection failed (check the user and password, \
             and that pg_hba.conf allows `replication` connections for the database)",
            Some(Box::new(e)),
        ),
        _ => FaucetError::connect(
            CONNECTOR,
            "the replication connection failed",
            Some(Box::new(e)),
        ),
    }
}

/// Whether the walsender stopped on an internal error (SQLSTATE XX000), which starting the
/// stream again may not meet (see [`stream_error`]).
pub(crate) fn is_internal_error(e: &PgWireError) -> bool {
    matches!(e, PgWireError::Server(message) if message.contains("(SQLSTATE XX000)"))
}

/// A server time (microseconds since 2000-01-01 UTC) as a [`SystemTime`].
fn server_time(micros_since_2000: i64) -> SystemTime {
    const PG_EPOCH_UNIX_SECS: u64 = 946_684_800;
    let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
    match u64::try_from(micros_since_2000) {
        Ok(after) => epoch + Duration::from_micros(after),
        Err(_) => epoch - Duration::from_micros(micros_since_2000.unsigned_abs()),
    }
}

/// A pgoutput commit time (microseconds since 2000-01-01 UTC) in RFC 3339 UTC, with the
/// fraction PostgreSQL would print (trailing zeros dropped): `2026-11-30T06:00:00.25Z`.
pub(crate) fn commit_ts_text(micros_since_2000: i64) -> String {
    const PG_EPOCH_UNIX_SECS: i64 = 946_684_800;
    let secs = micros_since_2000.div_euclid(1_000_000) + PG_EPOCH_UNIX_SECS;
    let micros = micros_since_2000.rem_euclid(1_000_000) as u32;
    let Some(at) = chrono::DateTime::from_timestamp(secs, micros * 1_000) else {
        return if micros_since_2000 < 0 {
            "-infinity".to_owned()
        } else {
            "infinity".to_owned()
        };
    };
    let mut out = at.format("%Y-%m-%dT%H:%M:%S").to_string();
    if micros > 0 {
        let fraction = format!("{micros:06}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests;
