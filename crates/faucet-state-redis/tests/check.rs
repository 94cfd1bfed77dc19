//! `check()`: a real round trip that leaves nothing behind; a stopped server is named with a
//! hint; the store reconnects when the server comes back.

use std::time::Duration;

use faucet_core::FaucetError;
use faucet_core::serde_json::json;
use faucet_core::state::{DOCTOR_KEY, StateStore};
use faucet_state_redis::RedisStateStore;

use crate::support::{PrivateRedis, fresh_store, keys_under};

#[tokio::test]
async fn check_round_trips_and_leaves_no_key() {
    let prefix = "fst:check:";
    let (store, mut conn) = fresh_store(prefix).await;
    store.check().await.expect("check");
    store.check().await.expect("check twice");
    assert!(
        keys_under(&mut conn, prefix).await.is_empty(),
        "nothing left"
    );
    assert_eq!(store.get(DOCTOR_KEY).await.expect("get"), None);
}

#[tokio::test]
async fn a_stopped_server_is_named_with_a_hint_and_the_store_reconnects() {
    let mut server = PrivateRedis::start(None);
    let url = server.url(None);
    let store = RedisStateStore::connect(&url, "fst:stop:")
        .await
        .expect("connect");
    store.put("k", &json!({"offset": 1})).await.expect("put");
    server.stop();

    let err = store.check().await.expect_err("server stopped");
    assert!(matches!(err, FaucetError::Connect { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("redis://127.0.0.1:{}/0", server.port)),
        "{msg}"
    );
    assert!(
        msg.contains("hint:") && msg.contains("check: put:"),
        "{msg}"
    );
    assert!(err.is_retryable());

    // Back on the same port (empty: it has no persistence): the manager reconnects.
    let _again = PrivateRedis::start_on(server.port, None);
    let mut result = Err(err);
    for _ in 0..50 {
        result = store.check().await;
        if result.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    result.expect("reconnected");
    assert_eq!(
        store.get("k").await.expect("get"),
        None,
        "that server kept nothing"
    );
}
