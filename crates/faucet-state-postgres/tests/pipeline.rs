//! The store under the real run loop: resume across restarts, and one runner per key.

use std::sync::Arc;
use std::time::Duration;

use faucet_core::serde_json::json;
use faucet_core::state::{LeaseError, LeaseHolder, LeaseOutcome, StateStore};
use faucet_core::testing::{MemorySink, VecSource};
use faucet_core::{FaucetError, Pipeline, RunStreamOptions};
use faucet_state_postgres::PostgresStateStore;

use crate::support::{drop_tables, fresh_store, pg_url, url_with};

fn opts(key: &str) -> RunStreamOptions {
    RunStreamOptions {
        batch_size: 10,
        state_key: key.into(),
        ..RunStreamOptions::default()
    }
}

#[tokio::test]
async fn a_restarted_run_resumes_from_the_stored_bookmark() {
    let (store, pool) = fresh_store("fst_pipe_resume").await;
    let sink = MemorySink::new();
    let summary = Pipeline::new(&VecSource::sequence(25), &sink)
        .with_state_store(Arc::new(store))
        .with_options(opts("orders::eu"))
        .run()
        .await
        .expect("run 1");
    assert_eq!(summary.records_out, 25);

    // A new process: a new store on the same table.
    let store = PostgresStateStore::connect_with(&pg_url(), 5, "fst_pipe_resume")
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

    // Each run released its lease: the key is free at once.
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
        other => panic!("{other:?}"),
    }
    drop_tables(&pool, "fst_pipe_resume").await;
}

#[tokio::test]
async fn a_second_run_of_a_busy_key_fails_naming_the_holder_and_moves_nothing() {
    let (store, pool) = fresh_store("fst_pipe_busy").await;
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
    drop_tables(&pool, "fst_pipe_busy").await;
}

/// `shared/cases/13-state-missing-or-torn.md`, S5: the state store becomes unwritable after
/// a run; the next run must fail (not report success), and once the store is writable
/// again a run delivers everything, losing nothing.
#[tokio::test]
async fn an_unwritable_state_table_fails_the_run_and_the_next_run_loses_nothing() {
    let table = "fst_pipe_s5";
    let (_owner, pool) = fresh_store(table).await;
    let _ = sqlx::query("CREATE ROLE fst_s5 LOGIN").execute(&pool).await;
    let grant =
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON \"{table}\", \"{table}_lease\" TO fst_s5");
    sqlx::query(&grant).execute(&pool).await.expect("grant");
    let store = PostgresStateStore::connect_with(&url_with(Some("fst_s5"), None), 2, table)
        .await
        .expect("connect as fst_s5");
    let store = Arc::new(store);
    let sink = MemorySink::new();
    let run = |n: usize| {
        let (store, sink) = (store.clone(), sink.clone());
        async move {
            Pipeline::new(&VecSource::sequence(n), &sink)
                .with_state_store(store)
                .with_options(opts("metric"))
                .run()
                .await
        }
    };
    assert_eq!(run(20).await.expect("run 1").records_out, 20);

    sqlx::query(&format!("REVOKE INSERT, UPDATE ON \"{table}\" FROM fst_s5"))
        .execute(&pool)
        .await
        .expect("revoke");
    let err = run(30)
        .await
        .expect_err("a run that cannot persist its bookmark fails");
    assert!(matches!(err, FaucetError::State { .. }), "{err:?}");
    assert!(err.to_string().contains("42501"), "{err}");
    assert_eq!(
        store.get("metric").await.expect("get"),
        Some(json!({"offset": 20})),
        "the bookmark did not move"
    );

    sqlx::query(&grant)
        .execute(&pool)
        .await
        .expect("grant again");
    run(30).await.expect("run 3");
    let mut ids: Vec<i64> = sink
        .rows()
        .iter()
        .map(|r| r["id"].as_i64().expect("id"))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids, (0..30).collect::<Vec<_>>(), "nothing lost");
    assert_eq!(
        store.get("metric").await.expect("get"),
        Some(json!({"offset": 30}))
    );
    drop(store);
    drop_tables(&pool, table).await;
    let _ = sqlx::query("DROP ROLE IF EXISTS fst_s5")
        .execute(&pool)
        .await;
}
