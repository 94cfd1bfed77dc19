//! faucet's connectors, one module per external system, one Cargo feature each
//! (CONVENTIONS.md point 1): a system's client, type mapping, sources and sinks live together.
//!
//! * [`files`] (feature `files`, default): the `csv` and `jsonl` sources and the `jsonl` sink;
//! * [`postgres`] (feature `postgres`): the `postgres` query source, the `postgres-cdc` source
//!   (logical replication, pgoutput) and the `postgres` sink.
//!
//! Every connector follows one shape: a `XConfig` (serde, unknown fields rejected) with a pure
//! `validate()`, a `X::new(config)` that does no I/O, and the I/O in `open()` / `check()`.

#[cfg(feature = "files")]
pub mod files;
#[cfg(feature = "postgres")]
pub mod postgres;
