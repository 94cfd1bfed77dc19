//! JSON Lines: [`JsonlSource`] reads one JSON object per line, [`JsonlSink`] writes one.

mod file;
mod keys;
mod output;
mod route;
mod sink;
mod source;

pub use self::sink::{JsonlSink, JsonlSinkConfig};
pub use self::source::{JsonlSource, JsonlSourceConfig};

use faucet_core::FaucetError;
use std::path::Path;

/// The shared `path` check of the jsonl configs.
fn validate_path(path: &Path) -> Result<(), FaucetError> {
    if path.as_os_str().is_empty() {
        return Err(FaucetError::config("path", "must name a JSON Lines file"));
    }
    Ok(())
}
