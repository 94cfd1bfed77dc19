//! `faucet replicate` from MariaDB through the real binary (the private MariaDB with a
//! binlog, `FAUCET_TEST_MYSQL_URL`), while a workload writes to the source table:
//!
//! * into a **postgres upsert** target, uninterrupted: the target equals the source value by
//!   value (each database's own SELECT, as typed values);
//! * into a **jsonl (append)** file, aborted twice mid-snapshot after a bookmark is stored
//!   (`after_state_put`, where an append sink holds exactly the bookmarked pages): every
//!   key's `op: r` at most once, no change applied twice or missing, except the changes
//!   between two snapshots of the keys of the page in flight at each interruption, which
//!   are delivered again by design (`faucet_connectors::mysql::snapshot`) and applied here
//!   as upserts;
//! * into a **postgres upsert** target, aborted twice between a page's write and its
//!   bookmark (`after_flush`, the sink holds a page read as of the old snapshot), and
//!   SIGKILLed at random instants: the target equals the source.
//!
//! * into a **MariaDB upsert** target (the `mysql` sink), aborted once between a page's write
//!   and its bookmark: the target equals the source.

use std::collections::{BTreeMap, HashSet};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value as Json;
use sqlx::PgPool;

use crate::support::mariadb::{client as mariadb, mariadb as sql, mysql_url_for};
use crate::support::pg::{exec, faucet_with_pg_url, unique_suffix};
use crate::support::replicate::{
    aborted_mid_snapshot, in_flight, killed_after, mariadb_rows, pg_rows, replay, stored,
};
use crate::support::{output_of_success, pg_pool, runtime};

const ROWS: i64 = 3000;
const BATCH: u64 = 100;

/// The next test's replica id offset.
static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A test's MariaDB database and PostgreSQL schema.
struct Names {
    db: String,
    schema: String,
    server_id: u32,
}

impl Names {
    fn new(tag: &str) -> Self {
        let suffix = unique_suffix();
        Self {
            db: format!("myrepl_{tag}_{suffix}"),
            schema: format!("myrepl_{tag}_{suffix}"),
            // Distinct per test of this process (a replica id registered twice disconnects
            // the older reader) and per process.
            server_id: 100_000
                + (std::process::id() % 10_000) * 16
                + NEXT_ID.fetch_add(1, Ordering::SeqCst),
        }
    }
}

/// Inserts, updates and deletes on `items` (one autocommit statement each, every new value
/// fresh) through one `mariadb` client session, until `stop`.
fn workload(db: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut client = mariadb()
            .arg(&db)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("the mariadb client runs");
        let mut input = client.stdin.take().expect("stdin");
        let mut i: i64 = 0;
        while !stop.load(Ordering::SeqCst) {
            i += 1;
            let k = (i * 7919) % ROWS + 1;
            let statement = match i % 4 {
                0 => format!(
                    "INSERT INTO items VALUES ({}, {i} + 1000000, 'new') \
                     ON DUPLICATE KEY UPDATE v = {i} + 1000000;",
                    k + ROWS * (i % 3)
                ),
                1 | 2 => format!(
                    "UPDATE items SET v = {i} + 1000000, note = CONCAT(note, '+') WHERE id = {k};"
                ),
                _ => format!("DELETE FROM items WHERE id = {k};"),
            };
            writeln!(input, "{statement}").expect("workload statement");
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(input);
        let status = client.wait().expect("mariadb client");
        assert!(status.success(), "the workload's client failed");
        u64::try_from(i).unwrap_or_default()
    })
}

fn setup(rt: &tokio::runtime::Runtime, pool: &PgPool, names: &Names) {
    let db = &names.db;
    sql(&format!(
        "DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db} CHARACTER SET utf8mb4; \
         CREATE TABLE {db}.items (id BIGINT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(200) NOT NULL); \
         CREATE TABLE {db}.target (id BIGINT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(200) NOT NULL); \
         USE {db}; INSERT INTO items SELECT seq, seq, CONCAT('n', seq) FROM seq_1_to_{ROWS};"
    ));
    let s = &names.schema;
    rt.block_on(exec(
        pool,
        &format!(
            "CREATE SCHEMA {s}; \
             CREATE TABLE {s}.target (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL);"
        ),
    ));
}

