//! Bookmarks: lifecycle, exact JSON, custom tables, concurrent writers, the shared
//! conformance battery.

use std::sync::Arc;

use faucet_core::serde_json::{self, Value, json};
use faucet_core::state::StateStore;
use faucet_core::testing::conformance;
use faucet_state_postgres::PostgresStateStore;

use crate::support::{admin_pool, count, drop_tables, fresh_store, pg_url};

#[tokio::test]
async fn lifecycle_keeps_nested_json_and_big_integers_exactly() {
    let (store, pool) = fresh_store("fst_lifecycle").await;
    assert_eq!(store.name(), "postgres");
    assert_eq!(store.get("orders::eu").await.expect("get"), None);

    let text = r#"{"lsn":"0/16B3748","n":12345678901234567890,"price":12.50,
        "nested":{"ids":[1,-2,3],"ok":true,"none":null,"s":"é \"q\" \\ / \n"}}"#;
    let bookmark: Value = serde_json::from_str(text).expect("json");
    store.put("orders::eu", &bookmark).await.expect("put");
    let back = store.get("orders::eu").await.expect("get").expect("some");
    assert_eq!(back, bookmark);
    let printed = serde_json::to_string(&back).expect("encode");
    assert!(printed.contains("12345678901234567890"), "{printed}");
    assert!(printed.contains("12.50"), "{printed}");
    // The row itself holds the exact number, as JSONB numeric.
    let in_db: String =
        sqlx::query_scalar("SELECT (value->>'n') FROM \"fst_lifecycle\" WHERE key = 'orders::eu'")
            .fetch_one(&pool)
            .await
            .expect("select");
    assert_eq!(in_db, "12345678901234567890");

    let first_update = stamp(&pool, "orders::eu").await;
    let newer = json!({"lsn": "0/16B3750"});
    store.put("orders::eu", &newer).await.expect("overwrite");
    assert_eq!(store.get("orders::eu").await.expect("get"), Some(newer));
    assert!(
        stamp(&pool, "orders::eu").await >= first_update,
        "updated_at moves"
    );
    assert_eq!(count(&pool, "fst_lifecycle").await, 1, "one row per key");

    for what in ["delete", "delete of a missing key"] {
        store.delete("orders::eu").await.expect(what);
    }
    assert_eq!(store.get("orders::eu").await.expect("get"), None);
    assert_eq!(count(&pool, "fst_lifecycle").await, 0);
    drop_tables(&pool, "fst_lifecycle").await;
}

/// `updated_at` as microseconds since the epoch.
async fn stamp(pool: &sqlx::PgPool, key: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT (extract(epoch FROM updated_at) * 1000000)::bigint FROM \"fst_lifecycle\" \
         WHERE key = $1",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .expect("updated_at")
}

#[tokio::test]
async fn custom_table_through_from_pool() {
    let pool = admin_pool().await;
    let table = "fst_Custom_Table";
    drop_tables(&pool, table).await;
    let store = PostgresStateStore::from_pool(pool.clone(), table).expect("from_pool");
    assert_eq!(store.table(), table);
    assert_eq!(store.lease_table(), "fst_Custom_Table_lease");
    store.ensure_table().await.expect("ensure_table");
    store
        .ensure_table()
        .await
        .expect("ensure_table is idempotent");
    store.put("k", &json!({"id": 7})).await.expect("put");

    // The row is in exactly that (case-preserved, quoted) table, with the seed's columns.
    let row: (String, serde_json::Value) =
        sqlx::query_as("SELECT key, value FROM \"fst_Custom_Table\"")
            .fetch_one(&pool)
            .await
            .expect("row");
    assert_eq!(row, ("k".to_owned(), json!({"id": 7})));
    let columns: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text, is_nullable::text \
         FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position",
    )
    .bind(table)
    .fetch_all(&pool)
    .await
    .expect("columns");
    let columns: Vec<(&str, &str, &str)> = columns
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    assert_eq!(
        columns,
        [
            ("key", "text", "NO"),
            ("value", "jsonb", "NO"),
            ("updated_at", "timestamp with time zone", "NO"),
        ]
    );
    drop_tables(&pool, table).await;
}

