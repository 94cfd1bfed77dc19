//! The source side of the contract: a [`Source`] opens a [`PageStream`] from a bookmark.
//!
//! What the run loop guarantees a source: it asks for the next page only after the previous
//! one was written, flushed and its bookmark persisted; it calls
//! [`PageStream::bookmark_durable`] with a page's bookmark once that bookmark is durable in
//! the state store (or in the sink's commit token), so a CDC source may acknowledge upstream
//! (a replication slot's `confirmed_flush_lsn`, docs/run-loop.md, invariant 2) *during* a run.
//! What a source must do: emit at most `batch_size` records per page; put in each page's
//! bookmark everything needed to resume right after that page (also in the middle of a
//! transaction or a file); hold no more than about one page in memory; end the stream when
//! the read's cancellation token fires, returning the records already in hand first.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::error::FaucetError;
use crate::page::{Bookmark, Page};
use crate::value::Schema;

pub use crate::delivery::ReplayGuarantee;

/// How a stream should read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The most records in one page; at least 1.
    pub batch_size: usize,
    /// The longest a record may wait in a page before the page is handed over, however few
    /// records it holds. Continuous sources (a change stream) must honour it, so that a
    /// steady trickle below `batch_size` per page is delivered within this bound; a source
    /// that reads what is already there (a file, a query) may ignore it. Greater than zero.
    /// Default [`DEFAULT_MAX_PAGE_DELAY`].
    pub max_page_delay: Duration,
    /// Fires when the run is cancelled: finish the page in hand and end the stream.
    pub cancel: CancellationToken,
}

/// The page size when none is given: 10,000 records.
pub const DEFAULT_BATCH_SIZE: usize = 10_000;

/// How long a record may wait in a page of a continuous source when none is given: 50 ms.
///
/// Short enough that every change of a steady stream is durable (written, flushed, its
/// bookmark persisted) well within 100 ms; long enough that a bulk catch-up, which fills a
/// 10,000-record page in less time than that, still hands over full pages
/// (`bench/cdc_latency.sh` and `bench/cdc_to_jsonl.sh` measure both).
pub const DEFAULT_MAX_PAGE_DELAY: Duration = Duration::from_millis(50);

/// When a continuous source's page in hand is due: at once when the stream is caught up (no
/// transaction open and nothing more buffered on the connection), and at the latest
/// [`ReadOptions::max_page_delay`] after its first record arrived, however few records it
/// holds — the rules that bound a change's latency, kept in one place for every change
/// stream.
///
/// A stream calls [`PageDeadline::note`] after adding records to its page and asks
/// [`PageDeadline::wait`] how long it may wait for the next event, telling it whether it is
/// between transactions: `None` means the page is due now; `Some(Duration::ZERO)` (a page
/// with records, between transactions) means "only if one is ready" — the stream receives
/// through [`ready_within`], which polls its connection without a timer, and hands the page
/// over when nothing is, so a trickle is delivered as soon as each commit is decoded while a
/// catch-up, whose events are already buffered, still fills whole pages. With an empty page
/// it waits `idle` at most (then it may hand over a bookmark that moved without records).
#[derive(Debug, Clone)]
pub struct PageDeadline {
    delay: Duration,
    idle: Duration,
    due: Option<Instant>,
}

impl PageDeadline {
    /// A deadline for a new, empty page: `delay` after its first record; `idle` the longest
    /// wait for an event while the page is empty.
    pub fn new(delay: Duration, idle: Duration) -> Self {
        Self {
            delay,
            idle,
            due: None,
        }
    }

    /// Starts the clock when the page has its first record (`page_empty` false); later calls
    /// keep the first record's deadline.
    pub fn note(&mut self, page_empty: bool) {
        if self.due.is_none() && !page_empty {
            self.due = Some(Instant::now() + self.delay);
        }
    }

    /// How long the stream may wait for its next event: `None` once the page is due; zero
    /// for a page with records while `between_transactions` (the last transaction whose
    /// records are in the page has committed and no other is open); otherwise until the
    /// deadline, at most `idle`.
    pub fn wait(&self, between_transactions: bool) -> Option<Duration> {
        match self.due {
            Some(due) => {
                let left = due.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    None
                } else if between_transactions {
                    Some(Duration::ZERO)
                } else {
                    Some(left.min(self.idle))
                }
            }
            None => Some(self.idle),
        }
    }
}

