//! The `sqlite` sink's configuration (`sink.config` of `type: sqlite`) and its pure
//! validation.

use std::path::PathBuf;

use serde::Deserialize;

use faucet_core::FaucetError;

pub use crate::sql::WriteMode;
use crate::sql::{DroppedColumns, SchemaChanges};

/// The connector's name, in messages.
pub(crate) const CONNECTOR: &str = "sqlite";

/// Configuration of a [`super::SqliteSink`].
///
/// ```yaml
/// sink:
///   type: sqlite
///   config:
///     path: ./orders.db
///     table: orders
///     write_mode: upsert
///     key: [id]
///     create_table: true
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqliteSinkConfig {
    /// The database file (created when missing; relative paths are relative to the config
    /// file). It runs in WAL journal mode with `synchronous = FULL`, so a committed page is
    /// on disk before its bookmark is stored. The commit token table `faucet_commit_tokens`
    /// and the fence table `faucet_fences` live in the same file.
    pub path: PathBuf,
    /// The target table: one name (no `schema.` part), not empty, without NUL or `.`, not
    /// starting with `sqlite_` (SQLite's own) nor named `faucet_commit_tokens` or
    /// `faucet_fences` (faucet's own); matched exactly and always quoted.
    pub table: String,
    /// Create the table when it is missing, from the first page's field types (the type table
    /// of the [`super`] module: `INTEGER`, `REAL`, `TEXT`, `BLOB`), with the `key` columns as
    /// primary key; for change records, the `after` columns with `upsert`, the change
    /// records' own fields with `append`. Default `false`: a missing table is an error.
    #[serde(default)]
    pub create_table: bool,
    /// `append` (default) or `upsert`.
    #[serde(default)]
    pub write_mode: WriteMode,
    /// The columns identifying a row, e.g. `[id]`. Required for `upsert` (the table needs a
    /// primary key or unique index on exactly these columns); with `append` only used as the
    /// primary key of a created table.
    #[serde(default)]
    pub key: Vec<String>,
    /// How long a write waits for another connection's lock on the file before the page
    /// fails with an error naming the file (SQLite's busy timeout), in milliseconds, at most
    /// 2,147,483,647 (a C `int`). Default 5000.
    #[serde(default = "default_busy_timeout_ms")]
    pub busy_timeout_ms: u64,
    /// What an upsert target does with a source's schema change (`op: "s"` records):
    /// `apply` (default: add and rename columns; a type change the column's affinity
    /// already holds is nothing to do, any other is refused: SQLite cannot alter a type)
    /// or `fail`.
    #[serde(default)]
    pub schema_changes: SchemaChanges,
    /// What a column dropped in the source does to an upsert target: `keep` (default: the
    /// column stays, rows inserted later get NULL, a warning says so) or `drop`.
    #[serde(default)]
    pub dropped_columns: DroppedColumns,
}

fn default_busy_timeout_ms() -> u64 {
    5_000
}

impl SqliteSinkConfig {
    /// A config appending into `table` of the database file `path`.
    pub fn new(path: impl Into<PathBuf>, table: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            table: table.into(),
            create_table: false,
            write_mode: WriteMode::Append,
            key: Vec::new(),
            busy_timeout_ms: default_busy_timeout_ms(),
            schema_changes: SchemaChanges::Apply,
            dropped_columns: DroppedColumns::Keep,
        }
    }

    /// This config, upserting by `key`.
    pub fn upsert(mut self, key: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.write_mode = WriteMode::Upsert;
        self.key = key.into_iter().map(Into::into).collect();
        self
    }

    /// This config, creating the table from the first page when it is missing.
    pub fn creating_table(mut self) -> Self {
        self.create_table = true;
        self
    }

    /// Checks the config without any I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field relative to this config (`table`, `key[1]`;
    /// the CLI puts `pipeline.sink.config.` before it).
    pub fn validate(&self) -> Result<(), FaucetError> {
        if self.path.as_os_str().is_empty() {
            return Err(FaucetError::config(
                "path",
                "is empty; name a database file",
            ));
        }
        validate_table(&self.table)?;
        // SQLite's busy timeout is a C int of milliseconds (sqlx panics on more).
        if i32::try_from(self.busy_timeout_ms).is_err() {
            return Err(FaucetError::config(
                "busy_timeout_ms",
                format!(
                    "is {}; SQLite takes at most {} (about 24 days)",
                    self.busy_timeout_ms,
                    i32::MAX
                ),
            ));
        }
        self.write_mode.validate_key(&self.key, validate_column)
    }
}

