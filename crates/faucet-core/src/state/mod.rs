//! State stores: where bookmarks live between runs.
//!
//! [`StateStore`] is the trait of docs/specification.md, "State stores" (`get`, `put`, `delete`, `check`) plus
//! optional leasing: one runner per state key (see [`lease`]). A store that does not
//! implement leasing still works; the run loop warns that it cannot stop two runners of one
//! key. Built in: [`MemoryStateStore`] (forgets on exit) and [`FileStateStore`] (one file per
//! key, written atomically and durably). Every store validates keys with
//! [`validate_state_key`].

mod file;
mod key;
pub mod lease;
mod memory;

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use crate::error::FaucetError;

pub use file::FileStateStore;
pub use key::{MAX_STATE_KEY_LEN, shown_key, validate_state_key};
pub use lease::{Lease, LeaseError, LeaseHolder, LeaseOutcome, LeaseRequest, ProcessIdentity};
pub use memory::MemoryStateStore;

/// The sentinel key `check()` writes, reads and deletes (`__faucet_doctor__`).
pub const DOCTOR_KEY: &str = "__faucet_doctor__";

/// The round trip every store's `check()` starts with: put a probe under [`DOCTOR_KEY`],
/// read it back, delete it (also when the read failed, so nothing is left behind), and
/// compare. `location` says where the probe lived for the mismatch message (`` in table
/// "faucet_state"``; empty for none). Errors carry the context `check`.
///
/// # Errors
/// The failing operation's error, or [`FaucetError::State`] when the probe did not read
/// back as written.
pub async fn check_round_trip<S: StateStore + ?Sized>(
    store: &S,
    location: &str,
) -> Result<(), FaucetError> {
    let probe = serde_json::json!({ "probe": true, "at": "faucet doctor" });
    store
        .put(DOCTOR_KEY, &probe)
        .await
        .map_err(|e| e.with_context("check"))?;
    let back = store.get(DOCTOR_KEY).await;
    let deleted = store.delete(DOCTOR_KEY).await;
    let back = back.map_err(|e| e.with_context("check"))?;
    deleted.map_err(|e| e.with_context("check"))?;
    if back.as_ref() != Some(&probe) {
        return Err(FaucetError::state(
            store.name(),
            format!("check: `{DOCTOR_KEY}`{location} read back {back:?} after writing {probe}"),
        ));
    }
    Ok(())
}

/// Durable storage for bookmarks, keyed by state key (`{pipeline}::{matrix row}`).
#[async_trait]
pub trait StateStore: Send + Sync {
    /// The store's kind (`memory`, `file`, `postgres`, `redis`), used in errors.
    fn name(&self) -> &str;

    /// Whether entries survive the process. Atomic-watermark delivery needs a durable store.
    fn is_durable(&self) -> bool {
        true
    }

    /// Whether a lease expires when it is not renewed within its ttl (the default): the run
    /// loop then counts it lost once its ttl passed without a renewal. A store whose leases
    /// cannot be lost by stalling (the file store's OS locks, held while the process lives)
    /// answers `false`, and only the store's own "not yours" ends such a lease.
    fn leases_expire(&self) -> bool {
        true
    }

    /// The bookmark stored under `key`, or `None` when there is none.
    ///
    /// # Errors
    /// [`FaucetError::Config`] for an invalid key; [`FaucetError::State`] when the store
    /// cannot be read or holds something unreadable (never reported as `None`).
    async fn get(&self, key: &str) -> Result<Option<Value>, FaucetError>;

    /// The entry stored under `key` and when it was last written, by the store's own clock,
    /// where the store keeps that time (the `postgres` store's `updated_at`); `None` for
    /// the time where it does not (the default: [`StateStore::get`] alone). `faucet serve
    /// --cluster` shows it as the bookmark's time of a pipeline another member runs.
    ///
    /// # Errors
    /// As [`StateStore::get`].
    async fn get_with_time(
        &self,
        key: &str,
    ) -> Result<Option<(Value, Option<SystemTime>)>, FaucetError> {
        Ok(self.get(key).await?.map(|v| (v, None)))
    }

    /// Stores `value` under `key`; durable when it returns `Ok`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] for an invalid key; [`FaucetError::State`] otherwise.
    async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError>;

    /// Removes `key`; a missing key is not an error.
    ///
    /// # Errors
    /// [`FaucetError::Config`] for an invalid key; [`FaucetError::State`] otherwise.
    async fn delete(&self, key: &str) -> Result<(), FaucetError>;

    /// A real put → get → delete round trip on [`DOCTOR_KEY`], leaving nothing behind
    /// ([`check_round_trip`]); a store adds its own probes after it.
    ///
    /// # Errors
    /// [`FaucetError::State`] / [`FaucetError::Connect`] naming what is at fault.
    async fn check(&self) -> Result<(), FaucetError> {
        check_round_trip(self, "").await
    }

    /// Takes the lease on `request.key` for `request.ttl`, unless another live holder has it;
    /// with `request.gone`, takes it from that holder, known to have exited
    /// ([`LeaseHolder::is_gone_from_this_host`]), as an expired one would be taken: only while
    /// `gone` (by its id) still holds it, with a new fence. A store whose lease dies with its
    /// process (OS file locks) needs no take-over and may ignore `gone`. The default:
    /// [`LeaseOutcome::Unsupported`].
    ///
    /// # Errors
    /// [`FaucetError::State`] when the store cannot be reached.
    async fn acquire_lease(&self, _request: &LeaseRequest) -> Result<LeaseOutcome, FaucetError> {
        Ok(LeaseOutcome::Unsupported)
    }

    /// Extends a held lease by `ttl` from now.
    ///
    /// # Errors
    /// [`LeaseError::Lost`] when the lease expired and was taken, or is gone.
    async fn renew_lease(&self, _lease: &Lease, _ttl: Duration) -> Result<(), FaucetError> {
        Ok(())
    }

    /// Gives a lease up; releasing a lease that is already gone is not an error.
    ///
    /// # Errors
    /// [`FaucetError::State`] when the store cannot be reached.
    async fn release_lease(&self, _lease: &Lease) -> Result<(), FaucetError> {
        Ok(())
    }

    /// `put`, but only while `lease` is still held: a runner whose lease expired (it was
    /// paused, partitioned) cannot move the bookmark. The default is a plain `put`.
    ///
    /// # Errors
    /// [`LeaseError::Lost`] when the lease is no longer held; otherwise as [`StateStore::put`].
    async fn put_fenced(
        &self,
        key: &str,
        value: &Value,
        _lease: &Lease,
    ) -> Result<(), FaucetError> {
        self.put(key, value).await
    }
}
