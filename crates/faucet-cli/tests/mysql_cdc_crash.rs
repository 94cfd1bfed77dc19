//! `mysql-cdc` through the binary against the test MariaDB (scripts/services.sh) when things
//! go wrong mid-run: the process SIGKILLed at random instants while it reads large
//! transactions, and the pipeline user's REPLICATION SLAVE revoked while a run follows the
//! binlog. Nothing committed is lost; duplicates stay within the page in flight per crash.
//! Modest counts by default, more under `FAUCET_SOAK=1`.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::flights::read_records;
use crate::support::mariadb::{mariadb, mysql_url_for, unique_server_id};
use crate::support::{Dir, Run, faucet_unarmed};

/// A bounded pipeline `mysql-cdc` → `out.jsonl` on `db.t` (state in a file), plus the same
/// with `continuous: true` as `continuous.yaml`.
fn write_pipelines(dir: &Dir, db: &str, batch: usize) {
    let yaml = |continuous: bool| {
        format!(
            "version: 1\nname: mycdc\npipeline:\n  source: {{ type: mysql-cdc, config: {{ \
             connection_url: \"${{env:SOURCE_MYSQL_URL}}\", server_id: {}, tables: [{db}.t], \
             continuous: {continuous} }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {batch}\n  \
             max_page_delay: 100ms\n",
            unique_server_id()
        )
    };
    dir.write("faucet.yaml", yaml(false));
    dir.write("continuous.yaml", yaml(true));
}

fn faucet_run(dir: &Path, url: &str, file: &str) -> Command {
    let mut c = faucet_unarmed();
    c.env("SOURCE_MYSQL_URL", url)
        .args(["run", "--quiet", file])
        .current_dir(dir);
    c
}

fn run(dir: &Path, url: &str, file: &str) -> Run {
    Run::from_output(faucet_run(dir, url, file).output().expect("run faucet"))
}

/// A pseudo-random delay in `[lo, hi)` ms (xorshift; the seed is printed to reproduce).
struct Delays(u64);

impl Delays {
    fn new() -> Self {
        let seed = std::env::var("FAUCET_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1
            });
        eprintln!("mysql_cdc_crash: FAUCET_SEED={seed}");
        Self(seed)
    }

    fn next(&mut self, lo: u64, hi: u64) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(lo + self.0 % (hi - lo))
    }
}

/// The rows a run delivered, as `(id, v)` of each record's after image (deletes: before),
/// with how often each was written.
fn delivered(dir: &Path) -> HashMap<(u64, u64), usize> {
    let mut seen = HashMap::new();
    for r in read_records(dir, "out.jsonl") {
        let image = if r["op"] == "d" {
            &r["before"]
        } else {
            &r["after"]
        };
        let key = (
            image["id"].as_u64().expect("id"),
            image["v"].as_u64().expect("v"),
        );
        *seen.entry(key).or_default() += 1;
    }
    seen
}

