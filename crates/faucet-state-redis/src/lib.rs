#![doc = include_str!("../README.md")]

mod error;
mod lease;
mod scripts;
mod store;

pub use store::{DEFAULT_PREFIX, MAX_PREFIX_LEN, RedisStateStore, validate_prefix};
