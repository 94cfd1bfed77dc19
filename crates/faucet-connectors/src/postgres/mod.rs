//! PostgreSQL: the `postgres` query source, the `postgres-cdc` source and the `postgres` sink,
//! sharing one type mapping (`types`) and one way to open a session
//! (`types::SESSION_SETUP`: UTC, ISO dates, ISO 8601 intervals, hex bytea).
//!
//! * [`query::PostgresQuerySource`] (`type: postgres` as a source): a table or a query, in
//!   full or incrementally by a key tuple, streamed with `COPY ... TO STDOUT`;
//! * [`cdc`] (`type: postgres-cdc`): logical replication with pgoutput;
//! * [`sink::PostgresSink`] (`type: postgres` as a sink): append with `COPY ... FROM STDIN`,
//!   or upsert by key (change records applied in order), with an atomic commit token.
//!
//! What every user of a PostgreSQL server shares, `faucet-state-postgres` included: the
//! parsed connection URL ([`connection::PostgresUrl`]), identifiers ([`ident::TableName`])
//! and the classification of driver errors ([`failure::PgFailure`]).

pub mod cdc;
pub(crate) mod config;
pub mod connection;
pub(crate) mod datetime;
pub mod failure;
pub mod ident;
pub mod query;
pub mod sink;
pub mod snapshot;
pub(crate) mod type_catalog;
pub(crate) mod types;

pub use connection::PostgresUrl;
pub use ident::TableName;
pub use query::{
    PostgresQueryConfig, PostgresQuerySource, ReplicationMethod, ValidatedQueryConfig,
};
pub use sink::{PostgresSink, PostgresSinkConfig, ValidatedSinkConfig, WriteMode};
