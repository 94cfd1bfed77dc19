//! Crash tests of the `postgres` query source and `postgres` sink through the real binary
//! (feature `postgres`): `faucet run` is aborted at every fault point (`FAUCET_FAULT=<point>:2`)
//! and SIGKILLed at random instants, restarted, and the target table compared with the
//! source: lost = 0 and duplicates = 0, for
//! * csv → postgres **append** with the atomic watermark (the commit token in the target
//!   re-anchors the restarted run; the table has no key, so a replayed page would show);
//! * postgres query (incremental) → postgres **upsert** (keyed upsert absorbs the replay).
//!
//! The scenarios and crash drivers are in `support::pg`. PostgreSQL from
//! `FAUCET_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`; start it with
//! `scripts/services.sh`); each test in its own schema. `FAUCET_SOAK=1` runs more random kills.

use crate::support::pg::{
    BATCH, KILL_BATCH, Pair, Scenario, abort_at_every_point, killed_at_random_instants,
};

#[test]
fn csv_into_append_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&Scenario::new(Pair::CsvAppend, "points", BATCH));
}

#[test]
fn query_into_upsert_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&Scenario::new(Pair::QueryUpsert, "points", BATCH));
}

#[test]
fn csv_into_append_survives_sigkill() {
    killed_at_random_instants(&Scenario::new(Pair::CsvAppend, "kill", KILL_BATCH));
}

#[test]
fn query_into_upsert_survives_sigkill() {
    killed_at_random_instants(&Scenario::new(Pair::QueryUpsert, "kill", KILL_BATCH));
}
