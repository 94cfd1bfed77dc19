//! The `mysql` sink through the real binary (feature `mysql`), against the system MariaDB
//! (`FAUCET_TEST_MYSQL_SINK_URL`, default `mysql://root@127.0.0.1:3306/test`):
//! * effectively-once proven by crashing: `faucet run` aborted at every fault point and
//!   SIGKILLed at random instants, restarted, the target compared with the source (lost 0,
//!   duplicated 0) — csv → mysql append with the atomic watermark, incremental `mysql`
//!   query → mysql upsert, and `mysql-cdc` (the binlog MariaDB, `FAUCET_TEST_MYSQL_URL`) →
//!   mysql append with the atomic watermark (every change record of a workload logged
//!   before the first run, one of its transactions several pages long, exactly once);
//! * requests that cannot be met exit 3 before any data moves: an append target behind a
//!   non-deterministic source with a memory state store, and a MyISAM/Aria target with
//!   `effectively_once`; an at-least-once run into that target exits 2 naming the engine,
//!   also when the atomic watermark was derived (a csv source), never effectively-once.
//!
//! `FAUCET_SOAK=1` runs more random kills.

use crate::support::Dir;
use crate::support::crash::{abort_at_every_point, killed_at_random_instants};
use crate::support::mysql::{BATCH, KILL_BATCH, Pair, Scenario, database, mariadb, url_for};

/// Exit code of an unmet delivery request (`faucet --help`, "Exit codes").
const DELIVERY_UNMET: i32 = 3;
/// `faucet`'s exit code for a usage or configuration error.
const USAGE: i32 = 2;

#[test]
fn csv_into_mysql_append_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&Scenario::new(Pair::CsvAppend, "points", BATCH));
}

#[test]
fn mysql_query_into_mysql_upsert_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&Scenario::new(Pair::QueryUpsert, "points", BATCH));
}

#[test]
fn mysql_cdc_into_mysql_append_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&Scenario::new(Pair::CdcAppend, "points", BATCH));
}

#[test]
fn mysql_cdc_into_mysql_append_survives_sigkill() {
    // Pages of 5: the bounded run is a few seconds long, so every kill lands mid-run, most
    // inside the two transactions of 1,000 and 1,500 changes.
    killed_at_random_instants(&Scenario::new(Pair::CdcAppend, "kill", 5));
}

#[test]
fn csv_into_mysql_append_survives_sigkill() {
    killed_at_random_instants(&Scenario::new(Pair::CsvAppend, "kill", KILL_BATCH));
}

#[test]
fn mysql_query_into_mysql_upsert_survives_sigkill() {
    killed_at_random_instants(&Scenario::new(Pair::QueryUpsert, "kill", KILL_BATCH));
}

/// The tables of `db`.
fn tables(db: &str) -> Vec<String> {
    mariadb(&format!(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}' ORDER BY 1"
    ))
    .into_iter()
    .map(|r| r[0].clone())
    .collect()
}

#[test]
fn unmet_requests_into_mysql_are_refused_before_any_data_moves() {
    let db = database("cli_msink_unmet");
    mariadb(&format!(
        "CREATE DATABASE `{db}`; CREATE TABLE `{db}`.src (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; \
         INSERT INTO `{db}`.src VALUES (1, 1), (2, 2); \
         CREATE TABLE `{db}`.my (id BIGINT, v BIGINT) ENGINE=MyISAM; \
         CREATE TABLE `{db}`.aria (id BIGINT, v BIGINT) ENGINE=Aria"
    ));
    let dir = Dir::new();
    let url = url_for(&db);
    let env = [("FAUCET_SINK_URL", url.as_str())];
    let sink = |table: &str| {
        format!(
            "{{ type: mysql, config: {{ connection_url: \"${{env:FAUCET_SINK_URL}}\", \
             table: {table}, create_table: true }} }}"
        )
    };
    // A query source (non-deterministic) into an append target, with a memory state store.
    dir.write(
        "q.yaml",
        format!(
            "version: 1\nname: q\npipeline:\n  source: {{ type: mysql, config: {{ connection_url: \
             \"${{env:FAUCET_SINK_URL}}\", table: {db}.src }} }}\n  sink: {}\n  \
             state: {{ type: memory }}\n  delivery: effectively_once\n",
            sink("target")
        ),
    );
    for args in [["run", "q.yaml"], ["validate", "q.yaml"]] {
        let run = dir.faucet_env(&args, &env);
        run.expect_code(DELIVERY_UNMET);
        let said = format!("{}{}", run.stdout, run.stderr);
        assert!(
            said.contains("effectively-once delivery cannot be met"),
            "{said}"
        );
    }
    // Non-transactional engines: the sink refuses them when it opens.
    std::fs::write(dir.join("in.csv"), "id,v\n1,1\n2,2\n").expect("csv");
    for (table, engine) in [("my", "MyISAM"), ("aria", "Aria")] {
        dir.write(
            "e.yaml",
            format!(
                "version: 1\nname: e\npipeline:\n  source: {{ type: csv, config: {{ path: ./in.csv, \
                 columns: {{ id: int, v: int }} }} }}\n  sink: {}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  \
                 delivery: effectively_once\n",
                sink(table)
            ),
        );
        let run = dir.faucet_env(&["run", "e.yaml"], &env);
        run.expect_code(DELIVERY_UNMET)
            .stderr_has(&[&format!("{engine} engine"), "ENGINE=InnoDB"]);
        assert_eq!(
            mariadb(&format!("SELECT COUNT(*) FROM `{db}`.`{table}`")),
            [["0"]],
            "{engine}: rows were written"
        );
        assert!(
            !dir.join("state/e.json").exists(),
            "{engine}: state written"
        );
    }
    // A run refused for the MyISAM table, naming the fix, and nothing written.
    let refused_unwritten = |file: &str, what: &str| {
        let run = dir.faucet_env(&["run", file], &env);
        run.expect_code(USAGE)
            .stderr_has(&["MyISAM engine", "ENGINE=InnoDB", "half-written"]);
        assert!(!run.stderr.contains("effectively-once"), "{}", run.stderr);
        assert_eq!(
            mariadb(&format!("SELECT COUNT(*) FROM `{db}`.`my`")),
            [["0"]],
            "{what}: rows were written"
        );
    };
    // An at-least-once run (a query source: no atomic watermark is derived, so no commit
    // token is asked for): the refusal names the engine, not effectively-once, and comes
    // before the first row.
    dir.write(
        "a.yaml",
        format!(
            "version: 1\nname: a\npipeline:\n  source: {{ type: mysql, config: {{ connection_url: \
             \"${{env:FAUCET_SINK_URL}}\", table: {db}.src }} }}\n  sink: {}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             delivery: at_least_once\n",
            sink("my")
        ),
    );
    refused_unwritten("a.yaml", "at-least-once");
    // The same at-least-once request with a csv source (deterministic: the atomic watermark
    // is derived, so the run asks for the commit token): the same words, nothing written.
    // On the old code this said "effectively-once delivery cannot be met" (exit 3).
    dir.write(
        "c.yaml",
        format!(
            "version: 1\nname: c\npipeline:\n  source: {{ type: csv, config: {{ path: ./in.csv, \
             columns: {{ id: int, v: int }} }} }}\n  sink: {}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             delivery: at_least_once\n",
            sink("my")
        ),
    );
    refused_unwritten("c.yaml", "at-least-once from csv");
    assert_eq!(tables(&db), ["aria", "my", "src"], "nothing was created");
    mariadb(&format!("DROP DATABASE `{db}`"));
}
