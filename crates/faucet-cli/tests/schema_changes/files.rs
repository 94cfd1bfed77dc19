//! Schema changes from sources of plain rows (issue 24), through the binary: a new field is
//! an added column, delivered as an `s` record before the first record that has it
//! (`faucet_core::change::NewFields`).
//!
//! * CSV files (`path: in/orders-*.csv`) whose later headers gain columns (and put them in
//!   another order; `amount` declared numeric, missing from the first file) → a PostgreSQL
//!   upsert target made by `create_table`: each new column added once, of its type, across every SQL sink fault point and SIGKILLs, then a run with nothing to
//!   do; values exact, the rows written before a column came NULL in it.
//! * JSONL whose lines gain keys (also in a later run: the bookmark's shape) → an append
//!   SQLite table: the columns added, a line leaving a key out is no drop.
//! * An incremental PostgreSQL query of a table that gained a column between runs → an
//!   upsert target.

use super::{PG_VAR, columns, crash_then_finish, faucet, pipeline};
#[cfg(feature = "sqlite")]
use super::{lite_columns, lite_rows};
use crate::support::output_of_success;
use crate::support::pg::{query, sql};

/// A PostgreSQL upsert sink into `table` by `id`, creating it.
fn pg_upsert(table: &str) -> String {
    format!(
        "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", table: {table}, \
         write_mode: upsert, key: [id], create_table: true }} }}"
    )
}

/// The CSV lines of `rows` under `header`, each row's fields in the header's order.
fn csv(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut out = header.join(",") + "\n";
    for row in rows {
        out += &row.join(",");
        out += "\n";
    }
    out
}

type Order = (i64, String, Option<String>, Option<String>);

#[test]
fn csv_files_whose_header_gains_columns_alter_the_pg_target_across_crashes() {
    crate::support::pg::with_names("schema_csv", |names, dir| {
        let s = names.schema.clone();
        let t = format!("{s}.orders");
        let write = |name: &str, text: String| {
            std::fs::create_dir_all(dir.path().join("in")).expect("mkdir");
            std::fs::write(dir.path().join("in").join(name), text).expect("csv");
        };
        sql(&format!("CREATE SCHEMA {s}"));
        pipeline(
            dir.path(),
            "schema_csv",
            "{ type: csv, config: { path: ./in/orders-*.csv, columns: { id: int, amount: numeric } } }",
            &pg_upsert(&t),
            2,
            "",
        );
        let mut expected: Vec<Order> = Vec::new();
        write(
            "orders-2026-12-01.csv",
            csv(
                &["id", "name"],
                (1..=6).map(|i| {
                    expected.push((i, format!("n{i}"), None, None));
                    vec![i.to_string(), format!("n{i}")]
                }),
            ),
        );
        output_of_success(&mut faucet(dir.path()), "the first run");
        assert_eq!(
            columns(&t),
            [
                ("id".into(), "bigint".into()),
                ("name".into(), "text".into())
            ]
        );
        // The next day's file has an `amount`, and updates row 1; the day after's puts
        // its columns in another order and adds `note`.
        let day2: Vec<Vec<String>> = std::iter::once(1)
            .chain(7..=46)
            .map(|i| vec![i.to_string(), format!("m{i}"), format!("{i}.25")])
            .collect();
        for r in &day2 {
            let id: i64 = r[0].parse().expect("id");
            let row = (id, r[1].clone(), Some(r[2].clone()), None);
            match expected.iter_mut().find(|e| e.0 == id) {
                Some(e) => *e = row,
                None => expected.push(row),
            }
        }
        write(
            "orders-2026-12-02.csv",
            csv(&["id", "name", "amount"], day2),
        );
        write(
            "orders-2026-12-03.csv",
            csv(
                &["id", "amount", "note", "name"],
                (47..=66).map(|i| {
                    expected.push((
                        i,
                        format!("l{i}"),
                        Some(format!("{i}.5")),
                        Some(format!("note, {i}")),
                    ));
                    vec![
                        i.to_string(),
                        format!("{i}.5"),
                        format!("\"note, {i}\""),
                        format!("l{i}"),
                    ]
                }),
            ),
        );
        let check = |what: &str| {
            assert_eq!(
                columns(&t),
                [
                    ("id".into(), "bigint".into()),
                    ("name".into(), "text".into()),
                    ("amount".into(), "numeric".into()),
                    ("note".into(), "text".into())
                ],
                "{what}: columns"
            );
            let rows: Vec<Order> = query(&format!(
                "SELECT id, name, amount::text, note FROM {t} ORDER BY id"
            ));
            assert_eq!(rows, expected, "{what}: rows");
        };
        crash_then_finish(dir.path(), "csv files → pg");
        check("after the crashes");
        output_of_success(&mut faucet(dir.path()), "a run after the end");
        check("a run after the end");
    });
}

