//! One runner per state key, proven through the real `faucet` binary (csv → jsonl) for each
//! state backend — file, PostgreSQL (`FAUCET_TEST_PG_URL`) and Redis
//! (`FAUCET_TEST_REDIS_URL`); start the services with `scripts/services.sh`:
//!
//! * two `faucet run` of one state key: the second exits 4 at once, naming the holder's host,
//!   pid and since; with `--wait-for-lease` it waits and then completes — moving nothing
//!   after a holder that finished, or exactly the remaining rows after a holder stopped by
//!   SIGTERM — and the output holds every row exactly once;
//! * a holder paused (SIGSTOP) past its `--lease-ttl`: a second run takes the lease and
//!   completes; after SIGCONT the first fails with the lost-lease error, the stored bookmark
//!   stays the second run's (never moved backwards), and no record is missing. The file
//!   store's lease is an OS lock the kernel never expires while its process lives, so there
//!   the second run is refused (exit 4, holder named) for as long as the first is stopped.
//!
//! The helpers here (backends, spawned runs, signals) are shared with `state_pg_restart` and
//! `doctor_backends`.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use faucet_core::state::StateStore;
use faucet_state_postgres::PostgresStateStore;
use faucet_state_redis::RedisStateStore;
use faucet_test_support::Service;

use crate::support::{Dir, Run, csv_pipeline, faucet_command, ids, numbered_csv};
pub(crate) use crate::support::{pg_connect, pg_url, redis_connect, redis_url, runtime};

/// This machine's host name, as a lease holder reports it.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("/proc/sys/kernel/hostname")
        .trim()
        .to_owned()
}

/// Sends `signal` (`-STOP`, `-CONT`, `-TERM`) to `pid`.
pub(crate) fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

/// Where a test keeps its bookmarks.
pub(crate) enum Backend {
    /// `state: {type: file, config: {path: ./state}}`.
    File,
    /// `state: {type: postgres, ...}` with `ensure_table: true`.
    Postgres {
        /// The server.
        url: String,
        /// The test's own table.
        table: String,
    },
    /// `state: {type: redis, ...}`.
    Redis {
        /// The server.
        url: String,
        /// The test's own key prefix.
        prefix: String,
    },
}

impl Backend {
    /// The shared PostgreSQL server, table `table` (dropped first, with its lease table).
    pub(crate) fn postgres(table: &str) -> Self {
        let b = Self::Postgres {
            url: pg_url(),
            table: table.to_owned(),
        };
        b.reset();
        b
    }

    /// The shared Redis server, keys under `prefix` (deleted first).
    pub(crate) fn redis(prefix: &str) -> Self {
        let b = Self::Redis {
            url: redis_url(),
            prefix: prefix.to_owned(),
        };
        b.reset();
        b
    }

    /// The `state:` block.
    pub(crate) fn state_yaml(&self) -> String {
        match self {
            Self::File => "{ type: file, config: { path: ./state } }".to_owned(),
            Self::Postgres { url, table } => format!(
                "{{ type: postgres, config: {{ url: \"{url}\", table: {table}, ensure_table: true }} }}"
            ),
            Self::Redis { url, prefix } => {
                format!("{{ type: redis, config: {{ url: \"{url}\", prefix: \"{prefix}\" }} }}")
            }
        }
    }

    /// How many rows the lease tests' pipeline moves on this store: enough that a second run
    /// starts while the first is still writing (the faster a store commits a page, the more).
    pub(crate) fn rows(&self) -> u64 {
        match self {
            Self::File => 3_000,
            Self::Postgres { .. } => 6_000,
            Self::Redis { .. } => 15_000,
        }
    }

    /// Runs `test` on this backend, then [`Backend::reset`]s it.
    pub(crate) fn test_then_reset(self, test: impl FnOnce(&Self)) {
        test(&self);
        self.reset();
    }

    /// Removes everything a previous run of the test left.
    pub(crate) fn reset(&self) {
        match self {
            Self::File => {}
            Self::Postgres { url, table } => runtime().block_on(async {
                let mut conn = pg_connect(url).await;
                for t in [table.clone(), format!("{table}_lease")] {
                    sqlx::query(&format!("DROP TABLE IF EXISTS \"{t}\""))
                        .execute(&mut conn)
                        .await
                        .expect("drop table");
                }
            }),
            Self::Redis { url, prefix } => runtime().block_on(async {
                let mut conn = redis_connect(url).await;
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{prefix}*"))
                    .query_async(&mut conn)
                    .await
                    .expect("KEYS");
                for key in keys {
                    redis::cmd("DEL")
                        .arg(&key)
                        .query_async::<()>(&mut conn)
                        .await
                        .expect("DEL");
                }
            }),
        }
    }

