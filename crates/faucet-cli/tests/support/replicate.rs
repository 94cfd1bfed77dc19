//! Helpers of the `faucet replicate` crash tests (PostgreSQL and MySQL sources): the stored
//! bookmark of a file state store, a run aborted mid-snapshot at a fault point, a run
//! SIGKILLed after a delay, the strict replay of an append sink's records, and the rows of
//! an `(id bigint, v bigint, note text)` table by each database's own SELECT.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value as Json;

use super::bookmark_of;
pub(crate) use super::killed_after;

/// The rows of `table` (`id`, `v`, `note`) by PostgreSQL's SELECT: `id -> {"id","v","note"}`.
pub(crate) async fn pg_rows(pool: &sqlx::PgPool, table: &str) -> BTreeMap<i64, Json> {
    let rows: Vec<(i64, i64, String)> = sqlx::query_as(&format!("SELECT id, v, note FROM {table}"))
        .fetch_all(pool)
        .await
        .expect("select");
    rows.into_iter()
        .map(|(id, v, note)| (id, serde_json::json!({"id": id, "v": v, "note": note})))
        .collect()
}

/// The rows of the MariaDB table `table` (`id`, `v`, `note`) by its own SELECT (the
/// `mariadb` client): `id -> {"id","v","note"}`.
#[cfg(feature = "mysql")]
pub(crate) fn mariadb_rows(table: &str) -> BTreeMap<i64, Json> {
    let out = super::mariadb::mariadb(&format!("SELECT id, v, note FROM {table}"));
    out.lines()
        .map(|l| {
            let mut f = l.split('\t');
            let id: i64 = f.next().and_then(|v| v.parse().ok()).expect("id");
            let v: i64 = f.next().and_then(|v| v.parse().ok()).expect("v");
            let note = f.next().expect("note").to_owned();
            (id, serde_json::json!({"id": id, "v": v, "note": note}))
        })
        .collect()
}

/// The stored bookmark of the file state store in `dir/state`, if any.
pub(crate) fn stored(dir: &Path) -> Option<Json> {
    for e in std::fs::read_dir(dir.join("state")).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") && !name.starts_with('.') {
            let text = std::fs::read(e.path()).expect("read state");
            return serde_json::from_slice(&text).ok().map(bookmark_of);
        }
    }
    None
}

/// Runs `replicate` (a `faucet replicate` command in `dir`, stderr piped) aborted at the
/// `hit`-th pass of `point`; asserts it died there, mid-snapshot (the stored bookmark is a
/// snapshot position), and returns that bookmark.
pub(crate) fn aborted_mid_snapshot(
    mut replicate: Command,
    dir: &Path,
    point: &str,
    hit: u32,
) -> Json {
    let out = replicate
        .env("FAUCET_FAULT", format!("{point}:{hit}"))
        .output()
        .expect("spawn faucet");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("fault point"),
        "faucet did not abort at {point}:{hit}: {stderr}"
    );
    let b = stored(dir).expect("a stored bookmark");
    assert!(b.get("snapshot").is_some(), "not mid-snapshot: {b}");
    b
}

/// The ids inside the ranges in flight (`dirty`) of a stored snapshot bookmark.
pub(crate) fn in_flight(bookmark: &Json, table: &str, ids: &HashSet<i64>) -> HashSet<i64> {
    let key = |v: &Json| -> Option<i64> { v.as_array()?.first()?.as_str()?.parse().ok() };
    let mut out = HashSet::new();
    for d in bookmark["snapshot"]["tables"][table]["dirty"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let (after, to) = (key(&d["after"]), key(&d["to"]));
        out.extend(
            ids.iter()
                .filter(|&&id| after.is_none_or(|a| id > a) && to.is_none_or(|t| id <= t)),
        );
    }
    out
}

