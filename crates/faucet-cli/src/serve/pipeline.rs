//! One served pipeline row ([`Slot`]): its plan, its state store, what the operator asked
//! ([`Desired`]), what it is doing ([`Phase`]) and the figures `GET /pipelines/{key}` shows;
//! and the [`Registry`] of every row, by state key.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use faucet_core::pipeline::{Progress, ProgressFn};
use faucet_core::state::StateStore;
use faucet_core::{Extent, ExtentUnit};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{Notify, OnceCell};
use tokio_util::sync::CancellationToken;

use super::control::Desired;
use super::report::{Rate, Report};
use crate::commands::plan::Prepared;
use crate::telemetry::metrics::RowMetrics;

/// What a row is doing, apart from the operator's wish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Connecting its state store and reading its control entry.
    Starting,
    /// A run is going.
    Running,
    /// Bounded: waiting for its next tick (or `POST …/run`).
    Scheduled,
    /// The last attempt failed; waiting to retry (`retry_at`).
    Failed,
    /// `--cluster`: placed on another member (or on none), so not run here.
    Elsewhere,
}

/// The figures of a row.
#[derive(Debug)]
pub(crate) struct Status {
    /// The operator's wish.
    pub(crate) desired: Desired,
    /// What the row is doing.
    pub(crate) phase: Phase,
    /// The last durable bookmark (read from the store at start, then from each page).
    pub(crate) bookmark: Option<Value>,
    /// When it became durable (`None` for a bookmark found at start).
    pub(crate) bookmark_at: Option<DateTime<Utc>>,
    /// The source lag of the last durable bookmark, seconds.
    pub(crate) lag_seconds: Option<f64>,
    /// The last retention sample of the source ([`crate::telemetry::retention`]).
    pub(crate) retention: Option<faucet_core::Retention>,
    /// How far along the read was at the last page written, and its time left
    /// ([`Progress::extent`], [`Progress::eta`]); `None` when its source did not know its
    /// end, or before the first page. Kept between runs (a bounded row's last run shows
    /// where it ended).
    pub(crate) progress: Option<ProgressView>,
    /// Records and pages this process wrote for the row.
    pub(crate) records: u64,
    pub(crate) pages: u64,
    /// `records` per target, as the sink names them (at most
    /// [`crate::telemetry::metrics::MAX_TARGETS`] names, the rest under `(other)`).
    pub(crate) targets: BTreeMap<String, u64>,
    /// What a bus sink published for the row in this process (`None` for other sinks).
    pub(crate) published: Option<PublishedView>,
    /// The last schema change this process delivered per source table.
    pub(crate) schema_changes: BTreeMap<String, SchemaChangeView>,
    /// The rate of `records`.
    pub(crate) rate: Rate,
    /// Runs started.
    pub(crate) runs: u64,
    /// Failed attempts in a row (0 after a success).
    pub(crate) failures: u32,
    /// The error of the failing attempt while FAILED.
    pub(crate) error: Option<String>,
    /// The last error ever, and when.
    pub(crate) last_error: Option<(String, DateTime<Utc>)>,
    /// The next tick (bounded rows).
    pub(crate) next_run_at: Option<DateTime<Utc>>,
    /// When a failed row tries again.
    pub(crate) retry_at: Option<DateTime<Utc>>,
    /// Ticks that started a run, were skipped, came late.
    pub(crate) ticks_run: u64,
    pub(crate) ticks_skipped: u64,
    pub(crate) ticks_late: u64,
}

/// A state store connected once for all the rows configured with it.
pub(crate) type SharedStore = Arc<OnceCell<Arc<dyn StateStore>>>;

