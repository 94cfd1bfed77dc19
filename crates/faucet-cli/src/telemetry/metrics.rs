//! Prometheus metrics of pipeline runs, for `faucet serve`'s `/metrics` and `faucet run
//! --metrics-listen`.
//!
//! Recorded through the `metrics` facade and rendered by `metrics-exporter-prometheus`'s
//! recorder (its own HTTP listener is compiled out; the text is served by our axum handler).
//! Names follow Prometheus' conventions (prefix `faucet_`, base units, `_total` on counters,
//! `_timestamp_seconds` for times); the labels are `pipeline` (the file's `name`) and `row`
//! (the matrix row id, empty without a matrix), so cardinality is the number of rows; only
//! `faucet_target_records_total` adds `target`, bounded per row by [`MAX_TARGETS`].
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `faucet_records_total` | counter | records written to the sink (pages whose bookmark is durable) |
//! | `faucet_target_records_total` | counter | the same per target (label `target`: a file, table, stream or subject as the sink names it, [`faucet_core::SinkWriter::written_targets`], e.g. each file of a routed jsonl `path`); the first [`MAX_TARGETS`] targets of a row are named, the records of any further ones count under `target="(other)"`; no series for a sink that does not name its targets |
//! | `faucet_pages_total` | counter | pages written |
//! | `faucet_sink_messages_total` | counter | bus sinks (`nats`, `redis-streams`, `kafka`): messages published and acknowledged ([`faucet_core::PublishStats`]; a replayed page's messages found stored already are not sent again, and not counted) |
//! | `faucet_sink_bytes_total` | counter | bus sinks: bytes of those messages' key, value and faucet headers (the bus's framing not counted) |
//! | `faucet_sink_acks_pending` | gauge | bus sinks: the most publishes that awaited their acknowledgement at once during the last page (a page is durable only when all are in, so none is pending between pages) |
//! | `faucet_sink_publish_seconds` | summary | bus sinks: per page, the seconds from its first publish to its last acknowledgement (`_count` pages, `_sum` seconds, quantiles) |
//! | `faucet_last_bookmark_timestamp_seconds` | gauge | Unix time the last bookmark became durable |
//! | `faucet_source_lag_seconds` | gauge | the source lag of the last durable bookmark (`RunSummary::lag_seconds`) |
//! | `faucet_run_failures_total` | counter | runs that ended with an error |
//! | `faucet_pipeline_failed` | gauge | 1 while the row is FAILED (waiting to retry), else 0 (`faucet serve`) |
//! | `faucet_pipeline_paused` | gauge | 1 while the row is PAUSED or STOPPED, else 0 (`faucet serve`) |
//! | `faucet_schedule_ticks_run_total` | counter | schedule ticks that started a run |
//! | `faucet_schedule_ticks_skipped_total` | counter | ticks skipped because the row's last run was still going |
//! | `faucet_schedule_ticks_late_total` | counter | ticks noticed more than 1 s after their time (a busy or suspended host) |
//! | `faucet_slot_retained_wal_bytes` | gauge | postgres-cdc: WAL the slot retains, `pg_current_wal_lsn() - restart_lsn` (see [`super::retention`]) |
//! | `faucet_slot_retention_horizon_seconds` | gauge | postgres-cdc: seconds until the slot would be invalidated if the pipeline stayed stopped; `+Inf` (written `inf`) without a horizon |
//! | `faucet_oplog_window_seconds` | gauge | mongodb-cdc: the oplog window, the newest oplog entry's time minus the oldest's (how long a stopped pipeline may stay stopped before its resume token leaves the oplog) |
//! | `faucet_fence_refused_writes_total` | counter | pages the sink refused because a newer run of the key holds a larger fence (`LeaseError::Fenced`) |
//! | `faucet_pipelines_moved_total` | counter | runs this member started of a row another member owned before (`--cluster`) |

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use faucet_core::pipeline::Progress;
use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

const RECORDS: &str = "faucet_records_total";
const TARGET_RECORDS: &str = "faucet_target_records_total";

