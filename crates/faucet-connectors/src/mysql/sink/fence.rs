//! The writer fence in MySQL / MariaDB (the protocol is the SQL sink engine's,
//! [`crate::sql::sink::fence`]): one row per scope in `faucet_fences`, in the target's
//! database:
//!
//! ```sql
//! CREATE TABLE faucet_fences (
//!   scope     VARCHAR(512)    NOT NULL PRIMARY KEY,
//!   fence     BIGINT UNSIGNED NOT NULL,
//!   fenced_at DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
//! ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
//! ```
//!
//! Every page's transaction starts by raising the row to its writer's fence
//! (`INSERT … ON DUPLICATE KEY UPDATE fence = GREATEST(fence, ?)`, which locks the row until
//! the page commits) and reading it back: a larger fence rolls the page back with
//! `LeaseError::Fenced`. A newer writer's first page waits for an older writer's page in
//! flight and then supersedes it; an older writer that wakes up later finds the larger
//! fence and writes nothing.

use std::time::Duration;

use mysql_async::Conn;
use mysql_async::prelude::Queryable as _;

use faucet_core::FaucetError;

use super::config::CONNECTOR;
use super::statement::classify;
use crate::mysql::table::TableName;
use crate::sql::sink::fence::{WriterFence, fenced};

/// Creates the fence table when missing (outside any page transaction: DDL).
///
/// # Errors
/// [`FaucetError::Write`].
pub(crate) async fn ensure(conn: &mut Conn, fences: &TableName) -> Result<(), FaucetError> {
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {} (scope VARCHAR(512) NOT NULL PRIMARY KEY, \
         fence BIGINT UNSIGNED NOT NULL, \
         fenced_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) \
         ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        fences.quoted()
    );
    super::token::create_shared(conn, sql, "creating the fence table", fences).await
}

/// On MariaDB, sets the session's `idle_transaction_timeout` to `ttl` (at least 1 s): the
/// server then ends a session whose page transaction its writer left idle for longer than its
/// lease, releasing the fence row and the rows it locked. MySQL has no such setting (the
/// statement fails there and is skipped; a stalled writer holds its locks until
/// `innodb_lock_wait_timeout` makes the next writer fail and retry).
///
/// # Errors
/// [`FaucetError::Write`] when the session is lost.
pub(crate) async fn abort_stalled_pages_after(
    conn: &mut Conn,
    ttl: Duration,
    target: &TableName,
) -> Result<(), FaucetError> {
    let secs = ttl.as_secs().clamp(1, 31_536_000);
    match conn
        .query_drop(format!("SET SESSION idle_transaction_timeout = {secs}"))
        .await
    {
        Ok(()) => Ok(()),
        Err(mysql_async::Error::Server(s)) => {
            tracing::debug!(
                code = s.code,
                "no idle_transaction_timeout on this server (MySQL)"
            );
            Ok(())
        }
        Err(e) => Err(classify(e, "setting idle_transaction_timeout", target)),
    }
}

/// Sets the scope's fence to `writer.fence`, whatever it held (a take-over after the state
/// store's fences were reset; see `SinkWriter::fence`).
///
/// # Errors
/// [`FaucetError::Write`].
pub(crate) async fn set(
    conn: &mut Conn,
    fences: &TableName,
    writer: &WriterFence,
) -> Result<(), FaucetError> {
    conn.exec_drop(
        format!(
            "INSERT INTO {} (scope, fence) VALUES (?, ?) ON DUPLICATE KEY UPDATE fence = ?, \
             fenced_at = CURRENT_TIMESTAMP(6)",
            fences.quoted()
        ),
        (&writer.scope, writer.fence, writer.fence),
    )
    .await
    .map_err(|e| classify(e, "setting the writer fence", fences))
}

/// Raises the scope's fence to `writer.fence` (inside each page's transaction, and once when
/// the writer is given its fence), or refuses.
///
/// # Errors
/// `LeaseError::Fenced` when the table holds a larger fence (the caller rolls back);
/// [`FaucetError::Write`] when a statement fails.
pub(crate) async fn check(
    conn: &mut Conn,
    fences: &TableName,
    target: &TableName,
    writer: &WriterFence,
) -> Result<(), FaucetError> {
    let quoted = fences.quoted();
    conn.exec_drop(
        format!(
            "INSERT INTO {quoted} (scope, fence) VALUES (?, ?) ON DUPLICATE KEY UPDATE \
             fenced_at = IF(fence <= ?, CURRENT_TIMESTAMP(6), fenced_at), \
             fence = GREATEST(fence, ?)"
        ),
        (&writer.scope, writer.fence, writer.fence, writer.fence),
    )
    .await
    .map_err(|e| classify(e, "checking the writer fence", fences))?;
    let stored: Option<u64> = conn
        .exec_first(
            format!("SELECT fence FROM {quoted} WHERE scope = ?"),
            (&writer.scope,),
        )
        .await
        .map_err(|e| classify(e, "checking the writer fence", fences))?;
    match stored {
        Some(newer) if newer > writer.fence => Err(fenced(writer, newer, CONNECTOR, target)),
        _ => Ok(()),
    }
}
