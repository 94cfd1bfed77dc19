//! The `postgres` sink.
