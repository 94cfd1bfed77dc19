//! What the examples share: their optional last argument (the page size), the `table=` /
//! `query=` argument of a SQL query source, the `append` / `upsert=KEY` mode of a SQL sink,
//! and the JSON summary they print. Each example uses a part.
#![allow(dead_code)]

use std::error::Error;

use faucet_core::RunSummary;

/// The page size: `rest`'s first argument, or the library's default.
pub(crate) fn batch_size(rest: &[String]) -> Result<usize, Box<dyn Error>> {
    Ok(match rest.first() {
        Some(n) => n.parse()?,
        None => faucet_core::source::DEFAULT_BATCH_SIZE,
    })
}

/// A query source's config from `table=NAME` or `query=SQL` on `url`; `None` for another
/// argument.
#[cfg(feature = "sql-source")]
pub(crate) fn query_config<D: faucet_connectors::sql::query::QueryDialect>(
    url: &str,
    what: &str,
) -> Option<faucet_connectors::sql::query::QueryConfig<D>> {
    let mut config = faucet_connectors::sql::query::QueryConfig::for_table(url, "");
    match what.split_once('=') {
        Some(("table", t)) => config.table = Some(t.to_owned()),
        Some(("query", q)) => {
            config.table = None;
            config.query = Some(q.to_owned());
        }
        _ => return None,
    }
    Some(config)
}

/// The key of `upsert=KEY`, `None` for `append`.
pub(crate) fn upsert_key(mode: &str) -> Result<Option<String>, Box<dyn Error>> {
    match mode.split_once('=') {
        Some(("upsert", key)) => Ok(Some(key.to_owned())),
        _ if mode == "append" => Ok(None),
        _ => Err(format!("expected append or upsert=KEY, got `{mode}`").into()),
    }
}

/// The options of an at-least-once run in pages of `batch_size` under `state_key`.
pub(crate) fn at_least_once(batch_size: usize, state_key: &str) -> faucet_core::RunStreamOptions {
    faucet_core::RunStreamOptions {
        batch_size,
        state_key: state_key.into(),
        delivery: faucet_core::DeliveryRequest::AtLeastOnce,
        ..Default::default()
    }
}

/// Prints `summary` as one JSON line: records, pages, seconds, records per second, the
/// derived guarantee and the last bookmark.
pub(crate) fn print_summary(summary: &RunSummary) {
    let secs = summary.elapsed.as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "records": summary.records_out,
            "pages": summary.pages,
            "seconds": secs,
            "records_per_second": summary.records_out as f64 / secs.max(1e-9),
            "guarantee": summary.guarantee.to_string(),
            "last_bookmark": summary.last_bookmark,
        })
    );
}

/// The body of `pg_to_jsonl` and `mysql_to_jsonl` (named `name`): `URL (table=T |
/// query=SQL) OUT.jsonl STATE_DIR [BATCH_SIZE]`, the query source of dialect `D` into a
/// JSON Lines file with a file state store; prints the summary.
#[cfg(all(feature = "sql-source", feature = "files"))]
pub(crate) async fn query_to_jsonl<D: faucet_connectors::sql::query::QueryDialect>(
    name: &str,
) -> Result<(), Box<dyn Error>> {
    use std::sync::Arc;

    use faucet_connectors::files::{JsonlSink, JsonlSinkConfig};
    use faucet_connectors::sql::query::QuerySource;
    use faucet_core::state::FileStateStore;
    use faucet_core::{Pipeline, RunStreamOptions};

    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, what, output, state_dir, rest @ ..] = args.as_slice() else {
        eprintln!("usage: {name} URL (table=T | query=SQL) OUT.jsonl STATE_DIR [BATCH_SIZE]");
        std::process::exit(2);
    };
    let batch_size = batch_size(rest)?;
    let config = query_config::<D>(url, what)
        .ok_or_else(|| format!("expected table=... or query=..., got `{what}`"))?;
    let source = QuerySource::new(config)?;
    let sink = JsonlSink::new(JsonlSinkConfig::new(output))?;
    let summary = Pipeline::new(&source, &sink)
        .with_state_store(Arc::new(FileStateStore::new(state_dir)))
        .with_options(RunStreamOptions {
            batch_size,
            state_key: name.into(),
            ..Default::default()
        })
        .run()
        .await?;
    print_summary(&summary);
    Ok(())
}