/// Receives `next` (a change stream's next event) if it completes within `wait`: `None`
/// when it did not. Cancel-safe as far as `next` is (a stream's `next()` is).
///
/// A zero `wait` (what [`PageDeadline::wait`] gives a page that is ready between
/// transactions) takes only what is ready now: `next` is polled, outside tokio's
/// cooperative budget, once, and once more after a [`tokio::task::yield_now`] lets the
/// runtime pick up data that reached the socket meanwhile. It is not a zero
/// `tokio::time::timeout`: the timer rounds a deadline up to its next millisecond tick, and
/// under a steady 1,000 commits/s the next commit nearly always arrives within that tick,
/// so a page waited for `max_page_delay` although every event was read as soon as it came
/// (measured with `SOURCE=mysql bench/cdc_latency.sh`: p99 50 ms at 1,000 commits/s).
pub async fn ready_within<F: Future>(wait: Duration, next: F) -> Option<F::Output> {
    if !wait.is_zero() {
        return tokio::time::timeout(wait, next).await.ok();
    }
    let mut next = std::pin::pin!(tokio::task::unconstrained(next));
    for attempt in 0..2 {
        if attempt > 0 {
            tokio::task::yield_now().await;
        }
        let polled = std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx))).await;
        if let Poll::Ready(value) = polled {
            return Some(value);
        }
    }
    None
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            max_page_delay: DEFAULT_MAX_PAGE_DELAY,
            cancel: CancellationToken::new(),
        }
    }
}

/// A configured source. Built by the CLI's registry or by a library user; opening it does
/// the I/O.
#[async_trait]
pub trait Source: Send + Sync {
    /// The connector's name (`csv`, `postgres-cdc`), used in errors and summaries.
    fn connector(&self) -> &str;

    /// Whether resuming from a bookmark replays the same records.
    fn replay(&self) -> ReplayGuarantee;

    /// Whether, opened without a bookmark, this source continues from a position its
    /// upstream keeps (a replication slot's confirmed position) rather than from the very
    /// beginning. The default is `false`. The run loop's lost-bookmark guard (a first run
    /// into an append-only target that already holds data is refused) applies only to
    /// sources that would start over.
    fn resumes_without_bookmark(&self) -> bool {
        false
    }

    /// Whether this source's streams read and decode in a tokio task of their own, in
    /// parallel with the run loop (a MySQL query or binlog read decodes its next page while
    /// the run loop writes the last one). Such a source needs a multi-thread runtime to
    /// gain anything from it. `false` (the default): the stream reads in the run loop's task,
    /// or on an OS thread of its own (the csv source, a PostgreSQL query's decoder) — then a
    /// current-thread runtime serves a single pipeline best, since every handoff between the
    /// run loop and its clients' tasks (a replication client's events, a bus client's
    /// publishes) is then a plain function call, not a thread wake-up. `faucet run` and
    /// `faucet replicate` choose their runtime by it (docs/run-loop.md, "One thread per
    /// pipeline").
    fn reads_in_task(&self) -> bool {
        false
    }

    /// Opens a stream starting right after `from` (`None`: from the beginning).
    ///
    /// # Errors
    /// [`FaucetError::Connect`] / [`FaucetError::Read`] when the source cannot be opened,
    /// [`FaucetError::Bookmark`] when `from` is not a bookmark this source made.
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError>;

    /// Probes the source without moving data or consuming anything (for `faucet doctor`).
    ///
    /// # Errors
    /// The failing prerequisite, with its fix in the message.
    async fn check(&self) -> Result<(), FaucetError>;

    /// Probes, like [`Source::check`] (queries only: nothing is read, registered or
    /// consumed), how a run would resume from `from`, the pipeline's stored bookmark (for
    /// `faucet doctor`; [`Bookmark::Null`] when none is stored yet): `Some(note)` says what
    /// it would do (the position it resumes at, a carry-over to another server, or with no
    /// bookmark where a first run starts); `None` (the default) that there is nothing to say
    /// beyond [`Source::check`].
    ///
    /// # Errors
    /// What a run opened from `from` would fail with before reading (a refused bookmark:
    /// [`FaucetError::Bookmark`]), or the failing prerequisite.
    async fn check_resume(&self, _from: &Bookmark) -> Result<Option<String>, FaucetError> {
        Ok(None)
    }

    /// The schema of every page, when the source fixes it without reading: a change-data
    /// source's change records ([`crate::change::record_schema`]). `None` (the default) when
    /// the fields come from the data (a query, a file). `faucet doctor` hands it to
    /// [`crate::Sink::check_schema`], so a target that lacks a field the sink will write is
    /// found before a run.
    fn record_schema(&self) -> Option<Arc<Schema>> {
        None
    }

