//! `check()`: a real round trip that leaves nothing behind, and failures that name their
//! cause with a hint.
//!
//! The local server trusts every login from 127.0.0.1 (pg_hba `trust`), so a wrong
//! password cannot be produced here; the authorization class is tested with a role that
//! does not exist (SQLSTATE 28000) and a database that does not exist (3D000).

use faucet_core::FaucetError;
use faucet_core::state::{DOCTOR_KEY, LeaseHolder, LeaseRequest, StateStore};
use faucet_state_postgres::PostgresStateStore;
use sqlx::postgres::PgPoolOptions;
use std::time::Duration;

use crate::support::{admin_pool, count, drop_tables, everything_printed, fresh_store, url_with};

fn lazy_store(url: &str, table: &str) -> PostgresStateStore {
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(url)
        .expect("lazy pool");
    PostgresStateStore::from_pool(pool, table).expect("store")
}

fn assert_state_error(err: &FaucetError, needles: &[&str]) {
    assert!(matches!(err, FaucetError::State { .. }), "{err:?}");
    let msg = err.to_string();
    for n in needles {
        assert!(msg.contains(n), "{msg:?} should contain {n:?}");
    }
    assert!(msg.contains("hint:"), "{msg}");
}

#[tokio::test]
async fn check_round_trips_and_leaves_no_row() {
    let (store, pool) = fresh_store("fst_check_ok").await;
    store.check().await.expect("check");
    store.check().await.expect("check twice");
    assert_eq!(count(&pool, "fst_check_ok").await, 0, "no state row left");
    assert_eq!(
        count(&pool, "fst_check_ok_lease").await,
        0,
        "no lease row left"
    );
    assert_eq!(store.get(DOCTOR_KEY).await.expect("get"), None);
    drop_tables(&pool, "fst_check_ok").await;
}

#[tokio::test]
async fn check_names_a_missing_table_and_says_ensure_table() {
    let pool = admin_pool().await;
    drop_tables(&pool, "fst_check_missing").await;
    let store = PostgresStateStore::from_pool(pool.clone(), "fst_check_missing").expect("store");
    let err = store.check().await.expect_err("no table");
    assert_state_error(
        &err,
        &[
            "fst_check_missing",
            "42P01",
            "ensure_table: true",
            "check: put:",
        ],
    );
}

#[tokio::test]
async fn a_missing_lease_table_fails_check_and_acquire_with_ensure_table_hint() {
    let pool = admin_pool().await;
    let table = "fst_check_nolease";
    drop_tables(&pool, table).await;
    // The seed's table, created by hand (as migrations would), without the lease table.
    sqlx::query(&format!(
        "CREATE TABLE \"{table}\" (key TEXT PRIMARY KEY, value JSONB NOT NULL, \
         updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW())"
    ))
    .execute(&pool)
    .await
    .expect("create");
    let store = PostgresStateStore::from_pool(pool.clone(), table).expect("store");
    let err = store.check().await.expect_err("no lease table");
    assert_state_error(
        &err,
        &["fst_check_nolease_lease", "42P01", "ensure_table: true"],
    );
    assert_eq!(count(&pool, table).await, 0, "the round trip left nothing");

    let err = store
        .acquire_lease(&LeaseRequest::new(
            "k",
            &LeaseHolder::this_process(),
            Duration::from_secs(5),
        ))
        .await
        .expect_err("no lease table");
    assert_state_error(&err, &["fst_check_nolease_lease", "ensure_table: true"]);
    store.ensure_table().await.expect("ensure_table adds it");
    store.check().await.expect("check");
    drop_tables(&pool, table).await;
}

#[tokio::test]
async fn an_unknown_role_is_an_authorization_error_from_connect_and_check() {
    let url = url_with(Some("fst_no_such_role"), None);
    let err = PostgresStateStore::connect_with(&url, 5, "faucet_state")
        .await
        .expect_err("unknown role");
    assert_state_error(&err, &["28000", "fst_no_such_role", "role"]);
    assert!(!err.is_retryable(), "a person has to fix this");

    let err = lazy_store(&url, "faucet_state")
        .check()
        .await
        .expect_err("unknown role");
    assert_state_error(&err, &["check: connect:", "28000", "fst_no_such_role"]);
}

#[tokio::test]
async fn an_unknown_database_is_named() {
    let url = url_with(None, Some("fst_no_such_db"));
    let err = lazy_store(&url, "faucet_state")
        .check()
        .await
        .expect_err("unknown database");
    assert_state_error(
        &err,
        &["3D000", "database does not exist", "fst_no_such_db"],
    );
}

#[tokio::test]
async fn missing_privileges_are_named_with_a_grant_hint() {
    let pool = admin_pool().await;
    let table = "fst_check_perm";
    drop_tables(&pool, table).await;
    // A login role without a password (trust) and without privileges on the table.
    let _ = sqlx::query("CREATE ROLE fst_limited LOGIN")
        .execute(&pool)
        .await;
    let owner = PostgresStateStore::from_pool(pool.clone(), table).expect("store");
    owner.ensure_table().await.expect("ensure_table");

    let store = lazy_store(&url_with(Some("fst_limited"), None), table);
    let err = store.check().await.expect_err("no privileges");
    assert_state_error(&err, &["42501", "permission denied", "GRANT", table]);

    // With privileges on the state table only, the lease table is what check names.
    sqlx::query(&format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON \"{table}\" TO fst_limited"
    ))
    .execute(&pool)
    .await
    .expect("grant");
    let err = store.check().await.expect_err("no lease privileges");
    assert_state_error(
        &err,
        &["42501", "fst_check_perm_lease", "check: lease table probe"],
    );
    assert_eq!(count(&pool, table).await, 0, "the round trip left nothing");

    drop_tables(&pool, table).await;
    let _ = sqlx::query("DROP ROLE IF EXISTS fst_limited")
        .execute(&pool)
        .await;
}

#[tokio::test]
async fn check_on_a_dead_server_is_a_connect_error_at_once() {
    let started = std::time::Instant::now();
    let err = lazy_store(crate::support::DEAD_URL, "faucet_state")
        .check()
        .await
        .expect_err("dead");
    assert!(matches!(err, FaucetError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains("connection refused"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "no pool timeout wait"
    );
    assert!(!everything_printed(&err).contains("s3cr3t"));
}
