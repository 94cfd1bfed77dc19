//! The supervisor of one row: connects its state store, reads the operator's wish, then runs
//! it — continuously, or at each tick (and `POST …/run`) — until the drain.
//!
//! Isolation: every run is its own tokio task, so an error or even a panic inside a
//! connector ends that run only; the row shows FAILED with the error and retries after a
//! capped exponential backoff ([`backoff`]: 1 s, 2 s, 4 s … at most 60 s; reset by a run that
//! persisted a page or ended cleanly). A scheduled row retries at the backoff or at its next
//! tick, whichever comes first. Draining (SIGTERM/SIGINT) cancels the run going, which
//! finishes its page in hand, persists its bookmark and releases its lease.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;
use faucet_core::FaucetError;
use faucet_core::state::StateStore;
use tokio_util::sync::CancellationToken;

use super::cluster::Coordinator;
use super::control::{self, Desired};
use super::pipeline::{Phase, Slot};
use crate::commands::plan::{self, Leasing};
use crate::output;

/// The first retry delay.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest retry delay.
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The delay before attempt `failures + 1`: 1 s doubled per failure in a row, at most 60 s.
pub(crate) fn backoff(failures: u32) -> Duration {
    let shift = failures.saturating_sub(1).min(16);
    BACKOFF_MIN.saturating_mul(1 << shift).min(BACKOFF_MAX)
}

/// Runs `slot` until `shutdown`; with a `cluster`, only while the row is placed on this
/// member ([`Slot::placed`]).
pub(crate) async fn supervise(
    slot: Arc<Slot>,
    shutdown: CancellationToken,
    leasing: Leasing,
    cluster: Option<Arc<dyn Coordinator>>,
) {
    let Some(store) = start(&slot, &shutdown).await else {
        return;
    };
    if let Some(monitor) = slot.plan.source.retention_monitor() {
        let seen = slot.clone();
        let at = slot.clone();
        tokio::spawn(crate::telemetry::retention::sample_until(
            monitor,
            slot.metrics.clone(),
            slot.key().to_owned(),
            shutdown.clone(),
            move || at.status().bookmark.clone(),
            move |r| seen.status().retention = Some(r.clone()),
        ));
    }
    while !shutdown.is_cancelled() {
        if slot.desired() != Desired::Running || !slot.placed() {
            if !slot.placed() {
                slot.set_phase(Phase::Elsewhere);
            }
            slot.tick_due.store(false, Ordering::SeqCst);
            slot.run_now.store(false, Ordering::SeqCst);
            tokio::select! {
                () = slot.wake.notified() => {}
                () = shutdown.cancelled() => return,
            }
            continue;
        }
        let failed = slot.status().phase == Phase::Failed;
        if slot.plan.continuous {
            if failed && !wait_retry(&slot, &shutdown).await {
                continue;
            }
        } else if !triggered(&slot, &shutdown, failed).await {
            continue;
        }
        if shutdown.is_cancelled() || slot.desired() != Desired::Running || !slot.placed() {
            continue;
        }
        if let Some(cluster) = &cluster {
            cluster.starting(&slot).await;
        }
        run_once(&slot, &store, &shutdown, leasing).await;
    }
}

/// Connects the store and reads the wish, retrying with backoff; `None` on shutdown.
async fn start(slot: &Arc<Slot>, shutdown: &CancellationToken) -> Option<Arc<dyn StateStore>> {
    loop {
        let attempt = async {
            let store = slot
                .store
                .get_or_try_init(|| slot.plan.state.connect())
                .await?
                .clone();
            let desired = control::load(&store, &slot.control_key).await?;
            let stored = store.get(slot.key()).await?;
            Ok::<_, FaucetError>((store, desired, stored))
        };
        let result = tokio::select! {
            r = attempt => r,
            () = shutdown.cancelled() => return None,
        };
        match result {
            Ok((store, desired, stored)) => {
                {
                    let mut st = slot.status();
                    st.bookmark = stored
                        .map(faucet_core::pipeline::stored_bookmark)
                        .filter(|b| !b.is_null());
                    st.failures = 0;
                    st.error = None;
                    st.retry_at = None;
                }
                slot.set_phase(if slot.plan.continuous {
                    Phase::Running
                } else {
                    Phase::Scheduled
                });
                slot.set_desired(desired);
                return Some(store);
            }
            Err(e) => {
                failure(slot, &format!("cannot start: {}", output::error_chain(&e)));
                if !wait_retry(slot, shutdown).await && shutdown.is_cancelled() {
                    return None;
                }
            }
        }
    }
}

