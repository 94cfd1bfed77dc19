//! Shared helpers: the server URL, a fresh pair of tables per test, error inspection.

use faucet_state_postgres::PostgresStateStore;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use faucet_test_support::Service;
pub(crate) use faucet_test_support::pg_url;

/// A pool on the test server; fails the test, naming the service, when it is unreachable.
pub(crate) async fn admin_pool() -> PgPool {
    Service::Postgres.expect_up(
        PgPoolOptions::new()
            .max_connections(4)
            .connect(&pg_url())
            .await,
    )
}

/// Drops `table` and its lease table, so a test starts from nothing.
pub(crate) async fn drop_tables(pool: &PgPool, table: &str) {
    for t in [table.to_owned(), format!("{table}_lease")] {
        sqlx::query(&format!("DROP TABLE IF EXISTS \"{t}\""))
            .execute(pool)
            .await
            .expect("drop table");
    }
}

/// A store on fresh tables `table` / `table_lease`, created by `ensure_table`.
pub(crate) async fn fresh_store(table: &str) -> (PostgresStateStore, PgPool) {
    let pool = admin_pool().await;
    drop_tables(&pool, table).await;
    let store = PostgresStateStore::connect_with(&pg_url(), 5, table)
        .await
        .expect("connect");
    store.ensure_table().await.expect("ensure_table");
    (store, pool)
}

/// Rows in `table`.
pub(crate) async fn count(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM \"{table}\""))
        .fetch_one(pool)
        .await
        .expect("count")
}

/// The error's message with its whole source chain, and its Debug form (shared with every
/// connector's tests).
pub(crate) use faucet_core::testing::everything_printed;

/// `pg_url()` with its user or database replaced.
pub(crate) fn url_with(user: Option<&str>, db: Option<&str>) -> String {
    let options: sqlx::postgres::PgConnectOptions = pg_url().parse().expect("test url");
    let user = user.unwrap_or(options.get_username()).to_owned();
    let db = db
        .map(str::to_owned)
        .or(options.get_database().map(str::to_owned))
        .unwrap_or_else(|| "test".to_owned());
    format!(
        "postgres://{user}@{}:{}/{db}",
        options.get_host(),
        options.get_port()
    )
}

/// A URL to the test server's host on a port where nothing listens, with a password.
pub(crate) const DEAD_URL: &str = "postgres://postgres:s3cr3t-pw@127.0.0.1:1/test";
