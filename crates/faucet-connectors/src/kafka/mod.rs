//! Kafka: the `kafka` sink, [`KafkaSink`], at-least-once.
//!
//! * Each record is one produce (librdkafka's idempotent producer, `acks=all`) to the topic
//!   its `topic` template names for the record's source table: the bus message
//!   ([`crate::bus::message`]) as value, its key (`key:`, or a change record's source key) as the Kafka key — the
//!   partition follows the key (`murmur2_random`, the Java client's rule), so one key's
//!   records stay in order — and headers `faucet-op`, `faucet-table`, `faucet-position`,
//!   `faucet-id`.
//! * A page is durable when every produce of it is acknowledged: the sink hands them all to
//!   librdkafka (which batches and compresses them, `compression`), then awaits every
//!   delivery report. One failure fails the page; the run re-delivers from the last
//!   bookmark, so a crash or a failed page may deliver records again (**at-least-once**).
//!   The idempotent producer keeps its own retries from doubling a message; it does not
//!   span a restart. A consumer can drop a replay by `faucet-id` (the same record from the
//!   same bookmark gets the same id).
//! * **No effectively-once**: that would need each page and its commit token in one Kafka
//!   transaction, read back by `read_committed` consumers; the only Kafka-compatible broker
//!   that can be had to test it (tansu) shows aborted transactions to such consumers, so the
//!   path cannot be proven. `delivery: effectively_once` into `kafka` is refused with
//!   [`LIMIT`] as the reason.
//! * librdkafka is built from the source `rdkafka-sys` bundles, with zlib, zstd and OpenSSL
//!   (TLS; SASL PLAIN, SCRAM, OAUTHBEARER with a static token); `properties:` passes
//!   anything else to it.
//! * Fault point: [`faucet_core::fault::MID_PAGE`] once half a page's records are handed to
//!   librdkafka (some may be acknowledged already).

mod config;
mod sink;

pub use config::{
    Compression, DEFAULT_MESSAGE_TIMEOUT_MS, KafkaSinkConfig, OWN_PROPERTIES, ValidatedKafkaConfig,
    check_topic,
};
pub use sink::{CONNECTOR, KafkaSink, LIMIT, METADATA_TIMEOUT};
