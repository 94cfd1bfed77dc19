//! Across databases through the binary, under a concurrent workload, each ending with the
//! target equal to the source value by value (each side read with its own SELECT):
//! * `postgres-cdc` → `mysql` upsert (`create_table`): numeric(30,10), timestamptz, jsonb,
//!   bytea, boolean, int[], a TOASTed text left unchanged by updates, deletes and key changes;
//! * `mysql-cdc` → `mysql` with the atomic watermark (`delivery: effectively_once`), and the
//!   same changes → `postgres` upsert: DECIMAL, DATETIME(6), TIME(6), JSON, VARBINARY,
//!   BIGINT UNSIGNED.
//!
//! PostgreSQL from `FAUCET_TEST_PG_URL`; the binlog MariaDB from `FAUCET_TEST_MYSQL_URL`
//! (port 3307); the mysql sink's server from `FAUCET_TEST_MYSQL_SINK_URL` (port 3306).
//! `FAUCET_SOAK=1` runs a longer workload.

use std::path::Path;
use std::process::Output;

use crate::support::mariadb::unique_server_id;
use crate::support::mysql::{mariadb, mariadb_at, url_for};
use crate::support::pg::{Names, cleanup, query, sql, text_rows};
use crate::support::{faucet_unarmed, pg_url, runtime, with_cleanup, write_pipeline};

fn rounds() -> usize {
    crate::support::soak_or(60, 12)
}

