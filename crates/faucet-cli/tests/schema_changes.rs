//! Schema changes reach the targets (issue 24), through the real binary: `postgres-cdc`
//! detects an added, renamed, dropped and retyped column mid-stream and delivers a
//! schema-change record (`op: "s"`) in stream order; an upsert target applies it.
//!
//! * PostgreSQL → PostgreSQL upsert (a target made by hand with the source's exact types,
//!   so the widenings run `ALTER … TYPE`): ADD, RENAME, a widening of two columns and DROP
//!   mid-stream, each with rows before and after it in the same transaction and in the next;
//!   pages of 4 records, so pages end between the rows and the change; the run SIGKILLed at
//!   instants and aborted at each SQL sink fault point (several hits), then run to the end:
//!   the target's columns and types are the source's (plus the dropped column, kept by
//!   default: NULL in rows inserted after the drop) and its rows are the source's.
//! * PostgreSQL → jsonl: the `s` records between the rows, once each — also when a run
//!   stops between the changes (the next run starts from the bookmark's shapes); a rename
//!   is a rename, not an added column.
//! * A change the target cannot take (integer → text) stops the run naming table, column,
//!   change, position and fix; nothing of the page is written. `schema_changes: fail` stops
//!   at any change.
//! * PostgreSQL → SQLite upsert: ADD, RENAME and DROP (`dropped_columns: drop`) applied.
//!
//! `FAUCET_SOAK=1` crashes more often.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::pg::{Names, faucet_with_pg_url, query, sql};
use crate::support::{Run, output_of_success, runtime};

/// The variable the configs read the PostgreSQL URL from.
const PG_VAR: &str = "FAUCET_SCHEMA_PG_URL";

mod doctor;
mod files;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "mysql")]
mod mysql_doctor;

/// `faucet run --quiet` in `dir` with the URL in the environment.
pub(crate) fn faucet(dir: &Path) -> Command {
    let mut c = faucet_with_pg_url(PG_VAR);
    c.args(["run", "--quiet"]).current_dir(dir);
    c
}

/// Writes `faucet.yaml` in `dir`: pipeline `name`, `source` and `sink` (one line of YAML
/// each), file state, pages of `batch` records, plus `extra` pipeline-level lines.
pub(crate) fn pipeline(
    dir: &Path,
    name: &str,
    source: &str,
    sink: &str,
    batch: usize,
    extra: &str,
) {
    std::fs::write(
        dir.join("faucet.yaml"),
        format!(
            "version: 1\nname: {name}\npipeline:\n  source: {source}\n  sink: {sink}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {batch}\n{extra}"
        ),
    )
    .expect("config");
}

/// The pipeline: `postgres-cdc` of `<schema>.items` into `sink` (one line of YAML), pages of
/// `batch` records, file state, plus `extra` pipeline-level lines.
fn config(dir: &Path, names: &Names, sink: &str, batch: usize, extra: &str) {
    pipeline(
        dir,
        &format!("schema_{batch}"),
        &names.cdc_source(PG_VAR, &format!("{}.items", names.schema)),
        sink,
        batch,
        extra,
    );
}

/// The schema of `names` with `items (id int PRIMARY KEY, <columns>)`, the pipeline of
/// [`config`] into `sink` in pages of 100, and a first run (it makes the slot and the
/// publication; the changes from then on reach the sink).
pub(crate) fn items_then_first_run(dir: &Path, names: &Names, columns: &str, sink: &str) {
    let s = &names.schema;
    sql(&format!(
        "CREATE SCHEMA {s}; CREATE TABLE {s}.items (id int PRIMARY KEY, {columns})"
    ));
    config(dir, names, sink, 100, "");
    output_of_success(&mut faucet(dir), "the first run");
}

