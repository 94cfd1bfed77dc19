//! The file path against a hostile tester, through the built binary: a bookmark applied to
//! another file, a sink repair that would destroy a valid record, an unclosed CSV quote, a
//! partial last line from a writer still appending, oversized fields and lines, FIFOs and
//! devices as paths, JSON Lines to stdout, and JSON Lines keys kept as given.

use serde_json::{Value, json};

use crate::support::Dir;

/// A pipeline `name` reading a `source` file at `input` (with `source_extra`, e.g.
/// `, has_header: false`) into the jsonl file `output`, with a file state store at `./state`
/// (or `state: memory` when `memory_state`).
fn pipeline(
    source: &str,
    input: &str,
    source_extra: &str,
    output: &str,
    memory_state: bool,
) -> String {
    let state = if memory_state {
        "{ type: memory }"
    } else {
        "{ type: file, config: { path: ./state } }"
    };
    format!(
        "version: 1\nname: safety\npipeline:\n  source: {{ type: {source}, config: {{ path: \"{input}\"{source_extra} }} }}\n  \
         sink: {{ type: jsonl, config: {{ path: \"{output}\" }} }}\n  state: {state}\n  batch_size: 2\n"
    )
}

/// A fresh directory with `data` in `in.<source>` and, in `p.yaml`, a [`pipeline`] reading
/// it (with `source_extra`) into `output`.
fn prepared(
    source: &str,
    data: impl AsRef<[u8]>,
    source_extra: &str,
    output: &str,
    memory_state: bool,
) -> Dir {
    let dir = Dir::new();
    let input = format!("./in.{source}");
    dir.write(&input, data);
    dir.write(
        "p.yaml",
        pipeline(source, &input, source_extra, output, memory_state),
    );
    dir
}

/// [`prepared`] into `./out.jsonl` with the file state store and no source options.
fn into_jsonl(source: &str, data: impl AsRef<[u8]>) -> Dir {
    prepared(source, data, "", "./out.jsonl", false)
}

/// The stored bookmark (`null` when none was persisted), out of the state entry.
fn bookmark(dir: &Dir) -> Value {
    dir.read("state/safety.json")
        .map(|b| {
            crate::support::bookmark_of(serde_json::from_slice(&b).expect("state file is JSON"))
        })
        .unwrap_or(Value::Null)
}

/// `{"id": id, "v": v}` records.
fn records(rows: &[(&str, &str)]) -> Vec<Value> {
    rows.iter()
        .map(|(id, v)| json!({"id": id, "v": v}))
        .collect()
}

#[test]
fn a_bookmark_is_refused_on_another_file_with_the_same_name() {
    let dir = Dir::new();
    dir.write("2023/orders.csv", "id,v\n1,a\n2,b\n3,c\n");
    dir.write("2024/orders.csv", "id,v\n4,d\n5,e\n6,f\n7,g\n");
    dir.write(
        "p.yaml",
        pipeline("csv", "./2023/orders.csv", "", "./out.jsonl", false),
    );
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert!(
        bookmark(&dir)["fingerprint"]["head_sha256"].is_string(),
        "{}",
        bookmark(&dir)
    );
    dir.write(
        "p.yaml",
        pipeline("csv", "./2024/orders.csv", "", "./out.jsonl", false),
    );
    dir.faucet(&["run", "p.yaml"]).expect_code(1).stderr_has(&[
        "2023/orders.csv",
        "2024/orders.csv",
        "another file",
        "state key",
    ]);
    assert_eq!(
        dir.jsonl("out.jsonl"),
        records(&[("1", "a"), ("2", "b"), ("3", "c")]),
        "nothing of 2024/orders.csv was delivered, nothing skipped"
    );
}