/// One pipeline row under `faucet serve`.
pub(crate) struct Slot {
    /// The planned row.
    pub(crate) plan: Prepared,
    /// The pipeline file it comes from.
    pub(crate) file: String,
    /// Its control entry's key ([`super::control`]).
    pub(crate) control_key: String,
    /// Its metrics.
    pub(crate) metrics: RowMetrics,
    /// Its state store, once connected: shared by every row whose store is the same
    /// ([`SharedStore`]), so they share one connection pool.
    pub(crate) store: SharedStore,
    status: Mutex<Status>,
    /// Wakes the supervisor: the wish changed, a tick is due, a run was asked for.
    pub(crate) wake: Notify,
    /// A tick is due.
    pub(crate) tick_due: AtomicBool,
    /// `POST …/run` asked for a run.
    pub(crate) run_now: AtomicBool,
    /// A run is going.
    pub(crate) running: AtomicBool,
    /// Cancels the run going, when there is one.
    pub(crate) run_cancel: Mutex<Option<CancellationToken>>,
    /// Whether the row is placed on this member (always, without `--cluster`).
    placed: AtomicBool,
}

impl Slot {
    /// A row that has not started, its state store connected (once) through `store`.
    pub(crate) fn new(
        plan: Prepared,
        file: String,
        control_key: String,
        store: SharedStore,
    ) -> Self {
        let metrics = RowMetrics::new(&plan.pipeline, plan.id.as_deref());
        Self {
            plan,
            file,
            control_key,
            metrics,
            store,
            status: Mutex::new(Status {
                desired: Desired::Running,
                phase: Phase::Starting,
                bookmark: None,
                bookmark_at: None,
                lag_seconds: None,
                retention: None,
                progress: None,
                records: 0,
                pages: 0,
                targets: BTreeMap::new(),
                published: None,
                schema_changes: BTreeMap::new(),
                rate: Rate::default(),
                runs: 0,
                failures: 0,
                error: None,
                last_error: None,
                next_run_at: None,
                retry_at: None,
                ticks_run: 0,
                ticks_skipped: 0,
                ticks_late: 0,
            }),
            wake: Notify::new(),
            tick_due: AtomicBool::new(false),
            run_now: AtomicBool::new(false),
            running: AtomicBool::new(false),
            run_cancel: Mutex::new(None),
            placed: AtomicBool::new(true),
        }
    }

    /// The state key.
    pub(crate) fn key(&self) -> &str {
        &self.plan.state_key
    }

    /// The figures, locked.
    pub(crate) fn status(&self) -> MutexGuard<'_, Status> {
        self.status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The operator's wish.
    pub(crate) fn desired(&self) -> Desired {
        self.status().desired
    }

    /// Whether a run is going.
    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Sets the phase (and the FAILED / PAUSED gauges).
    pub(crate) fn set_phase(&self, phase: Phase) {
        let mut st = self.status();
        st.phase = phase;
        self.publish(&st);
    }

    /// Whether the row is placed on this member ([`super::cluster`]; always without it).
    pub(crate) fn placed(&self) -> bool {
        self.placed.load(Ordering::SeqCst)
    }

