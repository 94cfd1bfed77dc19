//! Adversarial input for the file path, through the built binary (csv / jsonl → jsonl, file
//! state store): text fields around the 24-byte inline limit of `faucet_core::Text`, multi-byte
//! characters straddling byte 24, fields longer than the read buffer, quoted empty versus
//! `null_values`, CRLF and a BOM, invalid UTF-8, ragged rows in a page that was read ahead,
//! typed columns with bad values, and SIGKILL at random instants. Every output value is
//! compared with the input exactly.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Dir, bookmark_of, faucet_command};

/// A pipeline `in.<ext>` → `out.jsonl` with a file state store at `./state`.
fn pipeline(source: &str, source_config: &str, batch_size: usize) -> String {
    let ext = if source == "csv" { "csv" } else { "jsonl" };
    format!(
        "version: 1\nname: adv\npipeline:\n  source: {{ type: {source}, config: {{ path: ./in.{ext}{source_config} }} }}\n  \
         sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n  \
         state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {batch_size}\n"
    )
}

/// A directory holding `in.csv` = `data` and `p.yaml`.
fn csv_dir(data: &[u8], source_config: &str, batch_size: usize) -> Dir {
    let dir = Dir::new();
    dir.write("in.csv", data);
    dir.write("p.yaml", pipeline("csv", source_config, batch_size));
    dir
}

/// The stored bookmark (`null` when none was persisted).
fn bookmark(dir: &Dir) -> Value {
    dir.read("state/adv.json")
        .map(|b| bookmark_of(serde_json::from_slice(&b).expect("state file is JSON")))
        .unwrap_or(Value::Null)
}

/// `s` as a CSV field, quoted (doubling quotes).
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Texts around the inline limit (24 bytes): every length 0..=26 and 47..=49, and multi-byte
/// characters (2, 3 and 4 bytes) starting at each byte 20..=26.
fn edge_texts() -> Vec<String> {
    let mut texts: Vec<String> = (0..=26).chain(47..=49).map(|n| "x".repeat(n)).collect();
    for at in 20..=26 {
        for ch in ['é', '€', '😀'] {
            texts.push(format!("{}{ch}", "a".repeat(at)));
            texts.push(format!("{}{ch}b", "a".repeat(at)));
        }
    }
    texts
}

#[test]
fn csv_text_around_the_inline_limit_and_longer_than_the_read_buffer_comes_out_exact() {
    let mut texts = edge_texts();
    texts.push("y".repeat(1 << 20)); // 1 MiB
    texts.push("z€\r\n,\"".repeat(600_000)); // 5.4 MiB, longer than the 1 MiB read buffer
    // CRLF records and a BOM; odd rows quoted, even ones bare (when they can be).
    let mut csv = b"\xef\xbb\xbfid,v,w\r\n".to_vec();
    for (i, t) in texts.iter().enumerate() {
        let bare = !t.contains(['"', ',', '\r', '\n']) && !t.is_empty();
        let v = if i % 2 == 1 || !bare {
            quoted(t)
        } else {
            t.clone()
        };
        csv.extend_from_slice(format!("{i},{v},{}\r\n", quoted(t)).as_bytes());
    }
    for batch in [7, 10_000] {
        let dir = csv_dir(&csv, "", batch);
        dir.faucet(&["run", "p.yaml"]).expect_code(0);
        let out = dir.jsonl("out.jsonl");
        assert_eq!(out.len(), texts.len(), "batch {batch}");
        for (i, (rec, t)) in out.iter().zip(&texts).enumerate() {
            let want = json!({"id": i.to_string(), "v": t, "w": t});
            assert!(
                *rec == want,
                "batch {batch}, record {i}: got {:.120}, want {:.120}",
                rec.to_string(),
                want.to_string()
            );
        }
        let b = bookmark(&dir);
        assert_eq!(b["records"], texts.len(), "{b}");
        assert_eq!(b["byte_offset"], csv.len(), "{b}");
    }
}

#[test]
fn quoted_empty_is_text_and_bare_null_values_are_null() {
    let csv =
        "a,b,c,d\n,\"\",NA,\"NA\"\nxxxxxxxxxxxxxxxxxxxxxxxxx,\"xxxxxxxxxxxxxxxxxxxxxxxxx\",,é\n";
    let long = "x".repeat(25);
    let dir = csv_dir(
        csv.as_bytes(),
        ", null_values: [\"\", NA, xxxxxxxxxxxxxxxxxxxxxxxxx]",
        10,
    );
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(
        dir.jsonl("out.jsonl"),
        vec![
            json!({"a": null, "b": "", "c": null, "d": "NA"}),
            json!({"a": null, "b": long, "c": null, "d": "é"}),
        ]
    );
}

