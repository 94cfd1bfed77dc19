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

mod common;

use faucet_connectors::mysql::query::Mysql;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::query_to_jsonl::<Mysql>("mysql_to_jsonl").await
}
