//! The run loop, split into its steps: resolve the guarantee, take the lease, find the start
//! (state store, or the sink's commit token), then per page: read → write → flush → persist
//! → tell the source (an atomic-watermark run persists while the next page is written:
//! [`deliver`]).
//!
//! **Reading ahead.** When the stream says its next page is at hand
//! ([`PageStream::reads_ahead`]: a snapshot's copy, a change stream with a backlog), the next
//! page is read while the sink writes and the state store persists the last one, so the two
//! overlap instead of taking turns; the source hears that a page is durable once the page
//! after it is read. At most two pages are in memory. The order of what reaches the sink,
//! the bookmarks and the fault points is the same either way.
//!
//! **A lost lease stops the run at once** ([`super::lease`] says when it counts as lost):
//! reading a page (which for a continuous source can wait a long time) and the pauses
//! between bookmark retries are raced against the loss, and the lease is checked again
//! before the page is handed to the sink and before its bookmark is persisted. The run then
//! fails with [`crate::state::LeaseError::Lost`]: the page in hand is dropped unwritten, and
//! no bookmark is written after the loss. A sink's write already under way is not cut short
//! (a page half-handed to a sink could leave it torn): a sink that fences
//! (`SinkWriter::fence`, the `postgres` sink) refuses that page itself when a newer run has
//! written since, and ends a page transaction its writer left idle for longer than the ttl;
//! a sink that cannot fence (`jsonl`, `csv`) stays at-least-once against such a page.

use std::time::Instant;

use crate::delivery::{
    DeliveryError, DeliveryGuarantee, DeliveryRequest, EffectivelyOnceMechanism,
};
use crate::error::FaucetError;
use crate::extent::EtaClock;
use crate::fault;
use crate::keys::{self, KeyNote};
use crate::page::{Bookmark, Page, PageStart};
use crate::sink::{Commit, CommitToken, Fence, SinkWriter};
use crate::source::{PageStream, ReadOptions};
use crate::state::validate_state_key;

use super::entry::{self, Entry};
use super::lease::LeaseGuard;
use super::{Pipeline, Progress, RunSummary};

pub(super) async fn run(p: Pipeline<'_>) -> Result<RunSummary, FaucetError> {
    let started = Instant::now();
    let guarantee = p.resolve_delivery()?;
    validate_state_key(&p.options.state_key)?;
    if p.options.batch_size == 0 {
        return Err(FaucetError::config("batch_size", "must be at least 1"));
    }
    if p.options.max_page_delay.is_zero() {
        return Err(FaucetError::config(
            "max_page_delay",
            "must be greater than zero",
        ));
    }
    let key = p.options.state_key.clone();
    let lease = LeaseGuard::acquire(
        p.state.clone(),
        &key,
        p.options.lease_ttl,
        p.options.wait_for_lease,
    )
    .await?;
    let result = run_leased(&p, &lease, guarantee, started).await;
    lease.release().await;
    result
}

struct Loop<'a> {
    writer: Box<dyn SinkWriter + 'a>,
    /// The source tables whose keys the writer was told; `None` when it needs none (the
    /// sink does not upsert, or the source cannot tell).
    known: Option<keys::KnownTables>,
    /// The sink's target, recorded beside every bookmark (asked of the sink once per run).
    target: Option<String>,
    atomic: bool,
    sequence: u64,
    summary: RunSummary,
    /// The time left of the source's read, from its extents ([`EtaClock`]).
    eta: EtaClock,
}

/// What the state store holds under the run's key, as the run needs it.
struct Stored {
    /// The key was written before (`null`: a run started but persisted no page).
    started_before: bool,
    /// The sink target recorded beside the bookmark.
    recorded: Option<String>,
    /// A page was persisted: the entry is tied to its sink.
    delivered: bool,
    /// The bookmark to resume from; `None` for none (or `null`).
    bookmark: Option<Bookmark>,
}

