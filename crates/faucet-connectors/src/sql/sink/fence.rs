//! The writer fence of every SQL sink: the target refuses a page from a run whose lease a
//! newer run took. One row per scope (the commit token's, [`super::token::scope`]) in
//! `faucet_fences`, beside the target table, holding the largest lease fence that has
//! written a page. Every page's transaction starts by raising the row to its writer's fence
//! (the row then stays locked until the page commits; PostgreSQL reads a row that holds the
//! writer's fence already under a shared lock instead, so its second session can hold it
//! too), unless the row holds a larger one: then the page is rolled back with
//! [`LeaseError::Fenced`]. A newer writer's first page
//! waits for an older writer's page in flight and then supersedes it; an older writer that
//! wakes up later finds the larger fence and writes nothing. Each dialect spells the
//! statements ([`super::SinkDialect::check_fence`]).

use faucet_core::FaucetError;
use faucet_core::state::LeaseError;

/// The fence table's name, beside the target table.
pub(crate) const FENCES: &str = "faucet_fences";

/// The writer's fence, as the page transactions check it.
#[derive(Debug, Clone)]
pub(crate) struct WriterFence {
    /// The state key, for the error message.
    pub(crate) key: String,
    /// The row's scope ([`super::token::scope`]).
    pub(crate) scope: String,
    /// The lease's fencing number.
    pub(crate) fence: u64,
}

/// The refusal of `writer`'s page: `newer` is stored for its scope in `connector`'s table
/// `target` ([`LeaseError::Fenced`]).
pub(crate) fn fenced(
    writer: &WriterFence,
    newer: u64,
    connector: &str,
    target: &dyn std::fmt::Display,
) -> FaucetError {
    LeaseError::Fenced {
        key: writer.key.clone(),
        fence: writer.fence,
        newer,
        target: format!("{connector} table {target}"),
    }
    .into()
}
