//! What the owner of a row reports to the other members ([`Report`], written into the
//! cluster database's status table at every heartbeat by [`super::cluster`]), and the
//! record rate every status shows ([`Rate`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::pipeline::{ProgressView, PublishedView};

/// The figures of one row as its owner last reported them: the state it shows, what its
/// runs wrote, its lag and its errors. A member that does not run the row shows these
/// instead of its own (empty) figures.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    /// The member that wrote it (the row's owner when it wrote it).
    pub(crate) member: String,
    /// RUNNING, PAUSED, STOPPED, FAILED or SCHEDULED, as the owner's own status shows it.
    pub(crate) state: String,
    /// Whether a run was going.
    pub(crate) running: bool,
    /// Records, pages and runs the owner's process wrote and started for the row.
    pub(crate) records: u64,
    pub(crate) pages: u64,
    pub(crate) runs: u64,
    /// Failed attempts in a row.
    pub(crate) failures: u32,
    /// Records per second over the owner's last [`RATE_WINDOW`] (`None` before one passed).
    pub(crate) rate: Option<f64>,
    /// Source lag of the last durable bookmark, seconds.
    pub(crate) lag_seconds: Option<f64>,
    /// The error while FAILED.
    pub(crate) error: Option<String>,
    /// The last error ever, and when.
    pub(crate) last_error: Option<(String, DateTime<Utc>)>,
    /// When a FAILED row tries again.
    pub(crate) retry_at: Option<DateTime<Utc>>,
    /// When the owner's last bookmark became durable (the owner's clock).
    pub(crate) bookmark_at: Option<DateTime<Utc>>,
    /// How old the report is, seconds, by the cluster database's clock (0 when written).
    pub(crate) age_seconds: f64,
    /// Records per target the owner's process wrote (see `PipelineView::targets`).
    pub(crate) targets: BTreeMap<String, u64>,
    /// The owner's progress of its run through the source, while it has one.
    pub(crate) progress: Option<ProgressView>,
    /// What the owner's bus sink published (see `PipelineView::published`).
    pub(crate) published: Option<PublishedView>,
}

/// What a [`Report`] carries as one JSON document (the status table's `detail` column):
/// `{"targets": {...}, "progress": {...} | null}`. Fields added later are read with their
/// defaults from rows an older member wrote.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) struct ReportDetail {
    /// [`Report::targets`].
    #[serde(default)]
    pub(crate) targets: BTreeMap<String, u64>,
    /// [`Report::progress`].
    #[serde(default)]
    pub(crate) progress: Option<ProgressView>,
    /// [`Report::published`].
    #[serde(default)]
    pub(crate) published: Option<PublishedView>,
}

/// The window a [`Rate`] counts records in.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(5);

/// Records per second, over windows of [`RATE_WINDOW`]: the rate shown is that of the last
/// window that closed (a window closes at the first record or look after its end), so it
/// falls to 0 one window after the records stop.
#[derive(Debug, Clone)]
pub(crate) struct Rate {
    start: Instant,
    count: u64,
    last: Option<f64>,
}

impl Default for Rate {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl Rate {
    /// A rate whose first window starts at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            start: now,
            count: 0,
            last: None,
        }
    }

    /// Counts `records` written at `now`.
    pub(crate) fn add(&mut self, records: u64, now: Instant) {
        self.roll(now);
        self.count = self.count.saturating_add(records);
    }

    /// Records per second of the last closed window, as of `now` (`None` before one closed).
    pub(crate) fn per_second(&mut self, now: Instant) -> Option<f64> {
        self.roll(now);
        self.last
    }

    fn roll(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.start);
        if elapsed >= RATE_WINDOW {
            self.last = Some(self.count as f64 / elapsed.as_secs_f64());
            self.start = now;
            self.count = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_the_last_closed_window_and_falls_to_zero_when_records_stop() {
        let t0 = Instant::now();
        let mut r = Rate::new(t0);
        assert_eq!(r.per_second(t0), None);
        r.add(100, t0 + Duration::from_secs(1));
        r.add(400, t0 + Duration::from_secs(4));
        assert_eq!(r.per_second(t0 + Duration::from_secs(4)), None);
        assert_eq!(r.per_second(t0 + Duration::from_secs(5)), Some(100.0));
        // Shown until the next window closes.
        assert_eq!(r.per_second(t0 + Duration::from_secs(9)), Some(100.0));
        assert_eq!(r.per_second(t0 + Duration::from_secs(10)), Some(0.0));
        // A burst after a long pause counts in a window that starts at the burst.
        r.add(50, t0 + Duration::from_secs(100));
        assert_eq!(r.per_second(t0 + Duration::from_secs(105)), Some(10.0));
    }
}