/// The steps of a run holding its lease: read the stored entry, open the sink (fenced), find
/// the start (the state store, or the sink's commit token), record that the run started,
/// then read, write and persist page by page, and flush whatever happened.
async fn run_leased(
    p: &Pipeline<'_>,
    lease: &LeaseGuard,
    guarantee: DeliveryGuarantee,
    started: Instant,
) -> Result<RunSummary, FaucetError> {
    let key = p.options.state_key.as_str();
    let target = p.sink.target();
    let stored = read_stored(p, key, target.as_deref()).await?;
    let (mut writer, known) = open_writer(p, lease, key).await?;
    let (token, guarantee) = committed_token(p, writer.as_mut(), key, guarantee).await?;
    let (from, re_anchored) = resume_point(stored.bookmark.clone(), token.as_ref());
    if from.is_none()
        && !stored.started_before
        && guarantee == DeliveryGuarantee::AtLeastOnce
        && !p.source.resumes_without_bookmark()
    {
        refuse_lost_bookmark(p, writer.as_mut(), key).await?;
    }
    record_start(lease, key, &stored, target.as_deref()).await?;
    if re_anchored {
        tracing::warn!(
            key,
            token = ?token,
            "the sink's commit token is ahead of the state store; resuming from the token"
        );
    }
    let mut state = Loop {
        writer,
        known,
        target,
        atomic: guarantee
            == DeliveryGuarantee::EffectivelyOnce(EffectivelyOnceMechanism::AtomicWatermark),
        sequence: token.map_or(0, |t| t.sequence),
        summary: RunSummary {
            records_in: 0,
            records_out: 0,
            pages: 0,
            elapsed: started.elapsed(),
            guarantee,
            state_key: key.to_owned(),
            resumed_from: from.clone(),
            re_anchored,
            last_bookmark: from.clone(),
            cancelled: false,
            lag_seconds: None,
            extent: None,
        },
        eta: EtaClock::new(),
    };
    let read = ReadOptions {
        batch_size: p.options.batch_size,
        max_page_delay: p.options.max_page_delay,
        cancel: p.options.cancel.clone(),
    };
    let outcome = match p.source.open(from, read).await {
        Ok(mut stream) => pump(p, lease, &mut state, stream.as_mut(), started).await,
        Err(e) => Err(e),
    };
    finish(state, outcome, started).await
}

/// Reads the entry under `key`; an entry that delivered pages to another sink target than
/// `target` is refused ([`entry::check_sink`]).
async fn read_stored(
    p: &Pipeline<'_>,
    key: &str,
    target: Option<&str>,
) -> Result<Stored, FaucetError> {
    let entry = p.state.get(key).await?.map(Entry::decode);
    let started_before = entry.is_some();
    let recorded = entry.as_ref().and_then(|e| e.sink.clone());
    // Only a bookmark ties the entry to its sink: an entry whose runs persisted no page
    // (`null`, e.g. a first run that failed) delivered nothing a new sink could miss.
    let delivered = entry.as_ref().is_some_and(|e| !e.bookmark.is_null());
    if delivered {
        entry::check_sink(p.state.name(), key, recorded.as_deref(), target)?;
    }
    Ok(Stored {
        started_before,
        recorded,
        delivered,
        bookmark: entry.map(|e| e.bookmark).filter(|b| !b.is_null()),
    })
}

/// Opens the sink's writer, tells it the source's keys, and gives it the lease's fence
/// ([`set_fence`]); hands back the tables whose keys it was told.
async fn open_writer<'a>(
    p: &Pipeline<'a>,
    lease: &LeaseGuard,
    key: &str,
) -> Result<(Box<dyn SinkWriter + 'a>, Option<keys::KnownTables>), FaucetError> {
    let (note, source_keys) = keys::check_with_keys(p.source, p.sink).await?;
    if let Some(KeyNote::Differs(warning)) = note {
        tracing::warn!(key, "{warning}");
    }
    let mut writer = p.sink.open().await?;
    if let Some(source_keys) = &source_keys {
        writer.source_keys(source_keys);
    }
    let known = source_keys.as_deref().map(keys::KnownTables::new);
    if let Some(fence) = lease.fence() {
        if fault::fence_disabled_for_test() {
            tracing::error!(
                key,
                fence,
                "{}=1: the sink is NOT given the writer fence (a test-only switch of debug \
                 builds); a stalled run's page would not be refused",
                fault::DISABLE_FENCE_ENV
            );
        } else {
            set_fence(p, writer.as_mut(), lease, key, fence).await?;
        }
    }
    Ok((writer, known))
}

