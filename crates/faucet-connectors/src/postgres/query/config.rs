//! The `postgres` query source's configuration (`source.config` of `type: postgres`) and its
//! pure validation.

use secrecy::SecretString;
use serde::Deserialize;

use faucet_core::FaucetError;

pub use crate::sql::ReplicationMethod;
use crate::sql::read::ReadFields;

use crate::postgres::connection::PostgresUrl;
use crate::postgres::ident::{TableName, validate_column};

/// A [`PostgresQueryConfig`] that passed [`PostgresQueryConfig::validate`], with what
/// validation parsed; made only by `validate`, taken by
/// [`super::PostgresQuerySource::from_validated`], so the config is parsed once.
#[derive(Clone)]
pub struct ValidatedQueryConfig {
    pub(crate) config: PostgresQueryConfig,
    pub(crate) connection: PostgresUrl,
    pub(crate) target: Target,
}

impl ValidatedQueryConfig {
    /// The configuration as written.
    pub fn config(&self) -> &PostgresQueryConfig {
        &self.config
    }
}

impl std::fmt::Debug for ValidatedQueryConfig {
    /// The config (its URL redacted); the connection options, which hold the password, are
    /// left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValidatedQueryConfig")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Configuration of a [`super::PostgresQuerySource`].
///
/// ```yaml
/// source:
///   type: postgres
///   config:
///     connection_url: ${env:SOURCE_PG_URL}
///     table: public.orders
///     replication_method: incremental
///     replication_key: [updated_at, id]
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresQueryConfig {
    /// The database, `postgres://user:password@host:port/database`. A secret: never
    /// printed (`Debug` shows `[redacted]`, errors show `postgres://user@host:port/database`).
    pub connection_url: SecretString,
    /// The table to read, `table` or `schema.table`; each part 1 to 63 bytes without
    /// NUL or `.` (any other character works), matched exactly (case-sensitively) and always quoted. Exactly one of `table` and
    /// `query` is required.
    #[serde(default)]
    pub table: Option<String>,
    /// A `SELECT` to read instead of a table (no trailing `;`). It is wrapped as a subquery
    /// (`SELECT * FROM (<query>) AS faucet_q ...`), so its output column names must be
    /// distinct; the replication key refers to them.
    #[serde(default)]
    pub query: Option<String>,
    /// `full_table` (default) or `incremental`.
    #[serde(default)]
    pub replication_method: ReplicationMethod,
    /// The columns whose tuple orders the rows of an incremental read, e.g.
    /// `[updated_at, id]`. Required for `incremental`, not allowed for `full_table`. The
    /// tuple should be unique (end it with the primary key): `check()` warns when it is not
    /// known to be. Rows whose key has a NULL are not read by an incremental read.
    #[serde(default)]
    pub replication_key: Vec<String>,
}

impl std::fmt::Debug for PostgresQueryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresQueryConfig")
            .field("connection_url", &"[redacted]")
            .field("table", &self.table)
            .field("query", &self.query)
            .field("replication_method", &self.replication_method)
            .field("replication_key", &self.replication_key)
            .finish()
    }
}

/// What the source reads: a validated table or a query.
pub(crate) type Target = crate::sql::read::Target<TableName>;

impl PostgresQueryConfig {
    /// A config reading `table` with `full_table`.
    pub fn for_table(connection_url: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            connection_url: SecretString::from(connection_url.into()),
            table: Some(table.into()),
            query: None,
            replication_method: ReplicationMethod::FullTable,
            replication_key: Vec::new(),
        }
    }

    /// Checks the config without any I/O, and keeps what checking parsed (the connection
    /// options, the table or query) for [`super::PostgresQuerySource::from_validated`].
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field relative to this config (`replication_key[1]`;
    /// the CLI puts `pipeline.source.config.` before it).
    pub fn validate(&self) -> Result<ValidatedQueryConfig, FaucetError> {
        let target = self
            .read_fields()
            .validate(TableName::parse, validate_column)?;
        let connection = PostgresUrl::parse(&self.connection_url, "connection_url")?;
        Ok(ValidatedQueryConfig {
            config: self.clone(),
            connection,
            target,
        })
    }

    /// Warnings a user should see without connecting (printed by `faucet validate`): an
    /// incremental read of a query, whose key cannot be checked for uniqueness. `check()`
    /// adds the warnings that need the database (see
    /// [`super::PostgresQuerySource::warnings`]).
    pub fn warnings(&self) -> Vec<String> {
        self.read_fields().warnings()
    }

    /// The read fields, for the rules every SQL source shares ([`crate::sql::read`]).
    fn read_fields(&self) -> ReadFields<'_> {
        ReadFields {
            table: self.table.as_deref(),
            query: self.query.as_deref(),
            method: self.replication_method,
            replication_key: &self.replication_key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml_json: serde_json::Value) -> Result<PostgresQueryConfig, serde_json::Error> {
        serde_json::from_value(yaml_json)
    }

    #[test]
    fn strict_and_validated() {
        let ok = parse(serde_json::json!({
            "connection_url": "postgres://u:secret@h/db",
            "table": "public.orders",
            "replication_method": "incremental",
            "replication_key": ["updated_at", "id"]
        }))
        .expect("parses");
        let valid = ok.validate().expect("valid");
        // What validation parsed is kept, for the source to take without parsing again.
        assert!(
            matches!(&valid.target, Target::Table(t) if t.to_string() == "public.orders"),
            "{valid:?}"
        );
        assert_eq!(valid.connection.host(), "h");
        assert!(!format!("{valid:?}").contains("secret"));
        assert!(!format!("{ok:?}").contains("secret"));
        assert!(ok.warnings().is_empty());

        assert!(
            parse(
                serde_json::json!({"connection_url": "postgres://h/db", "table": "t", "tabel": 1})
            )
            .is_err()
        );
        let field = |v: serde_json::Value| match parse(v).expect("parses").validate() {
            Err(FaucetError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(serde_json::json!({"connection_url": "postgres://h/db",
                "table": "t", "replication_method": "incremental"})),
            "replication_key"
        );
        assert_eq!(
            field(serde_json::json!({"connection_url": "postgres://h/db",
                "table": "t", "replication_key": ["id"]})),
            "replication_key"
        );
        assert_eq!(
            field(serde_json::json!({"connection_url": "postgres://h/db",
                "table": "a.b.c"})),
            "table"
        );
        assert_eq!(
            field(serde_json::json!({"connection_url": "postgres://h/db",
                "table": "t", "query": "select 1"})),
            "query"
        );
        assert_eq!(
            field(serde_json::json!({"connection_url": "postgres://h/db", "query": " ; "})),
            "query"
        );
        assert_eq!(
            field(serde_json::json!({"connection_url": "nope", "table": "t"})),
            "connection_url"
        );
        assert_eq!(
            field(
                serde_json::json!({"connection_url": "postgres://h/db", "table": "t",
                "replication_method": "incremental", "replication_key": ["id", "id"]})
            ),
            "replication_key[1]"
        );
        let q = parse(serde_json::json!({"connection_url": "postgres://h/db",
            "query": "select * from t", "replication_method": "incremental",
            "replication_key": ["id"]}))
        .expect("parses");
        q.validate().expect("valid");
        assert_eq!(q.warnings().len(), 1);
    }
}
