//! Crash test of `postgres-cdc` → jsonl (file state) through the real `faucet` binary: the
//! process is aborted at every fault point (several times) and SIGKILLed at random instants,
//! then restarted; the JSONL change records are compared with an independent record of the
//! same changes (a second, `test_decoding` slot) and replayed onto a map that must equal the
//! source table value by value. Lost = 0; duplicates at most one page per crash; after every
//! crash the slot's `confirmed_flush_lsn` is at or before the persisted bookmark (case 03).
//! `FAUCET_SOAK=1` runs more rounds. Needs PostgreSQL with wal_level=logical
//! (`FAUCET_TEST_PG_URL`; `scripts/services.sh` starts it).

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value as Json;
use sqlx::PgPool;

use crate::support::pg::{
    Change, change_of_record, drop_cdc_test_objects, drop_slot, exec, faucet_with_pg_url,
    items_rows, lsn_value, replay_items, test_decoding_changes, unique_suffix,
};
use crate::support::{bookmark_of, expect_aborted, killed_quietly_after, output_of_success};
use crate::support::{pg_pool, runtime};

const BATCH: u64 = 50;

fn faucet(dir: &Path) -> Command {
    let mut c = faucet_with_pg_url("FAUCET_CDC_CRASH_PG_URL");
    c.args(["run", "--quiet"]).current_dir(dir);
    c
}

struct Names {
    schema: String,
    slot: String,
    oracle: String,
    publication: String,
}

async fn confirmed_flush(pool: &PgPool, slot: &str) -> u64 {
    let text: String = sqlx::query_scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(slot)
    .fetch_one(pool)
    .await
    .expect("slot");
    lsn_value(&text)
}

/// The bookmark in the file state store, if one was written.
fn persisted_lsn(dir: &Path) -> Option<u64> {
    let entries = std::fs::read_dir(dir.join("state")).ok()?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") && !name.starts_with('.') {
            let v = bookmark_of(
                serde_json::from_slice(&std::fs::read(e.path()).expect("read state"))
                    .expect("a whole state file"),
            );
            if let Some(lsn) = v["lsn"].as_str() {
                return Some(lsn_value(lsn));
            }
        }
    }
    None
}

/// The workload: separate transactions of inserts, updates and deletes, and one transaction
/// of 830 changes (so pages end inside it). Every insert and update takes a fresh `v`.
async fn workload(pool: &PgPool, s: &str) {
    for sql in [
        format!("INSERT INTO {s}.items SELECT g, nextval('{s}.seq'), 'n' || g FROM generate_series(1, 800) g"),
    ]
    .into_iter()
    .chain((0..10).map(|k| {
        format!("UPDATE {s}.items SET v = nextval('{s}.seq') WHERE id % 10 = {k}")
    }))
    .chain([
        format!(
            "BEGIN;
             UPDATE {s}.items SET v = nextval('{s}.seq'), note = note || '+';
             DELETE FROM {s}.items WHERE id > 790;
             INSERT INTO {s}.items SELECT g, nextval('{s}.seq'), 'big' || g FROM generate_series(801, 820) g;
             COMMIT;"
        ),
        format!("DELETE FROM {s}.items WHERE id % 7 = 0"),
        format!("INSERT INTO {s}.items SELECT g, nextval('{s}.seq'), 'late' || g FROM generate_series(900, 950) g"),
    ]) {
        exec(pool, &sql).await;
    }
}

/// The changes as `test_decoding` saw them, in commit order.
async fn oracle_changes(pool: &PgPool, names: &Names) -> Vec<Change> {
    let rows: Vec<String> =
        sqlx::query_scalar("SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL)")
            .bind(&names.oracle)
            .fetch_all(pool)
            .await
            .expect("oracle slot");
    test_decoding_changes(rows.iter().map(String::as_str), &names.schema)
}

fn output(dir: &Path) -> Vec<Json> {
    let text = std::fs::read_to_string(dir.join("out/changes.jsonl")).unwrap_or_default();
    assert!(text.is_empty() || text.ends_with('\n'), "a torn last line");
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("line {} is not JSON ({e})", i + 1))
        })
        .collect()
}

fn run_to_completion(dir: &Path) {
    output_of_success(&mut faucet(dir), "the restarted run");
}