#[test]
fn a_bookmark_is_refused_on_a_file_replaced_in_place_with_aligned_rows() {
    for source in ["csv", "jsonl"] {
        let (first, second) = if source == "csv" {
            ("id,v\n1,a\n2,b\n3,c\n", "id,v\n4,d\n5,e\n6,f\n7,g\n")
        } else {
            (
                "{\"id\":\"1\",\"v\":\"a\"}\n{\"id\":\"2\",\"v\":\"b\"}\n",
                "{\"id\":\"4\",\"v\":\"d\"}\n{\"id\":\"5\",\"v\":\"e\"}\n{\"id\":\"6\",\"v\":\"f\"}\n",
            )
        };
        let dir = into_jsonl(source, first);
        let input = format!("./in.{source}");
        dir.faucet(&["run", "p.yaml"]).expect_code(0);
        let before = dir.jsonl("out.jsonl");
        dir.write(&input, second);
        dir.faucet(&["run", "p.yaml"])
            .expect_code(1)
            .stderr_has(&["does not fit", "replaced or rewritten"]);
        assert_eq!(
            dir.jsonl("out.jsonl"),
            before,
            "{source}: nothing delivered"
        );
        // Appending to the original still resumes (the fingerprint covers only the bytes
        // before the offset).
        dir.write(&input, first);
        dir.append(
            &input,
            if source == "csv" {
                "9,z\n"
            } else {
                "{\"id\":\"9\",\"v\":\"z\"}\n"
            },
        );
        dir.faucet(&["run", "p.yaml"]).expect_code(0);
        let mut want = before.clone();
        want.push(json!({"id": "9", "v": "z"}));
        assert_eq!(dir.jsonl("out.jsonl"), want, "{source}");
    }
}

#[test]
fn an_old_bookmark_without_a_fingerprint_is_accepted_with_the_old_checks() {
    let dir = into_jsonl("csv", "id,v\n1,a\n2,b\n");
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    let mut old = bookmark(&dir);
    let fingerprint = old.as_object_mut().and_then(|m| m.remove("fingerprint"));
    assert!(fingerprint.is_some(), "{old}");
    // The file state store's document: `{"bookmark": …}` or the bookmark itself.
    let stored = dir.read("state/safety.json").expect("state");
    let mut doc: Value = serde_json::from_slice(&stored).expect("json");
    strip_fingerprint(&mut doc);
    dir.write(
        "state/safety.json",
        serde_json::to_vec(&doc).expect("encode"),
    );
    dir.append("in.csv", "3,c\n");
    dir.faucet(&["run", "p.yaml"])
        .expect_code(0)
        .stderr_has(&["no content fingerprint"]);
    assert_eq!(
        dir.jsonl("out.jsonl"),
        records(&[("1", "a"), ("2", "b"), ("3", "c")])
    );
    assert!(
        bookmark(&dir)["fingerprint"].is_object(),
        "the new bookmark has one"
    );
}

/// Removes every `fingerprint` member of `v`.
fn strip_fingerprint(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("fingerprint");
            map.values_mut().for_each(strip_fingerprint);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_fingerprint),
        _ => {}
    }
}

#[test]
fn a_refused_run_leaves_the_sink_untouched_and_a_valid_last_line_is_kept() {
    // No bookmark, and the sink holds data: refused, and its unterminated (valid) last
    // record is still there, byte for byte.
    let dir = Dir::new();
    dir.write("in.csv", "id,v\n1,a\n");
    dir.write("out.jsonl", "{\"a\":\"1\"}\n{\"a\":\"2\"}");
    dir.write(
        "p.yaml",
        pipeline("csv", "./in.csv", "", "./out.jsonl", true),
    );
    dir.faucet(&["run", "p.yaml"])
        .expect_code(1)
        .stderr_has(&["no bookmark", "already holds data"]);
    assert_eq!(
        dir.read("out.jsonl").expect("out"),
        b"{\"a\":\"1\"}\n{\"a\":\"2\"}",
        "a refusal changes nothing"
    );

    // With a bookmark: a valid last line without a line break is data, completed with one;
    // a torn one (not JSON) is removed, and the warning says what.
    let dir = into_jsonl("csv", "id,v\n1,a\n");
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    dir.append("out.jsonl", "{\"kept\":true}");
    dir.append("in.csv", "2,b\n");
    dir.faucet(&["run", "p.yaml"])
        .expect_code(0)
        .stderr_has(&["kept and completed"]);
    dir.append("out.jsonl", "{\"torn\":");
    dir.append("in.csv", "3,c\n");
    dir.faucet(&["run", "p.yaml"])
        .expect_code(0)
        .stderr_has(&["dropped_bytes=8", "{\"torn\":"]);
    let mut want = records(&[("1", "a")]);
    want.push(json!({"kept": true}));
    want.extend(records(&[("2", "b"), ("3", "c")]));
    assert_eq!(dir.jsonl("out.jsonl"), want);
}