/// Runs the pipeline in `dir` aborted at every SQL sink fault point (at hits 1 and 3; more
/// with `FAUCET_SOAK=1`), then SIGKILLed at instants, then to the end: how many runs a
/// fault point aborted (asserted to be at least one per point) and how many were killed.
pub(crate) fn crash_then_finish(dir: &Path, what: &str) -> (usize, usize) {
    let soak = std::env::var("FAUCET_SOAK").is_ok();
    // The fault points first, every point at its first page before any later hit, so
    // each has pages left to reach whatever the machine's speed (the SIGKILLs after
    // them may get anywhere).
    let hits: &[u32] = if soak { &[1, 2, 3, 5, 8] } else { &[1, 3] };
    let mut aborted = 0;
    for &hit in hits {
        for point in faucet_core::fault::SQL_SINK {
            let out = faucet(dir)
                .env("FAUCET_FAULT", format!("{point}:{hit}"))
                .output()
                .expect("spawn faucet");
            if !out.status.success() {
                aborted += 1;
            }
        }
    }
    let mut killed = 0;
    for k in 0..if soak { 12 } else { 4 } {
        let delay = Duration::from_millis(40 + (k * 53 % 160));
        if crate::support::crash::kill_after(faucet_with_pg_url(PG_VAR), dir, delay) {
            killed += 1;
        }
    }
    output_of_success(&mut faucet(dir), "the run to the end");
    eprintln!("schema changes {what}: {killed} SIGKILLs mid-run, {aborted} aborts");
    assert!(
        aborted >= faucet_core::fault::SQL_SINK.len(),
        "{what}: only {aborted} runs reached a fault point"
    );
    (aborted, killed)
}

/// The first steps of the jsonl tests, on `table` (its database or schema made; `exec` runs
/// SQL on the source): `table (id int PRIMARY KEY, v int)`, the pipeline `name` from `source`
/// into `out.jsonl` in pages of 2, a first run (it starts at the end), then rows 1 and 2, the
/// ADD of a text column `w` and row 3 in one transaction, and a run: `c1 c2 s c3`, the first
/// part of what [`check_two_changes`] checks.
pub(crate) fn jsonl_add_between_rows(
    dir: &Path,
    name: &str,
    source: &str,
    table: &str,
    exec: impl Fn(&str),
) {
    exec(&format!("CREATE TABLE {table} (id int PRIMARY KEY, v int)"));
    let sink = "{ type: jsonl, config: { path: ./out.jsonl } }";
    pipeline(dir, name, source, sink, 2, "");
    output_of_success(&mut faucet(dir), "the first run");
    exec(&format!(
        "INSERT INTO {table} VALUES (1, 1);
         BEGIN; INSERT INTO {table} VALUES (2, 2);
         ALTER TABLE {table} ADD COLUMN w text;
         INSERT INTO {table} VALUES (3, 3, 'three'); COMMIT"
    ));
    output_of_success(&mut faucet(dir), "a run after the ADD");
}

