//! What every message-bus sink shares: the [`message`] a record becomes (route, key, value,
//! headers), and the [`stats`] of a page's publishes. The route is a [`faucet_core::route::TableTemplate`], the placeholder rule
//! every sink routing by source table uses.

pub mod message;
pub mod stats;

pub use message::{Message, MessageEncoder, MessageFormat, SourceKeys, per_route};
pub use stats::{PageMeter, message_bytes};

use faucet_core::FaucetError;

/// Checks a bus sink's `key` list: names not empty, none twice.
///
/// # Errors
/// [`FaucetError::Config`] at `key[i]`.
pub fn validate_key(key: &[String]) -> Result<(), FaucetError> {
    for (i, k) in key.iter().enumerate() {
        if k.is_empty() {
            return Err(FaucetError::config(
                format!("key[{i}]"),
                "must not be empty",
            ));
        }
        if key[..i].contains(k) {
            return Err(FaucetError::config(
                format!("key[{i}]"),
                format!("`{k}` is listed twice"),
            ));
        }
    }
    Ok(())
}
