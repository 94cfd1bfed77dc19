//! A run that can no longer renew its lease stops at once (`faucet_core::pipeline`'s lease
//! module): with the lease taken by another run while a page is being read, the run fails
//! with the lost-lease error within a renewal period, and the page it was reading never
//! reaches the sink; a state store that refuses the run for less than the ttl costs nothing,
//! one that refuses it for longer stops the run at the ttl.
//!
//! The source is `VecSource` held at a page (`PageGate`): the run waits on it as on a quiet
//! continuous source, so nothing but the lease can end it while the gate is closed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use faucet_core::serde_json::json;
use faucet_core::state::{LeaseError, StateStore};
use faucet_core::testing::{MemorySink, PageGate, VecSource};
use faucet_core::{FaucetError, Pipeline, RunStreamOptions, RunSummary};
use faucet_state_postgres::PostgresStateStore;
use tokio::task::JoinHandle;

use crate::support::{drop_tables, fresh_store, url_with};

fn opts(key: &str, ttl: Duration) -> RunStreamOptions {
    RunStreamOptions {
        batch_size: 10,
        state_key: key.into(),
        lease_ttl: ttl,
        ..RunStreamOptions::default()
    }
}

/// Runs 30 records in pages of 10 into `sink`, the read of the second page held at `gate`.
fn spawn_run(
    store: Arc<dyn StateStore>,
    sink: MemorySink,
    gate: PageGate,
    options: RunStreamOptions,
) -> JoinHandle<Result<RunSummary, FaucetError>> {
    tokio::spawn(async move {
        let source = VecSource::sequence(30).held_at(10, gate);
        Pipeline::new(&source, &sink)
            .with_state_store(store)
            .with_options(options)
            .run()
            .await
    })
}

/// Waits up to `limit` for the run; `None` if it is still going.
async fn ended_within(
    run: &mut JoinHandle<Result<RunSummary, FaucetError>>,
    limit: Duration,
) -> Option<Result<RunSummary, FaucetError>> {
    tokio::time::timeout(limit, &mut *run)
        .await
        .ok()
        .map(|joined| joined.expect("the run task"))
}

fn ids(sink: &MemorySink) -> Vec<i64> {
    sink.rows()
        .iter()
        .map(|r| r["id"].as_i64().expect("id"))
        .collect()
}

#[track_caller]
fn expect_lost(result: Option<Result<RunSummary, FaucetError>>, reason: &str) {
    match result {
        Some(Err(FaucetError::Lease(LeaseError::Lost { reason: r, .. }))) => {
            assert!(r.contains(reason), "the reason {r:?} lacks {reason:?}");
        }
        other => panic!("expected the lost-lease error, got {other:?}"),
    }
}

/// The lease row taken over by another holder (as a newer run's acquisition after expiry
/// would) while the run waits for its second page: the run fails with
/// [`LeaseError::Lost`] naming the taker within a renewal period (a third of the ttl), the
/// page it was reading is never written, and its bookmark stays at the first page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_while_a_page_is_read_stops_the_run_before_the_page_is_written() {
    let table = "fst_loss_taken";
    let (store, pool) = fresh_store(table).await;
    let store: Arc<dyn StateStore> = Arc::new(store);
    let sink = MemorySink::new();
    let gate = PageGate::new();
    let ttl = Duration::from_millis(1500);
    let mut run = spawn_run(
        store.clone(),
        sink.clone(),
        gate.clone(),
        opts("taken", ttl),
    );
    gate.reached().await;
    assert_eq!(ids(&sink), (0..10).collect::<Vec<_>>(), "the first page");

    let thief =
        json!({"id": "thief", "host": "elsewhere", "pid": 1, "since": "2026-01-01T00:00:00Z"});
    let taken = sqlx::query(&format!(
        "UPDATE \"{table}_lease\" SET holder_id = 'thief', holder = $2, fence = fence + 1, \
         expires_at = now() + interval '1 hour' WHERE key = $1"
    ))
    .bind("taken")
    .bind(sqlx::types::Json(&thief))
    .execute(&pool)
    .await
    .expect("take the lease");
    assert_eq!(taken.rows_affected(), 1, "the run's lease row");
    let stolen = Instant::now();

    let ended = ended_within(&mut run, ttl).await;
    let took = stolen.elapsed();
    // Whatever happened, let a run still waiting read its page, so the checks below see
    // what it would have written.
    gate.open();
    let ended = match ended {
        Some(r) => Some(r),
        None => ended_within(&mut run, Duration::from_secs(10)).await,
    };
    assert_eq!(
        ids(&sink),
        (0..10).collect::<Vec<_>>(),
        "the page read after the loss reached the sink"
    );
    expect_lost(ended, "another run took it: pid 1 on host elsewhere");
    assert!(took < ttl, "the run stopped {took:?} after the loss");
    assert_eq!(
        store.get("taken").await.expect("get"),
        Some(json!({"offset": 10})),
        "the bookmark stays at the first page"
    );
    drop_tables(&pool, table).await;
}

