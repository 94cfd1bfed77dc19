//! [`SinkConfig`]: the sinks a pipeline file can name.
//!
//! | type | connector | feature |
//! |---|---|---|
//! | `jsonl` | `faucet_connectors::files::JsonlSink` | `files` (default) |
//! | `postgres` | `faucet_connectors::postgres::PostgresSink` (append or keyed upsert) | `postgres` |

use std::path::Path;

use faucet_core::{FaucetError, Sink};
use serde::{Deserialize, Deserializer};

use super::tagged::{self, Tagged};
#[allow(unused_imports)] // Needed only by builds where some feature is off.
use super::{NotCompiled, at_field, not_compiled, resolve_path};

#[cfg(feature = "files")]
type JsonlCfg = faucet_connectors::files::JsonlSinkConfig;
#[cfg(not(feature = "files"))]
type JsonlCfg = NotCompiled;
#[cfg(feature = "postgres")]
type PostgresCfg = faucet_connectors::postgres::PostgresSinkConfig;
#[cfg(not(feature = "postgres"))]
type PostgresCfg = NotCompiled;

/// The type names of sinks.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) enum SinkType {
    /// A JSON Lines file.
    #[serde(rename = "jsonl")]
    Jsonl,
    /// A PostgreSQL table.
    #[serde(rename = "postgres")]
    Postgres,
}

/// `pipeline.sink`: `{type: <name>, config: {...}}`; the config is the connector's own.
#[derive(Debug, Clone)]
#[cfg_attr(not(all(feature = "files", feature = "postgres")), allow(dead_code))]
pub(crate) enum SinkConfig {
    /// `type: jsonl`.
    Jsonl(JsonlCfg),
    /// `type: postgres`.
    Postgres(PostgresCfg),
}

impl Tagged for SinkConfig {
    const WHAT: &'static str = "sink";
    type Kind = SinkType;

    fn from_config<'de, D: Deserializer<'de>>(kind: SinkType, d: D) -> Result<Self, D::Error> {
        Ok(match kind {
            SinkType::Jsonl => Self::Jsonl(JsonlCfg::deserialize(d)?),
            SinkType::Postgres => Self::Postgres(PostgresCfg::deserialize(d)?),
        })
    }
}

impl<'de> Deserialize<'de> for SinkConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        tagged::deserialize(d)
    }
}

const FIELD: &str = "pipeline.sink";

impl SinkConfig {
    /// The type name, as written in the file.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Self::Jsonl(_) => "jsonl",
            Self::Postgres(_) => "postgres",
        }
    }

    /// What the sink writes, for people: a file path, or a URL with its password redacted.
    pub(crate) fn target(&self) -> String {
        match self {
            #[cfg(feature = "files")]
            Self::Jsonl(c) => c.path.display().to_string(),
            #[cfg(feature = "postgres")]
            Self::Postgres(c) => {
                let mode = match c.write_mode {
                    faucet_connectors::postgres::WriteMode::Upsert => {
                        format!(" (upsert by {})", c.key.join(", "))
                    }
                    faucet_connectors::postgres::WriteMode::Append => " (append)".to_owned(),
                };
                format!(
                    "{} table {}{mode}",
                    super::redacted_secret(&c.connection_url),
                    c.table
                )
            }
            #[allow(unreachable_patterns)] // Reached only when a feature is off.
            _ => String::new(),
        }
    }

    /// Resolves relative file paths against `base`, the config file's directory.
    pub(crate) fn resolve_paths(&mut self, base: &Path) {
        match self {
            #[cfg(feature = "files")]
            Self::Jsonl(c) if !c.writes_stdout() => c.path = resolve_path(base, &c.path),
            _ => {
                let _ = base;
            }
        }
    }

    /// Whether the sink writes to standard output (a jsonl sink with `path: "-"`): then
    /// faucet's own reports go to stderr.
    pub(crate) fn writes_stdout(&self) -> bool {
        match self {
            #[cfg(feature = "files")]
            Self::Jsonl(c) => c.writes_stdout(),
            #[allow(unreachable_patterns)] // Reached only when a feature is off.
            _ => false,
        }
    }

    /// Validates the config and builds the sink; no I/O (files are created in `open`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `pipeline.sink.config.<field>`, or for a type that is not
    /// compiled into this binary.
    pub(crate) fn build(&self) -> Result<Box<dyn Sink>, FaucetError> {
        let config_field = format!("{FIELD}.config");
        let sink = self.build_connector(&config_field)?;
        Ok(Box::new(super::fielded::FieldedSink::new(
            sink,
            config_field,
        )))
    }

    fn build_connector(&self, config_field: &str) -> Result<Box<dyn Sink>, FaucetError> {
        match self {
            #[cfg(feature = "files")]
            Self::Jsonl(c) => faucet_connectors::files::JsonlSink::new(c.clone())
                .map(|s| Box::new(s) as Box<dyn Sink>)
                .map_err(|e| at_field(config_field, e)),
            #[cfg(not(feature = "files"))]
            Self::Jsonl(_) => {
                let _ = &config_field;
                Err(not_compiled(
                    &format!("{FIELD}.type"),
                    self.type_name(),
                    "files",
                ))
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(c) => faucet_connectors::postgres::PostgresSink::new(c.clone())
                .map(|s| Box::new(s) as Box<dyn Sink>)
                .map_err(|e| at_field(config_field, e)),
            #[cfg(not(feature = "postgres"))]
            Self::Postgres(_) => {
                let _ = &config_field;
                Err(not_compiled(
                    &format!("{FIELD}.type"),
                    self.type_name(),
                    "postgres",
                ))
            }
        }
    }
}
