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

pub use crate::delivery::SinkCapabilities;

/// What an atomic-watermark sink stores with a page's rows, in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitToken {
    /// Monotonic page sequence within a state key, starting at 1.
    pub sequence: u64,
    /// The bookmark after the page.
    pub bookmark: Bookmark,
}

/// A configured sink.
#[async_trait]
pub trait Sink: Send + Sync {
    /// The connector's name (`jsonl`, `postgres`).
    fn connector(&self) -> &str;

    /// What this sink, as configured, can do.
    fn capabilities(&self) -> SinkCapabilities;

    /// What the sink delivers to, as a stable identity free of secrets: `jsonl
    /// /abs/out.jsonl`, `postgres host:5432/db table public.orders` (never a user or
    /// password). The run loop stores it beside the bookmark and refuses a run whose sink
    /// differs from the one the bookmark was delivered to, since resuming there would skip
    /// everything before the bookmark. `None` (the default) records and checks nothing.
    fn target(&self) -> Option<String> {
        None
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
}

/// An open sink.
#[async_trait]
pub trait SinkWriter: Send {
    /// Writes a page. It need not be durable before [`SinkWriter::flush`].
    ///
    /// # Errors
    /// [`FaucetError::Write`] or [`FaucetError::Data`] (a value the target cannot hold).
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError>;

    /// Makes everything written so far durable.
    ///
    /// # Errors
    /// [`FaucetError::Write`].
    async fn flush(&mut self) -> Result<(), FaucetError>;

    /// Atomic watermark: writes `page` and stores `token` under `scope` (the state key) in one
    /// transaction, durable on return. The stored token only moves forward: a token whose
    /// sequence is not above the stored one is refused, so a stale writer cannot move it back.
    ///
    /// # Errors
    /// [`FaucetError::Write`]; the default refuses, for sinks without the capability.
    async fn write_committed(
        &mut self,
        _page: &Page,
        _scope: &str,
        _token: &CommitToken,
    ) -> Result<(), FaucetError> {
        Err(FaucetError::write(
            "sink",
            "this sink has no atomic watermark",
            None,
        ))
    }

    /// Whether the target already holds data (`Some(true)`), is empty (`Some(false)`), or
    /// the sink cannot tell (`None`, the default). The run loop asks before a run that has no
    /// bookmark and never started: an append-only target that already holds data then means
    /// the bookmark was lost, and delivering the whole source again would double it
    /// (`shared/cases/13-state-missing-or-torn.md`, S1).
    ///
    /// # Errors
    /// [`FaucetError::Write`] when the target cannot be inspected.
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        Ok(None)
    }

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
