//! [`StateConfig`]: where bookmarks live (`pipeline.state`).
//!
//! | type | store | feature |
//! |---|---|---|
//! | `memory` | `faucet_core::state::MemoryStateStore` (forgets on exit) | — |
//! | `file` | `faucet_core::state::FileStateStore` | — |
//! | `postgres` | `faucet_state_postgres::PostgresStateStore` (docs/specification.md, "State stores") | `state-postgres` |
//! | `redis` | `faucet_state_redis::RedisStateStore` | `state-redis` |
//!
//! Without a `state:` block the store is `file` at `.faucet/state` beside the config: a
//! scheduled run resumes where the previous one stopped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use faucet_core::FaucetError;
use faucet_core::state::{FileStateStore, MemoryStateStore, StateStore};
use serde::Deserialize;

use super::Hints;
use crate::lenient::bool_or_string;
use crate::secret::SecretUrl;

/// The pool size the CLI gives the PostgreSQL state store (fixed, per the seed).
#[cfg(feature = "state-postgres")]
pub(crate) const POSTGRES_POOL_SIZE: u32 = 5;

registry! {
    /// `pipeline.state`.
    enum StateConfig, kinds StateType, what "state store", at "pipeline.state",
    about dyn StateAbout, compiled dyn StateConnect {
        /// `type: memory`: forgets on exit (no resume).
        Memory = "memory" => MemoryStateConfig;
        /// `type: file`.
        File = "file" => FileStateConfig;
        /// `type: postgres`.
        Postgres = "postgres" => PostgresStateConfig, needs "state-postgres";
        /// `type: redis`.
        Redis = "redis" => RedisStateConfig, needs "state-redis";
    }
}

/// What the CLI knows of a state store without I/O, compiled in or not: the `impl` on its
/// config type (with [`StateConnect`]) is the store's whole entry in the registry.
pub(crate) trait StateAbout: std::fmt::Debug {
    /// Where the bookmarks live, for people: a directory, a redacted URL and table/prefix.
    fn target(&self) -> String;

    /// Whether the store survives the process (`StateStore::is_durable`).
    fn is_durable(&self) -> bool {
        true
    }

    /// Checks that this store can hold `key`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] on field `state key`.
    fn validate_key(&self, key: &str) -> Result<(), FaucetError> {
        let _ = key;
        Ok(())
    }

    /// Resolves relative paths against `base`, the config file's directory.
    fn resolve_paths(&mut self, base: &Path) {
        let _ = base;
    }

    /// What `faucet doctor` suggests when the probe fails.
    fn hints(&self) -> Hints;
}

/// Opening a state store: implemented under the store's feature.
#[async_trait]
pub(crate) trait StateConnect: Send + Sync {
    /// Checks the config without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `pipeline.state.config.<field>`.
    fn validate(&self) -> Result<(), FaucetError>;

    /// Opens the store (connects; creates what the config asks for).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `pipeline.state.config.<field>`, [`FaucetError::Connect`],
    /// [`FaucetError::State`] from the store.
    async fn open(&self) -> Result<Arc<dyn StateStore>, FaucetError>;
}

/// `state: {type: memory}`: takes no config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemoryStateConfig {}

/// `state: {type: file, config: {...}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileStateConfig {
    /// The directory holding one `<state key>.json` per key. A relative path is relative to
    /// the config file's directory. Default: `.faucet/state`.
    #[serde(default = "default_file_path")]
    pub(crate) path: PathBuf,
}

fn default_file_path() -> PathBuf {
    PathBuf::from(".faucet/state")
}

/// `state: {type: postgres, config: {...}}` (docs/specification.md, "State stores", "CLI configuration").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PostgresStateConfig {
    /// The database, `postgres://user:pass@host:5432/db`; the password is never printed.
    pub(crate) url: SecretUrl,
    /// The table holding one row per state key. Default `faucet_state`.
    #[serde(default = "default_table")]
    pub(crate) table: String,
    /// Create the table (`CREATE TABLE IF NOT EXISTS`) before the run. Default `false`:
    /// skip it when you manage the schema with migrations.
    #[serde(default, deserialize_with = "bool_or_string")]
    #[cfg_attr(not(feature = "state-postgres"), allow(dead_code))] // Read only by `open`.
    pub(crate) ensure_table: bool,
}

fn default_table() -> String {
    "faucet_state".to_owned()
}

/// `state: {type: redis, config: {...}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedisStateConfig {
    /// The server, `redis://[:pass@]host:6379/[db]`; the password is never printed.
    pub(crate) url: SecretUrl,
    /// Prepended to every state key to make the Redis key (no spaces or control
    /// characters, at most 256 bytes). Default `faucet:state:`.
    #[serde(default = "default_prefix")]
    pub(crate) prefix: String,
}

