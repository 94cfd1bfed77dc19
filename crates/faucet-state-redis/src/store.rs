//! [`RedisStateStore`]: construction and the bookmark operations (`get`, `put`, `delete`,
//! `check`). Leases are in [`crate::lease`].

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use faucet_core::FaucetError;
use faucet_core::serde_json::{self, Value};
use faucet_core::state::{
    DOCTOR_KEY, Lease, LeaseOutcome, LeaseRequest, StateStore, check_round_trip, validate_state_key,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands as _, AsyncConnectionConfig, Client};

use crate::error::{STORE, classify};
use crate::scripts::Scripts;
use faucet_connectors::redis::describe_server;

/// The key prefix when none is given: `faucet:state:`.
pub const DEFAULT_PREFIX: &str = "faucet:state:";
/// The longest key prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 256;
/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one command may wait for its reply before it fails (and the connection is
/// re-established for the next one).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(15);
/// Reconnection attempts per failed connection, with exponential backoff from 100 ms.
const RECONNECT_RETRIES: usize = 3;

/// A [`StateStore`] keeping each bookmark as JSON text in the Redis string key
/// `{prefix}{state key}`, with leases under `{prefix}lease/{state key}` and fencing counters
/// under `{prefix}fence/{state key}` (see the crate README).
///
/// Built on a [`ConnectionManager`]: one multiplexed connection that is re-opened after it
/// drops. Cloning is cheap and shares it. `Debug` shows the server without the password.
#[derive(Clone)]
pub struct RedisStateStore {
    pub(crate) conn: ConnectionManager,
    pub(crate) prefix: String,
    pub(crate) target: String,
    pub(crate) scripts: Scripts,
}

impl fmt::Debug for RedisStateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStateStore")
            .field("target", &self.target)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Checks a key prefix: at most [`MAX_PREFIX_LEN`] bytes, no whitespace or control
/// characters (so every key stays one word in `redis-cli`). The empty prefix is allowed.
///
/// # Errors
/// [`FaucetError::Config`] on field `prefix`.
pub fn validate_prefix(prefix: &str) -> Result<(), FaucetError> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(FaucetError::config(
            "prefix",
            format!(
                "the key prefix is {} bytes long; the limit is {MAX_PREFIX_LEN}",
                prefix.len()
            ),
        ));
    }
    if let Some(c) = prefix.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(FaucetError::config(
            "prefix",
            format!(
                "the key prefix {prefix:?} contains {c:?}; use no spaces or control characters"
            ),
        ));
    }
    Ok(())
}

impl RedisStateStore {
    /// Connects to `url` (`redis://[user:password@]host:port/db`, `rediss://` for TLS where
    /// the redis crate was built with it) and keeps bookmarks under `prefix`
    /// ([`DEFAULT_PREFIX`] is `faucet:state:`).
    ///
    /// The prefix is checked first. One connection is then opened and pinged directly, so
    /// an unreachable server or a rejected login is reported at once with its cause, before
    /// the reconnecting [`ConnectionManager`] is set up.
    ///
    /// # Errors
    /// [`FaucetError::Config`] for a bad prefix or an unparseable url;
    /// [`FaucetError::Connect`] when the server cannot be reached (refused, timeout);
    /// [`FaucetError::State`] when it rejects the login. No message contains the password.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, FaucetError> {
        validate_prefix(prefix)?;
        let client = Client::open(url).map_err(|e| classify("connect", "the state url", e))?;
        let target = describe_server(client.get_connection_info());
        probe(&client, &target).await?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_response_timeout(RESPONSE_TIMEOUT)
            .set_number_of_retries(RECONNECT_RETRIES)
            .set_max_delay(2_000);
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| classify("connect", &target, e))?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
            target,
            scripts: Scripts::new(),
        })
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key holding the bookmark of `key`: `{prefix}{key}`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] for an invalid state key.
    pub fn redis_key(&self, key: &str) -> Result<String, FaucetError> {
        validate_state_key(key)?;
        Ok(format!("{}{key}", self.prefix))
    }

    pub(crate) fn fail(&self, op: &str) -> impl Fn(redis::RedisError) -> FaucetError + '_ {
        let op = op.to_owned();
        move |e| classify(&op, &self.target, e)
    }

    /// Logs a warning when the server does not persist every write (no AOF): a restart
    /// then loses the bookmarks written since the last RDB snapshot. Best effort: a server
    /// that hides `INFO` is not an error.
    async fn warn_unless_aof(&self) {
        let mut conn = self.conn.clone();
        let info: Result<String, _> = redis::cmd("INFO")
            .arg("persistence")
            .query_async(&mut conn)
            .await;
        if let Ok(info) = info
            && info.lines().any(|l| l.trim() == "aof_enabled:0")
        {
            tracing::warn!(
                target = %self.target,
                "redis has appendonly off: bookmarks written since the last snapshot are \
                 lost if the server restarts; set `appendonly yes` with `appendfsync \
                 everysec` (or `always`)"
            );
        }
    }
}

