//! Inputs at their edges, through the binary: a jsonl file whose complete last record has no
//! line break (delivered, and the bookmark right when a writer appends after it), a
//! seven-field cron (refused naming the field), a NUL byte in a SQL source's `query`
//! (refused at validate naming the field).

use crate::support::{Dir, ids};

/// `in.jsonl` → `out.jsonl` with the default `unterminated_last_line: wait`.
fn jsonl_dir(first: &[u8]) -> Dir {
    let dir = Dir::new();
    dir.write("in.jsonl", first);
    dir.write(
        "p.yaml",
        "version: 1\nname: jl\npipeline:\n  source: { type: jsonl, config: { path: ./in.jsonl } }\n  sink: { type: jsonl, config: { path: ./out.jsonl } }\n  state: { type: file, config: { path: ./state } }\n",
    );
    dir
}

#[test]
fn a_complete_last_jsonl_record_without_a_line_break_is_delivered_and_appends_resume_after_it() {
    let dir = jsonl_dir(b"{\"id\": 1}\n{\"id\": 2}\n{\"id\": 4}");
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(ids(&dir.jsonl("out.jsonl")), [1, 2, 4]);
    // A later writer ends that line and adds one: the next run reads exactly the new one.
    dir.append("in.jsonl", "\n{\"id\": 5}\n");
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(ids(&dir.jsonl("out.jsonl")), [1, 2, 4, 5]);
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(ids(&dir.jsonl("out.jsonl")), [1, 2, 4, 5], "nothing twice");

    // A line that can still grow (torn mid-object) waits for its line break, with a warning.
    let dir = jsonl_dir(b"{\"id\": 1}\n{\"id\": 2, \"v\": \"ab");
    dir.faucet(&["run", "p.yaml"])
        .expect_code(0)
        .stderr_has(&["in.jsonl:2", "no line break"]);
    assert_eq!(ids(&dir.jsonl("out.jsonl")), [1]);
    dir.append("in.jsonl", "c\"}\n");
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    let out = dir.jsonl("out.jsonl");
    assert_eq!(ids(&out), [1, 2]);
    assert_eq!(out[1]["v"], "abc", "read whole, not half-way");
}

#[test]
fn a_seven_field_cron_is_refused_naming_the_field() {
    let dir = Dir::new();
    dir.write("a.csv", "id\n1\n");
    for (schedule, field) in [
        ("\"0 0 12 * * * 2030\"", "`pipeline.schedule`"),
        (
            "{ cron: \"0 0 12 * * MON 2030\", timezone: UTC }",
            "`pipeline.schedule`: cron:",
        ),
    ] {
        dir.write(
            "p.yaml",
            format!(
                "version: 1\npipeline:\n  source: {{ type: csv, config: {{ path: ./a.csv }} }}\n  sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n  schedule: {schedule}\n"
            ),
        );
        dir.faucet(&["validate", "p.yaml"])
            .expect_code(2)
            .stderr_has(&[field, "7 fields", "five"]);
    }
}

#[cfg(feature = "sql")]
#[test]
fn a_nul_byte_in_a_sql_query_is_refused_at_validate_naming_the_field() {
    let dir = Dir::new();
    let mut sources = Vec::new();
    if cfg!(feature = "postgres") {
        sources.push("{ type: postgres, config: { connection_url: \"postgres://u@127.0.0.1:1/d\", query: \"select 1 as id\\0\" } }");
    }
    if cfg!(feature = "mysql") {
        sources.push("{ type: mysql, config: { connection_url: \"mysql://u@127.0.0.1:1/d\", query: \"select\\0 1 as id\" } }");
    }
    for source in sources {
        dir.write(
            "p.yaml",
            format!(
                "version: 1\npipeline:\n  source: {source}\n  sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n"
            ),
        );
        dir.faucet(&["validate", "p.yaml"])
            .expect_code(2)
            .stderr_has(&["pipeline.source.config.query", "NUL"]);
    }
}
