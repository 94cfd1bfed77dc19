//! faucet's connectors, one module per external system, one Cargo feature each
//! (docs/architecture.md, "The shape the code keeps", point 1): a system's client, type mapping, sources and sinks live together.
//!
//! | module | feature | connectors |
//! |---|---|---|
//! | `files` | `files` (default) | `csv` source, `jsonl` source, `jsonl` sink |
//! | `postgres` | `postgres` | `postgres` query source, `postgres-cdc` source (logical replication, pgoutput), `postgres` sink |
//! | `mysql` | `mysql` | `mysql` query source, `mysql-cdc` source (binlog), `mysql` sink (MySQL / MariaDB) |
//! | `sqlite` | `sqlite` | `sqlite` sink (a database file; SQLite bundled) |
//! | `mongodb` | `mongodb` | `mongodb-cdc` source (change streams), `mongodb` sink (append or keyed upsert; a page is one transaction with its commit token) and the BSON value mappings |
//! | `redis` | `redis-streams` | `redis-streams` sink |
//! | `nats` | `nats` | `nats` sink (JetStream) |
//! | `kafka` | `kafka` | `kafka` sink (librdkafka; at-least-once) |
//!
//! The bus sinks share [`bus`]: the message a record becomes (route, key, value, headers).
//!
//! Every connector has one shape: an `XConfig` (serde, unknown fields rejected, a `///` on
//! every field) with a pure `validate()` returning [`faucet_core::FaucetError::Config`] with
//! a relative field name; an `X::new(config)` that validates and does no I/O; the I/O in
//! `open()` and `check()` of [`faucet_core::Source`] / [`faucet_core::Sink`]. Errors are
//! `faucet_core::FaucetError` variants naming what failed and where (`file:line` for bad
//! input). Run them with [`faucet_core::Pipeline`]; the `files` module shows a whole run.

#[cfg(any(feature = "redis-streams", feature = "nats", feature = "kafka"))]
pub mod bus;
#[cfg(feature = "sql-source")]
mod copy_filter;
#[cfg(any(feature = "sql-source", feature = "mongodb"))]
#[cfg_attr(not(feature = "sql-source"), allow(dead_code))]
mod copy_history;
#[cfg(any(feature = "sql-source", feature = "mongodb"))]
mod copy_progress;
#[cfg(feature = "files")]
pub mod files;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "mongodb")]
pub mod mongodb;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis-streams")]
pub mod redis;
#[cfg(feature = "sql")]
pub mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// The unit tests' source of repeatable random `u64`s (proptest's deterministic generator):
/// the same sequence on every run, so a failing input can be found again. Used by the mysql
/// decoders' comparison tests.
#[cfg(all(test, feature = "mysql"))]
pub(crate) fn test_rng() -> impl FnMut() -> u64 {
    use proptest::prelude::Rng as _;
    use proptest::test_runner::{RngAlgorithm, TestRng};
    let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    move || rng.next_u64()
}
