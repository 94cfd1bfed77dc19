//! The `postgres` query source: the SQL query source of [`crate::sql::query`] (a table or a
//! `SELECT`, in full or incrementally by a key tuple) with PostgreSQL as its [`Postgres`]
//! dialect.
//!
//! * One `COPY (SELECT ...) TO STDOUT` per run, in text format: the fastest way out of
//!   PostgreSQL, one snapshot for the whole read, and every value in its text output form,
//!   decoded by the one mapping of `postgres::types` (docs/values.md).
//!   Memory stays bounded by the page size: one decoded page at a time, plus a small raw
//!   prefetch (see `reader`).
//! * `incremental`: `WHERE (k1, k2) > ('v1'::t1, 'v2'::t2) ORDER BY k1, k2`: key values are
//!   the exact text PostgreSQL printed, bound back as literals cast to each column's type.
//! * Progress: the row estimate is `pg_class.reltuples` (as of the table's last VACUUM or
//!   ANALYZE; not known, so not stamped, for a table never analyzed or a query).
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
mod copy_text;
pub(crate) mod plan;
pub(crate) mod reader;

use std::sync::Arc;

use async_trait::async_trait;
use secrecy::SecretString;
use sqlx::Executor as _;
use tokio_util::sync::CancellationToken;

use faucet_core::{FaucetError, PageStream};

pub use crate::sql::ReplicationMethod;
use crate::sql::bookmark::Start;
use crate::sql::extent;
use crate::sql::query::{Described, QueryDialect};

use super::config::CONNECTOR;
use super::connection::PostgresUrl;
use super::ident::TableName;
pub use plan::PgColumn;

/// What a `postgres` read reads: a validated table or a query.
pub(crate) type Target = crate::sql::read::Target<TableName>;

/// PostgreSQL as a [`QueryDialect`]: sqlx sessions, `"` quoting, literals cast to the key
/// column's type, `COPY ... TO STDOUT`.
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

/// Configuration of a [`PostgresQuerySource`] (`source.config` of `type: postgres`).
pub type PostgresQueryConfig = crate::sql::query::QueryConfig<Postgres>;
/// A [`PostgresQueryConfig`] that passed validation.
pub type ValidatedQueryConfig = crate::sql::query::ValidatedQueryConfig<Postgres>;
/// The `postgres` query source.
pub type PostgresQuerySource = crate::sql::query::QuerySource<Postgres>;

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
impl QueryDialect for Postgres {
    const CONNECTOR: &'static str = CONNECTOR;
    const CONFIG_TYPE: &'static str = "PostgresQueryConfig";
    const LEADING_KEY_BOUND: bool = false;
    /// A task copies, an OS thread decodes (`reader::spawn`).
    const READS_IN_TASK: bool = false;
    type Connection = PostgresUrl;
    type Table = TableName;
    type Session = sqlx::PgConnection;
    type Column = PgColumn;

    fn parse_connection(url: &SecretString, field: &str) -> Result<PostgresUrl, FaucetError> {
        PostgresUrl::parse(url, field)
    }

    fn parse_table(text: &str, field: &str) -> Result<TableName, FaucetError> {
        TableName::parse(text, field)
    }

    fn validate_column(name: &str, field: &str) -> Result<(), FaucetError> {
        super::ident::validate_column(name, field)
    }

    fn quote_ident(name: &str) -> String {
        crate::sql::ident::quote_ident(name)
    }

    async fn connect(connection: &PostgresUrl) -> Result<sqlx::PgConnection, FaucetError> {
        connection.open_session(CONNECTOR).await
    }

    async fn describe(
        session: &mut sqlx::PgConnection,
        _connection: &PostgresUrl,
        target: &Target,
    ) -> Result<Described<PgColumn>, FaucetError> {
        plan::describe(session, target).await
    }

    async fn prepare_key(
        session: &mut sqlx::PgConnection,
        columns: &mut [PgColumn],
        indexes: &[usize],
    ) -> Result<(), FaucetError> {
        plan::type_names(session, columns, indexes).await
    }

    fn wrap_select(select: String) -> String {
        format!("COPY ({select}) TO STDOUT")
    }

    async fn row_estimate(
        session: &mut sqlx::PgConnection,
        _connection: &PostgresUrl,
        table: &TableName,
    ) -> Option<u64> {
        row_estimate(session, &table.quoted()).await
    }

    fn read(
        session: sqlx::PgConnection,
        _connection: &PostgresUrl,
        plan: Arc<plan::Plan>,
        start: Start,
        batch_size: usize,
        cancel: CancellationToken,
    ) -> Box<dyn PageStream> {
        Box::new(reader::spawn(session, plan, start, batch_size, cancel))
    }

    async fn probe(
        mut session: sqlx::PgConnection,
        _connection: &PostgresUrl,
        sql: &str,
        label: &str,
    ) -> Result<(), FaucetError> {
        session.execute(sql).await.map_err(|e| {
            FaucetError::read(
                CONNECTOR,
                format!("{label} is not readable"),
                Some(Box::new(e)),
            )
        })?;
        Ok(())
    }
}
