//! The csv source's bookmarks: resuming from every page's bookmark gives exactly the rest;
//! a bookmark that does not fit the file is an error naming it; a property test against
//! the `csv` crate's writer.

use faucet_connectors::files::CsvSourceConfig;
use faucet_core::Source;
use proptest::prelude::*;
use serde_json::json;

use crate::files_support::*;

/// A file with everything that moves byte offsets and line numbers: a BOM, CRLF and LF,
/// quoted line breaks, doubled quotes, blank lines, no final newline.
fn tricky_csv() -> Vec<u8> {
    let mut s = b"\xef\xbb\xbfid,text,n\r\n".to_vec();
    for i in 0..20 {
        let row = match i % 5 {
            0 => format!("{i},\"multi\r\nline {i}\",{i}\r\n"),
            1 => format!("{i},\"say \"\"{i}\"\"\",{i}\n"),
            2 => format!("{i},plain,{i}\r\n\r\n"),
            3 => format!("{i},\"a,b\nc\",{i}\n\n"),
            _ => format!("{i},\u{e9}t\u{e9},{i}\r\n"),
        };
        s.extend_from_slice(row.as_bytes());
    }
    s.extend_from_slice(b"20,last,20");
    s
}

#[tokio::test]
async fn resuming_from_every_bookmark_gives_exactly_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = tricky_csv();
    let path = write_file(dir.path(), "tricky.csv", &bytes);
    for buffer in [None, Some(1), Some(7)] {
        let source = csv_source(complete_csv(&path), buffer);
        let pages = read_pages(&source, None, 3).await.expect("read");
        let all = json_lines(&pages);
        assert_eq!(all.len(), 21);
        assert_eq!(all[0], r#"{"id":"0","text":"multi\r\nline 0","n":"0"}"#);
        assert_eq!(all[1], r#"{"id":"1","text":"say \"1\"","n":"1"}"#);
        assert_eq!(all[20], r#"{"id":"20","text":"last","n":"20"}"#);
        let mut seen = 0;
        for page in &pages {
            seen += page.len();
            let bookmark = page.bookmark().expect("every page has a bookmark").clone();
            assert_eq!(bookmark["records"], json!(seen));
            assert_eq!(bookmark["file"], json!(path.to_string_lossy()));
            // The line number is the line at the offset: one more than the LFs before it.
            let offset = bookmark["byte_offset"].as_u64().expect("offset") as usize;
            let lfs = bytes[..offset].iter().filter(|b| **b == b'\n').count() as u64;
            assert_eq!(bookmark["line"], json!(lfs + 1), "{bookmark}");
            let rest = read_pages(&source, Some(bookmark.clone()), 3)
                .await
                .expect("resume");
            assert_eq!(json_lines(&rest), all[seen..], "resume from {bookmark}");
            // Resumed pages carry bookmarks that continue the count.
            if let Some(last) = rest.last() {
                assert_eq!(last.bookmark(), pages.last().and_then(|p| p.bookmark()));
            }
        }
        assert_eq!(
            pages.last().and_then(|p| p.bookmark()).expect("last")["byte_offset"],
            json!(bytes.len())
        );
    }
}

#[tokio::test]
async fn the_conformance_battery_passes() {
    use faucet_core::testing::conformance;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "tricky.csv", &tricky_csv());
    conformance::config_is_strict::<CsvSourceConfig>(&json!({"path": "a.csv"}))
        .expect("strict config");
    for buffer in [None, Some(2)] {
        let source = csv_source(complete_csv(&path), buffer);
        for batch in [1, 3, 7, 100] {
            conformance::source_pages_are_bounded(&source, batch, 21)
                .await
                .expect("bounded pages");
        }
        conformance::source_bookmarks_round_trip(&source, 4)
            .await
            .expect("bookmark round trip");
    }
    let missing = csv_source(CsvSourceConfig::new(dir.path().join("missing.csv")), None);
    conformance::errors_not_panics("open a missing file", async move {
        missing.open(None, Default::default()).await.map(drop)
    })
    .await
    .expect("error, not panic");
}

#[tokio::test]
async fn a_bookmark_that_does_not_fit_the_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "data.csv", b"id,v\n1,a\n2,b\n3,c\n");
    let source = csv_source(CsvSourceConfig::new(&path), None);
    let pages = read_pages(&source, None, 2).await.expect("read");
    let after_two = pages[0].bookmark().expect("bookmark").clone();
    let mut position = after_two.clone();
    let fingerprint = position
        .as_object_mut()
        .and_then(|m| m.remove("fingerprint"));
    assert_eq!(
        position,
        json!({"file": path.to_string_lossy(), "byte_offset": 13, "line": 4, "records": 2})
    );
    assert_eq!(
        fingerprint.expect("a fingerprint")["window_bytes"],
        json!(65536)
    );

    // The file was replaced by a shorter one.
    write_file(dir.path(), "data.csv", b"id,v\n1,a\n");
    let message = bookmark_error(
        source
            .open(Some(after_two.clone()), Default::default())
            .await
            .err()
            .expect("beyond the end"),
    );
    assert!(message.contains("data.csv"), "{message}");
    assert!(
        message.contains("beyond the end of the file (9 bytes)"),
        "{message}"
    );

    // The file was replaced by one where the offset is inside a record.
    write_file(dir.path(), "data.csv", b"id,v\n1,aa\n2,b\n3,c\n");
    let message = bookmark_error(
        source
            .open(Some(after_two.clone()), Default::default())
            .await
            .err()
            .expect("not a boundary"),
    );
    assert!(message.contains("replaced or rewritten"), "{message}");

    // A bookmark of another file, and one that is not a file bookmark at all.
    let mut other = after_two.clone();
    other["file"] = json!("other.csv");
    let message = bookmark_error(
        source
            .open(Some(other), Default::default())
            .await
            .err()
            .expect("other file"),
    );
    assert!(
        message.contains("it was made for the file `other.csv`"),
        "{message}"
    );
    let message = bookmark_error(
        source
            .open(Some(json!({"lsn": "0/16B3748"})), Default::default())
            .await
            .err()
            .expect("foreign bookmark"),
    );
    assert!(
        message.contains("was not made by a csv source"),
        "{message}"
    );

    // A bookmark inside the header.
    let mut inside = after_two;
    inside["byte_offset"] = json!(2);
    let message = bookmark_error(
        source
            .open(Some(inside), Default::default())
            .await
            .err()
            .expect("in header"),
    );
    assert!(
        message.contains("before the first record (byte 5)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_second_run_resumes_and_picks_up_appended_records_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_file(dir.path(), "grow.csv", b"id\n1\n2\n3\n");
    let out = dir.path().join("out").join("grow.jsonl");
    let state = dir.path().join("state");
    let source = csv_source(CsvSourceConfig::new(&path), None);
    let first = run_to_jsonl(&source, &out, &state, 2).await.expect("run 1");
    assert_eq!((first.records_out, first.pages), (3, 2));
    let again = run_to_jsonl(&source, &out, &state, 2).await.expect("run 2");
    assert_eq!(again.records_out, 0);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("append");
    std::io::Write::write_all(&mut f, b"4\n5\n").expect("append");
    let third = run_to_jsonl(&source, &out, &state, 2).await.expect("run 3");
    assert_eq!(third.records_out, 2);
    assert_eq!(
        std::fs::read_to_string(&out).expect("out"),
        "{\"id\":\"1\"}\n{\"id\":\"2\"}\n{\"id\":\"3\"}\n{\"id\":\"4\"}\n{\"id\":\"5\"}\n"
    );
}

/// Records the `csv` crate writes (RFC 4180, quoting as needed) read back the same through
/// the csv source at any read buffer size and page size, and resume from any bookmark.
fn csv_field() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('a'),
            Just(','),
            Just('"'),
            Just('\n'),
            Just('\r'),
            Just(' '),
            Just('\u{e9}'),
            Just('\u{feff}'),
        ],
        0..6,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn records_written_by_the_csv_crate_read_back_exactly(
        width in 1usize..4,
        rows in proptest::collection::vec(proptest::collection::vec(csv_field(), 3), 1..12),
        crlf in any::<bool>(),
        buffer in 1usize..40,
        batch in 1usize..5,
    ) {
        let mut writer = csv::WriterBuilder::new()
            .terminator(if crlf { csv::Terminator::CRLF } else { csv::Terminator::Any(b'\n') })
            .from_writer(Vec::new());
        // A bare CR needs quotes, which the writer adds only with a CRLF terminator.
        let rows: Vec<Vec<String>> = rows
            .into_iter()
            .map(|r| {
                r[..width]
                    .iter()
                    .map(|f| if crlf { f.clone() } else { f.replace('\r', "a") })
                    .collect()
            })
            .collect();
        for row in &rows {
            writer.write_record(row).expect("csv write");
        }
        let bytes = writer.into_inner().expect("csv bytes");
        // A BOM at byte 0 is not data, by design (case 20); elsewhere it is.
        prop_assume!(!bytes.starts_with(b"\xef\xbb\xbf"));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_file(dir.path(), "p.csv", &bytes);
        let names: Vec<String> = (0..width).map(|i| format!("c{i}")).collect();
        let config: CsvSourceConfig = serde_json::from_value(json!({
            "path": path, "has_header": false, "columns": names,
        })).expect("config");
        let source = csv_source(config, Some(buffer));
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let pages = runtime.block_on(read_pages(&source, None, batch)).expect("read");
        let expected: Vec<String> = rows.iter().map(|r| {
            let obj: serde_json::Map<String, serde_json::Value> = names.iter().cloned()
                .zip(r.iter().map(|v| json!(v))).collect();
            serde_json::Value::Object(obj).to_string()
        }).collect();
        prop_assert_eq!(&json_lines(&pages), &expected);
        let mut seen = 0;
        for page in &pages {
            seen += page.len();
            let rest = runtime
                .block_on(read_pages(&source, page.bookmark().cloned(), batch))
                .expect("resume");
            prop_assert_eq!(&json_lines(&rest)[..], &expected[seen..]);
        }
    }
}