/// The JSONL records replayed by id: strict (no `r` twice, no insert of a present row, no
/// update or delete of an absent one) except for the `in_flight` ids, applied as upserts.
pub(crate) fn replay(records: &[Json], in_flight: &HashSet<i64>) -> BTreeMap<i64, Json> {
    let mut rows = BTreeMap::new();
    let id = |v: &Json| v["id"].as_i64().expect("id");
    for r in records {
        let op = r["op"].as_str().expect("op");
        let touched = [&r["before"], &r["after"]]
            .iter()
            .any(|v| !v.is_null() && in_flight.contains(&id(v)));
        if op != "r" && touched {
            if !r["before"].is_null() {
                rows.remove(&id(&r["before"]));
            }
            if !r["after"].is_null() {
                rows.insert(id(&r["after"]), r["after"].clone());
            }
            continue;
        }
        match op {
            "r" | "c" => assert!(
                rows.insert(id(&r["after"]), r["after"].clone()).is_none(),
                "a row delivered twice (overlap): {r}"
            ),
            "u" => {
                assert!(
                    rows.remove(&id(&r["before"])).is_some(),
                    "update of a row never delivered (gap): {r}"
                );
                rows.insert(id(&r["after"]), r["after"].clone());
            }
            "d" => assert!(
                rows.remove(&id(&r["before"])).is_some(),
                "delete of a row never delivered (gap): {r}"
            ),
            other => panic!("unexpected op {other}: {r}"),
        }
    }
    rows
}

