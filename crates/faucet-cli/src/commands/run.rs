//! `faucet run [CONFIG]`: every matrix row in order (or the one `--row` names) through the
//! run loop.
//!
//! Before any I/O every selected row is loaded, built and its delivery request resolved, so
//! a bad config (exit 2) or an unmet `effectively_once` (exit 3) fails before a file is
//! created or a database is touched. Then, per row: connect the state store, run the
//! pipeline, report. A failed row does not stop the rows after it; the exit code is that of
//! the first failure. SIGINT/SIGTERM finish the page in hand and start no further row.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use faucet_core::RunSummary;
use tokio_util::sync::CancellationToken;

use super::plan::{self, Prepared};
use crate::config::DEFAULT_CONFIG;
use crate::exit::Exit;
use crate::output::{self, ErrorJson, RunJson, RunReport};
use crate::progress::ProgressLine;
use crate::runtime::Threads;

/// `faucet run`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The pipeline file.
    #[arg(value_name = "CONFIG", default_value = DEFAULT_CONFIG)]
    pub(crate) config: PathBuf,
    /// Run only the matrix row with this id.
    #[arg(long, value_name = "ID")]
    pub(crate) row: Option<String>,
    /// `human`: a summary line per row; `json`: one JSON document on stdout,
    /// `{"runs":[{"row","state_key","rows","pages","elapsed_secs","guarantee",
    /// "planned_guarantee","bookmark","re_anchored","cancelled","lag_seconds","error"}],"ok",
    /// "cancelled","error"}` (`guarantee` is `null` for a failed row: what was delivered).
    #[arg(long, value_enum, default_value_t = OutputFormat::Human)]
    pub(crate) output: OutputFormat,
    /// No progress line and no summary (errors are still printed).
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// When another run holds the state key: wait up to this long for it (`30s`, `5m`; at
    /// most 7 days) instead of exiting with code 4.
    #[arg(long, value_name = "DURATION", value_parser = parse_wait_for_lease)]
    pub(crate) wait_for_lease: Option<Duration>,
    /// How long this run's lease on its state key lasts without renewal (renewed every
    /// third of it; 1s to 1 day); a crashed run's key frees up after this long.
    #[arg(long, value_name = "DURATION", value_parser = parse_lease_ttl, default_value = "30s")]
    pub(crate) lease_ttl: Duration,
    /// Serve Prometheus metrics of this run at `http://ADDR/metrics` while it runs
    /// (`faucet_records_total`, `faucet_source_lag_seconds`, …; see the README).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<std::net::SocketAddr>,
}

