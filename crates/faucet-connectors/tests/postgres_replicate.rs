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
use faucet_core::testing::stored_bookmark;
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
    let statement = move |i: i64| {
        let k = (i * 7919) % BIG + 1;
        match i % 5 {
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
        }
    };
    tokio::spawn(async move {
        let exec = |mut c: sqlx::PgConnection, sql: String| async move {
            for statement in sql.split("; ") {
                sqlx::query(statement)
                    .execute(&mut c)
                    .await
                    .expect("workload");
            }
            c
        };
        faucet_test_support::write_until(stop, admin().await, statement, exec).await
    })
}

/// One run of `source` into `sink` under the state key `repl`, in pages of 1000.
async fn run(
    source: &dyn Source,
    sink: &dyn Sink,
    state: Arc<dyn StateStore>,
) -> Result<RunSummary, FaucetError> {
    Pipeline::from_dyn(source, sink)
        .with_state_store(state)
        .with_options(RunStreamOptions {
            batch_size: 1000,
            state_key: "repl".into(),
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
    let first = run(&src, &sink, Arc::clone(&state))
        .await
        .expect("first run");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let writes = writes.await.expect("workload");
    let second = run(&src, &sink, Arc::clone(&state))
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
    run(&src, &sink, Arc::clone(&state))
        .await
        .expect("first run");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    writes.await.expect("workload");
    run(&src, &sink, Arc::clone(&state))
        .await
        .expect("second run");
    let want = source_rows(&fx.table("big")).await;
    let have = source_rows(&fx.table("target")).await;
    assert_eq!(have.len(), want.len());
    assert!(have == want, "the target differs from the source");
    drop_slot(&fx).await;
}

// --- Resuming an interrupted snapshot ---------------------------------------------------

/// A table keyed by text in a collation whose order is not byte order (`a` < `B`), so a
/// resumed copy's ranges are only right if keys are compared by the server.
async fn setup_words(fx: &Fixture) {
    fx.sql(
        "CREATE TABLE {s}.words (w text COLLATE \"en-x-icu\" PRIMARY KEY, v integer);
         INSERT INTO {s}.words SELECT CASE WHEN g % 2 = 0 THEN upper(substr(md5(g::text), 1, 6))
                                      ELSE substr(md5(g::text), 1, 6) END || g, g
           FROM generate_series(1, 3000) g;",
    )
    .await;
}

/// Writes to `words`, one small transaction each, until stopped: updates, deletes, inserts
/// and key changes of mixed-case keys all over the key space (a key moved between ranges
/// copied as of different points takes the filter's `u` → `d` / `c` rewrites).
fn words_workload(fx: &Fixture, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let words = fx.table("words");
    let statement = move |i: i64| {
        let g = (i * 7919) % 3000 + 1;
        let key = format!(
            "CASE WHEN {g} % 2 = 0 THEN upper(substr(md5('{g}'), 1, 6)) ELSE substr(md5('{g}'), 1, 6) END || {g}"
        );
        match i % 5 {
            0 => format!(
                "INSERT INTO {words} VALUES (CASE WHEN {i} % 2 = 0 THEN 'Z' ELSE 'a' END || md5('{i}'), {i}) ON CONFLICT (w) DO UPDATE SET v = -{i}"
            ),
            1 | 2 => format!("UPDATE {words} SET v = v + {i} WHERE w = {key}"),
            // A key change, to anywhere in the key space (across the copied ranges).
            3 => format!(
                "UPDATE {words} SET w = CASE WHEN {i} % 2 = 0 THEN 'b' ELSE 'Y' END || md5('m{i}') \
                     WHERE w = {key}"
            ),
            _ => format!("DELETE FROM {words} WHERE w = {key}"),
        }
    };
    tokio::spawn(async move {
        let exec = |mut c: sqlx::PgConnection, sql: String| async move {
            sqlx::query(&sql)
                .execute(&mut c)
                .await
                .expect("words workload");
            c
        };
        faucet_test_support::write_until(stop, admin().await, statement, exec).await
    })
}

/// The primary key of a row of the test tables (`id`, or `w` for `words`) as text.
fn row_key(row: &Json) -> String {
    match (&row["id"], &row["w"]) {
        (Json::Number(n), _) => n.to_string(),
        (_, Json::String(w)) => w.clone(),
        _ => panic!("a row without a key: {row}"),
    }
}

/// Replays change records keyed by [`row_key`], with the checks of [`replay`], except
/// that the changes of the keys in `in_flight` (`(table, key)`: the pages in flight at an
/// interruption, see the module docs of `postgres::snapshot`) apply as upserts: those
/// keys' changes between two snapshots are delivered again, by design. Returns the state
/// and how many changes were such replays.
fn replay_keyed(
    records: &[Json],
    in_flight: &std::collections::HashSet<(String, String)>,
) -> (BTreeMap<String, BTreeMap<String, Json>>, usize) {
    let mut state: BTreeMap<String, BTreeMap<String, Json>> = BTreeMap::new();
    let mut replayed = 0;
    for r in records {
        let table = r["table"].as_str().expect("table").to_owned();
        let rows = state.entry(table.clone()).or_default();
        let op = r["op"].as_str().expect("op");
        let touched = |side: &str| {
            !r[side].is_null() && in_flight.contains(&(table.clone(), row_key(&r[side])))
        };
        if op != "r" && (touched("before") || touched("after")) {
            replayed += 1;
            if !r["before"].is_null() {
                rows.remove(&row_key(&r["before"]));
            }
            if !r["after"].is_null() {
                rows.insert(row_key(&r["after"]), r["after"].clone());
            }
            continue;
        }
        match op {
            "r" => assert!(
                rows.insert(row_key(&r["after"]), r["after"].clone())
                    .is_none(),
                "snapshot row read twice: {r}"
            ),
            "c" => assert!(
                rows.insert(row_key(&r["after"]), r["after"].clone())
                    .is_none(),
                "insert of a row already present (overlap): {r}"
            ),
            "u" => {
                let before = row_key(&r["before"]);
                let after = row_key(&r["after"]);
                assert!(
                    rows.remove(&before).is_some(),
                    "update of a row never seen (gap): {r}"
                );
                assert!(
                    rows.insert(after, r["after"].clone()).is_none(),
                    "update onto a row already present (overlap): {r}"
                );
            }
            "d" => assert!(
                rows.remove(&row_key(&r["before"])).is_some(),
                "delete of a row never seen (gap): {r}"
            ),
            other => panic!("unexpected op {other}: {r}"),
        }
    }
    (state, replayed)
}

/// The keys of `words` among `records` inside the ranges in flight (`dirty`) of the stored
/// snapshot bookmark, compared in the column's collation by the server.
async fn in_flight_words(
    fx: &Fixture,
    stored: &Json,
    records: &[Json],
) -> std::collections::HashSet<(String, String)> {
    let table = fx.table("words");
    let keys: Vec<String> = records
        .iter()
        .filter(|r| r["table"] == table.as_str())
        .flat_map(|r| [&r["before"], &r["after"]])
        .filter(|v| !v.is_null())
        .map(row_key)
        .collect();
    let mut out = std::collections::HashSet::new();
    let mut c = admin().await;
    for d in stored["snapshot"]["tables"][&table]["dirty"]
        .as_array()
        .expect("dirty")
    {
        let bound = |v: &Json| v.as_array().map(|a| a[0].as_str().expect("key").to_owned());
        let inside: Vec<String> = sqlx::query_scalar(
            "SELECT k FROM unnest($1::text[]) k \
             WHERE ($2::text IS NULL OR k COLLATE \"en-x-icu\" > $2) \
               AND ($3::text IS NULL OR k COLLATE \"en-x-icu\" <= $3)",
        )
        .bind(&keys)
        .bind(bound(&d["after"]))
        .bind(bound(&d["to"]))
        .fetch_all(&mut c)
        .await
        .expect("in flight keys");
        out.extend(inside.into_iter().map(|k| (table.clone(), k)));
    }
    out
}

/// Every row of `table` (`SELECT row_to_json(t)`), by [`row_key`].
async fn source_json(table: &str) -> BTreeMap<String, Json> {
    let mut c = admin().await;
    let rows: Vec<Json> = sqlx::query_scalar(&format!("SELECT row_to_json(t) FROM {table} t"))
        .fetch_all(&mut c)
        .await
        .expect("select");
    rows.into_iter().map(|r| (row_key(&r), r)).collect()
}

/// A run that cancels itself once `pages` pages were written.
async fn run_cut(
    source: &dyn Source,
    sink: &dyn Sink,
    state: Arc<dyn StateStore>,
    pages: u64,
    batch_size: usize,
) -> RunSummary {
    let cancel = CancellationToken::new();
    let cut = cancel.clone();
    Pipeline::from_dyn(source, sink)
        .with_state_store(state)
        .with_options(RunStreamOptions {
            batch_size,
            state_key: "repl".into(),
            cancel,
            on_progress: Some(Arc::new(move |p: &faucet_core::pipeline::Progress| {
                if p.pages >= pages {
                    cut.cancel();
                }
            })),
            ..RunStreamOptions::default()
        })
        .run()
        .await
        .expect("interrupted run")
}

fn jsonl_records(path: &std::path::Path) -> Vec<Json> {
    std::fs::read_to_string(path)
        .expect("read jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// The `parts` of `table` in a stored snapshot bookmark.
fn parts<'a>(stored: &'a Json, table: &str) -> &'a Vec<Json> {
    stored["snapshot"]["tables"][table]["parts"]
        .as_array()
        .unwrap_or_else(|| panic!("no parts of {table} in {stored}"))
}

/// jsonl (append), interrupted twice mid-table (the second time inside the resumed copy)
/// while two workloads write: the copy continues from the last persisted key each time,
/// finished tables are not read again, and the change stream drops exactly what the later
/// snapshots already hold. Replayed, the file equals the source value by value, with no
/// key read twice, no change doubled and none missing; the text keys in a non-byte-order
/// collation prove the ranges are compared by the server.
#[tokio::test]
async fn an_interrupted_snapshot_resumes_twice_into_jsonl_without_gap_or_overlap() {
    let fx = Fixture::new("repl_resume").await;
    setup(&fx).await;
    setup_words(&fx).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("out.jsonl");
    let sink = JsonlSink::new(JsonlSinkConfig::new(&path)).expect("sink");
    let src = source(&fx, &["small", "words", "big"]);
    let state: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let stop = Arc::new(AtomicBool::new(false));
    let writes = workload(&fx, Arc::clone(&stop));
    let word_writes = words_workload(&fx, Arc::clone(&stop));
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(300));

    // 1: `small` (its page in flight, then the page), then `words` (its first page in
    // flight, then 2 pages of 500 rows), then stop.
    let first = run_cut(&src, &sink, Arc::clone(&state), 5, 500).await;
    assert!(first.cancelled);
    let stored = repl_bookmark(&*state).await;
    assert_eq!(parts(&stored, &fx.table("small")).len(), 1, "{stored}");
    assert!(
        parts(&stored, &fx.table("small"))[0]["to"].is_null(),
        "{stored}"
    );
    let words_parts = parts(&stored, &fx.table("words")).clone();
    assert_eq!(words_parts.len(), 1, "{stored}");
    assert!(
        words_parts[0]["to"].is_array(),
        "words is not finished: {stored}"
    );
    assert!(stored["snapshot"]["tables"].get(fx.table("big")).is_none());
    pause().await;

    // 2: the resumed copy, interrupted again inside `words` (2 more pages).
    let second = run_cut(&src, &sink, Arc::clone(&state), 3, 500).await;
    assert!(second.cancelled);
    let stored = repl_bookmark(&*state).await;
    let words_parts = parts(&stored, &fx.table("words")).clone();
    assert_eq!(words_parts.len(), 2, "{stored}");
    assert_ne!(
        words_parts[0]["at"], words_parts[1]["at"],
        "a new snapshot: {stored}"
    );
    assert!(words_parts[1]["to"].is_array(), "{stored}");
    let dirty = stored["snapshot"]["tables"][fx.table("words")]["dirty"].clone();
    assert_eq!(
        dirty.as_array().map(Vec::len),
        Some(2),
        "one page in flight per interruption: {stored}"
    );
    let interrupted = stored;
    pause().await;

    // 3: the rest of `words` in a third snapshot, all of `big`, then the change stream.
    let third = run(&src, &sink, Arc::clone(&state))
        .await
        .expect("third run");
    assert!(!third.cancelled);
    pause().await;
    stop.store(true, Ordering::SeqCst);
    let writes = writes.await.expect("workload") + word_writes.await.expect("workload");
    // 4: catch up with the last writes.
    run(&src, &sink, Arc::clone(&state))
        .await
        .expect("fourth run");
    assert!(writes > 40, "the workloads wrote only {writes} times");
    let stored = repl_bookmark(&*state).await;
    assert!(
        stored.get("replicate").is_none() && stored.get("lsn").is_some(),
        "past every consistent point the bookmark is postgres-cdc's: {stored}"
    );

    let records = jsonl_records(&path);
    let points: std::collections::BTreeSet<&str> = records
        .iter()
        .filter(|r| r["op"] == "r")
        .map(|r| r["lsn"].as_str().expect("lsn"))
        .collect();
    assert_eq!(points.len(), 3, "three snapshots: {points:?}");
    let in_flight = in_flight_words(&fx, &interrupted, &records).await;
    let (got, replayed) = replay_keyed(&records, &in_flight);
    eprintln!(
        "{} records, {} keys in the pages in flight, {replayed} of their changes delivered again",
        records.len(),
        in_flight.len()
    );
    assert!(
        in_flight.len() <= 2 * 500 + 200,
        "the ranges in flight are one page each"
    );
    for t in ["big", "small", "words"] {
        let want = source_json(&fx.table(t)).await;
        let have = got.get(&fx.table(t)).cloned().unwrap_or_default();
        assert_eq!(have.len(), want.len(), "row count of {t}");
        for (k, row) in &want {
            assert_eq!(have.get(k), Some(row), "table {t} key {k}");
        }
    }
    drop_slot(&fx).await;
    assert_no_temporary_slots(&fx).await;
}

/// The temporary slots of resumed copies end with their sessions.
async fn assert_no_temporary_slots(fx: &Fixture) {
    let mut c = admin().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%' AND temporary",
        )
        .bind(&fx.slot[..fx.slot.len().min(40)])
        .fetch_one(&mut c)
        .await
        .expect("pg_replication_slots");
        if left == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} temporary slot(s) left behind"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// postgres upsert, the process "crashing" (a state store that dies at its n-th put, after