/// The source side of a `faucet replicate` test under a workload ([`with_workload`]): a
/// source table `items (id, v, note)` and an empty `target` of the same shape, made fresh
/// per test and dropped after it, and how the pipeline reads them.
pub(crate) trait ReplicaSource: Sized {
    /// A member the stored bookmark has once the run caught up (`lsn`, `binlog_file`).
    const POSITION: &'static str;
    /// The environment variable the test's configs name for the PostgreSQL server.
    const PG_URL_ENV: &'static str;
    /// Fresh objects named after `tag` (on `pool` where they are PostgreSQL's).
    fn create(rt: &tokio::runtime::Runtime, pool: &sqlx::PgPool, tag: &str) -> Self;
    /// The pipeline's source (a YAML flow mapping) reading `items`.
    fn source_yaml(&self) -> String;
    /// Starts inserts, updates and deletes on `items`, every new value fresh, until `stop`;
    /// the thread returns how many statements it ran.
    fn workload(&self, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64>;
    /// Drops what [`ReplicaSource::create`] made, best effort.
    fn drop_objects(&self, rt: &tokio::runtime::Runtime, pool: &sqlx::PgPool);
    /// The source table `items` as the change records name it (`schema.items`, `db.items`).
    fn items(&self) -> String;
    /// The PostgreSQL schema holding the empty `target` the upsert tests write.
    fn pg_schema(&self) -> &str;
    /// The source position of a change record, the same for every record of one snapshot.
    fn snapshot_of(record: &Json) -> String;
    /// The rows of `items` now, by the source database's own SELECT.
    fn source_rows(&self, rt: &tokio::runtime::Runtime, pool: &sqlx::PgPool)
    -> BTreeMap<i64, Json>;
}

/// The `postgres` sink upserting into the source's PostgreSQL `target` (keyed by `id`).
pub(crate) fn upsert_sink<S: ReplicaSource>(source: &S) -> String {
    format!(
        "{{ type: postgres, config: {{ connection_url: \"${{env:{}}}\", \
         table: {}.target, write_mode: upsert, key: [id] }} }}",
        S::PG_URL_ENV,
        source.pg_schema()
    )
}

/// Panics unless the PostgreSQL `target` holds exactly the source's rows, value by value.
pub(crate) fn target_equals_source<S: ReplicaSource>(
    rt: &tokio::runtime::Runtime,
    pool: &sqlx::PgPool,
    source: &S,
) {
    let want = source.source_rows(rt, pool);
    let have = rt.block_on(pg_rows(pool, &format!("{}.target", source.pg_schema())));
    expect_rows_equal(&have, &want);
}

/// Both sources' jsonl crash test: `faucet replicate` into a jsonl (append) sink aborted
/// twice mid-snapshot after a bookmark is stored (`after_state_put`, page 6 of the first copy,
/// then page 5 of the resumed one: each table starts with its first page in flight, an empty
/// page), then run to the end; the output replays ([`replayed_jsonl`]) to the source's rows.
pub(crate) fn jsonl_aborted_twice_mid_snapshot<S: ReplicaSource>(batch: u64) {
    let last = std::cell::RefCell::new(None);
    with_workload::<S>(
        "jsonl",
        batch,
        |_| "{ type: jsonl, config: { path: ./out/changes.jsonl } }".to_owned(),
        |dir| {
            let second =
                aborted_twice_mid_snapshot(|| replicate::<S>(dir), dir, "after_state_put", [6, 5]);
            super::output_of_success(&mut replicate::<S>(dir), "the resumed run");
            *last.borrow_mut() = Some(second);
        },
        |rt, pool, source, dir| {
            let last = last.borrow().clone().expect("interrupted");
            let got = replayed_jsonl(dir, &last, &source.items(), batch, S::snapshot_of);
            expect_rows_equal(&got, &source.source_rows(rt, pool));
        },
    );
}

/// Both sources' upsert crash test: `faucet replicate` into the PostgreSQL `target` (upsert)
/// aborted twice mid-snapshot between a page's write and its bookmark (`after_flush`, at its
/// 6th and then its 4th pass; the second bookmark marks its snapshot dirty: the sink holds a
/// page read as of the old snapshot), then run to the end; the target equals the source.
pub(crate) fn upsert_aborted_between_write_and_bookmark<S: ReplicaSource>(batch: u64) {
    with_workload::<S>(
        "upsert",
        batch,
        upsert_sink::<S>,
        |dir| {
            let second =
                aborted_twice_mid_snapshot(|| replicate::<S>(dir), dir, "after_flush", [6, 4]);
            assert!(second.to_string().contains("dirty"), "{second}");
            super::output_of_success(&mut replicate::<S>(dir), "the resumed run");
        },
        |rt, pool, source, _| target_equals_source(rt, pool, source),
    );
}

/// `faucet replicate --quiet` in `dir`, with the test PostgreSQL URL in `S::PG_URL_ENV`,
/// stdout discarded and stderr piped.
pub(crate) fn replicate<S: ReplicaSource>(dir: &Path) -> Command {
    let mut c = super::pg::faucet_with_pg_url(S::PG_URL_ENV);
    c.args(["replicate", "--quiet"])
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    c
}

/// A `faucet replicate` test under a concurrent workload: fresh objects (`S::create`), the
/// pipeline from `items` into `sink(&source)` in pages of `batch`; `scenario` runs
/// `faucet` in the directory while the workload writes, then the workload is stopped (it
/// must have written more than 50 times), a last run catches up, the stored bookmark must
/// be the change source's (it has `S::POSITION` and no `replicate` member), and `check`
/// compares target and source. The objects are dropped whatever happens; a panic is passed
/// on after that.
pub(crate) fn with_workload<S: ReplicaSource>(
    tag: &str,
    batch: u64,
    sink: impl Fn(&S) -> String,
    scenario: impl FnOnce(&Path),
    check: impl FnOnce(&tokio::runtime::Runtime, &sqlx::PgPool, &S, &Path),
) {
    let rt = super::runtime();
    let pool = rt.block_on(super::pg_pool());
    let source = S::create(&rt, &pool, tag);
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    super::write_pipeline(
        dir,
        "replicate",
        &source.source_yaml(),
        &sink(&source),
        &format!("  batch_size: {batch}\n"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writes = source.workload(Arc::clone(&stop));
    super::with_cleanup(
        || {
            std::thread::sleep(Duration::from_millis(200));
            scenario(dir);
            stop.store(true, Ordering::SeqCst);
            let writes = writes.join().expect("workload");
            assert!(writes > 50, "the workload wrote only {writes} times");
            super::output_of_success(&mut replicate::<S>(dir), "the catching-up run");
            let b = stored(dir).expect("bookmark");
            assert!(
                b.get(S::POSITION).is_some() && b.get("replicate").is_none(),
                "caught up, the bookmark is the change source's: {b}"
            );
            check(&rt, &pool, &source, dir);
        },
        || {
            stop.store(true, Ordering::SeqCst);
            source.drop_objects(&rt, &pool);
        },
    );
}

/// Panics unless `have` holds exactly the rows of `want`, value by value.
#[track_caller]
pub(crate) fn expect_rows_equal(have: &BTreeMap<i64, Json>, want: &BTreeMap<i64, Json>) {
    assert_eq!(have.len(), want.len(), "row count");
    for (id, row) in want {
        assert_eq!(have.get(id), Some(row), "id {id}");
    }
}

/// Both sources' SIGKILL crash test: `faucet replicate` into the PostgreSQL `target` (upsert);
/// a first run aborted mid-snapshot at the `first_hit`-th pass of `after_state_put` (a
/// position stored: a kill before that leaves a slot without a bookmark, which the next run
/// refuses with the fix), then `soak_or(8, 3)` runs SIGKILLed, round `r` after `after(r)`,
/// then a run to the end; the target equals the source. Returns how many kills landed
/// mid-snapshot.
#[must_use]
pub(crate) fn upsert_sigkilled_mid_snapshot<S: ReplicaSource>(
    batch: u64,
    first_hit: u32,
    after: impl Fn(u64) -> Duration,
) -> u64 {
    let rounds = super::soak_or(8, 3);
    let mid_snapshot = std::cell::Cell::new(0);
    with_workload::<S>(
        "kill",
        batch,
        upsert_sink::<S>,
        |dir| {
            aborted_mid_snapshot(replicate::<S>(dir), dir, "after_state_put", first_hit);
            mid_snapshot.set(kills_mid_snapshot(
                || replicate::<S>(dir),
                dir,
                rounds,
                after,
            ));
            super::output_of_success(&mut replicate::<S>(dir), "the resumed run");
        },
        |rt, pool, source, _| target_equals_source(rt, pool, source),
    );
    mid_snapshot.get()
}

/// Two runs of `replicate` (a fresh `faucet replicate` command in `dir` each call) aborted
/// mid-snapshot at `point`, at its `hits[0]`-th and then its `hits[1]`-th pass, 200 ms apart
/// and 200 ms before the caller goes on; returns the bookmark stored at the second abort.
pub(crate) fn aborted_twice_mid_snapshot(
    replicate: impl Fn() -> Command,
    dir: &Path,
    point: &str,
    hits: [u32; 2],
) -> Json {
    aborted_mid_snapshot(replicate(), dir, point, hits[0]);
    std::thread::sleep(Duration::from_millis(200));
    let second = aborted_mid_snapshot(replicate(), dir, point, hits[1]);
    std::thread::sleep(Duration::from_millis(200));
    second
}

/// SIGKILLs `rounds` runs of `replicate` (a fresh command each call), round `r` after
/// `after(r)`, 100 ms apart; returns how many were killed with a snapshot bookmark stored
/// (mid-snapshot).
pub(crate) fn kills_mid_snapshot(
    replicate: impl Fn() -> Command,
    dir: &Path,
    rounds: u64,
    after: impl Fn(u64) -> Duration,
) -> u64 {
    let mut mid_snapshot = 0;
    for round in 0..rounds {
        if killed_after(replicate(), after(round))
            && stored(dir).is_some_and(|b| b.get("snapshot").is_some())
        {
            mid_snapshot += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{mid_snapshot} of {rounds} kills landed mid-snapshot");
    mid_snapshot
}

/// The rows `dir/out/changes.jsonl` (an append sink's output across two aborts) replays to,
/// after checking its shape: `last` (the bookmark stored at the second abort) holds two
/// snapshots of `table`, the file has no torn last line, its `op: r` records come from three
/// snapshots (told apart by `snapshot_of`, the record's source position), and at most
/// `3 × batch` ids were in flight. Replayed strictly ([`replay`]) but for those ids.
pub(crate) fn replayed_jsonl(
    dir: &Path,
    last: &Json,
    table: &str,
    batch: u64,
    snapshot_of: impl Fn(&Json) -> String,
) -> BTreeMap<i64, Json> {
    let parts = last["snapshot"]["tables"][table]["parts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        parts.len(),
        2,
        "two snapshots before the second abort: {last}"
    );
    let text = std::fs::read_to_string(dir.join("out/changes.jsonl")).expect("output");
    assert!(text.ends_with('\n'), "a torn last line");
    let records: Vec<Json> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let points: HashSet<String> = records
        .iter()
        .filter(|r| r["op"] == "r")
        .map(snapshot_of)
        .collect();
    assert_eq!(points.len(), 3, "three snapshots: {points:?}");
    let ids: HashSet<i64> = records
        .iter()
        .flat_map(|r| [&r["before"], &r["after"]])
        .filter_map(|v| v["id"].as_i64())
        .collect();
    let replayed = in_flight(last, table, &ids);
    assert!(
        replayed.len() as u64 <= 3 * batch,
        "{} ids in flight",
        replayed.len()
    );
    replay(&records, &replayed)
}