/// `faucet run` in `dir` with `env`; panics with its stderr unless it succeeded.
fn run(dir: &Path, env: &[(&str, String)]) -> Output {
    let mut c = faucet_unarmed();
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .arg("run")
        .current_dir(dir)
        .output()
        .expect("spawn faucet");
    assert!(
        out.status.success(),
        "faucet run in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `faucet` in each `(dir, env)` again and again while `workload` runs on another
/// thread, then once more after it ended, so the targets catch up.
fn under_workload(pipelines: &[(&Path, Vec<(&str, String)>)], workload: impl FnOnce() + Send) {
    std::thread::scope(|scope| {
        let writer = scope.spawn(workload);
        while !writer.is_finished() {
            for (dir, env) in pipelines {
                run(dir, env);
            }
        }
        writer.join().expect("workload");
    });
    for (dir, env) in pipelines {
        run(dir, env);
    }
}

/// A `sink_type` (`mysql`, `postgres`) upsert sink by `id` into `table`, created on
/// request, on the server in the environment variable `url_env`.
fn upsert_sink(sink_type: &str, url_env: &str, table: &str) -> String {
    format!(
        "{{ type: {sink_type}, config: {{ connection_url: \"${{env:{url_env}}}\", \
         table: {table}, create_table: true, write_mode: upsert, key: [id] }} }}"
    )
}

fn null(v: &str) -> Option<String> {
    (v != "NULL").then(|| v.to_owned())
}

#[test]
fn postgres_cdc_into_mysql_upsert_equals_the_source() {
    let names = Names::new("xdb");
    let s = &names.schema;
    let db = crate::support::mysql::database("cli_xdb_pg");
    sql(&format!(
        "CREATE SCHEMA {s}; CREATE TABLE {s}.items (id int PRIMARY KEY, amount numeric(30,10), \
         note text, at timestamptz, doc jsonb, raw bytea, flag boolean, tags int[])"
    ));
    mariadb(&format!("CREATE DATABASE `{db}` CHARACTER SET utf8mb4"));
    let dir = tempfile::tempdir().expect("tempdir");
    write_pipeline(
        dir.path(),
        "xdb_pg",
        &names.cdc_source("XDB_PG_URL", &format!("{s}.items")),
        &upsert_sink("mysql", "XDB_MYSQL_URL", "items"),
        "  delivery: effectively_once\n  batch_size: 50\n",
    );
    let env = vec![("XDB_PG_URL", pg_url()), ("XDB_MYSQL_URL", url_for(&db))];
    run(dir.path(), &env);
    with_cleanup(
        || {
            under_workload(&[(dir.path(), env.clone())], || {
                for r in 0..rounds() as i64 {
                    let base = r * 20;
                    sql(&format!(
                    "INSERT INTO {s}.items SELECT g, (g * 1.5 + 0.0000000001)::numeric(30,10), \
                       (SELECT string_agg(md5(g::text || k::text), '') FROM generate_series(1, 100) k), \
                       '2026-01-01T00:00:00.123456Z'::timestamptz + g * interval '1 minute 0.000001 s', \
                       jsonb_build_object('g', g, 'list', jsonb_build_array(g, 'x', null)), \
                       decode(md5(g::text), 'hex'), g % 2 = 0, ARRAY[g, -g] \
                     FROM generate_series({base}, {base} + 19) g;
                     UPDATE {s}.items SET amount = amount + 1 WHERE id % 3 = 0 AND id >= {base};
                     UPDATE {s}.items SET note = 'short ' || id, flag = NULL WHERE id = {base} + 5;
                     DELETE FROM {s}.items WHERE id = {base} + 7;
                     UPDATE {s}.items SET note = 'short' WHERE id = {base} + 9;
                     UPDATE {s}.items SET id = id + 100000 WHERE id = {base} + 9;
                     BEGIN; UPDATE {s}.items SET tags = NULL WHERE id = {base} + 1; \
                       DELETE FROM {s}.items WHERE id = {base} + 2; \
                       INSERT INTO {s}.items (id, amount) VALUES ({base} + 2, -0.5); COMMIT;"
                ));
                }
            });
            let want = text_rows(&format!(
                "SELECT id::text, amount::text, md5(note), \
             to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), doc::text, \
             encode(raw, 'hex'), flag::int::text, array_to_json(tags)::text \
             FROM {s}.items ORDER BY items.id"
            ));
            let got = mariadb(&format!(
                "SELECT id, amount, MD5(note), DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f'), doc, \
             LOWER(HEX(raw)), flag, tags FROM `{db}`.items ORDER BY id"
            ));
            assert!(want.len() > 100, "the workload ran: {} rows", want.len());
            assert_eq!(
                got.len(),
                want.len(),
                "rows: mysql {} vs postgres {}",
                got.len(),
                want.len()
            );
            for (g, w) in got.iter().zip(&want) {
                let g: Vec<Option<String>> = g.iter().map(|v| null(v)).collect();
                // jsonb and the JSON array compare as JSON values (each server spaces its own way).
                let json = |v: &Option<String>| {
                    v.as_deref()
                        .map(|t| serde_json::from_str::<serde_json::Value>(t).expect("json"))
                };
                assert_eq!(g[..4], w[..4], "row {:?}", w[0]);
                assert_eq!(json(&g[4]), json(&w[4]), "doc of row {:?}", w[0]);
                assert_eq!(g[5..7], w[5..7], "row {:?}", w[0]);
                assert_eq!(json(&g[7]), json(&w[7]), "tags of row {:?}", w[0]);
            }
            let types = mariadb(&format!(
                "SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{db}' \
             AND TABLE_NAME = 'items' ORDER BY ORDINAL_POSITION"
            ));
            assert_eq!(
                types.concat(),
                [
                    "bigint(20)",
                    "decimal(65,10)",
                    "longtext",
                    "datetime(6)",
                    "longtext",
                    "longblob",
                    "tinyint(1)",
                    "longtext"
                ]
            );
        },
        || {
            runtime().block_on(async { cleanup(&crate::support::pg_pool().await, &names).await });
            mariadb(&format!("DROP DATABASE IF EXISTS `{db}`"));
        },
    );
}

/// The binlog server's URL with database `db`.
fn binlog_url_for(db: &str) -> String {
    let url = faucet_test_support::mysql_url();
    let base = url.rsplit_once('/').map_or(url.as_str(), |(b, _)| b);
    format!("{base}/{db}")
}

#[test]
fn mysql_cdc_into_mysql_atomic_and_into_postgres_upsert_equal_the_source() {
    let db = crate::support::mysql::database("cli_xdb_my");
    let src = binlog_url_for(&db);
    let s = format!("xdb_my_{}", faucet_test_support::unique_suffix());
    mariadb_at(
        &src,
        &format!(
            "CREATE DATABASE `{db}` CHARACTER SET utf8mb4; CREATE TABLE `{db}`.src (id INT PRIMARY KEY, \
             amount DECIMAL(20,6), name VARCHAR(50), at DATETIME(6), d TIME(6), doc JSON, \
             raw VARBINARY(20), big BIGINT UNSIGNED) ENGINE=InnoDB"
        ),
    );
    mariadb(&format!("CREATE DATABASE `{db}` CHARACTER SET utf8mb4"));
    sql(&format!("CREATE SCHEMA {s}"));
    let mysql_dir = tempfile::tempdir().expect("tempdir");
    let pg_dir = tempfile::tempdir().expect("tempdir");
    let source = |id: u32| {
        format!(
            "{{ type: mysql-cdc, config: {{ connection_url: \"${{env:XDB_SRC_URL}}\", \
             server_id: {id}, tables: [{db}.src] }} }}"
        )
    };
    let tail = "  delivery: effectively_once\n  batch_size: 40\n";
    write_pipeline(
        mysql_dir.path(),
        "xdb_my",
        &source(unique_server_id()),
        &upsert_sink("mysql", "XDB_SINK_URL", "copy"),
        tail,
    );
    write_pipeline(
        pg_dir.path(),
        "xdb_my_pg",
        &source(unique_server_id()),
        &upsert_sink("postgres", "XDB_PG_URL", &format!("{s}.copy")),
        tail,
    );
    let my_env = vec![("XDB_SRC_URL", src.clone()), ("XDB_SINK_URL", url_for(&db))];
    let pg_env = vec![("XDB_SRC_URL", src.clone()), ("XDB_PG_URL", pg_url())];
    // The first runs start at the end of the log.
    run(mysql_dir.path(), &my_env);
    run(pg_dir.path(), &pg_env);
    with_cleanup(
        || {
            let pipelines = [
                (mysql_dir.path(), my_env.clone()),
                (pg_dir.path(), pg_env.clone()),
            ];
            under_workload(&pipelines, || {
                for r in 0..rounds() as i64 {
                    let base = r * 20;
                    mariadb_at(
                    &src,
                    &format!(
                        "INSERT INTO `{db}`.src SELECT seq, seq * 1.25 + 0.000001, CONCAT('név ', seq), \
                           TIMESTAMP '2026-01-01 00:00:00.123456' + INTERVAL seq MINUTE, \
                           SEC_TO_TIME(CAST(seq AS SIGNED) * 3600 - 400000), JSON_OBJECT('g', seq, 'l', JSON_ARRAY(seq, 'x')), \
                           UNHEX(MD5(seq)), 18446744073709551615 - seq \
                         FROM `{db}`.seq_{base}_to_{} ;
                         UPDATE `{db}`.src SET amount = amount + 1 WHERE id % 3 = 0 AND id >= {base};
                         UPDATE `{db}`.src SET name = NULL, d = NULL WHERE id = {base} + 5;
                         DELETE FROM `{db}`.src WHERE id = {base} + 7;
                         UPDATE `{db}`.src SET id = id + 100000 WHERE id = {base} + 9;
                         START TRANSACTION; DELETE FROM `{db}`.src WHERE id = {base} + 2; \
                           INSERT INTO `{db}`.src (id, amount) VALUES ({base} + 2, -0.5); COMMIT;",
                        base + 19
                    ),
                );
                }
            });
            let select = "SELECT id, amount, name, DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f'), \
                      CAST(TIME_TO_SEC(d) AS SIGNED), doc, LOWER(HEX(raw)), big FROM";
            let want = mariadb_at(&src, &format!("{select} `{db}`.src ORDER BY id"));
            let got = mariadb(&format!("{select} `{db}`.copy ORDER BY id"));
            assert!(want.len() > 100, "the workload ran: {} rows", want.len());
            assert_eq!(got.len(), want.len(), "mysql-cdc → mysql rows");
            for (g, w) in got.iter().zip(&want) {
                let json = |v: &str| serde_json::from_str::<serde_json::Value>(v).ok();
                // JSON compares as JSON: faucet carries MySQL JSON compact (docs/values.md), while
                // MariaDB's JSON_OBJECT() stored it with spaces.
                assert_eq!((&g[..5], &g[6..]), (&w[..5], &w[6..]), "mysql-cdc → mysql");
                assert_eq!(
                    json(&g[5]),
                    json(&w[5]),
                    "doc, mysql-cdc → mysql, row {}",
                    w[0]
                );
            }
            let pg = text_rows(&format!(
                "SELECT id::text, amount::text, name, to_char(at, 'YYYY-MM-DD HH24:MI:SS.US'), \
             extract(epoch from d)::bigint::text, doc::text, encode(raw, 'hex'), big::text \
             FROM {s}.copy ORDER BY copy.id"
            ));
            assert_eq!(pg.len(), want.len(), "mysql-cdc → postgres rows");
            for (p, w) in pg.iter().zip(&want) {
                let w: Vec<Option<String>> = w.iter().map(|v| null(v)).collect();
                let json = |v: &Option<String>| {
                    v.as_deref()
                        .map(|t| serde_json::from_str::<serde_json::Value>(t).expect("json"))
                };
                // The doc compares as JSON, the rest as text.
                assert_eq!(
                    (&p[..5], &p[6..]),
                    (&w[..5], &w[6..]),
                    "mysql-cdc → postgres"
                );
                assert_eq!(json(&p[5]), json(&w[5]), "doc, mysql-cdc → postgres");
            }
        },
        || {
            mariadb_at(&src, &format!("DROP DATABASE IF EXISTS `{db}`"));
            mariadb(&format!("DROP DATABASE IF EXISTS `{db}`"));
            sql(&format!("DROP SCHEMA IF EXISTS {s} CASCADE"));
        },
    );
}

/// Issue 13: a key-changing update from `postgres-cdc` under the default replica identity
/// leaves the unchanged TOASTed column out of its `after` (its value is only in the target's
/// row of the old key); the postgres and the mysql upsert sink move the stored row to the new
/// key, so each ends equal to the source value by value: the key changed alone, the key and
/// the TOASTed column changed together, and two key changes in a row in one page.
#[test]
fn postgres_cdc_key_changes_keep_unchanged_toast_values_in_postgres_and_mysql() {
    let names = Names::new("xdb_toast");
    let second = Names::new("xdb_toast2");
    let s = &names.schema;
    let db = crate::support::mysql::database("cli_xdb_toast");
    // A random body well over 2 kB (not compressible below the TOAST threshold), one per row
    // (`seed` makes the subquery correlated, so it runs per row).
    let body = |seed: &str| {
        format!(
            "(SELECT string_agg(md5(random()::text || k || {seed}), '') \
             FROM generate_series(1, 250) k)"
        )
    };
    sql(&format!(
        "CREATE SCHEMA {s}; CREATE TABLE {s}.docs (id int PRIMARY KEY, body text, ver int)"
    ));
    mariadb(&format!("CREATE DATABASE `{db}` CHARACTER SET utf8mb4"));
    let pg_dir = tempfile::tempdir().expect("tempdir");
    let my_dir = tempfile::tempdir().expect("tempdir");
    let tables = format!("{s}.docs");
    write_pipeline(
        pg_dir.path(),
        "xdb_toast_pg",
        &names.cdc_source("XDB_PG_URL", &tables),
        &upsert_sink("postgres", "XDB_PG_URL", &format!("{s}.docs_copy")),
        "  batch_size: 50\n",
    );
    write_pipeline(
        my_dir.path(),
        "xdb_toast_my",
        &second.cdc_source("XDB_PG_URL", &tables),
        &upsert_sink("mysql", "XDB_MYSQL_URL", "docs"),
        "  delivery: effectively_once\n  batch_size: 50\n",
    );
    let env = vec![("XDB_PG_URL", pg_url()), ("XDB_MYSQL_URL", url_for(&db))];
    let run_both = || {
        run(pg_dir.path(), &env);
        run(my_dir.path(), &env);
    };
    with_cleanup(
        || {
            run_both();
            let check = |what: &str| {
                run_both();
                let want: Vec<(String, Option<String>, Option<String>)> = query(&format!(
                    "SELECT id::text, md5(body), ver::text FROM {s}.docs AS d ORDER BY d.id"
                ));
                let in_pg: Vec<(String, Option<String>, Option<String>)> = query(&format!(
                    "SELECT id::text, md5(body), ver::text FROM {s}.docs_copy AS d ORDER BY d.id"
                ));
                assert_eq!(in_pg, want, "postgres target after {what}");
                let in_my: Vec<(String, Option<String>, Option<String>)> = mariadb(&format!(
                    "SELECT id, MD5(body), ver FROM `{db}`.docs AS d ORDER BY d.id"
                ))
                .into_iter()
                .map(|r| (r[0].clone(), null(&r[1]), null(&r[2])))
                .collect();
                assert_eq!(in_my, want, "mysql target after {what}");
                let mut bodies: Vec<&Option<String>> = want.iter().map(|(_, md5, _)| md5).collect();
                bodies.sort();
                bodies.dedup();
                assert!(
                    bodies.len() == want.len() && bodies.iter().all(|b| b.is_some()),
                    "every row has its own body: {want:?}"
                );
            };
            sql(&format!(
                "INSERT INTO {s}.docs SELECT g, {}, 1 FROM generate_series(1, 5) g",
                body("g")
            ));
            check("the inserts");
            sql(&format!("UPDATE {s}.docs SET id = 101 WHERE id = 1"));
            check("a key change");
            sql(&format!(
                "UPDATE {s}.docs SET id = 102, body = {} WHERE id = 2",
                body("id")
            ));
            check("a key and body change");
            sql(&format!(
                "BEGIN; UPDATE {s}.docs SET id = 103 WHERE id = 3; \
             UPDATE {s}.docs SET id = 203, ver = ver + 1 WHERE id = 103; \
             UPDATE {s}.docs SET ver = 7 WHERE id = 4; \
             UPDATE {s}.docs SET id = 3 WHERE id = 5; COMMIT;"
            ));
            check("two key changes in a row in one page");
        },
        || {
            runtime().block_on(async {
                let pool = crate::support::pg_pool().await;
                cleanup(&pool, &second).await;
                cleanup(&pool, &names).await;
            });
            mariadb(&format!("DROP DATABASE IF EXISTS `{db}`"));
        },
    );
}

/// `faucet doctor` behind a change-data source checks the `mysql` sink's append table for the
/// audit columns the run will write: a table lacking some is named with the `ALTER TABLE`
/// that adds them (the run would fail at the first change otherwise); after that statement
/// the doctor passes. Doctor creates no slot.
#[test]
fn doctor_names_the_audit_columns_a_mysql_append_table_lacks() {
    let names = Names::new("xdbaudit");
    let s = &names.schema;
    let db = crate::support::mysql::database("cli_xdb_audit");
    sql(&format!(
        "CREATE SCHEMA {s}; CREATE TABLE {s}.items (id int PRIMARY KEY, v text)"
    ));
    mariadb(&format!(
        "CREATE DATABASE `{db}` CHARACTER SET utf8mb4; \
         CREATE TABLE `{db}`.items_log (op VARCHAR(1), `table` TEXT, `before` JSON) ENGINE=InnoDB"
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    write_pipeline(
        dir.path(),
        "xdb_audit",
        &names.cdc_source("XDB_PG_URL", &format!("{s}.items")),
        "{ type: mysql, config: { connection_url: \"${env:XDB_MYSQL_URL}\", table: items_log } }",
        "",
    );
    let doctor = || {
        faucet_unarmed()
            .env("XDB_PG_URL", pg_url())
            .env("XDB_MYSQL_URL", url_for(&db))
            .arg("doctor")
            .current_dir(dir.path())
            .output()
            .expect("spawn faucet")
    };
    with_cleanup(
        || {
            let out = doctor();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert_eq!(out.status.code(), Some(1), "one failed probe: {stdout}");
            for want in [
                "has no column lsn, commit_ts, after, unchanged_toast",
                "change records, appended as rows",
                "write_mode: upsert",
            ] {
                assert!(stdout.contains(want), "{want:?} not in: {stdout}");
            }
            let alter = stdout
                .split("(`ALTER TABLE ")
                .nth(1)
                .and_then(|rest| rest.split("`)").next())
                .unwrap_or_else(|| panic!("no ALTER TABLE in: {stdout}"));
            assert!(alter.contains("ADD COLUMN `after` JSON"), "{alter}");
            mariadb(&format!("USE `{db}`; ALTER TABLE {alter}"));
            let out = doctor();
            assert!(
                out.status.success(),
                "doctor after the ALTER: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            let slots: Vec<(i64,)> = query(&format!(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{}'",
                names.slot
            ));
            assert_eq!(slots, [(0,)], "doctor created the slot");
        },
        || {
            runtime().block_on(async { cleanup(&crate::support::pg_pool().await, &names).await });
            mariadb(&format!("DROP DATABASE IF EXISTS `{db}`"));
        },
    );
}
