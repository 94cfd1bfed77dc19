//! The `postgres` query source.
