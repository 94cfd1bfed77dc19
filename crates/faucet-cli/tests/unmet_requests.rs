//! Requests that cannot be met (issue 5; docs/run-loop.md, invariant 5), through `faucet run` and
//! `faucet validate`: `delivery: effectively_once` (or `exactly_once`) on a topology that
//! cannot give it exits 3 before any data moves, with a message naming the limiting side,
//! the connector, why, and the fix; the target is untouched (no table created, no commit
//! token table, no replication slot, no state written). And `faucet validate` prints the
//! guarantee it derives for each matrix row of a config into a postgres upsert sink.
//!
//! The `jsonl` sink case is in `bad_input.rs`. PostgreSQL from `FAUCET_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`; `scripts/services.sh` starts it).

use crate::support::pg::{query, sql, table_exists};
use crate::support::{Dir, pg_url};

/// Exit code of an unmet delivery request (`faucet --help`, "Exit codes").
const DELIVERY_UNMET: i32 = 3;

fn schema(tag: &str) -> String {
    format!("unmet_{tag}_{}", std::process::id())
}

/// `faucet <args>` in `dir`, with the test server's URL in `FAUCET_CRASH_PG_URL`.
fn faucet(dir: &Dir, args: &[&str]) -> crate::support::Run {
    dir.faucet_env(args, &[("FAUCET_CRASH_PG_URL", &pg_url())])
}

/// Asserts nothing of the pipeline reached PostgreSQL or the state directory.
#[track_caller]
fn assert_untouched(dir: &Dir, schema: &str, what: &str) {
    assert!(
        !table_exists(&format!("{schema}.target")),
        "{what}: the target table was created"
    );
    assert!(
        !table_exists(&format!("{schema}.faucet_commit_tokens")),
        "{what}: the commit token table was created"
    );
    assert!(
        !dir.join("state").exists(),
        "{what}: the state store was written"
    );
}

/// Runs `faucet run` (human and `--output json`) and `faucet validate` on `dir`'s
/// `p.yaml` and checks each refuses with `needles` in its message, leaving the target as it
/// was.
fn assert_refused(dir: &Dir, schema: &str, needles: &[&str]) {
    let run = faucet(dir, &["run", "p.yaml"]);
    run.expect_code(DELIVERY_UNMET).stderr_has(needles);
    assert_untouched(dir, schema, "faucet run");

    let json = faucet(dir, &["run", "p.yaml", "--output", "json"]);
    json.expect_code(DELIVERY_UNMET);
    let doc = json.json();
    assert_eq!(doc["ok"], false, "{doc}");
    let error = &doc["error"];
    assert_eq!(error["kind"], "delivery", "{doc}");
    let message = error["message"].as_str().unwrap_or_default();
    for n in needles {
        assert!(message.contains(n), "--output json lacks {n:?}: {doc}");
    }
    assert_untouched(dir, schema, "faucet run --output json");

    let validate = faucet(dir, &["validate", "p.yaml"]);
    validate
        .expect_code(DELIVERY_UNMET)
        .stdout_has(&["delivery    ✗"])
        .stdout_has(needles);
    assert_untouched(dir, schema, "faucet validate");
}

#[test]
fn effectively_once_into_postgres_append_behind_a_query_source_is_refused() {
    let s = schema("query_append");
    sql(&format!(
        "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}; \
         CREATE TABLE {s}.src (id int PRIMARY KEY, v int NOT NULL); \
         INSERT INTO {s}.src SELECT g, g FROM generate_series(1, 100) g"
    ));
    crate::support::with_cleanup(
        || {
            for request in ["effectively_once", "exactly_once"] {
                let dir = Dir::new();
                dir.write(
                    "p.yaml",
                    format!(
                        "version: 1\nname: unmet\npipeline:\n  \
                         source: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
                         table: {s}.src, replication_method: incremental, replication_key: [id] }} }}\n  \
                         sink: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
                         table: {s}.target, create_table: true }} }}\n  \
                         state: {{ type: file, config: {{ path: ./state }} }}\n  \
                         delivery: {request}\n"
                    ),
                );
                // The limit is the source: the sink has an atomic watermark, but a query over a
                // mutable table does not replay what it read, so only an upsert key can help.
                assert_refused(
                    &dir,
                    &s,
                    &[
                        "effectively-once delivery cannot be met",
                        "the source `postgres`",
                        "does not replay deterministically",
                        "fix:",
                        "`write_mode: upsert`",
                        "`key: [...]`",
                        "delivery: at_least_once",
                    ],
                );
            }
            // The source table was only read by nobody: still its 100 rows.
            let n: Vec<(i64,)> = query(&format!("SELECT count(*) FROM {s}.src"));
            assert_eq!(n, vec![(100,)]);
        },
        || {
            sql(&format!("DROP SCHEMA IF EXISTS {s} CASCADE"));
        },
    );
}