    /// Places the row on this member or elsewhere: when it leaves, the run going is
    /// cancelled (it finishes its page in hand, persists, releases its lease: the handover);
    /// either way the supervisor is woken.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn set_placed(&self, here: bool) {
        if self.placed.swap(here, Ordering::SeqCst) == here {
            return;
        }
        if !here {
            self.cancel_run();
        }
        self.wake.notify_one();
    }

    /// Sets the wish, cancels the run going when it is not `Running`, wakes the supervisor.
    pub(crate) fn set_desired(&self, desired: Desired) {
        {
            let mut st = self.status();
            st.desired = desired;
            self.publish(&st);
        }
        if desired != Desired::Running {
            self.cancel_run();
        }
        self.wake.notify_one();
    }

    /// Cancels the run going, if any: it finishes its page in hand, persists, releases.
    fn cancel_run(&self) {
        if let Some(cancel) = self
            .run_cancel
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            cancel.cancel();
        }
    }

    fn publish(&self, st: &Status) {
        self.metrics.set_state(
            st.phase == Phase::Failed && st.desired == Desired::Running,
            st.desired != Desired::Running,
        );
    }

    /// The state the API shows.
    pub(crate) fn state_name(st: &Status) -> &'static str {
        match (st.desired, st.phase) {
            (Desired::Paused, _) => "PAUSED",
            (Desired::Stopped, _) => "STOPPED",
            (Desired::Running, Phase::Running) => "RUNNING",
            (Desired::Running, Phase::Failed) => "FAILED",
            (Desired::Running, Phase::Scheduled) => "SCHEDULED",
            (Desired::Running, Phase::Starting) => "SCHEDULED",
            (Desired::Running, Phase::Elsewhere) => "UNASSIGNED",
        }
    }

    /// The callback of one run: metrics, and the row's figures.
    pub(crate) fn progress_callback(self: &Arc<Self>) -> ProgressFn {
        let slot = self.clone();
        let observer = self.metrics.observer();
        Arc::new(move |p: &Progress| {
            let added = observer.page(p);
            let mut st = slot.status();
            st.records += added.records;
            st.pages += added.pages;
            st.rate.add(added.records, Instant::now());
            for (target, records) in added.targets {
                *st.targets.entry(target).or_default() += records;
            }
            if let Some(b) = &p.bookmark {
                st.bookmark = Some(b.clone());
                st.bookmark_at = Some(Utc::now());
            }
            if let Some(lag) = p.lag {
                st.lag_seconds = Some(lag.as_secs_f64());
            }
            st.progress = p.extent.as_ref().map(|e| ProgressView::new(e, p.eta));
            if let Some(page) = &p.published {
                st.published.get_or_insert_default().add(page);
            }
            let at = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
            for change in &p.schema_changes {
                st.schema_changes.insert(
                    change.table.clone(),
                    SchemaChangeView {
                        changes: change.changes.clone(),
                        position: change.position.clone(),
                        at: at.clone(),
                    },
                );
            }
        })
    }

    /// Sets the durable bookmark read from the state store for a row another member runs
    /// (`at`: when the store wrote it, where it keeps that).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn set_stored_bookmark(&self, bookmark: Option<Value>, at: Option<SystemTime>) {
        let mut st = self.status();
        st.bookmark = bookmark.filter(|b| !b.is_null());
        st.bookmark_at = at.map(DateTime::<Utc>::from);
    }

    /// What this member reports for the row as its owner ([`Report`]; `age_seconds` 0).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn report(&self, member: &str) -> Report {
        let mut st = self.status();
        Report {
            member: member.to_owned(),
            state: Self::state_name(&st).to_owned(),
            running: self.is_running(),
            records: st.records,
            pages: st.pages,
            runs: st.runs,
            failures: st.failures,
            rate: st.rate.per_second(Instant::now()),
            lag_seconds: st.lag_seconds,
            error: st.error.clone(),
            last_error: st.last_error.clone(),
            retry_at: st.retry_at,
            bookmark_at: st.bookmark_at,
            age_seconds: 0.0,
            targets: st.targets.clone(),
            progress: st.progress.clone(),
            published: st.published.clone(),
        }
    }

    /// The row as `GET /pipelines/{key}` shows it.
    ///
    /// `owner` is the member the row is placed on (`None`: no member is eligible). A row
    /// placed here shows this process's own figures. A row placed elsewhere shows the
    /// `report` of its owner (taken only when `owner` wrote it; the caller passes only
    /// reports of live owners) — its state, records, rate, lag and errors — with the
    /// bookmark this member read from the state store; with no report it is UNKNOWN (or
    /// UNASSIGNED without an owner). A PAUSED or STOPPED wish shows as such everywhere.
    pub(crate) fn view(&self, owner: Option<&str>, report: Option<&Report>) -> PipelineView {
        let mut st = self.status();
        let here = self.placed();
        let report = report.filter(|r| !here && Some(r.member.as_str()) == owner);
        let time = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        let state = match (st.desired, report) {
            (Desired::Running, _) if here => Self::state_name(&st).to_owned(),
            (Desired::Running, Some(r)) => r.state.clone(),
            (Desired::Running, None) if owner.is_some() => "UNKNOWN".to_owned(),
            _ => Self::state_name(&st).to_owned(),
        };
        let bookmark_at = st.bookmark_at.or(report.and_then(|r| r.bookmark_at));
        let now = Utc::now();
        let rate = st.rate.per_second(Instant::now());
        let local_error = st.last_error.as_ref().map(|(message, at)| ErrorView {
            message: message.clone(),
            at: time(at),
        });
        PipelineView {
            key: self.key().to_owned(),
            pipeline: self.plan.pipeline.clone(),
            row: self.plan.id.clone(),
            file: self.file.clone(),
            state,
            owner: owner.map(str::to_owned),
            here,
            running: report.map_or_else(|| self.is_running(), |r| r.running),
            continuous: self.plan.continuous,
            schedule: self.plan.schedule.as_ref().map(ToString::to_string),
            next_run_at: st.next_run_at.as_ref().map(time),
            bookmark: st.bookmark.clone(),
            bookmark_at: bookmark_at.as_ref().map(time),
            bookmark_age_seconds: bookmark_at
                .map(|at| (now - at).num_milliseconds().max(0) as f64 / 1000.0),
            lag_seconds: report.map_or(st.lag_seconds, |r| r.lag_seconds),
            retained_wal_bytes: st.retention.as_ref().and_then(|r| r.retained_bytes),
            retention_horizon_seconds: st.retention.as_ref().and_then(|r| r.horizon_seconds),
            oplog_window_seconds: st.retention.as_ref().and_then(|r| r.window_seconds),
            retention: st.retention.clone(),
            progress: match report {
                Some(r) => r.progress.clone(),
                None if here => st.progress.clone(),
                None => None,
            },
            records: report.map_or(st.records, |r| r.records),
            pages: report.map_or(st.pages, |r| r.pages),
            targets: report.map_or_else(|| st.targets.clone(), |r| r.targets.clone()),
            published: report.map_or_else(|| st.published.clone(), |r| r.published.clone()),
            schema_changes: st.schema_changes.clone(),
            rate_records_per_second: report.map_or(rate, |r| r.rate),
            runs: report.map_or(st.runs, |r| r.runs),
            failures: report.map_or(st.failures, |r| r.failures),
            retry_at: report
                .map_or(st.retry_at, |r| r.retry_at)
                .as_ref()
                .map(time),
            error: report.map_or_else(|| st.error.clone(), |r| r.error.clone()),
            last_error: match report {
                Some(r) => r.last_error.as_ref().map(|(message, at)| ErrorView {
                    message: message.clone(),
                    at: time(at),
                }),
                None => local_error,
            },
            report_age_seconds: report.map(|r| r.age_seconds),
            ticks: TicksView {
                run: st.ticks_run,
                skipped: st.ticks_skipped,
                late: st.ticks_late,
            },
        }
    }
}

