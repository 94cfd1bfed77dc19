//! The tokio runtime each command runs on.
//!
//! `faucet serve` runs many pipelines at once: a multi-thread runtime, a worker per core.
//! `faucet run` and `faucet replicate` run one pipeline at a time, whose run loop reads a
//! page, writes it and persists its bookmark in one task. On a current-thread runtime the
//! clients' own tasks (a PostgreSQL replication client's reader, a NATS client's connection)
//! share the run loop's thread, so a record handed between them is a function call; on
//! worker threads each handoff through a client's bounded channel can cost a thread wake-up
//! (a futex call and a context switch: a fifth of a postgres-cdc → nats run's CPU under
//! `perf`). A source that decodes its next page in a tokio task of its own, in parallel with
//! the run loop ([`faucet_core::Source::reads_in_task`]: `mysql`, `mysql-cdc`), keeps the
//! worker threads: on one thread its decode would wait for the run loop. Blocking work keeps
//! its own threads either way. What was measured, and why: docs/run-loop.md, "One thread per
//! pipeline".

use std::future::Future;

use faucet_core::Source;

use crate::exit::Exit;

/// How many threads run a command's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Threads {
    /// One: the command's own thread runs every task (tokio's current-thread runtime).
    One,
    /// A worker per core (tokio's multi-thread runtime).
    PerCore,
}

impl Threads {
    /// What a run of `sources`, one after another, needs: [`Threads::PerCore`] when one of
    /// them reads in a task of its own, else [`Threads::One`].
    pub(crate) fn for_sources<'a>(sources: impl IntoIterator<Item = &'a dyn Source>) -> Self {
        if sources.into_iter().any(Source::reads_in_task) {
            Self::PerCore
        } else {
            Self::One
        }
    }
}

/// Runs `work` to its end on a new runtime of `threads` (timers and I/O enabled).
///
/// # Errors
/// [`Exit::RunFailed`] when the runtime cannot be started (the error is printed).
pub(crate) fn block_on<F: Future>(threads: Threads, work: F) -> Result<F::Output, Exit> {
    let mut builder = match threads {
        Threads::One => tokio::runtime::Builder::new_current_thread(),
        Threads::PerCore => tokio::runtime::Builder::new_multi_thread(),
    };
    match builder.enable_all().build() {
        Ok(runtime) => Ok(runtime.block_on(work)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            Err(Exit::RunFailed)
        }
    }
}
