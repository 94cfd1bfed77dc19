//! A whole schema through one change stream into per-table targets, through the real binary
//! (issue 23): one `postgres-cdc` slot, a SQL sink whose `table` is a template
//! (`<schema>.t_{table}`) or whose `tables:` maps each source table, every table with its own
//! key — single (`bigint`), composite (`text, integer`), text, UUID — and, for the audit
//! run, a table without a primary key under `REPLICA IDENTITY FULL`.
//!
//! * `faucet replicate` PostgreSQL → PostgreSQL and PostgreSQL → MySQL (the MariaDB with a
//!   binlog, `FAUCET_TEST_MYSQL_URL`), `write_mode: upsert` with no `key:` (each target is
//!   created and upserted by its source table's key), under a concurrent writer (inserts,
//!   updates, key changes, deletes), SIGKILLed at instants spread over the snapshot and the
//!   stream, then rerun to completion: every target equals its source value by value, and
//!   the server shows exactly one replication slot of the pipeline.
//! * `faucet run` of `postgres-cdc` with `delivery: effectively_once` into append (audit)
//!   targets, SIGKILLed while the writer runs: each audit table, replayed, is its source
//!   table — nothing lost, no change twice.
//! * `faucet validate` refuses, before anything connects, several tables upserted into one
//!   table, a route that sends two listed tables to one target, and a listed table routed
//!   nowhere.
//!
//! `FAUCET_SOAK=1` kills more often.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::PgPool;

use crate::support::pg::{Names, cleanup, exec, faucet_with_pg_url, write_until};
use crate::support::replicate::{killed_after, stored};
use crate::support::{Dir, output_of_success, pg_pool, runtime};

/// Rows of each keyed source table before the pipeline starts.
const ROWS: i64 = 800;
/// Records per page: small, so the copy spans many pages and kills land inside it.
const BATCH: u64 = 50;
/// The variable the configs read the PostgreSQL URL from.
const PG_VAR: &str = "FAUCET_ROUTE_PG_URL";
/// The variable the configs read the MariaDB URL from.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
const MY_VAR: &str = "FAUCET_ROUTE_MYSQL_URL";

/// The keyed source tables and the columns a comparison reads, in order, the key first.
const KEYED: [(&str, &str); 4] = [
    ("single", "id, v, note"),
    ("composite", "region, n, v"),
    ("texty", "code, v"),
    ("uuidy", "id, v"),
];

/// The key columns of each [`KEYED`] table (`None`: the keyless audit table).
fn key_of(table: &str) -> Option<&'static str> {
    match table {
        "single" | "uuidy" => Some("id"),
        "composite" => Some("region, n"),
        "texty" => Some("code"),
        _ => None,
    }
}

/// The keyed tables of `s`, `ROWS` rows each (and the sequence the writer takes values from).
fn keyed_schema(s: &str) -> String {
    format!(
        "CREATE SCHEMA {s}; CREATE SEQUENCE {s}.seq;
         CREATE TABLE {s}.single (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL);
         CREATE TABLE {s}.composite (region text, n integer, v bigint NOT NULL,
                                     PRIMARY KEY (region, n));
         CREATE TABLE {s}.texty (code text PRIMARY KEY, v bigint NOT NULL);
         CREATE TABLE {s}.uuidy (id uuid PRIMARY KEY, v bigint NOT NULL);
         INSERT INTO {s}.single SELECT g, nextval('{s}.seq'), 'n' || g
           FROM generate_series(1, {ROWS}) g;
         INSERT INTO {s}.composite SELECT (ARRAY['eu','us','ap'])[1 + g % 3], g,
           nextval('{s}.seq') FROM generate_series(1, {ROWS}) g;
         INSERT INTO {s}.texty SELECT 'c' || g, nextval('{s}.seq')
           FROM generate_series(1, {ROWS}) g;
         INSERT INTO {s}.uuidy SELECT md5(g::text)::uuid, nextval('{s}.seq')
           FROM generate_series(1, {ROWS}) g;"
    )
}

