//! faucet-connectors integration tests: one binary, one module per connector and role.
//! They talk to the real services (see scripts/services.sh).