#[test]
fn an_unclosed_csv_quote_is_an_error_at_the_line_it_opened() {
    for (data, line) in [
        ("id,name\n1,alice\n2,\"bob\n3,carol\n4,dave\n", 3),
        ("id,name\n1,alice\n2,\"bo\"\"b\n3,carol\n", 3),
        ("id,name\n1,\"a\nb\"\n2,x\n3,\"carol,\n", 5),
    ] {
        // A complete file (`read`): the quote is never closed, an error at its line.
        let dir = prepared(
            "csv",
            data,
            ", unterminated_last_line: read",
            "./out.jsonl",
            false,
        );
        let run = dir.faucet(&["run", "p.yaml"]);
        run.expect_code(1)
            .stderr_has(&[&format!("in.csv:{line}"), "never closed"]);
        let out = dir.lines("out.jsonl").join("\n");
        assert!(!out.contains("carol"), "{data:?}: {out}");
        // A file that may still grow (`wait`, the default): the record is held back, and
        // the warning names the line of the open quote and the way to see the error.
        let dir = into_jsonl("csv", data);
        let run = dir.faucet(&["run", "p.yaml"]);
        run.expect_code(0).stderr_has(&[
            &format!("quote_line={line}"),
            "still open",
            "unterminated_last_line: read",
        ]);
        let out = dir.lines("out.jsonl").join("\n");
        assert!(!out.contains("carol"), "{data:?}: {out}");
    }
}

/// A quoted field spanning lines, written in two parts by a writer still appending: the
/// first run delivers the records before it and holds it back; once the quote is closed,
/// the next run reads it whole, once. On the old code the first run failed with "never
/// closed" at the line of the quote.
#[test]
fn a_quoted_field_spanning_lines_written_in_two_parts_is_read_whole() {
    for first in [
        "id,v\n1,a\n2,\"multi\n",
        "id,v\n1,a\n2,\"multi\nli",
        "id,v\n1,a\n2,\"multi",
    ] {
        let rest = &"id,v\n1,a\n2,\"multi\nline\"\n3,c\n"[first.len()..];
        let dir = into_jsonl("csv", first);
        dir.faucet(&["run", "p.yaml"])
            .expect_code(0)
            .stderr_has(&["in.csv:3"]);
        assert_eq!(dir.jsonl("out.jsonl"), records(&[("1", "a")]), "{first:?}");
        dir.append("in.csv", rest);
        dir.faucet(&["run", "p.yaml"]).expect_code(0);
        assert_eq!(
            dir.jsonl("out.jsonl"),
            records(&[("1", "a"), ("2", "multi\nline"), ("3", "c")]),
            "{first:?}"
        );
    }
}