#[test]
fn invalid_utf8_names_the_file_line_column_and_byte_and_writes_nothing() {
    for at in [0usize, 23, 24, 25] {
        let mut csv = b"id,v\n1,fine\n2,".to_vec();
        csv.extend_from_slice(&b"a".repeat(at));
        csv.extend_from_slice(b"\xff tail\n");
        let dir = csv_dir(&csv, "", 100);
        dir.faucet(&["run", "p.yaml"]).expect_code(1).stderr_has(&[
            "in.csv:3",
            "column 2 `v`",
            &format!("invalid UTF-8 at byte {at} of the field"),
        ]);
        assert!(dir.lines("out.jsonl").is_empty(), "byte {at}");
        assert_eq!(bookmark(&dir), Value::Null, "byte {at}");
    }
    // A 3-byte character split across two fields: valid as a record, invalid as fields.
    let dir = csv_dir(b"x,y\na\xe2\x82,\xacb\n", "", 100);
    dir.faucet(&["run", "p.yaml"]).expect_code(1).stderr_has(&[
        "in.csv:2",
        "column 1 `x`",
        "invalid UTF-8 at byte 1",
    ]);
}

#[test]
fn a_ragged_row_writes_nothing_of_its_page_even_when_read_ahead() {
    const N: usize = 500;
    const BATCH: usize = 100;
    // The ragged record is the last of page 1, the first of page 2, inside page 2 (read
    // ahead while page 1 is written) and the last of page 2.
    for bad in [100usize, 101, 150, 200] {
        let mut csv = String::from("id,v\n");
        for i in 1..=N {
            if i == bad {
                csv.push_str(&format!("{i},v{i},extra\n"));
            } else {
                csv.push_str(&format!("{i},\"v{i}\n{}\"\n", "é".repeat(i % 15)));
            }
        }
        let dir = csv_dir(csv.as_bytes(), ", columns: { id: int }", BATCH);
        // Data line of record i: 2 + 2 * (i - 1) (each record spans two lines).
        let line = 2 + 2 * (bad - 1);
        let committed = (bad - 1) / BATCH * BATCH;
        for attempt in 0..2 {
            dir.faucet(&["run", "p.yaml"]).expect_code(1).stderr_has(&[
                &format!("in.csv:{line}:"),
                "expected 2 fields (as in the header), found 3",
            ]);
            let out = dir.jsonl("out.jsonl");
            let ids: Vec<u64> = out.iter().map(|r| r["id"].as_u64().expect("id")).collect();
            assert_eq!(
                ids,
                (1..=committed as u64).collect::<Vec<_>>(),
                "ragged record {bad}, attempt {attempt}"
            );
            for (i, r) in out.iter().enumerate() {
                let id = i + 1;
                assert_eq!(r["v"], format!("v{id}\n{}", "é".repeat(id % 15)));
            }
            let b = bookmark(&dir);
            if committed == 0 {
                assert_eq!(b, Value::Null);
            } else {
                // The bookmark is exactly after the last committed record.
                let before: usize = csv
                    .split_inclusive('\n')
                    .take(1 + 2 * committed)
                    .map(str::len)
                    .sum();
                assert_eq!(b["records"], committed, "{b}");
                assert_eq!(b["byte_offset"], before, "{b}");
                assert_eq!(b["line"], 2 + 2 * committed, "{b}");
            }
        }
    }
}

