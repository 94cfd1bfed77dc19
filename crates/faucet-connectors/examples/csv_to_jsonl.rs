//! CSV → JSON Lines with a durable bookmark: the library form of
//!
//! ```yaml
//! pipeline:
//!   source: { type: csv, config: { path: in.csv } }
//!   sink:   { type: jsonl, config: { path: out.jsonl } }
//!   state:  { type: file, config: { dir: state } }
//! ```
//!
//! Usage: `cargo run --release --example csv_to_jsonl -- IN.csv OUT.jsonl STATE_DIR [BATCH_SIZE]`
//!
//! Run it twice: the second run resumes from the bookmark in `STATE_DIR` and moves nothing
//! new. Kill it half way and run it again: the output holds every row, at most the one
//! in-flight page twice (at-least-once). `bench/csv_to_jsonl.sh` uses it to measure the
//! pipeline against a bare csv → JSON loop. Prints a JSON summary on stdout.

mod common;

use std::sync::Arc;

use faucet_connectors::files::{CsvSource, CsvSourceConfig, JsonlSink, JsonlSinkConfig};
use faucet_core::state::FileStateStore;
use faucet_core::{Pipeline, RunStreamOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output, state_dir, rest @ ..] = args.as_slice() else {
        eprintln!("usage: csv_to_jsonl IN.csv OUT.jsonl STATE_DIR [BATCH_SIZE]");
        std::process::exit(2);
    };
    let batch_size = common::batch_size(rest)?;

    let source = CsvSource::new(CsvSourceConfig::new(input))?;
    let sink = JsonlSink::new(JsonlSinkConfig::new(output))?;
    let summary = Pipeline::new(&source, &sink)
        .with_state_store(Arc::new(FileStateStore::new(state_dir)))
        .with_options(RunStreamOptions {
            batch_size,
            state_key: "csv_to_jsonl".into(),
            ..Default::default()
        })
        .run()
        .await?;

    common::print_summary(&summary);
    Ok(())
}
