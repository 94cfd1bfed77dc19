//! Schema changes with MySQL on either side (issue 24), through the binary, with the
//! helpers of the PostgreSQL tests (the same workload, fault points and SIGKILLs):
//!
//! * PostgreSQL → MySQL upsert (a target made by hand with the source's types): ADD, RENAME,
//!   two widenings and DROP applied ahead of each page's transaction (MySQL's DDL commits
//!   on its own), at every SQL sink fault point and across SIGKILLs: the target's columns,
//!   types and rows are the source's.
//! * `mysql-cdc` → MySQL upsert and `mysql-cdc` → PostgreSQL upsert: the same workload in
//!   MariaDB's SQL (`RENAME COLUMN`, `MODIFY`), detected from the table maps, renames told
//!   by the `ALTER TABLE` statement.
//! * `mysql-cdc` → jsonl: each `s` record once and in order, also when runs stop between
//!   the changes; a rename is a rename.

use super::{
    PG_VAR, check_two_changes, crash_then_finish, faucet, items, jsonl, jsonl_add_between_rows,
    pipeline, source_table, workload,
};
use crate::support::mariadb::{mariadb as binlog_sql, mysql_url_for, unique_server_id};
use crate::support::mysql::{database, mariadb as sink_sql, url_for};
use crate::support::output_of_success;
use crate::support::pg::{query, sql};

/// The target table's shape, as the source's starts.
const TABLE: &str = "(id int PRIMARY KEY, v int NOT NULL, note varchar(10) NOT NULL, \
                     gone text NOT NULL)";

/// `(column, COLUMN_TYPE)` of `db`.`table` on the sink server, in table order.
pub(super) fn mysql_columns(db: &str, table: &str) -> Vec<Vec<String>> {
    sink_sql(&format!(
        "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = '{db}' AND TABLE_NAME = '{table}' ORDER BY ORDINAL_POSITION"
    ))
}

/// The rows (`id, vv, note, w`) of a PostgreSQL table, as the mariadb client prints them.
fn pg_rows(table: &str) -> Vec<Vec<String>> {
    items(table)
        .into_iter()
        .map(|(id, vv, note, w)| {
            vec![
                id.to_string(),
                vv.to_string(),
                note,
                w.map_or_else(|| "NULL".to_owned(), |w| w.to_string()),
            ]
        })
        .collect()
}

/// The rows of `db.items`' workload (`id, vv, note, w`) in a MySQL table.
fn mysql_rows(run: impl Fn(&str) -> Vec<Vec<String>>, table: &str) -> Vec<Vec<String>> {
    run(&format!("SELECT id, vv, note, w FROM {table} ORDER BY id"))
}

/// `gone` of rows 1, 7, 33 and 40: kept before the drop, NULL in rows inserted after it.
fn kept_gone() -> Vec<Vec<String>> {
    [("1", "g"), ("7", "h"), ("33", "NULL"), ("40", "NULL")]
        .iter()
        .map(|(a, b)| vec![(*a).to_owned(), (*b).to_owned()])
        .collect()
}

/// The workload of [`workload`] in MariaDB's SQL on `db`.items of the binlog server: the
/// DDL commits the statements before it, so the changes around it are in the transactions
/// before and after it.
fn mysql_workload(db: &str) {
    let first: Vec<String> = (1..=30)
        .map(|g| format!("({g}, {g}, 'n{g}', 'g')"))
        .collect();
    let late: Vec<String> = (34..=40)
        .map(|g| format!("({g}, {g}, 'late{g}', {g})"))
        .collect();
    for step in [
        format!("INSERT INTO {db}.items VALUES {}", first.join(", ")),
        format!(
            "BEGIN; UPDATE {db}.items SET v = v + 100 WHERE id <= 10;
             ALTER TABLE {db}.items ADD COLUMN w bigint;
             UPDATE {db}.items SET w = id * 10 WHERE id <= 15;
             INSERT INTO {db}.items VALUES (31, 31, 'n31', 'g', 310); COMMIT"
        ),
        format!("UPDATE {db}.items SET w = id WHERE id > 25"),
        format!(
            "BEGIN; INSERT INTO {db}.items VALUES (32, 32, 'n32', 'g', 320);
             ALTER TABLE {db}.items RENAME COLUMN v TO vv;
             UPDATE {db}.items SET vv = vv + 1000 WHERE id % 3 = 0; COMMIT"
        ),
        format!("UPDATE {db}.items SET w = -id WHERE id > 28"),
        format!(
            "BEGIN; UPDATE {db}.items SET note = 'm5' WHERE id = 5;
             ALTER TABLE {db}.items MODIFY vv bigint NOT NULL;
             ALTER TABLE {db}.items MODIFY note varchar(40) NOT NULL;
             UPDATE {db}.items SET vv = 5000000000 + id, note = CONCAT('a longer note, ', id)
               WHERE id % 4 = 0; COMMIT"
        ),
        format!("UPDATE {db}.items SET vv = vv + 1 WHERE id % 5 = 0"),
        format!(
            "BEGIN; UPDATE {db}.items SET gone = 'h' WHERE id = 7;
             ALTER TABLE {db}.items DROP COLUMN gone;
             INSERT INTO {db}.items VALUES (33, 33, 'n33', 330);
             DELETE FROM {db}.items WHERE id = 2; COMMIT"
        ),
        format!(
            "INSERT INTO {db}.items VALUES {}; UPDATE {db}.items SET note = 'x' WHERE id = 1",
            late.join(", ")
        ),
    ] {
        binlog_sql(&step);
    }
}

