//! Running the `faucet` binary in a temporary directory, and reading what it wrote.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[cfg(all(feature = "redis-streams", feature = "nats", feature = "postgres"))]
pub(crate) mod bus;
// The file crash tests use only `kill_after`; the drivers serve the database scenarios.
#[cfg_attr(not(any(feature = "sql", feature = "mongodb")), allow(dead_code))]
pub(crate) mod crash;
#[cfg(feature = "sql")]
pub(crate) mod flights;
#[cfg(feature = "mysql")]
pub(crate) mod mariadb;
#[cfg(feature = "mongodb")]
pub(crate) mod mongo;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod pg;
#[cfg(feature = "postgres")]
pub(crate) mod replicate;
#[cfg(feature = "postgres")]
pub(crate) mod routed;
pub(crate) mod server;

/// The repository's root (for `examples/`).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `test`, then `cleanup` whatever happened (the objects a test made on shared servers);
/// a panic of `test` is passed on after the cleanup.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn with_cleanup(test: impl FnOnce(), cleanup: impl FnOnce()) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(test));
    cleanup();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `soak` when `FAUCET_SOAK` is set (the longer runs of a soak test), `normal` otherwise.
pub(crate) fn soak_or<T>(soak: T, normal: T) -> T {
    if std::env::var_os("FAUCET_SOAK").is_some() {
        soak
    } else {
        normal
    }
}

/// The `state:` of a pipeline with the file state store in `./state`.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) const FILE_STATE: &str = "{ type: file, config: { path: ./state } }";

/// The config of pipeline `name`: `source` into `sink` with the state store `state` (YAML
/// flow mappings, `{ type: …, config: { … } }`), then the pipeline lines `tail` (each
/// `  key: value\n`, e.g. `"  batch_size: 50\n"`; `""` for none), which may go on with
/// top-level keys (`matrix:`).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn config_yaml(name: &str, source: &str, sink: &str, state: &str, tail: &str) -> String {
    format!(
        "version: 1\nname: {name}\npipeline:\n  source: {source}\n  sink: {sink}\n  \
         state: {state}\n{tail}"
    )
}

/// [`config_yaml`] with the file state store in `./state` ([`FILE_STATE`]).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn pipeline_yaml(name: &str, source: &str, sink: &str, tail: &str) -> String {
    config_yaml(name, source, sink, FILE_STATE, tail)
}

/// Writes [`pipeline_yaml`] to `dir/faucet.yaml`.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn write_pipeline(dir: &Path, name: &str, source: &str, sink: &str, tail: &str) {
    std::fs::write(
        dir.join("faucet.yaml"),
        pipeline_yaml(name, source, sink, tail),
    )
    .expect("config");
}

/// A `faucet` command with a clean environment for logging.
pub(crate) fn faucet_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_faucet"));
    cmd.env_remove("FAUCET_LOG");
    cmd
}

/// [`faucet_command`] with no fault armed (`FAUCET_FAULT` removed) and stdin closed: the
/// base of the crash tests' runs.
pub(crate) fn faucet_unarmed() -> Command {
    let mut cmd = faucet_command();
    cmd.env_remove("FAUCET_FAULT")
        .stdin(std::process::Stdio::null());
    cmd
}

