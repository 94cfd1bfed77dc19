//! The csv source: cases 19 (quoted line breaks) and 20 (UTF-8 BOM), malformed rows,
//! null values and declared types — each asserting the exact records.

use base64::Engine as _;
use faucet_connectors::files::{ColumnType, Columns, CsvSourceConfig};
use faucet_core::{FaucetError, Source, Value};
use serde_json::json;

use crate::files_support::*;

/// A CSV with quoted commas, doubled quotes and newlines (LF and CRLF) inside quoted fields
/// and no final newline, byte for byte.
const C19: &[u8] = b"id,name,note,amount\r\n1,\"Widget, large\",\"line one\nline two\",10.50\r\n2,\"He said \"\"hi\"\"\",\"\",0\r\n3,plain,\"crlf inside\r\nstill row 3\",7\r\n4,last,no-final-newline,8";
const C19_BASE64: &str = "aWQsbmFtZSxub3RlLGFtb3VudA0KMSwiV2lkZ2V0LCBsYXJnZSIsImxpbmUgb25lCmxpbmUgdHdvIiwxMC41MA0KMiwiSGUgc2FpZCAiImhpIiIiLCIiLDANCjMscGxhaW4sImNybGYgaW5zaWRlDQpzdGlsbCByb3cgMyIsNw0KNCxsYXN0LG5vLWZpbmFsLW5ld2xpbmUsOA==";
const C19_JSONL: &str = concat!(
    r#"{"id":"1","name":"Widget, large","note":"line one\nline two","amount":"10.50"}"#,
    "\n",
    r#"{"id":"2","name":"He said \"hi\"","note":"","amount":"0"}"#,
    "\n",
    r#"{"id":"3","name":"plain","note":"crlf inside\r\nstill row 3","amount":"7"}"#,
    "\n",
    r#"{"id":"4","name":"last","note":"no-final-newline","amount":"8"}"#,
    "\n",
);

#[tokio::test]
async fn case_19_quoted_line_breaks_give_exactly_four_records_at_any_buffer_size() {
    capture_logs();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(C19_BASE64)
            .expect("base64"),
        C19,
        "the test input is the case's exact bytes"
    );
    assert_eq!(C19.len(), 154);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "c19.csv", C19);
    // Default buffer, the case's 16 bytes, and sizes that cut the BOM-free header, the CR LF
    // pair and the doubled quotes at every possible place.
    for (i, buffer) in [None, Some(16), Some(1), Some(2), Some(3), Some(5), Some(7)]
        .into_iter()
        .enumerate()
    {
        for batch in [10_000, 3, 1] {
            let source = csv_source(complete_csv(&path), buffer);
            let out = dir.path().join(format!("out-{i}-{batch}.jsonl"));
            let state = dir.path().join(format!("state-{i}-{batch}"));
            let summary = run_to_jsonl(&source, &out, &state, batch)
                .await
                .expect("run");
            assert_eq!(summary.records_out, 4);
            let written = std::fs::read_to_string(&out).expect("output");
            assert_eq!(written, C19_JSONL, "buffer {buffer:?}, batch {batch}");
        }
    }
    // The values themselves: CR LF (0D 0A) kept in record 3, a lone LF in record 1, and the
    // quoted "" of record 2 is the empty string, not null — also when "" is a null value.
    let mut config = complete_csv(&path);
    config.null_values = vec![String::new()];
    let pages = read_pages(&csv_source(config, Some(16)), None, 10)
        .await
        .expect("read");
    let rows: Vec<_> = pages[0].rows().collect();
    assert_eq!(rows.len(), 4);
    assert_eq!(
        rows[0].get("note"),
        Some(&Value::Text("line one\nline two".into()))
    );
    assert_eq!(rows[1].get("note"), Some(&Value::Text("".into())));
    match rows[2].get("note") {
        Some(Value::Text(t)) => assert!(t.as_bytes().windows(2).any(|w| w == [0x0d, 0x0a])),
        other => panic!("record 3 note: {other:?}"),
    }
    assert!(
        warnings_mentioning("c19.csv").is_empty(),
        "no warning may be logged: {:?}",
        warnings_mentioning("c19.csv")
    );
}