/// the page reached the sink and before its bookmark is stored) twice mid-copy under
/// writes: the target ends equal to the source.
#[tokio::test]
async fn a_crashed_snapshot_resumes_into_a_postgres_upsert_sink() {
    use faucet_core::testing::{CrashSwitch, CrashingStateStore};
    let fx = Fixture::new("repl_crash").await;
    setup(&fx).await;
    fx.sql("CREATE TABLE {s}.target (id bigint PRIMARY KEY, v text, n integer)")
        .await;
    let sink = upsert_sink(&fx.table("target"), &["id"]);
    let src = source(&fx, &["big"]);
    let stop = Arc::new(AtomicBool::new(false));
    let writes = workload(&fx, Arc::clone(&stop));
    let store = CrashingStateStore::new(CrashSwitch::at(5));
    let e = run(&src, &sink, Arc::new(store.clone()))
        .await
        .expect_err("crash 1");
    assert!(e.to_string().contains("simulated crash"), "{e}");
    fx.wait_slot_released().await;
    let after_first = repl_bookmark(&store).await;
    assert!(after_first.get("snapshot").is_some(), "{after_first}");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let store = store.restarted(CrashSwitch::at(4));
    let e = run(&src, &sink, Arc::new(store.clone()))
        .await
        .expect_err("crash 2");
    assert!(e.to_string().contains("simulated crash"), "{e}");
    fx.wait_slot_released().await;
    let after_second = repl_bookmark(&store).await;
    assert_eq!(
        parts(&after_second, &fx.table("big")).len(),
        2,
        "{after_second}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let store = store.restarted(CrashSwitch::never());
    run(&src, &sink, Arc::new(store.clone()))
        .await
        .expect("third run");
    stop.store(true, Ordering::SeqCst);
    writes.await.expect("workload");
    run(&src, &sink, Arc::new(store.clone()))
        .await
        .expect("catch-up run");
    let want = source_rows(&fx.table("big")).await;
    let have = source_rows(&fx.table("target")).await;
    assert_eq!(have.len(), want.len());
    assert!(have == want, "the target differs from the source");
    drop_slot(&fx).await;
    assert_no_temporary_slots(&fx).await;
}

/// The rule the change stream's filter rests on, checked against the server rather than
/// assumed: a copy made in the snapshot of a slot created at consistent point P holds
/// exactly the transactions whose commit LSN (a change record's `lsn`) is below P. Two
/// connections update a small table as fast as they can while the slot (P1) and, after an
/// interruption, a temporary slot (P2) are created; a second, independent slot records
/// every update with its commit LSN. Each copied row must hold the value of its last
/// update committed below its snapshot's point — not one more (≤ would be wrong), not one
/// less.
#[tokio::test]
async fn the_copy_holds_exactly_the_transactions_committed_before_its_point() {
    let fx = Fixture::new("repl_point").await;
    let observer = Fixture::new("repl_point_obs").await;
    fx.sql(
        "CREATE TABLE {s}.hot (id bigint PRIMARY KEY, v bigint NOT NULL);
         INSERT INTO {s}.hot SELECT g, 0 FROM generate_series(1, 400) g;
         CREATE SEQUENCE {s}.counter;",
    )
    .await;
    let hot = fx.table("hot");
    let mut obs_config = faucet_connectors::postgres::cdc::PostgresCdcConfig::new(
        crate::postgres_cdc::pg_url(),
        observer.slot.clone(),
        observer.publication.clone(),
        [hot.clone()],
    );
    obs_config.create_publication = true;
    let obs = faucet_connectors::postgres::cdc::PostgresCdcSource::new(obs_config).expect("obs");
    crate::postgres_cdc::prime(&observer, &obs).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..2i64 {
        let stop = Arc::clone(&stop);
        let (hot, schema) = (hot.clone(), fx.schema.clone());
        workers.push(tokio::spawn(async move {
            let mut c = admin().await;
            let mut i = w;
            while !stop.load(Ordering::SeqCst) {
                i += 2;
                let sql = format!(
                    "UPDATE {hot} SET v = nextval('{schema}.counter') WHERE id = {}",
                    (i * 37) % 400 + 1
                );
                sqlx::query(&sql).execute(&mut c).await.expect("update");
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("out.jsonl");
    let sink = JsonlSink::new(JsonlSinkConfig::new(&path)).expect("sink");
    let src = source(&fx, &["hot"]);
    let state: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    run_cut(&src, &sink, Arc::clone(&state), 4, 100).await;
    fx.wait_slot_released().await;
    // A retryable failure (the walsender's internal error under the other tests' DDL) is
    // run again as `faucet serve` would; the copy must still be exact.
    let mut resumed = run(&src, &sink, Arc::clone(&state)).await;
    if let Err(e) = &resumed
        && e.is_retryable()
    {
        eprintln!("resumed run failed retryably, running again: {e}");
        fx.wait_slot_released().await;
        resumed = run(&src, &sink, Arc::clone(&state)).await;
    }
    resumed.expect("resumed run");
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.expect("worker");
    }
    let changes =
        crate::postgres_cdc::records(&crate::postgres_cdc::read_all(&obs, None, 10_000).await);
    observer.wait_slot_released().await;
    let lsn = |r: &Json| {
        let (hi, lo) = r["lsn"]
            .as_str()
            .expect("lsn")
            .split_once('/')
            .expect("X/X");
        (u64::from_str_radix(hi, 16).expect("hex") << 32)
            | u64::from_str_radix(lo, 16).expect("hex")
    };
    let records = jsonl_records(&path);
    let copied: Vec<&Json> = records.iter().filter(|r| r["op"] == "r").collect();
    assert_eq!(copied.len(), 400);
    let mut points = std::collections::BTreeSet::new();
    let mut near = 0;
    for r in &copied {
        let point = lsn(r);
        points.insert(point);
        let id = r["after"]["id"].as_i64().expect("id");
        let expected = changes
            .iter()
            .filter(|c| c["after"]["id"].as_i64() == Some(id) && lsn(c) < point)
            .max_by_key(|c| lsn(c))
            .map_or(0, |c| c["after"]["v"].as_i64().expect("v"));
        assert_eq!(
            r["after"]["v"].as_i64(),
            Some(expected),
            "row {id} copied as of {}",
            r["lsn"]
        );
        near += changes
            .iter()
            .filter(|c| c["after"]["id"].as_i64() == Some(id) && lsn(c).abs_diff(point) < 4096)
            .count();
    }
    assert_eq!(points.len(), 2, "two snapshots");
    assert!(changes.len() > 50, "only {} updates", changes.len());
    eprintln!(
        "{} updates observed, {near} of copied rows within 4 KiB of WAL of their snapshot's point",
        changes.len()
    );
    drop_slot(&fx).await;
}

/// The bookmark stored under the replicate tests' state key `repl`, out of its entry.
async fn repl_bookmark(store: &dyn faucet_core::state::StateStore) -> faucet_core::Bookmark {
    store
        .get("repl")
        .await
        .expect("get")
        .map(stored_bookmark)
        .expect("bookmark")
}

/// The copy's pages count rows of the tables' summed row estimates and name the table each
/// is of, with its place among the tables and its rows of its own estimate; the bounded
/// change stream after it measures WAL bytes.
#[tokio::test]
async fn the_copy_counts_rows_of_the_tables_summed_estimates() {
    use faucet_core::ExtentUnit;
    let fx = Fixture::new("repl_extent").await;
    fx.sql(
        "CREATE TABLE {s}.a (id bigint PRIMARY KEY) WITH (autovacuum_enabled = false);
         CREATE TABLE {s}.b (id bigint PRIMARY KEY) WITH (autovacuum_enabled = false);
         INSERT INTO {s}.a SELECT generate_series(1, 300);
         INSERT INTO {s}.b SELECT generate_series(1, 200);
         ANALYZE {s}.a; ANALYZE {s}.b;",
    )
    .await;
    let src = source(&fx, &["a", "b"]);
    let pages = crate::postgres_cdc::read_all(&src, None, 100).await;
    let (tables, total) = crate::support::copy_shares(&pages);
    assert_eq!(total, 500, "300 + 200 rows");
    assert_eq!(
        tables,
        [(fx.table("a"), 300, 300), (fx.table("b"), 200, 200)],
        "each table in its place, all its rows, its estimate"
    );
    assert!(
        pages
            .iter()
            .filter_map(|p| p.extent())
            .all(|e| e.unit == ExtentUnit::Rows || e.unit == ExtentUnit::WalBytes),
        "the change stream's pages measure WAL"
    );
    drop_slot(&fx).await;
}