/// A table name this sink takes (see [`SqliteSinkConfig::table`]).
fn validate_table(name: &str) -> Result<(), FaucetError> {
    let problem = if name.is_empty() {
        Some("is empty")
    } else if name.contains('\0') {
        Some("holds U+0000, which no SQLite name can hold")
    } else if name.contains('.') {
        Some("holds a `.`: name one table of the file (attached schemas are not written)")
    } else if name
        .get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("sqlite_"))
    {
        Some("starts with `sqlite_`, which SQLite keeps for its own tables")
    } else {
        None
    };
    match problem {
        Some(p) => Err(FaucetError::config("table", format!("`{name}` {p}"))),
        None => crate::sql::sink::route::refuse_reserved(name, "table"),
    }
}

/// A column name this sink takes: not empty, without NUL ([`column_name_problem`]).
pub(crate) fn validate_column(name: &str, field: &str) -> Result<(), FaucetError> {
    match column_name_problem(name) {
        None => Ok(()),
        Some(problem) => Err(FaucetError::config(field, problem)),
    }
}

/// Why `name` cannot be a SQLite column name, if it cannot: empty, or holding U+0000. The
/// one rule for a `key` column, a column `create_table` makes and one a schema change adds
/// or renames.
pub(crate) fn column_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("is an empty column name".to_owned())
    } else if name.contains('\0') {
        Some(format!(
            "{name:?} holds U+0000, which no SQLite name can hold"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_and_validated() {
        let c: SqliteSinkConfig = serde_json::from_value(serde_json::json!({
            "path": "x.db", "table": "contact", "write_mode": "upsert", "key": ["id"]
        }))
        .expect("parses");
        c.validate().expect("valid");
        assert!(!c.create_table);
        assert_eq!(c.busy_timeout_ms, 5_000);
        assert!(
            serde_json::from_value::<SqliteSinkConfig>(serde_json::json!({
                "path": "x.db", "table": "t", "mode": "append"
            }))
            .is_err()
        );
        let field = |c: SqliteSinkConfig| match c.validate() {
            Err(FaucetError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let base = SqliteSinkConfig::new("x.db", "t");
        let mut c = base.clone();
        c.write_mode = WriteMode::Upsert;
        assert_eq!(field(c), "key");
        assert_eq!(field(base.clone().upsert(["id", "id"])), "key[1]");
        assert_eq!(field(base.clone().upsert([""])), "key[0]");
        for bad in [
            "",
            "main.t",
            "sqlite_master",
            "a\0b",
            "Faucet_Fences",
            "faucet_commit_tokens",
        ] {
            assert_eq!(
                field(SqliteSinkConfig::new("x.db", bad)),
                "table",
                "{bad:?}"
            );
        }
        assert_eq!(field(SqliteSinkConfig::new("", "t")), "path");
        // A multi-byte character across the 7th byte is a name, not a panic.
        SqliteSinkConfig::new("x.db", "sqlite€x")
            .validate()
            .expect("a name");
        let mut c = base.clone();
        c.busy_timeout_ms = 3_000_000_000;
        assert_eq!(field(c), "busy_timeout_ms");
        let mut c = base;
        c.busy_timeout_ms = i32::MAX as u64;
        c.validate().expect("the largest busy timeout");
    }
}
