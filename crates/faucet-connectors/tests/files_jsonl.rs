//! The jsonl source and sink: exact values, union schemas, torn lines, resume, appends,
//! torn-tail repair, directory creation, `check`.

use std::sync::Arc;

use faucet_connectors::files::{JsonlSink, JsonlSinkConfig, JsonlSource, JsonlSourceConfig};
use faucet_core::testing::conformance;
use faucet_core::{DataType, Field, PageBuilder, Schema, Sink, Source, Value};
use serde_json::json;

use crate::files_support::*;

fn jsonl_source(path: &std::path::Path) -> JsonlSource {
    JsonlSource::new(JsonlSourceConfig::new(path)).expect("config")
}

/// A source reading `path` as a complete file (`unterminated_last_line: read`).
fn complete_jsonl_source(path: &std::path::Path) -> JsonlSource {
    let mut config = JsonlSourceConfig::new(path);
    config.unterminated_last_line = faucet_connectors::files::UnterminatedLastLine::Read;
    JsonlSource::new(config).expect("config")
}

fn jsonl_sink(path: &std::path::Path) -> JsonlSink {
    JsonlSink::new(JsonlSinkConfig::new(path)).expect("config")
}

#[tokio::test]
async fn source_values_are_exact_and_a_page_holds_records_with_the_same_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        dir.path(),
        "in.jsonl",
        concat!(
            "{\"id\":1,\"amount\":12345678901234567890.123456789,\"tags\":[\"a\"]}\n",
            "\n",
            "{\"id\":9007199254740993,\"extra\":{\"k\":1.10},\"amount\":1.10}\r\n",
            "{\"id\":7,\"amount\":2,\"extra\":[]}\n",
            "{\"amount\":null,\"id\":-3,\"ok\":true,\"s\":\"x\\ny\"}",
        )
        .as_bytes(),
    );
    let pages = read_pages(&complete_jsonl_source(&path), None, 10)
        .await
        .expect("read");
    // A key a line lacks stays absent: the page ends where the keys change.
    assert_eq!(pages.iter().map(|p| p.len()).collect::<Vec<_>>(), [1, 2, 1]);
    assert_eq!(
        json_lines(&pages),
        [
            r#"{"id":1,"amount":12345678901234567890.123456789,"tags":["a"]}"#,
            r#"{"id":9007199254740993,"extra":{"k":1.10},"amount":1.10}"#,
            r#"{"id":7,"extra":[],"amount":2}"#,
            r#"{"amount":null,"id":-3,"ok":true,"s":"x\ny"}"#,
        ]
    );
    let rows: Vec<_> = pages[1].rows().collect();
    assert_eq!(rows[0].get("id"), Some(&Value::Int(9_007_199_254_740_993)));
    assert_eq!(
        rows[0].get("amount"),
        Some(&Value::numeric("1.10").expect("numeric"))
    );
    let types = |i: usize| -> Vec<DataType> {
        pages[i]
            .schema()
            .fields()
            .iter()
            .map(|f| f.data_type.clone())
            .collect()
    };
    assert_eq!(types(0), [DataType::Int, DataType::Numeric, DataType::Json]);
    assert_eq!(types(1), [DataType::Int, DataType::Json, DataType::Numeric]);
    assert_eq!(
        types(2),
        [
            DataType::Unknown,
            DataType::Int,
            DataType::Bool,
            DataType::Text
        ]
    );
    // Each page's bookmark is after its last record (and a blank line passed over); the
    // valid last line had no newline: the last bookmark is at the end of the file.
    assert_eq!(pages[0].bookmark().expect("bookmark")["line"], json!(3));
    let end = std::fs::metadata(&path).expect("meta").len();
    let last = pages[2].bookmark().expect("bookmark");
    assert_eq!(last["byte_offset"], json!(end));
    assert_eq!(last["line"], json!(5));
    assert_eq!(last["records"], json!(4));

    // A key given twice is an error naming the line and the key.
    let dup = write_file(
        dir.path(),
        "dup.jsonl",
        b"{\"a\":1}\n{\"a\":1,\"b\":2,\"a\":3}\n",
    );
    let (location, message) = data_error(
        read_pages(&jsonl_source(&dup), None, 10)
            .await
            .expect_err("duplicate key"),
    );
    assert_eq!(location, format!("{}:2", dup.display()));
    assert!(message.contains("the key `a` appears twice"), "{message}");
}

