//! Crash tests for csv → jsonl with a file state store: a child process (this test binary,
//! re-run on [`crash_child_process`]) is aborted at each fault point of the run loop, the
//! jsonl sink and the file state store, then run again to the end. The output must hold
//! every record, at most the one in-flight page twice, and only whole lines
//! (DESIGN.md invariants 1 and 3).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use faucet_connectors::files::CsvSourceConfig;
use faucet_core::fault;

use crate::files_support::*;

const ROWS: usize = 1_000;
const BATCH: usize = 100;
/// Set for the child: the directory holding `in.csv`, `out/out.jsonl` and `state/`.
const CHILD_ENV: &str = "FAUCET_FILES_CRASH_DIR";

/// The child's work: one pipeline run. Does nothing unless run by
/// [`every_fault_point_loses_nothing_and_repeats_at_most_one_page`].
#[tokio::test]
async fn crash_child_process() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let source = csv_source(CsvSourceConfig::new(dir.join("in.csv")), Some(4096));
    run_to_jsonl(
        &source,
        &dir.join("out/out.jsonl"),
        &dir.join("state"),
        BATCH,
    )
    .await
    .expect("child run");
}

fn run_child(dir: &Path, fault_spec: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([
        "files_crash::crash_child_process",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, dir)
    .env_remove(fault::ENV);
    if let Some(spec) = fault_spec {
        cmd.env(fault::ENV, spec);
    }
    cmd.output().expect("run the child process")
}

#[test]
fn every_fault_point_loses_nothing_and_repeats_at_most_one_page() {
    let mut csv = String::from("id,note\n");
    for i in 1..=ROWS {
        csv.push_str(&format!(
            "{i},\"row {i}, with a comma\nand a line break\"\n"
        ));
    }
    for point in fault::ALL {
        for hit in [1, 4] {
            let dir = tempfile::tempdir().expect("tempdir");
            write_file(dir.path(), "in.csv", csv.as_bytes());
            let spec = format!("{point}:{hit}");
            let crashed = run_child(dir.path(), Some(&spec));
            assert!(
                !crashed.status.success(),
                "{spec}: the child should have been aborted"
            );
            let stderr = String::from_utf8_lossy(&crashed.stderr);
            assert!(
                stderr.contains(&format!("fault point `{point}` reached")),
                "{spec}: {stderr}"
            );
            let resumed = run_child(dir.path(), None);
            assert!(
                resumed.status.success(),
                "{spec}: the resumed run failed: {}",
                String::from_utf8_lossy(&resumed.stderr)
            );
            let out = std::fs::read_to_string(dir.path().join("out/out.jsonl")).expect("out");
            assert!(
                out.ends_with('\n'),
                "{spec}: the output ends in a torn line"
            );
            let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
            for line in out.lines() {
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{spec}: not a whole JSON line ({e}): {line}"));
                let id: u64 = v["id"].as_str().and_then(|s| s.parse().ok()).expect("id");
                assert_eq!(
                    v["note"],
                    format!("row {id}, with a comma\nand a line break"),
                    "{spec}"
                );
                *seen.entry(id).or_default() += 1;
            }
            let missing: Vec<_> = (1..=ROWS as u64)
                .filter(|i| !seen.contains_key(i))
                .collect();
            assert!(missing.is_empty(), "{spec}: lost records {missing:?}");
            let repeated = seen.values().filter(|n| **n > 1).count();
            assert!(
                repeated <= BATCH && seen.values().all(|n| *n <= 2),
                "{spec}: {repeated} records repeated, more than one page"
            );
            // A crash after the state was durable repeats nothing.
            if point == fault::AFTER_STATE_PUT {
                assert_eq!(repeated, 0, "{spec}");
            }
        }
    }
}
