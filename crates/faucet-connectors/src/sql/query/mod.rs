//! The SQL query source, written once: reads a table or a `SELECT`, in full or incrementally
//! by a key tuple, and streams it in pages of typed records. Each database is a
//! [`QueryDialect`]: how it connects, describes a read's columns and keys, writes a key
//! literal, and streams rows (`postgres`: `COPY ... TO STDOUT` in text; `mysql`: one
//! prepared `SELECT` in the binary protocol); everything else is here.
//!
//! * `incremental`: `WHERE (k1, k2) > (v1, v2) ORDER BY k1, k2` — the whole key tuple is
//!   compared, so rows tying on the first column are neither skipped nor repeated; every
//!   page's bookmark holds the last key tuple, so a crash mid-table resumes mid-table. Rows
//!   with a NULL in the key are not read.
//! * `full_table`: every run reads everything; a table with a primary key is read in key
//!   order with the last key in every page's bookmark (a crash resumes mid-table); a query,
//!   or a table without a primary key, restarts from the beginning after a crash. The last
//!   page's bookmark is `{"full_table":"done"}`.
//! * Progress: a read of a table from its beginning (`full_table`, or an `incremental` first
//!   run) stamps its pages with rows read of the catalog's row estimate, see
//!   `sql/extent.rs`.
//! * Replay guarantee: non-deterministic (the table changes between reads), so
//!   effectively-once needs an upsert sink.
//!
//! Parts: the configuration ([`config`]), the worked-out read ([`plan`]) and the cutting of
//! decoded rows into pages (`rows`).

pub mod config;
pub mod plan;
pub(crate) mod rows;

use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

pub use config::{QueryConfig, ValidatedQueryConfig};
pub use plan::{Described, KeyCatalog, Plan, QueryColumn};

use crate::sql::bookmark::Start;
use crate::sql::extent::RowEstimate;
use crate::sql::read::Target;
use crate::sql::warnings::Warnings;

/// What differs between SQL databases for the query source: the connection, the names, a
/// session, the columns and their key literals, and the read itself. Implemented by
/// `postgres::query::Postgres` and `mysql::query::Mysql`.
#[async_trait]
pub trait QueryDialect: Send + Sync + Sized + 'static {
    /// The connector name (`postgres`, `mysql`), used in errors and logs.
    const CONNECTOR: &'static str;
    /// The config type's name, for `Debug` (`PostgresQueryConfig`).
    const CONFIG_TYPE: &'static str;
    /// Whether a resumed read adds `k1 >= v1` before the tuple comparison (MariaDB uses an
    /// index on the key for it, which it does not for a row comparison alone).
    const LEADING_KEY_BOUND: bool;
    /// Whether [`QueryDialect::read`] reads and decodes in a tokio task of its own
    /// ([`Source::reads_in_task`]): MySQL's reader task; PostgreSQL decodes on an OS
    /// thread of its own.
    const READS_IN_TASK: bool;
    /// The parsed connection URL.
    type Connection: Clone + Send + Sync + 'static;
    /// A validated table name (`schema.table`, `database.table`).
    type Table: Clone + std::fmt::Debug + std::fmt::Display + Send + Sync + 'static;
    /// One session on the server.
    type Session: Send + 'static;
    /// One output column of a read.
    type Column: QueryColumn;

    /// Parses `connection_url` (named `field` in errors), without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming `field`.
    fn parse_connection(url: &SecretString, field: &str) -> Result<Self::Connection, FaucetError>;

    /// Parses a table name (named `field` in errors), without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming `field`.
    fn parse_table(text: &str, field: &str) -> Result<Self::Table, FaucetError>;

    /// Checks a key column name (named `field` in errors), without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming `field`.
    fn validate_column(name: &str, field: &str) -> Result<(), FaucetError>;

    /// The identifier `name`, quoted.
    fn quote_ident(name: &str) -> String;

    /// Opens a session set up for reading.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when the server cannot be reached or refuses the login.
    async fn connect(connection: &Self::Connection) -> Result<Self::Session, FaucetError>;

    /// Describes the read of `target`: its `FROM` text, its label, its columns, and for a
    /// table what the catalog says of its keys.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the table is missing or the target cannot be described.
    async fn describe(
        session: &mut Self::Session,
        connection: &Self::Connection,
        target: &Target<Self::Table>,
    ) -> Result<Described<Self::Column>, FaucetError>;

    /// Completes the key columns at `indexes` once the ordering key is chosen (PostgreSQL
    /// looks up their type names, to cast bookmark literals); nothing by default.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the catalog cannot be read.
    async fn prepare_key(
        session: &mut Self::Session,
        columns: &mut [Self::Column],
        indexes: &[usize],
    ) -> Result<(), FaucetError> {
        let _ = (session, columns, indexes);
        Ok(())
    }

    /// The statement that streams `select` (PostgreSQL: `COPY (select) TO STDOUT`).
    fn wrap_select(select: String) -> String {
        select
    }

    /// The catalog's row estimate of `table`; `None` when not known (a progress figure never
    /// fails a read).
    async fn row_estimate(
        session: &mut Self::Session,
        connection: &Self::Connection,
        table: &Self::Table,
    ) -> Option<u64>;

    /// Starts streaming `plan` from `start` on `session`, in pages of `batch_size` rows.
    fn read(
        session: Self::Session,
        connection: &Self::Connection,
        plan: Arc<Plan<Self>>,
        start: Start,
        batch_size: usize,
        cancel: CancellationToken,
    ) -> Box<dyn PageStream>;

    /// Ends `session` (politely, where the protocol has a goodbye); dropping it by default.
    async fn close(session: Self::Session) {
        drop(session);
    }

    /// Runs `sql` (the probe `SELECT ... LIMIT 0`) and ends the session.
    ///
    /// # Errors
    /// [`FaucetError::Read`] saying `label` is not readable.
    async fn probe(
        session: Self::Session,
        connection: &Self::Connection,
        sql: &str,
        label: &str,
    ) -> Result<(), FaucetError>;
}

