//! `faucet serve [PATHS…]`: many pipeline rows in one process — continuous ones all the
//! time, bounded ones on their `schedule:` — with an HTTP control plane and Prometheus
//! metrics.
//!
//! The parts, one job each: [`discovery`] (which rows, planned offline), [`control`] (the
//! persisted pause/stop wish), [`pipeline`] (a row's status), [`supervisor`] (runs a row,
//! isolated, with backoff), [`scheduler`] (cron ticks), [`api`] (axum routes), [`auth`] (the
//! bearer token). The metrics and the slot-retention sampling are [`crate::telemetry`]'s,
//! shared with `faucet run`. Runs are built by the same [`crate::commands::plan::execute`]
//! as `faucet run`.
//!
//! SIGTERM/SIGINT drain: `/readyz` turns 503, every run finishes its page in hand, persists
//! its bookmark and releases its lease, then the HTTP server stops and the process exits 0
//! (a second signal exits at once, 130).
//!
//! `--cluster POSTGRES_URL` makes the process one member of several running the same files,
//! each row placed on one member at a time ([`cluster`]).

mod api;
mod auth;
pub(crate) mod cluster;
mod control;
mod discovery;
mod listen;
mod page;
mod pipeline;
mod report;
mod scheduler;
mod supervisor;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use faucet_core::FaucetError;
use tokio_util::sync::CancellationToken;

use crate::commands::plan::Leasing;
use crate::exit::Exit;
use crate::output;
use crate::secret::SecretUrl;
use crate::telemetry::metrics;

/// `faucet serve`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Pipeline files, or directories of them (`*.yaml`, `*.yml`).
    #[arg(value_name = "PATHS", required = true)]
    pub(crate) paths: Vec<PathBuf>,
    /// Where the HTTP API listens: `IP:PORT` or `HOST:PORT` (`localhost:7373`). Off
    /// loopback (any resolved address not a loopback one) an API token is needed, and every
    /// route but `/healthz` and a bare `/readyz` asks for it (see --open-metrics).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7373")]
    pub(crate) listen: String,
    /// This member's name, shown as every pipeline's `owner`. Default: the host name.
    #[arg(long, value_name = "NAME")]
    pub(crate) member: Option<String>,
    /// A file holding the API token for mutating routes (else FAUCET_API_TOKEN).
    #[arg(long, value_name = "PATH")]
    pub(crate) token_file: Option<PathBuf>,
    /// Off loopback, serve `/metrics` without the API token (by default it asks for it, as
    /// every status route does there; Prometheus can send it as a bearer token).
    #[arg(long)]
    pub(crate) public_metrics: bool,
    /// How long a run's lease on its state key lasts without renewal (1s to 1 day); with
    /// --cluster also how old a member's heartbeat may be before it counts as dead.
    #[arg(long, value_name = "DURATION", value_parser = crate::commands::run::parse_lease_ttl, default_value = "30s")]
    pub(crate) lease_ttl: Duration,
    /// Be one member of a cluster coordinated in this PostgreSQL database (also from
    /// FAUCET_CLUSTER_URL): each pipeline row runs on one member at a time. A secret: never
    /// printed.
    #[arg(long, value_name = "POSTGRES_URL", env = "FAUCET_CLUSTER_URL", hide_env_values = true, value_parser = parse_secret_url)]
    pub(crate) cluster: Option<SecretUrl>,
    /// The members table in the cluster database, `schema.table` or `table` (created when
    /// absent, with `<table>_owners` and `<table>_status` beside it).
    #[arg(long, value_name = "TABLE", default_value = cluster::DEFAULT_TABLE, requires = "cluster")]
    pub(crate) cluster_table: String,
    /// How long a newly started member waits before it takes work (doubled per restart
    /// within a minute).
    #[arg(long, value_name = "DURATION", value_parser = parse_settle, default_value = "10s", requires = "cluster")]
    pub(crate) settle: Duration,
}

fn parse_secret_url(text: &str) -> Result<SecretUrl, String> {
    if text.is_empty() {
        return Err("is empty; give a postgres:// URL".to_owned());
    }
    Ok(SecretUrl::new(text.to_owned()))
}

/// `--settle`: a humantime duration of at most an hour.
fn parse_settle(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. `10s`)"))?;
    if d > Duration::from_secs(3600) {
        return Err("must be at most 1h".to_owned());
    }
    Ok(d)
}

/// Runs the command until SIGTERM/SIGINT; exit 0 after a clean drain, 2 for a bad config or
/// command line, 1 when the address cannot be bound.
pub(crate) async fn run(args: ServeArgs) -> Exit {
    match serve(args).await {
        Ok(()) => Exit::Success,
        Err(b) => {
            let (context, e) = *b;
            output::print_error(&context, &e);
            Exit::of(&e)
        }
    }
}

fn listen_error(addr: &str, e: std::io::Error) -> FaucetError {
    FaucetError::connect(
        "faucet serve",
        format!("cannot listen on {addr}"),
        Some(Box::new(e)),
    )
}

