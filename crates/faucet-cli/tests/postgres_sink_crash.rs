//! Crash tests of the `postgres` query source and `postgres` sink through the real binary
//! (feature `postgres`): `faucet run` is aborted at every fault point (`FAUCET_FAULT=<point>:2`)
//! and SIGKILLed at random instants, restarted, and the target table compared with the
//! source: lost = 0 and duplicates = 0, for
//! * csv → postgres **append** with the atomic watermark (the commit token in the target
//!   re-anchors the restarted run; the table has no key, so a replayed page would show);
//! * postgres query (incremental) → postgres **upsert** (keyed upsert absorbs the replay).
//!
//! PostgreSQL from `FAUCET_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`;
//! start it with `scripts/services.sh`); each test in its own schema. `FAUCET_SOAK=1` runs
//! more random kills.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{pg_url, runtime};
use sqlx::{Connection as _, Executor as _, PgConnection};

const ROWS: usize = 3_000;
const BATCH: usize = 250;
/// Small pages for the SIGKILL tests, so a run lasts long enough to be killed mid-way.
const KILL_BATCH: usize = 20;

async fn connect() -> PgConnection {
    match PgConnection::connect(&pg_url()).await {
        Ok(c) => c,
        Err(e) => panic!(
            "PostgreSQL at FAUCET_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test) \
             is unreachable: {e}; start it with scripts/services.sh"
        ),
    }
}

fn sql(statements: &str) {
    runtime().block_on(async {
        let mut c = connect().await;
        c.execute(statements)
            .await
            .unwrap_or_else(|e| panic!("`{statements}`: {e}"));
    });
}

fn query_pairs(select: &str) -> Vec<(i64, i64)> {
    runtime().block_on(async {
        let mut c = connect().await;
        sqlx::query_as(select)
            .fetch_all(&mut c)
            .await
            .unwrap_or_else(|e| panic!("`{select}`: {e}"))
    })
}

fn faucet() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_faucet"));
    c.env_remove("FAUCET_FAULT")
        .env("FAUCET_CRASH_PG_URL", pg_url())
        .stdin(Stdio::null());
    c
}

fn run_to_completion(dir: &Path) {
    let out = faucet()
        .args(["run", "--quiet"])
        .current_dir(dir)
        .output()
        .expect("spawn faucet");
    assert!(
        out.status.success(),
        "the restarted run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Asserts every id 0..n is in `table` exactly once with `v = id * 3`.
fn check_exactly_once(table: &str, n: usize, what: &str) {
    let rows = query_pairs(&format!(
        "SELECT id::bigint, count(*)::bigint FROM {table} GROUP BY id ORDER BY id"
    ));
    let lost = n - rows.len();
    let dups: i64 = rows.iter().map(|(_, c)| c - 1).sum();
    assert_eq!(
        (lost, dups),
        (0, 0),
        "{what}: lost {lost}, duplicated {dups}"
    );
    let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (0..n as i64).collect::<Vec<_>>(), "{what}");
    let wrong = query_pairs(&format!(
        "SELECT id::bigint, v::bigint FROM {table} WHERE v <> id * 3"
    ));
    assert!(wrong.is_empty(), "{what}: wrong values {wrong:?}");
}

/// A scenario: a config and how to (re)create its source and target.
struct Scenario {
    schema: String,
    yaml: String,
    csv: bool,
}

impl Scenario {
    fn csv_to_append(tag: &str, batch: usize) -> Self {
        let schema = format!("cli_crash_csv_{tag}_{}", std::process::id());
        let yaml = format!(
            "version: 1\nname: crashcsv\npipeline:\n  \
             source: {{ type: csv, config: {{ path: ./in.csv, columns: {{ id: int, v: int }} }} }}\n  \
             sink: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", table: {schema}.target }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             delivery: effectively_once\n  batch_size: {batch}\n"
        );
        Self {
            schema,
            yaml,
            csv: true,
        }
    }

    fn query_to_upsert(tag: &str, batch: usize) -> Self {
        let schema = format!("cli_crash_pg_{tag}_{}", std::process::id());
        let yaml = format!(
            "version: 1\nname: crashpg\npipeline:\n  \
             source: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", table: {schema}.src, replication_method: incremental, replication_key: [updated_at, id] }} }}\n  \
             sink: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", table: {schema}.target, write_mode: upsert, key: [id] }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             delivery: effectively_once\n  batch_size: {batch}\n"
        );
        Self {
            schema,
            yaml,
            csv: false,
        }
    }

    /// A fresh schema, source and target; the config in `dir`.
    fn prepare(&self, dir: &Path) {
        let s = &self.schema;
        if self.csv {
            let mut text = String::from("id,v\n");
            for i in 0..ROWS {
                text.push_str(&format!("{i},{}\n", i * 3));
            }
            std::fs::write(dir.join("in.csv"), text).expect("csv");
            sql(&format!(
                "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}; \
                 CREATE TABLE {s}.target (id bigint, v bigint)"
            ));
        } else {
            sql(&format!(
                "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}; \
                 CREATE TABLE {s}.src (id integer PRIMARY KEY, v integer NOT NULL, \
                   updated_at timestamp NOT NULL); \
                 INSERT INTO {s}.src SELECT g, g * 3, '2026-01-01'::timestamp + (g / 7) * interval '1 s' \
                   FROM generate_series(0, {}) g; \
                 CREATE TABLE {s}.target (id integer PRIMARY KEY, v integer NOT NULL, \
                   updated_at timestamp NOT NULL)",
                ROWS - 1
            ));
        }
        std::fs::write(dir.join("faucet.yaml"), &self.yaml).expect("config");
    }

    fn check(&self, what: &str) {
        check_exactly_once(&format!("{}.target", self.schema), ROWS, what);
    }

    fn drop(&self) {
        sql(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
    }
}

