//! The closed registry of what a pipeline file can name: one tagged enum per kind —
//! [`SourceConfig`], [`SinkConfig`], [`StateConfig`] — each written `{type: <name>, config:
//! {...}}`, one variant per connector (docs/architecture.md, "The shape the code keeps", point 4), declared by one line of
//! [`registry!`](macros) each.
//!
//! Everything the CLI knows of a connector comes from its entry: an `impl` of
//! [`source::SourceEntry`] / [`sink::SinkEntry`] on the connector's config type, or of
//! [`state::StateAbout`] and [`state::StateConnect`] on a state store's: its target for
//! people, warnings, doctor [`Hints`], whether `faucet replicate` takes it, and the built
//! connector. Nothing outside this module compares a connector's name.
//!
//! A variant whose Cargo feature is compiled out still parses as a known type, and building
//! it gives the one error [`not_compiled`]: "`postgres` is not compiled into this binary;
//! rebuild with --features postgres". An unknown type is an error listing the known ones.

#[macro_use]
mod macros;
#[cfg(test)]
mod conformance;
#[cfg(test)]
mod documented;
#[cfg(test)]
mod features;
pub(crate) mod feedback;
mod fielded;
pub(crate) mod routing;
mod sink;
mod source;
mod state;
mod tagged;

use std::path::{Component, Path, PathBuf};

use faucet_core::FaucetError;

pub(crate) use sink::{SinkConfig, SinkType};
pub(crate) use source::{SourceConfig, SourceType};
pub(crate) use state::{StateConfig, StateType};

/// The config of a connector whose feature is compiled out: any mapping, not kept (building
/// it is [`not_compiled`]).
#[derive(Debug, Clone)]
#[allow(dead_code)] // Constructed only in builds where some connector feature is off.
pub(crate) struct NotCompiled;

impl<'de> serde::Deserialize<'de> for NotCompiled {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(Self)
    }
}

/// The error for a connector whose feature is compiled out, at `field` (`pipeline.source.type`).
pub(crate) fn not_compiled(field: &str, ty: &str, feature: &str) -> FaucetError {
    FaucetError::config(
        field,
        format!("`{ty}` is not compiled into this binary; rebuild with --features {feature}"),
    )
}

/// What `faucet doctor` suggests when a connector's probe fails for a reason other than its
/// configuration (that hint is the same for all: fix the field the error names).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Hints {
    /// When it cannot connect ([`FaucetError::Connect`], also a probe's timeout); `None`:
    /// "is the server running and reachable from here?".
    pub(crate) connect: Option<&'static str>,
    /// Any other failure; `None`: "see the error above".
    pub(crate) other: Option<&'static str>,
}

impl Hints {
    /// The hints of a local file: nothing to connect to, `other` for any failure.
    pub(crate) const fn file(other: &'static str) -> Self {
        Self {
            connect: None,
            other: Some(other),
        }
    }
}

/// The connect hint of every PostgreSQL connector and store.
pub(crate) const POSTGRES_CONNECT_HINT: &str =
    "is PostgreSQL running, and are the host, port, user and database in the url right?";

/// The connect hint of every MySQL/MariaDB connector.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL_CONNECT_HINT: &str = "is MySQL/MariaDB running, and are the host, port, user, password and database \
     in the url right?";

/// The lines of `faucet --help` that list the type names, from the registry.
pub(crate) fn help_types() -> String {
    fn names(all: impl Iterator<Item = &'static str>) -> String {
        all.collect::<Vec<_>>().join(", ")
    }
    format!(
        "Sources: {}. Sinks: {}.\nState stores: {}.",
        names(SourceType::ALL.iter().map(|k| k.name())),
        names(SinkType::ALL.iter().map(|k| k.name())),
        names(StateType::ALL.iter().map(|k| k.name())),
    )
}

/// Resolves `p` against `base` (the config file's directory) when it is relative, dropping
/// `.` components so messages show `examples/weather/weather.csv`, not `examples/weather/./weather.csv`.
///
/// A path starting with `~/` (or `~` alone) is under the home directory (`$HOME`), as in a
/// shell; `~user/` is not expanded. An empty path stays empty, for the connector to refuse.
pub(crate) fn resolve_path(base: &Path, p: &Path) -> PathBuf {
    if p.as_os_str().is_empty() || p.is_absolute() {
        return p.to_path_buf();
    }
    if let Ok(rest) = p.strip_prefix("~")
        && let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty())
    {
        return Path::new(&home).join(rest);
    }
    let mut out = base.to_path_buf();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// A connector's secret connection URL, password redacted, for people.
