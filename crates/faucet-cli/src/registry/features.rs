//! The faucet-cli Cargo features that compile connectors in, and whether this build has
//! each. Read by the registry's tests (every connector's feature is listed here) and, through
//! `#[path]`, by `tests/examples.rs` (an example needing a feature this build lacks is skipped).

/// `(feature, compiled into this build)`, one per connector feature of faucet-cli.
pub(crate) const FEATURES: &[(&str, bool)] = &[
    ("files", cfg!(feature = "files")),
    ("postgres", cfg!(feature = "postgres")),
    ("mysql", cfg!(feature = "mysql")),
    ("redis-streams", cfg!(feature = "redis-streams")),
    ("nats", cfg!(feature = "nats")),
    ("kafka", cfg!(feature = "kafka")),
    ("sqlite", cfg!(feature = "sqlite")),
    ("mongodb", cfg!(feature = "mongodb")),
    ("state-postgres", cfg!(feature = "state-postgres")),
    ("state-redis", cfg!(feature = "state-redis")),
];

/// Whether `feature` is a connector feature that this build lacks.
pub(crate) fn is_compiled_out(feature: &str) -> bool {
    FEATURES.iter().any(|&(f, on)| f == feature && !on)
}