#[test]
fn typed_columns_reject_bad_values_naming_the_column() {
    let header = "i,f,b,t\n";
    let good = ["7", "2.5", "yes", "2024-02-29 13:45:00.5"];
    let cases: &[(usize, &str, &str)] = &[
        (0, "", "is not an int"),
        (0, " 7", "is not an int"),
        (0, "9223372036854775808", "is not an int"),
        (0, "1.0", "is not an int"),
        (1, "1,5", "is not a float"),
        (1, "abc", "is not a float"),
        (1, "1e400", "out of range"),
        (1, "-1e400", "out of range"),
        (1, "1e-400", "out of range"),
        (2, "maybe", "is not a bool"),
        (2, "", "is not a bool"),
        (3, "2024-02-30 00:00:00", "is not a timestamp"),
        (3, "2024-02-29T13:45:00Z", "is not a timestamp"),
        (3, "yesterday", "is not a timestamp"),
    ];
    let config = ", columns: { i: int, f: float, b: bool, t: timestamp }";
    let names = ["i", "f", "b", "t"];
    for (col, bad, message) in cases {
        let mut row = good;
        row[*col] = bad;
        let record = row.map(quoted).join(",");
        let csv = format!("{header}{}\n{record}\n", good.join(","));
        let dir = csv_dir(csv.as_bytes(), config, 1);
        dir.faucet(&["run", "p.yaml"]).expect_code(1).stderr_has(&[
            "in.csv:3",
            &format!("column {} `{}`", col + 1, names[*col]),
            message,
        ]);
        // The good first page was committed, nothing of the bad one.
        assert_eq!(
            dir.jsonl("out.jsonl"),
            vec![json!({"i": 7, "f": 2.5, "b": true, "t": "2024-02-29T13:45:00.5"})],
            "{bad:?}"
        );
        assert_eq!(bookmark(&dir)["records"], 1);
    }
    // What is accepted keeps its meaning: the smallest subnormal and explicit infinities.
    let csv = format!("{header}-0,5e-324,F,2024-02-29 00:00:00\n+3,-inf,0,2024-02-29T00:00:00\n");
    let dir = csv_dir(csv.as_bytes(), config, 10);
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    let raw = String::from_utf8(dir.read("out.jsonl").expect("output")).expect("utf-8");
    assert_eq!(
        raw,
        "{\"i\":0,\"f\":5e-324,\"b\":false,\"t\":\"2024-02-29T00:00:00\"}\n\
         {\"i\":3,\"f\":\"-Infinity\",\"b\":false,\"t\":\"2024-02-29T00:00:00\"}\n"
    );
}

