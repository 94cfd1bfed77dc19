//! The query source's configuration (`source.config` of `type: postgres` / `type: mysql`)
//! and its pure validation, the same fields for every SQL database.

use std::marker::PhantomData;

use secrecy::SecretString;
use serde::Deserialize;

use faucet_core::FaucetError;

use super::QueryDialect;
use crate::sql::ReplicationMethod;
use crate::sql::read::{ReadFields, Target};

/// A [`QueryConfig`] that passed [`QueryConfig::validate`], with what validation parsed;
/// made only by `validate`, taken by [`super::QuerySource::from_validated`], so the config
/// is parsed once.
pub struct ValidatedQueryConfig<D: QueryDialect> {
    pub(crate) config: QueryConfig<D>,
    pub(crate) connection: D::Connection,
    pub(crate) target: Target<D::Table>,
}

impl<D: QueryDialect> Clone for ValidatedQueryConfig<D> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            connection: self.connection.clone(),
            target: self.target.clone(),
        }
    }
}

impl<D: QueryDialect> ValidatedQueryConfig<D> {
    /// The configuration as written.
    pub fn config(&self) -> &QueryConfig<D> {
        &self.config
    }
}

impl<D: QueryDialect> std::fmt::Debug for ValidatedQueryConfig<D> {
    /// The config (its URL redacted) and the target; the connection options, which hold the
    /// password, are left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValidatedQueryConfig")
            .field("config", &self.config)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// Configuration of a SQL query source (`D`: the database's dialect).
///
/// ```yaml
/// source:
///   type: postgres            # or mysql
///   config:
///     connection_url: ${env:SOURCE_URL}
///     table: public.orders
///     replication_method: incremental
///     replication_key: [updated_at, id]
/// ```
#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound = "")]
pub struct QueryConfig<D: QueryDialect> {
    /// The database, `postgres://user:password@host:port/database` or
    /// `mysql://user:password@host:port/database` (or `mariadb://`). A secret: never printed
    /// (`Debug` shows `[redacted]`, errors show `user@host:port/database`).
    pub connection_url: SecretString,
    /// The table to read: PostgreSQL `table` or `schema.table` (each part 1 to 63 bytes
    /// without NUL or `.`, matched exactly, case-sensitively); MySQL `table` (in the URL's
    /// database) or `database.table` (each part 1 to 64 characters without NUL or `.`).
    /// Always quoted. Exactly one of `table` and `query` is required.
    #[serde(default)]
    pub table: Option<String>,
    /// A `SELECT` to read instead of a table (no trailing `;`). It is wrapped as a subquery
    /// (`SELECT * FROM (<query>) AS faucet_q ...`), so its output column names must be
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
    /// known to be. Rows whose key has a NULL are not read by an incremental read. MySQL key
    /// columns may be integers, DECIMAL, BIT, YEAR, dates and times, text or binary strings;
    /// not FLOAT/DOUBLE (no exact comparison), ENUM/SET (ordered by index, compared as
    /// text), JSON or spatial types. MySQL text keys compare in the column's collation on
    /// the server, while faucet tells key groups apart by their exact text: a key that is not
    /// unique and holds a case- or accent-insensitive text column can, on a resume from a
    /// page boundary between `a` and `A`, skip rows — end such a key with the primary key.
    #[serde(default)]
    pub replication_key: Vec<String>,
    #[serde(skip)]
    dialect: PhantomData<fn() -> D>,
}

impl<D: QueryDialect> Clone for QueryConfig<D> {
    fn clone(&self) -> Self {
        Self {
            connection_url: self.connection_url.clone(),
            table: self.table.clone(),
            query: self.query.clone(),
            replication_method: self.replication_method,
            replication_key: self.replication_key.clone(),
            dialect: PhantomData,
        }
    }
}

impl<D: QueryDialect> std::fmt::Debug for QueryConfig<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(D::CONFIG_TYPE)
            .field("connection_url", &"[redacted]")
            .field("table", &self.table)
            .field("query", &self.query)
            .field("replication_method", &self.replication_method)
            .field("replication_key", &self.replication_key)
            .finish()
    }
}