/// The most targets a row's per-target counts (metrics and status) name; past it, records
/// of a target not yet named count under [`OTHER_TARGETS`], so a stream of ever new tables
/// cannot grow the series without bound.
pub(crate) const MAX_TARGETS: usize = 1000;
/// The target name the records of targets past [`MAX_TARGETS`] are counted under.
pub(crate) const OTHER_TARGETS: &str = "(other)";
const PAGES: &str = "faucet_pages_total";
const SINK_MESSAGES: &str = "faucet_sink_messages_total";
const SINK_BYTES: &str = "faucet_sink_bytes_total";
const SINK_ACKS_PENDING: &str = "faucet_sink_acks_pending";
const SINK_PUBLISH: &str = "faucet_sink_publish_seconds";
const BOOKMARK_AT: &str = "faucet_last_bookmark_timestamp_seconds";
const LAG: &str = "faucet_source_lag_seconds";
const FAILURES: &str = "faucet_run_failures_total";
const FAILED: &str = "faucet_pipeline_failed";
const PAUSED: &str = "faucet_pipeline_paused";
const TICKS_RUN: &str = "faucet_schedule_ticks_run_total";
const TICKS_SKIPPED: &str = "faucet_schedule_ticks_skipped_total";
const TICKS_LATE: &str = "faucet_schedule_ticks_late_total";
const FENCE_REFUSED: &str = "faucet_fence_refused_writes_total";
const RETAINED_WAL: &str = "faucet_slot_retained_wal_bytes";
const HORIZON: &str = "faucet_slot_retention_horizon_seconds";
const OPLOG_WINDOW: &str = "faucet_oplog_window_seconds";
const MOVED: &str = "faucet_pipelines_moved_total";

/// Installs the process-wide Prometheus recorder and describes every metric (their `# HELP`
/// lines).
///
/// # Errors
/// When a recorder is already installed (a programming error: call it once).
pub(crate) fn install() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    describe_counter!(RECORDS, Unit::Count, "Records written to the sink.");
    describe_counter!(
        TARGET_RECORDS,
        Unit::Count,
        "Records written to each target of the sink (a file, table or stream)."
    );
    describe_counter!(PAGES, Unit::Count, "Pages written to the sink.");
    describe_counter!(
        SINK_MESSAGES,
        Unit::Count,
        "Bus sinks: messages published and acknowledged."
    );
    describe_counter!(
        SINK_BYTES,
        Unit::Bytes,
        "Bus sinks: bytes of the messages' key, value and headers."
    );
    describe_gauge!(
        SINK_ACKS_PENDING,
        Unit::Count,
        "Bus sinks: the most publishes awaiting their acknowledgement at once during the last page."
    );
    describe_histogram!(
        SINK_PUBLISH,
        Unit::Seconds,
        "Bus sinks: per page, seconds from its first publish to its last acknowledgement."
    );
    describe_gauge!(
        BOOKMARK_AT,
        Unit::Seconds,
        "Unix time at which the last bookmark became durable."
    );
    describe_gauge!(
        LAG,
        Unit::Seconds,
        "Source lag of the last durable bookmark: when it became durable minus the source's time of that position."
    );
    describe_counter!(FAILURES, Unit::Count, "Runs that ended with an error.");
    describe_gauge!(
        FAILED,
        "1 while the pipeline row is FAILED and waiting to retry."
    );
    describe_gauge!(PAUSED, "1 while the pipeline row is PAUSED or STOPPED.");
    describe_counter!(TICKS_RUN, Unit::Count, "Schedule ticks that started a run.");
    describe_counter!(
        TICKS_SKIPPED,
        Unit::Count,
        "Schedule ticks skipped because the row's last run was still going."
    );
    describe_counter!(
        TICKS_LATE,
        Unit::Count,
        "Schedule ticks noticed more than one second after their time."
    );
    describe_counter!(
        FENCE_REFUSED,
        Unit::Count,
        "Pages the sink refused because a newer run of the state key holds a larger fence."
    );
    describe_gauge!(
        RETAINED_WAL,
        Unit::Bytes,
        "WAL the replication slot retains: pg_current_wal_lsn() - restart_lsn."
    );
    describe_gauge!(
        HORIZON,
        Unit::Seconds,
        "Seconds until the replication slot would be invalidated if the pipeline stayed stopped, at the WAL rate of the last minutes; +Inf without a limit or without WAL written."
    );
    describe_gauge!(
        OPLOG_WINDOW,
        Unit::Seconds,
        "MongoDB: the oplog window, newest minus oldest oplog entry time; a pipeline stopped longer loses its resume token."
    );
    describe_counter!(
        MOVED,
        Unit::Count,
        "Runs this member started of a pipeline row another member owned before (--cluster)."
    );
    Ok(handle)
}

