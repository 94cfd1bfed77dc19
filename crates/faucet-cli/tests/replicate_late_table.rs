//! `faucet replicate` when a table is added to `tables` after the snapshot finished, through
//! the real binary, for `postgres-cdc` (the test PostgreSQL) and `mysql-cdc` (the private
//! MariaDB with a binlog), while a workload writes to every table — the late one included:
//!
//! 1. replicate `a` and `b` to the end (copy, then the change stream);
//! 2. add `c`, which already has rows, to `tables` (and, on PostgreSQL, to the publication);
//! 3. replicate again — uninterrupted, or aborted in the middle of `c`'s copy and resumed —
//!    then stop the workload and catch up.
//!
//! The pipeline writes a JSONL file (a `postgres` or `mysql` upsert sink writes one table,
//! and refuses a stream of three), which must equal the three source tables value by value
//! when replayed:
//!
//! * **strictly** (what an append sink must hold): every row's `op: r` at most once, no
//!   change of a row never delivered, none applied twice — except, after an interruption,
//!   the changes between two snapshots of the keys of the page in flight, delivered again by
//!   design (`faucet_connectors::postgres::snapshot`) and applied as upserts;
//! * **as upserts** (what an upsert target does: `d` deletes the key, `c`/`u`/`r` write the
//!   row), after an abort between a page's write and its bookmark (the file then holds a
//!   page of `c` read as of the interrupted snapshot, which the resumed copy reads again).
//!
//! Every `c` row the late copy read carries the late snapshot's point, never the first
//! one's. The ids of the three tables are disjoint, so the replays key rows by id alone.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value as Json;
use sqlx::PgPool;

use crate::support::mariadb::{client as mariadb, mariadb as maria_sql, mysql_url_for};
use crate::support::pg::{Names, cleanup, exec, faucet_with_pg_url};
use crate::support::replicate::{
    aborted_mid_snapshot, in_flight, mariadb_rows, pg_rows, replay, stored,
};
use crate::support::{output_of_success, pg_pool, runtime};

/// Rows of `a` and `b` at the start.
const SMALL: i64 = 500;
/// Rows of `c` at the start (many pages, so its copy can be interrupted in the middle).
const LATE: i64 = 2000;
const BATCH: u64 = 100;
/// The id ranges of the three tables: `a` from 1, `b` from 1_000_001, `c` from 2_000_001.
const SPAN: i64 = 1_000_000;

/// Which source.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Db {
    Postgres,
    Mariadb,
}

/// A test's objects: on PostgreSQL a schema with its slot and publication, on MariaDB a
/// database.
struct Case {
    db: Db,
    names: Names,
    server_id: u32,
}

impl Case {
    fn new(db: Db, tag: &str) -> Self {
        Self {
            db,
            names: Names::new(tag),
            server_id: crate::support::mariadb::unique_server_id(),
        }
    }

    /// `schema.table` (PostgreSQL) or `database.table` (MariaDB): the same text.
    fn table(&self, t: &str) -> String {
        format!("{}.{t}", self.names.schema)
    }

    fn setup(&self, rt: &tokio::runtime::Runtime, pool: &PgPool) {
        let s = &self.names.schema;
        match self.db {
            Db::Postgres => {
                let mut sql = format!("CREATE SCHEMA {s};");
                for (i, t, n) in [(0, "a", SMALL), (1, "b", SMALL), (2, "c", LATE)] {
                    sql.push_str(&format!(
                        "CREATE TABLE {s}.{t} (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL);
                         INSERT INTO {s}.{t} SELECT g + {off}, g, 'n' || g FROM generate_series(1, {n}) g;",
                        off = i * SPAN
                    ));
                }
                rt.block_on(exec(pool, &sql));
            }
            Db::Mariadb => {
                let mut sql = format!(
                    "DROP DATABASE IF EXISTS {s}; CREATE DATABASE {s} CHARACTER SET utf8mb4; USE {s};"
                );
                for (i, t, n) in [(0, "a", SMALL), (1, "b", SMALL), (2, "c", LATE)] {
                    sql.push_str(&format!(
                        "CREATE TABLE {t} (id BIGINT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(200) NOT NULL);
                         INSERT INTO {t} SELECT seq + {off}, seq, CONCAT('n', seq) FROM seq_1_to_{n};",
                        off = i * SPAN
                    ));
                }
                maria_sql(&sql);
            }
        }
    }

