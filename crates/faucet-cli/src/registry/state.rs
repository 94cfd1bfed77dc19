//! [`StateConfig`]: where bookmarks live (`pipeline.state`).
//!
//! | type | store | feature |
//! |---|---|---|
//! | `memory` | `faucet_core::state::MemoryStateStore` (forgets on exit) | — |
//! | `file` | `faucet_core::state::FileStateStore` | — |
//! | `postgres` | `faucet_state_postgres::PostgresStateStore` (`shared/seeds/004_*`) | `state-postgres` |
//! | `redis` | `faucet_state_redis::RedisStateStore` | `state-redis` |
//!
//! Without a `state:` block the store is `file` at `.faucet/state` beside the config: a
//! scheduled run resumes where the previous one stopped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use faucet_core::FaucetError;
use faucet_core::state::{FileStateStore, MemoryStateStore, StateStore};
use serde::{Deserialize, Deserializer};

use super::tagged::{self, Tagged};
#[allow(unused_imports)] // Needed only by builds where some feature is off.
use super::{at_field, not_compiled, resolve_path};
use crate::config::lenient::bool_or_string;
use crate::secret::SecretUrl;

/// The pool size the CLI gives the PostgreSQL state store (fixed, per the seed).
#[cfg_attr(not(feature = "state-postgres"), allow(dead_code))]
pub(crate) const POSTGRES_POOL_SIZE: u32 = 5;

/// The type names of state stores.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StateType {
    /// In memory.
    Memory,
    /// Files in a directory.
    File,
    /// A PostgreSQL table.
    Postgres,
    /// Redis keys.
    Redis,
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

/// `state: {type: postgres, config: {...}}` (`shared/seeds/004_*`, "CLI configuration").
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
    #[cfg_attr(not(feature = "state-postgres"), allow(dead_code))]
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

/// `pipeline.state`.
#[derive(Debug, Clone)]
pub(crate) enum StateConfig {
    /// `type: memory`: forgets on exit (no resume).
    Memory(MemoryStateConfig),
    /// `type: file`.
    File(FileStateConfig),
    /// `type: postgres`.
    Postgres(PostgresStateConfig),
    /// `type: redis`.
    Redis(RedisStateConfig),
}

impl Default for StateConfig {
    /// `file` at `.faucet/state` (resolved against the config file's directory).
    fn default() -> Self {
        Self::File(FileStateConfig {
            path: default_file_path(),
        })
    }
}

impl Tagged for StateConfig {
    const WHAT: &'static str = "state store";
    type Kind = StateType;

    fn from_config<'de, D: Deserializer<'de>>(kind: StateType, d: D) -> Result<Self, D::Error> {
        Ok(match kind {
            StateType::Memory => Self::Memory(MemoryStateConfig::deserialize(d)?),
            StateType::File => Self::File(FileStateConfig::deserialize(d)?),
            StateType::Postgres => Self::Postgres(PostgresStateConfig::deserialize(d)?),
            StateType::Redis => Self::Redis(RedisStateConfig::deserialize(d)?),
        })
    }
}

impl<'de> Deserialize<'de> for StateConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        tagged::deserialize(d)
    }
}

const FIELD: &str = "pipeline.state";

