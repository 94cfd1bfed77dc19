//! A change stream of three tables into a routed jsonl sink (`path: "out/{table}.jsonl"`),
//! through the real binary (issue 23): `postgres-cdc` (file state, pages of 50) aborted at
//! every fault point and SIGKILLed at instants spread over the run, then rerun to
//! completion. Each table's file holds every change of that table (compared with an
//! independent `test_decoding` slot), first occurrences in commit order, records of no other
//! table, duplicates only of pages in flight at a crash (at most a page per crash), and
//! replaying it gives the table value by value. And `faucet validate` refuses, before
//! anything connects, a template for a source whose records name no table and two listed
//! tables rendering one file, and takes one fixed file for several tables; `faucet serve`
//! shows each file's record count in its status and in `faucet_target_records_total`.
//! `FAUCET_SOAK=1` crashes more often.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sqlx::PgPool;

use crate::support::pg::{
    Change, change_of_record, drop_cdc_test_objects, drop_slot, exec, faucet_with_pg_url,
    items_rows, replay_items, test_decoding_table_changes, unique_suffix,
};
use crate::support::server::Server;
use crate::support::{
    Dir, expect_aborted, killed_quietly_after, output_of_success, pg_pool, runtime,
};

/// Change records per page: 50, or 10 with `FAUCET_SOAK`, whose more fault hits need more
/// pages of the same workload (every crash moves the run on by a few pages, and the last
/// point's last hit still needs that many pages left to reach).
fn batch() -> u64 {
    crate::support::soak_or(10, 50)
}
const TABLES: [&str; 3] = ["t1", "t2", "t3"];
const PG_VAR: &str = "FAUCET_JSONL_ROUTED_PG_URL";

fn faucet(dir: &Path) -> Command {
    let mut c = faucet_with_pg_url(PG_VAR);
    c.args(["run", "--quiet"]).current_dir(dir);
    c
}

/// Every statement touches one table, except the transactions that touch all three.
async fn workload(pool: &PgPool, s: &str) {
    for t in TABLES {
        exec(
            pool,
            &format!(
                "INSERT INTO {s}.{t} SELECT g, nextval('{s}.seq'), '{t}' || g \
                 FROM generate_series(1, 300) g"
            ),
        )
        .await;
    }
    for k in 0..4 {
        let t = TABLES[k % 3];
        exec(
            pool,
            &format!("UPDATE {s}.{t} SET v = nextval('{s}.seq') WHERE id % 4 = {k}"),
        )
        .await;
    }
    exec(
        pool,
        &format!(
            "BEGIN;
             UPDATE {s}.t1 SET v = nextval('{s}.seq'), note = note || '+' WHERE id <= 120;
             DELETE FROM {s}.t2 WHERE id > 280;
             INSERT INTO {s}.t3 SELECT g, nextval('{s}.seq'), 'big' || g FROM generate_series(301, 340) g;
             UPDATE {s}.t2 SET v = nextval('{s}.seq') WHERE id <= 100;
             COMMIT;"
        ),
    )
    .await;
    exec(pool, &format!("DELETE FROM {s}.t3 WHERE id % 7 = 0")).await;
}

/// A fresh schema with `t1`..`t3 (id, v, note)` and a directory holding `faucet.yaml`:
/// `postgres-cdc` of the three → `out/{table}.jsonl`, file state, pages of [`batch`].
fn setup(rt: &tokio::runtime::Runtime, pool: &PgPool) -> (String, String, String, Dir) {
    let suffix = unique_suffix();
    let (s, slot, publication) = (
        format!("cdc_jr_{suffix}"),
        format!("faucet_jr_{suffix}"),
        format!("pub_jr_{suffix}"),
    );
    let tables: Vec<String> = TABLES
        .iter()
        .map(|t| {
            format!(
                "CREATE TABLE {s}.{t} (id int PRIMARY KEY, v bigint NOT NULL, note text NOT NULL);"
            )
        })
        .collect();
    rt.block_on(exec(
        pool,
        &format!(
            "CREATE SCHEMA {s}; CREATE SEQUENCE {s}.seq; {}",
            tables.join(" ")
        ),
    ));
    let dir = Dir::new();
    let listed: Vec<String> = TABLES.iter().map(|t| format!("{s}.{t}")).collect();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: jr\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
             slot_name: {slot}, publication: {publication}, tables: [{}], create_publication: true }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: \"./out/{{table}}.jsonl\" }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {}\n",
            listed.join(", "),
            batch()
        ),
    );
    (s, slot, publication, dir)
}