/// The `i`-th statement of the writer on schema `s`: an insert, an update, a key change or
/// a delete of one of the tables (`with_nokey`: also of `s.nokey`), each its own
/// transaction.
fn change(s: &str, i: i64, with_nokey: bool) -> String {
    let k = (i * 7919) % ROWS + 1;
    let tables = if with_nokey { 5 } else { 4 };
    let fresh = ROWS * 10 + i;
    match (i % tables, (i / tables) % 4) {
        (0, 0) => format!("INSERT INTO {s}.single VALUES ({fresh}, nextval('{s}.seq'), 'w{i}')"),
        (0, 1) => format!(
            "UPDATE {s}.single SET v = nextval('{s}.seq'), note = note || '+' WHERE id = {k}"
        ),
        (0, 2) => format!("UPDATE {s}.single SET id = id + 1000000 WHERE id = {k}"),
        (0, _) => format!("DELETE FROM {s}.single WHERE id = {k}"),
        (1, 0) => format!("INSERT INTO {s}.composite VALUES ('new', {fresh}, nextval('{s}.seq'))"),
        (1, 1) => format!("UPDATE {s}.composite SET v = nextval('{s}.seq') WHERE n = {k}"),
        (1, 2) => format!("UPDATE {s}.composite SET n = n + 1000000 WHERE n = {k}"),
        (1, _) => format!("DELETE FROM {s}.composite WHERE n = {k}"),
        (2, 0) => format!("INSERT INTO {s}.texty VALUES ('w{i}', nextval('{s}.seq'))"),
        (2, 1) => format!("UPDATE {s}.texty SET v = nextval('{s}.seq') WHERE code = 'c{k}'"),
        (2, 2) => format!("UPDATE {s}.texty SET code = code || 'x' WHERE code = 'c{k}'"),
        (2, _) => format!("DELETE FROM {s}.texty WHERE code = 'c{k}'"),
        (3, 0) => format!("INSERT INTO {s}.uuidy VALUES (gen_random_uuid(), nextval('{s}.seq'))"),
        (3, 1) => {
            format!("UPDATE {s}.uuidy SET v = nextval('{s}.seq') WHERE id = md5('{k}')::uuid")
        }
        (3, 2) => {
            format!("UPDATE {s}.uuidy SET id = gen_random_uuid() WHERE id = md5('{k}')::uuid")
        }
        (3, _) => format!("DELETE FROM {s}.uuidy WHERE id = md5('{k}')::uuid"),
        (_, 0 | 1) => format!("INSERT INTO {s}.nokey VALUES ({}, 'x{i}')", i % 7),
        (_, 2) => format!(
            "UPDATE {s}.nokey SET b = b || '+' WHERE ctid = (SELECT ctid FROM {s}.nokey \
             WHERE a = {} LIMIT 1)",
            i % 7
        ),
        (_, _) => format!(
            "DELETE FROM {s}.nokey WHERE ctid = (SELECT ctid FROM {s}.nokey WHERE a = {} \
             LIMIT 1)",
            i % 7
        ),
    }
}

/// Runs [`change`] one statement at a time until `stop` ([`write_until`]); returns how many
/// it ran.
fn writer(schema: String, with_nokey: bool, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    write_until(stop, move |i| change(&schema, i, with_nokey))
}

/// The pipeline file: `postgres-cdc` of `tables` of `names` into `sink`.
fn config(dir: &Path, names: &Names, tables: &[&str], sink: &str, extra: &str) {
    let listed: Vec<String> = tables
        .iter()
        .map(|t| format!("{}.{t}", names.schema))
        .collect();
    std::fs::write(
        dir.join("faucet.yaml"),
        format!(
            "version: 1\nname: routed\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
             slot_name: {slot}, publication: {publication}, tables: [{listed}], \
             create_publication: true }} }}\n  \
             sink: {sink}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {BATCH}\n{extra}",
            slot = names.slot,
            publication = names.publication,
            listed = listed.join(", "),
        ),
    )
    .expect("config");
}

