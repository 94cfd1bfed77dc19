//! The `mysql` query source's configuration (`source.config` of `type: mysql`) and its pure
//! validation.

use secrecy::SecretString;
use serde::Deserialize;

use faucet_core::FaucetError;

pub use crate::sql::ReplicationMethod;
use crate::sql::read::ReadFields;

use crate::mysql::connection::MysqlConnection;
use crate::mysql::table::{TableName, validate_column};

/// The connector name, used in errors.
pub(crate) const CONNECTOR: &str = "mysql";

/// A [`MysqlQueryConfig`] that passed [`MysqlQueryConfig::validate`], with what validation
/// parsed; made only by `validate`, taken by [`super::MysqlQuerySource::from_validated`], so
/// the config is parsed once.
#[derive(Clone)]
pub struct ValidatedQueryConfig {
    pub(crate) config: MysqlQueryConfig,
    pub(crate) connection: MysqlConnection,
    pub(crate) target: Target,
}

impl ValidatedQueryConfig {
    /// The configuration as written.
    pub fn config(&self) -> &MysqlQueryConfig {
        &self.config
    }
}

impl std::fmt::Debug for ValidatedQueryConfig {
    /// The config (its URL redacted) and the server as `user@host:port/db`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValidatedQueryConfig")
            .field("config", &self.config)
            .field("server", &self.connection.describe())
            .finish_non_exhaustive()
    }
}

/// Configuration of a [`super::MysqlQuerySource`] (MySQL or MariaDB).
///
/// ```yaml
/// source:
///   type: mysql
///   config:
///     connection_url: ${env:SOURCE_MYSQL_URL}
///     table: shop.orders
///     replication_method: incremental
///     replication_key: [updated_at, id]
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlQueryConfig {
    /// The database, `mysql://user:password@host:port/database` (or `mariadb://`). A
    /// secret: never printed (`Debug` shows `[redacted]`, errors show
    /// `user@host:port/database`).
    pub connection_url: SecretString,
    /// The table to read, `table` (in the URL's database) or `database.table`; each part 1
    /// to 64 characters without NUL or `.`, always quoted. Exactly one of `table` and
    /// `query` is required.
    #[serde(default)]
    pub table: Option<String>,
    /// A `SELECT` to read instead of a table (no trailing `;`). It is wrapped as a derived
    /// table (`SELECT * FROM (<query>) AS faucet_q ...`), so its output column names must be
    /// distinct; the replication key refers to them. MariaDB JSON columns of a query come out
    /// as text (only a table's catalog says a LONGTEXT is JSON).
    #[serde(default)]
    pub query: Option<String>,
    /// `full_table` (default) or `incremental`.
    #[serde(default)]
    pub replication_method: ReplicationMethod,
    /// The columns whose tuple orders the rows of an incremental read, e.g.
    /// `[updated_at, id]`. Required for `incremental`, not allowed for `full_table`. The
    /// tuple should be unique (end it with the primary key): `check()` warns when it is not
    /// known to be. Rows whose key has a NULL are not read by an incremental read. Key
    /// columns may be integers, DECIMAL, BIT, YEAR, dates and times, text or binary strings;
    /// not FLOAT/DOUBLE (no exact comparison), ENUM/SET (ordered by index, compared as
    /// text), JSON or spatial types. Text keys compare in the column's collation on the
    /// server, while faucet tells key groups apart by their exact text: a key that is not
    /// unique and holds a case- or accent-insensitive text column can, on a resume from a
    /// page boundary between `a` and `A`, skip rows — end such a key with the primary key.
    #[serde(default)]
    pub replication_key: Vec<String>,
}

impl std::fmt::Debug for MysqlQueryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlQueryConfig")
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

impl MysqlQueryConfig {
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

    /// Checks the config without any I/O, and keeps what checking parsed (the connection,
    /// the table or query) for [`super::MysqlQuerySource::from_validated`].
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field relative to this config (`replication_key[1]`;
    /// the CLI puts `pipeline.source.config.` before it).
    pub fn validate(&self) -> Result<ValidatedQueryConfig, FaucetError> {
        let target = self
            .read_fields()
            .validate(TableName::parse, validate_column)?;
        let connection = MysqlConnection::parse(&self.connection_url, "connection_url", CONNECTOR)?;
        Ok(ValidatedQueryConfig {
            config: self.clone(),
            connection,
            target,
        })
    }

    /// Warnings a user should see without connecting (printed by `faucet validate`): an
    /// incremental read of a query, whose key cannot be checked for uniqueness. `check()`
    /// adds the warnings that need the database.
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

    fn parse(v: serde_json::Value) -> Result<MysqlQueryConfig, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn strict_and_validated() {
        let ok = parse(serde_json::json!({
            "connection_url": "mysql://u:secret@h/db",
            "table": "shop.orders",
            "replication_method": "incremental",
            "replication_key": ["updated_at", "id"]
        }))
        .expect("parses");
        let valid = ok.validate().expect("valid");
        assert!(
            matches!(&valid.target, Target::Table(t) if t.to_string() == "shop.orders"),
            "{valid:?}"
        );
        assert_eq!(valid.connection.describe(), "u@h:3306/db");
        assert!(!format!("{valid:?}").contains("secret"));
        assert!(!format!("{ok:?}").contains("secret"));
        assert!(ok.warnings().is_empty());
        assert!(
            parse(serde_json::json!({"connection_url": "mysql://h/db", "table": "t", "tabel": 1}))
                .is_err()
        );
        let field = |v: serde_json::Value| match parse(v).expect("parses").validate() {
            Err(FaucetError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let url = "mysql://h/db";
        for (v, want) in [
            (
                serde_json::json!({"connection_url": url, "table": "t",
                    "replication_method": "incremental"}),
                "replication_key",
            ),
            (
                serde_json::json!({"connection_url": url, "table": "t", "replication_key": ["id"]}),
                "replication_key",
            ),
            (
                serde_json::json!({"connection_url": url, "table": "a.b.c"}),
                "table",
            ),
            (serde_json::json!({"connection_url": url}), "table"),
            (
                serde_json::json!({"connection_url": url, "table": "t", "query": "select 1"}),
                "query",
            ),
            (
                serde_json::json!({"connection_url": url, "query": " ; "}),
                "query",
            ),
            (
                serde_json::json!({"connection_url": "postgres://h/db", "table": "t"}),
                "connection_url",
            ),
            (
                serde_json::json!({"connection_url": url, "table": "t",
                    "replication_method": "incremental", "replication_key": ["id", "id"]}),
                "replication_key[1]",
            ),
        ] {
            assert_eq!(field(v.clone()), want, "{v}");
        }
        let q = parse(
            serde_json::json!({"connection_url": url, "query": "select * from t",
            "replication_method": "incremental", "replication_key": ["id"]}),
        )
        .expect("parses");
        q.validate().expect("valid");
        assert_eq!(q.warnings().len(), 1);
    }
}
