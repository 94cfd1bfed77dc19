//! Turning a loaded row into what a run needs, without I/O: the source and sink built from
//! their configs, the state store's config checked, and the delivery guarantee derived
//! (docs/run-loop.md, invariant 5: an unmet request fails before any data moves, before the state
//! store is even connected).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use faucet_core::delivery::Topology;
use faucet_core::pipeline::ProgressFn;
use faucet_core::state::StateStore;
use faucet_core::{
    DeliveryGuarantee, DeliveryRequest, FaucetError, Pipeline, RunStreamOptions, RunSummary, Sink,
    Source,
};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Loaded, PipelineConfig, Row};
use crate::registry::StateConfig;

/// One row, ready to run.
pub(crate) struct Plan {
    /// The row's id (`None` without a matrix).
    pub(crate) id: Option<String>,
    /// How messages name the row.
    pub(crate) label: String,
    /// The pipeline's `name` (the state key without `::{id}`).
    pub(crate) pipeline: String,
    /// `{name}::{id}`, or `{name}`.
    pub(crate) state_key: String,
    /// The built source (not opened).
    pub(crate) source: Box<dyn Source>,
    /// The built sink (not opened).
    pub(crate) sink: Box<dyn Sink>,
    /// Whether the sink writes to standard output (`path: "-"`).
    pub(crate) sink_to_stdout: bool,
    /// The state store's config (checked, not connected).
    pub(crate) state: StateConfig,
    /// What the user asked for.
    pub(crate) delivery: DeliveryRequest,
    /// Records per page.
    pub(crate) batch_size: usize,
    /// The longest a record waits in a page of a continuous source.
    pub(crate) max_page_delay: std::time::Duration,
    /// What the topology gives for the request, or the typed delivery error.
    pub(crate) guarantee: Result<DeliveryGuarantee, FaucetError>,
    /// When `faucet serve` runs the row (`pipeline.schedule`; `faucet run` ignores it).
    pub(crate) schedule: Option<config::schedule::Schedule>,
    /// Whether the source follows its stream until cancelled.
    pub(crate) continuous: bool,
    /// A change source and a sink on the same table name of servers the configs do not show
    /// to be one: asked at the start of each run ([`crate::registry::feedback::check_servers`]).
    pub(crate) feedback: Option<crate::registry::feedback::Suspect>,
}

/// How a run holds its state key's lease (`--lease-ttl`, `--wait-for-lease`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leasing {
    /// The lease's time to live (renewed every third of it).
    pub(crate) ttl: Duration,
    /// How long to wait for another holder, or `None` to fail at once.
    pub(crate) wait: Option<Duration>,
}

/// Runs one planned row through the run loop against `store`: the one place a run is put
/// together from a [`Plan`] (`faucet run` and `faucet serve` both call it). `cancel` finishes
/// the page in hand; `on_progress` is called after each page.
///
/// # Errors
/// What [`Pipeline::run`] returns: delivery, lease, source, sink and state errors; the
/// feedback-loop refusal when source and sink turn out to be one server
/// ([`crate::registry::feedback::check_servers`]).
pub(crate) async fn execute(
    plan: &Plan,
    store: Arc<dyn StateStore>,
    cancel: CancellationToken,
    leasing: &Leasing,
    on_progress: Option<ProgressFn>,
) -> Result<RunSummary, FaucetError> {
    if let Some(suspect) = &plan.feedback {
        crate::registry::feedback::check_servers(suspect).await?;
    }
    let options = RunStreamOptions {
        batch_size: plan.batch_size,
        max_page_delay: plan.max_page_delay,
        state_key: plan.state_key.clone(),
        delivery: plan.delivery,
        cancel,
        lease_ttl: leasing.ttl,
        wait_for_lease: leasing.wait,
        on_progress,
    };
    Pipeline::from_dyn(plan.source.as_ref(), plan.sink.as_ref())
        .with_state_store(store)
        .with_options(options)
        .run()
        .await
}

/// A plan with its message context (`row `eu`: `, or empty without a matrix).
pub(crate) struct Prepared {
    /// The plan.
    pub(crate) plan: Plan,
    /// How messages about the row begin.
    pub(crate) context: String,
}

impl std::ops::Deref for Prepared {
    type Target = Plan;
    fn deref(&self) -> &Plan {
        &self.plan
    }
}

/// What went wrong before any row ran, and the row it concerns (empty for the whole file).
pub(crate) type Unprepared = Box<(String, FaucetError)>;

