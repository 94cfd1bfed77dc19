//! The jsonl sink with a routed `path` (`out/{table}.jsonl`): each source table's change
//! records in their own file, a torn tail repaired at reopen, unsafe table names refused,
//! many tables through a small open-file bound, the lost-bookmark scan, per-target counts.

use std::path::Path;
use std::sync::Arc;

use faucet_connectors::files::{JsonlSink, JsonlSinkConfig};
use faucet_core::change::record_schema;
use faucet_core::testing::conformance;
use faucet_core::{DataType, FaucetError, Field, Page, PageBuilder, Schema, Sink, Value};
use serde_json::json;

use crate::files_support::*;

/// A page of insert records `(source table, id)`, change records as a CDC source makes them.
fn changes(records: &[(&str, i64)], bookmark: serde_json::Value) -> Page {
    let schema = record_schema(vec![Field::new("lsn", DataType::Text)], vec![]);
    let row = Arc::new(Schema::new(vec![Field::new("id", DataType::Int)]));
    let mut b = PageBuilder::new(schema, records.len());
    for (table, id) in records {
        b.push_row([
            Value::Text("c".into()),
            Value::Text((*table).into()),
            Value::Text(format!("0/{id}").into()),
            Value::Null,
            Value::Null,
            Value::row(row.clone(), vec![Value::Int(*id)]),
        ]);
    }
    b.finish(Some(bookmark))
}

fn routed(path: &Path, max_open: usize) -> JsonlSink {
    let mut config = JsonlSinkConfig::new(path);
    config.max_open_files = max_open;
    JsonlSink::new(config).expect("config")
}

/// The `after.id` of every line of `path`, with the line's `table`.
fn ids(path: &Path) -> Vec<(String, i64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            (
                v["table"].as_str().expect("table").to_owned(),
                v["after"]["id"].as_i64().expect("id"),
            )
        })
        .collect()
}

#[tokio::test]
async fn each_table_goes_to_its_own_file_and_a_torn_tail_is_repaired_at_reopen() {
    capture_logs();
    let dir = tempfile::tempdir().expect("tempdir");
    let template = dir.path().join("out").join("{schema}_{table}.jsonl");
    let sink = routed(&template, 64);
    sink.check().await.expect("check");
    let mut w = sink.open().await.expect("open");
    assert_eq!(w.holds_data().await.expect("holds"), Some(false));
    w.write(&changes(
        &[
            ("public.a", 1),
            ("public.b", 2),
            ("public.a", 3),
            ("shop.a", 4),
        ],
        json!(1),
    ))
    .await
    .expect("write");
    let mut counts = w.written_targets().to_vec();
    counts.sort();
    let file = |name: &str| dir.path().join("out").join(name);
    let label = |name: &str| file(name).display().to_string();
    assert_eq!(
        counts,
        [
            (label("public_a.jsonl"), 2),
            (label("public_b.jsonl"), 1),
            (label("shop_a.jsonl"), 1),
        ]
    );
    w.flush().await.expect("flush");
    drop(w);
    assert_eq!(
        ids(&file("public_a.jsonl")),
        [("public.a".to_owned(), 1), ("public.a".to_owned(), 3)]
    );
    assert_eq!(ids(&file("public_b.jsonl")), [("public.b".to_owned(), 2)]);
    assert_eq!(ids(&file("shop_a.jsonl")), [("shop.a".to_owned(), 4)]);

    // A crash tore the last line of one file: the reopened sink truncates it before its
    // table's next record, and leaves the others alone.
    let torn = file("public_b.jsonl");
    let mut bytes = std::fs::read(&torn).expect("read");
    bytes.extend_from_slice(b"{\"op\":\"c\",\"tab");
    std::fs::write(&torn, bytes).expect("tear");
    let mut w = sink.open().await.expect("reopen");
    assert_eq!(w.holds_data().await.expect("holds"), Some(true));
    w.write(&changes(&[("public.b", 5), ("public.a", 6)], json!(2)))
        .await
        .expect("write after the tear");
    w.flush().await.expect("flush");
    drop(w);
    assert_eq!(
        ids(&torn),
        [("public.b".to_owned(), 2), ("public.b".to_owned(), 5)]
    );
    assert_eq!(ids(&file("public_a.jsonl")).len(), 3);
    let warnings = warnings_mentioning("public_b.jsonl");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("dropped_bytes=14"), "{}", warnings[0]);
}