/// `out` itself; panics with `what`, the exit status and stderr unless the process exited
/// successfully.
#[track_caller]
pub(crate) fn assert_succeeded(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd` to its end and returns its output; panics with `what`, the exit status and
/// stderr unless it exited successfully.
#[track_caller]
pub(crate) fn output_of_success(cmd: &mut Command, what: &str) -> Output {
    assert_succeeded(cmd.output().expect("spawn faucet"), what)
}

/// Spawns `cmd` (a `faucet` command, its stdio as the caller set it), SIGKILLs it after
/// `after` (no destructor, no flush) unless it ended by then, and reaps it. Returns whether
/// it was still running, that is whether it was killed mid-run.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn killed_after(mut cmd: Command, after: std::time::Duration) -> bool {
    let mut child = cmd.spawn().expect("spawn faucet");
    std::thread::sleep(after);
    let running = child.try_wait().expect("try_wait").is_none();
    if running {
        let _ = child.kill();
    }
    let _ = child.wait();
    running
}

/// [`killed_after`] with stdout and stderr discarded.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn killed_quietly_after(mut cmd: Command, after: std::time::Duration) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    killed_after(cmd, after)
}

/// Runs `cmd` with `FAUCET_FAULT=<fault>` (`point:hit`) to its end; panics unless it
/// failed, that is unless the fault point was reached.
#[track_caller]
pub(crate) fn expect_aborted(cmd: &mut Command, fault: &str) {
    let out = cmd
        .env("FAUCET_FAULT", fault)
        .output()
        .expect("spawn faucet");
    assert!(
        !out.status.success(),
        "{fault} was never reached: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What a finished `faucet` printed and returned.
#[derive(Debug)]
pub(crate) struct Run {
    /// The exit code (`-1` when killed by a signal).
    pub(crate) code: i32,
    /// Everything on stdout.
    pub(crate) stdout: String,
    /// Everything on stderr.
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn from_output(o: Output) -> Self {
        Self {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Panics with both streams unless the exit code is `code`.
    #[track_caller]
    pub(crate) fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Panics unless stderr contains every one of `needles`.
    #[track_caller]
    pub(crate) fn stderr_has(&self, needles: &[&str]) -> &Self {
        for n in needles {
            assert!(
                self.stderr.contains(n),
                "stderr lacks {n:?}\n--- stderr\n{}\n--- stdout\n{}",
                self.stderr,
                self.stdout
            );
        }
        self
    }

    /// Panics unless stdout contains every one of `needles`.
    #[track_caller]
    pub(crate) fn stdout_has(&self, needles: &[&str]) -> &Self {
        for n in needles {
            assert!(
                self.stdout.contains(n),
                "stdout lacks {n:?}\n--- stdout\n{}\n--- stderr\n{}",
                self.stdout,
                self.stderr
            );
        }
        self
    }

    /// stdout parsed as one JSON document.
    #[track_caller]
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e})\n--- stdout\n{}\n--- stderr\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// A temporary working directory holding a pipeline file and its data.
pub(crate) struct Dir {
    tmp: tempfile::TempDir,
}

impl Dir {
    pub(crate) fn new() -> Self {
        Self {
            tmp: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.tmp.path()
    }

    pub(crate) fn join(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// Writes `rel` (creating directories).
    pub(crate) fn write(&self, rel: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, contents).expect("write");
        p
    }

    /// Appends to `rel`.
    pub(crate) fn append(&self, rel: &str, contents: &str) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.join(rel))
            .expect("open for append");
        f.write_all(contents.as_bytes()).expect("append");
    }

    /// The bytes of `rel`, or `None` when it does not exist.
    pub(crate) fn read(&self, rel: &str) -> Option<Vec<u8>> {
        std::fs::read(self.join(rel)).ok()
    }

    /// The lines of `rel` (a missing file has none).
    pub(crate) fn lines(&self, rel: &str) -> Vec<String> {
        self.read(rel)
            .map(|b| {
                String::from_utf8(b)
                    .expect("utf-8")
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The complete lines of `rel` while another process appends to it: only lines ended by
    /// `\n`. A write in flight can be seen in part — Linux raises a file's size page by page
    /// as `write(2)` copies, so a line that crosses a 4 KiB page shows its head first — and a
    /// test that parsed that head would fail on a line the sink wrote whole.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn written_lines(&self, rel: &str) -> Vec<String> {
        let mut bytes = self.read(rel).unwrap_or_default();
        let whole = bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        bytes.truncate(whole);
        String::from_utf8(bytes)
            .expect("utf-8")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The JSON objects of a JSON Lines file.
    pub(crate) fn jsonl(&self, rel: &str) -> Vec<serde_json::Value> {
        self.lines(rel)
            .iter()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    /// Runs `faucet <args>` in this directory and waits.
    pub(crate) fn faucet(&self, args: &[&str]) -> Run {
        self.faucet_env(args, &[])
    }

    /// Runs `faucet <args>` in this directory with extra environment variables.
    pub(crate) fn faucet_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = faucet_command();
        cmd.current_dir(self.path()).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Run::from_output(cmd.output().expect("run faucet"))
    }

    /// Copies `examples/weather` (config and CSV) here.
    pub(crate) fn with_weather_example(&self) {
        let src = repo_root().join("examples/weather");
        for f in ["faucet.yaml", "weather.csv"] {
            std::fs::copy(src.join(f), self.join(f)).expect("copy example");
        }
    }
}

/// A CSV of `n` rows `id,name,amount` (`id` 1..=n), header included.
pub(crate) fn numbered_csv(first: u64, n: u64, header: bool) -> String {
    let mut s = String::new();
    if header {
        s.push_str("id,name,amount\n");
    }
    for id in first..first + n {
        s.push_str(&format!("{id},name-{id},{}.{:02}\n", id * 3, id % 100));
    }
    s
}

/// A minimal pipeline file: csv `data.csv` → jsonl `out/data.jsonl`, with `extra` appended
/// under `pipeline:` (indented by the caller).
pub(crate) fn csv_pipeline(name: &str, extra: &str) -> String {
    format!(
        "version: 1\nname: {name}\npipeline:\n  source: {{ type: csv, config: {{ path: ./data.csv }} }}\n  sink: {{ type: jsonl, config: {{ path: ./out/data.jsonl }} }}\n{extra}"
    )
}

/// The bookmark of a state entry as stored: `{"bookmark": B, "sink": "..."}` gives `B`;
/// a bare bookmark (a sink that records no target) is itself.
pub(crate) fn bookmark_of(entry: serde_json::Value) -> serde_json::Value {
    faucet_core::testing::stored_bookmark(entry)
}

/// The ids of a JSON Lines output whose records have a string or number `id`.
pub(crate) fn ids(records: &[serde_json::Value]) -> Vec<u64> {
    records
        .iter()
        .map(|r| match &r["id"] {
            serde_json::Value::String(s) => s.parse().expect("numeric id"),
            serde_json::Value::Number(n) => n.as_u64().expect("u64 id"),
            other => panic!("id {other}"),
        })
        .collect()
}

#[cfg(any(
    feature = "postgres",
    feature = "state-postgres",
    feature = "state-redis"
))]
use faucet_test_support::Service;
/// The test PostgreSQL server's URL (`FAUCET_TEST_PG_URL`, by default the local server that
/// `scripts/services.sh` starts).
#[cfg(any(feature = "postgres", feature = "state-postgres"))]
pub(crate) use faucet_test_support::pg_url;
/// The test Redis server's URL (`FAUCET_TEST_REDIS_URL`, by default the local server).
#[cfg(feature = "state-redis")]
pub(crate) use faucet_test_support::redis_url;

/// A pool of two connections on the test PostgreSQL server ([`pg_url`]); panics naming the
/// service and the script that starts it when the server is unreachable.
#[cfg(any(feature = "postgres", feature = "state-postgres"))]
pub(crate) async fn pg_pool() -> sqlx::PgPool {
    Service::Postgres.expect_up(
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&pg_url())
            .await,
    )
}

/// Drops the PostgreSQL state store's table `table` and its lease table (`<table>_lease`) on
/// the test server, best effort (a test's cleanup: a failed DROP is ignored).
#[cfg(any(feature = "postgres", feature = "state-postgres"))]
pub(crate) fn drop_state_tables(table: &str) {
    runtime().block_on(async {
        let drop = format!("DROP TABLE IF EXISTS \"{table}\", \"{table}_lease\"");
        let _ = sqlx::raw_sql(&drop).execute(&pg_pool().await).await;
    });
}

/// One connection to PostgreSQL at `url` (the test server, or a private one a test started);
/// panics naming the service and the script that starts it when the server is unreachable.
#[cfg(any(
    feature = "postgres",
    all(feature = "state-postgres", feature = "state-redis")
))]
pub(crate) async fn pg_connect(url: &str) -> sqlx::PgConnection {
    Service::Postgres.expect_up(<sqlx::PgConnection as sqlx::Connection>::connect(url).await)
}

/// A connection to Redis at `url`; panics naming the service and the script that starts it
/// when the server is unreachable.
#[cfg(feature = "state-redis")]
pub(crate) async fn redis_connect(url: &str) -> redis::aio::MultiplexedConnection {
    let conn = async {
        redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await
    };
    Service::Redis.expect_up(conn.await)
}

/// A runtime for a test's own calls to the services (the binary under test runs apart).
#[cfg(any(
    feature = "postgres",
    feature = "state-postgres",
    feature = "state-redis"
))]
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A spawned run, SIGKILLed if the test ends before it is stopped (a failed assertion), so it
/// does not keep a slot, a binlog connection or a lease.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) struct KillOnDrop(pub(crate) Option<std::process::Child>);

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl KillOnDrop {
    /// The process id (0 once taken).
    pub(crate) fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, std::process::Child::id)
    }

    /// The child, to stop and reap it the test's way.
    pub(crate) fn take(&mut self) -> std::process::Child {
        self.0.take().expect("the run is still held")
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