impl StateConfig {
    /// The type name, as the store reports it (`StateStore::name`).
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            Self::File(_) => "file",
            Self::Postgres(_) => "postgres",
            Self::Redis(_) => "redis",
        }
    }

    /// Whether the store survives the process (`StateStore::is_durable`), known without I/O.
    pub(crate) fn is_durable(&self) -> bool {
        !matches!(self, Self::Memory(_))
    }

    /// Where the bookmarks live, for people: a directory, a redacted URL and table/prefix.
    pub(crate) fn target(&self) -> String {
        match self {
            Self::Memory(_) => "(forgotten on exit)".to_owned(),
            Self::File(c) => c.path.display().to_string(),
            Self::Postgres(c) => format!("{} table {}", c.url.redacted(), c.table),
            Self::Redis(c) => format!("{} prefix {}", c.url.redacted(), c.prefix),
        }
    }

    /// Checks that this store can hold `key` (the file store: at most
    /// [`faucet_core::state::FileStateStore::MAX_KEY_LEN`] bytes, each key is a file name);
    /// no I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] on field `state key`.
    pub(crate) fn validate_key(&self, key: &str) -> Result<(), FaucetError> {
        match self {
            Self::File(_) => faucet_core::state::FileStateStore::validate_key(key),
            _ => Ok(()),
        }
    }

    /// Resolves a relative `file` directory against `base`, the config file's directory.
    pub(crate) fn resolve_paths(&mut self, base: &Path) {
        if let Self::File(c) = self {
            c.path = resolve_path(base, &c.path);
        }
    }

    /// Checks the config without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `pipeline.state.config.<field>`, or for a store that is not
    /// compiled into this binary.
    pub(crate) fn validate(&self) -> Result<(), FaucetError> {
        match self {
            Self::Memory(_) => Ok(()),
            Self::File(c) if c.path.as_os_str().is_empty() => Err(FaucetError::config(
                format!("{FIELD}.config.path"),
                "is empty; give the directory for state files",
            )),
            Self::File(_) => Ok(()),
            Self::Postgres(c) => {
                #[cfg(not(feature = "state-postgres"))]
                {
                    let _ = c;
                    Err(not_compiled(
                        &format!("{FIELD}.type"),
                        "postgres",
                        "state-postgres",
                    ))
                }
                #[cfg(feature = "state-postgres")]
                {
                    check_url(&c.url, &["postgres://", "postgresql://"])?;
                    faucet_state_postgres::validate_table_name(&c.table).map_err(at_config)
                }
            }
            Self::Redis(c) => {
                #[cfg(not(feature = "state-redis"))]
                {
                    let _ = c;
                    Err(not_compiled(
                        &format!("{FIELD}.type"),
                        "redis",
                        "state-redis",
                    ))
                }
                #[cfg(feature = "state-redis")]
                {
                    check_url(
                        &c.url,
                        &["redis://", "rediss://", "unix://", "redis+unix://"],
                    )?;
                    faucet_state_redis::validate_prefix(&c.prefix).map_err(at_config)
                }
            }
        }
    }

    /// Opens the store (connects, for `postgres` and `redis`; runs `ensure_table` when asked).
    ///
    /// # Errors
    /// As [`StateConfig::validate`]; then [`FaucetError::Connect`] / [`FaucetError::State`]
    /// from the store.
    pub(crate) async fn connect(&self) -> Result<Arc<dyn StateStore>, FaucetError> {
        self.validate()?;
        self.open().await
    }

    async fn open(&self) -> Result<Arc<dyn StateStore>, FaucetError> {
        match self {
            Self::Memory(_) => Ok(Arc::new(MemoryStateStore::new())),
            Self::File(c) => Ok(Arc::new(FileStateStore::new(c.path.clone()))),
            #[cfg(feature = "state-postgres")]
            Self::Postgres(c) => {
                let store = faucet_state_postgres::PostgresStateStore::connect_with(
                    c.url.expose(),
                    POSTGRES_POOL_SIZE,
                    &c.table,
                )
                .await
                .map_err(at_config)?;
                if c.ensure_table {
                    store.ensure_table().await.map_err(at_config)?;
                }
                Ok(Arc::new(store))
            }
            #[cfg(feature = "state-redis")]
            Self::Redis(c) => Ok(Arc::new(
                faucet_state_redis::RedisStateStore::connect(c.url.expose(), &c.prefix)
                    .await
                    .map_err(at_config)?,
            )),
            #[allow(unreachable_patterns)] // Reached only when a store's feature is off.
            _ => Err(FaucetError::config(
                format!("{FIELD}.type"),
                format!("`{}` is not compiled into this binary", self.type_name()),
            )),
        }
    }
}

/// A store's own [`FaucetError::Config`] (field `table`, `prefix`, `url`) at its place in the
/// file (`pipeline.state.config.table`).
#[cfg(any(feature = "state-postgres", feature = "state-redis"))]
fn at_config(e: FaucetError) -> FaucetError {
    at_field(&format!("{FIELD}.config"), e)
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
