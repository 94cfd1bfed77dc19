//! The `postgres` sink's configuration (`sink.config` of `type: postgres`) and its pure
//! validation.

use secrecy::SecretString;
use serde::Deserialize;

use faucet_core::FaucetError;

pub use crate::sql::WriteMode;

use super::nul::NulBytes;
use crate::postgres::connection::PostgresUrl;
use crate::postgres::ident::{TableName, validate_column};
use crate::sql::sink::route::{Route, TargetEntry};
use crate::sql::{DroppedColumns, SchemaChanges};

/// A [`PostgresSinkConfig`] that passed [`PostgresSinkConfig::validate`], with what
/// validation parsed; taken by [`super::PostgresSink::from_validated`].
pub type ValidatedSinkConfig =
    crate::sql::validated::ValidatedSinkConfig<PostgresSinkConfig, PostgresUrl, TableName>;

/// Configuration of a [`super::PostgresSink`].
///
/// ```yaml
/// sink:
///   type: postgres
///   config:
///     connection_url: ${env:TARGET_PG_URL}
///     table: public.orders
///     write_mode: upsert
///     key: [id]
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSinkConfig {
    /// The target database, `postgres://user:password@host:port/database`. A secret: never
    /// printed (`Debug` shows `[redacted]`, errors show `postgres://user@host:port/database`).
    pub connection_url: SecretString,
    /// The target table, `table` or `schema.table`; each part 1 to 63 bytes without NUL
    /// or `.` (any other character works), matched exactly (case-sensitively) and always quoted. The commit
    /// token table `faucet_commit_tokens` and the fence table `faucet_fences` live in the same
    /// schema: a target of either name is refused.
    ///
    /// Or a template over the change records' source table (`replica.{table}`,
    /// `{schema}_{table}`; placeholders of [`faucet_core::route::TableTemplate`]): each
    /// source table into its own target, every target of a page in one transaction
    /// (module `sql::sink::route`). With `tables:`, the default for source tables it does
    /// not list; optional then.
    #[serde(default)]
    pub table: String,
    /// Source table → target: `{public.orders: replica.orders}`, or per target `{table,
    /// key, write_mode}`. A change record of a table neither listed nor matched by a
    /// `table` template is an error naming it (there is no skip).
    #[serde(default)]
    pub tables: std::collections::BTreeMap<String, TargetEntry>,
    /// Create the table when it is missing, from the first page's field types (docs/values.md
    /// value types → `bigint`, `numeric`, `double precision`, `text`, `jsonb`, ...), with the
    /// `key` columns as primary key; for change records, the `after` columns with `upsert`,
    /// the change records' own fields with `append`. Every column name must fit 63 bytes. Default `false`: a missing table is an error.
    #[serde(default = "default_create_table")]
    pub create_table: bool,
    /// `append` (default) or `upsert`.
    #[serde(default)]
    pub write_mode: WriteMode,
    /// The columns identifying a row, e.g. `[id]`. Required for `upsert` (the table needs a
    /// primary key or unique index on exactly these columns); with `append` only used as the
    /// primary key of a created table. A routed sink may leave it out: each target is then
    /// upserted by its source table's key.
    #[serde(default)]
    pub key: Vec<String>,
    /// What to do with U+0000 (NUL) in a value, which PostgreSQL cannot store (in text, nor
    /// as `\u0000` in jsonb): `fail` (default: the page fails with an error naming the
    /// column, the record's key or source position, and this option), `strip` (remove it)
    /// or `replace` (write U+FFFD instead).
    #[serde(default)]
    pub nul_bytes: NulBytes,
    /// What an upsert target does with a source's schema change (`op: "s"` records):
    /// `apply` (default: add, rename, widen; module `sql::sink::schema`) or `fail`.
    #[serde(default)]
    pub schema_changes: SchemaChanges,
    /// What a column dropped in the source does to an upsert target: `keep` (default: the
    /// column stays, rows inserted later get NULL, a warning says so) or `drop`.
    #[serde(default)]
    pub dropped_columns: DroppedColumns,
}

