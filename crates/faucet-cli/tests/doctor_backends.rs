//! `faucet doctor` on pipelines whose state lives in each backend — file, PostgreSQL, Redis:
//! every probe passes on a healthy setup (exit 0); a wrong password (a private server with
//! `scram-sha-256` authentication, so it is a real authentication failure), a missing table
//! (`ensure_table: false`) and a stopped Redis (a private `redis-server` the test starts and
//! kills) each fail their own probe with its hint, and the exit code counts the failed
//! probes. Neither password is ever printed. Doctor moves no data and leaves nothing behind.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::lease_e2e::{Backend, pg_connect, pg_url, redis_connect, runtime};
use crate::state_pg_restart::PrivateServer;
use crate::support::{Dir, Run, numbered_csv};

const RIGHT: &str = "right-Pw-4e2e3";
const WRONG: &str = "wrong-Pw-9q7x1";

/// A `redis-server` of its own on a free port (no persistence); killed on drop.
struct PrivateRedis {
    child: Option<Child>,
    port: u16,
    _dir: tempfile::TempDir,
}

impl PrivateRedis {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("redis-server cannot be started ({e}); install it with scripts/services.sh")
            });
        let server = Self {
            child: Some(child),
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = server.url();
        while runtime()
            .block_on(async {
                let client = redis::Client::open(url.as_str())?;
                let mut c = client.get_multiplexed_async_connection().await?;
                redis::cmd("PING").query_async::<String>(&mut c).await
            })
            .is_err()
        {
            assert!(Instant::now() < deadline, "private redis-server not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (SIGKILL) and reaps it: its port refuses connections from then on.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `faucet doctor <config>`; fails if either password appears anywhere in the output.
#[track_caller]
fn doctor(dir: &Dir, args: &[&str]) -> Run {
    let mut all = vec!["doctor"];
    all.extend_from_slice(args);
    let run = dir.faucet(&all);
    for pw in [RIGHT, WRONG] {
        assert!(
            !run.stdout.contains(pw) && !run.stderr.contains(pw),
            "doctor printed a password\n--- stdout\n{}\n--- stderr\n{}",
            run.stdout,
            run.stderr
        );
    }
    run
}

/// The checklist line of `row`'s state probe.
#[track_caller]
fn state_line(run: &Run, row: &str) -> String {
    let lines: Vec<&str> = run.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == format!("row {row}"))
        .unwrap_or_else(|| panic!("no row {row}\n{}", run.stdout));
    lines[at + 1..]
        .iter()
        .find(|l| l.trim_start().starts_with("✓ state") || l.trim_start().starts_with("✗ state"))
        .unwrap_or_else(|| panic!("no state probe for row {row}\n{}", run.stdout))
        .trim_start()
        .to_owned()
}

fn pipeline(rows: &[String]) -> String {
    let mut s = String::from(
        "version: 1\nname: doc\npipeline:\n  source: { type: csv, config: { path: ./data.csv } }\n  \
         sink: { type: jsonl, config: { path: ./out/data.jsonl } }\nmatrix:\n",
    );
    for r in rows {
        s.push_str(&format!("  - {r}\n"));
    }
    s
}

#[test]
fn doctor_probes_each_state_backend_and_counts_the_failures() {
    let pg = PrivateServer::start(Some(RIGHT), &[]);
    let mut redis = PrivateRedis::start();
    let missing_table = "faucet_e2e_doctor_missing";
    // The shared server holds the table that must not exist.
    let shared = Backend::postgres(missing_table);

    let file_row = "{ id: file, state: { type: file, config: { path: ./state } } }".to_owned();
    let pg_row = format!(
        "{{ id: pg, state: {{ type: postgres, config: {{ url: \"{}\", table: faucet_doctor_state, ensure_table: true }} }} }}",
        pg.url()
    );
    let redis_row = format!(
        "{{ id: redis, state: {{ type: redis, config: {{ url: \"{}\", prefix: \"faucet-e2e:doctor:\" }} }} }}",
        redis.url()
    );
    let wrong_row = format!(
        "{{ id: pg_wrong, state: {{ type: postgres, config: {{ url: \"{}\", table: faucet_doctor_state, ensure_table: true }} }} }}",
        pg.url_with_password(Some(WRONG))
    );
    let missing_row = format!(
        "{{ id: pg_missing, state: {{ type: postgres, config: {{ url: \"{}\", table: {missing_table}, ensure_table: false }} }} }}",
        pg_url()
    );
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 3, true));
    dir.write(
        "healthy.yaml",
        pipeline(&[file_row.clone(), pg_row, redis_row.clone()]),
    );
    dir.write(
        "broken.yaml",
        pipeline(&[wrong_row, missing_row, redis_row, file_row]),
    );

    // Healthy: 1 config + 3 rows × (source, sink, state).
    let run = doctor(&dir, &["healthy.yaml"]);
    run.expect_code(0).stdout_has(&["all 10 checks passed"]);
    assert!(
        state_line(&run, "file").starts_with("✓ state file "),
        "{}",
        run.stdout
    );
    assert!(
        state_line(&run, "pg").starts_with(&format!(
            "✓ state postgres postgres://postgres:***@127.0.0.1:{}/postgres table faucet_doctor_state",
            pg.port()
        )),
        "{}",
        run.stdout
    );
    assert!(
        state_line(&run, "redis").starts_with(&format!(
            "✓ state redis {} prefix faucet-e2e:doctor:",
            redis.url()
        )),
        "{}",
        run.stdout
    );
    // Nothing moved, nothing left behind.
    assert!(!dir.join("out").exists(), "doctor wrote the sink");
    runtime().block_on(async {
        let mut c = pg_connect(&pg.url()).await;
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM faucet_doctor_state")
            .fetch_one(&mut c)
            .await
            .expect("count");
        assert_eq!(left, 0, "doctor left rows in the state table");
        let mut r = redis_connect(&redis.url()).await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut r)
            .await
            .expect("KEYS");
        assert!(keys.is_empty(), "doctor left keys: {keys:?}");
    });

    // A wrong password and a missing table: exactly those two probes fail, with their hints.
    let run = doctor(&dir, &["broken.yaml"]);
    run.expect_code(2).stdout_has(&["2 of 13 checks failed"]);
    let wrong = state_line(&run, "pg_wrong");
    assert!(wrong.starts_with("✗ state postgres "), "{wrong}");
    assert!(wrong.contains("postgres://postgres:***@"), "{wrong}");
    assert!(wrong.contains("password authentication failed"), "{wrong}");
    assert!(
        wrong.contains("hint: check the user and password in the state url"),
        "{wrong}"
    );
    let missing = state_line(&run, "pg_missing");
    assert!(missing.starts_with("✗ state postgres "), "{missing}");
    assert!(
        missing.contains(&format!("\"{missing_table}\" does not exist")),
        "{missing}"
    );
    assert!(
        missing.contains("hint: set `ensure_table: true`"),
        "{missing}"
    );
    assert!(state_line(&run, "redis").starts_with("✓ state redis"));
    assert!(state_line(&run, "file").starts_with("✓ state file"));

    // Redis stopped: its probe fails too, in both files.
    redis.kill();
    let run = doctor(&dir, &["healthy.yaml"]);
    run.expect_code(1).stdout_has(&["1 of 10 checks failed"]);
    let down = state_line(&run, "redis");
    assert!(down.starts_with("✗ state redis "), "{down}");
    assert!(down.contains("connection refused"), "{down}");
    assert!(down.contains("hint: is Redis running"), "{down}");

    let run = doctor(&dir, &["broken.yaml", "--json"]);
    assert_eq!(run.code, 3, "{run:?}");
    let doc = run.json();
    assert_eq!(doc["failed"], 3, "{doc}");
    let failed: Vec<(String, String)> = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| {
            assert!(
                c["error"].as_str().is_some_and(|e| e.contains("hint: ")) || c["hint"].is_string(),
                "a failed probe without a hint: {c}"
            );
            (
                c["row"].as_str().expect("row").to_owned(),
                c["probe"].as_str().expect("probe").to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = ["pg_wrong", "pg_missing", "redis"]
        .iter()
        .map(|r| ((*r).to_owned(), "state".to_owned()))
        .collect();
    assert_eq!(failed, expected, "{doc}");

    // Doctor created no table where ensure_table is false.
    runtime().block_on(async {
        let mut c = pg_connect(&pg_url()).await;
        let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
            .bind(missing_table)
            .fetch_one(&mut c)
            .await
            .expect("to_regclass");
        assert_eq!(exists, None, "doctor created {missing_table}");
    });
    shared.reset();
}
