//! PostgreSQL: the `postgres` query source, the `postgres-cdc` source and the `postgres` sink,
//! sharing one type mapping ([`types`]).

pub mod cdc;
pub mod query;
pub mod sink;
pub(crate) mod types;
