//! `PostgresReplicateSource` (`faucet replicate`): snapshot, then CDC, with a write workload
//! running on another connection during the snapshot and after. The sink's records are
//! replayed (`r`, then `c`/`u`/`d`) into a table state that must equal the source value by
//! value, with no key read twice and no change applied to a row the snapshot did not have
//! (overlap) or missing (gap); an upsert sink must equal the source. An interrupted snapshot
//! is refused with a typed error, never marked done.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use faucet_connectors::files::{JsonlSink, JsonlSinkConfig};
use faucet_connectors::postgres::snapshot::PostgresReplicateSource;
use faucet_core::serde_json::{self, Value as Json};
use faucet_core::state::{MemoryStateStore, StateStore};
use faucet_core::{FaucetError, Pipeline, RunStreamOptions, RunSummary, Sink, Source};
use tokio_util::sync::CancellationToken;

use crate::postgres_cdc::{Fixture, admin};
use crate::postgres_sink_support::upsert_sink;

const BIG: i64 = 20_000;
const SMALL_BASE: i64 = 1_000_000;

async fn setup(fx: &Fixture) {
    fx.sql(
        "CREATE TABLE {s}.big (id bigint PRIMARY KEY, v text, n integer);
         CREATE TABLE {s}.small (id bigint PRIMARY KEY, v text, n integer);
         INSERT INTO {s}.big SELECT g, 'b' || g, g % 97 FROM generate_series(1, 20000) g;
         INSERT INTO {s}.small SELECT 1000000 + g, 's' || g, g FROM generate_series(1, 40) g;",
    )
    .await;
}

fn source(fx: &Fixture, tables: &[&str]) -> PostgresReplicateSource {
    let mut config = fx.config(tables);
    config.create_publication = true;
    PostgresReplicateSource::new(config).expect("config")
}

/// Inserts, updates and deletes on both tables, one small transaction each, until stopped.
fn workload(fx: &Fixture, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let big = fx.table("big");
    let small = fx.table("small");
    tokio::spawn(async move {
        let mut c = admin().await;
        let mut i: i64 = 0;
        while !stop.load(Ordering::SeqCst) {
            i += 1;
            let k = (i * 7919) % BIG + 1;
            let sql = match i % 5 {
                0 => format!("INSERT INTO {big} VALUES ({}, 'new{i}', {i})", BIG + i),
                1 => format!("UPDATE {big} SET v = 'u{i}', n = n + 1 WHERE id = {k}"),
                2 => format!("DELETE FROM {big} WHERE id = {k}"),
                3 => format!(
                    "INSERT INTO {small} VALUES ({}, 'sn{i}', {i}) ON CONFLICT (id) DO UPDATE SET v = 'again{i}'",
                    SMALL_BASE + 100 + i % 60
                ),
                _ => format!(
                    "UPDATE {small} SET n = n + {i} WHERE id = {}; DELETE FROM {small} WHERE id = {}",
                    SMALL_BASE + 1 + i % 40,
                    SMALL_BASE + 1 + (i * 3) % 40
                ),
            };
            for statement in sql.split("; ") {
                sqlx::query(statement)
                    .execute(&mut c)
                    .await
                    .expect("workload");
            }
        }
        i as u64
    })
}

async fn run(
    source: &dyn Source,
    sink: &dyn Sink,
    state: Arc<dyn StateStore>,
    key: &str,
    cancel: CancellationToken,
) -> Result<RunSummary, FaucetError> {
    Pipeline::from_dyn(source, sink)
        .with_state_store(state)
        .with_options(RunStreamOptions {
            batch_size: 1000,
            state_key: key.into(),
            cancel,
            ..RunStreamOptions::default()
        })
        .run()
        .await
}

/// Every row of `table` as `id -> {"id","v","n"}`.
async fn source_rows(table: &str) -> BTreeMap<i64, Json> {
    let mut c = admin().await;
    let rows: Vec<(i64, Option<String>, Option<i32>)> =
        sqlx::query_as(&format!("SELECT id, v, n FROM {table} ORDER BY id"))
            .fetch_all(&mut c)
            .await
            .expect("select");
    rows.into_iter()
        .map(|(id, v, n)| (id, serde_json::json!({"id": id, "v": v, "n": n})))
        .collect()
}

/// Replays change records into per-table state; panics on a duplicate snapshot row, an
/// insert of a present key (overlap) or an update/delete of an absent one (gap).
fn replay(records: &[Json]) -> BTreeMap<String, BTreeMap<i64, Json>> {
    let mut state: BTreeMap<String, BTreeMap<i64, Json>> = BTreeMap::new();
    for r in records {
        let table = r["table"].as_str().expect("table").to_owned();
        let rows = state.entry(table.clone()).or_default();
        let id = |v: &Json| v["id"].as_i64().expect("id");
        match r["op"].as_str().expect("op") {
            "r" => {
                let after = r["after"].clone();
                assert!(
                    rows.insert(id(&after), after).is_none(),
                    "snapshot row read twice: {r}"
                );
            }
            "c" => {
                let after = r["after"].clone();
                assert!(
                    rows.insert(id(&after), after).is_none(),
                    "insert of a row already present (overlap): {r}"
                );
            }
            "u" => {
                let after = r["after"].clone();
                assert!(
                    rows.insert(id(&after), after).is_some(),
                    "update of a row never seen (gap): {r}"
                );
            }
            "d" => {
                assert!(
                    rows.remove(&id(&r["before"])).is_some(),
                    "delete of a row never seen (gap): {r}"
                );
            }
            other => panic!("unexpected op {other}: {r}"),
        }
    }
    state
}