    /// The keys of the tables this source reads, from its catalog (queries only), for the
    /// upsert-key rule of [`crate::keys`]: `Ok(None)` (the default) when the source cannot
    /// know (a query, a file). A table the catalog does not show (not created yet) is left
    /// out.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] / [`FaucetError::Read`] when the catalog cannot be read.
    async fn table_keys(&self) -> Result<Option<Vec<crate::keys::TableKeys>>, FaucetError> {
        Ok(None)
    }

    /// The columns of the tables this source reads as its catalog has them now (queries
    /// only), keyed and shaped as the `shapes` of its bookmarks
    /// ([`crate::change::schema::Shapes`]), for `faucet doctor`'s drift line: compared with
    /// the stored bookmark's, they are the schema change a run will deliver first. `Ok(None)`
    /// (the default) when the source cannot know without reading data (a file, a query).
    ///
    /// # Errors
    /// [`FaucetError::Connect`] / [`FaucetError::Read`] when the catalog cannot be read.
    async fn current_shapes(&self) -> Result<Option<crate::change::schema::Shapes>, FaucetError> {
        Ok(None)
    }

    /// A monitor of what the source's upstream retains for this pipeline while it is not
    /// read (a PostgreSQL replication slot's WAL, a MongoDB oplog's window), for metrics and
    /// status; `None` (the default) when the upstream retains nothing on the pipeline's
    /// behalf.
    fn retention_monitor(&self) -> Option<Box<dyn RetentionMonitor>> {
        None
    }
}

/// What a source's upstream retains for the pipeline, sampled by a [`RetentionMonitor`].
/// A field the upstream has no measure of is `None` (a MongoDB oplog has no byte figures, a
/// PostgreSQL slot no window in time).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Retention {
    /// Bytes the upstream keeps for the pipeline (PostgreSQL: `pg_current_wal_lsn() -
    /// restart_lsn` of the slot); `None` where the upstream keeps nothing per pipeline
    /// (MongoDB's oplog is shared and capped).
    pub retained_bytes: Option<u64>,
    /// The most it keeps before it gives the pipeline's position up (PostgreSQL:
    /// `max_slot_wal_keep_size`, in bytes); `None` when unlimited or unknown.
    pub limit_bytes: Option<u64>,
    /// Bytes that can still be written upstream before the position is in danger of being
    /// given up (PostgreSQL: the slot's `safe_wal_size`); `None` when unlimited or unknown.
    pub remaining_bytes: Option<u64>,
    /// How fast the upstream writes (PostgreSQL: WAL bytes per second, from the samples of
    /// the last minutes); `None` until two samples a second apart, or unknown.
    pub rate_bytes_per_second: Option<f64>,
    /// The retention horizon: the seconds until the position would be given up if the
    /// pipeline stayed stopped. PostgreSQL: `remaining_bytes / rate_bytes_per_second`, at the
    /// measured rate; `None` when unlimited, when no rate is known yet, or when nothing is
    /// being written. MongoDB: the bookmark's cluster time minus the oldest oplog entry's
    /// (the oplog's window keeps its length in time while the writes go on at their rate);
    /// `None` before the pipeline has a bookmark with a cluster time.
    pub horizon_seconds: Option<f64>,
    /// MongoDB: the oplog window, the newest oplog entry's time minus the oldest's, in
    /// seconds (how long a stopped pipeline may stay stopped); `None` for other upstreams.
    pub window_seconds: Option<f64>,
    /// MongoDB: the newest oplog entry's time minus the bookmark's cluster time (the time
    /// the stream had read up to), in seconds; `None` without a bookmark or for other
    /// upstreams.
    pub bookmark_age_seconds: Option<f64>,
}

impl Retention {
    /// The share of the [`Retention::window_seconds`] at which a bookmark's age is near the
    /// window's end (and its position near being lost): 0.8.
    pub const NEAR_WINDOW: f64 = 0.8;

    /// A sample with no figure known, to fill in.
    pub fn unknown() -> Self {
        Self {
            retained_bytes: None,
            limit_bytes: None,
            remaining_bytes: None,
            rate_bytes_per_second: None,
            horizon_seconds: None,
            window_seconds: None,
            bookmark_age_seconds: None,
        }
    }