/// `GET /pipelines/{key}`.
#[derive(Debug, Serialize)]
pub(crate) struct PipelineView {
    /// The state key, `{name}::{row id}` (or `{name}`).
    key: String,
    /// The pipeline's `name`.
    pipeline: String,
    /// The matrix row id (`null` without a matrix).
    row: Option<String>,
    /// The pipeline file.
    file: String,
    /// RUNNING, PAUSED, STOPPED, FAILED or SCHEDULED; with `--cluster`, for a row placed
    /// on another member the state its owner last reported, UNKNOWN while that live owner
    /// has not reported within a ttl, UNASSIGNED while no live member owns it.
    pub(crate) state: String,
    /// The member the row is placed on (`--member`; with `--cluster`, by placement; `null`
    /// while no member is eligible).
    owner: Option<String>,
    /// Whether it is placed on the member answering (else its figures are its owner's
    /// report, see `report_age_seconds`).
    here: bool,
    /// Whether a run is going (also while a PAUSED row finishes its page).
    running: bool,
    /// Whether the source is continuous (runs all the time).
    continuous: bool,
    /// The schedule, `*/5 * * * * (UTC)`.
    schedule: Option<String>,
    /// The next tick, RFC 3339 UTC.
    next_run_at: Option<String>,
    /// The last durable bookmark.
    bookmark: Option<Value>,
    /// When it became durable (null for one found in the store at start); for a row placed
    /// elsewhere, when the state store wrote it (`postgres`; else the owner's report).
    bookmark_at: Option<String>,
    /// Seconds since `bookmark_at`.
    bookmark_age_seconds: Option<f64>,
    /// Source lag of the last durable bookmark, seconds.
    lag_seconds: Option<f64>,
    /// postgres-cdc: WAL the slot retains, bytes (null for other sources, or before the
    /// first sample).
    retained_wal_bytes: Option<u64>,
    /// postgres-cdc: seconds until the slot would be invalidated if the row stayed stopped
    /// (null: no limit, no WAL written, or no rate yet); mongodb-cdc: seconds until the
    /// bookmark's resume token would leave the oplog (its cluster time minus the oldest
    /// entry's; null before a bookmark with a cluster time).
    retention_horizon_seconds: Option<f64>,
    /// mongodb-cdc: the oplog window, seconds (null for other sources, or before the first
    /// sample); the bookmark's age in it is `retention.bookmark_age_seconds`.
    oplog_window_seconds: Option<f64>,
    /// The whole last retention sample (`retained_bytes`, `limit_bytes`,
    /// `remaining_bytes`, `rate_bytes_per_second`, `horizon_seconds`, `window_seconds`,
    /// `bookmark_age_seconds`; [`faucet_core::Retention`]).
    retention: Option<faucet_core::Retention>,
    /// How far along the read was at the last page written (by the run going, or the last
    /// one), where the source knows its end: a csv / jsonl file's bytes, a table's estimated
    /// rows for a full read, a bounded change stream's WAL bytes ([`faucet_core::extent`]);
    /// null where it does not (a continuous change stream, a query, an incremental run
    /// after the first), before the first page, and for a row placed on another member.
    progress: Option<ProgressView>,
    /// Records written by this process.
    records: u64,
    /// Pages written by this process.
    pages: u64,
    /// `records` per target (`{"/data/out/public.orders.jsonl": 120}`): a file, table or
    /// stream as the sink names it; empty when the sink does not name its targets, and for
    /// a row whose figures are its owner's report. At most 1,000 names; the records of
    /// further targets count under `(other)`.
    targets: BTreeMap<String, u64>,
    /// What a bus sink (`nats`, `redis-streams`, `kafka`) published:
    /// `{messages, bytes, pages, acks_pending, publish_seconds, publish_seconds_mean}`
    /// ([`PublishedView`]); null for other sinks, and before the first page.
    published: Option<PublishedView>,
    /// The last schema change (`op: "s"`) this process delivered per source table:
    /// `{"public.items": {"changes": ["column `w` added, text"], "position": "lsn 0/16B3748",
    /// "at": "2026-12-06T12:00:00.000Z"}}` ([`SchemaChangeView`]); empty before one (this
    /// process's own: a row run by another member shows what this one delivered, if any).
    schema_changes: BTreeMap<String, SchemaChangeView>,
    /// Records per second over the last 5 s window (null before one passed).
    rate_records_per_second: Option<f64>,
    /// Runs started by this process.
    runs: u64,
    /// Failed attempts in a row.
    failures: u32,
    /// When a FAILED row tries again.
    retry_at: Option<String>,
    /// The error while FAILED.
    pub(crate) error: Option<String>,
    /// The last error, kept after a recovery.
    last_error: Option<ErrorView>,
    /// For a row placed elsewhere: the age of its owner's report the figures come from,
    /// seconds (null for a row placed here, or without a report).
    report_age_seconds: Option<f64>,
    /// Schedule ticks.
    ticks: TicksView,
}