fn default_prefix() -> String {
    "faucet:state:".to_owned()
}

impl Default for StateConfig {
    /// `file` at `.faucet/state` (resolved against the config file's directory).
    fn default() -> Self {
        Self::File(FileStateConfig {
            path: default_file_path(),
        })
    }
}

const FIELD: &str = "pipeline.state";

impl StateAbout for MemoryStateConfig {
    fn target(&self) -> String {
        "(forgotten on exit)".to_owned()
    }

    fn is_durable(&self) -> bool {
        false
    }

    fn hints(&self) -> Hints {
        Hints::default()
    }
}

#[async_trait]
impl StateConnect for MemoryStateConfig {
    fn validate(&self) -> Result<(), FaucetError> {
        Ok(())
    }

    async fn open(&self) -> Result<Arc<dyn StateStore>, FaucetError> {
        Ok(Arc::new(MemoryStateStore::new()))
    }
}

impl StateAbout for FileStateConfig {
    fn target(&self) -> String {
        self.path.display().to_string()
    }

    /// At most [`FileStateStore::MAX_KEY_LEN`] bytes: each key is a file name.
    fn validate_key(&self, key: &str) -> Result<(), FaucetError> {
        FileStateStore::validate_key(key)
    }

    fn resolve_paths(&mut self, base: &Path) {
        self.path = super::resolve_path(base, &self.path);
    }

    fn hints(&self) -> Hints {
        Hints::file(
            "can this user create and write files in the state directory? a corrupt state \
                 file must be restored, or deleted to start over on purpose",
        )
    }
}

#[async_trait]
impl StateConnect for FileStateConfig {
    fn validate(&self) -> Result<(), FaucetError> {
        if self.path.as_os_str().is_empty() {
            return Err(FaucetError::config(
                format!("{FIELD}.config.path"),
                "is empty; give the directory for state files",
            ));
        }
        Ok(())
    }

    async fn open(&self) -> Result<Arc<dyn StateStore>, FaucetError> {
        Ok(Arc::new(FileStateStore::new(self.path.clone())))
    }
}

impl StateAbout for PostgresStateConfig {
    fn target(&self) -> String {
        format!("{} table {}", self.url.redacted(), self.table)
    }

    fn hints(&self) -> Hints {
        Hints {
            connect: Some(super::POSTGRES_CONNECT_HINT),
            other: Some(
                "does the table exist (set `ensure_table: true` to create it) and may this user \
                 read, insert, update and delete in it?",
            ),
        }
    }
}

#[cfg(feature = "state-postgres")]
#[async_trait]
impl StateConnect for PostgresStateConfig {
    fn validate(&self) -> Result<(), FaucetError> {
        check_url(&self.url, &["postgres://", "postgresql://"])?;
        faucet_state_postgres::validate_table_name(&self.table).map_err(at_config)
    }

    async fn open(&self) -> Result<Arc<dyn StateStore>, FaucetError> {
        let store = faucet_state_postgres::PostgresStateStore::connect_with(
            self.url.expose(),
            POSTGRES_POOL_SIZE,
            &self.table,
        )
        .await
        .map_err(at_config)?;
        if self.ensure_table {
            store.ensure_table().await.map_err(at_config)?;
        }
        Ok(Arc::new(store))
    }
}

impl StateAbout for RedisStateConfig {
    fn target(&self) -> String {
        format!("{} prefix {}", self.url.redacted(), self.prefix)
    }

    fn hints(&self) -> Hints {
        Hints {
            connect: Some("is Redis running, and is the url (host, port, password) right?"),
            other: Some("may this user SET, GET and DEL keys under the prefix?"),
        }
    }
}

#[cfg(feature = "state-redis")]
#[async_trait]
impl StateConnect for RedisStateConfig {
    fn validate(&self) -> Result<(), FaucetError> {
        check_url(
            &self.url,
            &["redis://", "rediss://", "unix://", "redis+unix://"],
        )?;
        faucet_state_redis::validate_prefix(&self.prefix).map_err(at_config)
    }

    async fn open(&self) -> Result<Arc<dyn StateStore>, FaucetError> {
        Ok(Arc::new(
            faucet_state_redis::RedisStateStore::connect(self.url.expose(), &self.prefix)
                .await
                .map_err(at_config)?,
        ))
    }
}

impl StateConfig {
    /// Whether the store survives the process (`StateStore::is_durable`), known without I/O.
    pub(crate) fn is_durable(&self) -> bool {
        self.about().is_some_and(|e| e.is_durable())
    }

    /// Where the bookmarks live, for people: a directory, a redacted URL and table/prefix.
    pub(crate) fn target(&self) -> String {
        self.about().map(|e| e.target()).unwrap_or_default()
    }

