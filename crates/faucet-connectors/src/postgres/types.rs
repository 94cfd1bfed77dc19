//! PostgreSQL text output → faucet values, and faucet types → SQL types.
