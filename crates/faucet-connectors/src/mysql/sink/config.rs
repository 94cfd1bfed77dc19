//! The `mysql` sink's configuration (`sink.config` of `type: mysql`) and its pure validation.

use secrecy::SecretString;
use serde::Deserialize;

use faucet_core::FaucetError;

pub use crate::sql::WriteMode;

use crate::mysql::connection::MysqlConnection;
use crate::mysql::table::{TableName, validate_column};
use crate::sql::sink::route::{Route, TargetEntry};
use crate::sql::{DroppedColumns, SchemaChanges};

/// The connector's name, in errors and logs.
pub(crate) const CONNECTOR: &str = "mysql";

/// A [`MysqlSinkConfig`] that passed [`MysqlSinkConfig::validate`], with what validation
/// parsed; taken by [`super::MysqlSink::from_validated`].
pub type ValidatedMysqlSinkConfig =
    crate::sql::validated::ValidatedSinkConfig<MysqlSinkConfig, MysqlConnection, TableName>;

/// Configuration of a [`super::MysqlSink`] (MySQL or MariaDB; MariaDB 10.11 is tested).
///
/// ```yaml
/// sink:
///   type: mysql
///   config:
///     connection_url: ${env:TARGET_MYSQL_URL}
///     table: shop.orders
///     write_mode: upsert
///     key: [id]
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlSinkConfig {
    /// The target server, `mysql://user:password@host:port/database` (or `mariadb://`). A
    /// secret: never printed (`Debug` shows `[redacted]`, errors show
    /// `user@host:port/database`).
    pub connection_url: SecretString,
    /// The target table, `db.table` or `table` (then in the URL's database); each part 1 to
    /// 64 characters without NUL or `.`, always quoted with backticks. The commit token table
    /// `faucet_commit_tokens` and the fence table `faucet_fences` live in the same database:
    /// a target of either name is refused.
    /// Its engine must be transactional (InnoDB): MyISAM, Aria, MEMORY … are refused before
    /// any data moves.
    ///
    /// Or a template over the change records' source table (`replica.{table}`,
    /// `{database}_{table}`; placeholders of [`faucet_core::route::TableTemplate`], where
    /// `{schema}` and `{database}` both name the part before the `.`): each source table
    /// into its own target, every target of a page in one transaction (module
    /// `sql::sink::route`). With `tables:`, the default for source tables it does not list;
    /// optional then.
    #[serde(default)]
    pub table: String,
    /// Source table → target: `{shop.orders: replica.orders}`, or per target `{table, key,
    /// write_mode}`. A change record of a table neither listed nor matched by a `table`
    /// template is an error naming it (there is no skip).
    #[serde(default)]
    pub tables: std::collections::BTreeMap<String, TargetEntry>,
    /// Create the table when it is missing, from the first page's field types (README,
    /// "mysql sink": `BIGINT`, `DECIMAL(65,s)`, `DATETIME(6)`, `JSON`, `LONGBLOB`, …), InnoDB,
    /// a binary NO PAD collation (`utf8mb4_nopad_bin` / `utf8mb4_0900_bin`), with the `key`
    /// columns as primary key; for change records with
    /// `upsert`, the `after` columns. Default `false`: a missing table is an error.
    #[serde(default)]
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
    /// What an upsert target does with a source's schema change (`op: "s"` records):
    /// `apply` (default: add, rename, widen, ahead of the page's transaction since MySQL's
    /// DDL commits on its own; module `sql::sink::schema_ahead`) or `fail`.
    #[serde(default)]
    pub schema_changes: SchemaChanges,
    /// What a column dropped in the source does to an upsert target: `keep` (default: the
    /// column stays, made nullable; rows inserted later get NULL, a warning says so) or
    /// `drop`.
    #[serde(default)]
    pub dropped_columns: DroppedColumns,
}

impl std::fmt::Debug for MysqlSinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlSinkConfig")
            .field("connection_url", &"[redacted]")
            .field("table", &self.table)
            .field("tables", &self.tables)
            .field("create_table", &self.create_table)
            .field("write_mode", &self.write_mode)
            .field("key", &self.key)
            .field("schema_changes", &self.schema_changes)
            .field("dropped_columns", &self.dropped_columns)
            .finish()
    }
}

impl MysqlSinkConfig {
    /// A config appending into `table`.
    pub fn new(connection_url: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            connection_url: SecretString::from(connection_url.into()),
            table: table.into(),
            tables: std::collections::BTreeMap::new(),
            create_table: false,
            write_mode: WriteMode::Append,
            key: Vec::new(),
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

    /// This config, creating the table when it is missing.
    pub fn creating_table(mut self) -> Self {
        self.create_table = true;
        self
    }

    /// Checks the config without any I/O, and keeps what checking parsed.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field relative to this config (`key[1]`).
    pub fn validate(&self) -> Result<ValidatedMysqlSinkConfig, FaucetError> {
        let parse_name = |n: &str, f: &str| TableName::parse(n, f).map(drop);
        let route = Route::parse(
            (&self.table, &self.tables),
            (&self.key, self.write_mode),
            &parse_name,
            &validate_column,
        )?;
        let connection = MysqlConnection::parse(&self.connection_url, "connection_url", CONNECTOR)?;
        let table = match &route {
            None => {
                self.write_mode.validate_key(&self.key, validate_column)?;
                TableName::parse(&self.table, "table")?.qualified_in(connection.database())
            }
            Some(r) => TableName {
                database: Some(r.home().unwrap_or_else(|| connection.database().to_owned())),
                table: r.describe(),
            },
        };
        Ok(ValidatedMysqlSinkConfig {
            config: self.clone(),
            connection,
            table,
            route,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_and_validated() {
        let c: MysqlSinkConfig = serde_json::from_value(serde_json::json!({
            "connection_url": "mysql://u:secret@h/db",
            "table": "contact",
            "write_mode": "upsert",
            "key": ["id"]
        }))
        .expect("parses");
        let valid = c.validate().expect("valid");
        assert_eq!(valid.table.to_string(), "db.contact");
        assert!(!format!("{valid:?}").contains("secret"));
        assert!(!format!("{c:?}").contains("secret"));
        assert!(!c.create_table);
        assert!(
            serde_json::from_value::<MysqlSinkConfig>(serde_json::json!({
                "connection_url": "mysql://h/db", "table": "t", "mode": "append"
            }))
            .is_err()
        );
        let field = |c: MysqlSinkConfig| match c.validate() {
            Err(FaucetError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        // faucet's own tables beside the target are no target.
        for own in ["faucet_commit_tokens", "s.faucet_fences"] {
            assert_eq!(
                field(MysqlSinkConfig::new("mysql://h/db", own)),
                "table",
                "{own}"
            );
        }
        let base = MysqlSinkConfig::new("mysql://h/db", "t");
        base.validate().expect("valid");
        let mut c = base.clone();
        c.write_mode = WriteMode::Upsert;
        assert_eq!(field(c), "key");
        assert_eq!(field(base.clone().upsert(["id", "id"])), "key[1]");
        assert_eq!(field(base.clone().upsert([""])), "key[0]");
        assert_eq!(
            field(MysqlSinkConfig::new("mysql://h/db", "x.y.z")),
            "table"
        );
        assert_eq!(
            field(MysqlSinkConfig::new("postgres://h/db", "t")),
            "connection_url"
        );
    }
}