    /// The bookmark stored under `key` (out of its entry), read through the store itself.
    pub(crate) fn bookmark(&self, dir: &Dir, key: &str) -> Option<serde_json::Value> {
        runtime().block_on(async {
            let store: Arc<dyn StateStore> = match self {
                Self::File => Arc::new(faucet_core::state::FileStateStore::new(dir.join("state"))),
                Self::Postgres { url, table } => Arc::new(
                    Service::Postgres
                        .expect_up(PostgresStateStore::connect_with(url, 1, table).await),
                ),
                Self::Redis { url, prefix } => {
                    Arc::new(Service::Redis.expect_up(RedisStateStore::connect(url, prefix).await))
                }
            };
            store
                .get(key)
                .await
                .expect("read the bookmark")
                .map(crate::support::bookmark_of)
        })
    }
}

/// A run that waits up to 30 s for the lease, reports in JSON and logs at `info` (so its
/// stderr says when it is waiting).
pub(crate) const WAITER_ARGS: &[&str] = &[
    "run",
    "p.yaml",
    "--wait-for-lease",
    "30s",
    "--output",
    "json",
    "--log-level",
    "info",
];

/// A `faucet` process running in the background, its stdout and stderr in files under
/// `logs/` of the test's directory. Killed on drop if still running (stopped ones too).
pub(crate) struct Spawned {
    child: Option<Child>,
    /// The process id.
    pub(crate) pid: u32,
    out: PathBuf,
    err: PathBuf,
}

impl Spawned {
    /// Starts `faucet <args>` in `dir`; `tag` names its log files.
    pub(crate) fn start(dir: &Dir, tag: &str, args: &[&str]) -> Self {
        let mut cmd = faucet_command();
        cmd.current_dir(dir.path())
            .env_remove("FAUCET_FAULT")
            .args(args);
        Self::spawn(dir, tag, &mut cmd)
    }

    /// Starts `cmd` (a `faucet` command, configured) with stdin closed and its output in log
    /// files under `dir`, named by `tag`.
    pub(crate) fn spawn(dir: &Dir, tag: &str, cmd: &mut std::process::Command) -> Self {
        let out = dir.join(&format!("logs/{tag}.out"));
        let err = dir.join(&format!("logs/{tag}.err"));
        std::fs::create_dir_all(dir.join("logs")).expect("mkdir logs");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("spawn faucet");
        Self {
            pid: child.id(),
            child: Some(child),
            out,
            err,
        }
    }

    /// Whether it is still running (or stopped).
    pub(crate) fn running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => c.try_wait().expect("try_wait").is_none(),
            None => false,
        }
    }

    /// What it printed on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Sends `sig` to it.
    pub(crate) fn signal(&self, sig: &str) {
        signal(self.pid, sig);
    }

    /// Waits up to `limit` for it to exit (killing it and failing after that).
    #[track_caller]
    pub(crate) fn wait(mut self, limit: Duration) -> Run {
        let deadline = Instant::now() + limit;
        let mut child = self.child.take().expect("not waited yet");
        let status = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "faucet (pid {}) still running after {limit:?}\n--- stderr\n{}",
                    self.pid,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Run {
            code: status.code().unwrap_or(-1),
            stdout: std::fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: self.stderr(),
        }
    }

    /// Polls until `done()` holds; fails if the process exits first or after 60 s.
    #[track_caller]
    pub(crate) fn wait_until(&mut self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if done(self) {
                return;
            }
            assert!(
                self.running(),
                "faucet (pid {}) exited before {what}; a bigger input would keep it running\n\
                 --- stderr\n{}",
                self.pid,
                self.stderr()
            );
            assert!(
                Instant::now() < deadline,
                "no {what} within 60 s\n--- stderr\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The size of `rel` in `dir` (0 when missing).
pub(crate) fn size(dir: &Dir, rel: &str) -> u64 {
    std::fs::metadata(dir.join(rel))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// The output file of [`csv_pipeline`].
pub(crate) const OUT: &str = "out/data.jsonl";

/// How many records of [`OUT`] repeat an earlier one; panics unless the output holds every
/// id `1..=total` (nothing lost) and no other.
#[track_caller]
pub(crate) fn doubled_of_all(dir: &Dir, total: u64) -> u64 {
    let counts = id_counts(dir);
    let missing: Vec<u64> = (1..=total).filter(|i| !counts.contains_key(i)).collect();
    assert!(missing.is_empty(), "lost records: {missing:?}");
    assert_eq!(counts.len() as u64, total, "ids outside the input");
    counts.values().map(|c| c - 1).sum()
}

/// How many times each id appears in the output; fails on a torn or non-JSON line.
pub(crate) fn id_counts(dir: &Dir) -> std::collections::BTreeMap<u64, u64> {
    let text = String::from_utf8(dir.read(OUT).unwrap_or_default()).expect("utf-8 output");
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the output ends in a torn line"
    );
    let mut counts = std::collections::BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("output line {} is not JSON ({e}): {line:?}", i + 1));
        for id in ids(std::slice::from_ref(&v)) {
            assert_eq!(v["name"], format!("name-{id}"), "line {}: {line}", i + 1);
            *counts.entry(id).or_insert(0) += 1;
        }
    }
    counts
}