/// The text exposition format's content type.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The labels of one pipeline row, and the metrics recorded under them.
#[derive(Debug, Clone)]
pub(crate) struct RowMetrics {
    pipeline: String,
    row: String,
    /// The targets named so far (at most [`MAX_TARGETS`]), shared by the row's runs.
    targets: Arc<Mutex<HashSet<String>>>,
}

impl RowMetrics {
    /// The metrics of row `row` (`None` without a matrix) of pipeline `pipeline`; every
    /// series starts at 0, so a rate is defined from the first scrape.
    pub(crate) fn new(pipeline: &str, row: Option<&str>) -> Self {
        let m = Self {
            pipeline: pipeline.to_owned(),
            row: row.unwrap_or_default().to_owned(),
            targets: Arc::default(),
        };
        for name in [
            RECORDS,
            PAGES,
            FAILURES,
            TICKS_RUN,
            TICKS_SKIPPED,
            TICKS_LATE,
            FENCE_REFUSED,
            MOVED,
        ] {
            counter!(name, &m.labels()).increment(0);
        }
        m
    }

    fn labels(&self) -> [(&'static str, String); 2] {
        [
            ("pipeline", self.pipeline.clone()),
            ("row", self.row.clone()),
        ]
    }

    /// A page of `records` records in `pages` pages became durable (a bookmark when
    /// `bookmarked`), with the source `lag`.
    fn page(&self, records: u64, pages: u64, lag: Option<Duration>, bookmarked: bool) {
        let labels = self.labels();
        counter!(RECORDS, &labels).increment(records);
        counter!(PAGES, &labels).increment(pages);
        if bookmarked {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            gauge!(BOOKMARK_AT, &labels).set(now.as_secs_f64());
        }
        if let Some(lag) = lag {
            gauge!(LAG, &labels).set(lag.as_secs_f64());
        }
    }

    /// A page published `p` (a bus sink, [`faucet_core::PublishStats`]).
    fn published(&self, p: &faucet_core::PublishStats) {
        let labels = self.labels();
        counter!(SINK_MESSAGES, &labels).increment(p.messages);
        counter!(SINK_BYTES, &labels).increment(p.bytes);
        gauge!(SINK_ACKS_PENDING, &labels).set(p.acks_pending as f64);
        histogram!(SINK_PUBLISH, &labels).record(p.publish_seconds);
    }

    /// `targets` (a page's records per target) under the names the row counts them by:
    /// a target's own name while fewer than [`MAX_TARGETS`] are named, else
    /// [`OTHER_TARGETS`]; each counted in `faucet_target_records_total`.
    fn targets(&self, targets: &[(String, u64)]) -> Vec<(String, u64)> {
        if targets.is_empty() {
            return Vec::new();
        }
        let mut named = self
            .targets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<(String, u64)> = Vec::with_capacity(targets.len());
        for (target, records) in targets {
            let name = if named.contains(target) {
                target.clone()
            } else if named.len() < MAX_TARGETS {
                named.insert(target.clone());
                target.clone()
            } else {
                OTHER_TARGETS.to_owned()
            };
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some((_, sum)) => *sum += records,
                None => out.push((name, *records)),
            }
        }
        drop(named);
        let [pipeline, row] = self.labels();
        for (target, records) in &out {
            let labels = [pipeline.clone(), row.clone(), ("target", target.clone())];
            counter!(TARGET_RECORDS, &labels).increment(*records);
        }
        out
    }