/// `progress` of `GET /pipelines/{key}`: `{done, total, unit, percent, eta_seconds,
/// estimate, part}`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct ProgressView {
    /// Read so far, in `unit`, from the source's beginning.
    done: u64,
    /// To read in all, in `unit` (an estimate when `estimate`).
    total: u64,
    /// `bytes` (a file), `rows` (a table), `wal_bytes` (a change log).
    unit: ExtentUnit,
    /// The share read, 0–100 ([`Extent::percent`]: below 100 for an estimate until the read
    /// ends).
    percent: f64,
    /// The time left at the run's rate so far, seconds; null before a few seconds of data,
    /// at a zero rate, or past an estimated total.
    eta_seconds: Option<f64>,
    /// Whether `total` is an estimate (a table's row count from the catalog).
    estimate: bool,
    /// The part of the read the last page was in — a table of a `faucet replicate` copy —
    /// `{name, number, count, done, total, percent}`; null for a read without parts (and in
    /// a report of a member that does not send it).
    #[serde(default)]
    part: Option<PartView>,
}

/// `progress.part` of `GET /pipelines/{key}` ([`faucet_core::ExtentPart`]).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct PartView {
    /// The table (`schema.table`, `database.table`) or collection (`db.coll`).
    name: String,
    /// Its place among the tables this read copies, from 1.
    number: u32,
    /// How many tables this read copies.
    count: u32,
    /// Read of this table, in the progress's `unit`.
    done: u64,
    /// This table's total (an estimate when the progress's is).
    total: u64,
    /// The share of this table read, 0–100 (below 100 for an estimate until it ends).
    percent: f64,
}

