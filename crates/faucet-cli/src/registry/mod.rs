//! The closed registry of what a pipeline file can name: one tagged enum per kind —
//! [`SourceConfig`], [`SinkConfig`], [`StateConfig`] — each written `{type: <name>, config:
//! {...}}`, one variant per connector, one `build()` match each (CONVENTIONS.md point 4).
//!
//! A variant whose Cargo feature is compiled out still parses as a known type (its config is
//! kept as raw YAML), and building it gives "`postgres` is not compiled into this binary;
//! rebuild with --features postgres". An unknown type is an error listing the known ones.

mod fielded;
mod sink;
mod source;
mod state;
mod tagged;

use std::path::{Component, Path, PathBuf};

use faucet_core::FaucetError;

pub(crate) use sink::SinkConfig;
pub(crate) use source::SourceConfig;
pub(crate) use state::StateConfig;

/// The config of a connector whose feature is compiled out: any value, kept as written.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(transparent)]
#[allow(dead_code)] // Read only in builds where some feature is off.
pub(crate) struct NotCompiled(serde_json::Value);

/// The error for a connector whose feature is compiled out.
#[allow(dead_code)] // Used only in builds where some feature is off.
pub(crate) fn not_compiled(field: &str, ty: &str, feature: &str) -> FaucetError {
    FaucetError::config(
        field,
        format!("`{ty}` is not compiled into this binary; rebuild with --features {feature}"),
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
#[cfg(feature = "postgres")]
pub(crate) fn redacted_secret(url: &secrecy::SecretString) -> String {
    use secrecy::ExposeSecret as _;
    crate::secret::redact_one(url.expose_secret())
}

#[allow(dead_code)] // Unused only when every connector feature is off.
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