#[test]
fn cdc_of_three_tables_into_a_file_each_crashed_loses_nothing_and_mixes_nothing() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let (s, slot, publication, dir) = setup(&rt, &pool);
    let oracle = format!("{slot}_oracle");
    crate::support::with_cleanup(
        || {
            output_of_success(&mut faucet(dir.path()), "the first run");
            rt.block_on(exec(
                &pool,
                &format!("SELECT pg_create_logical_replication_slot('{oracle}', 'test_decoding')"),
            ));
            rt.block_on(workload(&pool, &s));

            let soak = std::env::var("FAUCET_SOAK").is_ok();
            let hits: &[u32] = if soak { &[1, 2, 3, 5] } else { &[1, 3] };
            let mut crashes = 0u64;
            for point in faucet_core::fault::ALL {
                for &hit in hits {
                    expect_aborted(&mut faucet(dir.path()), &format!("{point}:{hit}"));
                    crashes += 1;
                }
            }
            let rounds = if soak { 10 } else { 3 };
            let mut killed = 0;
            for round in 0..rounds {
                let t = TABLES[round % 3];
                rt.block_on(exec(
                    &pool,
                    &format!(
                        "UPDATE {s}.{t} SET v = nextval('{s}.seq') WHERE id % 2 = {}",
                        round % 2
                    ),
                ));
                let after = Duration::from_millis(20 + (round as u64 * 41 % 120));
                if killed_quietly_after(faucet(dir.path()), after) {
                    crashes += 1;
                    killed += 1;
                }
            }
            assert!(killed > 0, "no round was killed mid-run");
            output_of_success(&mut faucet(dir.path()), "the last run");
            verify(&rt, &pool, &s, &oracle, &dir, crashes);
        },
        || {
            rt.block_on(drop_slot(&pool, &oracle, Duration::from_secs(5)));
            rt.block_on(drop_cdc_test_objects(&pool, &slot, &publication, &s));
        },
    );
}

fn verify(
    rt: &tokio::runtime::Runtime,
    pool: &PgPool,
    s: &str,
    oracle: &str,
    dir: &Dir,
    crashes: u64,
) {
    let lines: Vec<String> = rt
        .block_on(
            sqlx::query_scalar("SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL)")
                .bind(oracle)
                .fetch_all(pool),
        )
        .expect("oracle slot");
    let mut files: Vec<String> = std::fs::read_dir(dir.join("out"))
        .expect("out")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["t1.jsonl", "t2.jsonl", "t3.jsonl"],
        "one file per table"
    );
    let mut duplicates = 0u64;
    let mut changes = 0usize;
    for t in TABLES {
        let table = format!("{s}.{t}");
        let bytes = dir.read(&format!("out/{t}.jsonl")).expect("file");
        assert!(bytes.ends_with(b"\n"), "{t}: a torn last line");
        let records = dir.jsonl(&format!("out/{t}.jsonl"));
        for r in &records {
            assert_eq!(
                r["table"].as_str(),
                Some(table.as_str()),
                "{t}: a record of another table"
            );
        }
        let expected = test_decoding_table_changes(lines.iter().map(String::as_str), &table);
        assert!(expected.len() > 300, "{t}: {} changes", expected.len());
        let mut counts: HashMap<Change, u64> = HashMap::new();
        let mut first_seen = Vec::new();
        for r in &records {
            let key = change_of_record(r);
            let n = counts.entry(key.clone()).or_insert(0);
            if *n == 0 {
                first_seen.push(key);
            }
            *n += 1;
        }
        let lost = expected.iter().filter(|k| !counts.contains_key(*k)).count();
        assert_eq!(lost, 0, "{t}: lost {lost} changes");
        assert_eq!(
            first_seen, expected,
            "{t}: changes out of order or invented"
        );
        duplicates += counts.values().map(|n| n - 1).sum::<u64>();
        changes += expected.len();

        // Replaying the file gives the table.
        let replica = replay_items(&records);
        let rows = rt.block_on(items_rows(pool, &table));
        assert!(
            replica == rows,
            "{t}: the replayed changes differ from the table"
        );
    }
    // A page in flight at a crash is delivered again, whole: at most a page per crash.
    assert!(
        duplicates <= crashes * batch(),
        "{duplicates} duplicates after {crashes} crashes (at most {} each)",
        batch()
    );
    eprintln!(
        "jsonl routed crash test: {changes} changes in 3 files, {crashes} crashes, \
         {duplicates} duplicates, 0 lost"
    );
}