/// The `mysql-cdc` source of `db.items` on the binlog server, as replica `unique_server_id()
/// + n` (each test its own `n`: tests of one process run at once).
fn cdc_source(db: &str, n: u32) -> String {
    format!(
        "{{ type: mysql-cdc, config: {{ connection_url: \"{}\", server_id: {}, \
         tables: [{db}.items] }} }}",
        mysql_url_for(db, None),
        unique_server_id().wrapping_add(n)
    )
}

/// A `mysql` upsert sink into `db.target` on the sink server.
pub(super) fn mysql_sink(db: &str, extra: &str) -> String {
    format!(
        "{{ type: mysql, config: {{ connection_url: \"{}\", table: target, \
         write_mode: upsert, key: [id]{extra} }} }}",
        url_for(db)
    )
}

/// A `mysql-cdc` → MySQL upsert pipeline in `dir` (`name`, replica `n`, pages of `batch`
/// records) of `db`.items on the binlog server into `db`.target on the sink server, both
/// created with the columns `table`; its first run done.
pub(super) fn cdc_to_mysql(
    dir: &std::path::Path,
    (name, n, batch): (&str, u32, usize),
    db: &str,
    table: &str,
) {
    binlog_sql(&format!(
        "CREATE DATABASE {db}; CREATE TABLE {db}.items {table}"
    ));
    sink_sql(&format!(
        "CREATE DATABASE {db}; CREATE TABLE {db}.target {table} ENGINE=InnoDB"
    ));
    pipeline(
        dir,
        name,
        &cdc_source(db, n),
        &mysql_sink(db, ""),
        batch,
        "",
    );
    output_of_success(&mut faucet(dir), "the first run");
}

/// Drops database `db` on the binlog and the sink servers.
pub(super) fn drop_both(db: &str) {
    binlog_sql(&format!("DROP DATABASE IF EXISTS {db}"));
    sink_sql(&format!("DROP DATABASE IF EXISTS {db}"));
}

/// Asserts a MySQL target of the workload: the source's columns and types (MariaDB's
/// spelling) plus the kept `gone`, and the source's rows.
fn check_mysql_target(db: &str, expected: &[Vec<String>], what: &str) {
    let columns = mysql_columns(db, "target");
    let want: Vec<Vec<String>> = [
        ("id", "int(11)"),
        ("vv", "bigint(20)"),
        ("note", "varchar(40)"),
        ("gone", "text"),
        ("w", "bigint(20)"),
    ]
    .iter()
    .map(|(a, b)| vec![(*a).to_owned(), (*b).to_owned()])
    .collect();
    assert_eq!(columns, want, "{what}: columns");
    assert_eq!(expected.len(), 39, "{what}: the workload");
    assert_eq!(
        mysql_rows(sink_sql, &format!("{db}.target")),
        expected,
        "{what}: rows"
    );
    assert_eq!(
        sink_sql(&format!(
            "SELECT id, gone FROM {db}.target WHERE id IN (1, 7, 33, 40) ORDER BY id"
        )),
        kept_gone(),
        "{what}: the dropped column"
    );
}

#[test]
fn pg_to_mysql_upsert_applies_add_rename_widen_drop_across_crashes() {
    crate::support::pg::with_names("schema_my", |names, dir| {
        let s = names.schema.clone();
        let db = database("schema_my");
        crate::support::with_cleanup(
            || {
                source_table(&s, None);
                sink_sql(&format!(
                    "CREATE DATABASE {db}; CREATE TABLE {db}.target {TABLE} ENGINE=InnoDB"
                ));
                pipeline(
                    dir.path(),
                    "schema_my",
                    &names.cdc_source(PG_VAR, &format!("{s}.items")),
                    &mysql_sink(&db, ""),
                    4,
                    "",
                );
                output_of_success(&mut faucet(dir.path()), "the first run");
                workload(&s);
                crash_then_finish(dir.path(), "pg → mysql");
                let expected = pg_rows(&format!("{s}.items"));
                check_mysql_target(&db, &expected, "after the crashes");
                output_of_success(&mut faucet(dir.path()), "a run after the end");
                check_mysql_target(&db, &expected, "a run after the end");
            },
            || {
                sink_sql(&format!("DROP DATABASE IF EXISTS {db}"));
            },
        );
    });
}