#[test]
fn jsonl_strings_escapes_and_nested_objects_come_out_exact() {
    let mut records: Vec<Value> = edge_texts().into_iter().map(|t| json!({"s": t})).collect();
    records.push(json!({"s": "\u{0}\u{1f}\"\\/\u{8}\u{c}\n\r\t\u{2028}\u{fe00}\u{feff}😀"}));
    records.push(json!({
        "s": "n",
        "o": {"z": 1, "a": [1, "x".repeat(30), {"y": null, "é": "é".repeat(12)}], "m": {}},
    }));
    let mut input = Vec::new();
    for (i, r) in records.iter().enumerate() {
        // Half the lines escape every non-ASCII character (\u00e9, surrogate pairs).
        let line = if i % 2 == 0 {
            r.to_string()
        } else {
            ascii_json(r)
        };
        input.extend_from_slice(line.as_bytes());
        input.extend_from_slice(if i % 3 == 0 { b"\r\n" } else { b"\n" });
    }
    let dir = Dir::new();
    dir.write("in.jsonl", &input);
    dir.write("p.yaml", pipeline("jsonl", "", 5));
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    let out = dir.jsonl("out.jsonl");
    assert_eq!(out.len(), records.len());
    for (i, (got, want)) in out.iter().zip(&records).enumerate() {
        // A page's schema is the union of its keys: keys a line lacks come out null.
        let got: serde_json::Map<String, Value> = got
            .as_object()
            .expect("object")
            .iter()
            .filter(|(k, v)| want.get(k.as_str()).is_some() || !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(Value::Object(got), *want, "record {i}");
    }
    // Numbers keep their digits, nested or not.
    let dir = Dir::new();
    dir.write(
        "in.jsonl",
        "{\"n\": 12345678901234567890123, \"f\": 1.10, \"o\": {\"x\": 1.10, \"big\": 98765432109876543210}}\n",
    );
    dir.write("p.yaml", pipeline("jsonl", "", 5));
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(
        dir.lines("out.jsonl"),
        [
            "{\"n\":12345678901234567890123,\"f\":1.10,\"o\":{\"x\":1.10,\"big\":98765432109876543210}}"
        ]
    );
}

/// `v` as JSON with every non-ASCII character written as `\uXXXX` (surrogate pairs above
/// the BMP).
fn ascii_json(v: &Value) -> String {
    let mut out = String::new();
    for c in v.to_string().chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

#[test]
fn sigkill_at_random_instants_keeps_every_text_value_exact() {
    const BATCH: usize = 500;
    let n = 120_000;
    let rounds = crate::support::soak_or(40, 6);
    let texts = edge_texts();
    let text = |i: usize| texts[i % texts.len()].as_str();
    let dir = Dir::new();
    let mut csv = String::from("id,s\r\n");
    for i in 0..n {
        csv.push_str(&format!(
            "{i},{}\r\n",
            quoted(&format!("{}\n{}", text(i), i % 7))
        ));
    }
    dir.write("in.csv", &csv);
    dir.write("p.yaml", pipeline("csv", ", columns: { id: int }", BATCH));
    let mut crashes = 0;
    for round in 0..rounds {
        let mut child = faucet_command()
            .args(["run", "--quiet", "p.yaml"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn faucet");
        std::thread::sleep(Duration::from_millis(3 + (round * 29 % 60) as u64));
        if child.try_wait().expect("wait").is_none() {
            child.kill().expect("SIGKILL");
            crashes += 1;
        }
        let _ = child.wait();
    }
    assert!(
        crashes > 0,
        "no round was killed mid-run: the test proved nothing"
    );
    dir.faucet(&["run", "--quiet", "p.yaml"]).expect_code(0);
    let raw = dir.read("out.jsonl").expect("output");
    assert!(raw.ends_with(b"\n"), "torn last line");
    // Walk the output: it follows the input, except that after a crash it may go back to
    // the start of the page in flight (at most one page per crash).
    let (mut next, mut replays) = (0usize, 0usize);
    for (at, line) in raw
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let rec: Value = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("output line {} is not JSON ({e})", at + 1));
        let id = usize::try_from(rec["id"].as_u64().expect("id")).expect("id");
        if id != next {
            assert!(
                id < next && id % BATCH == 0 && next - id <= BATCH,
                "output line {}: record {id} after {next} (not a replay of the page in flight)",
                at + 1
            );
            replays += 1;
        }
        assert_eq!(
            rec["s"],
            format!("{}\n{}", text(id), id % 7),
            "output line {}",
            at + 1
        );
        next = id + 1;
    }
    assert_eq!(next, n, "records lost at the end");
    assert!(
        replays <= crashes,
        "{replays} replays after {crashes} crashes"
    );
}

#[test]
fn a_last_record_without_newline_then_appended_rows_resume_after_it() {
    // The first run reads a last record that has no line break (case 19); rows appended
    // later after a line break are the next run's, and only theirs. Appending straight onto
    // that record changes it: refused. The file is declared complete
    // (`unterminated_last_line: read`); by default such a record waits for its line break.
    let cases: &[(&str, &[u8], &[u8])] = &[
        ("csv", b"id,v\n1,a", b"\n2,b\n3,c"),
        ("csv", b"id,v\r\n1,a", b"\r\n2,b\r\n"),
        (
            "jsonl",
            b"{\"id\":\"1\",\"v\":\"a\"}",
            b"\n{\"id\":\"2\",\"v\":\"b\"}\n",
        ),
        (
            "jsonl",
            b"{\"id\":\"1\",\"v\":\"a\"}",
            b"\r\n{\"id\":\"2\",\"v\":\"b\"}\r\n",
        ),
    ];
    for (source, first, appended) in cases {
        let input = format!("in.{source}");
        let dir = Dir::new();
        dir.write(&input, first);
        dir.write(
            "p.yaml",
            pipeline(source, ", unterminated_last_line: read", 100),
        );
        dir.faucet(&["run", "p.yaml"]).expect_code(0);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(&input))
            .expect("open for append");
        std::io::Write::write_all(&mut f, appended).expect("append");
        drop(f);
        dir.faucet(&["run", "p.yaml"]).expect_code(0);
        let mut want = vec![json!({"id": "1", "v": "a"}), json!({"id": "2", "v": "b"})];
        if appended.ends_with(b"3,c") {
            want.push(json!({"id": "3", "v": "c"}));
        }
        assert_eq!(
            dir.jsonl("out.jsonl"),
            want,
            "{source} {first:?} + {appended:?}"
        );
        let total = first.len() + appended.len();
        assert_eq!(bookmark(&dir)["byte_offset"], total, "{source}");
    }
    // Glued onto the last record: that record changed, so the bookmark no longer fits.
    let dir = csv_dir(b"id,v\n1,a", ", unterminated_last_line: read", 100);
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    dir.append("in.csv", "2,b\n");
    dir.faucet(&["run", "p.yaml"])
        .expect_code(1)
        .stderr_has(&["is not right after a record"]);
    assert_eq!(dir.jsonl("out.jsonl"), vec![json!({"id": "1", "v": "a"})]);
}
