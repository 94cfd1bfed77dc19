//! Crash tests (issue: the foundation's proof): a real `faucet run` process (csv → jsonl, file
//! state store) is aborted at every fault point, on different pages, and restarted; the JSONL
//! output is then compared with the CSV input — lost = 0 every time, duplicates at most one
//! page per crash, no torn line. A second test SIGKILLs the process at random instants.
//! `FAUCET_SOAK=1` runs many more rounds.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::crash::kill_after;
use crate::support::{expect_aborted, faucet_unarmed, output_of_success};

const BATCH: usize = 250;

/// A CSV of `n` rows with quoted commas, doubled quotes and embedded newlines.
fn write_csv(path: &Path, n: usize) {
    let mut s = String::from("id,name,note,amount\n");
    for i in 0..n {
        let note = match i % 4 {
            0 => format!("\"line one\nline two {i}\""),
            1 => format!("\"said \"\"hi\"\" {i}\""),
            2 => format!("\"a, b, {i}\""),
            _ => format!("plain{i}"),
        };
        s.push_str(&format!("{i},name-{i},{note},{}.{:02}\n", i * 3, i % 100));
    }
    std::fs::write(path, s).expect("write csv");
}

fn write_config(dir: &Path) {
    std::fs::write(
        dir.join("faucet.yaml"),
        format!(
            "version: 1\nname: crash\npipeline:\n  source: {{ type: csv, config: {{ path: ./in.csv }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out/out.jsonl }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {BATCH}\n"
        ),
    )
    .expect("write config");
}

/// Counts of each id in the output; panics on a torn or invalid line.
fn output_counts(dir: &Path) -> BTreeMap<u64, u64> {
    let text = std::fs::read_to_string(dir.join("out/out.jsonl")).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {} is not JSON ({e}): {line:?}", i + 1));
        let id: u64 = v["id"].as_str().and_then(|s| s.parse().ok()).expect("id");
        assert_eq!(
            v["name"],
            format!("name-{id}"),
            "fields shifted on line {}",
            i + 1
        );
        *counts.entry(id).or_insert(0) += 1;
    }
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "output ends in a torn line"
    );
    counts
}

fn check(dir: &Path, n: usize, crashes: u64) {
    let counts = output_counts(dir);
    let lost: Vec<_> = (0..n as u64).filter(|i| !counts.contains_key(i)).collect();
    assert!(
        lost.is_empty(),
        "lost {} records, first {:?}",
        lost.len(),
        lost.first()
    );
    let dups: u64 = counts.values().map(|c| c - 1).sum();
    assert!(
        dups <= crashes * BATCH as u64,
        "{dups} duplicates after {crashes} crashes (page {BATCH})"
    );
}

fn run_to_completion(dir: &Path) {
    output_of_success(
        faucet_unarmed().args(["run", "--quiet"]).current_dir(dir),
        "the restarted run",
    );
}

#[test]
fn aborted_at_every_fault_point_then_restarted_loses_nothing() {
    let n = 2_000; // 8 pages
    let hits: &[u32] = crate::support::soak_or(&[1, 2, 3, 5, 8][..], &[1, 4][..]);
    for point in faucet_core::fault::ALL {
        for &hit in hits {
            let dir = tempfile::tempdir().expect("tempdir");
            write_csv(&dir.path().join("in.csv"), n);
            write_config(dir.path());
            expect_aborted(
                faucet_unarmed()
                    .args(["run", "--quiet"])
                    .current_dir(dir.path()),
                &format!("{point}:{hit}"),
            );
            // The bookmark on disk is valid (or absent) after the crash.
            if let Ok(entries) = std::fs::read_dir(dir.path().join("state")) {
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.ends_with(".json") && !name.starts_with('.') {
                        let bytes = std::fs::read(e.path()).expect("read state");
                        serde_json::from_slice::<serde_json::Value>(&bytes)
                            .unwrap_or_else(|err| panic!("{point}:{hit}: torn state file: {err}"));
                    }
                }
            }
            run_to_completion(dir.path());
            check(dir.path(), n, 1);
        }
    }
}

#[test]
fn killed_at_random_instants_then_restarted_loses_nothing() {
    let n = 60_000;
    let rounds = crate::support::soak_or(40, 6);
    let dir = tempfile::tempdir().expect("tempdir");
    write_csv(&dir.path().join("in.csv"), n);
    write_config(dir.path());
    let mut crashes = 0;
    for round in 0..rounds {
        // Pseudo-random instants between 5 and 80 ms, different each round.
        let delay = Duration::from_millis(5 + (round * 37 % 76) as u64);
        if kill_after(faucet_unarmed(), dir.path(), delay) {
            crashes += 1;
        }
    }
    assert!(
        crashes > 0,
        "no round was killed mid-run: the test proved nothing"
    );
    run_to_completion(dir.path());
    check(dir.path(), n, crashes);
}
