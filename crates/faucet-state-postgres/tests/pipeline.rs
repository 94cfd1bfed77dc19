//! The store under the real run loop: resume across restarts, and one runner per key.

use std::sync::Arc;

use faucet_core::serde_json::json;
use faucet_core::state::StateStore;
use faucet_core::testing::{MemorySink, VecSource, conformance};
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

/// The shared run-loop check (faucet_core::testing::conformance::state_store_under_run_loop):
/// a restarted run resumes from the bookmark a new store on the same table reads, moving only
/// the new records (nothing lost, nothing doubled); each run releases its lease (the next
/// acquisition gets fence 3); a second run of a busy key fails naming the holder and moves
/// nothing.
#[tokio::test]
async fn resumes_across_a_restart_and_refuses_a_busy_key() {
    let table = "fst_pipe_run_loop";
    let (store, pool) = fresh_store(table).await;
    let reopen = || async {
        // A new process: a new store on the same table.
        let store = PostgresStateStore::connect_with(&pg_url(), 5, table).await?;
        Ok(Arc::new(store) as Arc<dyn StateStore>)
    };
    let result =
        conformance::state_store_under_run_loop(Arc::new(store), reopen, "orders::", true).await;
    drop_tables(&pool, table).await;
    result.expect("the store under the run loop");
}

/// A state store that fails (scenario S5 of the state-store cases): the state store becomes unwritable after
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