/// A later file's header names a column the target system cannot have: PostgreSQL would
/// truncate a 64-byte name (an `ADD COLUMN` of the cut name had run before the write was
/// refused), SQLite would add a column named `""`. The run stops before anything is altered,
/// naming the field; the target keeps its columns and rows.
#[test]
fn a_new_column_name_the_target_cannot_hold_alters_nothing() {
    crate::support::pg::with_names("schema_badname", |names, dir| {
        let s = names.schema.clone();
        let t = format!("{s}.items");
        sql(&format!("CREATE SCHEMA {s}"));
        std::fs::create_dir_all(dir.path().join("in")).expect("mkdir");
        std::fs::write(dir.path().join("in/a-1.csv"), "id,a\n1,x\n").expect("csv");
        pipeline(
            dir.path(),
            "schema_badname",
            "{ type: csv, config: { path: ./in/a-*.csv, columns: { id: int } } }",
            &pg_upsert(&t),
            10,
            "",
        );
        output_of_success(&mut faucet(dir.path()), "the first run");
        let long = "x".repeat(63) + "A";
        std::fs::write(
            dir.path().join("in/a-2.csv"),
            format!("id,a,{long}\n2,y,z\n"),
        )
        .expect("csv");
        let out = faucet(dir.path()).output().expect("faucet");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains("longer than PostgreSQL's limit"), "{said}");
        assert!(said.contains(&long), "{said}");
        assert_eq!(
            columns(&t),
            [("id".into(), "bigint".into()), ("a".into(), "text".into())]
        );
        let rows: Vec<(i64, String)> = query(&format!("SELECT id, a FROM {t} ORDER BY id"));
        assert_eq!(rows, [(1, "x".to_owned())]);
    });
    #[cfg(feature = "sqlite")]
    {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("in.jsonl"),
            "{\"id\":1,\"a\":1}\n{\"id\":2,\"\":2}\n",
        )
        .expect("jsonl");
        pipeline(
            dir.path(),
            "schema_badname_lite",
            "{ type: jsonl, config: { path: ./in.jsonl } }",
            "{ type: sqlite, config: { path: ./t.db, table: items, create_table: true } }",
            1,
            "",
        );
        let out = faucet(dir.path()).output().expect("faucet");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains("empty column name"), "{said}");
        assert!(!said.contains("`table`"), "{said}");
        let db = dir.path().join("t.db");
        assert_eq!(lite_columns(&db, "items"), ["id", "a"]);
        let rows: Vec<(i64, i64)> = lite_rows(&db, "SELECT id, a FROM items ORDER BY id");
        assert_eq!(rows, [(1, 1)]);
    }
}

/// A row of the SQLite table of the JSONL test: `id, v, w, x`.
#[cfg(feature = "sqlite")]
type LiteItem = (i64, Option<i64>, Option<String>, Option<i64>);

#[cfg(feature = "sqlite")]
#[test]
fn jsonl_lines_that_gain_keys_add_columns_to_an_append_sqlite_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("in.jsonl"),
        "{\"id\":1,\"v\":1}\n{\"id\":2,\"v\":2}\n{\"id\":3,\"v\":3,\"w\":\"three\"}\n\
         {\"id\":4,\"w\":\"four\"}\n{\"id\":5,\"v\":5}\n",
    )
    .expect("jsonl");
    pipeline(
        dir.path(),
        "schema_jsonl_lite",
        "{ type: jsonl, config: { path: ./in.jsonl } }",
        "{ type: sqlite, config: { path: ./t.db, table: items, create_table: true } }",
        2,
        "",
    );
    output_of_success(&mut faucet(dir.path()), "the first run");
    // A later run meets a key the bookmark's shape does not have: one more column, and no
    // second `w`.
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("in.jsonl"))
            .expect("append");
        f.write_all(b"{\"id\":6,\"w\":\"six\",\"x\":true,\"v\":6}\n")
            .expect("append");
    }
    output_of_success(&mut faucet(dir.path()), "the second run");
    output_of_success(&mut faucet(dir.path()), "a run with nothing to do");
    let db = dir.path().join("t.db");
    let cols = lite_columns(&db, "items");
    let rows: Vec<LiteItem> = lite_rows(&db, "SELECT id, v, w, x FROM items ORDER BY id");
    assert_eq!(cols, ["id", "v", "w", "x"]);
    assert_eq!(
        rows,
        [
            (1, Some(1), None, None),
            (2, Some(2), None, None),
            (3, Some(3), Some("three".into()), None),
            (4, None, Some("four".into()), None),
            (5, Some(5), None, None),
            (6, Some(6), Some("six".into()), Some(1)),
        ]
    );
}

