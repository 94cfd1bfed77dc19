//! What a run reports about itself while it goes, shared by `faucet run --metrics-listen`
//! and `faucet serve`: [`metrics`] (the Prometheus metrics and their text endpoint) and
//! [`retention`] (sampling what a source's upstream retains for it, e.g. a replication
//! slot's WAL). Below both commands: it imports neither.

pub(crate) mod metrics;
pub(crate) mod retention;