/// The records of the jsonl file `out.jsonl` in `dir`.
pub(crate) fn jsonl(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("out.jsonl"))
        .expect("out.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Asserts the jsonl records of the two-step workload of the jsonl tests: `c1 c2 s c3 c4 s
/// c5` of `table`, the first `s` the ADD of a text column `w` to `(id, v)` (`position`: the
/// source's position field, and how it spells an integer), with the position and
/// `commit_ts` set and the columns before; the second's changes `second`.
pub(crate) fn check_two_changes(
    records: &[serde_json::Value],
    table: &str,
    position: (&str, &str),
    second: serde_json::Value,
) {
    let (field, int) = position;
    assert_eq!(
        ops(records),
        ["c1", "c2", "s", "c3", "c4", "s", "c5"],
        "{records:?}"
    );
    let add = &records[2];
    assert_eq!(add["table"], table);
    assert!(
        add[field].is_string() && add["commit_ts"].is_string(),
        "{add}"
    );
    assert_eq!(
        add["after"]["changes"],
        serde_json::json!([{"kind": "add", "column": "w", "from": null, "to": null,
                            "type": "text", "data_type": "text"}])
    );
    assert_eq!(
        add["after"]["columns"],
        serde_json::json!([
            {"name": "id", "type": int, "data_type": "int", "key": true},
            {"name": "v", "type": int, "data_type": "int", "key": false},
            {"name": "w", "type": "text", "data_type": "text", "key": false}
        ])
    );
    assert_eq!(
        add["before"]["columns"].as_array().map(Vec::len),
        Some(2),
        "{add}"
    );
    assert_eq!(records[5]["after"]["changes"], second, "{records:?}");
}

/// Each record as `s` or its op and `after.id` (`c3`).
pub(crate) fn ops(records: &[serde_json::Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| match r["op"].as_str().expect("op") {
            "s" => "s".to_owned(),
            op => format!("{op}{}", r["after"]["id"]),
        })
        .collect()
}

/// The source table, and (in `target`, when given) a target table of the same shape.
pub(crate) fn source_table(s: &str, target: Option<&str>) {
    let table = "(id int PRIMARY KEY, v integer NOT NULL, note varchar(10) NOT NULL, \
                 gone text NOT NULL)";
    sql(&format!(
        "CREATE SCHEMA {s}; CREATE TABLE {s}.items {table}"
    ));
    if let Some(t) = target {
        sql(&format!("CREATE TABLE {t} {table}"));
    }
}

/// The changes: rows, then ADD, RENAME, two widenings and DROP, each with rows before and
/// after it in its transaction and in the next.
pub(crate) fn workload(s: &str) {
    for step in [
        format!("INSERT INTO {s}.items SELECT g, g, 'n' || g, 'g' FROM generate_series(1, 30) g"),
        format!(
            "BEGIN; UPDATE {s}.items SET v = v + 100 WHERE id <= 10;
             ALTER TABLE {s}.items ADD COLUMN w bigint;
             UPDATE {s}.items SET w = id * 10 WHERE id <= 15;
             INSERT INTO {s}.items VALUES (31, 31, 'n31', 'g', 310); COMMIT"
        ),
        format!("UPDATE {s}.items SET w = id WHERE id > 25"),
        format!(
            "BEGIN; INSERT INTO {s}.items VALUES (32, 32, 'n32', 'g', 320);
             ALTER TABLE {s}.items RENAME COLUMN v TO vv;
             UPDATE {s}.items SET vv = vv + 1000 WHERE id % 3 = 0; COMMIT"
        ),
        format!("UPDATE {s}.items SET w = -id WHERE id > 28"),
        format!(
            "BEGIN; UPDATE {s}.items SET note = 'm' || id WHERE id = 5;
             ALTER TABLE {s}.items ALTER COLUMN vv TYPE bigint;
             ALTER TABLE {s}.items ALTER COLUMN note TYPE varchar(40);
             UPDATE {s}.items SET vv = 5000000000 + id, note = 'a longer note, ' || id
               WHERE id % 4 = 0; COMMIT"
        ),
        format!("UPDATE {s}.items SET vv = vv + 1 WHERE id % 5 = 0"),
        format!(
            "BEGIN; UPDATE {s}.items SET gone = 'h' WHERE id = 7;
             ALTER TABLE {s}.items DROP COLUMN gone;
             INSERT INTO {s}.items VALUES (33, 33, 'n33', 330);
             DELETE FROM {s}.items WHERE id = 2; COMMIT"
        ),
        format!(
            "INSERT INTO {s}.items SELECT g, g, 'late' || g, g FROM generate_series(34, 40) g;
             UPDATE {s}.items SET note = 'x' WHERE id = 1"
        ),
    ] {
        sql(&step);
    }
}

/// `(column, type)` of `table` in table order, `format_type`'s spelling.
pub(crate) fn columns(table: &str) -> Vec<(String, String)> {
    query(&format!(
        "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute \
         WHERE attrelid = '{table}'::regclass AND attnum > 0 AND NOT attisdropped \
         ORDER BY attnum"
    ))
}

type Item = (i32, i64, String, Option<i64>);

/// The rows of `table` (`id, vv, note, w`), by id.
pub(crate) fn items(table: &str) -> Vec<Item> {
    query(&format!(
        "SELECT id, vv::bigint, note::text, w FROM {table} ORDER BY id"
    ))
}

/// Asserts the target is the source: the same columns and types (the dropped `gone` kept,
/// NULL where rows were inserted after the drop) and the same rows.
pub(crate) fn check_target(s: &str, t: &str, what: &str) {
    let mut target = columns(t);
    let gone = target
        .iter()
        .position(|(c, _)| c == "gone")
        .map(|i| target.remove(i));
    assert_eq!(gone, Some(("gone".into(), "text".into())), "{what}");
    assert_eq!(target, columns(&format!("{s}.items")), "{what}: columns");
    let expected = items(&format!("{s}.items"));
    assert_eq!(expected.len(), 39, "{what}: the workload");
    assert_eq!(items(t), expected, "{what}: rows");
    let kept: Vec<(i32, Option<String>)> = query(&format!(
        "SELECT id, gone FROM {t} WHERE id IN (1, 7, 33, 40) ORDER BY id"
    ));
    assert_eq!(
        kept,
        [
            (1, Some("g".into())),
            (7, Some("h".into())),
            (33, None),
            (40, None)
        ],
        "{what}: the dropped column"
    );
}

#[test]
fn pg_to_pg_upsert_applies_add_rename_widen_drop_across_crashes() {
    crate::support::pg::with_names("schema_pg", |names, dir| {
        let s = names.schema.clone();
        let t = format!("{s}.target");
        source_table(&s, Some(&t));
        config(
            dir.path(),
            names,
            &format!(
                "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
             table: {t}, write_mode: upsert, key: [id] }} }}"
            ),
            4,
            "",
        );
        // The first run makes the slot and the publication; the workload follows.
        output_of_success(&mut faucet(dir.path()), "the first run");
        workload(&s);
        crash_then_finish(dir.path(), "pg → pg");
        check_target(&s, &t, "after the crashes");
        // Another run has nothing to do and changes nothing.
        output_of_success(&mut faucet(dir.path()), "a run after the end");
        check_target(&s, &t, "a run after the end");
    });
}