/// The bounds of `--lease-ttl`: below a second, renewal (every third of it) cannot keep up
/// with a store's round trip; above a day, a crashed run's key stays blocked too long (and
/// stores' expiry arithmetic, in milliseconds, stays far from overflow).
const LEASE_TTL_BOUNDS: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(24 * 3600));
/// The longest `--wait-for-lease`: 7 days.
const MAX_WAIT_FOR_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// `--lease-ttl`: a humantime duration from 1 s to 1 day.
pub(crate) fn parse_lease_ttl(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. `30s`, `5m`)"))?;
    let (min, max) = LEASE_TTL_BOUNDS;
    if d < min || d > max {
        return Err(format!(
            "must be from 1s to 1day (got {}): the lease is renewed every third of it, and \
             a crashed run's key frees up after it",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

/// `--wait-for-lease`: a humantime duration of at most 7 days.
fn parse_wait_for_lease(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. `30s`, `5m`)"))?;
    if d > MAX_WAIT_FOR_LEASE {
        return Err(format!(
            "must be at most 7days (got {})",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

/// The output format of `faucet run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    /// Lines for people.
    Human,
    /// One JSON document on stdout.
    Json,
}

/// Runs the command: every selected row is prepared (no I/O), then the rows run one after
/// another on the runtime their sources call for ([`crate::runtime`]).
pub(crate) fn main(args: RunArgs) -> Exit {
    let plans = match plan::prepare(&args.config, args.row.as_deref()) {
        Ok(p) => p,
        Err(failed) => {
            let (context, e) = *failed;
            output::print_error(&context, &e);
            if args.output == OutputFormat::Json {
                RunReport {
                    runs: Vec::new(),
                    ok: false,
                    cancelled: false,
                    error: Some(ErrorJson::of(&e)),
                }
                .print();
            }
            return Exit::of(&e);
        }
    };
    let threads = Threads::for_sources(plans.iter().map(|p| p.source.as_ref()));
    crate::runtime::block_on(threads, run(args, plans)).unwrap_or_else(|exit| exit)
}

/// Runs the prepared rows in order; the exit code is the first failure's.
async fn run(args: RunArgs, plans: Vec<Prepared>) -> Exit {
    let json = args.output == OutputFormat::Json;
    if plans.iter().any(|p| p.sink_to_stdout) {
        output::reports_to_stderr();
    }
    if let Some(addr) = args.metrics_listen
        && let Err(e) = start_metrics(addr).await
    {
        output::print_error("", &e);
        return Exit::of(&e);
    }
    let cancel = CancellationToken::new();
    if let Err(e) = crate::signals::install(cancel.clone()) {
        tracing::warn!(error = %e, "cannot install signal handlers; SIGINT/SIGTERM will stop the process at once");
    }
    let mut exit = Exit::Success;
    let mut runs = Vec::new();
    for plan in &plans {
        if cancel.is_cancelled() {
            break;
        }
        let (json_row, failure) = run_row(&args, plan, cancel.clone()).await;
        if let Some(code) = failure
            && exit == Exit::Success
        {
            exit = code;
        }
        runs.push(json_row);
    }
    if json {
        RunReport {
            ok: exit == Exit::Success,
            cancelled: cancel.is_cancelled(),
            runs,
            error: None,
        }
        .print();
    }
    exit
}

/// Installs the metrics recorder and serves `/metrics` on `addr`.
async fn start_metrics(addr: std::net::SocketAddr) -> Result<(), faucet_core::FaucetError> {
    let handle = crate::telemetry::metrics::install()
        .map_err(|m| faucet_core::FaucetError::config("--metrics-listen", m))?;
    let bound = crate::telemetry::metrics::serve_alone(addr, handle)
        .await
        .map_err(|e| {
            faucet_core::FaucetError::connect(
                "faucet run",
                format!("cannot listen on {addr} (--metrics-listen)"),
                Some(Box::new(e)),
            )
        })?;
    eprintln!("faucet run: metrics on http://{bound}/metrics");
    Ok(())
}

/// Runs one row: connect the state store, run the loop, report.
async fn run_row(
    args: &RunArgs,
    plan: &Prepared,
    cancel: CancellationToken,
) -> (RunJson, Option<Exit>) {
    let started = Instant::now();
    let progress =
        ProgressLine::start(&plan.label, args.quiet || args.output == OutputFormat::Json);
    let counters = progress.counters();
    tracing::info!(
        row = %plan.label,
        state_key = %plan.state_key,
        source = %plan.source.connector(),
        sink = %plan.sink.connector(),
        state = %plan.state.type_name(),
        batch_size = plan.batch_size,
        "starting run"
    );
    let leasing = plan::Leasing {
        ttl: args.lease_ttl,
        wait: args.wait_for_lease,
    };
    let metrics = args
        .metrics_listen
        .map(|_| crate::telemetry::metrics::RowMetrics::new(&plan.pipeline, plan.id.as_deref()));
    // The last durable bookmark of this run, for the retention sampling.
    let last_bookmark = std::sync::Arc::new(std::sync::Mutex::new(None));
    let callback = match &metrics {
        None => progress.callback(),
        Some(m) => {
            let observer = m.observer();
            let line = progress.callback();
            let last = std::sync::Arc::clone(&last_bookmark);
            std::sync::Arc::new(move |p: &faucet_core::pipeline::Progress| {
                observer.page(p);
                if p.bookmark.is_some() {
                    *last
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = p.bookmark.clone();
                }
                line(p);
            })
        }
    };
    let sampling = CancellationToken::new();
    if let Some(m) = &metrics
        && let Some(monitor) = plan.source.retention_monitor()
    {
        tokio::spawn(crate::telemetry::retention::sample_until(
            monitor,
            m.clone(),
            plan.state_key.clone(),
            sampling.clone(),
            move || {
                last_bookmark
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()
            },
            |_| {},
        ));
    }
    let result = async {
        let store = plan.state.connect().await?;
        plan::execute(plan, store, cancel, &leasing, Some(callback)).await
    }
    .await;
    sampling.cancel();
    if let (Err(e), Some(m)) = (&result, &metrics) {
        m.run_failed();
        m.run_error(e);
    }
    progress.finish();
    match result {
        Ok(summary) => {
            tracing::info!(
                row = %plan.label,
                records = summary.records_out,
                pages = summary.pages,
                elapsed_secs = summary.elapsed.as_secs_f64(),
                cancelled = summary.cancelled,
                "run finished"
            );
            report(args, plan, &summary);
            let planned = plan.guarantee.as_ref().ok().copied();
            (output::run_json(plan.id.clone(), &summary, planned), None)
        }
        Err(e) => {
            output::print_error(&plan.context, &e);
            if !args.quiet && counters.records() > 0 {
                let next = if plan.state.is_durable() {
                    "the next run resumes after them".to_owned()
                } else {
                    format!(
                        "the `{}` state store forgets its bookmark on exit, so the next run \
                         starts from the beginning and delivers them again",
                        plan.state.type_name()
                    )
                };
                eprintln!(
                    "note: {}{} in {} were committed before the error; {next}",
                    plan.context,
                    output::plural(counters.records(), "record"),
                    output::plural(counters.pages(), "page")
                );
            }
            let json = RunJson {
                row: plan.id.clone(),
                state_key: plan.state_key.clone(),
                rows: counters.records(),
                pages: counters.pages(),
                elapsed_secs: started.elapsed().as_secs_f64(),
                guarantee: None,
                planned_guarantee: plan.guarantee.as_ref().ok().copied(),
                bookmark: None,
                re_anchored: false,
                cancelled: false,
                lag_seconds: None,
                error: Some(ErrorJson::of(&e)),
            };
            (json, Some(Exit::of(&e)))
        }
    }
}

fn report(args: &RunArgs, plan: &Prepared, summary: &RunSummary) {
    if args.quiet || args.output == OutputFormat::Json {
        return;
    }
    say!("{}", output::summary_line(&plan.label, summary));
    if summary.cancelled && !plan.state.is_durable() {
        eprintln!(
            "note: {}the `{}` state store forgets its bookmark on exit: running again starts \
             from the beginning",
            plan.context,
            plan.state.type_name()
        );
    }
}
