//! What a hostile tester found in the SQL sinks, through the binary (issue 22, items 5–7):
//! * concurrent first pages into one fresh schema (database) each create the commit token
//!   table: every run succeeds (PostgreSQL failed some with `pg_type_typname_nsp_index`);
//! * a PostgreSQL float8 `-0` into a MariaDB DOUBLE, which would store `0`, is refused
//!   naming column and row, like every other value a DOUBLE would store differently;
//! * an error raised by a trigger on the target (its insert into another table fails) names
//!   what the server names — its table, column and constraint — not the target's column of
//!   the same name.
//!
//! PostgreSQL from `FAUCET_TEST_PG_URL`, the mysql sink's server from
//! `FAUCET_TEST_MYSQL_SINK_URL` (port 3306); `scripts/services.sh` starts both.

use faucet_connectors::sql::ident::quote_ident;

use crate::support::mysql::{database, mariadb, url_for};
use crate::support::pg::{query, sql, unique_suffix};
use crate::support::{Dir, Run, faucet_command, pg_url};

/// How many runs start their first page at once.
const RUNS: usize = 8;

/// A fresh PostgreSQL schema for one test, dropped at the end (also on failure).
struct Schema(String);

impl Schema {
    fn new(prefix: &str) -> Self {
        let name = format!("{prefix}_{}", unique_suffix());
        sql(&format!("CREATE SCHEMA {}", quote_ident(&name)));
        Self(name)
    }
}

impl Schema {
    /// How many rows `table` of the schema holds.
    fn count(&self, table: &str) -> i64 {
        let n: Vec<(i64,)> = query(&format!(
            "SELECT count(*) FROM {}.{}",
            quote_ident(&self.0),
            quote_ident(table)
        ));
        n[0].0
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        sql(&format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            quote_ident(&self.0)
        ));
    }
}

/// A fresh MariaDB database for one test, dropped at the end (also on failure).
struct Database(String);

impl Database {
    fn new(prefix: &str) -> Self {
        let name = database(prefix);
        mariadb(&format!("CREATE DATABASE `{name}`"));
        Self(name)
    }
}

impl Database {
    /// How many rows `table` of the database holds.
    fn count(&self, table: &str) -> String {
        mariadb(&format!("SELECT COUNT(*) FROM `{}`.`{table}`", self.0))[0][0].clone()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        mariadb(&format!("DROP DATABASE IF EXISTS `{}`", self.0));
    }
}

/// A pipeline file: a csv `in.csv` of `columns` into `sink`, with the atomic watermark
/// (the csv source is deterministic, so `effectively_once` asks for the commit token).
fn csv_pipeline(name: &str, columns: &str, sink: &str) -> String {
    format!(
        "version: 1\nname: {name}\npipeline:\n  source: {{ type: csv, config: {{ path: ./in.csv, \
         null_values: ['NULL'], columns: {{ {columns} }} }} }}\n  sink: {sink}\n  \
         state: {{ type: file, config: {{ path: ./state }} }}\n  delivery: effectively_once\n"
    )
}

/// Starts `faucet run` in each of `dirs` at once (with `env`) and waits for all.
fn run_all_at_once(dirs: &[Dir], env: &[(&str, &str)]) -> Vec<Run> {
    let children: Vec<_> = dirs
        .iter()
        .map(|d| {
            let mut c = faucet_command();
            c.current_dir(d.path())
                .args(["run", "p.yaml"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().expect("spawn faucet")
        })
        .collect();
    children
        .into_iter()
        .map(|c| Run::from_output(c.wait_with_output().expect("wait for faucet")))
        .collect()
}

/// `RUNS` directories, each with a 3-row csv and a pipeline into `sink(i)`.
fn concurrent_dirs(sink: impl Fn(usize) -> String) -> Vec<Dir> {
    (0..RUNS)
        .map(|i| {
            let d = Dir::new();
            d.write("in.csv", "id,v\n1,1\n2,2\n3,3\n");
            d.write(
                "p.yaml",
                csv_pipeline(&format!("race{i}"), "id: int, v: int", &sink(i)),
            );
            d
        })
        .collect()
}

#[test]
fn concurrent_first_pages_into_a_fresh_postgres_schema_all_succeed() {
    let schema = Schema::new("hostile_race");
    let dirs = concurrent_dirs(|i| {
        format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_RACE_PG_URL}}\", \
             table: {}.t{i}, create_table: true }} }}",
            schema.0
        )
    });
    for (i, run) in run_all_at_once(&dirs, &[("FAUCET_RACE_PG_URL", &pg_url())])
        .iter()
        .enumerate()
    {
        run.expect_code(0);
        assert_eq!(schema.count(&format!("t{i}")), 3, "run {i}");
    }
}

#[test]
fn concurrent_first_pages_into_a_fresh_mysql_database_all_succeed() {
    let db = Database::new("hostile_race");
    let url = url_for(&db.0);
    let dirs = concurrent_dirs(|i| {
        format!(
            "{{ type: mysql, config: {{ connection_url: \"${{env:FAUCET_RACE_MYSQL_URL}}\", \
             table: t{i}, create_table: true }} }}"
        )
    });
    for (i, run) in run_all_at_once(&dirs, &[("FAUCET_RACE_MYSQL_URL", &url)])
        .iter()
        .enumerate()
    {
        run.expect_code(0);
        assert_eq!(db.count(&format!("t{i}")), "3", "run {i}");
    }
}

