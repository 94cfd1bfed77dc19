//! Bad table names and keys fail with a clear error before anything is sent: every store
//! here points at a port where nothing listens, so any attempt to reach a server would
//! surface as a connection error instead of the validation error the tests expect.

use std::time::{Duration, Instant};

use faucet_core::FaucetError;
use faucet_core::state::StateStore;
use faucet_core::testing::conformance;
use faucet_state_postgres::PostgresStateStore;

use crate::support::{DEAD_URL, everything_printed};

const BAD_TABLES: [(&str, &str); 4] = [
    ("faucet_state; DROP TABLE x", "contains ';'"),
    ("", "is empty"),
    (
        "t123456789012345678901234567890123456789012345678901234567890123",
        "64 characters",
    ),
    ("public.faucet_state", "contains '.'"),
];

fn assert_config(err: FaucetError, field: &str, needle: &str) {
    match &err {
        FaucetError::Config { field: f, message } => {
            assert_eq!(f, field, "{err}");
            assert!(
                message.contains(needle),
                "{message:?} should contain {needle:?}"
            );
        }
        other => panic!("expected a Config error about {field}, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_table_names_are_rejected_before_connecting() {
    assert_eq!(BAD_TABLES[2].0.len(), 64);
    for (table, why) in BAD_TABLES {
        let started = Instant::now();
        let err = PostgresStateStore::connect_with(DEAD_URL, 5, table)
            .await
            .expect_err(table);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "no connection attempt"
        );
        assert_config(err, "table", why);

        let lazy = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy(DEAD_URL)
            .expect("lazy pool");
        let err = PostgresStateStore::from_pool(lazy, table).expect_err(table);
        assert_config(err, "table", why);
    }
    // The longest valid name is fine, and so is the default.
    let lazy = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy(DEAD_URL)
        .expect("lazy pool");
    PostgresStateStore::from_pool(lazy.clone(), &"t".repeat(63)).expect("63 characters");
    PostgresStateStore::from_pool(lazy, "faucet_state").expect("default name");
}

#[tokio::test]
async fn zero_connections_is_a_config_error() {
    let err = PostgresStateStore::connect_with(DEAD_URL, 0, "faucet_state")
        .await
        .expect_err("zero");
    assert_config(err, "max_connections", "at least 1");
}

#[tokio::test]
async fn bad_keys_are_rejected_before_any_sql() {
    let lazy = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy(DEAD_URL)
        .expect("lazy pool");
    let store = PostgresStateStore::from_pool(lazy, "faucet_state").expect("store");
    // get / put / delete / acquire_lease / put_fenced of each bad key: a Config error about
    // `state key`, within a second (the shared check).
    conformance::bad_keys_fail_before_io(&store)
        .await
        .expect("bad keys");
    // Proof that the store would have failed differently had it sent anything.
    let err = store.get("fine").await.expect_err("dead server");
    assert!(matches!(err, FaucetError::Connect { .. }), "{err:?}");
}

#[tokio::test]
async fn an_unreachable_server_is_named_with_a_hint_and_no_password() {
    let err = PostgresStateStore::connect(DEAD_URL)
        .await
        .expect_err("nothing listens on port 1");
    assert!(matches!(err, FaucetError::Connect { .. }), "{err:?}");
    assert!(err.is_retryable());
    let msg = err.to_string();
    assert!(msg.contains("connection refused"), "{msg}");
    assert!(
        msg.contains("postgres://postgres@127.0.0.1:1/test"),
        "{msg}"
    );
    assert!(msg.contains("hint:"), "{msg}");
    let all = everything_printed(&err);
    assert!(!all.contains("s3cr3t"), "{all}");
}

#[tokio::test]
async fn an_unparseable_url_is_a_config_error_without_the_url() {
    let err = PostgresStateStore::connect("postgres://user:s3cr3t@host:notaport/db")
        .await
        .expect_err("bad port");
    assert!(matches!(err, FaucetError::Config { .. }), "{err:?}");
    assert!(!everything_printed(&err).contains("s3cr3t"), "{err}");
}