#[tokio::test]
async fn case_20_bom_and_no_bom_files_give_identical_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let with_bom = write_file(
        dir.path(),
        "c20.csv",
        b"\xef\xbb\xbfid,name\r\n1,alpha\r\n2,\"beta\"\r\n",
    );
    assert_eq!(std::fs::metadata(&with_bom).expect("meta").len(), 31);
    let without = write_file(
        dir.path(),
        "c20-nobom.csv",
        b"id,name\r\n1,alpha\r\n2,\"beta\"\r\n",
    );
    let expected = "{\"id\":\"1\",\"name\":\"alpha\"}\n{\"id\":\"2\",\"name\":\"beta\"}\n";
    for buffer in [None, Some(1), Some(2), Some(4)] {
        let mut outputs = Vec::new();
        for (n, path) in [&with_bom, &without].into_iter().enumerate() {
            let out = dir.path().join(format!("c20-{n}-{buffer:?}.jsonl"));
            let state = dir.path().join(format!("state-{n}-{buffer:?}"));
            run_to_jsonl(
                &csv_source(CsvSourceConfig::new(path), buffer),
                &out,
                &state,
                1,
            )
            .await
            .expect("run");
            outputs.push(std::fs::read(&out).expect("output"));
        }
        assert_eq!(outputs[0], outputs[1], "buffer {buffer:?}");
        assert_eq!(String::from_utf8_lossy(&outputs[0]), expected);
        assert!(!String::from_utf8_lossy(&outputs[0]).contains('\u{feff}'));
    }
    // The schema's first name is `id`, so a declared type for `id` applies.
    let mut config = CsvSourceConfig::new(&with_bom);
    config.columns = Some(Columns::new([("id".to_owned(), ColumnType::Int)]));
    let pages = read_pages(&csv_source(config, None), None, 10)
        .await
        .expect("read");
    assert_eq!(
        json_lines(&pages),
        [r#"{"id":1,"name":"alpha"}"#, r#"{"id":2,"name":"beta"}"#]
    );
}

#[tokio::test]
async fn a_bom_inside_the_data_is_preserved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        dir.path(),
        "inner-bom.csv",
        b"id,name\n\xef\xbb\xbf1,alpha\n2,\xef\xbb\xbfbeta\n",
    );
    for buffer in [None, Some(1)] {
        let pages = read_pages(&csv_source(CsvSourceConfig::new(&path), buffer), None, 1)
            .await
            .expect("read");
        assert_eq!(
            json_lines(&pages),
            [
                "{\"id\":\"\u{feff}1\",\"name\":\"alpha\"}",
                "{\"id\":\"2\",\"name\":\"\u{feff}beta\"}"
            ]
        );
        // Resuming right before a record that starts with a BOM keeps it too.
        let source = csv_source(CsvSourceConfig::new(&path), buffer);
        let header_end =
            json!({"file": path.to_string_lossy(), "byte_offset": 8, "line": 2, "records": 0});
        let pages = read_pages(&source, Some(header_end), 1)
            .await
            .expect("resume");
        assert_eq!(
            json_lines(&pages)[0],
            "{\"id\":\"\u{feff}1\",\"name\":\"alpha\"}"
        );
    }
}

#[tokio::test]
async fn a_ragged_row_is_an_error_naming_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Line 2-3 is one record (quoted line break); the short record starts on line 4.
    let path = write_file(dir.path(), "ragged.csv", b"a,b\n\"x\ny\",1\n3\n4,5\n");
    let source = csv_source(CsvSourceConfig::new(&path), None);
    let mut stream = source
        .open(
            None,
            faucet_core::ReadOptions {
                batch_size: 1,
                ..Default::default()
            },
        )
        .await
        .expect("open");
    let first = stream.next_page().await.expect("page 1").expect("a page");
    assert_eq!(json_lines(&[first]), [r#"{"a":"x\ny","b":"1"}"#]);
    let (location, message) = data_error(stream.next_page().await.expect_err("ragged"));
    assert_eq!(location, format!("{}:4", path.display()));
    assert_eq!(message, "expected 2 fields (as in the header), found 1");
    // The stream does not go on past the bad record.
    assert!(stream.next_page().await.is_err());

    let long = write_file(dir.path(), "long.csv", b"a,b\r\n1,2\r\n3,4,5\r\n");
    let e = read_pages(&csv_source(CsvSourceConfig::new(&long), Some(3)), None, 10)
        .await
        .expect_err("long row");
    let (location, message) = data_error(e);
    assert_eq!(location, format!("{}:3", long.display()));
    assert_eq!(message, "expected 2 fields (as in the header), found 3");

    // Through a pipeline: the error surfaces, the good page before it is in the sink.
    let out = dir.path().join("ragged.jsonl");
    let e = run_to_jsonl(&source, &out, &dir.path().join("state"), 1)
        .await
        .expect_err("run fails");
    assert_eq!(data_error(e).0, format!("{}:4", path.display()));
    assert_eq!(
        std::fs::read_to_string(&out).expect("out"),
        "{\"a\":\"x\\ny\",\"b\":\"1\"}\n"
    );
}

#[tokio::test]
async fn invalid_utf8_is_an_error_naming_file_line_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "latin1.csv", b"id,city\n1,Paris\n2,K\xf6ln\n");
    let e = read_pages(&csv_source(CsvSourceConfig::new(&path), None), None, 10)
        .await
        .expect_err("invalid utf-8");
    let (location, message) = data_error(e);
    assert_eq!(location, format!("{}:3", path.display()));
    assert_eq!(
        message,
        "column 2 `city`: invalid UTF-8 at byte 1 of the field"
    );

    let header = write_file(dir.path(), "bad-header.csv", b"id,\xff\n1,2\n");
    let (location, message) = data_error(
        read_pages(&csv_source(CsvSourceConfig::new(&header), None), None, 10)
            .await
            .expect_err("bad header"),
    );
    assert_eq!(location, format!("{}:1", header.display()));
    assert!(message.contains("header column 2"), "{message}");
}