/// The query source of dialect `D` (`PostgresQuerySource`, `MysqlQuerySource`). Built from a
/// validated [`QueryConfig`] without I/O; [`Source::open`] and [`Source::check`] connect.
pub struct QuerySource<D: QueryDialect> {
    config: QueryConfig<D>,
    connection: D::Connection,
    target: Target<D::Table>,
    warnings: Warnings,
    dialect: PhantomData<fn() -> D>,
}

impl<D: QueryDialect> std::fmt::Debug for QuerySource<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuerySource")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<D: QueryDialect> QuerySource<D> {
    /// A source for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`QueryConfig::validate`].
    pub fn new(config: QueryConfig<D>) -> Result<Self, FaucetError> {
        Ok(Self::from_validated(config.validate()?))
    }

    /// A source for a config [`QueryConfig::validate`] accepted (no I/O, nothing parsed
    /// again).
    pub fn from_validated(validated: ValidatedQueryConfig<D>) -> Self {
        let ValidatedQueryConfig {
            config,
            connection,
            target,
        } = validated;
        let warnings = Warnings::from_config(D::CONNECTOR, config.warnings());
        Self {
            config,
            connection,
            target,
            warnings,
            dialect: PhantomData,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &QueryConfig<D> {
        &self.config
    }

    /// What the user should know about this configuration: the config's own
    /// [`QueryConfig::warnings`], plus, once [`Source::check`] or [`Source::open`] has
    /// looked at the database, a replication key that is not known unique (no primary key
    /// or unique index within it; the fix: end the key with the primary key) or that has
    /// nullable columns. Each is also logged with `tracing::warn!`.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.list()
    }

    async fn plan(&self, session: &mut D::Session) -> Result<Plan<D>, FaucetError> {
        let plan = Plan::describe(
            session,
            &self.connection,
            &self.target,
            self.config.replication_method,
            &self.config.replication_key,
        )
        .await?;
        self.warnings.add(&plan.warnings);
        Ok(plan)
    }
}

#[async_trait]
impl<D: QueryDialect> Source for QuerySource<D> {
    fn connector(&self) -> &str {
        D::CONNECTOR
    }

    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::NonDeterministic
    }

    fn reads_in_task(&self) -> bool {
        D::READS_IN_TASK
    }

    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let mut session = D::connect(&self.connection).await?;
        let plan = self.plan(&mut session).await?;
        let start = plan.start(from.as_ref())?;
        let estimate = match (&self.target, &start) {
            (Target::Table(t), Start::Beginning) => {
                D::row_estimate(&mut session, &self.connection, t).await
            }
            _ => None,
        };
        tracing::info!(
            source = D::CONNECTOR,
            target = %plan.label,
            method = ?self.config.replication_method,
            start = ?start,
            estimated_rows = ?estimate,
            "opening read"
        );
        let stream = D::read(
            session,
            &self.connection,
            Arc::new(plan),
            start,
            options.batch_size.max(1),
            options.cancel,
        );
        Ok(RowEstimate::wrap(stream, estimate))
    }

    async fn check(&self) -> Result<(), FaucetError> {
        let mut session = D::connect(&self.connection).await?;
        let plan = self.plan(&mut session).await?;
        D::probe(session, &self.connection, &plan.probe_sql(), &plan.label).await
    }
}
