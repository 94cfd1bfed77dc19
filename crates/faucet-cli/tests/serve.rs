//! `faucet serve` through the binary on loopback: scheduled CSV → JSON Lines rows, a failing
//! row isolated as FAILED with its error, the bearer token, pause persisted across a restart,
//! `/metrics` checked by `promtool`, and SIGTERM draining with exit 0 and nothing lost.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::server::Server;
use crate::support::{Dir, faucet_command, ids, numbered_csv};

const TOKEN: &str = "serve-test-token-0123456789";

fn scheduled(name: &str, csv: &str) -> String {
    format!(
        "version: 1\nname: {name}\npipeline:\n  source: {{ type: csv, config: {{ path: ../{csv} }} }}\n  sink: {{ type: jsonl, config: {{ path: ../out/{name}.jsonl }} }}\n  state: {{ type: file, config: {{ path: ../state }} }}\n  batch_size: 10\n  schedule: {{ cron: \"*/1 * * * * *\", timezone: Europe/Berlin }}\n"
    )
}

/// Two scheduled rows in `pipelines/`: `good` (50 rows) and `bad` (text after a closing
/// quote, an error at line 2; a quote never closed would be held back under the default
/// `unterminated_last_line: wait`, not fail).
pub(crate) fn two_pipelines() -> Dir {
    let dir = Dir::new();
    dir.write("good.csv", numbered_csv(1, 50, true));
    dir.write("bad.csv", "id,name\n1,\"closed\"early\n2,x\n");
    dir.write("pipelines/good.yaml", scheduled("good", "good.csv"));
    dir.write("pipelines/bad.yaml", scheduled("bad", "bad.csv"));
    dir
}