    /// Whether the bookmark's age is at least [`Retention::NEAR_WINDOW`] of the window
    /// (both known).
    pub fn near_window_end(&self) -> bool {
        match (self.bookmark_age_seconds, self.window_seconds) {
            (Some(age), Some(window)) => age >= Self::NEAR_WINDOW * window,
            _ => false,
        }
    }
}

/// Samples a source's [`Retention`] (see [`Source::retention_monitor`]); each call is one
/// round trip, and the rate is measured across calls.
#[async_trait]
pub trait RetentionMonitor: Send {
    /// Samples now; `bookmark` is the pipeline's last durable bookmark when known (a MongoDB
    /// oplog's horizon depends on it; a PostgreSQL slot holds its own position).
    ///
    /// # Errors
    /// When the upstream cannot be asked ([`FaucetError::Connect`], [`FaucetError::Read`]),
    /// or no longer retains anything for the pipeline (a dropped slot).
    async fn sample(&mut self, bookmark: Option<&Bookmark>) -> Result<Retention, FaucetError>;
}

/// An open read.
#[async_trait]
pub trait PageStream: Send {
    /// The next page; `Ok(None)` when the source is exhausted (or the read was cancelled and
    /// nothing is left in hand).
    ///
    /// # Errors
    /// A read failure or malformed data, naming the location.
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError>;

    /// Told that `bookmark` (one this stream emitted) is durable. The default does nothing.
    ///
    /// # Errors
    /// When acknowledging upstream fails.
    async fn bookmark_durable(&mut self, _bookmark: &Bookmark) -> Result<(), FaucetError> {
        Ok(())
    }

    /// Whether the run loop may read the next page while the sink writes the last one handed
    /// over, before that page's bookmark is durable: the run loop then tells
    /// [`PageStream::bookmark_durable`] of a page after the next page is read, not before.
    /// True only for a read that loses nothing by it and is likely to have the next page at
    /// hand — a snapshot's copy, a change stream with a backlog (its last page was full) —
    /// so an idle change stream is not left waiting for its next change before it hears that
    /// the last one is durable. `false` (the default) for a stream that must hear of a
    /// page's durability before it reads on, or that reads ahead in a task of its own
    /// already.
    fn reads_ahead(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zero wait takes what is ready and nothing that comes later, however soon: a
    /// steady stream whose next event is 200 µs away is caught up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_zero_wait_takes_only_what_is_ready() {
        assert_eq!(ready_within(Duration::ZERO, async { 7 }).await, Some(7));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let mut taken_late = 0;
        for i in 0..200 {
            let tx = tx.clone();
            let sender = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(200));
                let _ = tx.send(i);
            });
            let taken = ready_within(Duration::ZERO, rx.recv()).await;
            let _ = sender.join();
            match taken {
                Some(event) => {
                    taken_late += 1;
                    assert_eq!(event, Some(i));
                }
                None => assert_eq!(rx.recv().await, Some(i), "nothing is lost by a zero wait"),
            }
        }
        assert!(
            taken_late < 20,
            "a zero wait took {taken_late} of 200 events that came after it began"
        );
        tx.send(1).ok();
        assert_eq!(
            ready_within(Duration::from_millis(100), rx.recv()).await,
            Some(Some(1))
        );
    }

    #[test]
    fn a_page_is_due_its_delay_after_its_first_record() {
        let idle = Duration::from_secs(1);
        let mut d = PageDeadline::new(Duration::from_millis(30), idle);
        d.note(true);
        assert_eq!(d.wait(false), Some(idle), "an empty page waits `idle`");
        assert_eq!(
            d.wait(true),
            Some(idle),
            "empty between transactions: `idle` too"
        );
        d.note(false);
        let w = d.wait(false).expect("not due yet");
        assert!(w <= Duration::from_millis(30), "{w:?}");
        std::thread::sleep(Duration::from_millis(20));
        d.note(false); // a later record does not move the deadline
        std::thread::sleep(Duration::from_millis(15));
        assert_eq!(d.wait(false), None, "due 30 ms after the first record");
        assert_eq!(d.wait(true), None);
    }

    #[test]
    fn a_page_with_records_between_transactions_only_takes_what_is_ready() {
        let mut d = PageDeadline::new(Duration::from_secs(5), Duration::from_secs(1));
        d.note(false);
        assert_eq!(d.wait(true), Some(Duration::ZERO), "caught up: poll once");
        let inside = d.wait(false).expect("not due");
        assert!(
            inside > Duration::from_millis(900),
            "inside a transaction: {inside:?}"
        );
    }
}