fn default_create_table() -> bool {
    false
}

impl std::fmt::Debug for PostgresSinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSinkConfig")
            .field("connection_url", &"[redacted]")
            .field("table", &self.table)
            .field("tables", &self.tables)
            .field("create_table", &self.create_table)
            .field("write_mode", &self.write_mode)
            .field("key", &self.key)
            .field("nul_bytes", &self.nul_bytes)
            .field("schema_changes", &self.schema_changes)
            .field("dropped_columns", &self.dropped_columns)
            .finish()
    }
}

impl PostgresSinkConfig {
    /// A config appending into `table`.
    pub fn new(connection_url: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            connection_url: SecretString::from(connection_url.into()),
            table: table.into(),
            tables: std::collections::BTreeMap::new(),
            create_table: default_create_table(),
            write_mode: WriteMode::Append,
            key: Vec::new(),
            nul_bytes: NulBytes::Fail,
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

    /// Checks the config without any I/O, and keeps what checking parsed (the connection
    /// options, the table name) for [`super::PostgresSink::from_validated`].
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field relative to this config (`key[1]`; the CLI
    /// puts `pipeline.sink.config.` before it).
    pub fn validate(&self) -> Result<ValidatedSinkConfig, FaucetError> {
        let parse_name = |n: &str, f: &str| TableName::parse(n, f).map(drop);
        let route = Route::parse(
            (&self.table, &self.tables),
            (&self.key, self.write_mode),
            &parse_name,
            &validate_column,
        )?;
        let table = match &route {
            None => self.table_name()?,
            Some(r) => routed_home(r),
        };
        let connection = PostgresUrl::parse(&self.connection_url, "connection_url")?;
        if route.is_none() {
            self.write_mode.validate_key(&self.key, validate_column)?;
        }
        Ok(ValidatedSinkConfig {
            config: self.clone(),
            connection,
            table,
            route,
        })
    }

    /// The validated table name.
    pub(crate) fn table_name(&self) -> Result<TableName, FaucetError> {
        TableName::parse(&self.table, "table")
    }
}

/// The name a routed sink goes by: in [`Route::home`]'s schema (where its token and fence
/// tables live), named by the route's description.
fn routed_home(route: &Route) -> TableName {
    TableName {
        schema: route.home(),
        name: route.describe(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_and_validated() {
        let c: PostgresSinkConfig = serde_json::from_value(serde_json::json!({
            "connection_url": "postgres://u:secret@h/db",
            "table": "public.contact",
            "write_mode": "upsert",
            "key": ["id"]
        }))
        .expect("parses");
        let valid = c.validate().expect("valid");
        // What validation parsed is kept, for the sink to take without parsing again.
        assert_eq!(valid.table.to_string(), "public.contact");
        assert_eq!(valid.connection.host(), "h");
        assert!(!format!("{valid:?}").contains("secret"));
        assert!(!c.create_table);
        assert!(!format!("{c:?}").contains("secret"));
        assert!(
            serde_json::from_value::<PostgresSinkConfig>(serde_json::json!({
                "connection_url": "postgres://h/db", "table": "t", "mode": "append"
            }))
            .is_err()
        );
        let field = |c: PostgresSinkConfig| match c.validate() {
            Err(FaucetError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        // faucet's own tables beside the target are no target.
        for own in ["faucet_commit_tokens", "s.faucet_fences"] {
            assert_eq!(
                field(PostgresSinkConfig::new("postgres://h/db", own)),
                "table",
                "{own}"
            );
        }
        let base = PostgresSinkConfig::new("postgres://h/db", "t");
        base.validate().expect("valid");
        let mut c = base.clone();
        c.write_mode = WriteMode::Upsert;
        assert_eq!(field(c), "key");
        assert_eq!(field(base.clone().upsert(["id", "id"])), "key[1]");
        assert_eq!(
            field(PostgresSinkConfig::new("postgres://h/db", "x.y.z")),
            "table"
        );
        assert_eq!(
            field(PostgresSinkConfig::new("http://h/db", "t")),
            "connection_url"
        );
    }
}
