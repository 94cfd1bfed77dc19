//! The sink side of the contract: a [`Sink`] opens a [`SinkWriter`].
//!
//! What the run loop guarantees a sink: pages arrive in source order; after each page comes
//! [`SinkWriter::flush`] (or, in atomic-watermark mode, one [`SinkWriter::write_committed`]
//! that commits the rows and the token together), and only then is the bookmark persisted.
//! What a sink must do: when `flush` (or `write_committed`) returns `Ok`, everything written
//! so far survives a crash of the process; a write that fails leaves committed output
//! intact; the capabilities it reports are true (the conformance battery checks them).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::FaucetError;
use crate::page::{Bookmark, Page};
use crate::value::Schema;

pub use crate::delivery::SinkCapabilities;

/// What an atomic-watermark sink stores with a page's rows, in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitToken {
    /// Monotonic page sequence within a state key, starting at 1.
    pub sequence: u64,
    /// The bookmark after the page.
    pub bookmark: Bookmark,
}

/// A page's commit in atomic-watermark mode ([`SinkWriter::write_committed`]): the token to
/// store with the page's rows and the scope (the run's state key) it is stored under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The state key the token belongs to; one target may hold the tokens of many.
    pub scope: String,
    /// The token: the page's sequence and the bookmark after it.
    pub token: CommitToken,
}

impl Commit {
    /// The commit of `token` under `scope`.
    #[must_use]
    pub fn new(scope: &str, token: &CommitToken) -> Self {
        Self {
            scope: scope.to_owned(),
            token: token.clone(),
        }
    }
}

/// The run's lease fence as handed to a sink ([`SinkWriter::fence`]): every page written under
/// `scope` from now on carries `number`, and the target refuses a page of a smaller one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The state key the fence guards.
    pub scope: String,
    /// The lease's fencing number ([`crate::state::Lease::fence`]); it grows with every
    /// acquisition of the key.
    pub number: u64,
    /// The lease's time to live: how long a writer stalled mid-page may hold the target.
    pub ttl: std::time::Duration,
    /// Set the target's fence to `number` even when it holds a larger one (the run loop's
    /// second call, once its lease is known to be the live one).
    pub take_over: bool,
}

impl Fence {
    /// Fence `number` on `scope` for a lease of `ttl`, not taking over.
    #[must_use]
    pub fn new(scope: &str, number: u64, ttl: std::time::Duration) -> Self {
        Self {
            scope: scope.to_owned(),
            number,
            ttl,
            take_over: false,
        }
    }

    /// The same fence, taking over whatever fence the target holds.
    #[must_use]
    pub fn taking_over(mut self) -> Self {
        self.take_over = true;
        self
    }
}

/// What a sink that publishes messages to a bus (`nats`, `redis-streams`, `kafka`) tells
/// about the page last handed to [`SinkWriter::write`] (or [`SinkWriter::write_committed`]),
/// for `faucet serve`'s metrics and status ([`SinkWriter::published`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PublishStats {
    /// Messages the page sent to the bus and had acknowledged (a replayed page's messages
    /// found stored already are not sent again, and not counted).
    pub messages: u64,
    /// Bytes of those messages' key, value and faucet headers (names and values), as the
    /// one message encoding of every bus sink makes them; the bus's own framing and
    /// protocol headers are not counted.
    pub bytes: u64,
    /// The most publishes that awaited their acknowledgement at once during the page (a
    /// page is durable only when every one is in, so none is pending between pages).
    pub acks_pending: u64,
    /// Seconds from the page's first publish to its last acknowledgement.
    pub publish_seconds: f64,
}

/// A configured sink.
#[async_trait]
pub trait Sink: Send + Sync {
    /// The connector's name (`jsonl`, `postgres`).
    fn connector(&self) -> &str;

    /// What this sink, as configured, can do.
    fn capabilities(&self) -> SinkCapabilities;

    /// Why this sink delivers at-least-once only, in its own terms, when its capabilities do
    /// not say enough (the `kafka` sink: Kafka has transactions, but faucet cannot prove an
    /// effectively-once path through them); an effectively-once request then gets this
    /// reason and fix ([`crate::delivery::SinkLimit`]). `None` (the default): the generic
    /// reason.
    fn delivery_limit(&self) -> Option<crate::delivery::SinkLimit> {
        None
    }