/// `faucet <command> --quiet` in `dir`, stderr piped, the servers' URLs in the environment.
fn faucet(dir: &Path, command: &str) -> Command {
    let mut c = faucet_with_pg_url(PG_VAR);
    #[cfg(feature = "mysql")]
    c.env(MY_VAR, crate::support::mariadb::mysql_url_for("test", None));
    c.args([command, "--quiet"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Where the SIGKILLs of [`kill_repeatedly`] landed: runs killed with a snapshot bookmark
/// stored (mid-copy), with a stream bookmark, and runs that ended before their kill.
#[derive(Debug, Default)]
struct Kills {
    in_copy: usize,
    in_stream: usize,
    finished: usize,
}

/// SIGKILLs `command` runs after `step_ms`, 2 × `step_ms`, … (a fixed sequence, so failures
/// reproduce), five rounds (`FAUCET_SOAK=1`: fifteen); then, while no kill has landed in
/// the stream yet, up to ten runs killed after 1 s, 400, 150, 60, 30 ms, ….
fn kill_repeatedly(dir: &Path, command: &str, step_ms: u64) -> Kills {
    let rounds = crate::support::soak_or(15, 5);
    let mut kills = Kills::default();
    for round in 0..rounds {
        let after = Duration::from_millis(step_ms * (1 + round % 5));
        if !killed_after(faucet(dir, command), after) {
            kills.finished += 1;
        } else if stored(dir).is_some_and(|b| b.get("snapshot").is_some()) {
            kills.in_copy += 1;
        } else {
            kills.in_stream += 1;
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    for round in 0..10 {
        if kills.in_stream > 0 {
            break;
        }
        // A run past the copy ends once caught up: sooner and sooner.
        let after = [1000, 400, 150, 60, 30][round % 5];
        let copying = stored(dir).is_some_and(|b| b.get("snapshot").is_some());
        if !killed_after(faucet(dir, command), Duration::from_millis(after)) {
            kills.finished += 1;
        } else if copying && stored(dir).is_some_and(|b| b.get("snapshot").is_some()) {
            kills.in_copy += 1;
        } else {
            kills.in_stream += 1;
        }
    }
    eprintln!("SIGKILLs: {kills:?}");
    kills
}

/// The replication slots on the server whose name starts with `slot` (the pipeline's, and
/// any temporary one a resumed copy left).
async fn slots_of(pool: &PgPool, slot: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT slot_name::text FROM pg_replication_slots WHERE slot_name LIKE $1")
        .bind(format!("{slot}%"))
        .fetch_all(pool)
        .await
        .expect("slots")
}

/// The rows of PostgreSQL table `table`, each its `columns` as text joined by `|`, sorted.
async fn pg_rows(pool: &PgPool, table: &str, columns: &str) -> Vec<String> {
    let cols: Vec<String> = columns.split(", ").map(|c| format!("{c}::text")).collect();
    let mut rows: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT concat_ws('|', {}) FROM {table}",
        cols.join(", ")
    ))
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("SELECT from {table}: {e}"));
    rows.sort();
    rows
}

/// Asserts `have` (a target's rows) equals `want` (its source's), naming the first
/// difference.
#[track_caller]
fn same_rows(what: &str, have: &[String], want: &[String]) {
    let missing: Vec<&String> = want.iter().filter(|r| !have.contains(r)).take(5).collect();
    let extra: Vec<&String> = have.iter().filter(|r| !want.contains(r)).take(5).collect();
    assert!(
        have == want,
        "{what}: {} rows, the source has {}; missing {missing:?}, extra {extra:?}",
        have.len(),
        want.len()
    );
}

/// Runs the writer on a fresh keyed schema while `scenario` kills and reruns the pipeline
/// in a fresh directory, then stops the writer, runs `command` to completion, asserts one
/// slot, and hands over to `check`; cleans up whatever happens (`drop`: the targets kept
/// outside the schema).
fn with_writer(
    tag: &str,
    sink: impl Fn(&Names) -> String,
    command: &str,
    check: impl FnOnce(&tokio::runtime::Runtime, &PgPool, &Names),
    drop: impl FnOnce(&Names),
) {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let names = Names::new(tag);
    rt.block_on(exec(&pool, &keyed_schema(&names.schema)));
    let dir = tempfile::tempdir().expect("tempdir");
    let tables: Vec<&str> = KEYED.iter().map(|(t, _)| *t).collect();
    config(dir.path(), &names, &tables, &sink(&names), "");
    let stop = Arc::new(AtomicBool::new(false));
    let writes = writer(names.schema.clone(), false, Arc::clone(&stop));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        std::thread::sleep(Duration::from_millis(100));
        // A first run that stores its first position (the slot exists from then on).
        crate::support::replicate::aborted_mid_snapshot(
            faucet(dir.path(), command),
            dir.path(),
            "after_state_put",
            2,
        );
        let kills = kill_repeatedly(dir.path(), command, 120);
        assert!(kills.in_copy > 0, "no kill landed in the copy: {kills:?}");
        assert!(
            kills.in_stream > 0,
            "no kill landed in the stream: {kills:?}"
        );
        stop.store(true, Ordering::SeqCst);
        let writes = writes.join().expect("writer");
        assert!(writes > 100, "the writer ran only {writes} statements");
        output_of_success(&mut faucet(dir.path(), command), "the last run");
        let b = stored(dir.path()).expect("bookmark");
        assert!(b.get("lsn").is_some(), "caught up to the stream: {b}");
        let slots = rt.block_on(slots_of(&pool, &names.slot));
        assert_eq!(
            slots,
            std::slice::from_ref(&names.slot),
            "one slot for the whole schema"
        );
        check(&rt, &pool, &names);
    }));
    stop.store(true, Ordering::SeqCst);
    rt.block_on(cleanup(&pool, &names));
    drop(&names);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn replicate_a_schema_into_postgres_per_table_targets_sigkilled_equals_the_source() {
    with_writer(
        "pgpg",
        |n| {
            format!(
                "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
                 table: \"{}.t_{{table}}\", write_mode: upsert, create_table: true }} }}",
                n.schema
            )
        },
        "replicate",
        |rt, pool, names| {
            for (table, columns) in KEYED {
                let s = &names.schema;
                let want = rt.block_on(pg_rows(pool, &format!("{s}.{table}"), columns));
                let have = rt.block_on(pg_rows(pool, &format!("{s}.t_{table}"), columns));
                assert!(want.len() as i64 > ROWS / 2, "{table}: {} rows", want.len());
                same_rows(table, &have, &want);
            }
        },
        |_| {},
    );
}