/// When `page` holds change records of a table the writer was not told the key of (created
/// after the start, matched by a pattern): asks the source for its tables' keys again,
/// applies the key rule of [`keys::check`] to them, and tells the writer.
async fn learn_new_tables(
    p: &Pipeline<'_>,
    state: &mut Loop<'_>,
    key: &str,
    page: &Page,
) -> Result<(), FaucetError> {
    let Some(known) = state.known.as_mut() else {
        return Ok(());
    };
    if !known.met_new(page) {
        return Ok(());
    }
    let (note, source_keys) = keys::check_with_keys(p.source, p.sink).await?;
    if let Some(KeyNote::Differs(warning)) = note {
        tracing::warn!(key, "{warning}");
    }
    if let Some(source_keys) = source_keys {
        known.add(&source_keys);
        state.writer.source_keys(&source_keys);
    }
    Ok(())
}

/// The sink's last commit token under `key` when the run is atomic-watermark, and the
/// guarantee the run then keeps.
///
/// The atomic watermark may have been derived, not asked for: a sink that finds at open
/// that this target cannot keep one (a MySQL MyISAM table) leaves a run that asked for
/// at-least-once at that, in plain writes; the sink's own limits then speak in those words
/// (the MyISAM table is refused at the first write as not transactional, not as
/// "effectively-once cannot be met").
async fn committed_token(
    p: &Pipeline<'_>,
    writer: &mut (dyn SinkWriter + '_),
    key: &str,
    guarantee: DeliveryGuarantee,
) -> Result<(Option<CommitToken>, DeliveryGuarantee), FaucetError> {
    if guarantee != DeliveryGuarantee::EffectivelyOnce(EffectivelyOnceMechanism::AtomicWatermark) {
        return Ok((None, guarantee));
    }
    match writer.last_committed_token(key).await {
        Ok(token) => Ok((token, guarantee)),
        Err(FaucetError::Delivery(DeliveryError::Unsatisfiable {
            connector, reason, ..
        })) if p.options.delivery == DeliveryRequest::AtLeastOnce => {
            tracing::warn!(
                key,
                sink = %connector,
                reason = %reason,
                "the sink cannot keep an atomic watermark for this target; the run is \
                 at-least-once, as requested"
            );
            Ok((None, DeliveryGuarantee::AtLeastOnce))
        }
        Err(e) => Err(e),
    }
}

/// Records, before any page moves, that a run of `key` started and which sink target it
/// writes to: on a first run, when the entry names no target yet, or when it delivered
/// nothing and named another.
async fn record_start(
    lease: &LeaseGuard,
    key: &str,
    stored: &Stored,
    target: Option<&str>,
) -> Result<(), FaucetError> {
    if !stored.started_before
        || (stored.recorded.is_none() && target.is_some())
        || (!stored.delivered && stored.recorded.as_deref() != target)
    {
        let at = stored.bookmark.clone().unwrap_or(Bookmark::Null);
        lease.put(key, &entry::encode(&at, target)).await?;
    }
    Ok(())
}

/// The one unwinding path: whatever happened, flush what was written; the run's error wins
/// over the flush's.
async fn finish(
    mut state: Loop<'_>,
    outcome: Result<(), FaucetError>,
    started: Instant,
) -> Result<RunSummary, FaucetError> {
    let flushed = state.writer.flush().await;
    state.summary.elapsed = started.elapsed();
    match (outcome, flushed) {
        (Err(e), flush) => {
            if let Err(fe) = flush {
                tracing::error!(error = %fe, "flush after a failed run also failed");
            }
            Err(e)
        }
        (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(())) => Ok(state.summary),
    }
}

/// A bookmark being persisted while the next page is written (an atomic-watermark run:
/// see [`deliver`]); the source hears of `bookmark` once `persist` is done.
struct Persisting<'a> {
    persist: PersistFuture<'a>,
    bookmark: Bookmark,
}