/// The `records` of a stored csv bookmark: 0 when there is none yet, or only the `null` a run
/// stores under its key when it starts.
pub(crate) fn records_of(bookmark: Option<serde_json::Value>) -> u64 {
    match bookmark {
        None | Some(serde_json::Value::Null) => 0,
        Some(b) => b["records"]
            .as_u64()
            .unwrap_or_else(|| panic!("a csv bookmark without records: {b}")),
    }
}

/// The `rows` of a `--output json` run.
pub(crate) fn rows_moved(run: &Run) -> u64 {
    run.json()["runs"][0]["rows"]
        .as_u64()
        .unwrap_or_else(|| panic!("no rows in {}", run.stdout))
}

/// A directory with `data.csv` of `rows` rows and `p.yaml` (csv → jsonl, `backend`,
/// `batch_size`), state key `name`.
fn pipeline_dir(name: &str, backend: &Backend, rows: u64, batch: u64) -> Dir {
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, rows, true));
    dir.write(
        "p.yaml",
        csv_pipeline(
            name,
            &format!("  state: {}\n  batch_size: {batch}\n", backend.state_yaml()),
        ),
    );
    dir
}

/// The time in a lease message's `(since <RFC 3339>)`.
fn since_in(message: &str) -> SystemTime {
    let at = message.find("(since ").expect("(since ") + "(since ".len();
    let end = message[at..].find(')').expect(")") + at;
    humantime::parse_rfc3339(&message[at..end])
        .unwrap_or_else(|e| panic!("since {:?}: {e}", &message[at..end]))
}

const BATCH: u64 = 10;

