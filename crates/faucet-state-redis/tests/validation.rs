//! Bad prefixes and keys fail with a clear error before anything is sent; unreachable
//! servers and rejected logins are named with a hint, never with the password.

use std::time::{Duration, Instant};

use faucet_core::FaucetError;
use faucet_core::state::StateStore;
use faucet_core::testing::conformance;
use faucet_state_redis::RedisStateStore;

use crate::support::{DEAD_URL, PrivateRedis, everything_printed};

fn assert_config(err: FaucetError, field: &str) {
    match &err {
        FaucetError::Config { field: f, .. } => assert_eq!(f, field, "{err}"),
        other => panic!("expected a Config error about {field}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_bad_prefix_is_rejected_before_connecting() {
    for prefix in ["has space:", "tab\t", "nl\n"] {
        let started = Instant::now();
        let err = RedisStateStore::connect(DEAD_URL, prefix)
            .await
            .expect_err(prefix);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "no connection attempt"
        );
        assert_config(err, "prefix");
    }
}

#[tokio::test]
async fn bad_keys_are_rejected_before_any_command() {
    // A store whose server is gone: any command would fail with a connection error.
    let mut server = PrivateRedis::start(None);
    let store = RedisStateStore::connect(&server.url(None), "fst:v:")
        .await
        .expect("connect");
    server.stop();
    // get / put / delete / acquire_lease / put_fenced of each bad key: a Config error about
    // `state key`, within a second (the shared check).
    conformance::bad_keys_fail_before_io(&store)
        .await
        .expect("bad keys");
    let err = store.get("fine").await.expect_err("server is gone");
    assert!(matches!(err, FaucetError::Connect { .. }), "{err:?}");
}

#[tokio::test]
async fn an_unreachable_server_is_named_with_a_hint_and_no_password() {
    let err = RedisStateStore::connect(DEAD_URL, "fst:")
        .await
        .expect_err("nothing listens on port 1");
    assert!(matches!(err, FaucetError::Connect { .. }), "{err:?}");
    assert!(err.is_retryable());
    let msg = err.to_string();
    assert!(
        msg.contains("connection refused by redis://127.0.0.1:1/0"),
        "{msg}"
    );
    assert!(msg.contains("hint:"), "{msg}");
    assert!(!everything_printed(&err).contains("s3cr3t"));
}

#[tokio::test]
async fn a_wrong_password_is_a_rejected_login_with_a_hint() {
    let server = PrivateRedis::start(Some("right-pw"));
    let err = RedisStateStore::connect(&server.url(Some("wrong-pw")), "fst:")
        .await
        .expect_err("wrong password");
    assert!(matches!(err, FaucetError::State { .. }), "{err:?}");
    assert!(!err.is_retryable(), "a person has to fix this");
    let msg = err.to_string();
    assert!(msg.contains("rejected the login"), "{msg}");
    assert!(msg.contains("check the user and password"), "{msg}");
    let all = everything_printed(&err);
    assert!(
        !all.contains("wrong-pw") && !all.contains("right-pw"),
        "{all}"
    );

    // No password at all, against a server that requires one.
    let err = RedisStateStore::connect(&server.url(None), "fst:")
        .await
        .expect_err("no password");
    assert!(err.to_string().contains("rejected the login"), "{err}");

    // The right one works, and Debug does not show it.
    let store = RedisStateStore::connect(&server.url(Some("right-pw")), "fst:")
        .await
        .expect("right password");
    store.check().await.expect("check");
    let debug = format!("{store:?}");
    assert!(!debug.contains("right-pw"), "{debug}");
    assert!(
        debug.contains(&format!("redis://127.0.0.1:{}/0", server.port)),
        "{debug}"
    );
}

#[tokio::test]
async fn an_unparseable_url_is_a_config_error_without_the_url() {
    let err = RedisStateStore::connect("redis://:s3cr3t@host:notaport/", "fst:")
        .await
        .expect_err("bad url");
    assert_config(err, "url");
    let err = RedisStateStore::connect("http://:s3cr3t@host/", "fst:")
        .await
        .expect_err("bad scheme");
    assert!(!everything_printed(&err).contains("s3cr3t"), "{err}");
}