    /// What `faucet doctor` suggests when the store's probe fails.
    pub(crate) fn hints(&self) -> Hints {
        self.about().map(|e| e.hints()).unwrap_or_default()
    }

    /// Checks that this store can hold `key` (the file store: at most
    /// [`faucet_core::state::FileStateStore::MAX_KEY_LEN`] bytes, each key is a file name);
    /// no I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] on field `state key`.
    pub(crate) fn validate_key(&self, key: &str) -> Result<(), FaucetError> {
        self.about().map_or(Ok(()), |e| e.validate_key(key))
    }

    /// Resolves a relative `file` directory against `base`, the config file's directory.
    pub(crate) fn resolve_paths(&mut self, base: &Path) {
        if let Some(e) = self.about_mut() {
            e.resolve_paths(base);
        }
    }

    /// Checks the config without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `pipeline.state.config.<field>`, or for a store that is not
    /// compiled into this binary.
    pub(crate) fn validate(&self) -> Result<(), FaucetError> {
        self.compiled()?.validate()
    }

    /// Opens the store (connects, for `postgres` and `redis`; runs `ensure_table` when asked).
    ///
    /// # Errors
    /// As [`StateConfig::validate`]; then [`FaucetError::Connect`] / [`FaucetError::State`]
    /// from the store.
    pub(crate) async fn connect(&self) -> Result<Arc<dyn StateStore>, FaucetError> {
        let store = self.compiled()?;
        store.validate()?;
        store.open().await
    }
}

/// A store's own [`FaucetError::Config`] (field `table`, `prefix`, `url`) at its place in the
/// file (`pipeline.state.config.table`).
#[cfg(any(feature = "state-postgres", feature = "state-redis"))]
fn at_config(e: FaucetError) -> FaucetError {
    super::at_field(&format!("{FIELD}.config"), e)
}

#[cfg(any(feature = "state-postgres", feature = "state-redis"))]
fn check_url(url: &SecretUrl, schemes: &[&str]) -> Result<(), FaucetError> {
    let text = url.expose();
    if schemes.iter().any(|s| text.starts_with(s)) {
        Ok(())
    } else {
        Err(FaucetError::config(
            format!("{FIELD}.config.url"),
            format!(
                "`{}` does not start with {}",
                url.redacted(),
                schemes.join(" or ")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<StateConfig, String> {
        serde_path_to_error::deserialize(v).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn shapes_and_defaults() {
        assert!(matches!(
            parse(json!({"type": "memory"})),
            Ok(StateConfig::Memory(_))
        ));
        match parse(json!({"type": "file"})) {
            Ok(StateConfig::File(c)) => assert_eq!(c.path, PathBuf::from(".faucet/state")),
            other => panic!("{other:?}"),
        }
        match parse(json!({"type": "postgres", "config": {"url": "postgres://u:pw@h/db"}})) {
            Ok(StateConfig::Postgres(c)) => {
                assert_eq!(c.table, "faucet_state");
                assert!(!c.ensure_table);
                assert!(!format!("{c:?}").contains("pw"));
            }
            other => panic!("{other:?}"),
        }
        match parse(json!({"type": "redis", "config": {"url": "redis://h/", "prefix": "p:"}})) {
            Ok(StateConfig::Redis(c)) => assert_eq!(c.prefix, "p:"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_shapes_name_the_path() {
        let err = parse(json!({"type": "file", "config": {"pth": "x"}})).expect_err("unknown");
        assert!(err.starts_with("config.pth: unknown field `pth`"), "{err}");
        let err = parse(json!({"type": "etcd"})).expect_err("type");
        assert!(err.starts_with("type: unknown variant `etcd`"), "{err}");
        let err = parse(json!({"type": "memory", "extra": 1})).expect_err("key");
        assert!(err.contains("unknown field `extra`"), "{err}");
        let err = parse(json!({"config": {}})).expect_err("missing type");
        assert!(err.contains("missing field `type`"), "{err}");
        // `config` before `type` still works, with the error naming the field.
        let err = parse(json!({"config": {"pth": "x"}, "type": "file"})).expect_err("unknown late");
        assert!(err.contains("pth"), "{err}");
        assert!(matches!(
            parse(json!({"config": {"path": "x"}, "type": "file"})),
            Ok(StateConfig::File(_))
        ));
    }

    #[test]
    fn compiled_out_stores_parse_but_do_not_validate() {
        let c = parse(json!({"type": "redis", "config": {"url": "redis://h/"}})).expect("parses");
        let v = c.validate();
        if cfg!(feature = "state-redis") {
            v.expect("valid");
        } else {
            let err = v.expect_err("not compiled").to_string();
            assert!(err.contains("rebuild with --features state-redis"), "{err}");
        }
    }
}