/// Lints an exposition with `promtool check metrics`; fails naming what promtool said.
pub(crate) fn promtool_check(text: &str) {
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool (Debian package `prometheus`: apt-get install prometheus) must be on PATH",
        );
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics failed: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn scheduled_rows_run_a_failing_one_is_isolated_and_pause_survives_a_restart() {
    let dir = two_pipelines();
    let server = Server::start(&dir, &["pipelines"], Some(TOKEN));

    // The good row delivers on its schedule; the bad one shows FAILED with its error.
    let good = server.wait_for("good", "50 records", |d| d["records"] == 50);
    assert_eq!(good["owner"], "m1", "{good}");
    assert_eq!(good["schedule"], "*/1 * * * * * (Europe/Berlin)", "{good}");
    assert_eq!(good["bookmark"]["records"], 50, "{good}");
    // Where the last page left the read: at the end of the file's bytes.
    let size = numbered_csv(1, 50, true).len() as u64;
    let progress = &good["progress"];
    assert_eq!(progress["unit"], "bytes", "{good}");
    assert_eq!(progress["done"], size, "{good}");
    assert_eq!(progress["total"], size, "{good}");
    assert_eq!(progress["percent"], 100.0, "{good}");
    assert_eq!(progress["estimate"], false, "{good}");
    assert!(good["bookmark_at"].is_string(), "{good}");
    assert!(
        matches!(good["state"].as_str(), Some("SCHEDULED" | "RUNNING")),
        "{good}"
    );
    let bad = server.wait_for("bad", "FAILED", |d| d["state"] == "FAILED");
    let error = bad["error"].as_str().expect("an error");
    assert!(
        error.contains("bad.csv:2"),
        "the error names the line: {bad}"
    );
    assert_eq!(bad["last_error"]["message"], bad["error"], "{bad}");
    assert_eq!(
        ids(&dir.jsonl("out/good.jsonl")),
        (1..=50).collect::<Vec<_>>()
    );
    let (code, ready) = server.json("GET", "/readyz", None);
    assert_eq!(code, 503, "{ready}");
    assert_eq!(ready["not_ready"][0]["key"], "bad", "{ready}");
    let (code, list) = server.json("GET", "/pipelines", None);
    assert_eq!(code, 200);
    assert_eq!(
        list["pipelines"].as_array().map(Vec::len),
        Some(2),
        "{list}"
    );

    // New rows arrive on the next tick while the bad row keeps failing.
    dir.append("good.csv", &numbered_csv(51, 25, false));
    server.wait_for("good", "75 records", |d| d["records"] == 75);
    assert_eq!(server.status("bad")["state"], "FAILED");

    // Mutations need the token.
    let (code, doc) = server.json("PUT", "/pipelines/good/pause", None);
    assert_eq!(code, 401, "{doc}");
    assert!(
        doc["error"].as_str().is_some_and(|e| e.contains("Bearer")),
        "{doc}"
    );
    let (code, doc) = server.json("PUT", "/pipelines/good/pause", Some("not-the-token-at-all"));
    assert_eq!(code, 401, "{doc}");
    let (code, doc) = server.json("PUT", "/pipelines/nope/pause", Some(TOKEN));
    assert_eq!(code, 404, "{doc}");
    let (code, doc) = server.json("PUT", "/pipelines/good/pause", Some(TOKEN));
    assert_eq!(code, 200, "{doc}");
    assert_eq!(doc["state"], "PAUSED", "{doc}");
    let (code, doc) = server.json("POST", "/pipelines/good/run", Some(TOKEN));
    assert_eq!(code, 409, "a paused row does not run: {doc}");

    // The exposition passes promtool and counts what the sink holds.
    let (code, text) = server.request("GET", "/metrics", None);
    assert_eq!(code, 200);
    promtool_check(&text);
    assert!(
        text.contains("faucet_records_total{pipeline=\"good\",row=\"\"} 75"),
        "{text}"
    );
    assert!(
        text.contains("faucet_pipeline_failed{pipeline=\"bad\",row=\"\"} 1"),
        "{text}"
    );
    // The same records per target: the sink's one file, by its absolute path.
    let good_file = format!("{}/out/good.jsonl", dir.path().display());
    assert!(
        text.contains(&format!(
            "faucet_target_records_total{{pipeline=\"good\",row=\"\",target=\"{good_file}\"}} 75"
        )),
        "{text}"
    );
    let doc = server.status("good");
    assert_eq!(
        doc["targets"],
        serde_json::json!({ good_file: 75 }),
        "{doc}"
    );
    assert!(
        text.contains("faucet_pipeline_paused{pipeline=\"good\",row=\"\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("faucet_schedule_ticks_run_total{pipeline=\"good\""),
        "{text}"
    );
    assert!(
        text.contains("faucet_last_bookmark_timestamp_seconds{pipeline=\"good\""),
        "{text}"
    );

    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains(TOKEN), "the token never shows: {stderr}");

    // Restarted, the row is still paused: new rows do not move.
    dir.append("good.csv", &numbered_csv(76, 10, false));
    let server = Server::start(&dir, &["pipelines"], Some(TOKEN));
    let doc = server.wait_for("good", "PAUSED after the restart", |d| {
        d["state"] == "PAUSED"
    });
    assert_eq!(
        doc["bookmark"]["records"], 75,
        "the stored bookmark shows: {doc}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        dir.jsonl("out/good.jsonl").len(),
        75,
        "a paused row moved records"
    );
    assert_eq!(server.status("good")["ticks"]["run"], 0);

    // Resumed, it catches up; SIGTERM drains; the sink equals the source.
    let (code, doc) = server.json("PUT", "/pipelines/good/resume", Some(TOKEN));
    assert_eq!(code, 200, "{doc}");
    server.wait_for("good", "85 records", |d| {
        d["records"] == 10 && d["running"] == false
    });
    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        ids(&dir.jsonl("out/good.jsonl")),
        (1..=85).collect::<Vec<_>>()
    );
}

