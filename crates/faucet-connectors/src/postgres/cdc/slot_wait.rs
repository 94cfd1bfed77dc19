//! Creating a logical replication slot waits until every transaction that holds a
//! transaction id when the creation starts has ended, in any database of the server
//! (PostgreSQL's snapshot builder needs a consistent starting point; manual,
//! "Logical Decoding Concepts"). A session left `idle in transaction` therefore stalls the
//! creation indefinitely. [`while_creating`] runs a creation and, after
//! [`FIRST_WARNING`] and then every [`REPEAT`], logs a WARN naming those sessions (pid,
//! database, `application_name`, state, since when), read from `pg_stat_activity` on a
//! connection of its own.

use std::future::Future;
use std::time::{Duration, Instant};

use sqlx::PgConnection;

use crate::postgres::connection::PostgresUrl;

/// How long a creation runs before the first warning.
pub(crate) const FIRST_WARNING: Duration = Duration::from_secs(2);

/// How often the warning is repeated while the creation still waits.
pub(crate) const REPEAT: Duration = Duration::from_secs(10);

/// A session holding a transaction id: `pg_stat_activity`'s pid, datname,
/// application_name, state, xact_start.
type Holder = (
    i32,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// Runs `creating` (the creation of `slot`), warning while it waits (module docs).
/// `creator` is the pid of the session creating the slot, when it is an ordinary session
/// (a replication session is a walsender, never listed).
pub(crate) async fn while_creating<T>(
    connection: &PostgresUrl,
    slot: &str,
    creator: Option<i32>,
    creating: impl Future<Output = T>,
) -> T {
    tokio::pin!(creating);
    let started = Instant::now();
    let mut next = started + FIRST_WARNING;
    let mut watcher: Option<PgConnection> = None;
    loop {
        tokio::select! {
            out = &mut creating => return out,
            () = tokio::time::sleep_until(next.into()) => {
                next += REPEAT;
                // The creation keeps running on the server while this looks around.
                warn_holders(connection, &mut watcher, slot, creator, started.elapsed()).await;
            }
        }
    }
}

async fn warn_holders(
    connection: &PostgresUrl,
    watcher: &mut Option<PgConnection>,
    slot: &str,
    creator: Option<i32>,
    waited: Duration,
) {
    if watcher.is_none() {
        *watcher = connection.connect_sql().await.ok();
    }
    let holders: Vec<Holder> = match watcher.as_mut() {
        Some(conn) => sqlx::query_as(
            "SELECT pid, datname::text, application_name, state, xact_start::text \
             FROM pg_stat_activity \
             WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() \
               AND pid IS DISTINCT FROM $1 \
             ORDER BY xact_start",
        )
        .bind(creator)
        .fetch_all(conn)
        .await
        .unwrap_or_default(),
        None => Vec::new(),
    };
    let sessions = if holders.is_empty() {
        "none visible to this role (the waited-for transactions may have just ended, or \
         belong to roles whose sessions it cannot see)"
            .to_owned()
    } else {
        holders
            .iter()
            .map(|(pid, db, app, state, since)| {
                format!(
                    "pid {pid} (database {}, application_name `{}`, {}, transaction open since \
                     {})",
                    db.as_deref().unwrap_or("?"),
                    app.as_deref().unwrap_or(""),
                    state.as_deref().unwrap_or("?"),
                    since.as_deref().unwrap_or("?")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    tracing::warn!(
        slot,
        waited_secs = waited.as_secs(),
        "creating the replication slot waits, as PostgreSQL requires, for the transactions \
         open when it started to end; sessions with an open transaction: {sessions}. End \
         them (COMMIT or ROLLBACK, or `SELECT pg_terminate_backend(<pid>)`) and the creation \
         continues"
    );
}