fn abort_at_every_point(scenario: &Scenario) {
    for point in faucet_core::fault::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        scenario.prepare(dir.path());
        let out = faucet()
            .args(["run", "--quiet"])
            .env("FAUCET_FAULT", format!("{point}:2"))
            .current_dir(dir.path())
            .output()
            .expect("spawn faucet");
        assert!(
            !out.status.success(),
            "{point}:2 was never reached: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        run_to_completion(dir.path());
        scenario.check(&format!("after an abort at {point}:2"));
        // A third run has nothing left to do and changes nothing.
        run_to_completion(dir.path());
        scenario.check(&format!("a run after the recovery ({point})"));
    }
    scenario.drop();
}

#[test]
fn csv_into_append_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&Scenario::csv_to_append("points", BATCH));
}

#[test]
fn query_into_upsert_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&Scenario::query_to_upsert("points", BATCH));
}

/// SIGKILL at pseudo-random instants (a fixed sequence, so failures reproduce), several times
/// in a row, then a run to completion.
fn killed_at_random_instants(scenario: &Scenario) {
    let rounds = if std::env::var("FAUCET_SOAK").is_ok() {
        20
    } else {
        3
    };
    let dir = tempfile::tempdir().expect("tempdir");
    scenario.prepare(dir.path());
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut interrupted = 0;
    for _ in 0..rounds {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_millis(20 + seed % 400);
        let mut child = faucet()
            .args(["run", "--quiet"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn faucet");
        std::thread::sleep(delay);
        if matches!(child.try_wait(), Ok(None)) {
            interrupted += 1;
        }
        // SIGKILL (Child::kill): no destructor, no flush.
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(
        interrupted > 0,
        "no kill landed while a run was in progress"
    );
    run_to_completion(dir.path());
    scenario.check("after SIGKILLs at random instants");
    scenario.drop();
}

#[test]
fn csv_into_append_survives_sigkill() {
    killed_at_random_instants(&Scenario::csv_to_append("kill", KILL_BATCH));
}

#[test]
fn query_into_upsert_survives_sigkill() {
    killed_at_random_instants(&Scenario::query_to_upsert("kill", KILL_BATCH));
}