#[test]
fn without_a_token_changes_are_refused_and_only_loopback_is_served() {
    let dir = two_pipelines();
    let server = Server::start(&dir, &["pipelines/good.yaml"], None);
    let (code, doc) = server.json("PUT", "/pipelines/good/stop", None);
    assert_eq!(code, 403, "{doc}");
    assert!(
        doc["error"]
            .as_str()
            .is_some_and(|e| e.contains("FAUCET_API_TOKEN") && e.contains("--token-file")),
        "{doc}"
    );
    let (code, doc) = server.json("GET", "/healthz", None);
    assert_eq!((code, doc["status"].as_str()), (200, Some("ok")));
    let (code, doc) = server.json("GET", "/members", None);
    assert_eq!(code, 200);
    assert_eq!(doc["members"][0]["name"], "m1", "{doc}");
    assert_eq!(doc["members"][0]["pipelines"], 1, "{doc}");
    let (code, doc) = server.json("DELETE", "/pipelines/good", None);
    assert_eq!(code, 405, "{doc}");
    assert!(doc["error"].is_string(), "{doc}");
    let (code, doc) = server.json("GET", "/nope", None);
    assert_eq!(code, 404, "{doc}");
    let (code, _) = server.terminate();
    assert_eq!(code, 0);

    let run = dir.faucet(&["serve", "--listen", "0.0.0.0:0", "pipelines"]);
    run.expect_code(2)
        .stderr_has(&["--listen", "not a loopback address", "FAUCET_API_TOKEN"]);
}

#[test]
fn serve_refuses_a_bounded_row_without_a_schedule_and_a_bad_schedule_names_its_field() {
    let dir = Dir::new();
    dir.write("a.csv", numbered_csv(1, 3, true));
    dir.write(
        "plain.yaml",
        "version: 1\npipeline:\n  source: { type: csv, config: { path: ./a.csv } }\n  sink: { type: jsonl, config: { path: ./out.jsonl } }\n",
    );
    dir.faucet(&["serve", "--listen", "127.0.0.1:0", "plain.yaml"])
        .expect_code(2)
        .stderr_has(&["pipeline.schedule", "is missing"]);
    dir.write(
        "tz.yaml",
        "version: 1\npipeline:\n  source: { type: csv, config: { path: ./a.csv } }\n  sink: { type: jsonl, config: { path: ./out.jsonl } }\n  schedule: { cron: \"* * * * *\", timezone: Mars/Olympus }\n",
    );
    dir.faucet(&["validate", "tz.yaml"])
        .expect_code(2)
        .stderr_has(&["pipeline.schedule", "timezone", "not an IANA time zone"]);
    dir.write(
        "ok.yaml",
        "version: 1\npipeline:\n  source: { type: csv, config: { path: ./a.csv } }\n  sink: { type: jsonl, config: { path: ./out.jsonl } }\n  schedule: \"0 6 * * 1-5\"\n",
    );
    dir.faucet(&["validate", "ok.yaml"])
        .expect_code(0)
        .stdout_has(&["schedule    0 6 * * 1-5 (UTC)"]);
    // `faucet run` ignores the schedule and runs now.
    dir.faucet(&["run", "ok.yaml"]).expect_code(0);
    assert_eq!(dir.jsonl("out.jsonl").len(), 3);
    // Both change streams, when continuous, run all the time: a schedule on one is refused.
    for source in [
        "{ type: postgres-cdc, config: { connection_url: \"postgres://u@127.0.0.1:1/d\", slot_name: s, publication: p, tables: [public.t], continuous: true } }",
        "{ type: mysql-cdc, config: { connection_url: \"mysql://u@127.0.0.1:1/d\", server_id: 7, tables: [d.t], continuous: true } }",
    ] {
        dir.write(
            "cdc.yaml",
            format!(
                "version: 1\npipeline:\n  source: {source}\n  sink: {{ type: jsonl, config: {{ path: ./cdc.jsonl }} }}\n  schedule: \"* * * * *\"\n"
            ),
        );
        dir.faucet(&["validate", "cdc.yaml"])
            .expect_code(2)
            .stderr_has(&["pipeline.schedule", "continuous source"]);
    }
}