#[test]
fn pg_to_jsonl_delivers_each_schema_change_once_in_order() {
    crate::support::pg::with_names("schema_jsonl", |names, dir| {
        let s = names.schema.clone();
        let table = format!("{s}.items");
        sql(&format!("CREATE SCHEMA {s}"));
        let source = names.cdc_source(PG_VAR, &table);
        jsonl_add_between_rows(dir.path(), "schema_jsonl", &source, &table, sql);
        // A new run starts with the shapes of its bookmark: no `s` again for the ADD, one for
        // the RENAME (told by attnum, not an added column) and the type change.
        sql(&format!(
            "INSERT INTO {s}.items VALUES (4, 4, 'four');
         ALTER TABLE {s}.items RENAME COLUMN v TO vv;
         ALTER TABLE {s}.items ALTER COLUMN vv TYPE bigint;
         INSERT INTO {s}.items VALUES (5, 5, 'five')"
        ));
        output_of_success(&mut faucet(dir.path()), "a run after the RENAME");
        check_two_changes(
            &jsonl(dir.path()),
            &format!("{s}.items"),
            ("lsn", "integer"),
            serde_json::json!([
                {"kind": "rename", "column": "vv", "from": "v", "to": "vv",
                 "type": "bigint", "data_type": "int"},
                {"kind": "type", "column": "vv", "from": "integer", "to": "bigint",
                 "type": "bigint", "data_type": "int"}
            ]),
        );
    });
}