/// Text after the closing quote of a quoted field (`"bob"x`) is an error naming the file,
/// the line and the column, at any position of the record; nothing of it is delivered. On
/// the old code it was read as `bobx`, silently.
#[test]
fn text_after_a_closing_csv_quote_is_an_error_naming_file_line_and_column() {
    for (data, line, column) in [
        ("id,v\n1,a\n2,b\n3,\"bob\"x\n", 4, "column 2 `v`"),
        ("id,v\n1,a\n\"2\" ,b\n", 3, "column 1 `id`"),
        ("id,v\n1,\"a\nb\"c\n", 3, "column 2 `v`"),
    ] {
        let dir = into_jsonl("csv", data);
        dir.faucet(&["run", "p.yaml"]).expect_code(1).stderr_has(&[
            &format!("in.csv:{line}"),
            column,
            "closing quote",
        ]);
        let out = dir.lines("out.jsonl").join("\n");
        assert!(
            !out.contains("bob") && !out.contains("bc"),
            "{data:?}: {out}"
        );
    }
    // A quote inside an unquoted field is text, kept as written.
    let dir = into_jsonl("csv", "id,v\n1,5'10\"\n");
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(dir.jsonl("out.jsonl"), records(&[("1", "5'10\"")]));
}

/// Numbers in a JSON Lines source come out with exactly the text they had: `1e400` (out of
/// f64 range), `1E5`, `-0`, `1.10`, a 20-digit integer. On the old code exponents came out
/// respelled (`1e+400`, `1e+5`).
#[test]
fn jsonl_numbers_keep_the_text_they_were_written_with() {
    let line = r#"{"a":1e400,"b":1E5,"c":-0,"d":1.10,"e":12345678901234567890,"f":-2.5E-3,"g":[1E2,{"h":1e400}],"i":7}"#;
    let dir = into_jsonl("jsonl", format!("{line}\n"));
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(dir.lines("out.jsonl"), [line]);
}

/// A run whose source refuses to start (a missing file, a FIFO, a declared column the
/// header lacks) leaves no output file and no output directory behind, nor does a run with
/// no records; the first record creates both. On the old code an empty `out/x.jsonl` was
/// left.
#[test]
fn a_run_that_writes_nothing_leaves_no_output_file() {
    let cases: [(&str, &str, &str, i32); 3] = [
        ("id,v\n1,a\n", "./missing.csv", "", 1),
        ("id,v\n1,a\n", "./in.csv", ", columns: [nope]", 2),
        ("id,v\n", "./in.csv", "", 0),
    ];
    for (data, input, extra, code) in cases {
        let dir = Dir::new();
        dir.write("in.csv", data);
        dir.write(
            "p.yaml",
            pipeline("csv", input, extra, "./out/sub/x.jsonl", false),
        );
        let run = dir.faucet(&["run", "p.yaml"]);
        assert_eq!(run.code, code, "{input}: {}", run.stderr);
        assert!(!dir.join("out").exists(), "{input}: the output was created");
    }
    let dir = prepared("csv", "id,v\n", "", "./out/sub/x.jsonl", false);
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    dir.append("in.csv", "1,a\n");
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(dir.jsonl("out/sub/x.jsonl"), records(&[("1", "a")]));
}

