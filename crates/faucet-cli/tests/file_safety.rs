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

/// The stored bookmark (`null` when none was persisted).
fn bookmark(dir: &Dir) -> Value {
    dir.read("state/safety.json")
        .map(|b| serde_json::from_slice(&b).expect("state file is JSON"))
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
        let dir = Dir::new();
        let (first, second) = if source == "csv" {
            ("id,v\n1,a\n2,b\n3,c\n", "id,v\n4,d\n5,e\n6,f\n7,g\n")
        } else {
            (
                "{\"id\":\"1\",\"v\":\"a\"}\n{\"id\":\"2\",\"v\":\"b\"}\n",
                "{\"id\":\"4\",\"v\":\"d\"}\n{\"id\":\"5\",\"v\":\"e\"}\n{\"id\":\"6\",\"v\":\"f\"}\n",
            )
        };
        let input = format!("./in.{source}");
        dir.write(&input, first);
        dir.write("p.yaml", pipeline(source, &input, "", "./out.jsonl", false));
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
    let dir = Dir::new();
    dir.write("in.csv", "id,v\n1,a\n2,b\n");
    dir.write(
        "p.yaml",
        pipeline("csv", "./in.csv", "", "./out.jsonl", false),
    );
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