#[test]
fn a_postgres_negative_zero_into_a_mariadb_double_is_refused_naming_column_and_row() {
    let schema = Schema::new("hostile_negzero");
    let db = Database::new("hostile_negzero");
    sql(&format!(
        "CREATE TABLE {0}.src (id int PRIMARY KEY, d float8); \
         INSERT INTO {0}.src VALUES (1, 1.5), (2, '-0'), (3, 2.5)",
        quote_ident(&schema.0)
    ));
    mariadb(&format!(
        "CREATE TABLE `{}`.t (id BIGINT PRIMARY KEY, d DOUBLE) ENGINE=InnoDB",
        db.0
    ));
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        format!(
            "version: 1\nname: negzero\npipeline:\n  source: {{ type: postgres, config: {{ \
             connection_url: \"${{env:FAUCET_NZ_PG_URL}}\", table: {}.src }} }}\n  sink: {{ \
             type: mysql, config: {{ connection_url: \"${{env:FAUCET_NZ_MYSQL_URL}}\", table: t, \
             write_mode: upsert, key: [id] }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n",
            schema.0
        ),
    );
    let run = dir.faucet_env(
        &["run", "p.yaml"],
        &[
            ("FAUCET_NZ_PG_URL", &pg_url()),
            ("FAUCET_NZ_MYSQL_URL", &url_for(&db.0)),
        ],
    );
    assert_ne!(run.code, 0, "-0 was written: {}", run.stderr);
    run.stderr_has(&["column d", "page row 2", "-0"]);
    assert_eq!(
        db.count("t"),
        "0",
        "a page with a refused value committed rows"
    );
}

#[test]
fn a_postgres_trigger_error_names_the_table_the_server_names() {
    let schema = Schema::new("hostile_trigger");
    let s = quote_ident(&schema.0);
    sql(&format!(
        "CREATE TABLE {s}.t (id bigint PRIMARY KEY, v bigint); \
         CREATE TABLE {s}.audit (id bigserial PRIMARY KEY, v bigint NOT NULL); \
         CREATE FUNCTION {s}.log_v() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           INSERT INTO {s}.audit (v) VALUES (NEW.v); RETURN NEW; END $$; \
         CREATE TRIGGER log_v AFTER INSERT ON {s}.t FOR EACH ROW EXECUTE FUNCTION {s}.log_v()"
    ));
    let audit = format!("{}.audit, column v", schema.0);
    trigger_failures_are_named(
        |mode| {
            format!(
                "{{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_TRG_URL}}\", \
                 table: {}.t, write_mode: {mode} }} }}",
                schema.0
            )
        },
        &pg_url(),
        &[&audit, "written by"],
        &format!("{}.t, column v", schema.0),
        || schema.count("t").to_string(),
    );
}

#[test]
fn a_mysql_trigger_error_names_what_the_server_names() {
    let db = Database::new("hostile_trigger");
    mariadb(&format!(
        "CREATE TABLE `{0}`.t (id BIGINT PRIMARY KEY, v BIGINT) ENGINE=InnoDB; \
         CREATE TABLE `{0}`.audit (id BIGINT AUTO_INCREMENT PRIMARY KEY, v BIGINT NOT NULL) \
         ENGINE=InnoDB; \
         CREATE TRIGGER `{0}`.log_v AFTER INSERT ON `{0}`.t FOR EACH ROW \
         INSERT INTO `{0}`.audit (v) VALUES (NEW.v)",
        db.0
    ));
    trigger_failures_are_named(
        |mode| {
            format!(
                "{{ type: mysql, config: {{ connection_url: \"${{env:FAUCET_TRG_URL}}\", \
                 table: t, write_mode: {mode} }} }}"
            )
        },
        &url_for(&db.0),
        &["cannot be null", "trigger", "log_v"],
        "t, column v",
        || db.count("t").to_string(),
    );
}

/// Rows 1 to 4 of a csv, row 3's `v` NULL, into the sink `sink(mode)` (its URL `url` as
/// `FAUCET_TRG_URL`) for append and upsert by `id`, where an insert trigger copies `v` into
/// a NOT NULL column of another table: each run fails with `needles` in its error, never
/// blaming the target's column (`blamed`), and commits no row (`rows()` is `0`).
fn trigger_failures_are_named(
    sink: impl Fn(&str) -> String,
    url: &str,
    needles: &[&str],
    blamed: &str,
    rows: impl Fn() -> String,
) {
    let dir = Dir::new();
    dir.write("in.csv", "id,v\n1,1\n2,2\n3,NULL\n4,4\n");
    for mode in ["append", "upsert, key: [id]"] {
        dir.write(
            "p.yaml",
            csv_pipeline("trigger", "id: int, v: int", &sink(mode)),
        );
        let run = dir.faucet_env(&["run", "p.yaml"], &[("FAUCET_TRG_URL", url)]);
        assert_ne!(run.code, 0, "{mode}: the run succeeded: {}", run.stderr);
        run.stderr_has(needles);
        assert!(
            !run.stderr.contains(blamed),
            "{mode}: blames the target's column: {}",
            run.stderr
        );
        assert_eq!(rows(), "0", "{mode}: rows committed");
    }
}