#[cfg(any(
    feature = "sql",
    feature = "redis-streams",
    feature = "nats",
    feature = "mongodb"
))]
pub(crate) fn redacted_secret(url: &secrecy::SecretString) -> String {
    use secrecy::ExposeSecret as _;
    crate::secret::redact_one(url.expose_secret())
}

/// Prefixes a connector's own [`FaucetError::Config`] field (`path`) with where its config
/// sits in the pipeline file (`pipeline.source.config.path`); other errors pass through.
///
/// Every connector and state store names fields relative to its own config (`path`,
/// `replication_key[1]`), and this is the one place they get their place in the file: call
/// it once per error, on errors that come straight from a connector or store.
pub(crate) fn at_field(prefix: &str, e: FaucetError) -> FaucetError {
    match e {
        FaucetError::Config { field, message } => {
            FaucetError::config(format!("{prefix}.{field}"), message)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Whether a connector config parsed from `v` says it is not compiled in when built.
    fn refuses_as_not_compiled<T: serde::de::DeserializeOwned>(
        v: serde_json::Value,
        build: impl Fn(&T) -> Result<(), FaucetError>,
    ) -> bool {
        serde_json::from_value::<T>(v).is_ok_and(|c| {
            build(&c).is_err_and(|e| e.to_string().contains("is not compiled into this binary"))
        })
    }

    /// Every connector's feature is in [`features::FEATURES`] (which tests/examples.rs reads),
    /// and a connector is refused as not compiled exactly when that feature is off.
    #[test]
    fn every_connector_feature_is_listed_and_gates_it() {
        let listed = |f: &str| {
            assert!(
                features::FEATURES.iter().any(|(name, _)| *name == f),
                "{f} is not in FEATURES"
            );
            features::is_compiled_out(f)
        };
        for k in SourceType::ALL {
            let f = k.feature().expect("every source has a feature");
            let expected = listed(f);
            let off = refuses_as_not_compiled::<SourceConfig>(json!({"type": k.name()}), |c| {
                c.build().map(drop)
            });
            assert_eq!(off, expected, "source {}", k.name());
        }
        for k in SinkType::ALL {
            let f = k.feature().expect("every sink has a feature");
            let expected = listed(f);
            let off = refuses_as_not_compiled::<SinkConfig>(json!({"type": k.name()}), |c| {
                c.build().map(drop)
            });
            assert_eq!(off, expected, "sink {}", k.name());
        }
        for k in StateType::ALL {
            let Some(f) = k.feature() else { continue };
            let expected = listed(f);
            let url = format!("{}://u:pw@h/db", k.name());
            let off = refuses_as_not_compiled::<StateConfig>(
                json!({"type": k.name(), "config": {"url": url}}),
                StateConfig::validate,
            );
            assert_eq!(off, expected, "state store {}", k.name());
        }
    }

    /// The help's lines, as they read before the registry wrote them (a connector added at
    /// the end of its list keeps these prefixes).
    #[test]
    fn the_help_lists_every_type() {
        let help = help_types();
        let (sources, states) = help.split_once('\n').expect("two lines");
        assert!(
            sources.starts_with("Sources: csv, jsonl, postgres, postgres-cdc"),
            "{help}"
        );
        assert!(sources.contains("postgres-cdc, mysql, mysql-cdc"), "{help}");
        assert!(sources.contains(". Sinks: jsonl, postgres"), "{help}");
        assert!(sources.ends_with('.'), "{help}");
        assert!(
            states.starts_with("State stores: memory, file, postgres, redis"),
            "{help}"
        );
        assert!(states.ends_with('.'), "{help}");
    }

    #[test]
    fn relative_paths_resolve_against_the_config_directory() {
        let base = Path::new("examples/weather");
        assert_eq!(
            resolve_path(base, Path::new("./weather.csv")),
            PathBuf::from("examples/weather/weather.csv")
        );
        assert_eq!(
            resolve_path(base, Path::new("../x/y.csv")),
            PathBuf::from("examples/weather/../x/y.csv")
        );
        assert_eq!(
            resolve_path(base, Path::new("/abs/y.csv")),
            PathBuf::from("/abs/y.csv")
        );
        assert_eq!(
            resolve_path(Path::new(""), Path::new("./a.csv")),
            PathBuf::from("a.csv")
        );
        assert_eq!(
            resolve_path(Path::new(""), Path::new(".")),
            PathBuf::from(".")
        );
    }
}
