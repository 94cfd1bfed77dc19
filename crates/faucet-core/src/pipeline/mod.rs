//! [`Pipeline`]: the run loop that moves pages from a [`Source`] to a [`Sink`] and persists
//! bookmarks in a [`StateStore`], keeping the invariants of docs/run-loop.md:
//!
//! 1. per page, **write → flush → persist the bookmark** (atomic-watermark sinks commit the
//!    rows and the token in one step, then the bookmark is persisted while the next page is
//!    written: the token covers the page already);
//! 2. the source hears that a bookmark is durable only after it is;
//! 3. the delivery request is resolved before any data moves (see [`crate::delivery`]);
//! 4. one runner per state key, through the state store's lease where it has one;
//! 5. cancellation finishes the page in hand, flushes, persists and returns the summary;
//!    any error unwinds through one path that flushes what was written first.
//!
//! ```no_run
//! # async fn run(source: impl faucet_core::Source, sink: impl faucet_core::Sink)
//! #     -> Result<(), faucet_core::FaucetError> {
//! use std::sync::Arc;
//! use faucet_core::{Pipeline, RunStreamOptions, state::FileStateStore};
//!
//! let summary = Pipeline::new(&source, &sink)
//!     .with_state_store(Arc::new(FileStateStore::new("./state")))
//!     .with_options(RunStreamOptions { state_key: "orders::eu".into(), ..Default::default() })
//!     .run()
//!     .await?;
//! println!("{} records in {} pages, {}", summary.records_out, summary.pages, summary.guarantee);
//! # Ok(())
//! # }
//! ```

pub(crate) mod entry;
mod lease;
mod run;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::delivery::{DeliveryGuarantee, DeliveryRequest, Topology};
use crate::error::FaucetError;
use crate::extent::Extent;
use crate::page::Bookmark;
use crate::sink::Sink;
use crate::source::Source;
use crate::state::{MemoryStateStore, StateStore};

use crate::source::DEFAULT_BATCH_SIZE;
/// How long a run's lease on its state key lasts without renewal: 30 s (renewed every third).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// Progress after each page, for a progress line (and `faucet serve`'s status).
#[derive(Debug, Clone)]
pub struct Progress {
    /// Records written so far.
    pub records: u64,
    /// Pages written so far.
    pub pages: u64,
    /// Time since the run started.
    pub elapsed: Duration,
    /// How far the bookmark just persisted was behind the source, in time (see
    /// [`RunSummary::lag_seconds`]); `None` for sources without a clock.
    pub lag: Option<Duration>,
    /// The bookmark this page persisted (durable when the callback runs); `None` for a page
    /// without one.
    pub bookmark: Option<Bookmark>,
    /// This page's records per target, as the sink names its targets
    /// ([`crate::SinkWriter::written_targets`]; empty when it does not tell).
    pub targets: Vec<(String, u64)>,
    /// What this page published, for a sink that publishes to a bus
    /// ([`crate::SinkWriter::published`]; `None` for other sinks).
    pub published: Option<crate::PublishStats>,
    /// How far along the source's read is at this page's end ([`crate::Page::extent`]);
    /// `None` when the source does not know its end (a continuous change stream, a query).
    pub extent: Option<Extent>,
    /// The time left at the rate of this run so far ([`crate::extent::EtaClock`]): `None`
    /// without an extent, before [`crate::extent::EtaClock::MIN_SPAN`] of data, at a zero
    /// rate, or once an estimated total was exceeded.
    pub eta: Option<Duration>,
    /// The schema-change records this page delivered ([`crate::change::announced_in`]), in
    /// page order; empty for most pages.
    pub schema_changes: Vec<crate::change::Announced>,
}

/// The bookmark inside a state entry as the run loop stores it (`{"bookmark": B, "sink":
/// "…"}` gives `B`; an entry written before sinks were recorded is the bare bookmark), for
/// callers that show a key's position without running it. `null` means a run started but
/// persisted no page.
pub fn stored_bookmark(entry: serde_json::Value) -> Bookmark {
    entry::Entry::decode(entry).bookmark
}

/// A progress callback.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// How a run behaves.
#[derive(Clone)]
pub struct RunStreamOptions {
    /// The most records in a page (≥ 1). Default [`DEFAULT_BATCH_SIZE`].
    pub batch_size: usize,
    /// The longest a record waits in a page of a continuous source before the page is
    /// handed over (> 0). Default [`crate::source::DEFAULT_MAX_PAGE_DELAY`].
    pub max_page_delay: Duration,
    /// The key the bookmark is stored under (`{pipeline}::{matrix row}` from the CLI).
    pub state_key: String,
    /// The delivery the user asks for; resolved before any data moves.
    pub delivery: DeliveryRequest,
    /// Cancels the run gracefully: the page in hand is finished and persisted.
    pub cancel: CancellationToken,
    /// The lease's time to live; it is renewed every third of it.
    pub lease_ttl: Duration,
    /// When another run holds the state key: wait up to this long for it, instead of failing.
    pub wait_for_lease: Option<Duration>,
    /// Called after every page.
    pub on_progress: Option<ProgressFn>,
}