#[test]
fn mysql_cdc_to_mysql_upsert_applies_the_changes_across_crashes() {
    let db = database("schema_mm");
    let dir = tempfile::tempdir().expect("tempdir");
    crate::support::with_cleanup(
        || {
            cdc_to_mysql(dir.path(), ("schema_mm", 1, 4), &db, TABLE);
            mysql_workload(&db);
            crash_then_finish(dir.path(), "mysql → mysql");
            let expected = mysql_rows(
                |q| crate::support::mariadb::rows(&binlog_sql(q)),
                &format!("{db}.items"),
            );
            check_mysql_target(&db, &expected, "after the crashes");
        },
        || drop_both(&db),
    );
}

#[test]
fn mysql_cdc_to_pg_upsert_applies_the_changes_across_crashes() {
    crate::support::pg::with_names("schema_mp", |names, dir| {
        let s = names.schema.clone();
        let t = format!("{s}.target");
        let db = database("schema_mp");
        crate::support::with_cleanup(
            || {
                binlog_sql(&format!(
                    "CREATE DATABASE {db}; CREATE TABLE {db}.items {TABLE}"
                ));
                sql(&format!(
                    "CREATE SCHEMA {s}; CREATE TABLE {t} (id int PRIMARY KEY, v integer NOT NULL, \
             note varchar(10) NOT NULL, gone text NOT NULL)"
                ));
                pipeline(
                    dir.path(),
                    "schema_mp",
                    &cdc_source(&db, 2),
                    &format!(
                        "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
                 table: {t}, write_mode: upsert, key: [id] }} }}"
                    ),
                    4,
                    "",
                );
                output_of_success(&mut faucet(dir.path()), "the first run");
                mysql_workload(&db);
                crash_then_finish(dir.path(), "mysql → pg");
                let cols: Vec<(String, String)> = super::columns(&t);
                let want: Vec<(String, String)> = [
                    ("id", "integer"),
                    ("vv", "bigint"),
                    ("note", "character varying(40)"),
                    ("gone", "text"),
                    ("w", "bigint"),
                ]
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect();
                assert_eq!(cols, want, "columns");
                let expected = mysql_rows(
                    |q| crate::support::mariadb::rows(&binlog_sql(q)),
                    &format!("{db}.items"),
                );
                assert_eq!(expected.len(), 39, "the workload");
                assert_eq!(pg_rows(&t), expected, "rows");
                let kept: Vec<(i32, Option<String>)> = query(&format!(
                    "SELECT id, gone FROM {t} WHERE id IN (1, 7, 33, 40) ORDER BY id"
                ));
                let kept: Vec<Vec<String>> = kept
                    .into_iter()
                    .map(|(id, g)| vec![id.to_string(), g.unwrap_or_else(|| "NULL".into())])
                    .collect();
                assert_eq!(kept, kept_gone(), "the dropped column");
            },
            || {
                binlog_sql(&format!("DROP DATABASE IF EXISTS {db}"));
            },
        );
    });
}

#[test]
fn mysql_cdc_to_jsonl_delivers_each_schema_change_once_in_order() {
    let db = database("schema_mj");
    let dir = tempfile::tempdir().expect("tempdir");
    crate::support::with_cleanup(
        || {
            binlog_sql(&format!("CREATE DATABASE {db}"));
            let table = format!("{db}.items");
            let source = cdc_source(&db, 3);
            jsonl_add_between_rows(dir.path(), "schema_mj", &source, &table, |q| {
                binlog_sql(q);
            });
            // The next run starts with the bookmark's shapes: no `s` again for the ADD. The
            // RENAME is noted from its statement (a run stops after it, before the next row:
            // the rename travels in the bookmark), the MODIFY is a type change.
            binlog_sql(&format!(
                "INSERT INTO {db}.items VALUES (4, 4, 'four');
             ALTER TABLE {db}.items RENAME COLUMN w TO ww"
            ));
            output_of_success(&mut faucet(dir.path()), "a run after the RENAME");
            binlog_sql(&format!(
                "ALTER TABLE {db}.items MODIFY v bigint;
             INSERT INTO {db}.items VALUES (5, 5, 'five')"
            ));
            output_of_success(&mut faucet(dir.path()), "a run after the MODIFY");
            output_of_success(&mut faucet(dir.path()), "a run with nothing new");
            check_two_changes(
                &jsonl(dir.path()),
                &format!("{db}.items"),
                ("binlog_file", "int"),
                serde_json::json!([
                    {"kind": "type", "column": "v", "from": "int", "to": "bigint",
                     "type": "bigint", "data_type": "int"},
                    {"kind": "rename", "column": "ww", "from": "w", "to": "ww",
                     "type": "text", "data_type": "text"}
                ]),
            );
        },
        || {
            binlog_sql(&format!("DROP DATABASE IF EXISTS {db}"));
        },
    );
}
