//! The commit token table of the atomic watermark in PostgreSQL (the protocol, the scope and
//! the messages are the SQL sink engine's, [`crate::sql::sink::token`]):
//!
//! ```sql
//! CREATE TABLE faucet_commit_tokens (
//!   scope        text        PRIMARY KEY,
//!   sequence     bigint      NOT NULL,
//!   bookmark     jsonb       NOT NULL,
//!   committed_at timestamptz NOT NULL DEFAULT now()
//! );
//! ```

use sqlx::postgres::PgConnection;

use faucet_core::{CommitToken, FaucetError};

use super::table::{create_shared, write_err};
use crate::postgres::config::CONNECTOR;
use crate::postgres::ident::TableName;
use crate::sql::sink::token as shared;

/// Creates the token table when missing (runs creating it at once all succeed).
///
/// # Errors
/// [`FaucetError::Write`].
pub(crate) async fn ensure(conn: &mut PgConnection, tokens: &TableName) -> Result<(), FaucetError> {
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {} (scope text PRIMARY KEY, sequence bigint NOT NULL, \
         bookmark jsonb NOT NULL, committed_at timestamptz NOT NULL DEFAULT now())",
        tokens.quoted()
    );
    create_shared(conn, &sql, &format!("the commit token table {tokens}")).await
}

/// Stores `token` under `scope` if its sequence is above the stored one. Run inside the
/// page's transaction.
///
/// # Errors
/// [`FaucetError::Write`] when a token with the same or a higher sequence is already stored
/// (a stale or zombie writer: the caller rolls back), or the statement fails.
pub(crate) async fn advance(
    conn: &mut PgConnection,
    tokens: &TableName,
    scope: &str,
    token: &CommitToken,
) -> Result<(), FaucetError> {
    let sequence = i64::try_from(token.sequence).map_err(|_| {
        FaucetError::write(
            CONNECTOR,
            format!("commit token sequence {} exceeds bigint", token.sequence),
            None,
        )
    })?;
    let bookmark = shared::stored_bookmark(CONNECTOR, &token.bookmark)?;
    let sql = format!(
        "INSERT INTO {} AS tok (scope, sequence, bookmark) VALUES ($1, $2, $3::jsonb) \
         ON CONFLICT (scope) DO UPDATE SET sequence = EXCLUDED.sequence, \
         bookmark = EXCLUDED.bookmark, committed_at = now() \
         WHERE tok.sequence < EXCLUDED.sequence",
        tokens.quoted()
    );
    let done = sqlx::query(&sql)
        .bind(scope)
        .bind(sequence)
        .bind(bookmark)
        .execute(&mut *conn)
        .await
        .map_err(|e| write_err(format!("cannot store the commit token in {tokens}"), e))?;
    if done.rows_affected() == 0 {
        return Err(shared::refused(
            CONNECTOR,
            (tokens, scope),
            token.sequence,
            None,
        ));
    }
    Ok(())
}

/// The token stored under `scope`, if any (also `None` when the table does not exist yet).
///
/// # Errors
/// [`FaucetError::Write`] when it cannot be read or holds something that is not a token.
pub(crate) async fn last(
    conn: &mut PgConnection,
    tokens: &TableName,
    scope: &str,
) -> Result<Option<CommitToken>, FaucetError> {
    let err = |e| write_err(format!("cannot read the commit token from {tokens}"), e);
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(tokens.quoted())
        .fetch_one(&mut *conn)
        .await
        .map_err(err)?;
    if exists.is_none() {
        return Ok(None);
    }
    let sql = format!(
        "SELECT sequence, bookmark::text FROM {} WHERE scope = $1",
        tokens.quoted()
    );
    let row: Option<(i64, String)> = sqlx::query_as(&sql)
        .bind(scope)
        .fetch_optional(&mut *conn)
        .await
        .map_err(err)?;
    let Some((sequence, bookmark)) = row else {
        return Ok(None);
    };
    let sequence = shared::stored_sequence(CONNECTOR, (tokens, scope), sequence)?;
    shared::read_back(CONNECTOR, (tokens, scope), sequence, &bookmark).map(Some)
}

/// Deletes the token stored under `scope` (a token whose target table is gone).
///
/// # Errors
/// [`FaucetError::Write`] when the statement fails.
pub(crate) async fn forget(
    conn: &mut PgConnection,
    tokens: &TableName,
    scope: &str,
) -> Result<(), FaucetError> {
    let sql = format!("DELETE FROM {} WHERE scope = $1", tokens.quoted());
    sqlx::query(&sql)
        .bind(scope)
        .execute(&mut *conn)
        .await
        .map_err(|e| {
            write_err(
                format!("cannot delete the stale commit token in {tokens}"),
                e,
            )
        })?;
    Ok(())
}
