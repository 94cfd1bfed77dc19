//! Turning a loaded row into what a run needs, without I/O: the source and sink built from
//! their configs, the state store's config checked, and the delivery guarantee derived
//! (DESIGN.md invariant 5: an unmet request fails before any data moves, before the state
//! store is even connected).

use faucet_core::delivery::Topology;
use faucet_core::{DeliveryGuarantee, DeliveryRequest, FaucetError, Sink, Source};

use crate::config::{Loaded, PipelineConfig, Row};
use crate::registry::StateConfig;

/// One row, ready to run.
pub(crate) struct Plan {
    /// The row's id (`None` without a matrix).
    pub(crate) id: Option<String>,
    /// How messages name the row.
    pub(crate) label: String,
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
}

/// Builds the plan of one valid row.
///
/// # Errors
/// [`FaucetError::Config`]: a connector's config is invalid, or its type is not compiled in.
pub(crate) fn plan(row: &Row, key: &str, p: &PipelineConfig) -> Result<Plan, FaucetError> {
    let source = p.source.build()?;
    let sink = p.sink.build()?;
    p.state.validate()?;
    let topology = Topology {
        source: source.connector(),
        replay: source.replay(),
        sink: sink.connector(),
        sink_caps: sink.capabilities(),
        state: p.state.type_name(),
        state_durable: p.state.is_durable(),
    };
    let guarantee = topology.resolve(p.delivery).map_err(FaucetError::from);
    Ok(Plan {
        id: row.id.clone(),
        label: row.label.clone(),
        state_key: key.to_owned(),
        source,
        sink,
        sink_to_stdout: p.sink.writes_stdout(),
        state: p.state.clone(),
        delivery: p.delivery,
        batch_size: p.batch_size,
        max_page_delay: p.max_page_delay,
        guarantee,
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
