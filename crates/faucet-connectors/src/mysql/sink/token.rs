//! The commit token table of the atomic watermark in MySQL / MariaDB (the protocol, the
//! scope and the messages are the SQL sink engine's, [`crate::sql::sink::token`]):
//!
//! ```sql
//! CREATE TABLE faucet_commit_tokens (
//!   scope        VARCHAR(512)    NOT NULL PRIMARY KEY,
//!   sequence     BIGINT UNSIGNED NOT NULL,
//!   bookmark     LONGTEXT        NOT NULL,   -- the bookmark's JSON text, exactly
//!   committed_at DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
//! ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
//! ```
//!
//! The table is created outside any page's transaction (DDL commits implicitly in MySQL).

use mysql_async::Conn;
use mysql_async::prelude::Queryable as _;

use faucet_core::{CommitToken, FaucetError};

use super::config::CONNECTOR;
use super::statement::classify;
use crate::mysql::table::TableName;
use crate::sql::sink::token as shared;

/// A table named `table` in `target`'s database.
pub(crate) fn sibling(target: &TableName, table: &str) -> TableName {
    TableName {
        database: target.database.clone(),
        table: table.to_owned(),
    }
}

/// Creates the token table when missing (runs creating it at once all succeed).
///
/// # Errors
/// [`FaucetError::Write`].
pub(crate) async fn ensure(conn: &mut Conn, tokens: &TableName) -> Result<(), FaucetError> {
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {} (scope VARCHAR(512) NOT NULL PRIMARY KEY, \
         sequence BIGINT UNSIGNED NOT NULL, bookmark LONGTEXT NOT NULL, \
         committed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) \
         ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        tokens.quoted()
    );
    create_shared(conn, sql, "creating the commit token table", tokens).await
}

/// Runs `create` (a `CREATE TABLE IF NOT EXISTS` of a table runs share: the commit token and
/// fence tables) outside any transaction; error 1050 (ER_TABLE_EXISTS_ERROR: another run
/// created it at the same moment) counts as created.
///
/// # Errors
/// [`FaucetError::Write`] naming `what` and `table`.
pub(crate) async fn create_shared(
    conn: &mut Conn,
    create: String,
    what: &str,
    table: &TableName,
) -> Result<(), FaucetError> {
    match conn.query_drop(create).await {
        Err(mysql_async::Error::Server(s)) if s.code == 1050 => {
            tracing::debug!(%table, "created at the same moment by another run");
            Ok(())
        }
        done => done.map_err(|e| classify(e, what, table)),
    }
}

/// Stores `token` under `scope` if its sequence is above the stored one. Run inside the
/// page's transaction: the stored row is read with `FOR UPDATE`, so a concurrent writer of
/// the same scope waits for this page.
///
/// # Errors
/// [`FaucetError::Write`] when a token with the same or a higher sequence is already stored
/// (a stale or zombie writer: the caller rolls back), or a statement fails.
pub(crate) async fn advance(
    conn: &mut Conn,
    tokens: &TableName,
    scope: &str,
    token: &CommitToken,
) -> Result<(), FaucetError> {
    let bookmark = shared::stored_bookmark(CONNECTOR, &token.bookmark)?;
    let quoted = tokens.quoted();
    let stored: Option<u64> = conn
        .exec_first(
            format!("SELECT sequence FROM {quoted} WHERE scope = ? FOR UPDATE"),
            (scope,),
        )
        .await
        .map_err(|e| classify(e, "reading the commit token", tokens))?;
    if let Some(stored) = stored.filter(|s| *s >= token.sequence) {
        return Err(shared::refused(
            CONNECTOR,
            (tokens, scope),
            token.sequence,
            Some(stored),
        ));
    }
    conn.exec_drop(
        format!(
            "INSERT INTO {quoted} (scope, sequence, bookmark) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE sequence = ?, bookmark = ?, \
             committed_at = CURRENT_TIMESTAMP(6)"
        ),
        (scope, token.sequence, &bookmark, token.sequence, &bookmark),
    )
    .await
    .map_err(|e| classify(e, "storing the commit token", tokens))
}

/// Whether `table` exists.
pub(crate) async fn exists(
    conn: &mut Conn,
    table: &TableName,
    database: &str,
) -> Result<bool, FaucetError> {
    let db = table.database.as_deref().unwrap_or(database);
    let n: Option<u64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (db, &table.table),
        )
        .await
        .map_err(|e| classify(e, "looking up", table))?;
    Ok(n.unwrap_or(0) > 0)
}

/// The token stored under `scope`, if any (also `None` when the table does not exist yet).
///
/// # Errors
/// [`FaucetError::Write`] when it cannot be read or holds something that is not a token.
pub(crate) async fn last(
    conn: &mut Conn,
    tokens: &TableName,
    database: &str,
    scope: &str,
) -> Result<Option<CommitToken>, FaucetError> {
    if !exists(conn, tokens, database).await? {
        return Ok(None);
    }
    let row: Option<(u64, String)> = conn
        .exec_first(
            format!(
                "SELECT sequence, bookmark FROM {} WHERE scope = ?",
                tokens.quoted()
            ),
            (scope,),
        )
        .await
        .map_err(|e| classify(e, "reading the commit token", tokens))?;
    let Some((sequence, bookmark)) = row else {
        return Ok(None);
    };
    shared::read_back(CONNECTOR, (tokens, scope), sequence, &bookmark).map(Some)
}

/// Deletes the token stored under `scope` (a token whose target table is gone).
///
/// # Errors
/// [`FaucetError::Write`] when the statement fails.
pub(crate) async fn forget(
    conn: &mut Conn,
    tokens: &TableName,
    scope: &str,
) -> Result<(), FaucetError> {
    conn.exec_drop(
        format!("DELETE FROM {} WHERE scope = ?", tokens.quoted()),
        (scope,),
    )
    .await
    .map_err(|e| classify(e, "deleting the stale commit token", tokens))
}