#[test]
fn a_change_the_target_cannot_take_stops_the_run_naming_it() {
    crate::support::pg::with_names("schema_stop", |names, dir| {
        let s = names.schema.clone();
        let t = format!("{s}.target");
        let sink = |extra: &str| {
            format!(
                "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
             table: {t}, write_mode: upsert, key: [id], create_table: true{extra} }} }}"
            )
        };
        items_then_first_run(dir.path(), names, "v integer", &sink(""));
        sql(&format!("INSERT INTO {s}.items VALUES (1, 1)"));
        output_of_success(&mut faucet(dir.path()), "the run of row 1");
        sql(&format!(
            "BEGIN; INSERT INTO {s}.items VALUES (2, 2);
         ALTER TABLE {s}.items ALTER COLUMN v TYPE text;
         INSERT INTO {s}.items VALUES (3, 'three'); COMMIT"
        ));
        let run = Run::from_output(faucet(dir.path()).output().expect("spawn"));
        assert!(run.code != 0, "{}", run.stderr);
        run.stderr_has(&[
            &t,
            "column v",
            "changed type from integer to text",
            "lsn ",
            "nothing of this page was written",
        ]);
        let rows: Vec<(i64,)> = query(&format!("SELECT id FROM {t} ORDER BY id"));
        assert_eq!(rows, [(1,)], "rows of the refused page were written");
        // `schema_changes: fail` stops at an ADD too.
        sql(&format!("DROP TABLE {t}"));
        std::fs::remove_dir_all(dir.path().join("state")).expect("state");
        crate::support::pg::drop_names(names);
        let fail = sink(", schema_changes: fail");
        items_then_first_run(dir.path(), names, "v integer", &fail);
        sql(&format!(
            "INSERT INTO {s}.items VALUES (1, 1);
         ALTER TABLE {s}.items ADD COLUMN w text;
         INSERT INTO {s}.items VALUES (2, 2, 'two')"
        ));
        let run = Run::from_output(faucet(dir.path()).output().expect("spawn"));
        assert!(run.code != 0, "{}", run.stderr);
        run.stderr_has(&["column w", "added", "schema_changes: fail"]);
    });
}

/// The columns of `table` in the SQLite file `db`, in order.
#[cfg(feature = "sqlite")]
pub(crate) fn lite_columns(db: &Path, table: &str) -> Vec<String> {
    let cols: Vec<(String,)> = lite_rows(
        db,
        &format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid"),
    );
    cols.into_iter().map(|(c,)| c).collect()
}

/// The rows `sql` reads from the SQLite file `db`.
#[cfg(feature = "sqlite")]
pub(crate) fn lite_rows<T>(db: &Path, sql: &str) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> + Send + Unpin,
{
    runtime().block_on(async {
        use sqlx::Connection as _;
        let url = format!("sqlite://{}", db.display());
        let mut c = sqlx::SqliteConnection::connect(&url).await.expect("sqlite");
        sqlx::query_as(sql).fetch_all(&mut c).await.expect("rows")
    })
}

#[cfg(feature = "sqlite")]
#[test]
fn pg_to_sqlite_upsert_applies_add_rename_and_drop() {
    crate::support::pg::with_names("schema_lite", |names, dir| {
        let s = names.schema.clone();
        sql(&format!(
            "CREATE SCHEMA {s}; CREATE TABLE {s}.items (id int PRIMARY KEY, v integer, gone text)"
        ));
        config(
            dir.path(),
            names,
            "{ type: sqlite, config: { path: ./t.db, table: items, write_mode: upsert, \
         key: [id], create_table: true, dropped_columns: drop } }",
            3,
            "",
        );
        output_of_success(&mut faucet(dir.path()), "the first run");
        sql(&format!(
            "INSERT INTO {s}.items SELECT g, g, 'g' FROM generate_series(1, 4) g;
         BEGIN; UPDATE {s}.items SET v = 10 WHERE id = 1;
         ALTER TABLE {s}.items ADD COLUMN w text;
         ALTER TABLE {s}.items RENAME COLUMN v TO vv;
         UPDATE {s}.items SET w = 'w' || id WHERE id <= 2; COMMIT;
         ALTER TABLE {s}.items DROP COLUMN gone;
         INSERT INTO {s}.items VALUES (5, 5, 'five')"
        ));
        output_of_success(&mut faucet(dir.path()), "the run");
        let db = dir.path().join("t.db");
        assert_eq!(lite_columns(&db, "items"), ["id", "vv", "w"]);
        let rows: Vec<(i64, i64, Option<String>)> =
            lite_rows(&db, "SELECT id, vv, w FROM items ORDER BY id");
        assert_eq!(
            rows,
            [
                (1, 10, Some("w1".into())),
                (2, 2, Some("w2".into())),
                (3, 3, None),
                (4, 4, None),
                (5, 5, Some("five".into()))
            ]
        );
    });
}