/// Point 1: exclusion, waiting after a holder that finishes, waiting after a holder stopped
/// by SIGTERM. `rows` is sized so that the holder runs a few seconds on `backend`.
fn two_runs_on_one_key(name: &str, backend: &Backend) {
    let rows = backend.rows();
    let dir = pipeline_dir(name, backend, rows, BATCH);
    let host = hostname();

    // A: the holder runs; a second run is refused at once, naming it.
    let before = SystemTime::now() - Duration::from_secs(1);
    let mut holder = Spawned::start(&dir, "holder", &["run", "p.yaml", "--output", "json"]);
    holder.wait_until("its first page", |_| size(&dir, OUT) > 0);
    let asked = Instant::now();
    let refused = dir.faucet(&["run", "p.yaml"]);
    let took = asked.elapsed();
    refused.expect_code(4).stderr_has(&[
        &format!("state key `{name}` is in use by another run"),
        &format!("pid {} on host {host} (since ", holder.pid),
        "--wait-for-lease",
    ]);
    let since = since_in(&refused.stderr);
    assert!(
        since >= before && since <= SystemTime::now(),
        "since {since:?} is not the holder's start"
    );
    assert!(took < Duration::from_secs(10), "refused after {took:?}");

    // B: a run with --wait-for-lease waits for the holder, then finds nothing left.
    let mut waiter = Spawned::start(&dir, "waiter", WAITER_ARGS);
    waiter.wait_until("the waiter waiting", |w| {
        w.stderr().contains("waiting for the lease")
    });
    let waiting = waiter.stderr();
    assert!(
        waiting.contains(&format!("pid {} on host {host}", holder.pid)),
        "{waiting}"
    );
    let first = holder.wait(Duration::from_secs(120));
    first.expect_code(0);
    let second = waiter.wait(Duration::from_secs(60));
    second.expect_code(0);
    assert_eq!(rows_moved(&first), rows, "{}", first.stdout);
    assert_eq!(rows_moved(&second), 0, "{}", second.stdout);
    assert_eq!(ids(&dir.jsonl(OUT)), (1..=rows).collect::<Vec<_>>());

    // C: a holder stopped by SIGTERM hands over; the waiter moves exactly the rest. The
    // holder is paused (SIGSTOP, far within its 30 s lease) while the waiter starts waiting,
    // so the SIGTERM surely reaches it mid-input, however fast this machine is.
    dir.append("data.csv", &numbered_csv(rows + 1, rows, false));
    let done = size(&dir, OUT);
    let mut holder = Spawned::start(&dir, "holder2", &["run", "p.yaml", "--output", "json"]);
    holder.wait_until("its first page", |_| size(&dir, OUT) > done);
    holder.signal("-STOP");
    let mut waiter = Spawned::start(&dir, "waiter2", WAITER_ARGS);
    waiter.wait_until("the waiter waiting", |w| {
        w.stderr().contains("waiting for the lease")
    });
    holder.signal("-TERM");
    holder.signal("-CONT");
    let first = holder.wait(Duration::from_secs(60));
    first.expect_code(0);
    assert_eq!(first.json()["cancelled"], true, "{}", first.stdout);
    let moved = rows_moved(&first);
    assert!(
        moved > 0 && moved < rows,
        "the holder moved {moved} of {rows}"
    );
    let second = waiter.wait(Duration::from_secs(120));
    second.expect_code(0);
    assert_eq!(
        rows_moved(&second),
        rows - moved,
        "the waiter moves exactly the rest"
    );
    assert_eq!(
        ids(&dir.jsonl(OUT)),
        (1..=2 * rows).collect::<Vec<_>>(),
        "every row exactly once"
    );
    let bookmark = backend.bookmark(&dir, name).expect("a bookmark");
    assert_eq!(bookmark["records"], 2 * rows, "{bookmark}");
}

/// One `#[test]` per line `test => store, name;`: `check(name, &store)` on that state store
/// (a [`Backend`]), which is reset after.
macro_rules! store_tests {
    ($check:ident: $($test:ident => $store:expr, $name:literal;)+) => {
        $(
            #[test]
            fn $test() {
                $store.test_then_reset(|b| $check($name, b));
            }
        )+
    };
}

store_tests! { two_runs_on_one_key:
    file_state_one_runner_per_key_and_wait_for_lease => Backend::File, "lease_file";
    postgres_state_one_runner_per_key_and_wait_for_lease =>
        Backend::postgres("faucet_e2e_lease"), "lease_pg";
    redis_state_one_runner_per_key_and_wait_for_lease =>
        Backend::redis("faucet-e2e:lease:"), "lease_redis";
}

/// A holder SIGKILLed mid-run leaves its lease behind in a store whose leases outlive
/// their process; the next run on the same host sees that the holder's process is gone
/// and takes the lease at once (not after the 30 s ttl), then moves exactly what the killed
/// run had not made durable: every row at least once, none lost.
fn killed_holder_on_this_host(name: &str, backend: &Backend) {
    let rows = backend.rows();
    let dir = pipeline_dir(name, backend, rows, BATCH);
    let mut holder = Spawned::start(&dir, "killed", &["run", "p.yaml", "--output", "json"]);
    holder.wait_until("its first page", |_| size(&dir, OUT) > 0);
    holder.signal("-KILL");
    let killed = holder.wait(Duration::from_secs(30));
    assert_ne!(killed.code, 0, "the holder was killed: {}", killed.stderr);
    let started = Instant::now();
    let next = dir.faucet(&["run", "p.yaml", "--output", "json"]);
    let took = started.elapsed();
    next.expect_code(0);
    assert!(
        next.stderr.contains("took over its lease"),
        "the take-over is logged: {}",
        next.stderr
    );
    assert!(
        took < Duration::from_secs(20),
        "the next run waited for the dead holder's lease: {took:?}"
    );
    let got = ids(&dir.jsonl(OUT));
    let distinct: std::collections::BTreeSet<u64> = got.iter().copied().collect();
    assert_eq!(
        distinct,
        (1..=rows).collect(),
        "every row delivered after the kill"
    );
    let bookmark = backend.bookmark(&dir, name).expect("a bookmark");
    assert_eq!(bookmark["records"], rows, "{bookmark}");
}