    fn cleanup(&self, rt: &tokio::runtime::Runtime, pool: &PgPool) {
        if self.db == Db::Mariadb {
            let _ = mariadb()
                .args([
                    "-e",
                    &format!("DROP DATABASE IF EXISTS {}", self.names.schema),
                ])
                .output();
        }
        rt.block_on(cleanup(pool, &self.names));
    }

    /// The pipeline file with `tables` (names inside the test's schema / database).
    fn config(&self, dir: &Path, tables: &[&str], sink: &str) {
        let list: Vec<String> = tables.iter().map(|t| self.table(t)).collect();
        let list = list.join(", ");
        let source = match self.db {
            Db::Postgres => format!(
                "{{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_LATE_PG_URL}}\", \
                 slot_name: {slot}, publication: {publication}, tables: [{list}], \
                 create_publication: true }} }}",
                slot = self.names.slot,
                publication = self.names.publication,
            ),
            Db::Mariadb => {
                let base = mysql_url_for("", None);
                format!(
                    "{{ type: mysql-cdc, config: {{ connection_url: \"{base}/{db}\", \
                     server_id: {id}, tables: [{list}] }} }}",
                    base = base.trim_end_matches('/'),
                    db = self.names.schema,
                    id = self.server_id,
                )
            }
        };
        std::fs::write(
            dir.join("faucet.yaml"),
            format!(
                "version: 1\nname: late\npipeline:\n  source: {source}\n  sink: {sink}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {BATCH}\n"
            ),
        )
        .expect("config");
    }

    /// Makes `c` part of the change stream's scope where the server needs it: on
    /// PostgreSQL, the publication (the error of a run without it says so).
    fn publish_c(&self, rt: &tokio::runtime::Runtime, pool: &PgPool) {
        if self.db == Db::Postgres {
            rt.block_on(exec(
                pool,
                &format!(
                    "ALTER PUBLICATION {} ADD TABLE {}",
                    self.names.publication,
                    self.table("c")
                ),
            ));
        }
    }

    /// The rows of the source table `t` by the source database's own SELECT.
    fn source_rows(&self, rt: &tokio::runtime::Runtime, pool: &PgPool, t: &str) -> Rows {
        let table = self.table(t);
        match self.db {
            Db::Postgres => rt.block_on(pg_rows(pool, &table)),
            Db::Mariadb => mariadb_rows(&table),
        }
    }

    /// The union of the three source tables.
    fn all_source_rows(&self, rt: &tokio::runtime::Runtime, pool: &PgPool) -> Rows {
        let mut all = Rows::new();
        for t in ["a", "b", "c"] {
            all.extend(self.source_rows(rt, pool, t));
        }
        all
    }

    /// The snapshot point of an `op: r` record, as text.
    fn point_of(&self, r: &Json) -> String {
        match self.db {
            Db::Postgres => r["lsn"].as_str().expect("lsn").to_owned(),
            Db::Mariadb => format!("{}:{}", r["binlog_file"], r["binlog_pos"]),
        }
    }

    fn faucet(&self, dir: &Path) -> Command {
        self.command(dir, "replicate")
    }