#[test]
fn sigterm_mid_run_drains_whole_pages_skips_overlapping_ticks_and_a_restart_completes() {
    const ROWS: u64 = 200_000;
    let dir = Dir::new();
    dir.write("big.csv", numbered_csv(1, ROWS, true));
    dir.write(
        "pipelines/big.yaml",
        scheduled("big", "big.csv").replace("batch_size: 10", "batch_size: 100"),
    );
    let server = Server::start(&dir, &["pipelines"], Some(TOKEN));
    // The run takes longer than a second: the ticks meanwhile are skipped, and counted.
    let doc = server.wait_for("big", "a skipped tick", |d| {
        d["ticks"]["skipped"].as_u64() >= Some(1)
    });
    assert_eq!(doc["state"], "RUNNING", "{doc}");
    assert!(doc["records"].as_u64() < Some(ROWS), "{doc}");
    let (code, text) = server.request("GET", "/metrics", None);
    assert_eq!(code, 200);
    assert!(
        text.contains("faucet_schedule_ticks_skipped_total{pipeline=\"big\",row=\"\"} "),
        "{text}"
    );
    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("schedule tick skipped"), "{stderr}");
    let first = ids(&dir.jsonl("out/big.jsonl"));
    let n = u64::try_from(first.len()).expect("count");
    assert!(n > 0 && n < ROWS, "drained after {n} of {ROWS} rows");
    assert_eq!(n % 100, 0, "whole pages only: {n}");
    assert_eq!(first, (1..=n).collect::<Vec<_>>(), "a prefix, in order");

    // Restarted, it resumes after the drained page: every row once.
    let server = Server::start(&dir, &["pipelines"], Some(TOKEN));
    server.wait_for("big", "the rest", |d| d["records"] == ROWS - n);
    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        ids(&dir.jsonl("out/big.jsonl")),
        (1..=ROWS).collect::<Vec<_>>(),
        "every row exactly once"
    );
}

#[test]
fn faucet_run_serves_metrics_while_it_runs() {
    const ROWS: u64 = 200_000;
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, ROWS, true));
    dir.write(
        "p.yaml",
        crate::support::csv_pipeline("p", "  batch_size: 100\n"),
    );
    let mut child = faucet_command()
        .current_dir(dir.path())
        .args(["run", "p.yaml", "--metrics-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn faucet run");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = lines.next().expect("a line").expect("utf-8");
        if let Some(rest) = line.split("metrics on http://").nth(1) {
            break rest.trim_end_matches("/metrics").to_owned();
        }
    };
    let server = Server::adopt(child, addr);
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let (code, text) = server.request("GET", "/metrics", None);
        assert_eq!(code, 200, "{text}");
        if text.contains("faucet_records_total{pipeline=\"p\",row=\"\"} ")
            && !text.contains("faucet_records_total{pipeline=\"p\",row=\"\"} 0\n")
        {
            break text;
        }
        assert!(Instant::now() < deadline, "no records counted: {text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    promtool_check(&text);
    assert!(
        text.contains("# TYPE faucet_records_total counter"),
        "{text}"
    );
    assert!(
        text.contains("faucet_last_bookmark_timestamp_seconds{pipeline=\"p\",row=\"\"}"),
        "{text}"
    );
}

#[cfg(feature = "postgres")]
mod cdc {
    use super::*;
    use crate::postgres_connectors::{cdc_pipeline, own_cdc_fixture};
    use crate::support::{pg_url, runtime};