store_tests! { killed_holder_on_this_host:
    postgres_state_a_killed_holder_s_lease_is_taken_over_at_once =>
        Backend::postgres("faucet_e2e_lease_killed"), "lease_pg_killed";
    redis_state_a_killed_holder_s_lease_is_taken_over_at_once =>
        Backend::redis("faucet-e2e:lease-killed:"), "lease_redis_killed";
}

/// Point 2 for stores whose leases expire: a holder stopped past its ttl (once its output
/// passed `stop_after` bytes) loses the key to a second run and, resumed, cannot write its
/// bookmark.
fn stalled_holder_loses_the_lease(name: &str, backend: &Backend, stop_after: u64) {
    const ROWS: u64 = 4_000;
    let dir = pipeline_dir(name, backend, ROWS, BATCH);
    let csv_len = size(&dir, "data.csv");
    let mut holder = Spawned::start(
        &dir,
        "holder",
        &["run", "p.yaml", "--lease-ttl", "2s", "--output", "json"],
    );
    holder.wait_until("its output to grow", |_| size(&dir, OUT) > stop_after);
    holder.signal("-STOP");
    // A statement it sent just before stopping still completes on the server.
    std::thread::sleep(Duration::from_millis(300));
    let paused_at = records_of(backend.bookmark(&dir, name));

    // The waiter's arguments but its log level.
    let taker = dir.faucet(&WAITER_ARGS[..WAITER_ARGS.len() - 2]);
    taker.expect_code(0);
    assert_eq!(
        rows_moved(&taker),
        ROWS - paused_at,
        "the taker resumes from the stalled holder's last bookmark"
    );
    let taken = backend.bookmark(&dir, name).expect("the taker's bookmark");
    assert_eq!(taken["records"], ROWS, "{taken}");
    assert_eq!(taken["byte_offset"], csv_len, "{taken}");

    holder.signal("-CONT");
    let stalled = holder.wait(Duration::from_secs(60));
    assert_ne!(stalled.code, 0, "{stalled:?}");
    stalled.stderr_has(&[
        &format!("lost the lease on state key `{name}`"),
        "the bookmark was not written",
    ]);
    assert_eq!(
        backend.bookmark(&dir, name).expect("bookmark"),
        taken,
        "the stalled run moved the bookmark"
    );

    let doubled = doubled_of_all(&dir, ROWS);
    // At-least-once, one page at most: either the holder stopped between writing a page and
    // persisting its bookmark (the taker writes that page again; the holder's bookmark is
    // refused after SIGCONT), or after persisting it (the holder writes one more page after
    // SIGCONT, then its bookmark is refused).
    assert!(doubled <= BATCH, "{doubled} records doubled");
}

/// One stall per backend; `FAUCET_SOAK=1`: ten, each stopped at a different instant.
fn stall_rounds() -> u64 {
    if std::env::var_os("FAUCET_SOAK").is_some() {
        10
    } else {
        1
    }
}

/// [`stalled_holder_loses_the_lease`] in [`stall_rounds`] rounds (`<name><round>`), the holder
/// stopped after `round × 5,000` bytes of output.
fn stalled_in_rounds(name: &str, backend: &Backend) {
    for round in 0..stall_rounds() {
        stalled_holder_loses_the_lease(&format!("{name}{round}"), backend, round * 5_000);
    }
}

store_tests! { stalled_in_rounds:
    postgres_state_a_stalled_holder_cannot_write_its_bookmark =>
        Backend::postgres("faucet_e2e_stall"), "stall_pg";
    redis_state_a_stalled_holder_cannot_write_its_bookmark =>
        Backend::redis("faucet-e2e:stall:"), "stall_redis";
}

