//! The conformance battery. A connector's tests call the checks that apply to it:
//!
//! | check | for |
//! |---|---|
//! | [`config_is_strict`] | every connector config: an unknown field is rejected |
//! | [`source_pages_are_bounded`] | sources: no page over `batch_size` (memory bounded by the page) |
//! | [`source_bookmarks_round_trip`] | sources: reopening from any page's bookmark yields exactly the rest |
//! | [`sink_guarantee_is_truthful`] | sinks: a claimed keyed upsert or atomic watermark really absorbs a replay |
//! | [`sink_flush_is_durable`] | sinks: what `flush` confirmed is there when the sink is read back |
//! | [`errors_not_panics`] | anything: a failing operation returns an error instead of panicking |
//! | [`cancellation_flushes`] | source + sink: a cancelled run returns its summary and the sink holds exactly the delivered records |
//! | [`state_store_contract`] | state stores: get/put/delete, missing delete, key validation, `check` leaves nothing |
//! | [`lease_contract`] | state stores with leases: one holder, expiry, fencing of a stale holder |
//! | [`lease_takeover_contract`] | stores whose leases outlive their process: a take-over from a gone holder, and only from it |
//! | [`lease_lapse_and_race`] | state stores with leases: a lapsed lease is lost, concurrent acquisitions have one winner |
//! | [`state_store_under_run_loop`] | state stores: resume across a restart, a busy key refused naming its holder |
//! | [`bad_keys_fail_before_io`] | state stores: invalid keys are config errors before anything is sent |
//! | [`concurrent_writers_of_one_key`] | state stores: concurrent puts all succeed, one whole value wins |
//!
//! Sinks are read back through a closure the connector's test supplies (the rows as JSON
//! objects), because only it knows how to read its target.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde_json::{Value as Json, json};

use crate::error::FaucetError;
use crate::page::Page;

mod lease;
mod sink;
mod source;
mod state;

pub use lease::{lease_contract, lease_lapse_and_race, lease_takeover_contract};
pub use sink::{
    ReadBack, cancellation_flushes, sample_page, sink_flush_is_durable, sink_guarantee_is_truthful,
};
pub use source::{source_bookmarks_round_trip, source_pages_are_bounded};
pub use state::{
    bad_keys_fail_before_io, concurrent_writers_of_one_key, state_store_contract,
    state_store_under_run_loop,
};

/// A failed conformance check: which check and what broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("conformance check `{check}` failed: {message}")]
pub struct ConformanceError {
    /// The check's name.
    pub check: &'static str,
    /// What broke.
    pub message: String,
}

fn fail<T>(check: &'static str, message: impl Into<String>) -> Result<T, ConformanceError> {
    Err(ConformanceError {
        check,
        message: message.into(),
    })
}

fn io<T>(check: &'static str, r: Result<T, FaucetError>) -> Result<T, ConformanceError> {
    r.or_else(|e| fail(check, format!("unexpected error: {e}")))
}

fn rows_of(pages: &[Page]) -> Vec<Json> {
    pages
        .iter()
        .flat_map(|p| p.rows().map(|r| r.to_json()).collect::<Vec<_>>())
        .collect()
}

/// `valid` (a JSON object that deserializes into `C`) with an extra field must be rejected.
///
/// # Errors
/// When `valid` is rejected, or the unknown field is accepted.
pub fn config_is_strict<C: DeserializeOwned>(valid: &Json) -> Result<(), ConformanceError> {
    const CHECK: &str = "config_is_strict";
    if let Err(e) = serde_json::from_value::<C>(valid.clone()) {
        return fail(CHECK, format!("the valid config was rejected: {e}"));
    }
    let mut bad = valid.clone();
    match bad.as_object_mut() {
        Some(map) => {
            map.insert("surely_not_a_field".into(), json!(1));
        }
        None => return fail(CHECK, "the valid config must be a JSON object"),
    }
    match serde_json::from_value::<C>(bad) {
        Ok(_) => fail(CHECK, "an unknown field `surely_not_a_field` was accepted"),
        Err(e) if e.to_string().contains("surely_not_a_field") => Ok(()),
        Err(e) => fail(
            CHECK,
            format!("rejected, but without naming the field: {e}"),
        ),
    }
}

/// `op` returns an error rather than panicking (it runs in a task, so a panic is caught).
///
/// # Errors
/// When the operation panics, or succeeds although it should fail.
pub async fn errors_not_panics<F, T>(what: &str, op: F) -> Result<(), ConformanceError>
where
    F: Future<Output = Result<T, FaucetError>> + Send + 'static,
    T: Send + 'static,
{
    const CHECK: &str = "errors_not_panics";
    match tokio::spawn(op).await {
        Err(join) if join.is_panic() => fail(CHECK, format!("{what}: panicked")),
        Err(join) => fail(CHECK, format!("{what}: task failed: {join}")),
        Ok(Ok(_)) => fail(CHECK, format!("{what}: succeeded, an error was expected")),
        Ok(Err(_)) => Ok(()),
    }
}