/// A bookmark's persist ([`persist_bookmark`]) under way.
type PersistFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), FaucetError>> + Send + 'a>>;

/// Reads, delivers and acknowledges pages until the stream ends, fails or is cancelled; a
/// bookmark still being persisted then is persisted before it returns (the run's error wins
/// over its).
async fn pump(
    p: &Pipeline<'_>,
    lease: &LeaseGuard,
    state: &mut Loop<'_>,
    stream: &mut (dyn PageStream + '_),
    started: Instant,
) -> Result<(), FaucetError> {
    let mut persisting = None;
    let pumped = pump_pages(p, lease, state, stream, started, &mut persisting).await;
    let persisted = match persisting {
        Some(last) => last.persist.await.map(|()| Some(last.bookmark)),
        None => Ok(None),
    };
    pumped?;
    if let Some(bookmark) = persisted? {
        stream.bookmark_durable(&bookmark).await?;
    }
    Ok(())
}

/// [`pump`]'s loop; `persisting` is the bookmark persist under way ([`deliver`]).
async fn pump_pages<'l>(
    p: &'l Pipeline<'_>,
    lease: &'l LeaseGuard,
    state: &mut Loop<'_>,
    stream: &mut (dyn PageStream + '_),
    started: Instant,
    persisting: &mut Option<Persisting<'l>>,
) -> Result<(), FaucetError> {
    let key = p.options.state_key.as_str();
    // Records handed over since the last bookmark (pages without one), for `PageStart`.
    let mut since_bookmark = 0u64;
    // The next page, when it was read while the last one was delivered.
    let mut ahead: Option<Result<Option<Page>, FaucetError>> = None;
    loop {
        let page = match ahead.take() {
            Some(read) => read?,
            None => read_next(lease, stream).await?,
        };
        let Some(mut page) = page else { break };
        state.summary.records_in += page.len() as u64;
        page.set_start(PageStart {
            bookmark: state.summary.last_bookmark.clone(),
            offset: since_bookmark,
        });
        since_bookmark = match page.bookmark() {
            Some(_) => 0,
            None => since_bookmark + page.len() as u64,
        };
        lease.check()?;
        learn_new_tables(p, state, key, &page).await?;
        // The persist of the bookmark before (if any) is awaited beside this page's write:
        // the source hears of that bookmark then, of this page's once it is persisted.
        let (earlier, stored) = match persisting.take() {
            Some(e) => (Some(e.persist), Some(e.bookmark)),
            None => (None, None),
        };
        if stream.reads_ahead() && !p.options.cancel.is_cancelled() {
            let delivered = deliver(p, lease, state, &page, started, earlier, persisting);
            ahead = Some(while_reading_ahead(delivered, lease, stream).await?);
        } else {
            deliver(p, lease, state, &page, started, earlier, persisting).await?;
        }
        if let Some(bookmark) = &stored {
            stream.bookmark_durable(bookmark).await?;
        }
        if let Some(bookmark) = page.bookmark().filter(|_| persisting.is_none()) {
            stream.bookmark_durable(bookmark).await?;
        }
        if p.options.cancel.is_cancelled() {
            state.summary.cancelled = true;
            break;
        }
    }
    state.summary.cancelled |= p.options.cancel.is_cancelled();
    Ok(())
}

/// The next page of `stream`, raced against the loss of the lease.
async fn read_next(
    lease: &LeaseGuard,
    stream: &mut (dyn PageStream + '_),
) -> Result<Option<Page>, FaucetError> {
    tokio::select! {
        biased;
        lost = lease.lost() => Err(lost),
        page = stream.next_page() => page,
    }
}

/// Runs `delivered` (a page's [`deliver`]) while the next page is read
/// ([`PageStream::reads_ahead`]); hands back that read's outcome once the page is delivered.
/// A failed delivery fails at once and drops the read (the run ends; the stream with it); a
/// failed read waits for the delivery, so the page in hand is written and its bookmark
/// persisted before the read's error ends the run.
async fn while_reading_ahead(
    delivered: impl std::future::Future<Output = Result<(), FaucetError>>,
    lease: &LeaseGuard,
    stream: &mut (dyn PageStream + '_),
) -> Result<Result<Option<Page>, FaucetError>, FaucetError> {
    let read = read_next(lease, stream);
    tokio::pin!(delivered, read);
    tokio::select! {
        done = &mut delivered => {
            done?;
            Ok(read.await)
        }
        page = &mut read => {
            delivered.await?;
            Ok(page)
        }
    }
}

/// One page into the sink: written (with its commit token when atomic), its bookmark
/// persisted, the run's summary brought up to it, and its progress reported.
///
/// **An atomic-watermark run persists a page's bookmark while the next page is written**
/// (`earlier`: the last page's persist, awaited beside this page's write and so before the
/// next persist starts — bookmarks still reach the store in order; `next`: this page's,
/// left under way). The sink's commit
/// token, committed with the page's rows, is the run's record of that page: a run that
/// stops before the store has the bookmark resumes from the token
/// ([`resume_point`]), exactly as when it stops between a page's commit and its persist.
/// This takes the state store's write (a file store's two `fsync`s, a database's commit)
/// out of the time between two pages. Other runs persist before the next page is written:
/// for them the store's bookmark is the only record of what the sink holds.
async fn deliver<'l>(
    p: &'l Pipeline<'_>,
    lease: &'l LeaseGuard,
    state: &mut Loop<'_>,
    page: &Page,
    started: Instant,
    earlier: Option<PersistFuture<'l>>,
    next: &mut Option<Persisting<'l>>,
) -> Result<(), FaucetError> {
    let key = p.options.state_key.as_str();
    match earlier {
        Some(earlier) => {
            let (persisted, written) = tokio::join!(earlier, write_page(state, key, page));
            // The page's own failure first: a run that stalled past its lease and woke up
            // has its page refused by the sink's fence (the stronger word) as well as its
            // earlier bookmark by the store.
            written?;
            persisted?;
        }
        None => write_page(state, key, page).await?,
    }
    if let Some(bookmark) = page.bookmark() {
        let value = entry::encode(bookmark, state.target.as_deref());
        if state.atomic {
            *next = Some(Persisting {
                persist: Box::pin(async move { persist_bookmark(lease, key, &value).await }),
                bookmark: bookmark.clone(),
            });
        } else {
            persist_bookmark(lease, key, &value).await?;
        }
        state.summary.last_bookmark = Some(bookmark.clone());
        state.summary.lag_seconds = page.source_time().map(lag_since).map(|d| d.as_secs_f64());
    }
    state.summary.pages += 1;
    state.summary.records_out += page.len() as u64;
    let extent = page.extent().cloned();
    if extent.is_some() {
        state.summary.extent.clone_from(&extent);
    }
    let eta = extent
        .as_ref()
        .and_then(|e| state.eta.eta(e, Instant::now()));
    if let Some(report) = &p.options.on_progress {
        report(&Progress {
            records: state.summary.records_out,
            pages: state.summary.pages,
            elapsed: started.elapsed(),
            lag: state
                .summary
                .lag_seconds
                .map(std::time::Duration::from_secs_f64),
            bookmark: page.bookmark().cloned(),
            targets: state.writer.written_targets().to_vec(),
            published: state.writer.published(),
            extent,
            eta,
            schema_changes: crate::change::announced_in(page),
        });
    }
    Ok(())
}

/// The time since `at` by this host's clock; zero when `at` is in the future (clock skew).
fn lag_since(at: std::time::SystemTime) -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(at)
        .unwrap_or_default()
}

/// Write and flush (or commit rows + token atomically).
async fn write_page(state: &mut Loop<'_>, key: &str, page: &Page) -> Result<(), FaucetError> {
    fault::point(fault::BEFORE_WRITE);
    match (state.atomic, page.bookmark()) {
        (true, Some(bookmark)) => {
            let commit = Commit {
                scope: key.to_owned(),
                token: CommitToken {
                    sequence: state.sequence + 1,
                    bookmark: bookmark.clone(),
                },
            };
            state.writer.write_committed(page, &commit).await?;
            state.sequence = commit.token.sequence;
            fault::point(fault::AFTER_WRITE);
        }
        _ => {
            state.writer.write(page).await?;
            fault::point(fault::AFTER_WRITE);
            state.writer.flush().await?;
        }
    }
    fault::point(fault::AFTER_FLUSH);
    Ok(())
}

/// How often a retryable state-store failure (a dropped connection, a restarting server) is
/// retried before the run fails, and the first pause; the pause doubles each time
/// (0.2 + 0.4 + 0.8 + 1.6 + 3.2 s ≈ 6 s in all).
const STATE_RETRIES: u32 = 5;
const STATE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Persists the bookmark. A `put` is idempotent, so a retryable failure is retried with
/// backoff: the page is already in the sink, and failing here would only re-deliver it.
async fn persist_bookmark(
    lease: &LeaseGuard,
    key: &str,
    bookmark: &serde_json::Value,
) -> Result<(), FaucetError> {
    let mut pause = STATE_RETRY_PAUSE;
    let mut attempt = 0;
    loop {
        match lease.put(key, bookmark).await {
            Ok(()) => break,
            Err(e) if e.is_retryable() && attempt < STATE_RETRIES => {
                attempt += 1;
                tracing::warn!(key, error = %e, attempt, "persisting the bookmark failed; retrying");
                tokio::select! {
                    biased;
                    lost = lease.lost() => return Err(lost),
                    () = tokio::time::sleep(pause) => {}
                }
                pause *= 2;
            }
            Err(e) => return Err(e),
        }
    }
    fault::point(fault::AFTER_STATE_PUT);
    Ok(())
}

/// A first run (no bookmark, never started) into an append-only target that already holds
/// data: the bookmark was lost (deleted, a new machine, a renamed pipeline). Delivering the
/// whole source again would silently double the target, so refuse, naming the key.
async fn refuse_lost_bookmark(
    p: &Pipeline<'_>,
    writer: &mut (dyn SinkWriter + '_),
    key: &str,
) -> Result<(), FaucetError> {
    if writer.holds_data().await? == Some(true) {
        return Err(FaucetError::State {
            store: p.state.name().to_owned(),
            message: format!(
                "no bookmark under state key `{key}`, but the `{}` sink already holds data: \
                 delivering the whole source again would duplicate it. Restore the state \
                 entry, or empty the target to start over on purpose",
                p.sink.connector()
            ),
            source: None,
        });
    }
    Ok(())
}

/// Where to start: the state store's bookmark, unless the sink's commit token differs from it
/// (the process died after the sink committed and before the state was written, or the state
/// entry was lost), in which case the token's bookmark wins: the sink holds exactly the pages
/// up to it. Returns the start and whether it was re-anchored.
pub(crate) fn resume_point(
    stored: Option<Bookmark>,
    token: Option<&CommitToken>,
) -> (Option<Bookmark>, bool) {
    match token {
        Some(t) if stored.as_ref() != Some(&t.bookmark) => (Some(t.bookmark.clone()), true),
        _ => (stored, false),
    }
}

/// Gives the writer the lease's fence (`SinkWriter::fence`). A target holding a larger fence
/// while this run's lease is the live one in the state store was fenced by a state store
/// since reset or replaced: the run takes the target's fence over, and says so.
async fn set_fence(
    p: &Pipeline<'_>,
    writer: &mut (dyn SinkWriter + '_),
    lease: &LeaseGuard,
    key: &str,
    fence: u64,
) -> Result<(), FaucetError> {
    let ttl = p.options.lease_ttl;
    let order = Fence::new(key, fence, ttl);
    let checks = match writer.fence(&order).await {
        Err(FaucetError::Lease(crate::state::LeaseError::Fenced { newer, target, .. })) => {
            lease.confirm(ttl).await?;
            tracing::warn!(
                key,
                fence,
                newer,
                %target,
                "the sink's target holds a larger writer fence than this run's live lease: \
                 the state store's leases were reset or another store was used before; taking \
                 the target's fence over"
            );
            writer.fence(&order.taking_over()).await?
        }
        other => other?,
    };
    if !checks {
        tracing::debug!(
            key,
            sink = p.sink.connector(),
            "the sink does not check fences: a writer stalled past its lease could still write a page"
        );
    }
    Ok(())
}
