//! An upsert sink behind a change-data source whose table's key it does not know: a source
//! table without a key (mysql-cdc → mysql, postgres-cdc → postgres, `write_mode: upsert`,
//! `key: [a]`) is refused by `run` before anything is written and failed by `doctor`'s
//! `keys` line; a sink `key:` that is not the source table's key is a warning naming both
//! (the run proceeds), in `run` and in `doctor`. The rule is `faucet_core::keys`.

use crate::support::mariadb::{doctor_check, mariadb as binlog, mysql_url_for, unique_server_id};
use crate::support::mysql::{database, mariadb as sink_sql, url_for as sink_url};
use crate::support::pg::{drop_cdc_objects, query, sql as pg_sql, unique_suffix};
use crate::support::{Dir, Run, pg_url};

/// Exit code of an unmet delivery request (`faucet --help`, "Exit codes").
const DELIVERY_UNMET: i32 = 3;

/// `faucet doctor --json`'s `keys` check.
fn keys_check(dir: &Dir, env: &[(&str, &str)]) -> serde_json::Value {
    let doctor = dir.faucet_env(&["doctor", "--json"], env);
    doctor_check(&doctor.json(), "keys")
}

/// Asserts doctor's `keys` line passes with a warning holding every one of `warning`.
#[track_caller]
fn doctor_warns(dir: &Dir, env: &[(&str, &str)], warning: &[&str]) {
    let keys = keys_check(dir, env);
    assert_eq!(keys["ok"], true, "{keys}");
    let said = keys["target"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("warning:") && warning.iter().all(|w| said.contains(w)),
        "{keys}"
    );
}

/// Asserts doctor's `keys` line fails naming `table`.
#[track_caller]
fn doctor_refuses(dir: &Dir, env: &[(&str, &str)], table: &str) {
    let keys = keys_check(dir, env);
    assert_eq!(keys["ok"], false, "{keys}");
    assert!(
        keys["error"].as_str().is_some_and(|e| e.contains(table)),
        "{keys}"
    );
}

#[track_caller]
fn refused(run: &Run, table: &str) {
    run.expect_code(DELIVERY_UNMET).stderr_has(&[
        table,
        "has no primary key",
        "give the source table a primary key, or use `write_mode: append`",
    ]);
}

