//! [`SourceConfig`]: the sources a pipeline file can name.
//!
//! | type | connector | feature |
//! |---|---|---|
//! | `csv` | `faucet_connectors::files::CsvSource` | `files` (default) |
//! | `jsonl` | `faucet_connectors::files::JsonlSource` | `files` (default) |
//! | `postgres` | `faucet_connectors::postgres::PostgresQuerySource` | `postgres` |
//! | `postgres-cdc` | `faucet_connectors::postgres::cdc::PostgresCdcSource` | `postgres` |

use std::path::Path;

use faucet_core::{FaucetError, Source};
use serde::{Deserialize, Deserializer};

use super::tagged::{self, Tagged};
#[allow(unused_imports)] // Needed only by builds where some feature is off.
use super::{NotCompiled, at_field, not_compiled, resolve_path};

#[cfg(feature = "files")]
type CsvCfg = faucet_connectors::files::CsvSourceConfig;
#[cfg(not(feature = "files"))]
type CsvCfg = NotCompiled;
#[cfg(feature = "files")]
type JsonlCfg = faucet_connectors::files::JsonlSourceConfig;
#[cfg(not(feature = "files"))]
type JsonlCfg = NotCompiled;
#[cfg(feature = "postgres")]
type PostgresCfg = faucet_connectors::postgres::PostgresQueryConfig;
#[cfg(not(feature = "postgres"))]
type PostgresCfg = NotCompiled;
#[cfg(feature = "postgres")]
type PostgresCdcCfg = faucet_connectors::postgres::cdc::PostgresCdcConfig;
#[cfg(not(feature = "postgres"))]
type PostgresCdcCfg = NotCompiled;

/// The type names of sources.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) enum SourceType {
    /// A CSV file.
    #[serde(rename = "csv")]
    Csv,
    /// A JSON Lines file.
    #[serde(rename = "jsonl")]
    Jsonl,
    /// A PostgreSQL query.
    #[serde(rename = "postgres")]
    Postgres,
    /// PostgreSQL logical replication.
    #[serde(rename = "postgres-cdc")]
    PostgresCdc,
}

/// `pipeline.source`: `{type: <name>, config: {...}}`; the config is the connector's own
/// (its fields are documented with the connector's config struct).
#[derive(Debug, Clone)]
#[cfg_attr(not(all(feature = "files", feature = "postgres")), allow(dead_code))]
pub(crate) enum SourceConfig {
    /// `type: csv`.
    Csv(CsvCfg),
    /// `type: jsonl`.
    Jsonl(JsonlCfg),
    /// `type: postgres`.
    Postgres(PostgresCfg),
    /// `type: postgres-cdc`.
    PostgresCdc(PostgresCdcCfg),
}

impl Tagged for SourceConfig {
    const WHAT: &'static str = "source";
    type Kind = SourceType;

    fn from_config<'de, D: Deserializer<'de>>(kind: SourceType, d: D) -> Result<Self, D::Error> {
        Ok(match kind {
            SourceType::Csv => Self::Csv(CsvCfg::deserialize(d)?),
            SourceType::Jsonl => Self::Jsonl(JsonlCfg::deserialize(d)?),
            SourceType::Postgres => Self::Postgres(PostgresCfg::deserialize(d)?),
            SourceType::PostgresCdc => Self::PostgresCdc(PostgresCdcCfg::deserialize(d)?),
        })
    }
}

impl<'de> Deserialize<'de> for SourceConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        tagged::deserialize(d)
    }
}

const FIELD: &str = "pipeline.source";

