//! `faucet serve --cluster POSTGRES_URL`: several members run the same pipeline files, each
//! row owned by one member at a time.
//!
//! The parts, one job each (all under the `cluster` feature): `placement` (rendezvous hashing
//! of member names and state keys), `settle` (how long a member waits before it takes work; a flapping member's
//! backoff), `membership` (the members table: heartbeats judged by the database server's
//! clock, drain, leave), `owners` (who last started each row, the moves, schedule tick
//! claims), `reports` (the status table: each owner's report of its rows, so every member
//! shows every row) and `member` (this member's loop: heartbeat every ttl/3, read the
//! members, place every row, start or stop it here, report the rows it owns).
//!
//! The owner of a row runs it under the fenced lease of its state store, as a single process
//! does; a row placed elsewhere is stopped here (its page in hand finished, its bookmark
//! persisted, its lease released) and its new owner waits for that lease — the handover.

#[cfg(feature = "cluster")]
pub(crate) mod placement;
#[cfg(feature = "cluster")]
pub(crate) mod settle;

#[cfg(feature = "cluster")]
mod member;
#[cfg(feature = "cluster")]
mod membership;
#[cfg(feature = "cluster")]
mod owners;
#[cfg(feature = "cluster")]
mod reports;

#[cfg(feature = "cluster")]
pub(crate) use member::PgCluster;

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use faucet_core::FaucetError;

use super::pipeline::Slot;
use super::report::Report;
use crate::registry::StateType;

/// The default members table.
pub(crate) const DEFAULT_TABLE: &str = "public.faucet_members";

/// What the rest of `faucet serve` asks of the cluster (the API, the supervisor, the
/// scheduler), whichever coordinates it.
#[async_trait]
pub(crate) trait Coordinator: Send + Sync {
    /// `None` while this member can serve (the cluster database answers, it is not drained);
    /// else why not, for `/readyz`.
    fn not_ready(&self) -> Option<String>;

    /// The member a row is placed on now, as this member sees it.
    fn owner_of(&self, key: &str) -> Option<String>;

    /// The reports of the rows' owners, by state key: only those written by a live member
    /// (its current incarnation, heartbeat younger than the ttl, not leaving) within the
    /// ttl. Empty (the error logged) when the cluster database does not answer.
    async fn reports(&self) -> BTreeMap<String, Report>;

    /// `GET /members`: every member of the table.
    ///
    /// # Errors
    /// [`FaucetError::State`] when the cluster database cannot be read.
    async fn members(&self) -> Result<serde_json::Value, FaucetError>;

    /// Drains (`on`) or undrains member `name`, persisted; `false` when there is no such
    /// member.
    ///
    /// # Errors
    /// [`FaucetError::State`] when the cluster database cannot be written.
    async fn drain(&self, name: &str, on: bool) -> Result<bool, FaucetError>;

    /// Claims the schedule tick `tick` of the row `key`: `true` for exactly one member.
    async fn claim_tick(&self, key: &str, tick: DateTime<Utc>) -> bool;

    /// Records that this member starts a run of `slot` (counting a move from another member
    /// in `faucet_pipelines_moved_total`).
    async fn starting(&self, slot: &Slot);
}

/// Refuses a row whose state store cannot share leases across machines: in cluster mode
/// only `postgres` and `redis` stores are accepted (a `memory` or `file` store would let two
/// members run one row at once).
///
/// # Errors
/// [`FaucetError::Config`] at `pipeline.state.type`, naming the store.
pub(crate) fn check_store(slot: &Slot) -> Result<(), FaucetError> {
    match slot.plan.state.kind() {
        StateType::Postgres | StateType::Redis => Ok(()),
        other => Err(FaucetError::config(
            "pipeline.state.type",
            format!(
                "is `{}`, whose leases do not reach other machines: with --cluster every row \
                 needs a state store the members share, `postgres` or `redis`",
                other.name()
            ),
        )),
    }
}
