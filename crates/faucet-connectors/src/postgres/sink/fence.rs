//! The writer fence in PostgreSQL (the protocol is the SQL sink engine's,
//! [`crate::sql::sink::fence`]): one row per scope in `faucet_fences`, beside the target
//! table, holding the largest lease fence that has written a page:
//!
//! ```sql
//! CREATE TABLE faucet_fences (
//!   scope     text        PRIMARY KEY,
//!   fence     bigint      NOT NULL,
//!   fenced_at timestamptz NOT NULL DEFAULT now()
//! );
//! ```
//!
//! Every page's transaction starts by locking the row `FOR SHARE` and reading it (sent with
//! the `BEGIN`, one round trip: [`begin_checked`]): the writer's own fence (the writer
//! raised it when it was given its fence) goes on; a larger one rolls the page back with
//! `LeaseError::Fenced`; a smaller or missing one is raised to the writer's (an `UPDATE`'s
//! lock). The row stays locked until the page commits, so a
//! newer writer's raise waits for an older writer's page in flight and then supersedes it;
//! an older writer that wakes up later finds the larger fence and writes nothing. The shared
//! lock lets the writer's second session (`second_session`) hold the row beside the page's.
//! Append and upsert alike; with the atomic watermark the token's forward-only sequence is a
//! second guard.
//!
//! A writer that stalled *inside* a page's transaction (after the check, before `COMMIT`)
//! holds the fence row until the server ends its session for idling longer than the lease
//! ttl (`idle_in_transaction_session_timeout`, SQLSTATE 25P03); the newer writer then goes
//! on. When the stalled writer wakes, its next statement gets that error: the page was rolled
//! back by the server. [`explain_idle_abort`] then reads the fence on a fresh session and
//! reports `LeaseError::Fenced` when a newer writer has written since, as for a page the
//! check refused.

use sqlx::postgres::PgConnection;
use sqlx::{Executor as _, Row as _};

use faucet_core::FaucetError;

use super::table::{create_shared, write_err};
use crate::postgres::config::CONNECTOR;
use crate::postgres::connection::PostgresUrl;
use crate::postgres::ident::{TableName, quote_literal};
use crate::sql::sink::fence::{WriterFence, fenced};

/// Creates the fence table when missing (outside any page transaction: DDL; runs creating
/// it at once all succeed).
///
/// # Errors
/// [`FaucetError::Write`].
pub(crate) async fn ensure(conn: &mut PgConnection, fences: &TableName) -> Result<(), FaucetError> {
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {} (scope text PRIMARY KEY, fence bigint NOT NULL, \
         fenced_at timestamptz NOT NULL DEFAULT now())",
        fences.quoted()
    );
    create_shared(conn, &sql, &format!("the fence table {fences}")).await
}

/// Sets the session's `idle_in_transaction_session_timeout` to `ttl` (at least 1 s): the
/// server then ends a session whose page transaction its writer left idle for longer than
/// its lease, releasing the fence row and the rows it locked.
///
/// # Errors
/// [`FaucetError::Write`].
pub(crate) async fn abort_stalled_pages_after(
    conn: &mut PgConnection,
    ttl: std::time::Duration,
) -> Result<(), FaucetError> {
    let ms = ttl.as_millis().clamp(1_000, i32::MAX as u128);
    conn.execute(format!("SET idle_in_transaction_session_timeout = {ms}").as_str())
        .await
        .map_err(|e| write_err("cannot set idle_in_transaction_session_timeout".into(), e))?;
    Ok(())
}

