//! A state store that lost its bookmark (scenario S1 of the state-store cases): the bookmark of a finished run is
//! deleted, and the next run must not silently append the whole source again to an
//! append-only target. A run that crashed before its first bookmark still restarts.

use std::path::Path;
use std::process::{Command, Stdio};

fn faucet(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_faucet"));
    c.current_dir(dir)
        .env_remove("FAUCET_FAULT")
        .stdin(Stdio::null());
    c
}

fn setup(dir: &Path, rows: usize) {
    let mut csv = String::from("id,v\n");
    for i in 0..rows {
        csv.push_str(&format!("{i},v{i}\n"));
    }
    std::fs::write(dir.join("in.csv"), csv).expect("csv");
    std::fs::write(
        dir.join("faucet.yaml"),
        "version: 1\nname: lost\npipeline:\n  source: { type: csv, config: { path: ./in.csv } }\n  \
         sink: { type: jsonl, config: { path: ./out.jsonl } }\n  \
         state: { type: file, config: { path: ./state } }\n  batch_size: 100\n",
    )
    .expect("config");
}

fn lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("out.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_deleted_bookmark_is_an_error_not_a_silent_second_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    setup(dir.path(), 500);
    let first = faucet(dir.path())
        .args(["run", "--quiet"])
        .output()
        .expect("run");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(lines(dir.path()), 500);

    std::fs::remove_file(dir.path().join("state/lost.json")).expect("delete the bookmark");
    let second = faucet(dir.path())
        .args(["run", "--quiet"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "must not succeed: {err}");
    assert!(
        err.contains("no bookmark") && err.contains("`lost`") && err.contains("already holds data"),
        "the error names the missing bookmark and the state key: {err}"
    );
    assert_eq!(lines(dir.path()), 500, "nothing appended");
}

#[test]
fn a_crash_before_the_first_bookmark_still_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    setup(dir.path(), 500);
    let crashed = faucet(dir.path())
        .args(["run", "--quiet"])
        .env("FAUCET_FAULT", "after_flush:1")
        .output()
        .expect("run");
    assert!(!crashed.status.success());
    assert_eq!(lines(dir.path()), 100, "the first page reached the sink");
    let rerun = faucet(dir.path())
        .args(["run", "--quiet"])
        .output()
        .expect("run");
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    // The first page again (at-least-once), then the rest: every id present.
    let text = std::fs::read_to_string(dir.path().join("out.jsonl")).expect("out");
    let ids: std::collections::BTreeSet<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json")["id"].to_string())
        .collect();
    assert_eq!(ids.len(), 500);
    assert_eq!(lines(dir.path()), 600);
}

mod sink_identity {
    //! The bookmark is tied to the sink it was delivered to: a run of the same state key
    //! into another target is refused (resuming there would skip everything before the
    //! bookmark), naming both targets and the fix.

    use crate::support::{Dir, bookmark_of, ids, numbered_csv};

    fn pipeline(sink: &str) -> String {
        format!(
            "version: 1\nname: orders\npipeline:\n  source: {{ type: csv, config: {{ path: ./data.csv }} }}\n  sink: {{ type: jsonl, config: {{ path: {sink} }} }}\n"
        )
    }

    fn entry(dir: &Dir) -> serde_json::Value {
        serde_json::from_slice(&dir.read(".faucet/state/orders.json").expect("state entry"))
            .expect("JSON")
    }