#[tokio::test]
async fn a_torn_last_line_is_an_error_naming_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        dir.path(),
        "torn.jsonl",
        b"{\"id\":1}\n{\"id\":2}\n{\"id\":3,\"na",
    );
    // By default the last line waits for its line break: two records, no error.
    let held = read_pages(&jsonl_source(&path), None, 10)
        .await
        .expect("held back");
    assert_eq!(json_lines(&held), [r#"{"id":1}"#, r#"{"id":2}"#]);
    // Told the file is complete, the torn line is an error.
    let source = complete_jsonl_source(&path);
    let mut stream = source
        .open(
            None,
            faucet_core::ReadOptions {
                batch_size: 2,
                ..Default::default()
            },
        )
        .await
        .expect("open");
    let first = stream.next_page().await.expect("page").expect("some");
    assert_eq!(json_lines(&[first]), [r#"{"id":1}"#, r#"{"id":2}"#]);
    let (location, message) = data_error(stream.next_page().await.expect_err("torn"));
    assert_eq!(location, format!("{}:3", path.display()));
    assert!(message.starts_with("the last line is torn"), "{message}");

    let bad = write_file(dir.path(), "bad.jsonl", b"{\"id\":1}\n[1,2]\n{\"id\":3}\n");
    let (location, message) = data_error(
        read_pages(&jsonl_source(&bad), None, 10)
            .await
            .expect_err("not an object"),
    );
    assert_eq!(location, format!("{}:2", bad.display()));
    assert_eq!(message, "expected a JSON object, found an array");

    let broken = write_file(
        dir.path(),
        "broken.jsonl",
        b"{\"id\":1}\n{\"id\" 2}\n{\"id\":3}\n",
    );
    let (location, message) = data_error(
        read_pages(&jsonl_source(&broken), None, 10)
            .await
            .expect_err("invalid json"),
    );
    assert_eq!(location, format!("{}:2", broken.display()));
    assert!(message.starts_with("not valid JSON"), "{message}");
}

#[tokio::test]
async fn source_resumes_from_every_bookmark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::from("\u{feff}");
    for i in 0..17 {
        text.push_str(&format!("{{\"i\":{i},\"v\":\"{}\"}}\n", "x".repeat(i)));
        if i % 4 == 0 {
            text.push_str("\r\n");
        }
    }
    let path = write_file(dir.path(), "r.jsonl", text.as_bytes());
    let source = jsonl_source(&path);
    conformance::source_bookmarks_round_trip(&source, 3)
        .await
        .expect("round trip");
    conformance::source_pages_are_bounded(&source, 4, 17)
        .await
        .expect("bounded");
    conformance::config_is_strict::<JsonlSourceConfig>(&json!({"path": "a.jsonl"}))
        .expect("strict");
    let pages = read_pages(&source, None, 5).await.expect("read");
    assert_eq!(json_lines(&pages)[0], r#"{"i":0,"v":""}"#);
    // A bookmark beyond the end of a replaced file names the file.
    let last = pages
        .last()
        .and_then(|p| p.bookmark())
        .expect("bookmark")
        .clone();
    write_file(dir.path(), "r.jsonl", b"{\"i\":0}\n");
    let message = bookmark_error(
        source
            .open(Some(last), Default::default())
            .await
            .err()
            .expect("replaced"),
    );
    assert!(
        message.contains("r.jsonl") && message.contains("beyond the end"),
        "{message}"
    );
}

fn typed_page(bookmark: serde_json::Value) -> faucet_core::Page {
    let schema = Arc::new(Schema::new(vec![
        Field::new("int", DataType::Int),
        Field::new("num", DataType::Numeric),
        Field::new("float", DataType::Float),
        Field::new("text", DataType::Text),
        Field::new("bytes", DataType::Bytes),
        Field::new("json", DataType::Json),
        Field::new("tz", DataType::TimestampTz),
        Field::new("nil", DataType::Text),
        Field::new("nan", DataType::Float),
    ]));
    let mut b = PageBuilder::new(schema, 2);
    b.push_row([
        Value::Int(i64::MIN),
        Value::numeric("12345678901234567890.123456789").expect("numeric"),
        Value::Float(0.1),
        Value::Text("quote \" backslash \\ tab \t é".into()),
        Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef]),
        Value::Json(faucet_core::Json::parse(r#"{"a":[1,2.50]}"#).expect("json")),
        Value::TimestampTz("2024-02-29T12:45:00.123456Z".into()),
        Value::Null,
        Value::Float(f64::NAN),
    ]);
    b.push_row([
        Value::Int(9_007_199_254_740_993),
        Value::numeric("1.10").expect("numeric"),
        Value::Float(1e300),
        Value::Text("".into()),
        Value::Bytes(Vec::new()),
        Value::json(json!(null)),
        Value::TimestampTz("infinity".into()),
        Value::Null,
        Value::Float(f64::NEG_INFINITY),
    ]);
    b.finish(Some(bookmark))
}

const TYPED_LINES: &str = concat!(
    r#"{"int":-9223372036854775808,"num":12345678901234567890.123456789,"float":0.1,"text":"quote \" backslash \\ tab \t é","bytes":"3q2+7w==","json":{"a":[1,2.50]},"tz":"2024-02-29T12:45:00.123456Z","nil":null,"nan":"NaN"}"#,
    "\n",
    r#"{"int":9007199254740993,"num":1.10,"float":1e+300,"text":"","bytes":"","json":null,"tz":"infinity","nil":null,"nan":"-Infinity"}"#,
    "\n",
);

#[tokio::test]
async fn sink_writes_exact_values_creates_directories_and_appends_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a").join("b").join("out.jsonl");
    let sink = jsonl_sink(&path);
    sink.check().await.expect("check with missing directories");
    assert!(!dir.path().join("a").exists(), "check creates nothing");

    let mut w = sink.open().await.expect("open");
    w.write(&typed_page(json!(1))).await.expect("write");
    w.flush().await.expect("flush");
    drop(w);
    assert_eq!(std::fs::read_to_string(&path).expect("read"), TYPED_LINES);

    // Reopen (a resumed run): appends, never truncates.
    let mut w = sink.open().await.expect("reopen");
    w.write(&typed_page(json!(2))).await.expect("write");
    w.write(&conformance::sample_page(&[1, 2], "v", json!(3)))
        .await
        .expect("write another schema");
    w.flush().await.expect("flush");
    drop(w);
    let expected = format!(
        "{TYPED_LINES}{TYPED_LINES}{}\n{}\n",
        r#"{"id":1,"v":"v1"}"#, r#"{"id":2,"v":"v2"}"#
    );
    assert_eq!(std::fs::read_to_string(&path).expect("read"), expected);

    // The jsonl source reads the sink's output back to the same lines.
    let pages = read_pages(&jsonl_source(&path), None, 2)
        .await
        .expect("read back");
    let back: Vec<_> = json_lines(&pages)
        .into_iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(&l).expect("json"))
        .collect();
    let want: Vec<_> = expected
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .collect();
    assert_eq!(back.len(), want.len());
    for (b, w) in back.iter().zip(&want) {
        for (k, v) in w.as_object().expect("object") {
            assert_eq!(&b[k], v, "field {k}");
        }
    }
}

#[tokio::test]
async fn sink_repairs_a_torn_last_line_before_appending() {
    capture_logs();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        dir.path(),
        "torn-sink.jsonl",
        b"{\"id\":1,\"v\":\"v1\"}\n{\"id\":2,\"v\":\"v2\"}\n{\"id\":3,\"v\":\"v",
    );
    let sink = jsonl_sink(&path);
    let mut w = sink.open().await.expect("open inspects");
    assert_eq!(
        w.holds_data().await.expect("holds data"),
        Some(true),
        "the complete lines count"
    );
    assert!(
        std::fs::read_to_string(&path)
            .expect("read")
            .ends_with("{\"id\":3,\"v\":\"v"),
        "open changes nothing: the repair waits for the first write"
    );
    w.write(&conformance::sample_page(&[3, 4], "v", json!(1)))
        .await
        .expect("write");
    w.flush().await.expect("flush");
    drop(w);
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        concat!(
            "{\"id\":1,\"v\":\"v1\"}\n{\"id\":2,\"v\":\"v2\"}\n",
            "{\"id\":3,\"v\":\"v3\"}\n{\"id\":4,\"v\":\"v4\"}\n"
        )
    );
    let warnings = warnings_mentioning("torn-sink.jsonl");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("dropped_bytes=14"), "{}", warnings[0]);

    // A file that is one torn line holds no data and is emptied by the first write; a clean
    // file is left alone (no warning).
    let whole = write_file(dir.path(), "all-torn.jsonl", b"{\"id\":");
    let whole_sink = jsonl_sink(&whole);
    let mut w = whole_sink.open().await.expect("open");
    assert_eq!(w.holds_data().await.expect("holds data"), Some(false));
    w.write(&conformance::sample_page(&[1], "v", json!(1)))
        .await
        .expect("write");
    w.flush().await.expect("flush");
    drop(w);
    assert_eq!(
        std::fs::read(&whole).expect("read"),
        b"{\"id\":1,\"v\":\"v1\"}\n"
    );
    let clean = write_file(dir.path(), "clean.jsonl", b"{\"id\":1}\n");
    drop(jsonl_sink(&clean).open().await.expect("open"));
    assert_eq!(std::fs::read(&clean).expect("read"), b"{\"id\":1}\n");
    assert!(warnings_mentioning("clean.jsonl").is_empty());
}