/// The state store refuses the run's role (`NOLOGIN`, its sessions ended) for about a
/// second while the run waits: the renewals that fail meanwhile are retried and the run
/// completes, every record once. Refused and left so: the run fails with
/// [`LeaseError::Lost`] within the ttl (not at some later bookmark write), its held page
/// unwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_briefly_unreachable_costs_nothing_and_one_that_stays_away_stops_the_run() {
    let table = "fst_loss_unreachable";
    let role = format!("fst_loss_{}", std::process::id());
    let (_owner, pool) = fresh_store(table).await;
    let admin = |sql: String| {
        let pool = pool.clone();
        async move {
            sqlx::raw_sql(&sql)
                .execute(&pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    };
    admin(format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON \"{table}\", \"{table}_lease\" TO {role}"
    ))
    .await;
    let block = format!(
        "ALTER ROLE {role} NOLOGIN; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
    );
    let store = PostgresStateStore::connect_with(&url_with(Some(&role), None), 2, table)
        .await
        .expect("connect as the test role");
    let store: Arc<dyn StateStore> = Arc::new(store);
    let ttl = Duration::from_secs(4);

    // A: refused for a second (spanning a renewal, every 1.33 s), then let in again.
    let sink = MemorySink::new();
    let gate = PageGate::new();
    let mut run = spawn_run(
        store.clone(),
        sink.clone(),
        gate.clone(),
        opts("brief", ttl),
    );
    gate.reached().await;
    let down = Instant::now();
    admin(block.clone()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    admin(format!("ALTER ROLE {role} LOGIN")).await;
    // Past the ttl counted from the outage: the renewal was retried once it ended.
    let past = (down + ttl + Duration::from_secs(1)).saturating_duration_since(Instant::now());
    if let Some(ended) = ended_within(&mut run, past).await {
        panic!("a brief outage ended the run: {ended:?}");
    }
    gate.open();
    let summary = ended_within(&mut run, Duration::from_secs(20))
        .await
        .expect("the run ends once its source does")
        .expect("the run survives a brief outage");
    assert_eq!(summary.records_out, 30);
    assert_eq!(ids(&sink), (0..30).collect::<Vec<_>>());

    // B: refused and left so.
    let sink = MemorySink::new();
    let gate = PageGate::new();
    let mut run = spawn_run(store.clone(), sink.clone(), gate.clone(), opts("gone", ttl));
    gate.reached().await;
    let down = Instant::now();
    admin(block).await;
    let ended = ended_within(&mut run, ttl + Duration::from_secs(3)).await;
    let took = down.elapsed();
    gate.open();
    let ended = match ended {
        Some(r) => Some(r),
        None => ended_within(&mut run, Duration::from_secs(30)).await,
    };
    admin(format!("ALTER ROLE {role} LOGIN")).await;
    assert_eq!(
        ids(&sink),
        (0..10).collect::<Vec<_>>(),
        "only the first page"
    );
    // Declared by the renewer or by the run loop's deadline, whichever comes first.
    expect_lost(ended, "renewed");
    assert!(
        took <= ttl + Duration::from_secs(1),
        "the run stopped {took:?} after the store went away (ttl {ttl:?})"
    );
    drop(store);
    drop_tables(&pool, table).await;
    admin(format!("DROP ROLE IF EXISTS {role}")).await;
}