impl<D: QueryDialect> QueryConfig<D> {
    /// A config reading `table` with `full_table`.
    pub fn for_table(connection_url: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            connection_url: SecretString::from(connection_url.into()),
            table: Some(table.into()),
            query: None,
            replication_method: ReplicationMethod::FullTable,
            replication_key: Vec::new(),
            dialect: PhantomData,
        }
    }

    /// Checks the config without any I/O, and keeps what checking parsed (the connection,
    /// the table or query) for [`super::QuerySource::from_validated`].
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field relative to this config (`replication_key[1]`;
    /// the CLI puts `pipeline.source.config.` before it).
    pub fn validate(&self) -> Result<ValidatedQueryConfig<D>, FaucetError> {
        let target = self
            .read_fields()
            .validate(D::parse_table, D::validate_column)?;
        let connection = D::parse_connection(&self.connection_url, "connection_url")?;
        Ok(ValidatedQueryConfig {
            config: self.clone(),
            connection,
            target,
        })
    }

    /// Warnings a user should see without connecting (printed by `faucet validate`): an
    /// incremental read of a query, whose key cannot be checked for uniqueness. `check()`
    /// adds the warnings that need the database (see [`super::QuerySource::warnings`]).
    pub fn warnings(&self) -> Vec<String> {
        self.read_fields().warnings()
    }

    /// What the source reads, for people: `table <name>` or `query`.
    pub fn what(&self) -> String {
        match (&self.table, &self.query) {
            (Some(t), _) => format!("table {t}"),
            (None, Some(_)) => "query".to_owned(),
            (None, None) => String::new(),
        }
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

#[cfg(all(test, feature = "postgres", feature = "mysql"))]
mod tests {
    use super::*;
    use crate::mysql::query::Mysql;
    use crate::postgres::query::Postgres;

    /// The field each bad config names, for dialect `D` with URL scheme `scheme`, and what
    /// validation keeps.
    fn strict_and_validated<D: QueryDialect>(scheme: &str, other_scheme: &str) {
        let parse = |v: serde_json::Value| serde_json::from_value::<QueryConfig<D>>(v);
        let ok = parse(serde_json::json!({
            "connection_url": format!("{scheme}://u:secret@h/db"),
            "table": "shop.orders",
            "replication_method": "incremental",
            "replication_key": ["updated_at", "id"]
        }))
        .expect("parses");
        let valid = ok.validate().expect("valid");
        // What validation parsed is kept, for the source to take without parsing again.
        assert!(
            matches!(&valid.target, Target::Table(t) if t.to_string() == "shop.orders"),
            "{valid:?}"
        );
        assert!(!format!("{valid:?}").contains("secret"));
        assert!(!format!("{ok:?}").contains("secret"));
        assert!(format!("{ok:?}").starts_with(D::CONFIG_TYPE));
        assert!(ok.warnings().is_empty());
        let url = format!("{scheme}://h/db");
        assert!(
            parse(serde_json::json!({"connection_url": url, "table": "t", "tabel": 1})).is_err()
        );
        let field = |v: serde_json::Value| match parse(v).expect("parses").validate() {
            Err(FaucetError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
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
                serde_json::json!({"connection_url": "nope", "table": "t"}),
                "connection_url",
            ),
            (
                serde_json::json!({"connection_url": format!("{other_scheme}://h/db"),
                    "table": "t"}),
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

    #[test]
    fn postgres_config_is_strict_and_validated() {
        strict_and_validated::<Postgres>("postgres", "mysql");
    }

    #[test]
    fn mysql_config_is_strict_and_validated() {
        strict_and_validated::<Mysql>("mysql", "postgres");
    }
}