fn cleanup(rt: &tokio::runtime::Runtime, pool: &PgPool, names: &Names) {
    let _ = mariadb()
        .args(["-e", &format!("DROP DATABASE IF EXISTS {}", names.db)])
        .output();
    rt.block_on(exec(
        pool,
        &format!("DROP SCHEMA IF EXISTS {} CASCADE", names.schema),
    ));
}

fn config(dir: &Path, names: &Names, sink: &str) {
    let base = mysql_url_for("", None);
    let base = base.trim_end_matches('/');
    std::fs::write(
        dir.join("faucet.yaml"),
        format!(
            "version: 1\nname: myrepl\npipeline:\n  \
             source: {{ type: mysql-cdc, config: {{ connection_url: \"{base}/{db}\", \
             server_id: {id}, tables: [{db}.items] }} }}\n  \
             sink: {sink}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {BATCH}\n",
            db = names.db,
            id = names.server_id,
        ),
    )
    .expect("config");
}

fn upsert_sink(names: &Names) -> String {
    format!(
        "{{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_MYREPL_PG_URL}}\", \
         table: {}.target, write_mode: upsert, key: [id] }} }}",
        names.schema
    )
}

fn faucet(dir: &Path) -> Command {
    let mut c = faucet_with_pg_url("FAUCET_MYREPL_PG_URL");
    c.args(["replicate", "--quiet"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// The source's rows by MariaDB's own SELECT: `id -> {"id","v","note"}`.
fn source_rows(names: &Names) -> BTreeMap<i64, Json> {
    mariadb_rows(&format!("{}.items", names.db))
}

fn target_equals_source(rt: &tokio::runtime::Runtime, pool: &PgPool, names: &Names) {
    let want = source_rows(names);
    let have = rt.block_on(pg_rows(pool, &format!("{}.target", names.schema)));
    assert_eq!(have.len(), want.len(), "row count");
    for (id, row) in &want {
        assert_eq!(have.get(id), Some(row), "id {id}");
    }
}

/// Runs `scenario` with a workload on fresh objects, then stops the workload, catches up
/// and hands over to `check`; cleans up whatever happens.
fn with_workload(
    tag: &str,
    sink: impl Fn(&Names) -> String,
    scenario: impl FnOnce(&Path),
    check: impl FnOnce(&tokio::runtime::Runtime, &PgPool, &Names, &Path),
) {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let names = Names::new(tag);
    setup(&rt, &pool, &names);
    let dir = tempfile::tempdir().expect("tempdir");
    config(dir.path(), &names, &sink(&names));
    let stop = Arc::new(AtomicBool::new(false));
    let writes = workload(names.db.clone(), Arc::clone(&stop));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        std::thread::sleep(Duration::from_millis(200));
        scenario(dir.path());
        stop.store(true, Ordering::SeqCst);
        let writes = writes.join().expect("workload");
        assert!(writes > 50, "the workload wrote only {writes} times");
        output_of_success(&mut faucet(dir.path()), "the catching-up run");
        let b = stored(dir.path()).expect("bookmark");
        assert!(
            b.get("binlog_file").is_some() && b.get("replicate").is_none(),
            "caught up, the bookmark is mysql-cdc's: {b}"
        );
        check(&rt, &pool, &names, dir.path());
    }));
    stop.store(true, Ordering::SeqCst);
    cleanup(&rt, &pool, &names);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn mysql_replicate_into_postgres_upsert_under_writes_equals_the_source() {
    with_workload(
        "live",
        upsert_sink,
        |dir| {
            output_of_success(&mut faucet(dir), "the replicate run");
            std::thread::sleep(Duration::from_millis(200));
        },
        |rt, pool, names, _| target_equals_source(rt, pool, names),
    );
}

/// The `mysql` sink into `<db>.target` of the same MariaDB (its own binlog events are not
/// of a listed table).
fn mariadb_upsert_sink(names: &Names) -> String {
    let base = mysql_url_for("", None);
    let base = base.trim_end_matches('/');
    format!(
        "{{ type: mysql, config: {{ connection_url: \"{base}/{db}\", table: {db}.target, \
         write_mode: upsert, key: [id] }} }}",
        db = names.db
    )
}

fn mariadb_target_equals_source(names: &Names) {
    let want = source_rows(names);
    let have = mariadb_rows(&format!("{}.target", names.db));
    assert_eq!(have.len(), want.len(), "row count");
    for (id, row) in &want {
        assert_eq!(have.get(id), Some(row), "id {id}");
    }
}

#[test]
fn mysql_replicate_into_mariadb_upsert_under_writes_and_aborted_equals_the_source() {
    with_workload(
        "maria",
        mariadb_upsert_sink,
        |dir| {
            aborted_mid_snapshot(faucet(dir), dir, "after_flush", 6);
            std::thread::sleep(Duration::from_millis(200));
            output_of_success(&mut faucet(dir), "the resumed run");
            std::thread::sleep(Duration::from_millis(200));
        },
        |_, _, names, _| mariadb_target_equals_source(names),
    );
}

#[test]
fn mysql_replicate_into_jsonl_aborted_twice_mid_snapshot_equals_the_source() {
    let interruptions = std::cell::RefCell::new(Vec::new());
    with_workload(
        "jsonl",
        |_| "{ type: jsonl, config: { path: ./out/changes.jsonl } }".to_owned(),
        |dir| {
            // Page 6 of the first copy, then page 5 of the resumed one (each table starts
            // with its first page in flight, an empty page).
            interruptions.borrow_mut().push(aborted_mid_snapshot(
                faucet(dir),
                dir,
                "after_state_put",
                6,
            ));
            std::thread::sleep(Duration::from_millis(200));
            let second = aborted_mid_snapshot(faucet(dir), dir, "after_state_put", 5);
            std::thread::sleep(Duration::from_millis(200));
            output_of_success(&mut faucet(dir), "the resumed run");
            interruptions.borrow_mut().push(second);
        },
        |_, _, names, dir| {
            let table = format!("{}.items", names.db);
            let last = interruptions.borrow().last().cloned().expect("interrupted");
            let parts = last["snapshot"]["tables"][&table]["parts"]
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
                .map(|r| format!("{}:{}", r["binlog_file"], r["binlog_pos"]))
                .collect();
            assert_eq!(points.len(), 3, "three snapshots: {points:?}");
            let ids: HashSet<i64> = records
                .iter()
                .flat_map(|r| [&r["before"], &r["after"]])
                .filter_map(|v| v["id"].as_i64())
                .collect();
            let replayed = in_flight(&last, &table, &ids);
            assert!(
                replayed.len() as u64 <= 3 * BATCH,
                "{} ids in flight",
                replayed.len()
            );
            let got = replay(&records, &replayed);
            let want = source_rows(names);
            assert_eq!(got.len(), want.len(), "row count");
            for (id, row) in &want {
                assert_eq!(got.get(id), Some(row), "id {id}");
            }
        },
    );
}

#[test]
fn mysql_replicate_into_postgres_upsert_aborted_between_write_and_bookmark_equals_the_source() {
    with_workload(
        "upsert",
        upsert_sink,
        |dir| {
            aborted_mid_snapshot(faucet(dir), dir, "after_flush", 6);
            std::thread::sleep(Duration::from_millis(200));
            let second = aborted_mid_snapshot(faucet(dir), dir, "after_flush", 4);
            assert!(second.to_string().contains("dirty"), "{second}");
            std::thread::sleep(Duration::from_millis(200));
            output_of_success(&mut faucet(dir), "the resumed run");
        },
        |rt, pool, names, _| target_equals_source(rt, pool, names),
    );
}

#[test]
fn mysql_replicate_into_postgres_upsert_sigkilled_mid_snapshot_equals_the_source() {
    let rounds = if std::env::var("FAUCET_SOAK").is_ok() {
        8
    } else {
        3
    };
    with_workload(
        "kill",
        upsert_sink,
        |dir| {
            aborted_mid_snapshot(faucet(dir), dir, "after_state_put", 2);
            let mut mid_snapshot = 0;
            for round in 0..rounds {
                let after = Duration::from_millis(40 + 23 * (round % 5));
                if killed_after(faucet(dir), after)
                    && stored(dir).is_some_and(|b| b.get("snapshot").is_some())
                {
                    mid_snapshot += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            eprintln!("{mid_snapshot} of {rounds} kills landed mid-snapshot");
            output_of_success(&mut faucet(dir), "the resumed run");
        },
        |rt, pool, names, _| target_equals_source(rt, pool, names),
    );
}
