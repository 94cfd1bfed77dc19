//! The `mysql` query source (MySQL / MariaDB): the SQL query source of
//! [`crate::sql::query`] (a table or a `SELECT`, in full or incrementally by a key tuple)
//! with MySQL as its [`Mysql`] dialect.
//!
//! * One prepared `SELECT` per run, streamed unbuffered in the binary protocol (one row
//!   packet at a time; memory bounded by the page size, see `reader`), every value decoded by
//!   the one mapping of [`crate::mysql::value`] that the binlog reader uses too. InnoDB gives
//!   the statement one consistent snapshot.
//! * `incremental`: `WHERE k1 >= v1 AND (k1, k2) > (v1, v2) ORDER BY k1, k2` (the first
//!   conjunct lets MariaDB use an index on the key); every page's bookmark holds the last key
//!   tuple as exact literal text (`plan::key_text`).
//! * Progress: the row estimate is `information_schema.TABLES.TABLE_ROWS` (an estimate for
//!   InnoDB; not known, so not stamped, for a query).
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

pub(crate) mod plan;
pub(crate) mod reader;

use std::sync::Arc;

use async_trait::async_trait;
use mysql_async::prelude::Queryable as _;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use faucet_core::{FaucetError, PageStream};

pub use crate::sql::ReplicationMethod;
use crate::sql::bookmark::Start;
use crate::sql::query::{Described, QueryDialect};

use crate::mysql::connection::MysqlConnection;
use crate::mysql::table::TableName;
use crate::mysql::value::MysqlColumn;

/// The connector name, used in errors.
pub(crate) const CONNECTOR: &str = "mysql";

/// What a `mysql` read reads: a validated table or a query.
pub(crate) type Target = crate::sql::read::Target<TableName>;

/// MySQL / MariaDB as a [`QueryDialect`]: mysql_async sessions, `` ` `` quoting, typed
/// literals per column kind, a streamed binary-protocol `SELECT`.
#[derive(Debug, Clone, Copy)]
pub struct Mysql;

/// Configuration of a [`MysqlQuerySource`] (`source.config` of `type: mysql`).
pub type MysqlQueryConfig = crate::sql::query::QueryConfig<Mysql>;
/// A [`MysqlQueryConfig`] that passed validation.
pub type ValidatedQueryConfig = crate::sql::query::ValidatedQueryConfig<Mysql>;
/// The `mysql` query source.
pub type MysqlQuerySource = crate::sql::query::QuerySource<Mysql>;

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
impl QueryDialect for Mysql {
    const CONNECTOR: &'static str = CONNECTOR;
    const CONFIG_TYPE: &'static str = "MysqlQueryConfig";
    const LEADING_KEY_BOUND: bool = true;
    /// A task reads the rows into pages (`reader::spawn`).
    const READS_IN_TASK: bool = true;
    type Connection = MysqlConnection;
    type Table = TableName;
    type Session = mysql_async::Conn;
    type Column = MysqlColumn;

    fn parse_connection(url: &SecretString, field: &str) -> Result<MysqlConnection, FaucetError> {
        MysqlConnection::parse(url, field, CONNECTOR)
    }

    fn parse_table(text: &str, field: &str) -> Result<TableName, FaucetError> {
        TableName::parse(text, field)
    }

    fn validate_column(name: &str, field: &str) -> Result<(), FaucetError> {
        crate::mysql::table::validate_column(name, field)
    }

    fn quote_ident(name: &str) -> String {
        crate::mysql::table::quote_ident(name)
    }

    async fn connect(connection: &MysqlConnection) -> Result<mysql_async::Conn, FaucetError> {
        connection.connect().await
    }

    async fn describe(
        session: &mut mysql_async::Conn,
        connection: &MysqlConnection,
        target: &Target,
    ) -> Result<Described<MysqlColumn>, FaucetError> {
        plan::describe(session, connection, target).await
    }

    async fn row_estimate(
        session: &mut mysql_async::Conn,
        connection: &MysqlConnection,
        table: &TableName,
    ) -> Option<u64> {
        row_estimate(session, &table.qualified_in(connection.database())).await
    }

    fn read(
        session: mysql_async::Conn,
        connection: &MysqlConnection,
        plan: Arc<plan::Plan>,
        start: Start,
        batch_size: usize,
        cancel: CancellationToken,
    ) -> Box<dyn PageStream> {
        Box::new(reader::spawn(
            session,
            connection.clone(),
            plan,
            start,
            batch_size,
            cancel,
        ))
    }

    async fn close(session: mysql_async::Conn) {
        let _ = session.disconnect().await;
    }

    async fn probe(
        mut session: mysql_async::Conn,
        connection: &MysqlConnection,
        sql: &str,
        label: &str,
    ) -> Result<(), FaucetError> {
        session
            .query_drop(sql)
            .await
            .map_err(|e| connection.error(&format!("{label} is not readable"), e))?;
        let _ = session.disconnect().await;
        Ok(())
    }
}