/// Bounded rows: waits for a tick, `POST …/run` or (after a failure) the retry time. `false`
/// when woken for another reason (the caller checks the wish again).
async fn triggered(slot: &Arc<Slot>, shutdown: &CancellationToken, failed: bool) -> bool {
    let take =
        || slot.tick_due.swap(false, Ordering::SeqCst) | slot.run_now.swap(false, Ordering::SeqCst);
    if take() {
        return true;
    }
    if !failed {
        slot.set_phase(Phase::Scheduled);
    }
    let retry = retry_delay(slot);
    tokio::select! {
        () = slot.wake.notified() => take(),
        () = shutdown.cancelled() => false,
        () = sleep_or_forever(retry) => true,
    }
}

/// Waits out the retry delay of a FAILED row; `false` when woken early (a wish changed) or
/// shut down.
async fn wait_retry(slot: &Arc<Slot>, shutdown: &CancellationToken) -> bool {
    let retry = retry_delay(slot);
    tokio::select! {
        () = slot.wake.notified() => {
            // A wake for a tick or a run-now does not cut a retry delay short.
            slot.tick_due.store(false, Ordering::SeqCst);
            slot.run_now.swap(false, Ordering::SeqCst)
        }
        () = shutdown.cancelled() => false,
        () = sleep_or_forever(retry) => true,
    }
}

fn retry_delay(slot: &Slot) -> Option<Duration> {
    slot.status()
        .retry_at
        .map(|at| (at - Utc::now()).to_std().unwrap_or_default())
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Records a failed attempt: FAILED, the error, the retry time.
fn failure(slot: &Slot, message: &str) {
    slot.metrics.run_failed();
    let now = Utc::now();
    {
        let mut st = slot.status();
        st.failures = st.failures.saturating_add(1);
        let delay = backoff(st.failures);
        st.retry_at = chrono::Duration::from_std(delay).ok().map(|d| now + d);
        st.error = Some(message.to_owned());
        st.last_error = Some((message.to_owned(), now));
        tracing::error!(
            key = slot.key(),
            error = message,
            retry_in_secs = delay.as_secs(),
            "pipeline failed"
        );
    }
    slot.set_phase(Phase::Failed);
}

/// One run of the row, in its own task.
async fn run_once(
    slot: &Arc<Slot>,
    store: &Arc<dyn StateStore>,
    shutdown: &CancellationToken,
    leasing: Leasing,
) {
    let cancel = shutdown.child_token();
    *slot
        .run_cancel
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cancel.clone());
    // A pause (or a move) between the caller's check and the token's publication is seen
    // here.
    if slot.desired() != Desired::Running || !slot.placed() {
        cancel.cancel();
    }
    slot.running.store(true, Ordering::SeqCst);
    let pages_before = {
        let mut st = slot.status();
        st.runs += 1;
        st.pages
    };
    slot.set_phase(Phase::Running);
    tracing::info!(key = slot.key(), "run starting");
    let task = {
        let slot = slot.clone();
        let store = store.clone();
        let callback = slot.progress_callback();
        tokio::spawn(async move {
            plan::execute(&slot.plan, store, cancel, &leasing, Some(callback)).await
        })
    };
    let result = task.await;
    slot.running.store(false, Ordering::SeqCst);
    *slot
        .run_cancel
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    let moved = slot.status().pages > pages_before;
    match result {
        Ok(Ok(summary)) => {
            tracing::info!(
                key = slot.key(),
                records = summary.records_out,
                pages = summary.pages,
                cancelled = summary.cancelled,
                "run finished"
            );
            {
                let mut st = slot.status();
                st.failures = 0;
                st.error = None;
                st.retry_at = None;
                if let Some(lag) = summary.lag_seconds {
                    st.lag_seconds = Some(lag);
                }
            }
            if slot.plan.continuous && !summary.cancelled {
                // A continuous source ended by itself: start it again after a pause.
                failure(slot, "the continuous source ended; starting it again");
            } else {
                slot.set_phase(if slot.plan.continuous {
                    Phase::Running
                } else {
                    Phase::Scheduled
                });
            }
        }
        Ok(Err(e)) => {
            if moved {
                slot.status().failures = 0;
            }
            slot.metrics.run_error(&e);
            failure(
                slot,
                &format!("{}{}", slot.plan.context, output::error_chain(&e)),
            );
        }
        Err(join) => {
            failure(
                slot,
                &format!(
                    "the run stopped abnormally: {}",
                    output::clip_long_words(&join.to_string())
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let secs: Vec<u64> = (1..=9).map(|f| backoff(f).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }
}