    /// `faucet <command> --quiet` in `dir`.
    fn command(&self, dir: &Path, command: &str) -> Command {
        let mut c = faucet_with_pg_url("FAUCET_LATE_PG_URL");
        c.args([command, "--quiet"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }
}

type Rows = BTreeMap<i64, Json>;

/// The `i`-th statement of the workload: an insert (or upsert), update or delete on one of
/// the three tables, each new value fresh.
fn statement(db: Db, schema: &str, i: i64) -> String {
    let (t, off, n) = match i % 3 {
        0 => ("a", 0, SMALL),
        1 => ("b", SPAN, SMALL),
        _ => ("c", 2 * SPAN, LATE),
    };
    let k = off + (i * 7919) % n + 1;
    let fresh = 10_000_000 + i;
    match (db, (i / 3) % 4) {
        (Db::Postgres, 0) => format!(
            "INSERT INTO {schema}.{t} VALUES ({id}, {fresh}, 'new') \
             ON CONFLICT (id) DO UPDATE SET v = {fresh}",
            id = k + n * ((i / 12) % 3)
        ),
        (Db::Mariadb, 0) => format!(
            "INSERT INTO {schema}.{t} VALUES ({id}, {fresh}, 'new') \
             ON DUPLICATE KEY UPDATE v = {fresh};",
            id = k + n * ((i / 12) % 3)
        ),
        (Db::Postgres, 1 | 2) => {
            format!("UPDATE {schema}.{t} SET v = {fresh}, note = note || '+' WHERE id = {k}")
        }
        (Db::Mariadb, 1 | 2) => {
            format!("UPDATE {schema}.{t} SET v = {fresh}, note = CONCAT(note, '+') WHERE id = {k};")
        }
        (Db::Postgres, _) => format!("DELETE FROM {schema}.{t} WHERE id = {k}"),
        (Db::Mariadb, _) => format!("DELETE FROM {schema}.{t} WHERE id = {k};"),
    }
}

/// Writes to the three tables, one autocommit statement at a time, until `stop`; on its
/// own thread so it runs while the test waits on `faucet`.
fn workload(db: Db, schema: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<i64> {
    std::thread::spawn(move || match db {
        Db::Postgres => runtime().block_on(async move {
            let pool = pg_pool().await;
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                exec(&pool, &statement(db, &schema, i)).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            i
        }),
        Db::Mariadb => {
            let mut client = mariadb()
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .expect("the mariadb client runs");
            let mut input = client.stdin.take().expect("stdin");
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                writeln!(input, "{}", statement(db, &schema, i)).expect("workload statement");
                std::thread::sleep(Duration::from_millis(2));
            }
            drop(input);
            assert!(
                client.wait().expect("client").success(),
                "the workload failed"
            );
            i
        }
    })
}

/// How the run that copies `c` goes.
#[derive(Clone, Copy)]
enum LateRun {
    /// To the end.
    Whole,
    /// Aborted at the `n`-th pass of a fault point (inside `c`'s copy), then resumed.
    Aborted(&'static str, u32),
}

/// Steps 1–3 of the module docs under the workload (step 1 by `faucet <first>`), then the
/// catching-up run; hands the bookmark stored at the interruption (if any) to `check`.
fn late_table(
    db: Db,
    tag: &str,
    first: &str,
    late: LateRun,
    check: impl FnOnce(&tokio::runtime::Runtime, &PgPool, &Case, &Path, Option<Json>),
) {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let case = Case::new(db, tag);
    case.setup(&rt, &pool);
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let sink = JSONL;
    case.config(dir, &["a", "b"], sink);
    let stop = Arc::new(AtomicBool::new(false));
    let writes = workload(db, case.names.schema.clone(), Arc::clone(&stop));
    crate::support::with_cleanup(
        || {
            std::thread::sleep(Duration::from_millis(200));
            output_of_success(&mut case.command(dir, first), "streaming a and b");
            // A first bounded `faucet run` reads from the slot it creates to the end of the log
            // seen at start, which under load may hold no change yet (no bookmark stored): run
            // again, as a user would, until a bookmark is stored.
            for _ in 0..10 {
                if stored(dir).is_some_and(|b| b.is_object()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
                output_of_success(&mut case.command(dir, first), "streaming a and b again");
            }
            let first = stored(dir).expect("bookmark");
            assert!(first.is_object(), "a bookmark: {first}");
            assert!(first.get("snapshot").is_none(), "copied: {first}");
            std::thread::sleep(Duration::from_millis(300));
            case.config(dir, &["a", "b", "c"], sink);
            case.publish_c(&rt, &pool);
            std::thread::sleep(Duration::from_millis(100));
            let interrupted = match late {
                LateRun::Whole => {
                    output_of_success(&mut case.faucet(dir), "replicating with c added");
                    None
                }
                LateRun::Aborted(point, hit) => {
                    let b = aborted_mid_snapshot(case.faucet(dir), dir, point, hit);
                    std::thread::sleep(Duration::from_millis(200));
                    output_of_success(&mut case.faucet(dir), "the resumed copy of c");
                    Some(b)
                }
            };
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::SeqCst);
            let writes = writes.join().expect("workload");
            assert!(writes > 50, "the workload wrote only {writes} times");
            output_of_success(&mut case.faucet(dir), "the catching-up run");
            let b = stored(dir).expect("bookmark");
            assert!(
                b.get("snapshot").is_none() && b.get("replicate").is_none(),
                "caught up, the bookmark is the change stream's: {b}"
            );
            check(&rt, &pool, &case, dir, interrupted);
            let copied: BTreeSet<String> = b["copied"]
                .as_array()
                .unwrap_or_else(|| panic!("no `copied` member: {b}"))
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect();
            let want: BTreeSet<String> = ["a", "b", "c"].iter().map(|t| case.table(t)).collect();
            assert_eq!(copied, want, "{b}");
        },
        || {
            stop.store(true, Ordering::SeqCst);
            case.cleanup(&rt, &pool);
        },
    );
}

/// The JSONL output's records.
fn records(dir: &Path) -> Vec<Json> {
    let text = std::fs::read_to_string(dir.join("out/changes.jsonl")).expect("output");
    assert!(text.ends_with('\n'), "a torn last line");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// The records applied as an upsert target applies them equal the sources.
/// The run was interrupted with a page in flight (its bookmark says `dirty`); the rerun's
/// upserts equal the sources.
fn dirty_then_upserted(
    rt: &tokio::runtime::Runtime,
    pool: &PgPool,
    case: &Case,
    dir: &Path,
    interrupted: Option<Json>,
) {
    let b = interrupted.expect("interrupted");
    assert!(b.to_string().contains("dirty"), "{b}");
    upserted_equals_sources(rt, pool, case, dir);
}

fn upserted_equals_sources(rt: &tokio::runtime::Runtime, pool: &PgPool, case: &Case, dir: &Path) {
    let id = |v: &Json| v["id"].as_i64().expect("id");
    let mut have = Rows::new();
    for r in records(dir) {
        if !r["before"].is_null() {
            have.remove(&id(&r["before"]));
        }
        if !r["after"].is_null() {
            have.insert(id(&r["after"]), r["after"].clone());
        }
    }
    let want = case.all_source_rows(rt, pool);
    let late = want.keys().filter(|&&id| id > 2 * SPAN).count();
    assert!(late as i64 >= LATE / 2, "c has {late} rows");
    assert_eq!(have.len(), want.len(), "row count");
    for (id, row) in &want {
        assert_eq!(have.get(id), Some(row), "id {id}");
    }
}

/// The JSONL output replayed strictly (see the module docs) equals the sources; `c`'s
/// rows were all read by the late copy.
fn jsonl_equals_sources(
    rt: &tokio::runtime::Runtime,
    pool: &PgPool,
    case: &Case,
    dir: &Path,
    interrupted: Option<Json>,
) {
    let records = records(dir);
    let c = case.table("c");
    let point_of = |t: &str| -> HashSet<String> {
        records
            .iter()
            .filter(|r| r["op"] == "r" && r["table"] == t)
            .map(|r| case.point_of(r))
            .collect()
    };
    let first = point_of(&case.table("a"));
    let late = point_of(&c);
    assert_eq!(first.len(), 1, "a copied in one snapshot: {first:?}");
    assert!(
        !late.is_empty(),
        "no `op: r` of c: its existing rows are missing"
    );
    assert!(first.is_disjoint(&late), "c read in the first snapshot?");
    let expected_points = if interrupted.is_some() { 2 } else { 1 };
    assert_eq!(late.len(), expected_points, "c's snapshots: {late:?}");
    let ids: HashSet<i64> = records
        .iter()
        .flat_map(|r| [&r["before"], &r["after"]])
        .filter_map(|v| v["id"].as_i64())
        .collect();
    let replayed = interrupted.map_or_else(HashSet::new, |b| in_flight(&b, &c, &ids));
    assert!(
        replayed.len() as u64 <= 2 * BATCH,
        "{} ids in flight",
        replayed.len()
    );
    let got = replay(&records, &replayed);
    let want = case.all_source_rows(rt, pool);
    assert_eq!(got.len(), want.len(), "row count");
    for (id, row) in &want {
        assert_eq!(got.get(id), Some(row), "id {id}");
    }
}

/// `faucet run` on the state key of a finished replicate streams on and keeps the
/// `copied` member; a `faucet replicate` after it copies nothing again.
fn run_keeps_the_copied_tables(case: &Case, dir: &Path) {
    let before = stored(dir).expect("bookmark");
    let copied = before["copied"].clone();
    assert!(copied.is_array(), "{before}");
    output_of_success(&mut case.command(dir, "run"), "faucet run after replicate");
    let after = stored(dir).expect("bookmark");
    assert_eq!(
        after["copied"], copied,
        "faucet run kept the member: {after}"
    );
    let reads = |dir: &Path| records(dir).iter().filter(|r| r["op"] == "r").count();
    let r_before = reads(dir);
    output_of_success(&mut case.faucet(dir), "replicate after faucet run");
    assert_eq!(reads(dir), r_before, "nothing copied again");
    assert_eq!(stored(dir).expect("bookmark")["copied"], copied);
}

const JSONL: &str = "{ type: jsonl, config: { path: ./out/changes.jsonl } }";

#[test]
fn postgres_table_added_later_is_copied() {
    late_table(
        Db::Postgres,
        "latewh",
        "replicate",
        LateRun::Whole,
        |rt, pool, case, dir, interrupted| {
            jsonl_equals_sources(rt, pool, case, dir, interrupted);
            run_keeps_the_copied_tables(case, dir);
            // b removed from `tables`: no longer listed as copied (listed again, it is
            // copied again rather than missing what changed meanwhile).
            case.config(dir, &["a", "c"], JSONL);
            rt.block_on(exec(
                pool,
                &format!(
                    "UPDATE {} SET v = v + 1 WHERE id = {}",
                    case.table("b"),
                    SPAN + 2
                ),
            ));
            output_of_success(&mut case.faucet(dir), "replicating without b");
            let b = stored(dir).expect("bookmark");
            assert_eq!(
                b["copied"],
                serde_json::json!([case.table("a"), case.table("c")]),
                "{b}"
            );
        },
    );
}

#[test]
fn postgres_table_added_later_aborted_after_a_bookmark_during_its_copy() {
    late_table(
        Db::Postgres,
        "latesp",
        "replicate",
        LateRun::Aborted("after_state_put", 6),
        jsonl_equals_sources,
    );
}

#[test]
fn postgres_table_added_later_aborted_between_write_and_bookmark_during_its_copy() {
    late_table(
        Db::Postgres,
        "latefl",
        "replicate",
        LateRun::Aborted("after_flush", 6),
        dirty_then_upserted,
    );
}

/// A state key `faucet run` started: its bookmark names no copied table, so every listed
/// table is copied (a and b's rows existed before the stream started; they arrive too).
#[test]
fn postgres_state_key_started_by_faucet_run_gets_every_table_copied() {
    late_table(
        Db::Postgres,
        "laterun",
        "run",
        LateRun::Whole,
        |rt, pool, case, dir, _| upserted_equals_sources(rt, pool, case, dir),
    );
}

#[test]
fn mariadb_table_added_later_is_copied() {
    late_table(
        Db::Mariadb,
        "mlatewh",
        "replicate",
        LateRun::Whole,
        |rt, pool, case, dir, interrupted| {
            jsonl_equals_sources(rt, pool, case, dir, interrupted);
            run_keeps_the_copied_tables(case, dir);
        },
    );
}

#[test]
fn mariadb_table_added_later_aborted_after_a_bookmark_during_its_copy() {
    late_table(
        Db::Mariadb,
        "mlatesp",
        "replicate",
        LateRun::Aborted("after_state_put", 6),
        jsonl_equals_sources,
    );
}

#[test]
fn mariadb_table_added_later_aborted_between_write_and_bookmark_during_its_copy() {
    late_table(
        Db::Mariadb,
        "mlatefl",
        "replicate",
        LateRun::Aborted("after_flush", 6),
        dirty_then_upserted,
    );
}
