//! Turning a `redis` error into a [`FaucetError`] that says what is at fault and what to do.
//!
//! An unreachable server (refused, timed out, connection dropped) is a retryable
//! [`FaucetError::Connect`]; what a person has to fix — a rejected login (`WRONGPASS`,
//! `NOAUTH`), missing ACL permissions (`NOPERM`), a read-only replica (`READONLY`), a full
//! server (`OOM`) — is a [`FaucetError::State`]. Server error codes are those of the Redis
//! documentation ("Redis error replies"). Messages name the server as
//! `redis://user@host:port/db` — never the password.

use faucet_core::FaucetError;
use redis::{ErrorKind, RedisError};

/// The store's name in errors (`StateStore::name`).
pub(crate) const STORE: &str = "redis";
/// The `connector` of its [`FaucetError::Connect`] errors.
pub(crate) const CONNECTOR: &str = "state store redis";

/// Classifies `err`, raised while doing `op` against `target` (see the module docs).
pub(crate) fn classify(op: &str, target: &str, err: RedisError) -> FaucetError {
    // A Connect error already reads "cannot connect"; only other operations are named.
    let lead = if op == "connect" {
        String::new()
    } else {
        format!("{op}: ")
    };
    let connect = |message: String, err: RedisError| {
        FaucetError::connect(CONNECTOR, message, Some(Box::new(err)))
    };
    let state = |message: String, err: RedisError| FaucetError::state_io(STORE, message, err);
    if err.is_connection_refusal() {
        return connect(
            format!(
                "{lead}connection refused by {target}; hint: is Redis running and listening on \
                 that host and port? check the state url"
            ),
            err,
        );
    }
    if err.is_timeout() {
        return connect(
            format!(
                "{lead}{target} did not answer in time; hint: check the host and port in the \
                 state url, the network, and the server's load"
            ),
            err,
        );
    }
    if err.is_io_error() || err.is_connection_dropped() {
        return connect(
            format!(
                "{lead}lost or could not open the connection to {target}; hint: is Redis \
                 running? the store reconnects on the next operation"
            ),
            err,
        );
    }
    match (err.kind(), err.code()) {
        (ErrorKind::AuthenticationFailed, _) | (_, Some("WRONGPASS" | "NOAUTH")) => state(
            format!(
                "{op}: {target} rejected the login; hint: check the user and \
                 password in the state url (redis://user:password@host:port/db)"
            ),
            err,
        ),
        (_, Some("NOPERM")) => state(
            format!(
                "{op}: permission denied at {target}; hint: the ACL user needs \
                 GET, SET, DEL, INCR, PEXPIRE, EVAL/EVALSHA and SCRIPT on the store's key prefix"
            ),
            err,
        ),
        (ErrorKind::ReadOnly, _) => state(
            format!(
                "{op}: {target} is a read-only replica; hint: point the state url at the primary"
            ),
            err,
        ),
        (_, Some("OOM")) => state(
            format!(
                "{op}: {target} is out of memory; hint: raise maxmemory, or use a \
                 noeviction policy on a server dedicated to state"
            ),
            err,
        ),
        (ErrorKind::BusyLoadingError, _) | (ErrorKind::MasterDown, _) => connect(
            format!("{lead}{target} is not ready; hint: it is starting up; retry"),
            err,
        ),
        (ErrorKind::InvalidClientConfig, _) => {
            let why = err.to_string();
            FaucetError::config("url", format!("the state url is not usable: {why}"))
        }
        _ => state(format!("{op} at {target} failed"), err),
    }
}