/// Loads the file at `path` and plans every selected row (`only`: `--row`), offline; the
/// first problem stops everything: a config error, or a delivery request the row's topology
/// cannot meet (docs/run-loop.md, invariant 5).
///
/// # Errors
/// The row's message context and the error.
pub(crate) fn prepare(path: &Path, only: Option<&str>) -> Result<Vec<Prepared>, Unprepared> {
    let whole = |e| Box::new((String::new(), e));
    let loaded = config::load(path).map_err(whole)?;
    let rows = select(&loaded, only).map_err(whole)?;
    let mut plans = Vec::with_capacity(rows.len());
    for row in rows {
        let context = context(&loaded, &row.label);
        let built = match &row.config {
            Ok((key, p)) => plan(row, key, p),
            Err(e) => Err(FaucetError::config(field_of(e), message_of(e))),
        };
        let plan = built.map_err(|e| Box::new((context.clone(), e)))?;
        if let Err(e) = &plan.guarantee {
            return Err(Box::new((context, clone_delivery(e))));
        }
        plans.push(Prepared { plan, context });
    }
    Ok(plans)
}

fn field_of(e: &FaucetError) -> String {
    match e {
        FaucetError::Config { field, .. } => field.clone(),
        _ => "config".to_owned(),
    }
}

fn message_of(e: &FaucetError) -> String {
    match e {
        FaucetError::Config { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn clone_delivery(e: &FaucetError) -> FaucetError {
    match e {
        FaucetError::Delivery(d) => FaucetError::Delivery(d.clone()),
        other => FaucetError::config("pipeline.delivery", other.to_string()),
    }
}

/// Builds the plan of one valid row.
///
/// # Errors
/// [`FaucetError::Config`]: a connector's config is invalid, its type is not compiled in,
/// the sink writes into a table the change source reads ([`crate::registry::feedback`]), or
/// the change source's tables would not each reach a target of their own
/// ([`crate::registry::routing`]).
pub(crate) fn plan(row: &Row, key: &str, p: &PipelineConfig) -> Result<Plan, FaucetError> {
    let source = p.source.build_for(&p.sink)?;
    let sink = p.sink.build()?;
    let feedback = crate::registry::feedback::check(&p.source, &p.sink)?;
    #[cfg(feature = "sql")]
    crate::registry::routing::check(&p.source, &p.sink, sink.as_ref())?;
    crate::registry::routing::check_files(&p.source, source.as_ref(), &p.sink)?;
    p.state.validate()?;
    let topology = Topology {
        source: source.connector(),
        replay: source.replay(),
        sink: sink.connector(),
        sink_caps: sink.capabilities(),
        sink_limit: sink.delivery_limit(),
        state: p.state.type_name(),
        state_durable: p.state.is_durable(),
    };
    let guarantee = topology.resolve(p.delivery).map_err(FaucetError::from);
    Ok(Plan {
        id: row.id.clone(),
        label: row.label.clone(),
        pipeline: row
            .id
            .as_ref()
            .and_then(|id| key.strip_suffix(&format!("::{id}")))
            .unwrap_or(key)
            .to_owned(),
        state_key: key.to_owned(),
        source,
        sink,
        sink_to_stdout: p.sink.writes_stdout(),
        state: p.state.clone(),
        delivery: p.delivery,
        batch_size: p.batch_size,
        max_page_delay: p.max_page_delay,
        guarantee,
        schedule: p.schedule.clone(),
        continuous: p.source.is_continuous(),
        feedback,
    })
}

/// The rows `--row` selects (all when `None`).
///
/// # Errors
/// [`FaucetError::Config`] on `--row` when no row has that id, listing the ids.
pub(crate) fn select<'a>(
    loaded: &'a Loaded,
    only: Option<&str>,
) -> Result<Vec<&'a Row>, FaucetError> {
    let Some(want) = only else {
        return Ok(loaded.rows.iter().collect());
    };
    if !loaded.has_matrix {
        return Err(FaucetError::config(
            "--row",
            format!(
                "{} has no matrix; run it without --row",
                loaded.path.display()
            ),
        ));
    }
    let rows: Vec<&Row> = loaded
        .rows
        .iter()
        .filter(|r| r.id.as_deref() == Some(want))
        .collect();
    if rows.is_empty() {
        let ids: Vec<&str> = loaded.rows.iter().filter_map(|r| r.id.as_deref()).collect();
        return Err(FaucetError::config(
            "--row",
            format!("no matrix row `{want}`; the rows are: {}", ids.join(", ")),
        ));
    }
    Ok(rows)
}

/// `row `eu`: ` in messages when the file has a matrix, nothing otherwise.
pub(crate) fn context(loaded: &Loaded, label: &str) -> String {
    if loaded.has_matrix {
        format!("row `{label}`: ")
    } else {
        String::new()
    }
}