impl SourceConfig {
    /// The type name, as written in the file.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Self::Csv(_) => "csv",
            Self::Jsonl(_) => "jsonl",
            Self::Postgres(_) => "postgres",
            Self::PostgresCdc(_) => "postgres-cdc",
        }
    }

    /// Whether the source follows its stream until cancelled (`postgres-cdc` with
    /// `continuous: true`) rather than stopping at the end of what it can read now.
    pub(crate) fn is_continuous(&self) -> bool {
        match self {
            #[cfg(feature = "postgres")]
            Self::PostgresCdc(c) => c.continuous,
            _ => false,
        }
    }

    /// What the source reads, for people: a file path, or a URL with its password redacted.
    /// Warnings a user should see without connecting (`faucet validate` prints them).
    pub(crate) fn warnings(&self) -> Vec<String> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(c) => c.warnings(),
            _ => Vec::new(),
        }
    }

    pub(crate) fn target(&self) -> String {
        match self {
            #[cfg(feature = "files")]
            Self::Csv(c) => c.path.display().to_string(),
            #[cfg(feature = "files")]
            Self::Jsonl(c) => c.path.display().to_string(),
            #[cfg(feature = "postgres")]
            Self::Postgres(c) => {
                let what = match (&c.table, &c.query) {
                    (Some(t), _) => format!("table {t}"),
                    (None, Some(_)) => "query".to_owned(),
                    (None, None) => String::new(),
                };
                format!("{} {what}", super::redacted_secret(&c.connection_url))
            }
            #[cfg(feature = "postgres")]
            Self::PostgresCdc(c) => format!(
                "{} slot {} publication {}",
                super::redacted_secret(&c.connection_url),
                c.slot_name,
                c.publication
            ),
            #[allow(unreachable_patterns)] // Reached only when a feature is off.
            _ => String::new(),
        }
    }

    /// Resolves relative file paths against `base`, the config file's directory.
    pub(crate) fn resolve_paths(&mut self, base: &Path) {
        match self {
            #[cfg(feature = "files")]
            Self::Csv(c) => c.path = resolve_path(base, &c.path),
            #[cfg(feature = "files")]
            Self::Jsonl(c) => c.path = resolve_path(base, &c.path),
            _ => {
                let _ = base;
            }
        }
    }

    /// Validates the config and builds the source; no I/O (that happens in `open`/`check`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `pipeline.source.config.<field>` (also when the source
    /// finds it only once open), or for a type that is not compiled into this binary.
    pub(crate) fn build(&self) -> Result<Box<dyn Source>, FaucetError> {
        let config_field = format!("{FIELD}.config");
        let source = self.build_connector(&config_field)?;
        Ok(Box::new(super::fielded::FieldedSource::new(
            source,
            config_field,
        )))
    }

    /// `built`, a source made from this config outside [`SourceConfig::build`] (`faucet
    /// replicate`'s snapshot source), with its configuration errors named by their place
    /// in the file as `build` names them.
    ///
    /// # Errors
    /// `built`'s error, its field at `pipeline.source.config.<field>`.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn fielded(
        built: Result<Box<dyn Source>, FaucetError>,
    ) -> Result<Box<dyn Source>, FaucetError> {
        let config_field = format!("{FIELD}.config");
        let source = built.map_err(|e| at_field(&config_field, e))?;
        Ok(Box::new(super::fielded::FieldedSource::new(
            source,
            config_field,
        )))
    }

    fn build_connector(&self, config_field: &str) -> Result<Box<dyn Source>, FaucetError> {
        match self {
            #[cfg(feature = "files")]
            Self::Csv(c) => faucet_connectors::files::CsvSource::new(c.clone())
                .map(|s| Box::new(s) as Box<dyn Source>)
                .map_err(|e| at_field(config_field, e)),
            #[cfg(feature = "files")]
            Self::Jsonl(c) => faucet_connectors::files::JsonlSource::new(c.clone())
                .map(|s| Box::new(s) as Box<dyn Source>)
                .map_err(|e| at_field(config_field, e)),
            #[cfg(not(feature = "files"))]
            Self::Csv(_) | Self::Jsonl(_) => {
                let _ = &config_field;
                Err(not_compiled(
                    &format!("{FIELD}.type"),
                    self.type_name(),
                    "files",
                ))
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(c) => faucet_connectors::postgres::PostgresQuerySource::new(c.clone())
                .map(|s| Box::new(s) as Box<dyn Source>)
                .map_err(|e| at_field(config_field, e)),
            #[cfg(feature = "postgres")]
            Self::PostgresCdc(c) => {
                faucet_connectors::postgres::cdc::PostgresCdcSource::new(c.clone())
                    .map(|s| Box::new(s) as Box<dyn Source>)
                    .map_err(|e| at_field(config_field, e))
            }
            #[cfg(not(feature = "postgres"))]
            Self::Postgres(_) | Self::PostgresCdc(_) => {
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
