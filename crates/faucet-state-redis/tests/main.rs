//! faucet-state-redis integration tests, against the real Redis of `FAUCET_TEST_REDIS_URL`
//! (default `redis://127.0.0.1:6379/`; start it with `scripts/services.sh`) and, for
//! failure cases, private `redis-server` processes on free ports. Every test uses its own
//! key prefix, so they run in parallel.

mod check;
mod lease;
mod lifecycle;
mod pipeline;
mod support;
mod validation;
