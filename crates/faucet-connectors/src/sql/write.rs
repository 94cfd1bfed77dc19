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
    /// The columns rows are upserted by: `key` in `upsert` mode, none in `append` mode.
    pub fn upsert_key(self, key: &[String]) -> &[String] {
        match self {
            Self::Upsert => key,
            Self::Append => &[],
        }
    }

    /// How `faucet validate` names the mode: ` (append)` or ` (upsert by id, region)`.
    pub fn describe(self, key: &[String]) -> String {
        match self {
            Self::Append => " (append)".to_owned(),
            Self::Upsert if key.is_empty() => " (upsert by the source's key)".to_owned(),
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

/// Whether a SQL sink's `check_schema` has columns to check for `schema` in `mode`: not for
/// change records applied by `upsert` (they write the source table's columns, which only the
/// data tells); for anything appended, and plain rows upserted.
pub(crate) fn checks_columns(mode: WriteMode, schema: &faucet_core::Schema) -> bool {
    mode != WriteMode::Upsert || faucet_core::change::ChangeLayout::of(schema).is_none()
}

/// What a SQL sink's `check_schema` says when an existing table lacks columns the sink will
/// write (`faucet doctor`, before a run fails at its first page), for a schema
/// [`checks_columns`] said to check: `None` when `has` has every field of `schema`.
/// Otherwise the [`FaucetError::Write`] of `connector` naming the missing columns, every
/// column the sink writes, and the `ALTER TABLE <quoted_table> ADD COLUMN …` that adds them
/// (`column_sql(field)` is the system's quoted name and type), with the other fix for change
/// records (`write_mode: upsert`).
pub(crate) fn missing_columns(
    connector: &'static str,
    schema: &faucet_core::Schema,
    has: impl Fn(&str) -> bool,
    (table, quoted_table): (&dyn std::fmt::Display, &str),
    column_sql: impl Fn(&faucet_core::Field) -> String,
) -> Option<FaucetError> {
    let changes = faucet_core::change::ChangeLayout::of(schema).is_some();
    let missing: Vec<&faucet_core::Field> =
        schema.fields().iter().filter(|f| !has(&f.name)).collect();
    if missing.is_empty() {
        return None;
    }
    let names: Vec<&str> = missing.iter().map(|f| f.name.as_str()).collect();
    let adds: Vec<String> = missing
        .iter()
        .map(|f| format!("ADD COLUMN {}", column_sql(f)))
        .collect();
    let all: Vec<&str> = schema.names().collect();
    let (what, other_fix) = if changes {
        (
            "the source's change records, appended as rows (an audit log)",
            "; or, to apply the changes to a copy of the source table instead, set \
             `write_mode: upsert` with its `key`",
        )
    } else {
        ("the source's records", "")
    };
    Some(FaucetError::write(
        connector,
        format!(
            "table {table} has no column {} (the sink writes {}: {what}); add them (`ALTER \
             TABLE {quoted_table} {}`), or write into a new table with `create_table: \
             true`{other_fix}",
            names.join(", "),
            all.join(", "),
            adds.join(", ")
        ),
        None,
    ))
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