#[test]
fn cdc_to_jsonl_killed_at_every_fault_point_loses_nothing() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let (names, dir) = setup(&rt, &pool, "crash", &format!("batch_size: {BATCH}"));
    let s = names.schema.clone();
    crate::support::with_cleanup(
        || {
            first_run_with_oracle(&rt, &pool, &names, dir.path());
            rt.block_on(workload(&pool, &s));
            let ack_not_ahead = ack_checker(&rt, &pool, &names, dir.path());

            let soak = std::env::var("FAUCET_SOAK").is_ok();
            let hits: &[u32] = if soak { &[1, 2, 3, 5] } else { &[1, 3] };
            let mut crashes = 0u64;
            let check_ack =
                |crashes: u64, what: &str| ack_not_ahead(&format!("{what} (crash {crashes})"));
            for point in faucet_core::fault::ALL {
                for &hit in hits {
                    expect_aborted(&mut faucet(dir.path()), &format!("{point}:{hit}"));
                    crashes += 1;
                    check_ack(crashes, &format!("{point}:{hit}"));
                }
            }
            // SIGKILL at pseudo-random instants, each round with new changes to read (updates
            // of 400 rows in one transaction, so kills land inside transactions too).
            let rounds = if soak { 12 } else { 4 };
            let mut killed = 0;
            for round in 0..rounds {
                rt.block_on(exec(
                    &pool,
                    &format!(
                        "UPDATE {s}.items SET v = nextval('{s}.seq') WHERE id % 2 = {}",
                        round % 2
                    ),
                ));
                let after = Duration::from_millis(20 + (round * 37 % 120) as u64);
                if killed_quietly_after(faucet(dir.path()), after) {
                    crashes += 1;
                    killed += 1;
                }
                check_ack(crashes, "SIGKILL");
            }
            assert!(
                killed > 0,
                "no round was killed mid-run: the SIGKILL rounds proved nothing"
            );
            run_to_completion(dir.path());

            verify(&rt, &pool, &names, dir.path(), crashes, BATCH, 2_000);
            check_ack(crashes, "the final run");
        },
        || {
            rt.block_on(drop_names(&pool, &names));
        },
    );
}

#[test]
fn continuous_cdc_killed_during_a_steady_stream_loses_nothing() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    // Default batch_size (10,000): only the page delay hands pages over.
    let (names, dir) = setup(&rt, &pool, "steady", "max_page_delay: 50ms");
    let bounded = std::fs::read_to_string(dir.path().join("faucet.yaml")).expect("config");
    std::fs::write(
        dir.path().join("continuous.yaml"),
        bounded.replace(
            "create_publication: true }",
            "create_publication: true, continuous: true }",
        ),
    )
    .expect("config");
    let s = names.schema.clone();
    crate::support::with_cleanup(
        || {
            first_run_with_oracle(&rt, &pool, &names, dir.path());
            let ack_not_ahead = ack_checker(&rt, &pool, &names, dir.path());
            // The writer: a single-row transaction every 10 ms (inserts, and updates and deletes
            // of earlier rows), on its own runtime and connection, until told to stop.
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let writer = {
                let stop = stop.clone();
                let s = s.clone();
                std::thread::spawn(move || {
                    runtime().block_on(async move {
                        let mut c = crate::support::pg_connect(&crate::support::pg_url()).await;
                        let mut id = 0i64;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            id += 1;
                            let sql = match id % 10 {
                                3 => format!(
                                    "UPDATE {s}.items SET v = nextval('{s}.seq') WHERE id = {}",
                                    id / 2
                                ),
                                7 => format!("DELETE FROM {s}.items WHERE id = {}", id / 3),
                                _ => format!(
                                    "INSERT INTO {s}.items VALUES ({id}, nextval('{s}.seq'), 'w{id}')"
                                ),
                            };
                            sqlx::raw_sql(&sql).execute(&mut c).await.expect("write");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    })
                })
            };
            let soak = std::env::var("FAUCET_SOAK").is_ok();
            let rounds = if soak { 15 } else { 5 };
            let mut crashes = 0u64;
            for round in 0..rounds {
                let mut run = faucet_with_pg_url("FAUCET_CDC_CRASH_PG_URL");
                run.args(["run", "continuous.yaml", "--quiet"])
                    .current_dir(dir.path());
                let after = Duration::from_millis(700 + (round * 173 % 600) as u64);
                assert!(
                    killed_quietly_after(run, after),
                    "the continuous run ended by itself"
                );
                crashes += 1;
                ack_not_ahead(&format!("SIGKILL {crashes}"));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            writer.join().expect("writer");
            // The continuous runs delivered while the writer wrote (with pages only at
            // batch_size they would have delivered nothing before being killed).
            let delivered_while_writing = output(dir.path()).len();
            run_to_completion(dir.path());
            let all = output(dir.path()).len();
            assert!(
                delivered_while_writing * 2 >= all,
                "only {delivered_while_writing} of {all} changes were delivered by the continuous runs"
            );
            // A page holds what arrived within its delay, plus the backlog of a restart: at 100
            // changes/s, well under 2 s of changes. The writer reaches 100 changes/s on a quiet
            // machine (~500 changes); on a loaded one a debug build's writer made 180.
            verify(&rt, &pool, &names, dir.path(), crashes, 200, 100);
            ack_not_ahead("the final run");
        },
        || {
            rt.block_on(drop_names(&pool, &names));
        },
    );
}

/// The first run creates the publication and the slot; the oracle slot (`test_decoding`)
/// starts with it, so both see every change made after this.
fn first_run_with_oracle(rt: &tokio::runtime::Runtime, pool: &PgPool, names: &Names, dir: &Path) {
    run_to_completion(dir);
    rt.block_on(exec(
        pool,
        &format!(
            "SELECT pg_create_logical_replication_slot('{}', 'test_decoding')",
            names.oracle
        ),
    ));
}