#[cfg(feature = "mysql")]
#[test]
fn replicate_a_schema_into_mysql_per_table_targets_sigkilled_equals_the_source() {
    let db = crate::support::mysql::database("route_my");
    crate::support::mariadb::mariadb(&format!("CREATE DATABASE {db}"));
    with_writer(
        "pgmy",
        |_| {
            format!(
                "{{ type: mysql, config: {{ connection_url: \"${{env:{MY_VAR}}}\", \
                 table: \"{db}.{{table}}\", write_mode: upsert, create_table: true }} }}"
            )
        },
        "replicate",
        |rt, pool, names| {
            for (table, columns) in KEYED {
                let want =
                    rt.block_on(pg_rows(pool, &format!("{}.{table}", names.schema), columns));
                let have = crate::support::mariadb::joined_rows(&format!("{db}.{table}"), columns);
                same_rows(table, &have, &want);
            }
        },
        |_| {
            crate::support::mariadb::mariadb(&format!("DROP DATABASE IF EXISTS {db}"));
        },
    );
}

/// The audit rows of `table` (`op`, `before`, `after` as JSON) in LSN order.
async fn audit(pool: &PgPool, table: &str) -> Vec<(String, serde_json::Value, serde_json::Value)> {
    let rows: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(&format!(
        "SELECT op, before::text, after::text FROM {table} ORDER BY lsn::pg_lsn"
    ))
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("SELECT from {table}: {e}"));
    let json = |t: Option<String>| {
        t.map(|t| serde_json::from_str(&t).expect("json"))
            .unwrap_or(serde_json::Value::Null)
    };
    rows.into_iter()
        .map(|(op, b, a)| (op, json(b), json(a)))
        .collect()
}

