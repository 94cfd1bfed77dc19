//! A SQL sink's write rules, the same for every system: `write_mode: append | upsert`, and
//! the `key` an upsert needs (each column once).

use serde::Deserialize;

use faucet_core::FaucetError;

/// How a SQL sink (`postgres`, `mysql`) writes rows: the seeds' `write_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Every record becomes a new row (at-least-once on its own; effectively-once with the
    /// atomic commit token and a deterministic source). Change records are appended as they
    /// are, one row per change: an audit log (`op`, `table`, the position fields,
    /// `commit_ts`, `before`, `after`, `unchanged_toast`). Each sink's module says its fast
    /// path (PostgreSQL `COPY`, MySQL multi-row `INSERT`).
    #[default]
    Append,
    /// Insert or update by `key`; change records are applied through
    /// [`faucet_core::change::collapse`]: `d` deletes, `c`/`u`/`r` upsert, `t` empties the
    /// table. A replayed record overwrites itself: effectively-once (keyed upsert).
    Upsert,
}

impl WriteMode {
    /// How `faucet validate` names the mode: ` (append)` or ` (upsert by id, region)`.
    pub fn describe(self, key: &[String]) -> String {
        match self {
            Self::Append => " (append)".to_owned(),
            Self::Upsert => format!(" (upsert by {})", key.join(", ")),
        }
    }

    /// Checks `key` for this mode: required by `upsert`, each column valid by the system's
    /// `validate_column(name, field)` and listed once.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming `key` or `key[i]`.
    pub(crate) fn validate_key(
        self,
        key: &[String],
        validate_column: impl Fn(&str, &str) -> Result<(), FaucetError>,
    ) -> Result<(), FaucetError> {
        if self == Self::Upsert && key.is_empty() {
            return Err(FaucetError::config(
                "key",
                "is required for `write_mode: upsert`, e.g. `[id]`",
            ));
        }
        distinct_columns(key, "key", validate_column)
    }
}

/// Checks a list of column names at `field` (`key`, `replication_key`): each valid by the
/// system's `validate_column(name, field)`, none listed twice.
///
/// # Errors
/// [`FaucetError::Config`] naming `field[i]`.
pub(crate) fn distinct_columns(
    columns: &[String],
    field: &str,
    validate_column: impl Fn(&str, &str) -> Result<(), FaucetError>,
) -> Result<(), FaucetError> {
    for (i, col) in columns.iter().enumerate() {
        let at = format!("{field}[{i}]");
        validate_column(col, &at)?;
        if columns[..i].contains(col) {
            return Err(FaucetError::config(at, format!("`{col}` is listed twice")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(r: Result<(), FaucetError>) -> String {
        match r {
            Err(FaucetError::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn an_upsert_needs_a_key_of_distinct_valid_columns() {
        let ok = |_: &str, _: &str| Ok(());
        let key = |k: &[&str]| k.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(field_of(WriteMode::Upsert.validate_key(&[], ok)), "key");
        assert!(WriteMode::Append.validate_key(&[], ok).is_ok());
        assert_eq!(
            field_of(WriteMode::Upsert.validate_key(&key(&["a", "b", "a"]), ok)),
            "key[2]"
        );
        let no_empty = |c: &str, f: &str| {
            if c.is_empty() {
                Err(FaucetError::config(f, "is empty"))
            } else {
                Ok(())
            }
        };
        assert_eq!(
            field_of(WriteMode::Append.validate_key(&key(&["a", ""]), no_empty)),
            "key[1]"
        );
        assert_eq!(WriteMode::Append.describe(&[]), " (append)");
        assert_eq!(
            WriteMode::Upsert.describe(&key(&["id", "r"])),
            " (upsert by id, r)"
        );
    }
}