    #[test]
    fn a_second_pipeline_of_the_same_name_into_another_sink_is_refused() {
        let dir = Dir::new();
        dir.write("data.csv", numbered_csv(1, 5, true));
        dir.write("a.yaml", pipeline("./out_a.jsonl"));
        dir.write("b.yaml", pipeline("./out_b.jsonl"));
        dir.faucet(&["run", "a.yaml"]).expect_code(0);
        assert_eq!(ids(&dir.jsonl("out_a.jsonl")), vec![1, 2, 3, 4, 5]);
        dir.faucet(&["run", "b.yaml"]).expect_code(1).stderr_has(&[
            "state key `orders`",
            "out_a.jsonl`",
            "out_b.jsonl`",
            "new `name`",
            "\"sink\"",
        ]);
        assert!(
            dir.jsonl("out_b.jsonl").is_empty(),
            "nothing delivered to b"
        );
        // The user edits the sink path of the same file: the same refusal.
        dir.write("a.yaml", pipeline("./moved/out.jsonl"));
        dir.faucet(&["run", "a.yaml"])
            .expect_code(1)
            .stderr_has(&["out_a.jsonl`", "moved/out.jsonl`"]);
        // The fix: a new name delivers everything to the new target.
        dir.write(
            "b.yaml",
            pipeline("./out_b.jsonl").replace("name: orders", "name: orders_b"),
        );
        dir.faucet(&["run", "b.yaml"]).expect_code(0);
        assert_eq!(ids(&dir.jsonl("out_b.jsonl")), vec![1, 2, 3, 4, 5]);
    }

    /// A first run that failed before persisting a page (a missing source file) delivered
    /// nothing: pointing the pipeline at another sink then is no reason to refuse.
    #[test]
    fn a_run_that_delivered_nothing_does_not_tie_the_key_to_its_sink() {
        let dir = Dir::new();
        dir.write("a.yaml", pipeline("./out_a.jsonl"));
        dir.faucet(&["run", "a.yaml"])
            .expect_code(1)
            .stderr_has(&["data.csv"]);
        dir.write("data.csv", numbered_csv(1, 3, true));
        dir.write("a.yaml", pipeline("./out_b.jsonl"));
        dir.faucet(&["run", "a.yaml"]).expect_code(0);
        assert_eq!(ids(&dir.jsonl("out_b.jsonl")), vec![1, 2, 3]);
        // From then on the key belongs to out_b.
        dir.write("a.yaml", pipeline("./out_a.jsonl"));
        dir.faucet(&["run", "a.yaml"])
            .expect_code(1)
            .stderr_has(&["out_b.jsonl`", "out_a.jsonl`"]);
    }

    #[test]
    fn the_same_sink_from_another_directory_resumes() {
        let dir = Dir::new();
        dir.write("sub/data.csv", numbered_csv(1, 3, true));
        dir.write("sub/p.yaml", pipeline("./out.jsonl").replace("orders", "p"));
        dir.faucet(&["run", "sub/p.yaml"]).expect_code(0);
        dir.append("sub/data.csv", "4,n4,4\n");
        let mut cmd = crate::support::faucet_command();
        let out = cmd
            .current_dir(dir.join("sub"))
            .args(["run", "p.yaml"])
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(ids(&dir.jsonl("sub/out.jsonl")), vec![1, 2, 3, 4]);
    }

    #[test]
    fn a_bare_bookmark_of_an_older_version_loads_and_records_the_sink() {
        let dir = Dir::new();
        dir.write("data.csv", numbered_csv(1, 3, true));
        dir.write("a.yaml", pipeline("./out_a.jsonl"));
        dir.faucet(&["run", "a.yaml"]).expect_code(0);
        let stored = entry(&dir);
        assert!(
            stored["sink"]
                .as_str()
                .is_some_and(|s| s.ends_with("/out_a.jsonl")),
            "the sink is recorded: {stored}"
        );
        // As an older faucet wrote it: the bare bookmark.
        dir.write(
            ".faucet/state/orders.json",
            bookmark_of(stored.clone()).to_string(),
        );
        dir.append("data.csv", "4,n4,4\n");
        dir.faucet(&["run", "a.yaml"]).expect_code(0);
        assert_eq!(ids(&dir.jsonl("out_a.jsonl")), vec![1, 2, 3, 4]);
        assert_eq!(entry(&dir)["sink"], stored["sink"], "recorded again");
        // Removing the recorded sink (the documented way to move a target) is accepted.
        let mut moved = entry(&dir);
        moved.as_object_mut().expect("object").remove("sink");
        dir.write(".faucet/state/orders.json", moved.to_string());
        dir.write("a.yaml", pipeline("./out_c.jsonl"));
        dir.append("data.csv", "5,n5,5\n");
        dir.faucet(&["run", "a.yaml"]).expect_code(0);
        assert_eq!(ids(&dir.jsonl("out_c.jsonl")), vec![5]);
    }
}