/// `row`'s `columns` as text joined by `|`, as [`pg_rows`] prints them.
fn joined(row: &serde_json::Value, columns: &str) -> String {
    columns
        .split(", ")
        .map(|c| match &row[c] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join("|")
}

/// Replays an audit log strictly: an insert of a row already there, or an update or delete
/// of a row not there, is a change delivered twice or lost. A keyed table's rows are found
/// by `key` (an update without a `before` — the key did not change — by its `after`'s); a
/// keyless one's (`REPLICA IDENTITY FULL`: `before` is the whole row) are a multiset.
fn replay(
    what: &str,
    log: &[(String, serde_json::Value, serde_json::Value)],
    columns: &str,
    key: Option<&str>,
) -> Vec<String> {
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let id = |row: &serde_json::Value| joined(row, key.unwrap_or(columns));
    for (op, before, after) in log {
        if op == "u" || op == "d" {
            let old = if before.is_null() {
                id(after)
            } else {
                id(before)
            };
            let held = rows.get_mut(&old).filter(|r| !r.is_empty());
            let held = held.unwrap_or_else(|| panic!("{what}: `{op}` of a row not there: {old}"));
            held.pop();
        }
        if op == "c" || op == "u" {
            let held = rows.entry(id(after)).or_default();
            assert!(
                key.is_none() || held.is_empty(),
                "{what}: `{op}` of a row already there (a change twice): {after}"
            );
            held.push(joined(after, columns));
        }
    }
    let mut out: Vec<String> = rows.into_values().flatten().collect();
    out.sort();
    out
}

#[test]
fn run_effectively_once_into_append_audit_targets_sigkilled_has_every_change_once() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let names = Names::new("audit");
    let s = names.schema.clone();
    // Empty tables: the audit logs, replayed from nothing, are the tables.
    rt.block_on(exec(
        &pool,
        &format!(
            "{}; TRUNCATE {s}.single, {s}.composite, {s}.texty, {s}.uuidy;
             CREATE TABLE {s}.nokey (a bigint, b text); ALTER TABLE {s}.nokey REPLICA IDENTITY FULL",
            keyed_schema(&s)
        ),
    ));
    let mut tables: Vec<&str> = KEYED.iter().map(|(t, _)| *t).collect();
    tables.push("nokey");
    let dir = tempfile::tempdir().expect("tempdir");
    config(
        dir.path(),
        &names,
        &tables,
        &format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
             table: \"{s}.audit_{{table}}\", create_table: true }} }}"
        ),
        "  delivery: effectively_once\n",
    );
    let stop = Arc::new(AtomicBool::new(false));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // The first run creates the slot; the writer starts after it.
        output_of_success(&mut faucet(dir.path(), "run"), "the first run");
        let writes = writer(s.clone(), true, Arc::clone(&stop));
        std::thread::sleep(Duration::from_millis(1500));
        // Aborted between a page's commit (rows and token) and its bookmark: the rerun
        // re-anchors at the token, so no target gets that page twice.
        crate::support::expect_aborted(&mut faucet(dir.path(), "run"), "after_flush:1");
        std::thread::sleep(Duration::from_millis(200));
        let kills = kill_repeatedly(dir.path(), "run", 25);
        assert!(kills.in_stream > 0, "no kill landed in a run: {kills:?}");
        stop.store(true, Ordering::SeqCst);
        let writes = writes.join().expect("writer");
        assert!(writes > 100, "the writer ran only {writes} statements");
        output_of_success(&mut faucet(dir.path(), "run"), "the last run");
        let slots = rt.block_on(slots_of(&pool, &names.slot));
        assert_eq!(
            slots,
            std::slice::from_ref(&names.slot),
            "one slot for the whole schema"
        );
        let mut all = KEYED.to_vec();
        all.push(("nokey", "a, b"));
        for (table, columns) in all {
            let log = rt.block_on(audit(&pool, &format!("{s}.audit_{table}")));
            let want = rt.block_on(pg_rows(&pool, &format!("{s}.{table}"), columns));
            assert!(!log.is_empty(), "{table}: no change audited");
            same_rows(table, &replay(table, &log, columns, key_of(table)), &want);
        }
    }));
    stop.store(true, Ordering::SeqCst);
    rt.block_on(cleanup(&pool, &names));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `faucet validate` of a `postgres-cdc` source of `tables` (in schema `s`) into `sink`;
/// nothing is connected (the URLs point nowhere).
fn validate(tables: &[&str], sink: &str) -> crate::support::Run {
    let dir = Dir::new();
    let listed: Vec<String> = tables.iter().map(|t| format!("s.{t}")).collect();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: v\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"postgres://u@127.0.0.1:1/db\", \
             slot_name: s1, publication: p1, tables: [{}] }} }}\n  \
             sink: {{ type: postgres, config: {{ connection_url: \"postgres://u@127.0.0.1:1/db2\", {sink} }} }}\n",
            listed.join(", ")
        ),
    );
    dir.faucet(&["validate", "faucet.yaml"])
}

#[test]
fn validate_refuses_what_routing_would_fail_on_before_anything_connects() {
    validate(&["a", "b"], "table: t.all, write_mode: upsert, key: [id]")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.table", "s.a, s.b", "{table}"]);
    // Appending both into one audit table is fine.
    validate(&["a", "b"], "table: t.all").expect_code(0);
    validate(&["a", "b"], "table: \"t.{table}\", write_mode: upsert")
        .expect_code(0)
        .stdout_has(&["upsert by the source's key", "effectively-once"]);
    validate(&["a", "b"], "table: \"t.{schema}\"")
        .expect_code(2)
        .stderr_has(&["s.a and s.b", "t.s"]);
    validate(&["a", "b"], "tables: {s.a: t.a}")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.tables", "s.b"]);
    validate(&["a", "b"], "tables: {s.a: t.x, s.b: t.x}")
        .expect_code(2)
        .stderr_has(&["tables.s.b", "t.x"]);
    validate(&["a"], "table: \"t.{tabel}\"")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.table", "{tabel}"]);
}