#[tokio::test]
async fn null_values_match_unquoted_fields_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        dir.path(),
        "nulls.csv",
        b"id,v,n\n1,NA,\n2,,7\n3,\"\",\"\"\n4,\"NA\",8\n5,na,9\n",
    );
    let mut config = CsvSourceConfig::new(&path);
    config.null_values = vec![String::new(), "NA".into()];
    config.columns = Some(Columns::new([("n".to_owned(), ColumnType::Int)]));
    // The quoted "" in the int column is not null, so it must be a type error...
    let e = read_pages(&csv_source(config.clone(), Some(2)), None, 10)
        .await
        .expect_err("quoted empty int");
    let (location, message) = data_error(e);
    assert_eq!(location, format!("{}:4", path.display()));
    assert_eq!(
        message,
        "column 3 `n`: `` is not an int (a whole number within 64 bits)"
    );
    // ...and without that row every value is exactly as specified.
    let path = write_file(
        dir.path(),
        "nulls2.csv",
        b"id,v,n\n1,NA,\n2,,7\n3,\"\",8\n4,\"NA\",8\n5,na,9\n",
    );
    config.path = path;
    for buffer in [None, Some(1)] {
        let pages = read_pages(&csv_source(config.clone(), buffer), None, 2)
            .await
            .expect("read");
        assert_eq!(
            json_lines(&pages),
            [
                r#"{"id":"1","v":null,"n":null}"#,
                r#"{"id":"2","v":null,"n":7}"#,
                r#"{"id":"3","v":"","n":8}"#,
                r#"{"id":"4","v":"NA","n":8}"#,
                r#"{"id":"5","v":"na","n":9}"#,
            ]
        );
    }
}

#[tokio::test]
async fn declared_types_are_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(
        dir.path(),
        "typed.csv",
        concat!(
            "id,amount,rate,ok,day,at,at_tz,doc,label\n",
            "1,12345678901234567890.123456789,0.1,true,2024-02-29,2024-02-29 13:45:00.123456,2024-02-29T13:45:00+01:00,\"{\"\"a\"\": [1, 2.50]}\",x\n",
            "-9223372036854775808,1.10,1e300,F,2013-01-01,2013-01-01T06:00:00,2013-01-01 06:00:00.5Z,null,\n",
            "9223372036854775807,-0.0001,-0.0,yes,infinity,-infinity,2013-01-01T06:00:00Z,[],y\n",
        )
        .as_bytes(),
    );
    let mut config = CsvSourceConfig::new(&path);
    config.columns = Some(
        serde_json::from_value(json!({
            "id": "int", "amount": "numeric", "rate": "float", "ok": "bool", "day": "date",
            "at": "timestamp", "at_tz": "timestamptz", "doc": "json"
        }))
        .expect("columns"),
    );
    let pages = read_pages(&csv_source(config.clone(), None), None, 10)
        .await
        .expect("read");
    assert_eq!(
        json_lines(&pages),
        [
            r#"{"id":1,"amount":12345678901234567890.123456789,"rate":0.1,"ok":true,"day":"2024-02-29","at":"2024-02-29T13:45:00.123456","at_tz":"2024-02-29T12:45:00Z","doc":{"a":[1,2.50]},"label":"x"}"#,
            r#"{"id":-9223372036854775808,"amount":1.10,"rate":1e+300,"ok":false,"day":"2013-01-01","at":"2013-01-01T06:00:00","at_tz":"2013-01-01T06:00:00.5Z","doc":null,"label":""}"#,
            r#"{"id":9223372036854775807,"amount":-0.0001,"rate":-0.0,"ok":true,"day":"infinity","at":"-infinity","at_tz":"2013-01-01T06:00:00Z","doc":[],"label":"y"}"#,
        ]
    );
    let schema = pages[0].schema();
    assert_eq!(schema.fields()[1].data_type, faucet_core::DataType::Numeric);
    assert_eq!(schema.fields()[8].data_type, faucet_core::DataType::Text);

    // A value that does not parse is an error naming the file, line and column.
    let bad = write_file(
        dir.path(),
        "typed-bad.csv",
        b"id,amount,rate,ok,day,at,at_tz,doc,label\n1,1.5e,0,t,2024-01-01,2024-01-01 00:00:00,2024-01-01T00:00:00Z,1,x\n",
    );
    config.path = bad.clone();
    let (location, message) = data_error(
        read_pages(&csv_source(config, None), None, 10)
            .await
            .expect_err("bad numeric"),
    );
    assert_eq!(location, format!("{}:2", bad.display()));
    assert!(
        message.starts_with("column 2 `amount`: `1.5e` is not a numeric"),
        "{message}"
    );
}