/// Panics unless the slot's `confirmed_flush_lsn` is at or before the persisted bookmark
/// (`initial`, the slot's position before the workload, when none was persisted): the
/// server was never told to discard a change that is not durable (case 03).
fn assert_ack_not_ahead(
    rt: &tokio::runtime::Runtime,
    pool: &PgPool,
    names: &Names,
    dir: &Path,
    initial: u64,
    what: &str,
) {
    let confirmed = rt.block_on(confirmed_flush(pool, &names.slot));
    let persisted = persisted_lsn(dir).unwrap_or(initial);
    assert!(
        confirmed <= persisted,
        "after {what}: confirmed_flush_lsn {confirmed:X} passed the persisted bookmark \
         {persisted:X}"
    );
}

/// [`assert_ack_not_ahead`] on the test's slot and `dir`, `initial` the slot's position now
/// (call it before the workload's changes are read).
fn ack_checker<'a>(
    rt: &'a tokio::runtime::Runtime,
    pool: &'a PgPool,
    names: &'a Names,
    dir: &'a Path,
) -> impl Fn(&str) + 'a {
    let initial = rt.block_on(confirmed_flush(pool, &names.slot));
    move |what| assert_ack_not_ahead(rt, pool, names, dir, initial, what)
}

/// A fresh schema with `items (id, v, note)` and a sequence, and a directory holding
/// `faucet.yaml`: `postgres-cdc` on it → `out/changes.jsonl`, file state, plus `extra`
/// (pipeline-level YAML, one line). The slot and publication are made by the first run.
fn setup(
    rt: &tokio::runtime::Runtime,
    pool: &PgPool,
    tag: &str,
    extra: &str,
) -> (Names, tempfile::TempDir) {
    let suffix = unique_suffix();
    let names = Names {
        schema: format!("cdc_{tag}_{suffix}"),
        slot: format!("faucet_{tag}_{suffix}"),
        oracle: format!("faucet_{tag}_oracle_{suffix}"),
        publication: format!("pub_{tag}_{suffix}"),
    };
    let s = &names.schema;
    rt.block_on(exec(
        pool,
        &format!(
            "CREATE SCHEMA {s}; CREATE SEQUENCE {s}.seq;
             CREATE TABLE {s}.items (id int PRIMARY KEY, v bigint NOT NULL, note text NOT NULL);"
        ),
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("faucet.yaml"),
        format!(
            "version: 1\nname: cdc_{tag}\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_CDC_CRASH_PG_URL}}\", \
             slot_name: {slot}, publication: {publication}, tables: [{s}.items], create_publication: true }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out/changes.jsonl }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  {extra}\n",
            slot = names.slot,
            publication = names.publication,
        ),
    )
    .expect("config");
    (names, dir)
}

/// Compares the JSONL output in `dir` with the oracle slot's record of the same changes:
/// nothing lost, nothing invented, first occurrences in commit order, at most `per_crash`
/// duplicates per crash; and replaying the records gives the table, value by value.
fn verify(
    rt: &tokio::runtime::Runtime,
    pool: &PgPool,
    names: &Names,
    dir: &Path,
    crashes: u64,
    per_crash: u64,
    min_changes: usize,
) {
    let s = &names.schema;
    // Every change, nothing invented, first occurrences in commit order.
    let expected = rt.block_on(oracle_changes(pool, names));
    assert!(
        expected.len() > min_changes,
        "workload of {} changes",
        expected.len()
    );
    let records = output(dir);
    let mut counts: HashMap<Change, u64> = HashMap::new();
    let mut first_seen: Vec<Change> = Vec::new();
    for r in &records {
        let key = change_of_record(r);
        let n = counts.entry(key.clone()).or_insert(0);
        if *n == 0 {
            first_seen.push(key);
        }
        *n += 1;
    }
    let lost: Vec<&Change> = expected
        .iter()
        .filter(|k| !counts.contains_key(*k))
        .collect();
    assert!(
        lost.is_empty(),
        "lost {} changes, first {:?}",
        lost.len(),
        lost.first()
    );
    assert_eq!(first_seen, expected, "changes out of order or invented");
    let duplicates: u64 = counts.values().map(|n| n - 1).sum();
    assert!(
        duplicates <= crashes * per_crash,
        "{duplicates} duplicates after {crashes} crashes (at most {per_crash} each)"
    );
    eprintln!(
        "postgres-cdc crash test: {} changes, {crashes} crashes, {duplicates} duplicates, 0 lost",
        expected.len()
    );

    // Replaying the records gives the table, value by value.
    let replica = replay_items(&records);
    let table = rt.block_on(items_rows(pool, &format!("{s}.items")));
    assert_eq!(replica.len(), table.len());
    assert!(
        replica == table,
        "the replayed changes differ from the table"
    );
}

/// Drops the test's slots (once their sessions ended), publication and schema.
async fn drop_names(pool: &PgPool, names: &Names) {
    drop_slot(pool, &names.oracle, Duration::from_secs(5)).await;
    drop_cdc_test_objects(pool, &names.slot, &names.publication, &names.schema).await;
}