impl Default for RunStreamOptions {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            max_page_delay: crate::source::DEFAULT_MAX_PAGE_DELAY,
            state_key: "default".to_owned(),
            delivery: DeliveryRequest::AtLeastOnce,
            cancel: CancellationToken::new(),
            lease_ttl: DEFAULT_LEASE_TTL,
            wait_for_lease: None,
            on_progress: None,
        }
    }
}

impl std::fmt::Debug for RunStreamOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStreamOptions")
            .field("batch_size", &self.batch_size)
            .field("max_page_delay", &self.max_page_delay)
            .field("state_key", &self.state_key)
            .field("delivery", &self.delivery)
            .field("lease_ttl", &self.lease_ttl)
            .field("wait_for_lease", &self.wait_for_lease)
            .finish_non_exhaustive()
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// Records read from the source.
    pub records_in: u64,
    /// Records written to the sink.
    pub records_out: u64,
    /// Pages written.
    pub pages: u64,
    /// Wall time of the run.
    #[serde(serialize_with = "serialize_secs")]
    pub elapsed: Duration,
    /// The delivery guarantee the topology gave.
    pub guarantee: DeliveryGuarantee,
    /// The state key.
    pub state_key: String,
    /// The bookmark the run started from.
    pub resumed_from: Option<Bookmark>,
    /// Whether the start was re-anchored at the sink's commit token.
    pub re_anchored: bool,
    /// The last bookmark persisted (or the one resumed from, if no page moved it).
    pub last_bookmark: Option<Bookmark>,
    /// Whether the run stopped because it was cancelled.
    pub cancelled: bool,
    /// The source lag of the last bookmark persisted, in seconds: the time it became durable
    /// minus the time the source was at that position by the source's clock
    /// ([`crate::Page::source_time`]: a change's commit time, a keepalive's server time).
    /// For a change stream that caught up, the delivery latency of its last page; for an
    /// idle table in a busy database, how fresh the advanced position is. `None` when the
    /// source has no clock or no page was persisted. Clock skew between the source's server
    /// and this host shifts it; a negative difference is reported as 0.
    pub lag_seconds: Option<f64>,
    /// How far along the source's read was at the last page ([`crate::Page::extent`]);
    /// `None` when the source did not know its end or no page moved.
    pub extent: Option<Extent>,
}

fn serialize_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// A source, a sink, a state store and options: one run of the loop.
pub struct Pipeline<'a> {
    source: &'a dyn Source,
    sink: &'a dyn Sink,
    state: Arc<dyn StateStore>,
    options: RunStreamOptions,
}

impl<'a> Pipeline<'a> {
    /// A pipeline from `source` to `sink`, with a [`MemoryStateStore`] and default options.
    pub fn new<S: Source, K: Sink>(source: &'a S, sink: &'a K) -> Self {
        Self::from_dyn(source, sink)
    }

    /// As [`Pipeline::new`], for trait objects.
    pub fn from_dyn(source: &'a dyn Source, sink: &'a dyn Sink) -> Self {
        Self {
            source,
            sink,
            state: Arc::new(MemoryStateStore::new()),
            options: RunStreamOptions::default(),
        }
    }

    /// Uses `store` for bookmarks (and the lease).
    pub fn with_state_store(mut self, store: Arc<dyn StateStore>) -> Self {
        self.state = store;
        self
    }

    /// Uses `options`.
    pub fn with_options(mut self, options: RunStreamOptions) -> Self {
        self.options = options;
        self
    }

    /// The topology's sides, as [`crate::delivery`] sees them.
    pub fn topology(&self) -> Topology<'_> {
        Topology {
            source: self.source.connector(),
            replay: self.source.replay(),
            sink: self.sink.connector(),
            sink_caps: self.sink.capabilities(),
            sink_limit: self.sink.delivery_limit(),
            state: self.state.name(),
            state_durable: self.state.is_durable(),
        }
    }

    /// The guarantee a run would give for the configured request, without any I/O.
    ///
    /// # Errors
    /// [`FaucetError::Delivery`] when the request cannot be met.
    pub fn resolve_delivery(&self) -> Result<DeliveryGuarantee, FaucetError> {
        Ok(self.topology().resolve(self.options.delivery)?)
    }

    /// Runs until the source is exhausted or the run is cancelled.
    ///
    /// # Errors
    /// [`FaucetError::Delivery`] before any data moves when the request cannot be met, or
    /// when an upsert sink is fed by a source table without a key
    /// ([`crate::delivery::DeliveryError::KeylessSource`], [`crate::keys`]; a sink key that is
    /// not the source's key is logged as a warning and the run proceeds);
    /// [`FaucetError::Lease`] when another run holds the state key or this one lost it;
    /// any source, sink or state error, after flushing what was written.
    pub async fn run(self) -> Result<RunSummary, FaucetError> {
        run::run(self).await
    }
}
