//! The PostgreSQL server holding the state restarted while a `faucet run` (csv → jsonl,
//! `state: {type: postgres}`) is in flight — on a private server this test starts itself
//! (`initdb` into a temp directory, its own port; the shared server on 5432 is never
//! touched). Whatever the run does (retry and complete, or fail with a clear error), the
//! stored bookmark is never ahead of what the JSONL file holds, and a rerun completes the
//! input with nothing lost. `FAUCET_SOAK=1` restarts it many more times.
//!
//! [`PrivateServer`] is shared with `doctor_backends` (a server with password
//! authentication, where a wrong password is a real authentication failure).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::lease_e2e::{
    Backend, OUT, Spawned, doubled_of_all, id_counts, records_of, rows_moved, size,
};
use crate::support::{Dir, csv_pipeline, numbered_csv};

/// A PostgreSQL server of its own: `initdb` into a temp directory (as the `postgres` OS user
/// when running as root, since the server refuses to run as root), started with `pg_ctl` on
/// a free port; stopped (immediate) on drop.
pub(crate) struct PrivateServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    password: Option<String>,
}

fn pg_bin() -> PathBuf {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    candidates.sort();
    candidates
        .pop()
        .filter(|b| b.join("initdb").exists())
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL server binaries (initdb, pg_ctl) not found under \
                 /usr/lib/postgresql; install them with scripts/services.sh"
            )
        })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `program args` as the `postgres` user when root; its output on failure.
fn run_pg(program: &Path, args: &[&str]) -> Result<(), String> {
    let output = if is_root() {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(program)
            .args(args)
            .output()
    } else {
        Command::new(program).args(args).output()
    }
    .map_err(|e| format!("{}: {e}", program.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {args:?} failed: {}\n{}{}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl PrivateServer {
    /// A running server: `trust` authentication without `password`, `scram-sha-256` with
    /// the `postgres` role's password set to it.
    pub(crate) fn start(password: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = pg_bin();
        let data = dir.path().join("data").to_string_lossy().into_owned();
        let mut args = vec![
            "-D".to_owned(),
            data,
            "-U".to_owned(),
            "postgres".to_owned(),
            "-E".to_owned(),
            "UTF8".to_owned(),
            "--no-sync".to_owned(),
        ];
        match password {
            None => args.extend(["-A".to_owned(), "trust".to_owned()]),
            Some(pw) => {
                let file = dir.path().join("pwfile");
                std::fs::write(&file, format!("{pw}\n")).expect("pwfile");
                args.extend([
                    "-A".to_owned(),
                    "scram-sha-256".to_owned(),
                    format!("--pwfile={}", file.display()),
                ]);
            }
        }
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown the private server's directory");
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_pg(&bin.join("initdb"), &args).unwrap_or_else(|e| panic!("{e}"));
        let server = Self {
            dir,
            bin,
            port: free_port(),
            password: password.map(str::to_owned),
        };
        server.start_again();
        server
    }

    fn data(&self) -> String {
        self.dir.path().join("data").to_string_lossy().into_owned()
    }

    /// `pg_ctl start -w` (after [`PrivateServer::stop`]).
    pub(crate) fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").to_string_lossy().into_owned();
        let args = [
            "-D",
            &self.data(),
            "-o",
            &options,
            "-l",
            &log,
            "-w",
            "-t",
            "60",
            "start",
        ];
        if let Err(e) = run_pg(&self.bin.join("pg_ctl"), &args) {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("{e}\n--- server log\n{log}");
        }
    }

    /// `pg_ctl stop -m <mode> -w` (`fast`: sessions are terminated, a checkpoint is written;
    /// `immediate`: the server quits at once and recovers from WAL at the next start).
    pub(crate) fn stop(&self, mode: &str) {
        run_pg(
            &self.bin.join("pg_ctl"),
            &["-D", &self.data(), "-m", mode, "-w", "-t", "60", "stop"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The TCP port it listens on (127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres[:password]@127.0.0.1:<port>/postgres`.
    pub(crate) fn url(&self) -> String {
        self.url_with_password(self.password.as_deref())
    }

    /// The server's URL with another password (or none).
    pub(crate) fn url_with_password(&self, password: Option<&str>) -> String {
        match password {
            Some(pw) => format!("postgres://postgres:{pw}@127.0.0.1:{}/postgres", self.port),
            None => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = run_pg(
            &self.bin.join("pg_ctl"),
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }
}

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
    let server = PrivateServer::start(None);
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
        server.start_again();
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
    let rerun = dir.faucet(&[
        "run",
        "p.yaml",
        "--wait-for-lease",
        "30s",
        "--output",
        "json",
    ]);
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
