//! The `redis-streams` sink's configuration.

use faucet_core::FaucetError;
use faucet_core::route::TableTemplate;
use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;

use crate::bus::MessageFormat;

/// The key prefix of the commit tokens and writer fences when none is given.
pub const DEFAULT_PREFIX: &str = "faucet:";

/// Configuration of the `redis-streams` sink (`type: redis-streams`).
/// ```yaml
/// sink:
///   type: redis-streams
///   config:
///     url: ${env:REDIS_URL}
///     stream: "cdc.{schema}.{table}"
///     key: [id]
///     maxlen: 1000000
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisStreamsSinkConfig {
    /// The server, `redis://[user:password@]host:port/db` (`rediss://` for TLS where the
    /// redis crate was built with it). A secret: never printed.
    pub url: SecretString,
    /// The stream each record is added to: a template over the source table
    /// (`cdc.{schema}.{table}`; placeholders `{schema}` / `{database}`, `{table}`,
    /// `{source_table}`), or a fixed key (`events`) for rows that are not change records.
    pub stream: String,
    /// Trims each stream to about this many entries as it is written (`XADD … MAXLEN ~ n`):
    /// approximate, so Redis trims whole nodes, keeping at least `maxlen`. Unset: no trimming.
    #[serde(default)]
    pub maxlen: Option<u64>,
    /// The record fields whose values make the message key (`{"id": 7}`), from a change
    /// record's `after` (its `before` for a delete). Empty: a change record is keyed by its
    /// source table's key ([`crate::bus::SourceKeys`]); other rows have no `key` field.
    #[serde(default)]
    pub key: Vec<String>,
    /// The message value: `faucet` (the record as faucet's JSON) or `debezium` (the envelope
    /// `{"before","after","source","op","ts_ms"}`).
    #[serde(default)]
    pub format: MessageFormat,
    /// The prefix of the keys the sink keeps beside the streams: commit tokens
    /// (`{prefix}token/<scope>`, a hash) and writer fences (`{prefix}fence/<scope>`).
    #[serde(default = "default_prefix")]
    pub prefix: String,
}

fn default_prefix() -> String {
    DEFAULT_PREFIX.to_owned()
}

/// A config that [`RedisStreamsSinkConfig::validate`] accepted, with its parts parsed.
#[derive(Debug, Clone)]
pub struct ValidatedRedisStreamsConfig {
    /// The configuration.
    pub config: RedisStreamsSinkConfig,
    /// `stream`, parsed.
    pub stream: TableTemplate,
}

impl RedisStreamsSinkConfig {
    /// A configuration writing to `url`, streams named by `stream`.
    pub fn new(url: impl Into<String>, stream: impl Into<String>) -> Self {
        Self {
            url: SecretString::from(url.into()),
            stream: stream.into(),
            maxlen: None,
            key: Vec::new(),
            format: MessageFormat::default(),
            prefix: default_prefix(),
        }
    }

    /// Checks the configuration without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field: `url` not a `redis://` / `rediss://` /
    /// `redis+unix://` URL, `stream` not a template, `maxlen` zero, `key` with an empty or
    /// repeated name, `prefix` with whitespace.
    pub fn validate(&self) -> Result<ValidatedRedisStreamsConfig, FaucetError> {
        let url = self.url.expose_secret();
        if !["redis://", "rediss://", "redis+unix://", "unix://"]
            .iter()
            .any(|s| url.starts_with(s))
        {
            return Err(FaucetError::config(
                "url",
                "must be a redis:// URL (redis://[user:password@]host:port/db)",
            ));
        }
        // The error is not shown: it may quote the URL, password and all.
        redis::Client::open(url).map_err(|_| {
            FaucetError::config(
                "url",
                "is not a usable Redis URL (redis://[user:password@]host:port/db)",
            )
        })?;
        let stream = TableTemplate::parse(&self.stream, "stream")?;
        if self.maxlen == Some(0) {
            return Err(FaucetError::config(
                "maxlen",
                "must be at least 1 (leave it out to keep every entry)",
            ));
        }
        // Redis reads `MAXLEN` when the `XADD` runs, inside the page's `EXEC`: a number it
        // refuses there would fail every entry while the token after them is stored.
        if let Some(n) = self.maxlen
            && i64::try_from(n).is_err()
        {
            return Err(FaucetError::config(
                "maxlen",
                format!(
                    "is {n}; Redis takes at most {} (a signed 64-bit number)",
                    i64::MAX
                ),
            ));
        }
        crate::bus::validate_key(&self.key)?;
        if let Some(c) = self
            .prefix
            .chars()
            .find(|c| c.is_whitespace() || c.is_control())
        {
            return Err(FaucetError::config(
                "prefix",
                format!(
                    "{:?} contains {c:?}; use no spaces or control characters",
                    self.prefix
                ),
            ));
        }
        Ok(ValidatedRedisStreamsConfig {
            config: self.clone(),
            stream,
        })
    }
}