#[tokio::test]
async fn sixteen_concurrent_writers_of_one_key_all_succeed() {
    let (store, pool) = fresh_store("fst_concurrent").await;
    // Every put succeeds and one writer's whole value wins (the shared check) ...
    conformance::concurrent_writers_of_one_key(Arc::new(store), "hot")
        .await
        .expect("concurrent writers");
    // ... in one row.
    assert_eq!(count(&pool, "fst_concurrent").await, 1);
    drop_tables(&pool, "fst_concurrent").await;
}

#[tokio::test]
async fn passes_the_state_store_conformance_battery() {
    let (store, pool) = fresh_store("fst_conformance").await;
    conformance::state_store_contract(&store, "pg-conf-")
        .await
        .expect("conformance");
    assert_eq!(count(&pool, "fst_conformance").await, 0);
    drop_tables(&pool, "fst_conformance").await;
}

#[tokio::test]
async fn debug_never_shows_the_password() {
    let lazy = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy(crate::support::DEAD_URL)
        .expect("lazy pool");
    let store = PostgresStateStore::from_pool(lazy, "fst_debug").expect("from_pool");
    let debug = format!("{store:?}");
    assert!(!debug.contains("s3cr3t"), "{debug}");
    assert!(
        debug.contains("postgres://postgres@127.0.0.1:1/test"),
        "{debug}"
    );

    let store = PostgresStateStore::connect_with(&pg_url(), 2, "fst_debug")
        .await
        .expect("connect");
    let debug = format!("{store:?}");
    assert!(debug.contains("max_connections: 2"), "{debug}");
    assert!(debug.contains("table: \"fst_debug\""), "{debug}");
}

#[tokio::test]
async fn the_stores_own_pool_commits_durably_even_if_the_session_says_off() {
    let (store, pool) = fresh_store("fst_durable").await;
    let sep = if pg_url().contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}options=-c%20synchronous_commit%3Doff", pg_url());
    // The URL's own sessions run with synchronous_commit = off ...
    let plain = sqlx::postgres::PgPoolOptions::new()
        .connect(&url)
        .await
        .expect("plain pool");
    let level: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&plain)
        .await
        .expect("show");
    assert_eq!(level, "off");
    // ... but the store's pool turns it on, so a put is durable when it returns.
    let store2 = PostgresStateStore::connect_with(&url, 1, "fst_durable")
        .await
        .expect("connect");
    let level: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(store2.pool())
        .await
        .expect("show");
    assert_eq!(level, "on");
    store2.put("k", &json!(1)).await.expect("put");
    assert_eq!(store.get("k").await.expect("get"), Some(json!(1)));
    drop_tables(&pool, "fst_durable").await;
}

#[tokio::test]
async fn sixteen_stores_creating_one_fresh_table_at_once_all_succeed() {
    // `CREATE TABLE IF NOT EXISTS` of one name from several sessions at once fails on the
    // catalog (pg_type: 23505 or 42710, pg_class: 42P07) for all but one of them; CI saw a
    // first run fail so. ensure_table serializes the creation (an advisory lock): every store
    // succeeds, in every round.
    let pool = admin_pool().await;
    for round in 0..20 {
        let table = format!("fst_race_{round}_{}", std::process::id());
        drop_tables(&pool, &table).await;
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let table = table.clone();
            tasks.push(tokio::spawn(async move {
                let store = PostgresStateStore::connect_with(&pg_url(), 1, &table)
                    .await
                    .expect("connect");
                store.ensure_table().await
            }));
        }
        for (i, task) in tasks.into_iter().enumerate() {
            let result = task.await.expect("task");
            assert!(result.is_ok(), "round {round}, store {i}: {result:?}");
        }
        assert_eq!(count(&pool, &table).await, 0);
        drop_tables(&pool, &table).await;
    }
}
