//! The operator's wish for a row — running, paused or stopped — kept in the row's own state
//! store, so it survives restarts (and, with a shared store, every member).
//!
//! It lives under a key derived from the row's state key, `__faucet_serve__::{state key}`,
//! which `faucet serve` refuses as a pipeline's own state key; the value is `{"desired":
//! "paused" | "stopped", "at": RFC 3339, "by": member}`. No entry means running (`resume`
//! deletes it).

use std::sync::Arc;

use faucet_core::FaucetError;
use faucet_core::state::{StateStore, validate_state_key};
use serde_json::{Value, json};

/// The prefix of control keys; no pipeline's state key may start with it.
pub(crate) const PREFIX: &str = "__faucet_serve__::";

/// What the operator asked of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Desired {
    /// Run it (the default).
    Running,
    /// `PUT …/pause`: run nothing until resumed.
    Paused,
    /// `PUT …/stop`: run nothing until resumed.
    Stopped,
}

impl Desired {
    fn stored(self) -> Option<&'static str> {
        match self {
            Self::Running => None,
            Self::Paused => Some("paused"),
            Self::Stopped => Some("stopped"),
        }
    }
}

/// The control key of `state_key`.
///
/// # Errors
/// [`FaucetError::Config`] when the derived key breaks the state-key rules (the state key is
/// within 18 characters of the 256 limit).
pub(crate) fn key_for(state_key: &str) -> Result<String, FaucetError> {
    let key = format!("{PREFIX}{state_key}");
    validate_state_key(&key)?;
    Ok(key)
}

/// Reads the row's control entry.
///
/// # Errors
/// The store's error; a value this faucet does not know is [`FaucetError::State`]-like
/// config error naming the key.
pub(crate) async fn load(store: &Arc<dyn StateStore>, key: &str) -> Result<Desired, FaucetError> {
    let Some(value) = store.get(key).await? else {
        return Ok(Desired::Running);
    };
    match value.get("desired").and_then(Value::as_str) {
        Some("paused") => Ok(Desired::Paused),
        Some("stopped") => Ok(Desired::Stopped),
        _ => Err(FaucetError::config(
            "state store",
            format!(
                "the control entry {key:?} holds {}, not {{\"desired\": \"paused\" | \"stopped\"}}; \
                 delete it to run the pipeline",
                crate::output::clip(&value.to_string())
            ),
        )),
    }
}

/// Persists `desired` for the row (durable on return).
///
/// # Errors
/// The store's error.
pub(crate) async fn store(
    store: &Arc<dyn StateStore>,
    key: &str,
    desired: Desired,
    member: &str,
) -> Result<(), FaucetError> {
    match desired.stored() {
        None => store.delete(key).await,
        Some(word) => {
            let value = json!({
                "desired": word,
                "at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "by": member,
            });
            store.put(key, &value).await
        }
    }
}