async fn drop_slot(fx: &Fixture) {
    fx.wait_slot_released().await;
}

/// jsonl (append): snapshot during a workload, CDC after it; the replayed records equal the
/// source value by value, every key read once, no change doubled or missing.
#[tokio::test]
async fn replicate_to_jsonl_equals_the_source_under_writes() {
    let fx = Fixture::new("repl_jsonl").await;
    setup(&fx).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("out.jsonl");
    let sink = JsonlSink::new(JsonlSinkConfig::new(&path)).expect("sink");
    let src = source(&fx, &["big", "small"]);
    let state: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let stop = Arc::new(AtomicBool::new(false));
    let writes = workload(&fx, Arc::clone(&stop));
    let first = run(
        &src,
        &sink,
        Arc::clone(&state),
        "repl",
        CancellationToken::new(),
    )
    .await
    .expect("first run");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let writes = writes.await.expect("workload");
    let second = run(
        &src,
        &sink,
        Arc::clone(&state),
        "repl",
        CancellationToken::new(),
    )
    .await
    .expect("second run");
    assert!(writes > 20, "the workload wrote only {writes} times");
    assert!(second.resumed_from.is_some());
    let text = std::fs::read_to_string(&path).expect("read jsonl");
    let records: Vec<Json> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(records.len() as u64, first.records_out + second.records_out);
    let snapshot_rows = records.iter().filter(|r| r["op"] == "r").count();
    assert!(snapshot_rows >= 20_000, "{snapshot_rows} snapshot rows");
    assert!(
        records.iter().any(|r| r["op"] == "u"),
        "no change was streamed"
    );
    let got = replay(&records);
    for t in ["big", "small"] {
        let want = source_rows(&fx.table(t)).await;
        let have = got.get(&fx.table(t)).cloned().unwrap_or_default();
        assert_eq!(have.len(), want.len(), "row count of {t}");
        assert!(have == want, "table {t} differs from the source");
    }
    drop_slot(&fx).await;
}

/// postgres upsert (one target table per sink, so the pipeline replicates `big` while the
/// workload writes both tables): the target ends equal to the source.
#[tokio::test]
async fn replicate_to_postgres_upsert_equals_the_source_under_writes() {
    let fx = Fixture::new("repl_upsert").await;
    setup(&fx).await;
    fx.sql("CREATE TABLE {s}.target (id bigint PRIMARY KEY, v text, n integer)")
        .await;
    let sink = upsert_sink(&fx.table("target"), &["id"]);
    let src = source(&fx, &["big"]);
    let state: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let stop = Arc::new(AtomicBool::new(false));
    let writes = workload(&fx, Arc::clone(&stop));
    run(
        &src,
        &sink,
        Arc::clone(&state),
        "repl",
        CancellationToken::new(),
    )
    .await
    .expect("first run");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    writes.await.expect("workload");
    run(
        &src,
        &sink,
        Arc::clone(&state),
        "repl",
        CancellationToken::new(),
    )
    .await
    .expect("second run");
    let want = source_rows(&fx.table("big")).await;
    let have = source_rows(&fx.table("target")).await;
    assert_eq!(have.len(), want.len());
    assert!(have == want, "the target differs from the source");
    drop_slot(&fx).await;
}

/// Interrupted mid-snapshot: the persisted bookmark is a snapshot position (never marked
/// done) and reopening fails with the typed "snapshot interrupted" error naming the slot.
#[tokio::test]
async fn an_interrupted_snapshot_is_refused_with_a_typed_error() {
    let fx = Fixture::new("repl_cut").await;
    setup(&fx).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = JsonlSink::new(JsonlSinkConfig::new(dir.path().join("out.jsonl"))).expect("sink");
    let src = source(&fx, &["big", "small"]);
    let state: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let cancel = CancellationToken::new();
    let cut = cancel.clone();
    let summary = Pipeline::from_dyn(&src, &sink)
        .with_state_store(Arc::clone(&state))
        .with_options(RunStreamOptions {
            batch_size: 1000,
            state_key: "repl".into(),
            cancel: cancel.clone(),
            on_progress: Some(Arc::new(move |p: &faucet_core::pipeline::Progress| {
                if p.pages >= 3 {
                    cut.cancel();
                }
            })),
            ..RunStreamOptions::default()
        })
        .run()
        .await
        .expect("cancelled run");
    assert!(summary.cancelled);
    assert!(summary.records_out < 20_000);
    let stored = state.get("repl").await.expect("get").expect("a bookmark");
    let snap = &stored["snapshot"];
    assert_eq!(snap["table"], fx.table("big"), "{stored}");
    assert_eq!(snap["done"], serde_json::json!([]), "{stored}");
    assert!(snap["after_key"].is_array(), "{stored}");
    let e = run(
        &src,
        &sink,
        Arc::clone(&state),
        "repl",
        CancellationToken::new(),
    )
    .await
    .expect_err("an interrupted snapshot must not resume silently");
    assert!(matches!(e, FaucetError::State { .. }), "{e:?}");
    let message = e.to_string();
    assert!(message.contains("snapshot interrupted"), "{message}");
    assert!(message.contains(&fx.slot), "{message}");
    // The bookmark is untouched: still the interrupted snapshot.
    assert_eq!(state.get("repl").await.expect("get"), Some(stored));
    drop_slot(&fx).await;
}