async fn serve(args: ServeArgs) -> Result<(), discovery::Refused> {
    let whole = |e| Box::new((String::new(), e));
    let token = auth::load(args.token_file.as_deref()).map_err(whole)?;
    let listen = listen::Listen::resolve(&args.listen).await.map_err(whole)?;
    if token.is_none() && !listen.is_loopback() {
        return Err(whole(FaucetError::config(
            "--listen",
            format!(
                "{} is not a loopback address, and no API token is configured: anyone who \
                 can reach it could pause or stop pipelines; {}",
                args.listen,
                auth::HOW
            ),
        )));
    }
    let member = args
        .member
        .clone()
        .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned());
    let handle = metrics::install().map_err(|m| whole(FaucetError::config("metrics", m)))?;
    let slots = discovery::discover(&args.paths)?;
    let listener = tokio::net::TcpListener::bind(&listen.addrs[..])
        .await
        .map_err(|e| whole(listen_error(&args.listen, e)))?;
    let bound = listener
        .local_addr()
        .map_err(|e| whole(listen_error(&args.listen, e)))?;
    let registry = Arc::new(pipeline::Registry {
        slots: slots.into_iter().map(|(k, s)| (k, Arc::new(s))).collect(),
        member: member.clone(),
        draining: AtomicBool::new(false),
    });
    if args.cluster.is_some() {
        for slot in registry.slots.values() {
            cluster::check_store(slot)
                .map_err(|e| Box::new((format!("{}: {}", slot.file, slot.plan.context), e)))?;
        }
    }
    for slot in registry.slots.values() {
        if !slot.plan.state.is_durable() {
            tracing::warn!(
                key = slot.key(),
                "the `memory` state store forgets bookmarks and pause/stop on exit"
            );
        }
    }

    let shutdown = CancellationToken::new();
    if let Err(e) = crate::signals::install(shutdown.clone()) {
        tracing::warn!(error = %e, "cannot install signal handlers; SIGTERM will stop at once");
    }
    let mut tasks = tokio::task::JoinSet::new();
    let coordinator = match &args.cluster {
        None => None,
        Some(url) => {
            Some(join_cluster(&args, url, &member, &registry, &shutdown, &mut tasks).await?)
        }
    };
    let leasing = Leasing {
        ttl: args.lease_ttl,
        // A new owner waits for the old one to finish its page and release (or for a dead
        // one's lease to expire).
        wait: coordinator.as_ref().map(|_| args.lease_ttl * 2),
    };
    for slot in registry.slots.values() {
        tasks.spawn(supervisor::supervise(
            slot.clone(),
            shutdown.clone(),
            leasing,
            coordinator.clone(),
        ));
        if let Some(schedule) = &slot.plan.schedule {
            tasks.spawn(scheduler::tick(
                slot.clone(),
                schedule.clone(),
                shutdown.clone(),
                coordinator.clone(),
            ));
        }
    }

    let http_stop = CancellationToken::new();
    let app = api::router(api::Api {
        registry: registry.clone(),
        token: Arc::new(token),
        metrics: handle,
        cluster: coordinator,
        reads: if listen.is_loopback() {
            api::Reads::Open
        } else {
            api::Reads::Guarded {
                public_metrics: args.public_metrics,
            }
        },
    });
    let server = {
        let stop = http_stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        })
    };
    eprintln!(
        "faucet serve: listening on http://{bound}, {} as member {member:?}{}",
        output::plural(registry.slots.len() as u64, "pipeline"),
        if args.cluster.is_some() {
            " of a cluster"
        } else {
            ""
        }
    );

    shutdown.cancelled().await;
    registry.draining.store(true, Ordering::SeqCst);
    eprintln!("faucet serve: draining: every run finishes its page in hand");
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined {
            tracing::error!(error = %e, "a pipeline task ended abnormally");
        }
    }
    http_stop.cancel();
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the HTTP server stopped with an error"),
        Err(e) => tracing::warn!(error = %e, "the HTTP server task ended abnormally"),
    }
    eprintln!("faucet serve: stopped");
    Ok(())
}

/// Joins the cluster (a [`cluster::PgCluster`]) and starts its loop in `tasks`: every row
/// waits to be placed before it runs.
#[cfg(feature = "cluster")]
async fn join_cluster(
    args: &ServeArgs,
    url: &SecretUrl,
    member: &str,
    registry: &Arc<pipeline::Registry>,
    shutdown: &CancellationToken,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<Arc<dyn cluster::Coordinator>, discovery::Refused> {
    for slot in registry.slots.values() {
        slot.set_placed(false);
    }
    let joined = cluster::PgCluster::join(
        url,
        &args.cluster_table,
        member.to_owned(),
        args.lease_ttl,
        args.settle,
        registry.slots.values().cloned().collect(),
        shutdown,
    )
    .await
    .map_err(|e| Box::new(("--cluster: ".to_owned(), e)))?;
    tasks.spawn(joined.clone().run(shutdown.clone()));
    Ok(joined)
}

/// Without the `cluster` feature, `--cluster` is refused.
#[cfg(not(feature = "cluster"))]
async fn join_cluster(
    _args: &ServeArgs,
    _url: &SecretUrl,
    _member: &str,
    _registry: &Arc<pipeline::Registry>,
    _shutdown: &CancellationToken,
    _tasks: &mut tokio::task::JoinSet<()>,
) -> Result<Arc<dyn cluster::Coordinator>, discovery::Refused> {
    Err(Box::new((
        String::new(),
        FaucetError::config(
            "--cluster",
            "this faucet was built without the `cluster` feature; build it with \
             `--features cluster` (or `full`)",
        ),
    )))
}