/// Opens one connection outside the manager and pings it: the real cause of a failure.
async fn probe(client: &Client, target: &str) -> Result<(), FaucetError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(CONNECT_TIMEOUT)
        .set_response_timeout(RESPONSE_TIMEOUT);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| classify("connect", target, e))?;
    redis::cmd("PING")
        .query_async::<()>(&mut conn)
        .await
        .map_err(|e| classify("connect", target, e))
}

#[async_trait]
impl StateStore for RedisStateStore {
    fn name(&self) -> &str {
        STORE
    }

    /// `GET {prefix}{key}`; a value that is not JSON is an error naming the key, never
    /// "no bookmark".
    async fn get(&self, key: &str) -> Result<Option<Value>, FaucetError> {
        let rkey = self.redis_key(key)?;
        let mut conn = self.conn.clone();
        let raw: Option<String> = conn.get(&rkey).await.map_err(self.fail("get"))?;
        raw.map(|text| {
            serde_json::from_str(&text).map_err(|e| {
                FaucetError::state_io(
                    STORE,
                    format!(
                        "key {rkey:?} at {} holds {} bytes that are not JSON; restore it, or \
                         delete it to start from the beginning on purpose",
                        self.target,
                        text.len()
                    ),
                    e,
                )
            })
        })
        .transpose()
    }

    /// `SET {prefix}{key} <json>`; durable as far as the server's persistence settings make
    /// it (see the crate README).
    async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError> {
        let rkey = self.redis_key(key)?;
        let text = serde_json::to_string(value)
            .map_err(|e| FaucetError::state_io(STORE, "cannot encode the bookmark", e))?;
        let mut conn = self.conn.clone();
        conn.set::<_, _, ()>(&rkey, text)
            .await
            .map_err(self.fail("put"))
    }

    /// `DEL {prefix}{key}`; a missing key is fine.
    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        let rkey = self.redis_key(key)?;
        let mut conn = self.conn.clone();
        conn.del::<_, ()>(&rkey).await.map_err(self.fail("delete"))
    }

    /// A real `SET` → `GET` → `DEL` of [`DOCTOR_KEY`] under the prefix, then the lease
    /// scripts on a lease key that does not exist (proving scripting is allowed); leaves no
    /// key behind. Warns (without failing) when the server has no AOF.
    async fn check(&self) -> Result<(), FaucetError> {
        check_round_trip(self, &format!(" (Redis key `{}{DOCTOR_KEY}`)", self.prefix)).await?;
        self.check_scripts()
            .await
            .map_err(|e| e.with_context("check"))?;
        self.warn_unless_aof().await;
        Ok(())
    }

    async fn acquire_lease(&self, request: &LeaseRequest) -> Result<LeaseOutcome, FaucetError> {
        self.acquire(request).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<(), FaucetError> {
        self.renew(lease, ttl).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), FaucetError> {
        self.release(lease).await
    }

    async fn put_fenced(&self, key: &str, value: &Value, lease: &Lease) -> Result<(), FaucetError> {
        self.write_fenced(key, value, lease).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        for ok in [
            "",
            DEFAULT_PREFIX,
            "app:{orders}:",
            &"p".repeat(MAX_PREFIX_LEN),
        ] {
            assert!(validate_prefix(ok).is_ok(), "{ok}");
        }
        for bad in ["a b", "a\nb", "\t", &"p".repeat(MAX_PREFIX_LEN + 1)] {
            let err = validate_prefix(bad).expect_err(bad).to_string();
            assert!(err.contains("prefix"), "{err}");
        }
    }
}
