//! A MySQL or MariaDB table or query → JSON Lines with a durable bookmark: the library form of
//!
//! ```yaml
//! pipeline:
//!   source: { type: mysql, config: { connection_url: ..., table: test.t } }
//!   sink:   { type: jsonl, config: { path: out.jsonl } }
//!   state:  { type: file, config: { path: state } }
//! ```
//!
//! Usage: `mysql_to_jsonl URL (table=DB.TABLE | query=SQL) OUT.jsonl STATE_DIR [BATCH_SIZE]`
//!
//! `bench/mysql_to_jsonl.sh` uses it to measure the query source against the `mariadb` client. Prints a
//! JSON summary on stdout.

use std::sync::Arc;

use faucet_connectors::files::{JsonlSink, JsonlSinkConfig};
use faucet_connectors::mysql::{MysqlQueryConfig, MysqlQuerySource};
use faucet_core::state::FileStateStore;
use faucet_core::{Pipeline, RunStreamOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, what, output, state_dir, rest @ ..] = args.as_slice() else {
        eprintln!(
            "usage: mysql_to_jsonl URL (table=T | query=SQL) OUT.jsonl STATE_DIR [BATCH_SIZE]"
        );
        std::process::exit(2);
    };
    let batch_size = match rest.first() {
        Some(n) => n.parse()?,
        None => faucet_core::source::DEFAULT_BATCH_SIZE,
    };
    let mut config = MysqlQueryConfig::for_table(url.as_str(), "");
    match what.split_once('=') {
        Some(("table", t)) => config.table = Some(t.to_owned()),
        Some(("query", q)) => {
            config.table = None;
            config.query = Some(q.to_owned());
        }
        _ => return Err(format!("expected table=... or query=..., got `{what}`").into()),
    }
    let source = MysqlQuerySource::new(config)?;
    let sink = JsonlSink::new(JsonlSinkConfig::new(output))?;
    let summary = Pipeline::new(&source, &sink)
        .with_state_store(Arc::new(FileStateStore::new(state_dir)))
        .with_options(RunStreamOptions {
            batch_size,
            state_key: "mysql_to_jsonl".into(),
            ..Default::default()
        })
        .run()
        .await?;
    let secs = summary.elapsed.as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "records": summary.records_out,
            "pages": summary.pages,
            "seconds": secs,
            "records_per_second": summary.records_out as f64 / secs.max(1e-9),
            "guarantee": summary.guarantee.to_string(),
        })
    );
    Ok(())
}