    /// What the sink delivers to, as a stable identity free of secrets: `jsonl
    /// /abs/out.jsonl`, `postgres host:5432/db table public.orders` (never a user or
    /// password). The run loop stores it beside the bookmark and refuses a run whose sink
    /// differs from the one the bookmark was delivered to, since resuming there would skip
    /// everything before the bookmark. `None` (the default) records and checks nothing.
    fn target(&self) -> Option<String> {
        None
    }

    /// The key this sink upserts by (`write_mode: upsert`, its `key:` columns; empty when
    /// the target's own key is used), or `None` (the default) when it does not upsert. The
    /// run loop and `faucet doctor` compare it with the source's keys ([`crate::keys`]).
    fn upserts_by(&self) -> Option<Vec<String>> {
        None
    }

    /// The key this sink upserts the change records of `source_table` by (a sink that
    /// routes each source table to its own target: that target's `key:`, empty when the
    /// source's key is used), or `None` when they are not upserted. The default is
    /// [`Sink::upserts_by`], the same for every table.
    fn upserts_by_table(&self, _source_table: &str) -> Option<Vec<String>> {
        self.upserts_by()
    }

    /// Whether this sink keys what it writes by the source's keys of its tables where its
    /// config names no key (a bus sink's message key of a change record): the run loop then
    /// reads the source's keys ([`crate::Source::table_keys`]) and tells the writer
    /// ([`SinkWriter::source_keys`]), as it does for a sink that upserts. The default is
    /// `false`.
    fn keys_by_source(&self) -> bool {
        false
    }

    /// Opens the sink for writing (creates files, connects, creates tables as configured).
    ///
    /// # Errors
    /// [`FaucetError::Connect`] or [`FaucetError::Write`].
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError>;

    /// Probes the sink without writing data (for `faucet doctor`).
    ///
    /// # Errors
    /// The failing prerequisite, with its fix in the message.
    async fn check(&self) -> Result<(), FaucetError>;

    /// Probes, without writing, whether the target takes pages of `schema` (for `faucet
    /// doctor`, when the source fixes its schema up front: [`crate::Source::record_schema`]).
    /// The default accepts any schema; a sink writing into an existing table checks that
    /// every column it would write is there.
    ///
    /// # Errors
    /// The missing prerequisite (a column), with its fix in the message.
    async fn check_schema(&self, _schema: &Schema) -> Result<(), FaucetError> {
        Ok(())
    }

    /// Probes, without writing (for `faucet doctor`'s drift line), how the target of source
    /// table `source_table` compares with that table's columns now, `columns` (in table
    /// order), when a run first delivers `pending`, the schema change the source made since
    /// the last run (if any): the statements the run would run for it or the error it would
    /// stop with, and the differences left ([`crate::change::Drift`]). `Ok(None)` (the
    /// default) when the sink cannot tell (not a table of columns, a target not created yet,
    /// a routed sink).
    ///
    /// # Errors
    /// When the target cannot be read ([`FaucetError::Connect`], [`FaucetError::Write`]).
    async fn check_drift(
        &self,
        _source_table: &str,
        _columns: &[crate::change::schema::ColumnShape],
        _pending: Option<&crate::change::schema::SchemaChange>,
    ) -> Result<Option<crate::change::Drift>, FaucetError> {
        Ok(None)
    }
}

/// An open sink.
#[async_trait]
pub trait SinkWriter: Send {
    /// Writes a page. It need not be durable before [`SinkWriter::flush`].
    ///
    /// # Errors
    /// [`FaucetError::Write`] or [`FaucetError::Data`] (a value the target cannot hold).
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError>;

    /// Makes everything written so far durable. The default does nothing: for a writer whose
    /// every [`SinkWriter::write`] is durable on return (a transaction per page, awaited
    /// acknowledgements); a writer that buffers must flush here.
    ///
    /// # Errors
    /// [`FaucetError::Write`].
    async fn flush(&mut self) -> Result<(), FaucetError> {
        Ok(())
    }

