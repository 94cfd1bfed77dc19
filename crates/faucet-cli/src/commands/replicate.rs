//! `faucet replicate [CONFIG]`: for a pipeline whose source is `postgres-cdc`, `mysql-cdc`
//! or `mongodb-cdc`, a consistent copy of the listed tables (each table read inside one
//! snapshot as `op: r` records), then the changes from the snapshot's exact point: no gap,
//! no overlap, into any sink. PostgreSQL: the slot created with an exported snapshot, then
//! the slot's changes (`faucet_connectors::postgres::snapshot`). MySQL / MariaDB: a
//! consistent-snapshot transaction and its binlog position, then the binlog from there
//! (`faucet_connectors::mysql::snapshot`). MongoDB: the change stream's position anchored
//! first, the collections copied in `_id` order without the documents changed since, then
//! the change stream from the anchor (`faucet_connectors::mongodb::replicate`). The flags are `faucet run`'s; the run loop, state
//! store and bookmarks are the same. An interrupted snapshot resumes: the next run copies,
//! inside a new snapshot, the rest of the interrupted table after its last stored key and the
//! tables not started (finished tables are not read again), then streams the changes from
//! the first snapshot's point, dropping the changes the later copies already hold; a copy
//! that cannot continue (a PostgreSQL table without a primary key, a purged binlog) is
//! refused with a typed state error naming the fix. A table added to `tables` after the copy
//! finished (the bookmark's `copied` list lacks it) is copied by the next run in a new
//! snapshot of its own, then the changes go on from the stored bookmark, with no gap and no
//! overlap for the tables already copied.

use faucet_core::delivery::Topology;
use faucet_core::{FaucetError, Pipeline, RunStreamOptions, Source};
use tokio_util::sync::CancellationToken;

use super::plan;
use super::run::RunArgs;
use crate::config::{self, Loaded, Row};
use crate::exit::Exit;
use crate::output;
use crate::progress::ProgressLine;
use crate::runtime::Threads;

/// Runs the command: every selected row in order, on the runtime their sources call for
/// ([`crate::runtime`]); the exit code is the first failure's.
pub(crate) fn main(args: RunArgs) -> Exit {
    let fail = |(context, e): (String, FaucetError)| {
        output::print_error(&context, &e);
        Exit::of(&e)
    };
    let loaded = match load(&args) {
        Ok(loaded) => loaded,
        Err(e) => return fail((String::new(), e)),
    };
    let rows = match plan::select(&loaded, args.row.as_deref()) {
        Ok(rows) => rows,
        Err(e) => return fail((String::new(), e)),
    };
    // Each row's replicate source, built without I/O: whether one of them reads in a task
    // of its own picks the runtime.
    let sources: Vec<Built> = rows
        .iter()
        .map(|row| match &row.config {
            Ok((_, p)) => p.source.replicate(),
            Err(e) => Err(FaucetError::config("pipeline", e.to_string())),
        })
        .collect();
    let threads = Threads::for_sources(sources.iter().filter_map(|s| s.as_deref().ok()));
    match crate::runtime::block_on(threads, replicate(&args, &loaded, rows, sources)) {
        Ok(Ok(())) => Exit::Success,
        Ok(Err(failed)) => fail(failed),
        Err(exit) => exit,
    }
}

/// A row's replicate source, built without I/O, or why it cannot be.
type Built = Result<Box<dyn Source>, FaucetError>;

/// The config file, loaded (no I/O beyond reading it).
fn load(args: &RunArgs) -> Result<Loaded, FaucetError> {
    if args.metrics_listen.is_some() {
        return Err(FaucetError::config(
            "--metrics-listen",
            "is not supported by `faucet replicate` yet; use it with `faucet run`",
        ));
    }
    config::load(&args.config)
}

async fn replicate(
    args: &RunArgs,
    loaded: &Loaded,
    rows: Vec<&Row>,
    sources: Vec<Built>,
) -> Result<(), (String, FaucetError)> {
    let cancel = CancellationToken::new();
    if let Err(e) = crate::signals::install(cancel.clone()) {
        tracing::warn!(error = %e, "cannot install signal handlers");
    }
    for (row, source) in rows.into_iter().zip(sources) {
        let context = plan::context(loaded, &row.label);
        let at = |e| (context.clone(), e);
        let (key, p) = row
            .config
            .as_ref()
            .map_err(|e| at(FaucetError::config("pipeline", e.to_string())))?;
        let source = source.map_err(at)?;
        let mut built = plan::plan(row, key, p).map_err(at)?;
        let topology = Topology {
            source: source.connector(),
            replay: source.replay(),
            sink: built.sink.connector(),
            sink_caps: built.sink.capabilities(),
            sink_limit: built.sink.delivery_limit(),
            state: built.state.type_name(),
            state_durable: built.state.is_durable(),
        };
        let guarantee = topology
            .resolve(built.delivery)
            .map_err(|e| at(FaucetError::Delivery(e)))?;
        built.guarantee = Ok(guarantee);
        if let Some(suspect) = &built.feedback {
            crate::registry::feedback::check_servers(suspect)
                .await
                .map_err(at)?;
        }
        let store = built.state.connect().await.map_err(at)?;
        let line = ProgressLine::start(&built.label, args.quiet);
        let summary = Pipeline::from_dyn(source.as_ref(), built.sink.as_ref())
            .with_state_store(store)
            .with_options(RunStreamOptions {
                batch_size: built.batch_size,
                max_page_delay: built.max_page_delay,
                state_key: built.state_key.clone(),
                delivery: built.delivery,
                cancel: cancel.clone(),
                lease_ttl: args.lease_ttl,
                wait_for_lease: args.wait_for_lease,
                on_progress: Some(line.callback()),
            })
            .run()
            .await;
        line.finish();
        let summary = summary.map_err(at)?;
        if !args.quiet {
            say!("{}", output::summary_line(&built.label, &summary));
        }
        if cancel.is_cancelled() {
            break;
        }
    }
    Ok(())
}