#[test]
fn an_incremental_query_of_a_table_that_gained_a_column_alters_the_target() {
    crate::support::pg::with_names("schema_query", |names, dir| {
        let s = names.schema.clone();
        let t = format!("{s}.copy");
        sql(&format!(
            "CREATE SCHEMA {s}; CREATE TABLE {s}.src (id bigint PRIMARY KEY, v int);
             INSERT INTO {s}.src SELECT g, g FROM generate_series(1, 5) g"
        ));
        pipeline(
            dir.path(),
            "schema_query",
            &format!(
                "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
                 table: {s}.src, replication_method: incremental, replication_key: [id] }} }}"
            ),
            &pg_upsert(&t),
            2,
            "",
        );
        output_of_success(&mut faucet(dir.path()), "the first run");
        sql(&format!(
            "ALTER TABLE {s}.src ADD COLUMN w numeric(10,2);
             INSERT INTO {s}.src SELECT g, g, g / 4.0 FROM generate_series(6, 9) g"
        ));
        output_of_success(&mut faucet(dir.path()), "the run after the ADD");
        output_of_success(&mut faucet(dir.path()), "a run with nothing to do");
        assert_eq!(
            columns(&t),
            [
                ("id".into(), "bigint".into()),
                ("v".into(), "bigint".into()),
                ("w".into(), "numeric".into())
            ]
        );
        let rows: Vec<(i64, i64, Option<String>)> =
            query(&format!("SELECT id, v, w::text FROM {t} ORDER BY id"));
        let expected: Vec<(i64, i64, Option<String>)> = (1..=9)
            .map(|g| {
                let w = (g > 5).then(|| format!("{:.2}", g as f64 / 4.0));
                (g, g, w)
            })
            .collect();
        assert_eq!(rows, expected);
    });
}

#[cfg(feature = "sqlite")]
#[test]
fn serve_shows_the_last_schema_change_per_table() {
    let dir = crate::support::Dir::new();
    dir.write(
        "in.jsonl",
        "{\"id\":1}\n{\"id\":2,\"w\":\"two\"}\n{\"id\":3,\"w\":\"three\",\"x\":3}\n",
    );
    dir.write(
        "pipelines/grow.yaml",
        "version: 1\nname: grow\npipeline:\n  source: { type: jsonl, config: { path: ../in.jsonl } }\n  \
         sink: { type: sqlite, config: { path: ../t.db, table: items, create_table: true } }\n  \
         state: { type: file, config: { path: ../state } }\n  batch_size: 10\n  \
         schedule: { cron: \"*/1 * * * * *\", timezone: UTC }\n",
    );
    let server = crate::support::server::Server::start(&dir, &["pipelines"], None);
    // Three rows and the two `s` records before the rows with `w` and with `x`.
    let doc = server.wait_for("grow", "the rows and both schema changes written", |d| {
        d["records"].as_u64().is_some_and(|n| n >= 5)
    });
    let changes = doc["schema_changes"].as_object().expect("schema_changes");
    assert_eq!(changes.len(), 1, "{doc}");
    let (table, last) = changes.iter().next().expect("one table");
    assert!(table.ends_with("in.jsonl"), "{doc}");
    assert_eq!(
        last["changes"],
        serde_json::json!(["column `x` added, int"]),
        "{doc}"
    );
    assert_eq!(last["position"], serde_json::Value::Null, "{doc}");
    assert!(
        last["at"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{doc}"
    );
    assert_eq!(lite_columns(&dir.join("t.db"), "items"), ["id", "w", "x"]);
}

#[test]
fn a_file_sink_takes_the_rows_as_they_come() {
    // No table to alter: no `s` record among the rows.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("in.jsonl"),
        "{\"id\":1}\n{\"id\":2,\"w\":\"two\"}\n",
    )
    .expect("jsonl");
    pipeline(
        dir.path(),
        "schema_jsonl_plain",
        "{ type: jsonl, config: { path: ./in.jsonl } }",
        "{ type: jsonl, config: { path: ./out.jsonl } }",
        10,
        "",
    );
    output_of_success(&mut faucet(dir.path()), "the run");
    assert_eq!(
        super::jsonl(dir.path()),
        [
            serde_json::json!({"id": 1}),
            serde_json::json!({"id": 2, "w": "two"})
        ]
    );
}