#[tokio::test]
async fn a_table_name_that_would_escape_the_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = routed(&dir.path().join("out").join("{table}.jsonl"), 64);
    for bad in [
        "public.../x",
        "../x",
        "public.a/b",
        "public.t\u{0}",
        "public.",
    ] {
        let mut w = sink.open().await.expect("open");
        let e = w
            .write(&changes(&[("public.ok", 1), (bad, 2)], json!(1)))
            .await
            .expect_err(bad);
        let (location, message) = data_error(e);
        assert!(location.starts_with("table \""), "{bad:?}: {location}");
        assert!(message.contains("cannot name a file"), "{bad:?}: {message}");
    }
    let mut names: Vec<_> = std::fs::read_dir(dir.path().join("out"))
        .expect("out exists")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    names.sort();
    assert_eq!(names, ["ok.jsonl"], "nothing outside the template's file");
    assert!(!dir.path().join("x.jsonl").exists());

    // A plain record (a csv or query row) names no table.
    let mut w = sink.open().await.expect("open");
    let e = w
        .write(&conformance::sample_page(&[1], "v", json!(1)))
        .await
        .expect_err("plain row");
    let (location, message) = data_error(e);
    assert_eq!(location, "record 1 of the page");
    assert!(message.contains("not change records"), "{message}");

    // A bad template is a config error at `path`.
    let e = JsonlSink::new(JsonlSinkConfig::new("out/{tabel}.jsonl")).expect_err("unknown");
    assert!(
        matches!(&e, FaucetError::Config { field, .. } if field == "path"),
        "{e}"
    );
    // `{{` is a literal brace: one file.
    let literal = dir.path().join("lit{{1}}.jsonl");
    let one_file = routed(&literal, 64);
    let mut w = one_file.open().await.expect("open");
    w.write(&changes(&[("public.a", 1), ("public.b", 2)], json!(1)))
        .await
        .expect("write");
    w.flush().await.expect("flush");
    assert_eq!(ids(&dir.path().join("lit{1}.jsonl")).len(), 2);

    // Two source tables rendering one file (`{table}` of `public.a` and `shop.a`, as patterns
    // can match): the second is refused naming both, and its record goes nowhere.
    let shared = routed(&dir.path().join("shared").join("{table}.jsonl"), 64);
    let mut w = shared.open().await.expect("open");
    let e = w
        .write(&changes(&[("public.a", 1), ("shop.a", 2)], json!(1)))
        .await
        .expect_err("two tables in one file");
    let (location, message) = data_error(e);
    assert_eq!(location, "table shop.a");
    assert!(message.contains("holds table public.a's"), "{message}");
    drop(w);
    let file = dir.path().join("shared").join("a.jsonl");
    assert!(ids(&file).iter().all(|(table, _)| table == "public.a"));
}

#[tokio::test]
async fn two_hundred_tables_through_four_open_files_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = routed(&dir.path().join("t").join("{table}.jsonl"), 4);
    let tables: Vec<String> = (0..200).map(|t| format!("public.t{t:03}")).collect();
    let mut w = sink.open().await.expect("open");
    // Three pages, each with every table interleaved, so files are closed and reopened
    // within and across pages.
    let mut id = 0;
    for page in 0..3 {
        let mut records = Vec::new();
        for _ in 0..2 {
            for t in &tables {
                id += 1;
                records.push((t.as_str(), id));
            }
        }
        w.write(&changes(&records, json!(page)))
            .await
            .expect("write");
        assert_eq!(w.written_targets().len(), 200);
        assert!(w.written_targets().iter().all(|(_, n)| *n == 2));
        w.flush().await.expect("flush");
    }
    drop(w);
    let mut total = 0;
    for (n, t) in tables.iter().enumerate() {
        let lines = ids(&dir.path().join("t").join(format!("t{n:03}.jsonl")));
        assert_eq!(lines.len(), 6, "{t}");
        assert!(lines.iter().all(|(table, _)| table == t), "{t}: {lines:?}");
        let mut sorted = lines.clone();
        sorted.sort_by_key(|(_, id)| *id);
        assert_eq!(sorted, lines, "{t}: in order");
        total += lines.len();
    }
    assert_eq!(total, 1200);
}

#[tokio::test]
async fn the_lost_bookmark_scan_sees_files_the_template_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let sink = routed(&out.join("{table}.jsonl"), 64);
    let mut w = sink.open().await.expect("open");
    assert_eq!(w.holds_data().await.expect("no directory"), Some(false));
    std::fs::create_dir_all(&out).expect("mkdir");
    write_file(&out, "other.txt", b"{\"x\":1}\n");
    write_file(&out, "torn.jsonl", b"{\"op\":");
    assert_eq!(
        w.holds_data().await.expect("unrelated and torn files"),
        Some(false)
    );
    write_file(&out, "orders.jsonl", b"{\"op\":\"c\"}\n");
    assert_eq!(w.holds_data().await.expect("a table's file"), Some(true));

    // A placeholder in a directory: unknown.
    let nested = routed(&dir.path().join("{schema}").join("{table}.jsonl"), 64);
    let mut w = nested.open().await.expect("open");
    assert_eq!(w.holds_data().await.expect("nested"), None);
}
