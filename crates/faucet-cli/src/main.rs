//! `faucet`: runs, validates and probes pipelines described in a YAML file.
//!
//! This file holds the command line (clap), logging (tracing to stderr, `--log-level` or
//! `FAUCET_LOG`, default `warn`) and the exit codes ([`exit::Exit`]); the work is in
//! [`commands`], the file grammar in [`config`], the connectors it can name in [`registry`].

#[macro_use]
mod output;
mod commands;
mod config;
mod exit;
mod lenient;
mod progress;
mod registry;
mod runtime;
mod secret;
mod serve;
mod signals;
mod telemetry;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use crate::commands::doctor::DoctorArgs;
use crate::commands::run::RunArgs;
use crate::commands::validate::ValidateArgs;
use crate::runtime::Threads;

const ABOUT: &str = "Moves data from change streams, SQL queries and files into files and \
databases in bounded pages, and resumes exactly where it stopped.";

const EXAMPLE: &str = "\
Example pipeline file (faucet.yaml):
  version: 1
  name: orders                   # default: the file's stem; part of every state key
  pipeline:
    source: { type: csv, config: { path: ./orders.csv } }
    sink:   { type: jsonl, config: { path: ./out/orders.jsonl } }
    state:  { type: file, config: { path: ./.faucet/state } }
    delivery: at_least_once      # or effectively_once / exactly_once (a request)
    batch_size: 10000
  matrix:                        # optional: one run per row, deep-merged into pipeline
    - { id: eu, source: { config: { path: ./eu.csv } } }
";

/// Follows the list of type names (from the registry) that ends [`EXAMPLE`].
const EXAMPLE_END: &str = " Without a `state:` block the state is a file
store at .faucet/state beside the config file, so the next run resumes where this one stopped.
Relative paths are relative to the config file's directory. `${env:VAR}` inside a string is
replaced by the variable (from the environment, or a .env file beside the config); `$${`
writes a literal `${`. Values never change the file's structure: numbers in connector
configs must be literal; `batch_size` and `ensure_table` also accept a string.
The state key of a row is `{name}::{row id}` (`{name}` without a matrix).";

#[derive(Debug, Parser)]
#[command(
    name = "faucet",
    version,
    about = ABOUT,
    after_help = format!(
        "{EXAMPLE}\n{}{EXAMPLE_END}\n\n{}",
        registry::help_types(),
        exit::HELP
    ),
)]
struct Cli {
    /// Log filter for stderr: error, warn, info, debug, trace, or directives like
    /// `faucet_core=debug`.
    #[arg(long, global = true, env = "FAUCET_LOG", default_value = "warn")]
    log_level: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the pipeline: every matrix row in order, resuming each from its bookmark.
    ///
    /// SIGINT/SIGTERM stop gracefully: the page in hand is written, flushed and its bookmark
    /// persisted, the summary printed, exit 0; a second signal exits at once (130).
    #[command(after_help = exit::HELP)]
    Run(RunArgs),
    /// Check the pipeline file offline and show what each row would do and its delivery
    /// guarantee. No connections, no files touched.
    Validate(ValidateArgs),
    /// Probe every row's source, sink and state store; exit code = failed probes.
    ///
    /// Moves no data and advances no bookmark; passwords are never printed.
    Doctor(DoctorArgs),
    /// A consistent copy of a `postgres-cdc`, `mysql-cdc` or `mongodb-cdc` source's tables
    /// or collections (`op: r` records as of one point), then its changes from that exact
    /// point; the same flags as `run`.
    #[command(after_help = exit::HELP)]
    Replicate(RunArgs),
    /// Serve many pipelines: continuous ones all the time, bounded ones on their
    /// `schedule:`, with an HTTP API (`--listen`) and Prometheus `/metrics`.
    ///
    /// SIGINT/SIGTERM drain: every run finishes its page in hand and persists it, exit 0.
    #[command(after_help = exit::HELP)]
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log_level);
    match cli.command {
        // One pipeline at a time: the runtime is chosen by its sources (`runtime`).
        Command::Run(args) => commands::run::main(args).into(),
        Command::Replicate(args) => commands::replicate::main(args).into(),
        Command::Serve(args) => runtime::block_on(Threads::PerCore, serve::run(args))
            .unwrap_or_else(|exit| exit)
            .into(),
        Command::Validate(args) => commands::validate::run(&args).into(),
        Command::Doctor(args) => {
            match runtime::block_on(Threads::PerCore, commands::doctor::run(&args)) {
                Ok(failed) => ExitCode::from(u8::try_from(failed.min(100)).unwrap_or(100)),
                Err(exit) => exit.into(),
            }
        }
    }
}

/// Sets up the stderr log with `filter` (`--log-level` / `FAUCET_LOG`). sqlx's own statement
/// logs (a WARN for each statement slower than 1 s, the SQL at debug) are left out unless
/// the filter names `sqlx`: faucet reports slow or failing statements itself, saying what
/// they wait for.
fn init_logging(filter: &str) {
    let quiet_sqlx = |f: &str| {
        if f.contains("sqlx") {
            f.to_owned()
        } else {
            format!("{f},sqlx=off")
        }
    };
    let filter = EnvFilter::try_new(quiet_sqlx(filter)).unwrap_or_else(|e| {
        eprintln!(
            "warning: --log-level / FAUCET_LOG {filter:?} is not a valid filter ({e}); using warn"
        );
        EnvFilter::new(quiet_sqlx("warn"))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}
