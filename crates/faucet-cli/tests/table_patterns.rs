//! Table patterns in a change source's `tables` (issue 23), through the real binary:
//!
//! * `postgres-cdc` with `tables: ["<schema>.*"]`, `create_publication: true` (the
//!   publication is created `FOR TABLES IN SCHEMA`), continuous, into a `postgres` sink with
//!   `table: "<target schema>.{table}"`, `write_mode: upsert`, `create_table: true`: two
//!   tables at start, a third created while the run streams; inserts, updates and deletes in
//!   all three; the run stopped by SIGTERM; every target equals its source value by value.
//!   Once with `faucet run` (tables empty at start), once with `faucet replicate` (rows at
//!   start: copied by the snapshot; the third table's rows arrive through the stream).
//! * `mysql-cdc` (the MariaDB with a binlog) with `tables: ["<db>.*"]`, `faucet replicate`
//!   continuous into the same kind of `postgres` targets: the same.
//! * `faucet validate` refuses a bad pattern naming the entry, and a pattern upserted into
//!   one table; `faucet doctor` prints the tables a pattern matches.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::pg::{Names, cleanup, exec, faucet_with_pg_url};
use crate::support::{Dir, KillOnDrop, Run, pg_pool, runtime};

/// The variable the configs read the PostgreSQL URL from.
const PG_VAR: &str = "FAUCET_PATTERN_PG_URL";

/// The tables and the columns a comparison reads, the key first.
const TABLES: [(&str, &str); 3] = [("a", "id, v"), ("b", "code, n"), ("c", "id, w, n")];

/// A PostgreSQL sink upserting each source table into `<target>.{table}`.
fn pg_sink(target: &str) -> String {
    format!(
        "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
         table: \"{target}.{{table}}\", write_mode: upsert, create_table: true }} }}"
    )
}

/// The pipeline file of `source` into `sink`.
fn write_config(dir: &Dir, source: &str, sink: &str) {
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: patterns\npipeline:\n  source: {source}\n  sink: {sink}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: 40\n"
        ),
    );
}

/// `faucet <command>` of the pipeline in `dir`, running in the background.
fn spawn(dir: &Dir, command: &str, env: &[(&str, String)]) -> KillOnDrop {
    let mut c = faucet_with_pg_url(PG_VAR);
    for (k, v) in env {
        c.env(k, v);
    }
    KillOnDrop(Some(
        c.args([command, "--quiet"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn faucet"),
    ))
}

/// SIGTERMs the run and asserts it ended cleanly (exit 0: the page in hand delivered).
fn terminate(mut child: KillOnDrop) {
    let child: Child = child.take();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    Run::from_output(child.wait_with_output().expect("wait")).expect_code(0);
}

/// The rows of PostgreSQL table `table` (`None` while it does not exist), each its
/// `columns` as text joined by `|`, sorted.
fn pg_rows(table: &str, columns: &str) -> Option<Vec<String>> {
    let cols: Vec<String> = columns.split(", ").map(|c| format!("{c}::text")).collect();
    runtime().block_on(async {
        let pool = pg_pool().await;
        let mut rows: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT concat_ws('|', {}) FROM {table}",
            cols.join(", ")
        ))
        .fetch_all(&pool)
        .await
        .ok()?;
        rows.sort();
        Some(rows)
    })
}

