//! SIGTERM / SIGINT during a run: the page in hand is finished and persisted, the process
//! exits 0 with a summary saying it was cancelled, and a rerun completes the input with no
//! record lost and none doubled.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{Dir, Run, csv_pipeline, faucet_command, ids, numbered_csv};

const ROWS: u64 = 200_000;

fn big_pipeline() -> Dir {
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, ROWS, true));
    dir.write("p.yaml", csv_pipeline("p", "  batch_size: 100\n"));
    dir
}

/// Starts `faucet run`, waits until some output is committed, sends `signal`, waits.
fn run_and_signal(dir: &Dir, signal: &str, extra: &[&str]) -> Run {
    let child = faucet_command()
        .current_dir(dir.path())
        .args(["run", "p.yaml"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn faucet");
    let deadline = Instant::now() + Duration::from_secs(60);
    let out = dir.join("out/data.jsonl");
    while std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) < 10_000 {
        assert!(
            Instant::now() < deadline,
            "faucet wrote nothing within 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    Run::from_output(child.wait_with_output().expect("wait"))
}

#[test]
fn sigterm_finishes_the_page_and_a_rerun_completes_without_loss_or_duplicates() {
    let dir = big_pipeline();
    let run = run_and_signal(&dir, "-TERM", &[]);
    run.expect_code(0).stdout_has(&["cancelled"]);
    let first = ids(&dir.jsonl("out/data.jsonl"));
    let n = u64::try_from(first.len()).expect("count");
    assert!(n > 0 && n < ROWS, "cancelled after {n} of {ROWS} rows");
    assert_eq!(n % 100, 0, "whole pages only: {n}");
    assert_eq!(first, (1..=n).collect::<Vec<_>>(), "a prefix, in order");

    let rerun = dir.faucet(&["run", "p.yaml", "--output", "json"]);
    rerun.expect_code(0);
    let doc = rerun.json();
    assert_eq!(doc["runs"][0]["rows"], ROWS - n, "{doc}");
    assert_eq!(
        ids(&dir.jsonl("out/data.jsonl")),
        (1..=ROWS).collect::<Vec<_>>(),
        "every row exactly once"
    );
}

#[test]
fn sigint_is_graceful_too_and_json_says_cancelled() {
    let dir = big_pipeline();
    let run = run_and_signal(&dir, "-INT", &["--output", "json"]);
    run.expect_code(0);
    let doc = run.json();
    assert_eq!(doc["ok"], true, "{doc}");
    assert_eq!(doc["cancelled"], true, "{doc}");
    assert_eq!(doc["runs"][0]["cancelled"], true, "{doc}");
    let committed = doc["runs"][0]["rows"].as_u64().expect("rows");
    assert_eq!(
        u64::try_from(dir.jsonl("out/data.jsonl").len()).expect("count"),
        committed,
        "the summary counts what is in the sink"
    );
    assert_eq!(doc["runs"][0]["bookmark"]["records"], committed);
}
