//! The ticker of a scheduled row: at each tick of its cron schedule, hands the supervisor a
//! run — or skips the tick (counted, logged) while the row's last run is still going, the
//! overlap policy peers default to. Ticks while the row is PAUSED or STOPPED are dropped
//! uncounted. A tick noticed more than [`LATE`] after its time (a suspended or overloaded
//! host) still runs once and is counted late; the ticks missed meanwhile are not caught up.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::cluster::Coordinator;
use super::control::Desired;
use super::pipeline::Slot;
use crate::config::schedule::Schedule;

/// How late a tick may be noticed before it counts as late.
pub(crate) const LATE: Duration = Duration::from_secs(1);

/// Ticks `schedule` for `slot` until `shutdown`. With a `cluster`, only the member the row is
/// placed on acts on a tick, and only after claiming it in the cluster database
/// ([`Coordinator::claim_tick`]): each tick runs once across members.
pub(crate) async fn tick(
    slot: Arc<Slot>,
    schedule: Schedule,
    shutdown: CancellationToken,
    cluster: Option<Arc<dyn Coordinator>>,
) {
    let mut after = Utc::now();
    loop {
        let Some(next) = schedule.next_after(after) else {
            tracing::warn!(key = slot.key(), "the schedule has no further tick");
            slot.status().next_run_at = None;
            return;
        };
        slot.status().next_run_at = Some(next);
        let wait = (next - Utc::now()).to_std().unwrap_or_default();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => return,
        }
        let now = Utc::now();
        // The monotonic sleep may end a little before the wall clock reaches `next`.
        after = now.max(next);
        if (now - next).to_std().is_ok_and(|late| late > LATE) {
            slot.metrics.tick_late();
            slot.status().ticks_late += 1;
            tracing::warn!(key = slot.key(), tick = %next, "a schedule tick came late");
        }
        if slot.desired() != Desired::Running || !slot.placed() {
            continue;
        }
        if slot.is_running() {
            slot.metrics.tick_skipped();
            slot.status().ticks_skipped += 1;
            tracing::warn!(
                key = slot.key(),
                tick = %next,
                "schedule tick skipped: the last run is still going"
            );
            continue;
        }
        if let Some(cluster) = &cluster
            && !cluster.claim_tick(slot.key(), next).await
        {
            tracing::debug!(key = slot.key(), tick = %next, "tick claimed by another member");
            continue;
        }
        slot.metrics.tick_run();
        slot.status().ticks_run += 1;
        slot.tick_due.store(true, Ordering::SeqCst);
        slot.wake.notify_one();
    }
}