#[test]
fn serve_counts_the_records_of_each_file() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let (s, slot, publication, dir) = setup(&rt, &pool);
    let config = String::from_utf8(dir.read("faucet.yaml").expect("config")).expect("utf-8");
    dir.write(
        "faucet.yaml",
        config
            .replace(
                "create_publication: true }",
                "create_publication: true, continuous: true }",
            )
            .replace(&format!("batch_size: {}", batch()), "max_page_delay: 100ms"),
    );
    let url = crate::support::pg_url();
    crate::support::with_cleanup(
        || {
            let server = Server::start_env(&dir, &["faucet.yaml"], None, &[(PG_VAR, url.as_str())]);
            // The run streams once its slot exists; the rows come after.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let active: Vec<bool> = rt
                    .block_on(
                        sqlx::query_scalar(&format!(
                            "SELECT {} FROM pg_replication_slots WHERE slot_name = $1",
                            crate::support::pg::SLOT_STREAMING
                        ))
                        .bind(&slot)
                        .fetch_all(&pool),
                    )
                    .expect("slots");
                if active == [true] {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "no active slot: {}",
                    server.stderr()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            for (t, n) in [("t1", 10), ("t2", 20), ("t3", 30)] {
                rt.block_on(exec(
                    &pool,
                    &format!("INSERT INTO {s}.{t} SELECT g, g, 'n' FROM generate_series(1, {n}) g"),
                ));
            }
            let doc = server.wait_for("jr", "60 records", |d| d["records"] == 60);
            let file = |t: &str| format!("{}/out/{t}.jsonl", dir.path().display());
            assert_eq!(
                doc["targets"],
                serde_json::json!({ file("t1"): 10, file("t2"): 20, file("t3"): 30 }),
                "{doc}"
            );
            let (code, text) = server.request("GET", "/metrics", None);
            assert_eq!(code, 200);
            crate::serve::promtool_check(&text);
            for (t, n) in [("t1", 10), ("t2", 20), ("t3", 30)] {
                let series = format!(
                    "faucet_target_records_total{{pipeline=\"jr\",row=\"\",target=\"{}\"}} {n}\n",
                    file(t)
                );
                assert!(text.contains(&series), "{series} in\n{text}");
            }
            assert!(
                text.contains("faucet_records_total{pipeline=\"jr\",row=\"\"} 60\n"),
                "{text}"
            );
            let (code, stderr) = server.terminate();
            assert_eq!(code, 0, "{stderr}");
        },
        || {
            rt.block_on(drop_cdc_test_objects(&pool, &slot, &publication, &s));
        },
    );
}

/// `faucet validate` of `source` (YAML of `pipeline.source`) into a jsonl sink at `path`;
/// nothing is connected (the URLs point nowhere).
fn validate(source: &str, path: &str) -> crate::support::Run {
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: v\npipeline:\n  source: {source}\n  \
             sink: {{ type: jsonl, config: {{ path: \"{path}\" }} }}\n"
        ),
    );
    dir.write("in.csv", "id\n1\n");
    dir.faucet(&["validate", "faucet.yaml"])
}

fn cdc(tables: &str) -> String {
    format!(
        "{{ type: postgres-cdc, config: {{ connection_url: \"postgres://u@127.0.0.1:1/db\", \
         slot_name: s1, publication: p1, tables: [{tables}] }} }}"
    )
}

#[test]
fn validate_refuses_a_file_template_a_run_would_fail_on() {
    validate(&cdc("a.t, b.u"), "out/{table}.jsonl").expect_code(0);
    // One fixed file for every table is fine: each line names its table.
    validate(&cdc("a.t, b.t"), "out/all.jsonl").expect_code(0);
    validate(&cdc("a.t, b.t"), "out/{table}.jsonl")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.path", "a.t and b.t", "{schema}"]);
    validate(&cdc("a.t, b.t"), "out/{schema}_{table}.jsonl").expect_code(0);
    validate(
        "{ type: csv, config: { path: in.csv } }",
        "out/{table}.jsonl",
    )
    .expect_code(2)
    .stderr_has(&["pipeline.sink.config.path", "not a change source"]);
    validate(&cdc("a.t"), "out/{tabel}.jsonl")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.path", "{tabel}"]);
}
