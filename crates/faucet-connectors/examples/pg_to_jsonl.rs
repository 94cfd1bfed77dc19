//! A PostgreSQL table or query → JSON Lines with a durable bookmark: the library form of
//!
//! ```yaml
//! pipeline:
//!   source: { type: postgres, config: { connection_url: ..., table: public.t } }
//!   sink:   { type: jsonl, config: { path: out.jsonl } }
//!   state:  { type: file, config: { path: state } }
//! ```
//!
//! Usage: `pg_to_jsonl URL (table=SCHEMA.TABLE | query=SQL) OUT.jsonl STATE_DIR [BATCH_SIZE]`
//!
//! `bench/pg_to_jsonl.sh` uses it to measure the query source against `psql \copy`. Prints a
//! JSON summary on stdout.

mod common;

use faucet_connectors::postgres::query::Postgres;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::query_to_jsonl::<Postgres>("pg_to_jsonl").await
}