/// Sets the scope's fence to `writer.fence`, whatever it held (a take-over after the state
/// store's fences were reset; see `SinkWriter::fence`).
///
/// # Errors
/// [`FaucetError::Write`].
pub(crate) async fn set(
    conn: &mut PgConnection,
    fences: &TableName,
    writer: &WriterFence,
) -> Result<(), FaucetError> {
    let fence = bigint(writer.fence)?;
    let sql = format!(
        "INSERT INTO {} (scope, fence) VALUES ($1, $2) ON CONFLICT (scope) DO UPDATE \
         SET fence = EXCLUDED.fence, fenced_at = now()",
        fences.quoted()
    );
    sqlx::query(&sql)
        .bind(&writer.scope)
        .bind(fence)
        .execute(&mut *conn)
        .await
        .map_err(|e| write_err(format!("cannot set the writer fence in {fences}"), e))?;
    Ok(())
}

fn bigint(fence: u64) -> Result<i64, FaucetError> {
    i64::try_from(fence).map_err(|_| {
        FaucetError::write(
            CONNECTOR,
            format!("lease fence {fence} exceeds bigint"),
            None,
        )
    })
}

/// The statement that reads the fence of the scope `scope` (an SQL expression: `$1`, or a
/// literal) under `lock`: [`read`]'s, and the second statement of [`begin_checked`].
fn select(fences: &TableName, scope: &str, lock: RowLock) -> String {
    let lock = match lock {
        RowLock::None => "",
        RowLock::Share => " FOR SHARE",
        RowLock::ShareNoWait => " FOR SHARE NOWAIT",
    };
    format!(
        "SELECT fence FROM {} WHERE scope = {scope}{lock}",
        fences.quoted()
    )
}

/// How [`read`] locks the fence row it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowLock {
    /// No lock: the fence as last committed.
    None,
    /// `FOR SHARE` until the transaction ends, waiting for a raise in flight.
    Share,
    /// `FOR SHARE NOWAIT`: fails (55P03) instead of waiting for a raise in flight.
    ShareNoWait,
}

/// The fence of `scope` in `fences` (`None`: no row), read under `lock`: the check when a
/// writer is given its fence, the second session's check, the explanation of a page the
/// server ended. A page's own check reads the row with its `BEGIN` ([`begin_checked`]: the
/// same statement, [`select`], the scope as a literal in one simple query).
///
/// # Errors
/// The server's error.
pub(crate) async fn read(
    conn: &mut PgConnection,
    fences: &TableName,
    scope: &str,
    lock: RowLock,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(&select(fences, "$1", lock))
        .bind(scope)
        .fetch_optional(&mut *conn)
        .await
}

/// `writer`'s page refused: the row holds `newer` ([`fenced`]).
fn refused(writer: &WriterFence, newer: i64, target: &TableName) -> FaucetError {
    fenced(
        writer,
        u64::try_from(newer).unwrap_or_default(),
        CONNECTOR,
        target,
    )
}

/// Checks that the scope's fence is `writer.fence`, locking the row `FOR SHARE` until the
/// transaction ends (inside each page's transaction, and once when the writer is given its
/// fence), or raises it to `writer.fence` when it is smaller or missing, or refuses.
///
/// # Errors
/// `LeaseError::Fenced` when the table holds a larger fence (the caller rolls back);
/// [`FaucetError::Write`] when a statement fails.
pub(crate) async fn check(
    conn: &mut PgConnection,
    fences: &TableName,
    target: &TableName,
    writer: &WriterFence,
) -> Result<(), FaucetError> {
    let stored = read(conn, fences, &writer.scope, RowLock::Share)
        .await
        .map_err(|e| check_err(fences, e))?;
    settle(conn, fences, target, writer, stored).await
}