#[tokio::test]
async fn no_header_uses_the_declared_names_and_other_dialects_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "semi.csv", b"1;'a;b';'it''s'\r\n2;plain;''\r\n");
    let config: CsvSourceConfig = serde_json::from_value(json!({
        "path": path, "has_header": false, "delimiter": ";", "quote": "'",
        "columns": [{"id": "int"}, "name", "note"]
    }))
    .expect("config");
    let pages = read_pages(&csv_source(config, Some(3)), None, 10)
        .await
        .expect("read");
    assert_eq!(
        json_lines(&pages),
        [
            r#"{"id":1,"name":"a;b","note":"it's"}"#,
            r#"{"id":2,"name":"plain","note":""}"#
        ]
    );
}

#[tokio::test]
async fn header_problems_are_reported_before_any_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "h.csv", b"id,name\n1,a\n");
    let mut config = CsvSourceConfig::new(&path);
    config.columns = Some(Columns::new([("ID".to_owned(), ColumnType::Int)]));
    let source = csv_source(config, None);
    match source.check().await.expect_err("missing column") {
        FaucetError::Config { field, message } => {
            assert_eq!(field, "columns");
            assert!(message.contains("`ID` is not a column of"), "{message}");
            assert!(message.contains("(its header: id, name)"), "{message}");
        }
        other => panic!("expected a config error, got {other}"),
    }

    let dup = write_file(dir.path(), "dup.csv", b"a,b,a\n1,2,3\n");
    let (location, message) = data_error(
        csv_source(CsvSourceConfig::new(&dup), None)
            .check()
            .await
            .expect_err("duplicate"),
    );
    assert_eq!(location, format!("{}:1", dup.display()));
    assert_eq!(message, "the header names `a` twice (columns 1 and 3)");

    let missing = dir.path().join("nope.csv");
    match csv_source(CsvSourceConfig::new(&missing), None)
        .check()
        .await
        .expect_err("missing file")
    {
        FaucetError::Read { message, .. } => {
            assert!(message.contains("nope.csv"), "{message}")
        }
        other => panic!("expected a read error, got {other}"),
    }
}

#[tokio::test]
async fn empty_and_header_only_files_have_no_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, bytes) in [
        ("empty.csv", &b""[..]),
        ("header.csv", b"a,b\n"),
        ("bom-header.csv", b"\xef\xbb\xbfa,b"),
        ("blank-lines.csv", b"a,b\r\n\r\n\n"),
    ] {
        let path = write_file(dir.path(), name, bytes);
        let source = csv_source(CsvSourceConfig::new(&path), None);
        source.check().await.expect("check");
        let pages = read_pages(&source, None, 10).await.expect("read");
        assert!(pages.is_empty(), "{name}");
    }
}

#[tokio::test]
async fn pages_say_how_many_of_the_files_bytes_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut csv = String::from("\u{feff}id,name\n");
    for i in 0..95 {
        csv.push_str(&format!("{i},\"name {i}\"\n"));
    }
    let path = write_file(dir.path(), "extent.csv", csv.as_bytes());
    let size = csv.len() as u64;
    let source = csv_source(complete_csv(&path), Some(64));
    let pages = read_pages(&source, None, 10).await.expect("read");
    assert_eq!(pages.len(), 10);
    assert_byte_extents(&pages, size);
    // A resumed read goes on from the bookmark's offset, of the same size.
    let from = pages[4].bookmark().cloned();
    let rest = read_pages(&source, from, 10).await.expect("resume");
    assert_eq!(rest.len(), 5);
    assert_byte_extents(&rest, size);
    assert_eq!(
        rest[0].extent().map(|e| e.done),
        pages[5].extent().map(|e| e.done)
    );
}
