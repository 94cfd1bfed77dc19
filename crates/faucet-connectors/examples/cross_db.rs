//! Between PostgreSQL and MySQL/MariaDB, through `faucet_core::Pipeline`: a full read of a
//! table by the query source of one system into the sink of the other (or the same), for
//! `bench/pg_to_mysql.sh`.
//!
//! Usage: `cross_db SOURCE_URL SOURCE_TABLE TARGET_URL TARGET_TABLE MODE [BATCH_SIZE]`
//! * the URLs choose the systems: `postgres://…` (the `postgres` source / sink) or
//!   `mysql://…` (the `mysql` source / sink);
//! * `MODE`: `append` or `upsert=KEY` (one key column); memory state (at-least-once writes).
//!
//! Prints a JSON summary (records, pages, seconds, records/s) on stdout.

mod common;

use faucet_connectors::mysql::{MysqlQueryConfig, MysqlQuerySource, MysqlSink, MysqlSinkConfig};
use faucet_connectors::postgres::{
    PostgresQueryConfig, PostgresQuerySource, PostgresSink, PostgresSinkConfig,
};
use faucet_core::{Pipeline, Sink, Source};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [
        source_url,
        source_table,
        target_url,
        target_table,
        mode,
        rest @ ..,
    ] = args.as_slice()
    else {
        eprintln!(
            "usage: cross_db SOURCE_URL SOURCE_TABLE TARGET_URL TARGET_TABLE (append | upsert=KEY) [BATCH_SIZE]"
        );
        std::process::exit(2);
    };
    let batch_size = common::batch_size(rest)?;
    let key = common::upsert_key(mode)?;
    let source: Box<dyn Source> = if source_url.starts_with("mysql://") {
        Box::new(MysqlQuerySource::new(MysqlQueryConfig::for_table(
            source_url.as_str(),
            source_table.as_str(),
        ))?)
    } else {
        Box::new(PostgresQuerySource::new(PostgresQueryConfig::for_table(
            source_url.as_str(),
            source_table.as_str(),
        ))?)
    };
    let sink: Box<dyn Sink> = if target_url.starts_with("mysql://") {
        let mut config = MysqlSinkConfig::new(target_url.as_str(), target_table.as_str());
        if let Some(k) = &key {
            config = config.upsert([k]);
        }
        Box::new(MysqlSink::new(config)?)
    } else {
        let mut config = PostgresSinkConfig::new(target_url.as_str(), target_table.as_str());
        if let Some(k) = &key {
            config = config.upsert([k]);
        }
        Box::new(PostgresSink::new(config)?)
    };
    let summary = Pipeline::from_dyn(source.as_ref(), sink.as_ref())
        .with_options(common::at_least_once(batch_size, "cross_db"))
        .run()
        .await?;
    common::print_summary(&summary);
    Ok(())
}