impl ProgressView {
    /// The view of `extent` with `eta`.
    pub(crate) fn new(extent: &Extent, eta: Option<std::time::Duration>) -> Self {
        Self {
            done: extent.done,
            total: extent.total,
            unit: extent.unit,
            percent: extent.percent(),
            eta_seconds: eta.map(|d| d.as_secs_f64()),
            estimate: extent.estimate,
            part: extent.part.as_ref().map(|p| PartView {
                name: p.name.clone(),
                number: p.number,
                count: p.count,
                done: p.done,
                total: p.total,
                percent: p.percent(extent.estimate),
            }),
        }
    }
}

/// `published` of `GET /pipelines/{key}`: what a bus sink published for the row in the
/// owner's process, from each page's [`faucet_core::PublishStats`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct PublishedView {
    /// Messages published and acknowledged.
    messages: u64,
    /// Bytes of their key, value and headers.
    bytes: u64,
    /// Pages published.
    pages: u64,
    /// The most publishes awaiting their acknowledgement at once during the last page.
    acks_pending: u64,
    /// The last page's seconds from its first publish to its last acknowledgement.
    publish_seconds: f64,
    /// The mean of that over every page.
    publish_seconds_mean: f64,
}

impl PublishedView {
    /// Adds one page's figures.
    pub(crate) fn add(&mut self, page: &faucet_core::PublishStats) {
        let total = self.publish_seconds_mean * self.pages as f64 + page.publish_seconds;
        self.messages += page.messages;
        self.bytes += page.bytes;
        self.pages += 1;
        self.acks_pending = page.acks_pending;
        self.publish_seconds = page.publish_seconds;
        self.publish_seconds_mean = total / self.pages as f64;
    }
}

/// One entry of `schema_changes` of `GET /pipelines/{key}`: the last schema-change record
/// of a source table ([`faucet_core::change::Announced`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SchemaChangeView {
    /// What changed, a column each (``column `w` added, text``).
    changes: Vec<String>,
    /// Where in the source (`lsn 0/16B3748`); null for a file or query source.
    position: Option<String>,
    /// When the page that delivered it was written, RFC 3339 UTC.
    at: String,
}

/// An error and its time.
#[derive(Debug, Serialize)]
struct ErrorView {
    message: String,
    at: String,
}

/// Tick counts.
#[derive(Debug, Serialize)]
struct TicksView {
    run: u64,
    skipped: u64,
    late: u64,
}

/// Every served row, by state key, and this member.
pub(crate) struct Registry {
    /// The rows.
    pub(crate) slots: BTreeMap<String, Arc<Slot>>,
    /// This member's name (`--member`).
    pub(crate) member: String,
    /// Set once SIGTERM/SIGINT started the drain.
    pub(crate) draining: AtomicBool,
}
