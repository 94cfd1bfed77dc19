//! Case 13 (shared/cases/13-state-missing-or-torn.md), S1: the bookmark of a finished run is
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
