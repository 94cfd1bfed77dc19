//! Bookmarks: lifecycle, exact JSON text in Redis, unreadable values, concurrent writers,
//! the shared conformance battery.

use std::sync::Arc;

use faucet_core::FaucetError;
use faucet_core::serde_json::{self, Value, json};
use faucet_core::state::StateStore;
use faucet_core::testing::conformance;
use faucet_state_redis::{DEFAULT_PREFIX, RedisStateStore};

use crate::support::{clear, fresh_store, keys_under, redis_url};

#[tokio::test]
async fn lifecycle_keeps_nested_json_and_big_integers_exactly() {
    let prefix = "fst:lifecycle:";
    let (store, mut conn) = fresh_store(prefix).await;
    assert_eq!(store.name(), "redis");
    assert_eq!(store.get("orders::eu").await.expect("get"), None);

    let text = r#"{"lsn":"0/16B3748","n":12345678901234567890,"price":12.50,"nested":{"ids":[1,-2,3],"ok":true,"none":null,"s":"é \"q\""}}"#;
    let bookmark: Value = serde_json::from_str(text).expect("json");
    store.put("orders::eu", &bookmark).await.expect("put");
    assert_eq!(store.get("orders::eu").await.expect("get"), Some(bookmark));
    // Stored as the exact JSON text under {prefix}{key}.
    let raw: String = redis::cmd("GET")
        .arg("fst:lifecycle:orders::eu")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(raw, text);

    let newer = json!({"lsn": "0/16B3750"});
    store.put("orders::eu", &newer).await.expect("overwrite");
    assert_eq!(store.get("orders::eu").await.expect("get"), Some(newer));
    for what in ["delete", "delete of a missing key"] {
        store.delete("orders::eu").await.expect(what);
    }
    assert_eq!(store.get("orders::eu").await.expect("get"), None);
    assert!(keys_under(&mut conn, prefix).await.is_empty());
}

#[tokio::test]
async fn a_value_that_is_not_json_is_an_error_naming_the_key_not_a_fresh_start() {
    let prefix = "fst:torn:";
    let (store, mut conn) = fresh_store(prefix).await;
    for torn in ["", "{\"lsn\": \"0/1"] {
        redis::cmd("SET")
            .arg("fst:torn:k")
            .arg(torn)
            .query_async::<()>(&mut conn)
            .await
            .expect("SET");
        let err = store.get("k").await.expect_err("torn value");
        assert!(matches!(err, FaucetError::State { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("fst:torn:k") && msg.contains("not JSON"),
            "{msg}"
        );
    }
    clear(&mut conn, prefix).await;
}

#[tokio::test]
async fn sixteen_concurrent_writers_of_one_key_all_succeed() {
    let prefix = "fst:concurrent:";
    let (store, mut conn) = fresh_store(prefix).await;
    // Every put succeeds and one writer's whole value wins (the shared check) ...
    conformance::concurrent_writers_of_one_key(Arc::new(store), "hot")
        .await
        .expect("concurrent writers");
    // ... under one key.
    assert_eq!(keys_under(&mut conn, prefix).await, ["fst:concurrent:hot"]);
    clear(&mut conn, prefix).await;
}

#[tokio::test]
async fn passes_the_state_store_conformance_battery() {
    let prefix = "fst:conformance:";
    let (store, mut conn) = fresh_store(prefix).await;
    conformance::state_store_contract(&store, "redis-conf-")
        .await
        .expect("conformance");
    assert!(keys_under(&mut conn, prefix).await.is_empty());
}

#[tokio::test]
async fn the_default_prefix_is_faucet_state() {
    let store = RedisStateStore::connect(&redis_url(), DEFAULT_PREFIX)
        .await
        .expect("connect");
    assert_eq!(DEFAULT_PREFIX, "faucet:state:");
    assert_eq!(
        store.redis_key("orders::eu").expect("key"),
        "faucet:state:orders::eu"
    );
}
