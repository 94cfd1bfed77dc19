//! faucet-state-postgres integration tests, against the real PostgreSQL of
//! `FAUCET_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`; start it with
//! `scripts/services.sh`). Every test uses its own tables, so they run in parallel.

mod check;
mod lease;
mod lease_loss;
mod lifecycle;
mod pipeline;
mod support;
mod validation;
