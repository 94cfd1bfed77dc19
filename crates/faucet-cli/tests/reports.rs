//! What faucet reports: `run --output json`, `validate`, `doctor`, `--help`.

use crate::support::{Dir, csv_pipeline, ids, numbered_csv};

#[test]
fn run_output_json_has_one_document_with_every_row() {
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 5, true));
    dir.write(
        "p.yaml",
        format!(
            "{}matrix:\n  - {{ id: good }}\n  - {{ id: missing, source: {{ config: {{ path: ./nope.csv }} }}, sink: {{ config: {{ path: ./out/missing.jsonl }} }} }}\n  - {{ id: after, sink: {{ config: {{ path: ./out/after.jsonl }} }} }}\n",
            csv_pipeline("p", "  batch_size: 2\n")
        ),
    );
    let run = dir.faucet(&["run", "p.yaml", "--output", "json"]);
    // The failed row does not stop the one after it; the exit code is the failure's.
    run.expect_code(1)
        .stderr_has(&["row `missing`", "nope.csv"]);
    let doc = run.json();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["cancelled"], false);
    assert_eq!(doc["error"], serde_json::Value::Null);
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3, "{doc}");

    let good = &runs[0];
    assert_eq!(good["row"], "good");
    assert_eq!(good["state_key"], "p::good");
    assert_eq!(good["rows"], 5);
    assert_eq!(good["pages"], 3);
    assert!(
        good["elapsed_secs"].as_f64().is_some_and(|s| s >= 0.0),
        "{good}"
    );
    assert_eq!(good["guarantee"], "at_least_once");
    assert_eq!(good["planned_guarantee"], "at_least_once");
    assert_eq!(good["bookmark"]["records"], 5);
    assert_eq!(good["re_anchored"], false);
    assert_eq!(good["cancelled"], false);
    assert_eq!(
        good["lag_seconds"],
        serde_json::Value::Null,
        "a file has no clock"
    );
    assert_eq!(good["error"], serde_json::Value::Null);
    let keys = faucet_test_support::json_keys(good);
    assert_eq!(
        keys,
        [
            "row",
            "state_key",
            "rows",
            "pages",
            "elapsed_secs",
            "guarantee",
            "planned_guarantee",
            "bookmark",
            "re_anchored",
            "cancelled",
            "lag_seconds",
            "error"
        ]
    );

    let missing = &runs[1];
    assert_eq!(missing["row"], "missing");
    assert_eq!(missing["rows"], 0);
    // A failed run delivered nothing under a guarantee: only the plan's is shown.
    assert_eq!(missing["guarantee"], serde_json::Value::Null, "{missing}");
    assert_eq!(missing["planned_guarantee"], "at_least_once", "{missing}");
    assert_eq!(missing["error"]["kind"], "read", "{missing}");
    assert!(
        missing["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nope.csv")),
        "{missing}"
    );
    assert_eq!(runs[2]["rows"], 5);
    assert_eq!(runs[2]["error"], serde_json::Value::Null);
    assert_eq!(ids(&dir.jsonl("out/after.jsonl")), vec![1, 2, 3, 4, 5]);

    // A config error is a document too, with the error at the top.
    dir.write(
        "bad.yaml",
        csv_pipeline("bad", "  delivery: effectively_once\n"),
    );
    let run = dir.faucet(&["run", "bad.yaml", "--output", "json"]);
    run.expect_code(3);
    let doc = run.json();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["runs"], serde_json::json!([]));
    assert_eq!(doc["error"]["kind"], "delivery");
}

#[test]
fn validate_prints_the_guarantee_and_touches_nothing() {
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        format!(
            "{}matrix:\n  - {{ id: eu }}\n  - {{ id: us, state: {{ type: memory }}, batch_size: 7 }}\n",
            csv_pipeline("p", "")
        ),
    );
    // data.csv does not exist: validate does not read it.
    let run = dir.faucet(&["validate", "p.yaml"]);
    run.expect_code(0).stdout_has(&[
        "p.yaml: pipeline `p`, 2 runs",
        "eu\n  state key   p::eu\n",
        "us\n  state key   p::us\n",
        "source      csv ",
        "data.csv",
        "state       memory (forgotten on exit)",
        "batch size  7",
        "delivery    at-least-once",
        "valid",
    ]);
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        entries,
        vec![std::ffi::OsString::from("p.yaml")],
        "validate created files"
    );
}

#[test]
fn doctor_passes_on_a_good_file_pipeline_and_moves_nothing() {
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 3, true));
    dir.write("p.yaml", csv_pipeline("p", ""));
    let run = dir.faucet(&["doctor", "p.yaml"]);
    run.expect_code(0).stdout_has(&[
        "✓ config p.yaml",
        "✓ source csv ",
        "✓ sink jsonl ",
        "✓ state file ",
        " ms",
        "all 4 checks passed",
    ]);
    assert!(!dir.join("out/data.jsonl").exists(), "doctor wrote data");
    assert!(
        !dir.join(".faucet/state/p.json").exists(),
        "doctor wrote a bookmark"
    );

    let run = dir.faucet(&["doctor", "p.yaml", "--json"]);
    run.expect_code(0);
    let doc = run.json();
    assert_eq!(doc["failed"], 0);
    let probes: Vec<&str> = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| c["probe"].as_str().expect("probe"))
        .collect();
    assert_eq!(probes, ["config", "source", "sink", "state"]);
}

