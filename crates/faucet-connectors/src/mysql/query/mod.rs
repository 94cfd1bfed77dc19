//! The `mysql` query source (MySQL / MariaDB): reads a table or a `SELECT`, in full or
//! incrementally by a key tuple, and streams it in pages of typed records — the behaviour of
//! the `postgres` query source, on MySQL's terms.
//!
//! * One prepared `SELECT` per run, streamed unbuffered in the binary protocol (one row
//!   packet at a time; memory bounded by the page size, see `reader`), every value decoded by
//!   the one mapping of [`crate::mysql::value`] that the binlog reader uses too.
//! * `incremental`: `WHERE k1 >= v1 AND (k1, k2) > (v1, v2) ORDER BY k1, k2` — the whole key
//!   tuple is compared, so rows tying on the first column are neither skipped nor repeated;
//!   every page's bookmark holds the last key tuple as exact literal text, so a crash
//!   mid-table resumes mid-table. Rows with a NULL in the key are not read.
//! * `full_table`: every run reads everything; a table with a primary key is read in key
//!   order with the last key in every page's bookmark (a crash resumes mid-table); a query,
//!   or a table without a primary key, restarts from the beginning after a crash. The last
//!   page's bookmark is `{"full_table":"done"}`.
//! * Replay guarantee: non-deterministic (the table changes between reads), so
//!   effectively-once needs an upsert sink.
//! * Progress: a read of a table from its beginning (`full_table`, or an `incremental` first
//!   run) stamps its pages with rows read of `information_schema.TABLES.TABLE_ROWS` (an
//!   estimate for InnoDB; not known, so not stamped, for a query), see
//!   `sql/extent.rs`.
//! * Each run reads in one statement; InnoDB gives it one consistent snapshot.
//!
//! ```no_run
//! # async fn demo() -> Result<(), faucet_core::FaucetError> {
//! use faucet_connectors::mysql::{MysqlQueryConfig, MysqlQuerySource};
//! let source = MysqlQuerySource::new(MysqlQueryConfig::for_table(
//!     "mysql://root@127.0.0.1:3307/test",
//!     "test.orders",
//! ))?;
//! # let _ = source;
//! # Ok(())
//! # }
//! ```

pub(crate) mod config;
pub(crate) mod plan;
pub(crate) mod reader;

use std::sync::Arc;

use async_trait::async_trait;
use mysql_async::prelude::Queryable as _;

use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

pub use config::{MysqlQueryConfig, ReplicationMethod, ValidatedQueryConfig};

use crate::mysql::connection::MysqlConnection;
use crate::mysql::table::TableName;
use crate::sql::extent::RowEstimate;
use crate::sql::warnings::Warnings;
use config::{CONNECTOR, Target};
use plan::{Plan, Start};

/// The `mysql` query source. Built from a validated [`MysqlQueryConfig`] without I/O;
/// [`Source::open`] and [`Source::check`] connect.
pub struct MysqlQuerySource {
    config: MysqlQueryConfig,
    connection: MysqlConnection,
    target: Target,
    warnings: Warnings,
}

impl std::fmt::Debug for MysqlQuerySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlQuerySource")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl MysqlQuerySource {
    /// A source for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`MysqlQueryConfig::validate`].
    pub fn new(config: MysqlQueryConfig) -> Result<Self, FaucetError> {
        Ok(Self::from_validated(config.validate()?))
    }

    /// A source for a config [`MysqlQueryConfig::validate`] accepted (no I/O, nothing parsed
    /// again).
    pub fn from_validated(validated: ValidatedQueryConfig) -> Self {
        let ValidatedQueryConfig {
            config,
            connection,
            target,
        } = validated;
        let warnings = Warnings::from_config(CONNECTOR, config.warnings());
        Self {
            config,
            connection,
            target,
            warnings,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MysqlQueryConfig {
        &self.config
    }

    /// What the user should know about this configuration: the config's own
    /// [`MysqlQueryConfig::warnings`], plus, once [`Source::check`] or [`Source::open`] has
    /// looked at the database, a replication key that is not known unique (no primary key
    /// or unique index within it) or that has nullable columns. Each is also logged.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.list()
    }

    async fn plan(&self, conn: &mut mysql_async::Conn) -> Result<Plan, FaucetError> {
        let plan = Plan::describe(
            conn,
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

/// The catalog's row estimate of `table` (`information_schema.TABLES.TABLE_ROWS`: InnoDB's
/// sampled estimate, exact for MyISAM), for the progress of a full read
/// ([`crate::sql::extent`]); `None` when not known (a view, or the catalog could not be
/// read: a progress figure never fails a read).
pub(crate) async fn row_estimate(conn: &mut mysql_async::Conn, table: &TableName) -> Option<u64> {
    let db = table.database.clone().unwrap_or_default();
    let rows: Result<Option<Option<u64>>, _> = conn
        .exec_first(
            "SELECT TABLE_ROWS FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (db, table.table.clone()),
        )
        .await;
    match rows {
        Ok(rows) => rows.flatten(),
        Err(e) => {
            tracing::debug!(source = CONNECTOR, %table, error = %e, "no row estimate");
            None
        }
    }
}

#[async_trait]
impl Source for MysqlQuerySource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::NonDeterministic
    }

    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let mut conn = self.connection.connect().await?;
        let plan = self.plan(&mut conn).await?;
        let start = plan.start(from.as_ref())?;
        let estimate = match (&self.target, &start) {
            (Target::Table(t), Start::Beginning) => {
                row_estimate(&mut conn, &t.qualified_in(self.connection.database())).await
            }
            _ => None,
        };
        tracing::info!(
            source = CONNECTOR,
            target = %plan.label,
            method = ?self.config.replication_method,
            start = ?start,
            estimated_rows = ?estimate,
            "opening read"
        );
        let stream = reader::spawn(
            conn,
            self.connection.clone(),
            Arc::new(plan),
            start,
            options.batch_size.max(1),
            options.cancel,
        );
        Ok(RowEstimate::wrap(Box::new(stream), estimate))
    }

    async fn check(&self) -> Result<(), FaucetError> {
        let mut conn = self.connection.connect().await?;
        let plan = self.plan(&mut conn).await?;
        conn.query_drop(plan.probe_sql()).await.map_err(|e| {
            self.connection
                .error(&format!("{} is not readable", plan.label), e)
        })?;
        let _ = conn.disconnect().await;
        Ok(())
    }
}