    #[test]
    fn a_continuous_cdc_row_runs_beside_a_scheduled_one_shows_its_lag_and_drains() {
        let rt = runtime();
        let (schema, slot, publication, pool, _cleanup) = own_cdc_fixture(&rt, "serve");
        let dir = Dir::new();
        dir.write(
            "pipelines/cdc.yaml",
            cdc_pipeline(&schema, &slot, &publication, true)
                .replace("./out/changes.jsonl", "../out/changes.jsonl"),
        );
        dir.write("good.csv", numbered_csv(1, 20, true));
        dir.write("pipelines/good.yaml", scheduled("good", "good.csv"));
        let url = pg_url();
        let env = [("FAUCET_CLI_PG_URL", url.as_str())];
        let server = Server::start_env(&dir, &["pipelines"], Some(TOKEN), &env);
        let active = || {
            let pool = pool.clone();
            let slot = slot.clone();
            rt.block_on(async move {
                sqlx::query_scalar::<_, bool>(&format!(
                    "SELECT coalesce((SELECT {} FROM pg_replication_slots WHERE slot_name = $1), false)",
                    crate::support::pg::SLOT_STREAMING
                ))
                .bind(&slot)
                .fetch_one(&pool)
                .await
                .expect("slot")
            })
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !active() {
            assert!(
                Instant::now() < deadline,
                "never streamed: {}",
                server.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        rt.block_on(async {
            sqlx::query(&format!(
                "INSERT INTO {schema}.orders SELECT g, 'new' FROM generate_series(1, 90) g"
            ))
            .execute(&pool)
            .await
            .expect("insert");
        });
        // 90 changes: not a whole number of pages, so the last page holds the commit, whose
        // time gives the lag.
        let doc = server.wait_for("cdc", "90 changes and a lag", |d| {
            d["records"] == 90 && d["lag_seconds"].is_number()
        });
        assert_eq!(doc["state"], "RUNNING", "{doc}");
        assert_eq!(doc["running"], true, "{doc}");
        assert!(doc["lag_seconds"].as_f64() < Some(30.0), "lag shows: {doc}");
        assert!(doc["bookmark"]["lsn"].is_string(), "{doc}");
        // The slot's retained WAL is sampled; the shared server keeps WAL for slots without
        // a limit (max_slot_wal_keep_size = -1), so there is no horizon.
        let doc = server.wait_for("cdc", "a retention sample", |d| {
            d["retained_wal_bytes"].is_u64()
        });
        assert!(doc["retention_horizon_seconds"].is_null(), "{doc}");
        assert!(doc["retention"]["limit_bytes"].is_null(), "{doc}");
        let (code, text) = server.request("GET", "/metrics", None);
        assert_eq!(code, 200, "{text}");
        promtool_check(&text);
        assert!(
            text.contains("faucet_slot_retained_wal_bytes{pipeline=\"cdc\",row=\"\"} "),
            "{text}"
        );
        assert!(
            text.contains("faucet_slot_retention_horizon_seconds{pipeline=\"cdc\",row=\"\"} inf\n"),
            "no horizon without a limit: {text}"
        );
        server.wait_for("good", "20 records", |d| d["records"] == 20);
        let (code, doc) = server.json("POST", "/pipelines/cdc/run", Some(TOKEN));
        assert_eq!(code, 409, "{doc}");

        let (code, stderr) = server.terminate();
        assert_eq!(code, 0, "{stderr}");
        assert!(!active(), "the drained run let go of the slot");
        let after: Vec<u64> = dir
            .jsonl("out/changes.jsonl")
            .iter()
            .map(|r| r["after"]["id"].as_u64().expect("after.id"))
            .collect();
        assert_eq!(after, (1..=90).collect::<Vec<_>>(), "each change once");
        // The lease is released: a plain run of the same key starts at once.
        dir.write(
            "pipelines/bounded.yaml",
            cdc_pipeline(&schema, &slot, &publication, false)
                .replace("./out/changes.jsonl", "../out/changes.jsonl"),
        );
        dir.faucet_env(&["run", "pipelines/bounded.yaml"], &env)
            .expect_code(0)
            .stdout_has(&["cdc: 0 records"]);
    }
}