/// A sink path that is a symbolic link: to a regular file, the lines are appended to that
/// file and the link stays a link (as the shell's `>>`); a dangling link is refused, naming
/// the link and where it points, and nothing is created there.
#[cfg(unix)]
#[test]
fn a_symlinked_sink_path_appends_to_its_target_and_a_dangling_one_is_refused() {
    let dir = Dir::new();
    dir.write("in.csv", "id,v\n1,a\n");
    dir.write("real.jsonl", "{\"id\":\"0\",\"v\":\"z\"}\n");
    std::os::unix::fs::symlink("real.jsonl", dir.join("out.jsonl")).expect("symlink");
    dir.write(
        "p.yaml",
        pipeline("csv", "./in.csv", "", "./out.jsonl", true),
    );
    // A fresh state but a non-empty target is the lost-bookmark refusal, through the link.
    dir.faucet(&["run", "p.yaml"])
        .expect_code(1)
        .stderr_has(&["already holds data"]);
    dir.write("real.jsonl", "");
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(dir.jsonl("real.jsonl"), records(&[("1", "a")]));
    let link = std::fs::symlink_metadata(dir.join("out.jsonl")).expect("link");
    assert!(link.file_type().is_symlink(), "the link was replaced");

    let dir = Dir::new();
    dir.write("in.csv", "id,v\n1,a\n");
    std::os::unix::fs::symlink("elsewhere/new.jsonl", dir.join("out.jsonl")).expect("symlink");
    dir.write(
        "p.yaml",
        pipeline("csv", "./in.csv", "", "./out.jsonl", false),
    );
    for cmd in ["run", "doctor"] {
        let run = dir.faucet(&[cmd, "p.yaml"]);
        assert_eq!(run.code, 1, "{cmd}: {}{}", run.stdout, run.stderr);
        let all = format!("{}{}", run.stdout, run.stderr);
        for needle in ["out.jsonl", "symbolic link", "elsewhere/new.jsonl"] {
            assert!(all.contains(needle), "{cmd}: lacks {needle:?}: {all}");
        }
        assert!(
            !dir.join("elsewhere").exists(),
            "{cmd}: created through the link"
        );
    }
    assert_eq!(bookmark(&dir), Value::Null, "nothing committed");
}

#[test]
fn a_partial_last_line_waits_for_its_line_break() {
    for (source, line, first, rest) in [
        ("csv", 3, "id,v\n1,a\n2,ze", "bra\n3,c\n"),
        (
            "jsonl",
            2,
            "{\"id\":\"1\",\"v\":\"a\"}\n{\"id\":\"2\",\"v\":\"ze",
            "bra\"}\n{\"id\":\"3\",\"v\":\"c\"}\n",
        ),
    ] {
        let dir = into_jsonl(source, first);
        let input = format!("./in.{source}");
        dir.faucet(&["run", "p.yaml"]).expect_code(0).stderr_has(&[
            &format!("in.{source}:{line}"),
            "unterminated_last_line: read",
        ]);
        assert_eq!(dir.jsonl("out.jsonl"), records(&[("1", "a")]), "{source}");
        dir.append(&input, rest);
        dir.faucet(&["run", "p.yaml"]).expect_code(0);
        assert_eq!(
            dir.jsonl("out.jsonl"),
            records(&[("1", "a"), ("2", "zebra"), ("3", "c")]),
            "{source}"
        );
    }
    // A complete file without a final line break, read whole on request.
    let dir = prepared(
        "csv",
        "id,v\n1,a\n2,b",
        ", unterminated_last_line: read",
        "./out.jsonl",
        false,
    );
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(dir.jsonl("out.jsonl"), records(&[("1", "a"), ("2", "b")]));
}

#[test]
fn a_field_or_line_over_the_limit_is_an_error_naming_file_line_and_column() {
    let dir = prepared(
        "csv",
        format!("id,v\n1,a\n2,{}\n", "x".repeat(2000)),
        ", max_field_bytes: 1000",
        "./out.jsonl",
        false,
    );
    dir.faucet(&["run", "p.yaml"]).expect_code(1).stderr_has(&[
        "in.csv:3",
        "column 2 `v`",
        "max_field_bytes (1000 bytes)",
    ]);
    // The default (16 MiB) holds an unclosed quote's runaway field too.
    let mut big = String::from("id,v\n1,\"a\n");
    big.push_str(&"y,\n".repeat(6 << 20));
    let dir = into_jsonl("csv", &big);
    dir.faucet(&["run", "p.yaml"]).expect_code(1).stderr_has(&[
        "in.csv:2",
        "column 2 `v`",
        "max_field_bytes (16777216 bytes)",
    ]);

    let dir = prepared(
        "jsonl",
        format!("{{\"id\":\"1\"}}\n{{\"id\":\"{}\"}}\n", "x".repeat(200)),
        ", max_line_bytes: 100",
        "./out.jsonl",
        false,
    );
    dir.faucet(&["run", "p.yaml"])
        .expect_code(1)
        .stderr_has(&["in.jsonl:2", "max_line_bytes (100 bytes)"]);
}

