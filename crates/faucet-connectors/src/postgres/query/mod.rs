//! The `postgres` query source: reads a table or a `SELECT`, in full or incrementally by a
//! key tuple, and streams it in pages of typed records.
//!
//! * One `COPY (SELECT ...) TO STDOUT` per run, in text format: the fastest way out of
//!   PostgreSQL, one snapshot for the whole read, and every value in its text output form,
//!   decoded by the one mapping of `postgres::types` (docs/values.md).
//!   Memory stays bounded by the page size: one decoded page at a time, plus a small raw
//!   prefetch (see `reader`).
//! * `incremental`: `WHERE (k1, k2) > ('v1'::t1, 'v2'::t2) ORDER BY k1, k2` — the whole key
//!   tuple is compared, so rows tying on the first column are neither skipped nor repeated
//!   (case 11); every page's bookmark holds the last key tuple, so a crash mid-table resumes
//!   mid-table. Rows with a NULL in the key are not read.
//! * `full_table`: every run reads everything; a table with a primary key is read in key
//!   order with the last key in every page's bookmark (a crash resumes mid-table); a query,
//!   or a table without a primary key, restarts from the beginning after a crash. The last
//!   page's bookmark is `{"full_table":"done"}`.
//! * Progress: a read of a table from its beginning (`full_table`, or an `incremental` first
//!   run) stamps its pages with rows read of `pg_class.reltuples` (an estimate, as of the
//!   table's last VACUUM or ANALYZE; not known, so not stamped, for a table never analyzed or
//!   a query), see `sql/extent.rs`.
//! * Replay guarantee: non-deterministic (the table changes between reads), so
//!   effectively-once needs an upsert sink.
//!
//! ```no_run
//! # async fn demo() -> Result<(), faucet_core::FaucetError> {
//! use faucet_connectors::postgres::{PostgresQueryConfig, PostgresQuerySource};
//! let source = PostgresQuerySource::new(PostgresQueryConfig::for_table(
//!     "postgres://postgres@127.0.0.1:5432/test",
//!     "public.airports",
//! ))?;
//! # let _ = source;
//! # Ok(())
//! # }
//! ```

mod assemble;
pub(crate) mod config;
mod copy_text;
pub(crate) mod plan;
pub(crate) mod reader;

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::Executor as _;

use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

pub use config::{PostgresQueryConfig, ReplicationMethod, ValidatedQueryConfig};

use super::config::CONNECTOR;
use super::connection::PostgresUrl;
use crate::sql::extent::{self, RowEstimate};
use crate::sql::warnings::Warnings;
use config::Target;
use plan::{Plan, Start};

/// The `postgres` query source. Built from a validated [`PostgresQueryConfig`] without I/O;
/// [`Source::open`] and [`Source::check`] connect.
pub struct PostgresQuerySource {
    config: PostgresQueryConfig,
    connection: PostgresUrl,
    target: Target,
    warnings: Warnings,
}

impl std::fmt::Debug for PostgresQuerySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresQuerySource")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PostgresQuerySource {
    /// A source for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`PostgresQueryConfig::validate`].
    pub fn new(config: PostgresQueryConfig) -> Result<Self, FaucetError> {
        Ok(Self::from_validated(config.validate()?))
    }

    /// A source for a config [`PostgresQueryConfig::validate`] accepted (no I/O, nothing
    /// parsed again).
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
    pub fn config(&self) -> &PostgresQueryConfig {
        &self.config
    }

    /// What the user should know about this configuration: the config's own
    /// [`PostgresQueryConfig::warnings`], plus, once [`Source::check`] or [`Source::open`]
    /// has looked at the database, a replication key that is not known unique (no primary
    /// key or unique index within it; the fix: end the key with the primary key) or that
    /// has nullable columns. Each is also logged with `tracing::warn!`.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.list()
    }

    async fn plan(&self, conn: &mut sqlx::PgConnection) -> Result<Plan, FaucetError> {
        let plan = Plan::describe(
            conn,
            &self.target,
            self.config.replication_method,
            &self.config.replication_key,
        )
        .await?;
        self.warnings.add(&plan.warnings);
        Ok(plan)
    }
}

/// The catalog's row estimate of the table `quoted` (`pg_class.reltuples`, as of its last
/// VACUUM or ANALYZE), for the progress of a full read ([`crate::sql::extent`]); `None`
/// when not known: never analyzed (-1), or the catalog could not be read (a progress
/// figure never fails a read).
pub(crate) async fn row_estimate(conn: &mut sqlx::PgConnection, quoted: &str) -> Option<u64> {
    let rows: Result<Option<i64>, _> =
        sqlx::query_scalar("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass($1)")
            .bind(quoted)
            .fetch_optional(&mut *conn)
            .await;
    match rows {
        Ok(rows) => extent::row_estimate(rows),
        Err(e) => {
            tracing::debug!(source = CONNECTOR, table = quoted, error = %e, "no row estimate");
            None
        }
    }
}

#[async_trait]
impl Source for PostgresQuerySource {
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
        let mut conn = self.connection.open_session(CONNECTOR).await?;
        let plan = self.plan(&mut conn).await?;
        let start = plan.start(from.as_ref())?;
        let estimate = match (&self.target, &start) {
            (Target::Table(t), Start::Beginning) => row_estimate(&mut conn, &t.quoted()).await,
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
            Arc::new(plan),
            start,
            options.batch_size.max(1),
            options.cancel,
        );
        Ok(RowEstimate::wrap(Box::new(stream), estimate))
    }

    async fn check(&self) -> Result<(), FaucetError> {
        let mut conn = self.connection.open_session(CONNECTOR).await?;
        let plan = self.plan(&mut conn).await?;
        conn.execute(plan.probe_sql().as_str()).await.map_err(|e| {
            FaucetError::read(
                CONNECTOR,
                format!("{} is not readable", plan.label),
                Some(Box::new(e)),
            )
        })?;
        Ok(())
    }
}