#[test]
fn doctor_exit_code_counts_failed_probes_and_never_prints_a_password() {
    let dir = Dir::new();
    // The sink's directory cannot be created: `blocker` is a file (this holds even as root).
    dir.write("blocker", "not a directory");
    dir.write(
        "p.yaml",
        "version: 1\npipeline:\n  source: { type: csv, config: { path: ./missing.csv } }\n  sink: { type: jsonl, config: { path: ./blocker/out.jsonl } }\n",
    );
    let run = dir.faucet(&["doctor", "p.yaml"]);
    run.expect_code(2).stdout_has(&[
        "✗ source csv ",
        "missing.csv",
        "✗ sink jsonl ",
        "blocker",
        "— hint:",
        "✓ state file",
        "2 of 4 checks failed",
    ]);

    // A state store that cannot be reached, with a password in its URL.
    dir.write("data.csv", numbered_csv(1, 1, true));
    dir.write(
        "s.yaml",
        csv_pipeline(
            "s",
            "  state: { type: postgres, config: { url: \"postgres://faucet:hunter2secret@127.0.0.1:1/x\" } }\n",
        ),
    );
    let run = dir.faucet(&["doctor", "s.yaml", "--timeout-secs", "5"]);
    run.expect_code(1)
        .stdout_has(&["✗ state postgres postgres://faucet:***@127.0.0.1:1/x"]);
    assert!(!run.stdout.contains("hunter2secret"), "{}", run.stdout);
    assert!(!run.stderr.contains("hunter2secret"), "{}", run.stderr);
    let run = dir.faucet(&["doctor", "s.yaml", "--json"]);
    assert!(!run.stdout.contains("hunter2secret"), "{}", run.stdout);

    // A config that does not load is one failed probe.
    dir.faucet(&["doctor", "nope.yaml"])
        .expect_code(1)
        .stdout_has(&["✗ config nope.yaml", "not found"]);
}

#[test]
fn help_explains_the_file_and_the_exit_codes() {
    let dir = Dir::new();
    let run = dir.faucet(&["--help"]);
    run.expect_code(0).stdout_has(&[
        "version: 1",
        "matrix:",
        ".faucet/state",
        "Exit codes:",
        "3    the requested delivery",
        "4    another run holds",
    ]);
    let run = dir.faucet(&["run", "--help"]);
    run.expect_code(0).stdout_has(&[
        "--wait-for-lease",
        "--output",
        "--row",
        "--quiet",
        "Exit codes:",
    ]);
    dir.faucet(&["run", "--wait-for-lease", "soon"])
        .expect_code(2);
    dir.faucet(&["frobnicate"]).expect_code(2);
}

/// An incremental read of a query cannot prove its key unique: `validate` says so, offline,
/// with the fix, and never shows the password.
#[cfg(feature = "postgres")]
#[test]
fn validate_warns_about_a_replication_key_it_cannot_prove_unique() {
    let dir = Dir::new();
    dir.write(
        "q.yaml",
        "version: 1\nname: q\npipeline:\n  source: { type: postgres, config: { connection_url: \
         \"postgres://u:hunter2@127.0.0.1:1/x\", query: \"select * from t\", \
         replication_method: incremental, replication_key: [updated_at] } }\n  \
         sink: { type: jsonl, config: { path: ./out.jsonl } }\n",
    );
    let run = dir.faucet(&["validate", "q.yaml"]);
    run.expect_code(0);
    assert!(
        run.stdout.contains("warning") && run.stdout.contains("primary key"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("hunter2") && !run.stderr.contains("hunter2"));
}

/// A password holding any of ` "'`/#?` (or an unencoded `@/#?`), in a postgres sink URL, a
/// postgres state URL or a redis state URL, never shows: not in `validate`, `doctor`,
/// `doctor --json`, nor a failed `run`.
#[cfg(all(
    feature = "postgres",
    feature = "state-postgres",
    feature = "state-redis"
))]
#[test]
fn no_password_character_makes_it_show() {
    let mut passwords: Vec<String> = [' ', '"', '\'', '`', '/', '#', '?']
        .iter()
        .map(|c| format!("Xq9{c}Zk7"))
        .collect();
    passwords.push("Xq9-P@ss/w#rd?Zk7".to_owned());
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 2, true));
    let sink_pg = "version: 1\nname: s\npipeline:\n  source: { type: csv, config: { path: ./data.csv } }\n  sink: { type: postgres, config: { connection_url: \"${env:FAUCET_T_URL}\", table: t } }\n";
    dir.write("sink.yaml", sink_pg);
    dir.write(
        "pgstate.yaml",
        csv_pipeline(
            "s",
            "  state: { type: postgres, config: { url: \"${env:FAUCET_T_URL}\" } }\n",
        ),
    );
    dir.write(
        "redis.yaml",
        csv_pipeline(
            "s",
            "  state: { type: redis, config: { url: \"${env:FAUCET_T_URL}\" } }\n",
        ),
    );
    for pw in &passwords {
        for (file, url) in [
            ("sink.yaml", format!("postgres://u:{pw}@127.0.0.1:1/db")),
            ("pgstate.yaml", format!("postgres://u:{pw}@127.0.0.1:1/x")),
            ("redis.yaml", format!("redis://:{pw}@127.0.0.1:1/")),
        ] {
            for args in [
                &["validate", file][..],
                &["doctor", file, "--timeout-secs", "3"],
                &["doctor", file, "--json", "--timeout-secs", "3"],
                &["run", file],
                &["run", file, "--output", "json"],
            ] {
                let run = dir.faucet_env(args, &[("FAUCET_T_URL", &url)]);
                let all = format!("{}{}", run.stdout, run.stderr);
                for part in ["Xq9", "Zk7", "P@ss", "ss/w"] {
                    assert!(
                        !all.contains(part),
                        "{args:?} with {url:?} shows {part:?}:\n{all}"
                    );
                }
            }
        }
    }
}
