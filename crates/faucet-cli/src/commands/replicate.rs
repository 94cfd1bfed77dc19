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
use faucet_core::{FaucetError, Pipeline, RunStreamOptions};
use tokio_util::sync::CancellationToken;

use super::plan;
use super::run::RunArgs;
use crate::config;
use crate::exit::Exit;
use crate::output;
use crate::progress::ProgressLine;

/// Runs the command: every selected row in order; the exit code is the first failure's.
pub(crate) async fn run(args: RunArgs) -> Exit {
    match replicate(&args).await {
        Ok(()) => Exit::Success,
        Err((context, e)) => {
            output::print_error(&context, &e);
            Exit::of(&e)
        }
    }
}

async fn replicate(args: &RunArgs) -> Result<(), (String, FaucetError)> {
    let whole = |e| (String::new(), e);
    if args.metrics_listen.is_some() {
        return Err(whole(FaucetError::config(
            "--metrics-listen",
            "is not supported by `faucet replicate` yet; use it with `faucet run`",
        )));
    }
    let loaded = config::load(&args.config).map_err(whole)?;
    let rows = plan::select(&loaded, args.row.as_deref()).map_err(whole)?;
    let cancel = CancellationToken::new();
    if let Err(e) = crate::signals::install(cancel.clone()) {
        tracing::warn!(error = %e, "cannot install signal handlers");
    }
    for row in rows {
        let context = plan::context(&loaded, &row.label);
        let at = |e| (context.clone(), e);
        let (key, p) = row
            .config
            .as_ref()
            .map_err(|e| at(FaucetError::config("pipeline", e.to_string())))?;
        let source = p.source.replicate().map_err(at)?;
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