/// Starts a page's transaction and reads the fence row `FOR SHARE` in it, in one round trip
/// (one simple query: `BEGIN; SELECT … FOR SHARE`, the scope as a literal), then goes on as
/// [`check`] does. The page's check, the first statements of its transaction.
///
/// # Errors
/// As [`check`]; a failed `BEGIN` as [`super::write::classify`] names it. The caller rolls
/// back (the transaction may have begun).
pub(crate) async fn begin_checked(
    conn: &mut PgConnection,
    fences: &TableName,
    target: &TableName,
    writer: &WriterFence,
) -> Result<(), FaucetError> {
    let sql = format!(
        "BEGIN; {}",
        select(fences, &quote_literal(&writer.scope), RowLock::Share)
    );
    let rows = conn
        .fetch_all(sql.as_str())
        .await
        .map_err(|e| super::write::classify(e, "BEGIN and the writer fence check", target, None))?;
    let stored = match rows.first() {
        Some(row) => Some(row.try_get::<i64, _>(0).map_err(|e| check_err(fences, e))?),
        None => None,
    };
    settle(conn, fences, target, writer, stored).await
}

fn check_err(fences: &TableName, e: sqlx::Error) -> FaucetError {
    write_err(format!("cannot check the writer fence in {fences}"), e)
}

/// The check after the fence row was read (`stored`, `None`: no row) under a shared lock:
/// the writer's own fence goes on, a larger one refuses, a smaller or missing one is raised.
async fn settle(
    conn: &mut PgConnection,
    fences: &TableName,
    target: &TableName,
    writer: &WriterFence,
    stored: Option<i64>,
) -> Result<(), FaucetError> {
    let fence = bigint(writer.fence)?;
    let err = |e| check_err(fences, e);
    // The common case, one read that writes nothing: the row holds this writer's fence.
    // The shared lock lets the writer's second session hold the row too
    // (`second_session`), and makes a newer writer's raise wait for the page.
    match stored {
        Some(f) if f == fence => return Ok(()),
        Some(newer) if newer > fence => return Err(refused(writer, newer, target)),
        _ => {}
    }
    let sql = format!(
        "INSERT INTO {} AS f (scope, fence) VALUES ($1, $2) \
         ON CONFLICT (scope) DO UPDATE SET fence = EXCLUDED.fence, fenced_at = now() \
         WHERE f.fence <= EXCLUDED.fence RETURNING fence",
        fences.quoted()
    );
    let raised: Option<i64> = sqlx::query_scalar(&sql)
        .bind(&writer.scope)
        .bind(fence)
        .fetch_optional(&mut *conn)
        .await
        .map_err(err)?;
    if raised.is_some() {
        return Ok(());
    }
    // Not raised: the row holds a larger fence (the insert made it exist).
    let newer = read(conn, fences, &writer.scope, RowLock::None)
        .await
        .and_then(|f| f.ok_or(sqlx::Error::RowNotFound))
        .map_err(err)?;
    Err(refused(writer, newer, target))
}

/// SQLSTATE 25P03 idle_in_transaction_session_timeout: the server ended the session because
/// its transaction stayed idle for longer than [`abort_stalled_pages_after`] allows; the
/// transaction was rolled back.
pub(crate) fn is_idle_abort(e: &sqlx::Error) -> bool {
    crate::postgres::failure::db_error(e).is_some_and(|d| d.code() == "25P03")
}

/// After the server ended a page's session for idling in its transaction past the lease
/// ttl (the page was rolled back): `LeaseError::Fenced` when the scope's fence, read on a
/// fresh session, is now larger than `writer`'s (a newer run took over and wrote); else
/// `original`, unchanged (also when the fence cannot be read).
pub(crate) async fn explain_idle_abort(
    connection: &PostgresUrl,
    fences: &TableName,
    target: &TableName,
    writer: &WriterFence,
    original: FaucetError,
) -> FaucetError {
    let reading = async {
        let mut conn = connection.open_session(CONNECTOR).await?;
        read(&mut conn, fences, &writer.scope, RowLock::None)
            .await
            .map_err(|e| write_err(format!("cannot read the writer fence in {fences}"), e))
    };
    match reading.await {
        Ok(Some(newer)) if u64::try_from(newer).is_ok_and(|n| n > writer.fence) => {
            refused(writer, newer, target)
        }
        Ok(_) => original,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the writer fence after the server ended a stalled page");
            original
        }
    }
}