#[test]
fn mysql_cdc_sigkilled_at_random_instants_inside_large_transactions_loses_nothing() {
    const ROWS: u64 = 20_000;
    const BATCH: usize = 1_000;
    let soak = std::env::var("FAUCET_SOAK").is_ok();
    let (txns, kills) = if soak { (12, 30) } else { (5, 6) };
    let db = format!("cli_cdc_kill_{}", faucet_test_support::unique_suffix());
    mariadb(&format!(
        "CREATE DATABASE {db}; USE {db};
         CREATE TABLE t (id INT UNSIGNED PRIMARY KEY, v INT UNSIGNED NOT NULL, pad VARCHAR(64));
         INSERT INTO t SELECT seq, 0, REPEAT('x', 64) FROM seq_1_to_{ROWS};"
    ));
    let url = mysql_url_for(&db, None);
    let dir = Dir::new();
    write_pipelines(&dir, &db, BATCH);
    crate::support::with_cleanup(
        || {
            run(dir.path(), &url, "faucet.yaml").expect_code(0);
            // `txns` transactions of ROWS changes each: every kill below lands inside one.
            for _ in 0..txns {
                mariadb(&format!("UPDATE {db}.t SET v = v + 1"));
            }
            let mut delays = Delays::new();
            let mut killed = 0;
            let started = Instant::now();
            for k in 0..kills {
                let mut child = faucet_run(dir.path(), &url, "faucet.yaml")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn faucet");
                // The first kill comes early, inside the work (100 pages with fsyncs take far
                // longer), so that a fast machine cannot finish the changes before any kill.
                let hi = if k == 0 { 300 } else { 1_500 };
                std::thread::sleep(delays.next(50, hi));
                if child.try_wait().expect("wait").is_none() {
                    child.kill().expect("SIGKILL");
                    killed += 1;
                }
                let _ = child.wait();
            }
            let last = run(dir.path(), &url, "faucet.yaml");
            last.expect_code(0);
            assert!(
                killed > 0,
                "no run was killed mid-run: the kills proved nothing"
            );
            let seen = delivered(dir.path());
            let lost: Vec<(u64, u64)> = (1..=ROWS)
                .flat_map(|id| (1..=txns).map(move |v| (id, v)))
                .filter(|k| !seen.contains_key(k))
                .collect();
            let extra: Vec<&(u64, u64)> = seen.keys().filter(|(_, v)| *v > txns).collect();
            let duplicates: usize = seen.values().map(|n| n - 1).sum();
            eprintln!(
                "mysql_cdc_crash: {} changes in {txns} transactions, {killed} of {kills} runs \
                 SIGKILLed mid-run, {duplicates} duplicates, {:.1} s",
                ROWS * txns,
                started.elapsed().as_secs_f64()
            );
            assert!(
                lost.is_empty(),
                "{} changes lost, first {:?}",
                lost.len(),
                &lost[..lost.len().min(10)]
            );
            assert!(extra.is_empty(), "changes never made: {extra:?}");
            assert!(
                duplicates <= killed * BATCH,
                "{duplicates} duplicates for {killed} kills of pages of {BATCH}"
            );
            // Nothing left: a run now reads nothing and writes nothing.
            let before = read_records(dir.path(), "out.jsonl").len();
            run(dir.path(), &url, "faucet.yaml").expect_code(0);
            assert_eq!(read_records(dir.path(), "out.jsonl").len(), before);
        },
        || {
            mariadb(&format!("DROP DATABASE IF EXISTS {db}"));
        },
    );
}