    /// Atomic watermark: writes `page` and stores `commit.token` under `commit.scope` (the
    /// state key) in one transaction, durable on return. The stored token only moves forward:
    /// a token whose sequence is not above the stored one is refused, so a stale writer cannot
    /// move it back.
    ///
    /// # Errors
    /// [`FaucetError::Write`]; the default refuses, for sinks without the capability.
    async fn write_committed(&mut self, _page: &Page, _commit: &Commit) -> Result<(), FaucetError> {
        Err(FaucetError::write(
            "sink",
            "this sink has no atomic watermark",
            None,
        ))
    }

    /// Tells the writer the run's lease fence ([`Fence`]): from now on every page it writes
    /// under `fence.scope` carries `fence.number`. A sink that can fence (returns `Ok(true)`)
    /// checks it inside each page's transaction and rolls the page back with
    /// [`crate::state::LeaseError::Fenced`] when the target has already taken a page of a
    /// larger fence for the scope — a writer that stalled past its lease (SIGSTOP, a long
    /// pause, a partition) and woke up holding a page while a newer run took over: a lease
    /// alone cannot stop such a writer, only the resource it writes to can refuse it
    /// (`docs/delivery.md`). The default returns `Ok(false)`: such a sink stays at-least-once
    /// against a zombie writer. `fence.ttl` is the lease's: a sink should not let a writer
    /// stalled in the middle of a page hold the target (locks, an open transaction) for
    /// longer than that, so the run that takes over is not blocked by it.
    ///
    /// Called once, before the first page. When the target already holds a larger fence for
    /// the scope, a sink answers [`crate::state::LeaseError::Fenced`]; the run loop then makes
    /// sure its lease is still the live one in the state store (so the larger fence is left
    /// over from a state store that was reset or replaced, not a newer run) and calls again
    /// with `fence.take_over`, which sets the target's fence to `fence.number` whatever it
    /// held.
    ///
    /// # Errors
    /// [`crate::state::LeaseError::Fenced`] as above; [`FaucetError::Write`] when the fence
    /// cannot be set up (e.g. its table created).
    async fn fence(&mut self, _fence: &Fence) -> Result<bool, FaucetError> {
        Ok(false)
    }

    /// Whether the target already holds data (`Some(true)`), is empty (`Some(false)`), or
    /// the sink cannot tell (`None`, the default). The run loop asks before a run that has no
    /// bookmark and never started: an append-only target that already holds data then means
    /// the bookmark was lost, and delivering the whole source again would double it
    /// (a lost or torn state store).
    ///
    /// # Errors
    /// [`FaucetError::Write`] when the target cannot be inspected.
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        Ok(None)
    }

    /// The records of the page last handed to [`SinkWriter::write`] (or
    /// [`SinkWriter::write_committed`]) per target, as `(target name, records)`, for
    /// per-target counts (`faucet serve`'s status and metrics): a file path, a table, a
    /// stream, as the sink names what it writes. A sink that routes each source table to its
    /// own target names each; empty (the default) when the sink does not tell. Read by the
    /// run loop after the page is durable; valid until the next write.
    fn written_targets(&self) -> &[(String, u64)] {
        &[]
    }

    /// What the page last handed to [`SinkWriter::write`] (or
    /// [`SinkWriter::write_committed`]) published, for a sink that publishes messages to a
    /// bus; `None` (the default) for other sinks, and before the first page. Read by the run
    /// loop after the page is durable; valid until the next write.
    fn published(&self) -> Option<PublishStats> {
        None
    }

    /// Tells the writer the source's keys of its tables ([`crate::Source::table_keys`]),
    /// before the first page, when the sink upserts ([`Sink::upserts_by`]) and the source
    /// knows them; and again, the whole set, before a page holding change records of a table
    /// the source did not show then (created later, matched by a `tables` pattern): a sink that routes each source table to its own target upserts a
    /// target without a configured `key:` by its source table's key. The default ignores
    /// them.
    fn source_keys(&mut self, _keys: &[crate::keys::TableKeys]) {}

    /// The token last committed under `scope`, if any.
    ///
    /// # Errors
    /// [`FaucetError::Write`] when it cannot be read.
    async fn last_committed_token(
        &mut self,
        _scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        Ok(None)
    }
}
