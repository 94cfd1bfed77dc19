//! The store under the real run loop: resume across restarts, and one runner per key.

use std::sync::Arc;
use std::time::Duration;

use faucet_core::serde_json::json;
use faucet_core::state::{LeaseError, LeaseHolder, LeaseOutcome, StateStore};
use faucet_core::testing::{MemorySink, VecSource};
use faucet_core::{FaucetError, Pipeline, RunStreamOptions};
use faucet_state_redis::RedisStateStore;

use crate::support::{clear, fresh_store, redis_url};

fn opts(key: &str) -> RunStreamOptions {
    RunStreamOptions {
        batch_size: 10,
        state_key: key.into(),
        ..RunStreamOptions::default()
    }
}

#[tokio::test]
async fn a_restarted_run_resumes_from_the_stored_bookmark() {
    let prefix = "fst:pipe-resume:";
    let (store, mut conn) = fresh_store(prefix).await;
    let sink = MemorySink::new();
    let summary = Pipeline::new(&VecSource::sequence(25), &sink)
        .with_state_store(Arc::new(store))
        .with_options(opts("orders::eu"))
        .run()
        .await
        .expect("run 1");
    assert_eq!(summary.records_out, 25);

    // A new process: a new store on the same prefix.
    let store = RedisStateStore::connect(&redis_url(), prefix)
        .await
        .expect("connect");
    assert_eq!(
        store.get("orders::eu").await.expect("get"),
        Some(json!({"offset": 25}))
    );
    let source = VecSource::sequence(35);
    let summary = Pipeline::new(&source, &sink)
        .with_state_store(Arc::new(store.clone()))
        .with_options(opts("orders::eu"))
        .run()
        .await
        .expect("run 2");
    assert_eq!(summary.records_out, 10, "only the new records");
    assert_eq!(
        sink.rows(),
        source.expected(),
        "nothing lost, nothing doubled"
    );

    match store
        .acquire_lease(
            "orders::eu",
            &LeaseHolder::this_process(),
            Duration::from_secs(5),
        )
        .await
        .expect("acquire")
    {
        LeaseOutcome::Acquired(lease) => assert_eq!(lease.fence, 3, "two runs, then us"),
        other => panic!("each run releases its lease, got {other:?}"),
    }
    clear(&mut conn, prefix).await;
}

#[tokio::test]
async fn a_second_run_of_a_busy_key_fails_naming_the_holder_and_moves_nothing() {
    let prefix = "fst:pipe-busy:";
    let (store, mut conn) = fresh_store(prefix).await;
    let other = LeaseHolder {
        id: "cron-tick-1".into(),
        host: "etl-2".into(),
        pid: 4711,
        since: "2026-11-30T06:00:00Z".into(),
    };
    assert!(matches!(
        store
            .acquire_lease("orders::eu", &other, Duration::from_secs(30))
            .await
            .expect("acquire"),
        LeaseOutcome::Acquired(_)
    ));
    let sink = MemorySink::new();
    let err = Pipeline::new(&VecSource::sequence(5), &sink)
        .with_state_store(Arc::new(store.clone()))
        .with_options(opts("orders::eu"))
        .run()
        .await
        .expect_err("busy");
    match &err {
        FaucetError::Lease(LeaseError::Held { holder, .. }) => assert_eq!(*holder, other),
        e => panic!("expected LeaseError::Held, got {e:?}"),
    }
    assert!(err.to_string().contains("pid 4711 on host etl-2"), "{err}");
    assert!(sink.rows().is_empty());
    assert_eq!(store.get("orders::eu").await.expect("get"), None);
    clear(&mut conn, prefix).await;
}