    /// A run ended with an error.
    pub(crate) fn run_failed(&self) {
        counter!(FAILURES, &self.labels()).increment(1);
    }

    /// A run ended with `e`: when the sink refused its page for a stale fence
    /// ([`LeaseError::Fenced`](faucet_core::state::LeaseError::Fenced)), that refusal is
    /// counted (beside [`RowMetrics::run_failed`], which the caller records too).
    pub(crate) fn run_error(&self, e: &faucet_core::FaucetError) {
        if matches!(
            e,
            faucet_core::FaucetError::Lease(faucet_core::state::LeaseError::Fenced { .. })
        ) {
            counter!(FENCE_REFUSED, &self.labels()).increment(1);
        }
    }

    /// A retention sample of the row's source ([`super::retention`]).
    pub(crate) fn retention(&self, r: &faucet_core::Retention) {
        let labels = self.labels();
        // A slot's figures where the upstream retains bytes for the pipeline (postgres-cdc).
        if let Some(bytes) = r.retained_bytes {
            gauge!(RETAINED_WAL, &labels).set(bytes as f64);
            gauge!(HORIZON, &labels).set(r.horizon_seconds.unwrap_or(f64::INFINITY));
        }
        if let Some(window) = r.window_seconds {
            gauge!(OPLOG_WINDOW, &labels).set(window);
        }
    }

    /// Whether the row is FAILED and PAUSED/STOPPED now.
    pub(crate) fn set_state(&self, failed: bool, paused: bool) {
        let labels = self.labels();
        gauge!(FAILED, &labels).set(f64::from(u8::from(failed)));
        gauge!(PAUSED, &labels).set(f64::from(u8::from(paused)));
    }

    /// A schedule tick started a run.
    pub(crate) fn tick_run(&self) {
        counter!(TICKS_RUN, &self.labels()).increment(1);
    }

    /// A schedule tick was skipped: the last run was still going.
    pub(crate) fn tick_skipped(&self) {
        counter!(TICKS_SKIPPED, &self.labels()).increment(1);
    }

    /// A schedule tick came late.
    pub(crate) fn tick_late(&self) {
        counter!(TICKS_LATE, &self.labels()).increment(1);
    }

    /// The row moved to this member from another (`--cluster`).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn moved(&self) {
        counter!(MOVED, &self.labels()).increment(1);
    }

    /// An observer of one run's progress reports.
    pub(crate) fn observer(&self) -> RunObserver {
        RunObserver {
            metrics: self.clone(),
            seen: Mutex::new((0, 0)),
        }
    }
}

/// Turns one run's cumulative progress reports into metric increments.
#[derive(Debug)]
pub(crate) struct RunObserver {
    metrics: RowMetrics,
    /// Records and pages of this run already counted.
    seen: Mutex<(u64, u64)>,
}

/// What one progress report added: records and pages since the last report, and the page's
/// records per target under the names the row counts them by ([`RowMetrics`], at most
/// [`MAX_TARGETS`] names and [`OTHER_TARGETS`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Added {
    pub(crate) records: u64,
    pub(crate) pages: u64,
    pub(crate) targets: Vec<(String, u64)>,
}

impl RunObserver {
    /// Records the page `p` reports; returns what it added.
    pub(crate) fn page(&self, p: &Progress) -> Added {
        let (records, pages) = {
            let mut seen = self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let delta = (
                p.records.saturating_sub(seen.0),
                p.pages.saturating_sub(seen.1),
            );
            *seen = (p.records.max(seen.0), p.pages.max(seen.1));
            delta
        };
        self.metrics
            .page(records, pages, p.lag, p.bookmark.is_some());
        if let Some(published) = &p.published {
            self.metrics.published(published);
        }
        Added {
            records,
            pages,
            targets: self.metrics.targets(&p.targets),
        }
    }
}

/// Serves only `GET /metrics` on `addr` (`faucet run --metrics-listen`), until the process
/// exits. Returns the bound address.
///
/// # Errors
/// When the address cannot be bound.
pub(crate) async fn serve_alone(
    addr: SocketAddr,
    handle: PrometheusHandle,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = handle.render();
            async move { ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], text) }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(bound)
}
