//! Into a PostgreSQL table, through `faucet_core::Pipeline`: the library form of a pipeline
//! with a `postgres` sink, for `bench/pg_to_pg.sh`.
//!
//! Usage: `pg_to_pg URL SOURCE TARGET MODE STATE [BATCH_SIZE]`
//! * `SOURCE`: `table=SCHEMA.TABLE` (the postgres query source, a full read in key order),
//!   `query=SQL` (a full read of a query) or
//!   `csv=PATH` (a CSV with a header, as `psql \copy ... csv header` writes it: an unquoted
//!   empty field is NULL; `id` read as an integer, the rest as text, which PostgreSQL
//!   converts on input);
//! * `TARGET`: the sink's table;
//! * `MODE`: `append` or `upsert=KEY` (one key column);
//! * `STATE`: `memory` (at-least-once writes: one COPY per page) or a directory (a file state
//!   store; with a CSV source, a deterministic replay, the sink commits every page with its
//!   atomic commit token).
//!
//! Prints a JSON summary (records, seconds, records/s, the derived guarantee) on stdout.

mod common;

use std::sync::Arc;

use faucet_connectors::files::{ColumnType, Columns, CsvSource, CsvSourceConfig};
use faucet_connectors::postgres::query::Postgres;
use faucet_connectors::postgres::{PostgresQuerySource, PostgresSink, PostgresSinkConfig};
use faucet_core::state::{FileStateStore, MemoryStateStore, StateStore};
use faucet_core::{Pipeline, Source};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, source, target, mode, state, rest @ ..] = args.as_slice() else {
        eprintln!(
            "usage: pg_to_pg URL (table=T | query=SQL | csv=PATH) TARGET (append | upsert=KEY) (memory | STATE_DIR) [BATCH_SIZE]"
        );
        std::process::exit(2);
    };
    let batch_size = common::batch_size(rest)?;
    let query = common::query_config::<Postgres>(url, source);
    let source: Box<dyn Source> = match (query, source.split_once('=')) {
        (Some(config), _) => Box::new(PostgresQuerySource::new(config)?),
        (None, Some(("csv", path))) => {
            let mut config = CsvSourceConfig::new(path);
            // `psql \copy ... csv` writes NULL as an unquoted empty field.
            config.null_values = vec![String::new()];
            config.columns = Some(Columns::new([("id".to_owned(), ColumnType::Int)]));
            Box::new(CsvSource::new(config)?)
        }
        _ => {
            return Err(format!("expected table=..., query=... or csv=..., got `{source}`").into());
        }
    };
    let mut config = PostgresSinkConfig::new(url.as_str(), target.as_str());
    if let Some(key) = common::upsert_key(mode)? {
        config = config.upsert([key]);
    }
    let sink = PostgresSink::new(config)?;
    let state: Arc<dyn StateStore> = if state == "memory" {
        Arc::new(MemoryStateStore::new())
    } else {
        Arc::new(FileStateStore::new(state))
    };
    let summary = Pipeline::from_dyn(source.as_ref(), &sink)
        .with_state_store(state)
        .with_options(common::at_least_once(batch_size, "pg_to_pg"))
        .run()
        .await?;
    common::print_summary(&summary);
    Ok(())
}