/// A mysql-cdc → mysql upsert by `a` pipeline in a new directory: source `db.t` on the
/// binlog server, target `db.target` (created by `target_ddl`) on the sink server.
fn mysql_pipeline(db: &str, source_ddl: &str, target_ddl: &str) -> Dir {
    binlog(&format!(
        "DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; CREATE TABLE {db}.t {source_ddl}"
    ));
    sink_sql(&format!(
        "DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; CREATE TABLE {db}.target {target_ddl}"
    ));
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: kl\npipeline:\n  source: {{ type: mysql-cdc, config: {{ \
             connection_url: \"{}\", server_id: {}, tables: [{db}.t] }} }}\n  \
             sink: {{ type: mysql, config: {{ connection_url: \"{}\", table: {db}.target, \
             write_mode: upsert, key: [a] }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n",
            mysql_url_for(db, None),
            unique_server_id(),
            sink_url(db)
        ),
    );
    dir
}

#[test]
fn mysql_cdc_of_a_keyless_table_into_an_upsert_is_refused_and_writes_nothing() {
    let db = database("cli_kl_none");
    let dir = mysql_pipeline(
        &db,
        "(a INT, v VARCHAR(10))",
        "(a INT PRIMARY KEY, v VARCHAR(10))",
    );
    let table = format!("{db}.t");
    refused(&dir.faucet(&["run"]), &table);
    binlog(&format!(
        "INSERT INTO {db}.t VALUES (1, 'w'), (1, 'x'), (2, 'z')"
    ));
    refused(&dir.faucet(&["run"]), &table);
    let rows = sink_sql(&format!("SELECT COUNT(*) FROM {db}.target"));
    assert_eq!(rows, [["0"]], "nothing written");
    doctor_refuses(&dir, &[], &table);
    binlog(&format!("DROP DATABASE {db}"));
    sink_sql(&format!("DROP DATABASE {db}"));
}

#[test]
fn mysql_cdc_into_an_upsert_by_another_key_warns_naming_both_and_runs() {
    let db = database("cli_kl_other");
    let dir = mysql_pipeline(
        &db,
        "(id INT PRIMARY KEY, a INT, v VARCHAR(10))",
        "(id INT, a INT PRIMARY KEY, v VARCHAR(10))",
    );
    let warning = ["upserts by key [a]", "primary key [id]"];
    dir.faucet(&["run"]).expect_code(0).stderr_has(&warning);
    binlog(&format!(
        "INSERT INTO {db}.t VALUES (1, 1, 'w'), (2, 1, 'x'), (3, 2, 'z')"
    ));
    dir.faucet(&["run"]).expect_code(0).stderr_has(&warning);
    let rows = sink_sql(&format!("SELECT a, v FROM {db}.target ORDER BY a"));
    assert_eq!(
        rows,
        [["1", "x"], ["2", "z"]],
        "the run proceeds, as warned"
    );
    doctor_warns(&dir, &[], &warning);
    binlog(&format!("DROP DATABASE {db}"));
    sink_sql(&format!("DROP DATABASE {db}"));
}

/// A postgres-cdc → postgres upsert by `a` pipeline in a new directory, source
/// `schema.t`, target `schema.target`; returns it with the names to drop.
fn pg_pipeline(tag: &str, source_ddl: &str, target_ddl: &str) -> (Dir, String) {
    let s = format!("kl_{tag}_{}", unique_suffix());
    drop_cdc_objects(&s, &s, &s);
    let source_ddl = source_ddl.replace("{S}", &s);
    pg_sql(&format!(
        "CREATE SCHEMA {s}; CREATE TABLE {s}.t {source_ddl}; CREATE TABLE {s}.target {target_ddl}; \
         CREATE PUBLICATION {s} FOR TABLE {s}.t"
    ));
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: kl\npipeline:\n  source: {{ type: postgres-cdc, config: {{ \
             connection_url: \"${{env:KL_PG_URL}}\", slot_name: {s}, publication: {s}, \
             tables: [{s}.t] }} }}\n  \
             sink: {{ type: postgres, config: {{ connection_url: \"${{env:KL_PG_URL}}\", \
             table: {s}.target, write_mode: upsert, key: [a] }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n"
        ),
    );
    (dir, s)
}

#[test]
fn postgres_cdc_of_a_keyless_table_into_an_upsert_is_refused_and_writes_nothing() {
    let (dir, s) = pg_pipeline(
        "none",
        "(a int, v text); ALTER TABLE {S}.t REPLICA IDENTITY FULL",
        "(a int PRIMARY KEY, v text)",
    );
    let url = pg_url();
    let env = [("KL_PG_URL", url.as_str())];
    let table = format!("{s}.t");
    refused(&dir.faucet_env(&["run"], &env), &table);
    pg_sql(&format!(
        "INSERT INTO {s}.t VALUES (1, 'w'), (1, 'x'), (2, 'z')"
    ));
    refused(&dir.faucet_env(&["run"], &env), &table);
    let rows: Vec<(i64,)> = query(&format!("SELECT count(*) FROM {s}.target"));
    assert_eq!(rows, [(0,)], "nothing written");
    doctor_refuses(&dir, &env, &table);
    drop_cdc_objects(&s, &s, &s);
}

#[test]
fn postgres_cdc_into_an_upsert_by_another_key_warns_naming_both_and_runs() {
    let (dir, s) = pg_pipeline(
        "other",
        "(id int PRIMARY KEY, a int, v text)",
        "(id int, a int PRIMARY KEY, v text)",
    );
    let url = pg_url();
    let env = [("KL_PG_URL", url.as_str())];
    let warning = ["upserts by key [a]", "primary key [id]"];
    dir.faucet_env(&["run"], &env)
        .expect_code(0)
        .stderr_has(&warning);
    pg_sql(&format!(
        "INSERT INTO {s}.t VALUES (1, 1, 'w'), (2, 1, 'x'), (3, 2, 'z')"
    ));
    dir.faucet_env(&["run"], &env)
        .expect_code(0)
        .stderr_has(&warning);
    let rows: Vec<(i32, String)> = query(&format!("SELECT a, v FROM {s}.target ORDER BY a"));
    assert_eq!(
        rows,
        [(1, "x".to_owned()), (2, "z".to_owned())],
        "the run proceeds, as warned"
    );
    doctor_warns(&dir, &env, &warning);
    drop_cdc_objects(&s, &s, &s);
}
