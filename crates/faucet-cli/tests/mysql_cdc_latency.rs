//! A continuous `mysql-cdc` run hands each commit over as soon as the binlog stream is caught
//! up: with a 10 s `max_page_delay` and the default `batch_size`, a single-row transaction is
//! in the JSON Lines file (written, fsynced, bookmarked) well within a second — only the
//! caught-up rule ([`faucet_core::PageDeadline`]) can do that; the page delay alone would
//! hold each change for 10 s.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::mariadb::{fresh_database, mariadb as sql, mysql_url_for};
use crate::support::{KillOnDrop, Run, faucet_command};

/// The latency no change may exceed here (the page delay is 10 s); room for a loaded machine.
const BOUND: Duration = Duration::from_millis(1500);

fn ids_in(path: &std::path::Path) -> Vec<i64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| r["after"]["id"].as_i64())
        .collect()
}

#[test]
fn a_caught_up_binlog_stream_hands_each_commit_over_without_waiting_for_a_long_page_delay() {
    let db = fresh_database("cli_cdc_lat", "CREATE TABLE t (id INT PRIMARY KEY)");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.jsonl");
    std::fs::write(
        dir.path().join("faucet.yaml"),
        format!(
            "version: 1\nname: mylat\npipeline:\n  source: {{ type: mysql-cdc, config: {{ \
             connection_url: \"{}\", server_id: {}, tables: [{db}.t], continuous: true }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             max_page_delay: 10s\n",
            mysql_url_for(&db, None),
            40_000 + std::process::id() % 20_000
        ),
    )
    .expect("config");
    let mut child = KillOnDrop(Some(
        faucet_command()
            .current_dir(dir.path())
            .args(["run"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn faucet"),
    ));
    // A first run starts at the end of the binlog once connected: write warm-up rows
    // (negative ids) until one arrives, so the timed rows are written while it streams.
    let started = Instant::now();
    let mut warm = 0;
    while ids_in(&out).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the continuous run never delivered a change"
        );
        warm -= 1;
        sql(&format!("INSERT INTO {db}.t VALUES ({warm})"));
        std::thread::sleep(Duration::from_millis(300));
    }
    // Let a warm-up row still in flight land before the timed ones.
    std::thread::sleep(Duration::from_millis(500));

    let n = 20;
    let mut latencies = Vec::new();
    for id in 1..=n {
        sql(&format!("INSERT INTO {db}.t VALUES ({id})"));
        let committed = Instant::now();
        while !ids_in(&out).contains(&id) {
            assert!(
                committed.elapsed() < Duration::from_secs(15),
                "change {id} did not arrive within 15 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        latencies.push(committed.elapsed());
        std::thread::sleep(Duration::from_millis(30));
    }
    latencies.sort_unstable();
    let (p50, max) = (
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    eprintln!("mysql-cdc, max_page_delay 10s: {n} single-row commits, p50 {p50:?}, max {max:?}");
    assert!(
        max <= BOUND,
        "a change took {max:?} to reach the file (p50 {p50:?}); the bound is {BOUND:?}"
    );

    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    Run::from_output(child.take().wait_with_output().expect("wait")).expect_code(0);
    let mut ids: Vec<i64> = ids_in(&out).into_iter().filter(|id| *id > 0).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=n).collect::<Vec<_>>(), "every change once");
    sql(&format!("DROP DATABASE IF EXISTS {db}"));
}