#[tokio::test]
async fn sink_check_reports_an_unusable_path_and_the_battery_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write_file(dir.path(), "plain-file", b"x");
    let under_a_file = jsonl_sink(&file.join("out.jsonl"));
    match under_a_file.check().await.expect_err("parent is a file") {
        faucet_core::FaucetError::Write { message, .. } => {
            assert!(message.contains("plain-file"), "{message}")
        }
        other => panic!("expected a write error, got {other}"),
    }
    assert!(under_a_file.open().await.is_err());
    let a_dir = jsonl_sink(dir.path());
    assert!(a_dir.check().await.is_err(), "the output is a directory");

    conformance::config_is_strict::<JsonlSinkConfig>(&json!({"path": "out.jsonl"}))
        .expect("strict");
    let path = dir.path().join("battery.jsonl");
    let sink = jsonl_sink(&path);
    let read_back = || {
        let path = path.clone();
        async move {
            std::fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).expect("json line"))
                .collect::<Vec<serde_json::Value>>()
        }
    };
    conformance::sink_flush_is_durable(&sink, read_back)
        .await
        .expect("flush is durable");
    conformance::sink_guarantee_is_truthful(&sink, read_back)
        .await
        .expect("truthful guarantee");
    assert_eq!(
        sink.capabilities(),
        faucet_core::SinkCapabilities::default()
    );

    let input = write_file(
        dir.path(),
        "cancel.jsonl",
        b"{\"i\":1}\n{\"i\":2}\n{\"i\":3}\n{\"i\":4}\n",
    );
    conformance::cancellation_flushes(&jsonl_source(&input), &sink, 2, read_back)
        .await
        .expect("cancellation flushes");
}

#[tokio::test]
async fn source_pages_say_how_many_of_the_files_bytes_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::new();
    for i in 0..42 {
        text.push_str(&format!("{{\"id\":{i},\"name\":\"n{i}\"}}\n"));
    }
    let path = write_file(dir.path(), "extent.jsonl", text.as_bytes());
    let pages = read_pages(&jsonl_source(&path), None, 5)
        .await
        .expect("read");
    assert_eq!(pages.len(), 9);
    assert_byte_extents(&pages, text.len() as u64);
}