/// Waits (up to 90 s) until the target `<target>.<t>` of each of `tables` holds the rows
/// `source(t)` gives, then asserts it, naming the first table that differs.
fn converge(target: &str, tables: &[(&str, &str)], source: &dyn Fn(&str, &str) -> Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let differs = tables.iter().find_map(|(t, columns)| {
            let want = source(t, columns);
            let have = pg_rows(&format!("{target}.{t}"), columns);
            (have.as_ref() != Some(&want)).then_some((t, want, have))
        });
        let Some((t, want, have)) = differs else {
            return;
        };
        if Instant::now() > deadline {
            let have = have.unwrap_or_default();
            let missing: Vec<&String> = want.iter().filter(|r| !have.contains(r)).take(5).collect();
            let extra: Vec<&String> = have.iter().filter(|r| !want.contains(r)).take(5).collect();
            panic!(
                "target {target}.{t}: {} rows, the source has {}; missing {missing:?}, extra \
                 {extra:?}",
                have.len(),
                want.len()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The workload's statements on tables `a` and `b` (`s`: the schema or database): inserts,
/// then updates and deletes of some.
fn changes_ab(s: &str, first: i64) -> Vec<String> {
    let inserts = (first..first + 30).flat_map(|i| {
        [
            format!("INSERT INTO {s}.a VALUES ({i}, 'a{i}')"),
            format!("INSERT INTO {s}.b VALUES ('k{i}', {i})"),
        ]
    });
    followed_by(
        s,
        inserts,
        &[
            "UPDATE {s}.a SET v = CONCAT(v, '+') WHERE id % 3 = 0",
            "DELETE FROM {s}.a WHERE id % 5 = 0",
            "UPDATE {s}.b SET n = n * 10 WHERE n % 4 = 0",
            "DELETE FROM {s}.b WHERE n % 7 = 0",
        ],
    )
}

/// Table `c`'s statements after its creation: inserts, updates, deletes, and a change of
/// `a` and `b` after them.
fn changes_c(s: &str) -> Vec<String> {
    let inserts = (1..=40).map(|i| format!("INSERT INTO {s}.c VALUES ({i}, 'c{i}', {})", i * 3));
    followed_by(
        s,
        inserts,
        &[
            "UPDATE {s}.c SET w = CONCAT(w, '!'), n = n + 1 WHERE id % 2 = 0",
            "DELETE FROM {s}.c WHERE id % 6 = 0",
            "UPDATE {s}.a SET v = 'after c' WHERE id = 1",
            "INSERT INTO {s}.b VALUES ('late', 99)",
        ],
    )
}

/// `first`, then `then` with `{s}` standing for the schema `s`.
fn followed_by(s: &str, first: impl Iterator<Item = String>, then: &[&str]) -> Vec<String> {
    first
        .chain(then.iter().map(|t| t.replace("{s}", s)))
        .collect()
}

/// Waits (up to 30 s) until `ready` holds.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether replication slot `slot` is held by a walsender (the run is streaming).
fn slot_active(slot: &str) -> bool {
    let active: Vec<(bool,)> = crate::support::pg::query(&format!(
        "SELECT {} FROM pg_replication_slots WHERE slot_name = '{slot}'",
        crate::support::pg::SLOT_STREAMING
    ));
    active.first().is_some_and(|(a,)| *a)
}

/// `postgres-cdc` of `<schema>.*` through `command` (`run` or `replicate`); `rows_at_start`:
/// rows in `a` and `b` before the pipeline starts (for `replicate`'s copy).
fn postgres_pattern(tag: &str, command: &str, rows_at_start: bool) {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let names = Names::new(tag);
    let s = names.schema.clone();
    let target = format!("{s}_t");
    rt.block_on(exec(
        &pool,
        &format!(
            "CREATE SCHEMA {s}; CREATE SCHEMA {target};
             CREATE TABLE {s}.a (id bigint PRIMARY KEY, v text NOT NULL);
             CREATE TABLE {s}.b (code text PRIMARY KEY, n integer NOT NULL);
             CREATE VIEW {s}.not_a_table AS SELECT 1 AS x;"
        ),
    ));
    if rows_at_start {
        rt.block_on(exec(&pool, &changes_ab(&s, 1000).join("; ")));
    }
    let dir = Dir::new();
    write_config(
        &dir,
        &format!(
            "{{ type: postgres-cdc, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
             slot_name: {}, publication: {}, tables: [\"{s}.*\"], create_publication: true, \
             continuous: true }} }}",
            names.slot, names.publication
        ),
        &pg_sink(&target),
    );
    crate::support::with_cleanup(
        || {
            // doctor names the tables the pattern matches now (the view is not one).
            let doctor = Run::from_output(
                faucet_with_pg_url(PG_VAR)
                    .args(["doctor", "faucet.yaml"])
                    .current_dir(dir.path())
                    .output()
                    .expect("doctor"),
            );
            let line = format!("{s}.* → {s}.a, {s}.b");
            assert!(
                doctor.stdout.contains(&line) || doctor.stderr.contains(&line),
                "doctor prints `{line}`:\n{}\n{}",
                doctor.stdout,
                doctor.stderr
            );
            let run = spawn(&dir, command, &[]);
            wait_for("the run streams", || slot_active(&names.slot));
            if rows_at_start {
                // The copy is done once the targets hold the rows of the start.
                converge(&target, &TABLES[..2], &|t, c| {
                    pg_rows(&format!("{s}.{t}"), c).expect("source")
                });
            }
            rt.block_on(exec(&pool, &changes_ab(&s, 1).join("; ")));
            // A table created while the run streams: the publication (FOR TABLES IN SCHEMA)
            // publishes it, the stream meets it, the sink learns its key and creates its target.
            rt.block_on(exec(
                &pool,
                &format!("CREATE TABLE {s}.c (id integer PRIMARY KEY, w text, n bigint)"),
            ));
            for statement in changes_c(&s) {
                rt.block_on(exec(&pool, &statement));
            }
            let source = |t: &str, c: &str| pg_rows(&format!("{s}.{t}"), c).expect("source table");
            converge(&target, &TABLES, &source);
            terminate(run);
            converge(&target, &TABLES, &source);
            let published: Vec<(String,)> = crate::support::pg::query(&format!(
                "SELECT n.nspname::text FROM pg_publication_namespace pn JOIN pg_namespace n \
                 ON n.oid = pn.pnnspid JOIN pg_publication p ON p.oid = pn.pnpubid \
                 WHERE p.pubname = '{}'",
                names.publication
            ));
            assert_eq!(published, [(s.clone(),)], "FOR TABLES IN SCHEMA {s}");
        },
        || {
            rt.block_on(cleanup(&pool, &names));
            rt.block_on(exec(
                &pool,
                &format!("DROP SCHEMA IF EXISTS {target} CASCADE"),
            ));
        },
    );
}

#[test]
fn postgres_cdc_run_of_a_schema_pattern_reads_a_table_created_while_it_streams() {
    postgres_pattern("patrun", "run", false);
}

#[test]
fn postgres_replicate_of_a_schema_pattern_copies_the_tables_then_streams_a_new_one() {
    postgres_pattern("patrep", "replicate", true);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_replicate_of_a_database_pattern_copies_the_tables_then_streams_a_new_one() {
    use crate::support::mariadb::{mariadb, mysql_url_for, unique_server_id};
    let db = crate::support::mysql::database("pat_my");
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let target = format!("{db}_t");
    mariadb(&format!(
        "CREATE DATABASE {db}; \
         CREATE TABLE {db}.a (id BIGINT PRIMARY KEY, v VARCHAR(40) NOT NULL); \
         CREATE TABLE {db}.b (code VARCHAR(40) PRIMARY KEY, n INT NOT NULL); \
         CREATE VIEW {db}.not_a_table AS SELECT 1 AS x; {}",
        changes_ab(&db, 1000).join("; ")
    ));
    rt.block_on(exec(&pool, &format!("CREATE SCHEMA {target}")));
    let dir = Dir::new();
    write_config(
        &dir,
        &format!(
            "{{ type: mysql-cdc, config: {{ connection_url: \"${{env:FAUCET_PATTERN_MY_URL}}\", \
             server_id: {}, tables: [\"{db}.*\"], continuous: true }} }}",
            unique_server_id()
        ),
        &pg_sink(&target),
    );
    crate::support::with_cleanup(
        || {
            let run = spawn(
                &dir,
                "replicate",
                &[("FAUCET_PATTERN_MY_URL", mysql_url_for(&db, None))],
            );
            converge(&target, &TABLES[..2], &|t, c| {
                crate::support::mariadb::joined_rows(&format!("{db}.{t}"), c)
            });
            mariadb(&changes_ab(&db, 1).join("; "));
            mariadb(&format!(
                "CREATE TABLE {db}.c (id INT PRIMARY KEY, w VARCHAR(40), n BIGINT); {}",
                changes_c(&db).join("; ")
            ));
            let source =
                |t: &str, c: &str| crate::support::mariadb::joined_rows(&format!("{db}.{t}"), c);
            converge(&target, &TABLES, &source);
            terminate(run);
            converge(&target, &TABLES, &source);
        },
        || {
            mariadb(&format!("DROP DATABASE IF EXISTS {db}"));
            rt.block_on(exec(
                &pool,
                &format!("DROP SCHEMA IF EXISTS {target} CASCADE"),
            ));
        },
    );
}

/// `faucet validate` of a `postgres-cdc` source of `tables` into a postgres sink with
/// `sink` settings; nothing is connected (the URLs point nowhere).
fn validate(tables: &str, sink: &str) -> Run {
    validate_into("db2", tables, sink)
}

/// [`validate`] with the sink on database `database` of the source's server.
fn validate_into(database: &str, tables: &str, sink: &str) -> Run {
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: v\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"postgres://u@127.0.0.1:1/db\", \
             slot_name: s1, publication: p1, tables: {tables} }} }}\n  \
             sink: {{ type: postgres, config: {{ connection_url: \"postgres://u@127.0.0.1:1/{database}\", {sink} }} }}\n"
        ),
    );
    dir.faucet(&["validate", "faucet.yaml"])
}

#[test]
fn validate_refuses_a_bad_pattern_naming_the_entry_and_a_pattern_upserted_into_one_table() {
    validate("[s.a, \"s.*x*\"]", "table: \"t.{table}\"")
        .expect_code(2)
        .stderr_has(&["tables[1]", "`s.*x*`", "more than one `*`"]);
    validate("[\"*.*\"]", "table: \"t.{table}\"")
        .expect_code(2)
        .stderr_has(&["tables[0]", "`*.*`", "list each schema"]);
    validate("[\"s.*\"]", "table: t.all, write_mode: upsert, key: [id]")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.table", "s.*", "{table}"]);
    validate("[\"s.*\"]", "tables: {s.a: t.a}")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.tables", "s.*"]);
    validate(
        "[\"s.*\", \"s.order_*\"]",
        "table: \"t.{table}\", write_mode: upsert",
    )
    .expect_code(0);
    // Targets the source's own pattern matches: every row written would come back.
    validate_into("db", "[\"s.*\"]", "table: \"s.copy_{table}\"")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.table", "`s.*`", "without end"]);
}
