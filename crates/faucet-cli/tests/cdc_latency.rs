//! A continuous `postgres-cdc` run under a steady low-rate writer delivers every change
//! as soon as the stream is caught up (plus the write, fsync and bookmark) — with the default
//! `max_page_delay` and with one far longer than the bound — long before the writer stops,
//! and the slot's `confirmed_flush_lsn` follows while the writer runs; with the default
//! `batch_size` of 10,000, which a trickle of 20 changes/s would otherwise take over 8
//! minutes to fill.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::postgres_connectors::{cdc_pipeline, own_cdc_fixture};
use crate::support::{Dir, KillOnDrop, Run, faucet_command, pg_url, runtime};

/// Commits per second of the writer, and for how long.
const RATE: u64 = 20;
const WRITER_RUN: Duration = Duration::from_secs(5);
/// The latency no change may exceed here: the default page delay is 50 ms; the rest is room
/// for a loaded 2-core CI machine (a change used to wait until the writer stopped).
const BOUND: Duration = Duration::from_millis(1500);

#[test]
fn a_steady_trickle_is_delivered_within_the_page_delay_while_the_writer_runs() {
    trickle(None);
}

#[test]
fn a_caught_up_stream_hands_each_commit_over_without_waiting_for_a_long_page_delay() {
    // With a 10 s page delay only the caught-up rule (a page goes out once a transaction
    // committed and no further event is ready) can deliver within the 1.5 s bound.
    trickle(Some("10s"));
}

/// The trickle scenario, with `max_page_delay` set to `page_delay` (`None`: the default).
fn trickle(page_delay: Option<&str>) {
    let rt = runtime();
    let (schema, slot, publication, pool, _cleanup) = own_cdc_fixture(&rt, "lat");
    let dir = Dir::new();
    // Default batch_size (10,000): a page is never full here.
    let delay_line = page_delay.map_or(String::new(), |d| format!("  max_page_delay: {d}\n"));
    let pipeline =
        cdc_pipeline(&schema, &slot, &publication, true).replace("  batch_size: 50\n", &delay_line);
    assert!(!pipeline.contains("batch_size"), "{pipeline}");
    dir.write("p.yaml", &pipeline);
    dir.write(
        "bounded.yaml",
        pipeline.replace("continuous: true", "continuous: false"),
    );
    let url = pg_url();
    let env = [("FAUCET_CLI_PG_URL", url.as_str())];
    // A bounded run creates the publication and the slot.
    dir.faucet_env(&["run", "bounded.yaml"], &env)
        .expect_code(0);

    let mut child = KillOnDrop(Some(
        faucet_command()
            .current_dir(dir.path())
            .args(["run", "p.yaml", "--output", "json"])
            .env("FAUCET_CLI_PG_URL", &url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn faucet"),
    ));
    let confirmed = |pool: &sqlx::PgPool| {
        let pool = pool.clone();
        let slot = slot.clone();
        rt.block_on(async move {
            sqlx::query_as::<_, (bool, Option<String>)>(
                "SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots \
                 WHERE slot_name = $1",
            )
            .bind(&slot)
            .fetch_one(&pool)
            .await
            .expect("slot")
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !confirmed(&pool).0 {
        assert!(
            Instant::now() < deadline,
            "the continuous run never started streaming"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The writer: one single-row transaction every 1/RATE s, noting when each committed.
    let committed: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
    let n = (RATE * WRITER_RUN.as_secs()) as i64;
    let writer = {
        let committed = committed.clone();
        let schema = schema.clone();
        let url = url.clone();
        std::thread::spawn(move || {
            // Its own runtime and connection: the test's pool is driven by `rt` only while
            // the main thread waits on it.
            runtime().block_on(async move {
                let mut conn = crate::support::pg_connect(&url).await;
                let start = Instant::now();
                for id in 1..=n {
                    let at = start + Duration::from_millis((id as u64 - 1) * 1000 / RATE);
                    tokio::time::sleep_until(at.into()).await;
                    sqlx::query(&format!("INSERT INTO {schema}.orders VALUES ({id}, 'new')"))
                        .execute(&mut conn)
                        .await
                        .expect("insert");
                    committed.lock().expect("lock").insert(id, Instant::now());
                }
            })
        })
    };

    // Watch the file and the slot while the writer runs.
    let mut seen: HashMap<i64, Instant> = HashMap::new();
    let mut flushes: Vec<String> = Vec::new();
    let mut last_slot_check = Instant::now();
    let mut in_file_when_writer_done = None;
    let deadline = Instant::now() + WRITER_RUN + Duration::from_secs(30);
    while seen.len() < n as usize {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} changes delivered ({} committed)",
            seen.len(),
            committed.lock().expect("lock").len()
        );
        let now = Instant::now();
        for line in dir
            .written_lines("out/changes.jsonl")
            .iter()
            .skip(seen.len())
        {
            let record: serde_json::Value = serde_json::from_str(line).expect("a json line");
            let id = record["after"]["id"].as_i64().expect("id");
            assert!(
                seen.insert(id, now).is_none(),
                "change {id} delivered twice"
            );
        }
        if writer.is_finished() && in_file_when_writer_done.is_none() {
            in_file_when_writer_done = Some(seen.len());
        }
        if !writer.is_finished() && last_slot_check.elapsed() >= Duration::from_millis(250) {
            last_slot_check = Instant::now();
            if let (_, Some(lsn)) = confirmed(&pool)
                && flushes.last() != Some(&lsn)
            {
                flushes.push(lsn);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    writer.join().expect("writer");
    let committed = committed.lock().expect("lock").clone();
    let mut latencies: Vec<Duration> = seen
        .iter()
        .map(|(id, at)| at.saturating_duration_since(committed[id]))
        .collect();
    latencies.sort_unstable();
    let (p50, max) = (
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    eprintln!(
        "20 changes/s for 5 s, max_page_delay {}: latency p50 {p50:?}, max {max:?}; \
         confirmed_flush_lsn took {} values while the writer ran",
        page_delay.unwrap_or("default"),
        flushes.len()
    );
    assert!(
        max <= BOUND,
        "a change took {max:?} to reach the file (p50 {p50:?}); the bound is {BOUND:?}"
    );
    let early = in_file_when_writer_done.unwrap_or(n as usize);
    assert!(
        early as i64 >= n - RATE as i64,
        "only {early} of {n} changes were in the file when the writer stopped"
    );
    assert!(
        flushes.len() >= 5,
        "the slot's confirmed_flush_lsn moved only through {flushes:?} while the writer ran"
    );

    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let run = Run::from_output(child.take().wait_with_output().expect("wait"));
    run.expect_code(0);
    let summary = run.json();
    let lag = summary["runs"][0]["lag_seconds"].as_f64();
    assert!(
        lag.is_some_and(|l| (0.0..30.0).contains(&l)),
        "the summary reports the source lag: {summary}"
    );
    let mut ids: Vec<i64> = dir
        .jsonl("out/changes.jsonl")
        .iter()
        .map(|c| c["after"]["id"].as_i64().expect("id"))
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=n).collect::<Vec<_>>(), "every change once");
}
