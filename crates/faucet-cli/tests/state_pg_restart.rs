//! The PostgreSQL server holding the state restarted while a `faucet run` (csv → jsonl,
//! `state: {type: postgres}`) is in flight — on a private server this test starts itself
//! (`initdb` into a temp directory, its own port; the shared server on 5432 is never
//! touched). Whatever the run does (retry and complete, or fail with a clear error), the
//! stored bookmark is never ahead of what the JSONL file holds, and a rerun completes the
//! input with nothing lost. `FAUCET_SOAK=1` restarts it many more times.
//!
//! The private server is faucet-test-support's `PrivatePostgres`, also used by
//! `doctor_backends` (password authentication, where a wrong password is a real
//! authentication failure) and `cdc_flights`.

use std::time::Duration;

use crate::lease_e2e::{
    Backend, OUT, Spawned, WAITER_ARGS, doubled_of_all, id_counts, records_of, rows_moved, size,
};
use crate::support::{Dir, csv_pipeline, numbered_csv};

/// A PostgreSQL server of this test's own (shared with `doctor_backends` and `cdc_flights`).
pub(crate) use faucet_test_support::private_pg::PrivatePostgres as PrivateServer;

const ROWS: u64 = 6_000;
const BATCH: u64 = 10;

/// The byte offset in `csv` (a header, then one line per record) after `records` records.
fn offset_after(csv: &[u8], records: u64) -> u64 {
    let newlines = usize::try_from(records + 1).expect("usize");
    csv.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(newlines - 1)
        .map_or(0, |(i, _)| i as u64 + 1)
}

/// The stored bookmark is never ahead of the sink: every record it counts is in the JSONL
/// file, and its byte offset is exactly after that many CSV records.
fn assert_bookmark_not_ahead(dir: &Dir, backend: &Backend, key: &str) -> u64 {
    let bookmark = backend.bookmark(dir, key);
    let records = records_of(bookmark.clone());
    let Some(bookmark) = bookmark.filter(|b| !b.is_null()) else {
        return 0;
    };
    let counts = id_counts(dir);
    let missing: Vec<u64> = (1..=records).filter(|i| !counts.contains_key(i)).collect();
    assert!(
        missing.is_empty(),
        "the bookmark {bookmark} counts records the sink does not hold: {missing:?}"
    );
    let csv = dir.read("data.csv").expect("csv");
    assert_eq!(
        bookmark["byte_offset"],
        offset_after(&csv, records),
        "the bookmark's offset is not after its {records} records: {bookmark}"
    );
    records
}

#[test]
fn postgres_restarted_mid_run_never_leaves_the_bookmark_ahead_of_the_sink() {
    let soak = std::env::var_os("FAUCET_SOAK").is_some();
    let modes: Vec<&str> = if soak {
        ["fast", "immediate"].repeat(5)
    } else {
        vec!["fast", "immediate"]
    };
    let server = PrivateServer::start(None, &[]);
    let key = "pg_restart";
    let backend = Backend::Postgres {
        url: server.url(),
        table: "faucet_state".to_owned(),
    };
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 0, true));
    dir.write(
        "p.yaml",
        csv_pipeline(
            key,
            &format!("  state: {}\n  batch_size: {BATCH}\n", backend.state_yaml()),
        ),
    );
    let mut outcomes = Vec::new();
    for (round, mode) in modes.iter().enumerate() {
        let first = round as u64 * ROWS + 1;
        dir.append("data.csv", &numbered_csv(first, ROWS, false));
        let before = size(&dir, OUT);
        // A run that failed while the server was down could not release its lease; it
        // lapses after --lease-ttl, which the next run waits out.
        let mut run = Spawned::start(
            &dir,
            &format!("run{round}"),
            &[
                "run",
                "p.yaml",
                "--lease-ttl",
                "3s",
                "--wait-for-lease",
                "30s",
                "--output",
                "json",
            ],
        );
        run.wait_until("its first page", |_| size(&dir, OUT) > before);
        server.stop(mode);
        assert!(
            run.running(),
            "the run finished before the server stopped; a bigger input would keep it running"
        );
        std::thread::sleep(Duration::from_millis(500));
        server.start_again(&[]);
        let run = run.wait(Duration::from_secs(120));
        match run.code {
            0 => assert_eq!(run.json()["ok"], true, "{}", run.stdout),
            1 => {
                let doc = run.json();
                let error = &doc["runs"][0]["error"];
                match error["kind"].as_str().unwrap_or_default() {
                    "connect" | "state" => {
                        run.stderr_has(&["error: ", "hint: "]);
                    }
                    // A restart slower than --lease-ttl (3 s, on a loaded machine) lets the
                    // lease lapse: the run must then stop writing, which is also safe.
                    "lease" => {
                        run.stderr_has(&["error: ", "lost the lease"]);
                    }
                    _ => panic!("{doc}"),
                }
                eprintln!("round {round} ({mode}): {}", run.stderr.trim_end());
            }
            _ => panic!("{run:?}"),
        }
        let stored = assert_bookmark_not_ahead(&dir, &backend, key);
        outcomes.push((*mode, run.code, stored));
    }
    eprintln!("restart outcomes (mode, exit code, records bookmarked): {outcomes:?}");

    let total = modes.len() as u64 * ROWS;
    let rerun = dir.faucet(WAITER_ARGS);
    rerun.expect_code(0);
    assert!(rows_moved(&rerun) <= total);
    assert_eq!(assert_bookmark_not_ahead(&dir, &backend, key), total);
    let bookmark = backend.bookmark(&dir, key).expect("bookmark");
    assert_eq!(
        bookmark["byte_offset"],
        size(&dir, "data.csv"),
        "{bookmark}"
    );
    let doubled = doubled_of_all(&dir, total);
    // At-least-once: at most the page in flight at each restart is delivered again.
    assert!(
        doubled <= modes.len() as u64 * BATCH,
        "{doubled} records doubled"
    );
}
