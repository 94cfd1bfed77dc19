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

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value as Json;
use sqlx::PgPool;

use crate::support::mariadb::{client as mariadb, mariadb as sql, mysql_url_for};
use crate::support::output_of_success;
use crate::support::pg::{exec, unique_suffix};
use crate::support::replicate::{
    ReplicaSource, aborted_mid_snapshot, expect_rows_equal, jsonl_aborted_twice_mid_snapshot,
    mariadb_rows, replicate, target_equals_source, upsert_aborted_between_write_and_bookmark,
    upsert_sigkilled_mid_snapshot, upsert_sink, with_workload,
};

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

impl ReplicaSource for Names {
    const POSITION: &'static str = "binlog_file";
    const PG_URL_ENV: &'static str = "FAUCET_MYREPL_PG_URL";

    /// A MariaDB database with `items` (3,000 rows) and an empty `target`, and a PostgreSQL
    /// schema with an empty `target`.
    fn create(rt: &tokio::runtime::Runtime, pool: &PgPool, tag: &str) -> Self {
        let names = Names::new(tag);
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
        names
    }

    fn source_yaml(&self) -> String {
        let base = mysql_url_for("", None);
        let base = base.trim_end_matches('/');
        format!(
            "{{ type: mysql-cdc, config: {{ connection_url: \"{base}/{db}\", \
             server_id: {id}, tables: [{db}.items] }} }}",
            db = self.db,
            id = self.server_id,
        )
    }

    /// One autocommit statement each, through one `mariadb` client session.
    fn workload(&self, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
        let db = self.db.clone();
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

    fn drop_objects(&self, rt: &tokio::runtime::Runtime, pool: &PgPool) {
        let _ = mariadb()
            .args(["-e", &format!("DROP DATABASE IF EXISTS {}", self.db)])
            .output();
        rt.block_on(exec(
            pool,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
        ));
    }

    fn items(&self) -> String {
        format!("{}.items", self.db)
    }

    fn pg_schema(&self) -> &str {
        &self.schema
    }

    fn snapshot_of(record: &Json) -> String {
        format!("{}:{}", record["binlog_file"], record["binlog_pos"])
    }

    /// By MariaDB's own SELECT: `id -> {"id","v","note"}`.
    fn source_rows(&self, _: &tokio::runtime::Runtime, _: &PgPool) -> BTreeMap<i64, Json> {
        mariadb_rows(&self.items())
    }
}

fn faucet(dir: &Path) -> Command {
    replicate::<Names>(dir)
}

#[test]
fn mysql_replicate_into_postgres_upsert_under_writes_equals_the_source() {
    with_workload::<Names>(
        "live",
        BATCH,
        upsert_sink::<Names>,
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
    let want = mariadb_rows(&names.items());
    expect_rows_equal(&mariadb_rows(&format!("{}.target", names.db)), &want);
}

#[test]
fn mysql_replicate_into_mariadb_upsert_under_writes_and_aborted_equals_the_source() {
    with_workload::<Names>(
        "maria",
        BATCH,
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
    jsonl_aborted_twice_mid_snapshot::<Names>(BATCH);
}

#[test]
fn mysql_replicate_into_postgres_upsert_aborted_between_write_and_bookmark_equals_the_source() {
    upsert_aborted_between_write_and_bookmark::<Names>(BATCH);
}

#[test]
fn mysql_replicate_into_postgres_upsert_sigkilled_mid_snapshot_equals_the_source() {
    let mid_snapshot = upsert_sigkilled_mid_snapshot::<Names>(BATCH, 2, |round| {
        Duration::from_millis(40 + 23 * (round % 5))
    });
    assert!(mid_snapshot > 0, "no kill landed mid-snapshot");
}