#[cfg(unix)]
#[test]
fn a_fifo_source_is_refused_before_it_is_opened() {
    use std::time::{Duration, Instant};
    for source in ["csv", "jsonl"] {
        let dir = Dir::new();
        let input = format!("in.{source}");
        let made = std::process::Command::new("mkfifo")
            .arg(dir.join(&input))
            .status()
            .expect("mkfifo");
        assert!(made.success());
        dir.write(
            "p.yaml",
            pipeline(source, &format!("./{input}"), "", "./out.jsonl", false),
        );
        let mut child = crate::support::faucet_command()
            .current_dir(dir.path())
            .args(["run", "p.yaml"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let started = Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("{source}: faucet blocked on the FIFO");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let run = crate::support::Run::from_output(child.wait_with_output().expect("output"));
        run.expect_code(1)
            .stderr_has(&["FIFO", "not a regular file", &input]);
    }
}

#[test]
fn a_jsonl_sink_writes_to_stdout_with_dash_and_refuses_devices() {
    let dir = prepared("csv", "id,v\n1,a\n2,b\n3,c\n", "", "-", false);
    let run = dir.faucet(&["run", "p.yaml"]);
    run.expect_code(0).stderr_has(&["3 records"]);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("stdout holds only JSON lines"))
        .collect();
    assert_eq!(lines, records(&[("1", "a"), ("2", "b"), ("3", "c")]));
    assert!(dir.read("-").is_none(), "no file named -");
    assert_eq!(bookmark(&dir)["records"], 3);

    for device in ["/dev/null", "/dev/stdout"] {
        let dir = prepared("csv", "id,v\n1,a\n", "", device, false);
        let run = dir.faucet(&["run", "p.yaml"]);
        run.expect_code(1)
            .stderr_has(&[device, "not a regular file", "path: \"-\""]);
        assert!(
            run.stdout.is_empty() || !run.stdout.contains("\"id\""),
            "{}",
            run.stdout
        );
        assert_eq!(bookmark(&dir), Value::Null, "{device}: nothing committed");
    }
}

#[test]
fn jsonl_to_jsonl_keeps_missing_keys_missing_at_any_batch_size_and_refuses_duplicates() {
    let input = concat!(
        "{\"a\":1,\"b\":\"x\"}\n",
        "{\"a\":2}\n",
        "{\"a\":3,\"b\":null}\n",
        "{\"b\":\"y\",\"a\":4}\n",
        "{\"a\":5}\n",
    );
    let want: Vec<Value> = input
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    for batch in [1, 2, 3, 100] {
        let dir = Dir::new();
        dir.write("in.jsonl", input);
        let p = pipeline("jsonl", "./in.jsonl", "", "./out.jsonl", false)
            .replace("batch_size: 2", &format!("batch_size: {batch}"));
        dir.write("p.yaml", p);
        dir.faucet(&["run", "p.yaml"]).expect_code(0);
        assert_eq!(dir.jsonl("out.jsonl"), want, "batch {batch}");
        assert_eq!(bookmark(&dir)["records"], 5, "batch {batch}");
    }
    // Nested objects and arrays come out as given: duplicate keys, escapes, number spelling.
    let nested = "{\"a\":6,\"n\":{\"x\":1,\"x\":2.50},\"l\":[\"caf\\u00e9\",1e400]}";
    let dir = into_jsonl("jsonl", format!("{nested}\n"));
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(dir.lines("out.jsonl"), [nested]);

    let dir = into_jsonl("jsonl", "{\"a\":1}\n{\"a\":1,\"a\":2}\n");
    dir.faucet(&["run", "p.yaml"])
        .expect_code(1)
        .stderr_has(&["in.jsonl:2", "the key `a` appears twice"]);
}