/// Point 2 on the file store, its expected behaviour: the lease is an OS file lock, which the
/// kernel holds for as long as the process lives, stopped or not; `--lease-ttl` does not
/// make it expire. A second run waits for it and gives up naming the stopped holder; resumed,
/// the holder finishes and the output has every row exactly once.
#[test]
fn file_state_a_stopped_holder_keeps_its_lock() {
    const ROWS: u64 = 2_000;
    let name = "stall_file";
    let dir = pipeline_dir(name, &Backend::File, ROWS, BATCH);
    let mut holder = Spawned::start(
        &dir,
        "holder",
        &["run", "p.yaml", "--lease-ttl", "2s", "--output", "json"],
    );
    holder.wait_until("its first page", |_| size(&dir, OUT) > 0);
    holder.signal("-STOP");
    let asked = Instant::now();
    let refused = dir.faucet(&["run", "p.yaml", "--wait-for-lease", "3s"]);
    assert!(asked.elapsed() >= Duration::from_secs(3), "it did not wait");
    refused.expect_code(4).stderr_has(&[
        &format!("state key `{name}` is in use by another run"),
        &format!("pid {} on host {}", holder.pid, hostname()),
    ]);
    holder.signal("-CONT");
    let run = holder.wait(Duration::from_secs(120));
    run.expect_code(0);
    assert_eq!(rows_moved(&run), ROWS);
    assert_eq!(ids(&dir.jsonl(OUT)), (1..=ROWS).collect::<Vec<_>>());
}

/// The postgres sink's writer fences outlive a state store that is reset (or replaced):
/// the new store's first lease has fence 1 while `faucet_fences` holds a larger one. The run
/// whose lease is live in its store takes the target's fence over, says so, and writes;
/// it is not refused as a zombie.
#[test]
fn postgres_sink_fences_survive_a_reset_state_store() {
    let table = "faucet_e2e_fence_reset";
    let backend = Backend::postgres("faucet_e2e_fence_state");
    let url = pg_url();
    let drop_target = || {
        runtime().block_on(async {
            let mut conn = pg_connect(&url).await;
            for sql in [
                format!("DROP TABLE IF EXISTS public.{table}"),
                "CREATE TABLE IF NOT EXISTS public.faucet_fences (scope text PRIMARY KEY, \
                 fence bigint NOT NULL, fenced_at timestamptz NOT NULL DEFAULT now())"
                    .to_owned(),
                format!("DELETE FROM public.faucet_fences WHERE scope LIKE '%{table}'"),
                "CREATE TABLE IF NOT EXISTS public.faucet_commit_tokens (scope text PRIMARY KEY, \
                 sequence bigint NOT NULL, bookmark jsonb NOT NULL, committed_at timestamptz \
                 NOT NULL DEFAULT now())"
                    .to_owned(),
                format!("DELETE FROM public.faucet_commit_tokens WHERE scope LIKE '%{table}'"),
            ] {
                sqlx::query(&sql).execute(&mut conn).await.expect(&sql);
            }
        });
    };
    drop_target();
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 20, true));
    dir.write(
        "p.yaml",
        format!(
            "version: 1\nname: fence_reset\npipeline:\n  source: {{ type: csv, config: {{ path: ./data.csv }} }}\n  \
             sink: {{ type: postgres, config: {{ connection_url: \"{url}\", table: public.{table}, \
             write_mode: upsert, key: [id], create_table: true }} }}\n  state: {}\n",
            backend.state_yaml()
        ),
    );
    for _ in 0..3 {
        dir.faucet(&["run", "p.yaml"]).expect_code(0);
    }
    let fence_of = || -> i64 {
        runtime().block_on(async {
            let mut conn = pg_connect(&url).await;
            sqlx::query_scalar(&format!(
                "SELECT fence FROM public.faucet_fences WHERE scope LIKE '%{table}'"
            ))
            .fetch_one(&mut conn)
            .await
            .expect("the fence row")
        })
    };
    assert_eq!(fence_of(), 3, "three runs, three leases");
    backend.reset();
    dir.append("data.csv", &numbered_csv(21, 5, false));
    let run = dir.faucet(&["run", "p.yaml"]);
    run.expect_code(0);
    assert!(
        run.stderr.contains("taking the target's fence over"),
        "{}",
        run.stderr
    );
    assert_eq!(fence_of(), 1, "the live lease's fence");
    let rows: i64 = runtime().block_on(async {
        let mut conn = pg_connect(&url).await;
        sqlx::query_scalar(&format!("SELECT count(DISTINCT id) FROM public.{table}"))
            .fetch_one(&mut conn)
            .await
            .expect("count")
    });
    assert_eq!(
        rows, 25,
        "every row, after the reset as before: {}",
        run.stderr
    );
    drop_target();
    backend.reset();
}