/// Polls until `out.jsonl` holds at least `n` records; fails after 60 s.
#[track_caller]
fn wait_for_records(dir: &Path, n: usize, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = std::fs::read_to_string(dir.join("out.jsonl"))
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if got >= n {
            return;
        }
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the continuous run ended with {got} of {n} records"
        );
        assert!(Instant::now() < deadline, "{got} of {n} records after 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Inserts rows `from..from+n` in transactions of 100.
fn insert_rows(db: &str, from: u64, n: u64) {
    let mut sql = format!("USE {db};");
    for start in (from..from + n).step_by(100) {
        let end = (start + 99).min(from + n - 1);
        sql.push_str(&format!(
            "INSERT INTO t SELECT seq, 1, 'p' FROM seq_{start}_to_{end};"
        ));
    }
    mariadb(&sql);
}

#[test]
fn mysql_cdc_with_replication_slave_revoked_mid_run_fails_naming_it_and_resumes_after_grant() {
    const BATCH: usize = 100;
    let suffix = faucet_test_support::unique_suffix();
    let db = format!("cli_cdc_revoke_{suffix}");
    let user = format!("fc_rev_{}", std::process::id());
    let password = "rev-secret-pw";
    mariadb(&format!(
        "CREATE DATABASE {db};
         CREATE TABLE {db}.t (id INT UNSIGNED PRIMARY KEY, v INT UNSIGNED NOT NULL, pad VARCHAR(8));
         DROP USER IF EXISTS '{user}'@'%';
         CREATE USER '{user}'@'%' IDENTIFIED BY '{password}';
         GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%';
         GRANT SELECT ON {db}.* TO '{user}'@'%';"
    ));
    let url = mysql_url_for(&db, Some((&user, password)));
    let dir = Dir::new();
    write_pipelines(&dir, &db, BATCH);
    crate::support::with_cleanup(
        || {
            run(dir.path(), &url, "faucet.yaml").expect_code(0);
            let mut child = faucet_run(dir.path(), &url, "continuous.yaml")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn faucet");
            insert_rows(&db, 1, 500);
            wait_for_records(dir.path(), 500, &mut child);

            // Revoked mid-run: the server checks REPLICATION SLAVE when a dump starts, so the
            // dump in progress goes on (rows written now still arrive) ...
            mariadb(&format!(
                "REVOKE REPLICATION SLAVE ON *.* FROM '{user}'@'%'"
            ));
            insert_rows(&db, 501, 500);
            wait_for_records(dir.path(), 1_000, &mut child);
            // ... until its connection drops (a network blip, a server restart): then the run
            // ends with an error, and no later run can read the binlog.
            let dumps = mariadb(&format!(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{user}' \
                 AND COMMAND LIKE 'Binlog Dump%'"
            ));
            let dumps: Vec<&str> = dumps.lines().collect();
            assert_eq!(dumps.len(), 1, "one dump connection of {user}: {dumps:?}");
            mariadb(&format!("KILL CONNECTION {}", dumps[0]));
            let deadline = Instant::now() + Duration::from_secs(60);
            while child.try_wait().expect("wait").is_none() {
                assert!(
                    Instant::now() < deadline,
                    "the run outlived its dump connection by 60 s"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            let ended = Run::from_output(child.wait_with_output().expect("wait"));
            assert_ne!(ended.code, 0, "{}", ended.stderr);
            insert_rows(&db, 1_001, 500);
            let written = read_records(dir.path(), "out.jsonl").len();
            let state = std::fs::read(dir.join("state")).ok();

            let refused = run(dir.path(), &url, "faucet.yaml");
            eprintln!(
                "mysql_cdc_crash: the run whose dump was dropped: exit {}: {}\nthe rerun: exit {}: {}",
                ended.code,
                ended.stderr.trim(),
                refused.code,
                refused.stderr.trim()
            );
            assert_ne!(refused.code, 0, "a run without REPLICATION SLAVE succeeded");
            refused.stderr_has(&["REPLICATION SLAVE", "GRANT REPLICATION SLAVE ON *.* TO"]);
            assert!(!refused.stderr.contains(password), "{}", refused.stderr);
            assert_eq!(
                read_records(dir.path(), "out.jsonl").len(),
                written,
                "the refused run wrote records"
            );
            assert_eq!(
                std::fs::read(dir.join("state")).ok(),
                state,
                "the refused run moved the bookmark"
            );
            let doctor = Run::from_output(
                faucet_unarmed()
                    .env("SOURCE_MYSQL_URL", &url)
                    .args(["doctor", "faucet.yaml"])
                    .current_dir(dir.path())
                    .output()
                    .expect("doctor"),
            );
            doctor
                .expect_code(1)
                .stdout_has(&["✗ source mysql-cdc", "REPLICATION SLAVE"]);

            mariadb(&format!("GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%'"));
            run(dir.path(), &url, "faucet.yaml").expect_code(0);
            let seen = delivered(dir.path());
            let lost: Vec<u64> = (1..=1_500)
                .filter(|id| !seen.contains_key(&(*id, 1)))
                .collect();
            let duplicates: usize = seen.values().map(|n| n - 1).sum();
            assert!(lost.is_empty(), "{} rows lost: {lost:?}", lost.len());
            assert_eq!(seen.len(), 1_500, "rows never inserted");
            assert!(
                duplicates <= BATCH,
                "{duplicates} duplicates for one dropped connection"
            );
        },
        || {
            mariadb(&format!(
                "DROP DATABASE IF EXISTS {db}; DROP USER IF EXISTS '{user}'@'%'"
            ));
        },
    );
}
