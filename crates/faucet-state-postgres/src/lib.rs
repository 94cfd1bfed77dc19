#![doc = include_str!("../README.md")]

mod error;
mod lease;
mod store;
mod table;

pub use store::{DEFAULT_MAX_CONNECTIONS, DEFAULT_TABLE, PostgresStateStore};
pub use table::validate_table_name;
