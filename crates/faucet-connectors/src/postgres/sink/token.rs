//! The commit token table of the atomic watermark (DESIGN.md, "commit token"): one row per
//! scope in `faucet_commit_tokens`, beside the target table, written in the same transaction
//! as a page's rows. The stored sequence only moves forward.
//!
//! The scope is the state key *and* the target table ([`scope`]: `orders::eu -> shop.orders`):
//! two pipelines of the same name writing to two tables of one schema each have their own
//! token, so a run never re-anchors at a token another table's pages committed (which would
//! skip, in this table, everything before it). Tokens stored under the bare state key by
//! earlier versions are not read: such a run resumes from its state store's bookmark.
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

/// The token table's name, in the target's schema.
pub(crate) const TOKENS: &str = "faucet_commit_tokens";

/// The token scope of pages under `state_key` into `target`.
pub(crate) fn scope(state_key: &str, target: &TableName) -> String {
    format!("{state_key} -> {target}")
}

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
    let bookmark = serde_json::to_string(&token.bookmark).map_err(|e| {
        FaucetError::write(
            CONNECTOR,
            "cannot serialise the bookmark",
            Some(Box::new(e)),
        )
    })?;
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
        return Err(FaucetError::write(
            CONNECTOR,
            format!(
                "commit token for `{scope}` refused: {tokens} already holds sequence {sequence} \
                 or later (a stale or concurrent writer); the page was rolled back"
            ),
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
    let bookmark = serde_json::from_str(&bookmark).map_err(|e| {
        FaucetError::write(
            CONNECTOR,
            format!("the commit token of `{scope}` in {tokens} is not JSON"),
            Some(Box::new(e)),
        )
    })?;
    let sequence = u64::try_from(sequence).map_err(|_| {
        FaucetError::write(
            CONNECTOR,
            format!("the commit token of `{scope}` in {tokens} has a negative sequence"),
            None,
        )
    })?;
    Ok(Some(CommitToken { sequence, bookmark }))
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