#[test]
fn effectively_once_with_a_memory_state_store_is_refused_where_the_token_needs_durable_state() {
    let s = schema("memory");
    let slot = format!("unmet_slot_{}", std::process::id());
    let publication = format!("unmet_pub_{}", std::process::id());
    sql(&format!(
        "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}; \
         CREATE TABLE {s}.items (id int PRIMARY KEY, v int NOT NULL)"
    ));
    crate::support::with_cleanup(
        || {
            let url = "\"${env:FAUCET_CRASH_PG_URL}\"";
            // Deterministic sources into the atomic-watermark sink (no key): only the state
            // store is missing.
            let sources = [
                (
                    "csv",
                    "{ type: csv, config: { path: ./in.csv } }".to_owned(),
                ),
                (
                    "postgres-cdc",
                    format!(
                        "{{ type: postgres-cdc, config: {{ connection_url: {url}, slot_name: {slot}, \
                         publication: {publication}, tables: [{s}.items], create_publication: true }} }}"
                    ),
                ),
            ];
            for (what, source) in &sources {
                let dir = Dir::new();
                dir.write("in.csv", "id,v\n1,1\n2,2\n");
                dir.write(
                    "p.yaml",
                    format!(
                        "version: 1\nname: unmet\npipeline:\n  source: {source}\n  \
                         sink: {{ type: postgres, config: {{ connection_url: {url}, \
                         table: {s}.target, create_table: true }} }}\n  \
                         state: {{ type: memory }}\n  delivery: exactly_once\n"
                    ),
                );
                assert_refused(
                    &dir,
                    &s,
                    &[
                        "effectively-once delivery cannot be met",
                        "the state store `memory`",
                        "is not durable",
                        "fix:",
                        "use a durable state store (`file`, `postgres` or `redis`)",
                        "delivery: at_least_once",
                    ],
                );
                let slots: Vec<(i64,)> = query(&format!(
                    "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}'"
                ));
                assert_eq!(slots, vec![(0,)], "{what}: a replication slot was created");
                let pubs: Vec<(i64,)> = query(&format!(
                    "SELECT count(*) FROM pg_publication WHERE pubname = '{publication}'"
                ));
                assert_eq!(pubs, vec![(0,)], "{what}: a publication was created");
            }
        },
        || {
            sql(&format!(
                "DROP PUBLICATION IF EXISTS {publication}; DROP SCHEMA IF EXISTS {s} CASCADE"
            ));
            let _ = std::panic::catch_unwind(|| {
                sql(&format!(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                 WHERE slot_name = '{slot}'"
                ));
            });
        },
    );
}

/// The lines `faucet validate` printed for the row labelled `label`: from its label line to
/// the next row's.
fn row_block<'a>(stdout: &'a str, label: &str, labels: &[&str]) -> Vec<&'a str> {
    let mut lines = stdout.lines().skip_while(|l| *l != label);
    let Some(first) = lines.next() else {
        panic!("no row `{label}` in\n{stdout}");
    };
    std::iter::once(first)
        .chain(lines.take_while(|l| !labels.contains(l)))
        .collect()
}

#[test]
fn validate_prints_the_guarantee_of_each_row_into_a_postgres_upsert_sink() {
    // Offline: nothing here is connected to, so the names need not exist.
    let dir = Dir::new();
    dir.write("in.csv", "id,v\n1,1\n");
    let url = "postgres://nobody@127.0.0.1:1/none";
    let query_source = format!(
        "{{ type: postgres, config: {{ connection_url: \"{url}\", table: public.src, \
         replication_method: incremental, replication_key: [id] }} }}"
    );
    let file = "state: { type: file, config: { path: ./state } }";
    dir.write(
        "p.yaml",
        format!(
            "version: 1\nname: guarantees\npipeline:\n  \
             sink: {{ type: postgres, config: {{ connection_url: \"{url}\", table: public.target, \
             write_mode: upsert, key: [id] }} }}\n  \
             delivery: effectively_once\n\
             matrix:\n  \
             - {{ id: csv_file, {file}, source: {{ type: csv, config: {{ path: ./in.csv }} }} }}\n  \
             - {{ id: cdc_file, {file}, source: {{ type: postgres-cdc, config: {{ connection_url: \"{url}\", \
                  slot_name: s, publication: p, tables: [public.src] }} }} }}\n  \
             - {{ id: query_file, {file}, source: {query_source} }}\n  \
             - {{ id: csv_memory, state: {{ type: memory }}, \
                  source: {{ type: csv, config: {{ path: ./in.csv }} }} }}\n  \
             - {{ id: query_append, {file}, source: {query_source}, delivery: at_least_once, \
                  sink: {{ config: {{ write_mode: append, key: [] }} }} }}\n"
        ),
    );
    let run = dir.faucet(&["validate", "p.yaml"]);
    run.expect_code(0).stdout_has(&["valid"]);
    let rows = [
        ("csv_file", "effectively-once (atomic watermark)"),
        ("cdc_file", "effectively-once (atomic watermark)"),
        ("query_file", "effectively-once (keyed upsert)"),
        ("csv_memory", "effectively-once (keyed upsert)"),
        ("query_append", "at-least-once"),
    ];
    let labels: Vec<&str> = rows.iter().map(|(l, _)| *l).collect();
    for (label, guarantee) in rows {
        let block = row_block(&run.stdout, label, &labels);
        let delivery: Vec<&&str> = block
            .iter()
            .filter(|l| l.trim_start().starts_with("delivery"))
            .collect();
        assert_eq!(
            delivery.len(),
            1,
            "row `{label}`: one delivery line\n{}",
            run.stdout
        );
        assert_eq!(
            delivery[0]
                .split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
                .join(" "),
            guarantee,
            "row `{label}`\n{}",
            run.stdout
        );
    }
    assert!(!dir.join("state").exists(), "validate wrote state");
}
