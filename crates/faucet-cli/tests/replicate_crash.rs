//! Crash tests of `faucet replicate` through the real binary: the process is aborted
//! (`FAUCET_FAULT`, like `kill -9`: no destructor, no flush) or SIGKILLed in the middle of
//! its snapshot — twice, the second time inside the resumed copy — while a workload writes
//! to the source table, then restarted until it has copied everything and caught up with
//! the changes. The pipeline's output must equal the source table value by value:
//!
//! * **jsonl (append)**, aborted after a bookmark is stored (`after_state_put`, where an
//!   append sink holds exactly the bookmarked pages): every key's `op: r` at most once, no
//!   change applied twice or missing, except the changes between two snapshots of the keys
//!   of the page in flight at each interruption, which are delivered again by design (see
//!   `faucet_connectors::postgres::snapshot`), and applied here as upserts;
//! * **postgres upsert**, aborted between a page's write and its bookmark (`after_flush`,
//!   so the sink holds a page read as of the old snapshot) and SIGKILLed at random
//!   instants: the target table equals the source. The target is empty when the copy
//!   begins, so the copy takes the sink's plain COPY (`postgres::sink::snapshot_copy`);
//!   it is also aborted at every fault point of a SQL sink, and a target that already holds
//!   rows (stale versions of half the keys) takes the upsert and ends equal to the source.
//!
//! PostgreSQL with wal_level=logical from `FAUCET_TEST_PG_URL` (`scripts/services.sh`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::Value as Json;
use sqlx::PgPool;

use crate::support::output_of_success;
use crate::support::pg::{Names, cleanup, exec, write_until};
use crate::support::replicate::{
    ReplicaSource, aborted_mid_snapshot, jsonl_aborted_twice_mid_snapshot, pg_rows, replicate,
    target_equals_source, upsert_aborted_between_write_and_bookmark, upsert_sigkilled_mid_snapshot,
    upsert_sink, with_workload,
};

const ROWS: i64 = 3000;
const BATCH: u64 = 100;

impl ReplicaSource for Names {
    const POSITION: &'static str = "lsn";
    const PG_URL_ENV: &'static str = "FAUCET_REPL_CRASH_PG_URL";

    /// A schema with `items` (3,000 rows) and an empty `target`; the slot and publication
    /// are made by the first run.
    fn create(rt: &tokio::runtime::Runtime, pool: &PgPool, tag: &str) -> Self {
        let names = Names::new(tag);
        let s = &names.schema;
        rt.block_on(exec(
            pool,
            &format!(
                "CREATE SCHEMA {s}; CREATE SEQUENCE {s}.seq;
                 CREATE TABLE {s}.items (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL);
                 INSERT INTO {s}.items SELECT g, nextval('{s}.seq'), 'n' || g FROM generate_series(1, {ROWS}) g;
                 CREATE TABLE {s}.target (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL);"
            ),
        ));
        names
    }

    fn source_yaml(&self) -> String {
        self.cdc_source(Self::PG_URL_ENV, &format!("{}.items", self.schema))
    }

    /// One transaction each ([`write_until`]).
    fn workload(&self, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
        let schema = self.schema.clone();
        write_until(stop, move |i| {
            let k = (i * 7919) % ROWS + 1;
            match i % 4 {
                0 => format!(
                    "INSERT INTO {schema}.items VALUES ({}, nextval('{schema}.seq'), 'new') \
                     ON CONFLICT (id) DO UPDATE SET v = nextval('{schema}.seq')",
                    k + ROWS * (i % 3)
                ),
                1 | 2 => format!(
                    "UPDATE {schema}.items SET v = nextval('{schema}.seq'), note = note || '+' \
                     WHERE id = {k}"
                ),
                _ => format!("DELETE FROM {schema}.items WHERE id = {k}"),
            }
        })
    }

    fn drop_objects(&self, rt: &tokio::runtime::Runtime, pool: &PgPool) {
        rt.block_on(cleanup(pool, self));
    }

    fn items(&self) -> String {
        format!("{}.items", self.schema)
    }

    fn pg_schema(&self) -> &str {
        &self.schema
    }

    fn snapshot_of(record: &Json) -> String {
        record["lsn"].as_str().expect("lsn").to_owned()
    }

    fn source_rows(&self, rt: &tokio::runtime::Runtime, pool: &PgPool) -> BTreeMap<i64, Json> {
        rt.block_on(pg_rows(pool, &self.items()))
    }
}

fn faucet(dir: &Path) -> Command {
    replicate::<Names>(dir)
}

fn run_to_completion(dir: &Path) {
    output_of_success(&mut faucet(dir), "the restarted run");
}

#[test]
fn replicate_into_jsonl_aborted_twice_mid_snapshot_equals_the_source() {
    jsonl_aborted_twice_mid_snapshot::<Names>(BATCH);
}

#[test]
fn replicate_into_postgres_upsert_aborted_between_write_and_bookmark_equals_the_source() {
    upsert_aborted_between_write_and_bookmark::<Names>(BATCH);
}

#[test]
fn replicate_into_postgres_upsert_sigkilled_mid_snapshot_equals_the_source() {
    let mid_snapshot = upsert_sigkilled_mid_snapshot::<Names>(BATCH, 1, |round| {
        Duration::from_millis(60 + 37 * (round % 5))
    });
    assert!(mid_snapshot > 0, "no kill landed mid-snapshot");
}

#[test]
fn replicate_into_an_empty_postgres_target_aborted_at_every_point_equals_the_source() {
    for point in faucet_core::fault::SQL_SINK {
        with_workload::<Names>(
            "points",
            BATCH,
            upsert_sink::<Names>,
            |dir| {
                // The fourth hit: some pages of the copy are in the target, most are not.
                aborted_mid_snapshot(faucet(dir), dir, point, 4);
                run_to_completion(dir);
            },
            |rt, pool, names, _| target_equals_source(rt, pool, names),
        );
    }
}

#[test]
fn replicate_into_a_postgres_target_holding_rows_upserts_them() {
    let rt = crate::support::runtime();
    let pool = rt.block_on(crate::support::pg_pool());
    let names = Names::create(&rt, &pool, "held");
    let s = &names.schema;
    // Stale versions of every other key: the copy meets them as conflicts.
    rt.block_on(exec(
        &pool,
        &format!("INSERT INTO {s}.target SELECT id, -v, 'stale' FROM {s}.items WHERE id % 2 = 0"),
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    crate::support::write_pipeline(
        dir,
        "replicate",
        &names.source_yaml(),
        &upsert_sink(&names),
        &format!("  batch_size: {BATCH}\n"),
    );
    crate::support::with_cleanup(
        || {
            aborted_mid_snapshot(faucet(dir), dir, "after_flush", 4);
            run_to_completion(dir);
            target_equals_source(&rt, &pool, &names);
        },
        || names.drop_objects(&rt, &pool),
    );
}
