//! Sampling what a row's source upstream retains for it (`Source::retention_monitor`; for
//! `postgres-cdc` the slot's retained WAL and retention horizon, for `mongodb-cdc` the oplog
//! window and the bookmark's age in it), for `faucet serve` (all the time, also while the row
//! is stopped or failing — that is when the horizon matters) and `faucet run
//! --metrics-listen` (while the run goes).
//!
//! Every [`SAMPLE_EVERY`] one sample, given the row's last durable bookmark: the metrics
//! (`faucet_slot_retained_wal_bytes` and `faucet_slot_retention_horizon_seconds` — +Inf,
//! written `inf`, which Prometheus reads as +Inf, when there is no horizon: an unlimited
//! `max_slot_wal_keep_size`, no WAL written, or no rate yet — for a slot;
//! `faucet_oplog_window_seconds` for an oplog), the row's status, and a log warning at most
//! every [`WARN_EVERY`] while the position is in danger: a slot's horizon under
//! [`WARN_UNDER`], an oplog bookmark's age at least [`faucet_core::Retention::NEAR_WINDOW`]
//! of the window. A failed sample is logged (at most every [`WARN_EVERY`]) and changes
//! nothing.

use std::time::{Duration, Instant};

use faucet_core::{Bookmark, Retention, RetentionMonitor};
use tokio_util::sync::CancellationToken;

use super::metrics::RowMetrics;

/// How often the retention is sampled: every 5 s.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// The horizon under which the log warns: 1 hour.
pub(crate) const WARN_UNDER: Duration = Duration::from_secs(3600);

/// The least time between two warnings of one row: 1 minute.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(60);

/// Samples `monitor` until `stop` (module docs), each time with the row's last durable
/// bookmark as `bookmark` gives it; `seen` gets every sample.
pub(crate) async fn sample_until(
    mut monitor: Box<dyn RetentionMonitor>,
    metrics: RowMetrics,
    key: String,
    stop: CancellationToken,
    bookmark: impl Fn() -> Option<Bookmark> + Send,
    seen: impl Fn(&Retention) + Send,
) {
    let mut warned: Option<Instant> = None;
    let mut failed: Option<Instant> = None;
    let quiet = |last: Option<Instant>| last.is_some_and(|t| t.elapsed() < WARN_EVERY);
    loop {
        let at = bookmark();
        let sampled = tokio::select! {
            s = monitor.sample(at.as_ref()) => s,
            () = stop.cancelled() => return,
        };
        match sampled {
            Ok(r) => {
                metrics.retention(&r);
                seen(&r);
                if r.window_seconds.is_some() {
                    if r.near_window_end() && !quiet(warned) {
                        warned = Some(Instant::now());
                        let secs = |s: Option<f64>| {
                            humantime::format_duration(Duration::from_secs(s.unwrap_or(0.0) as u64))
                        };
                        tracing::warn!(
                            key,
                            bookmark_age_seconds = r.bookmark_age_seconds,
                            oplog_window_seconds = r.window_seconds,
                            "this pipeline's position is {} behind the newest oplog entry and \
                             the oplog holds {}: if it fell behind by the whole window its \
                             resume token would leave the oplog (error 286) and the \
                             collections would need a new copy (faucet replicate); keep the \
                             pipeline running, or enlarge the oplog (replSetResizeOplog)",
                            secs(r.bookmark_age_seconds),
                            secs(r.window_seconds)
                        );
                    }
                } else if let Some(h) = r.horizon_seconds
                    && h < WARN_UNDER.as_secs_f64()
                    && !quiet(warned)
                {
                    warned = Some(Instant::now());
                    tracing::warn!(
                        key,
                        horizon_seconds = h.round(),
                        retained_bytes = r.retained_bytes,
                        limit_bytes = r.limit_bytes,
                        "if this pipeline stayed stopped, its replication slot would be \
                         invalidated (max_slot_wal_keep_size) in about {} at the WAL rate of \
                         the last minutes",
                        humantime::format_duration(Duration::from_secs(h as u64))
                    );
                }
            }
            Err(e) if !quiet(failed) => {
                failed = Some(Instant::now());
                tracing::warn!(key, error = %e, "cannot sample the source's retention");
            }
            Err(_) => {}
        }
        tokio::select! {
            () = tokio::time::sleep(SAMPLE_EVERY) => {}
            () = stop.cancelled() => return,
        }
    }
}
