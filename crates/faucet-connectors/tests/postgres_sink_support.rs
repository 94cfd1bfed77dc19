//! Helpers of the `postgres` sink tests: the sinks, and reading a target table back (the
//! pages come from [`crate::sink_support`]).

use std::future::Future;
use std::pin::Pin;

use faucet_connectors::postgres::{PostgresSink, PostgresSinkConfig};
use serde_json::Value as Json;

pub(crate) use crate::sink_support::{change, change_page, plain_page, row, write_all};

use crate::postgres_query_support::{admin, copy_out, pg_url};

/// An upsert sink on `table` by `key`.
pub(crate) fn upsert_sink(table: &str, key: &[&str]) -> PostgresSink {
    PostgresSink::new(PostgresSinkConfig::new(pg_url(), table).upsert(key.iter().copied()))
        .expect("config")
}

/// An append sink on `table`.
pub(crate) fn append_sink(table: &str) -> PostgresSink {
    PostgresSink::new(PostgresSinkConfig::new(pg_url(), table)).expect("config")
}

/// `select` as COPY text, on a fresh session.
pub(crate) async fn table_text(select: &str) -> String {
    copy_out(&mut admin().await, select).await
}

/// The number `select` (one row, one count) reads, on a fresh session.
pub(crate) async fn table_count(select: &str) -> usize {
    table_text(select).await.trim().parse().expect("a count")
}

/// Asserts `select` reads `want` (COPY text: a line a row, tab-separated columns), on a fresh
/// session.
pub(crate) async fn assert_table(select: &str, want: &str) {
    assert_eq!(table_text(select).await, want, "`{select}`");
}

/// A read-back closure for the conformance checks: the rows of `table` as JSON objects,
/// ordered by `order`.
pub(crate) fn read_back(
    table: &str,
    order: &str,
) -> impl Fn() -> Pin<Box<dyn Future<Output = Vec<Json>> + Send>> + use<> {
    let sql = format!("SELECT row_to_json(t) FROM {table} t ORDER BY {order}");
    move || {
        let sql = sql.clone();
        Box::pin(async move {
            table_text(&sql)
                .await
                .lines()
                .map(|l| serde_json::from_str(&l.replace("\\\\", "\\")).expect("json row"))
                .collect()
        })
    }
}
