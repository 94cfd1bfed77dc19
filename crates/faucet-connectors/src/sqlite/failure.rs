//! SQLite's errors in the words of this sink: a locked file, a read-only file, a path that
//! is no database, a value a column refused, and what leaves the outcome of a statement
//! unknown (the session is then dropped, the page never retried).

use faucet_core::FaucetError;

use super::{CONNECTOR, Target};
use crate::sql::sink::sqlx_error;

/// SQLite's primary result codes this sink tells apart (the low byte of an extended code).
mod code {
    pub(super) const BUSY: i64 = 5;
    pub(super) const LOCKED: i64 = 6;
    pub(super) const READONLY: i64 = 8;
    pub(super) const IOERR: i64 = 10;
    pub(super) const CORRUPT: i64 = 11;
    pub(super) const FULL: i64 = 13;
    pub(super) const CANTOPEN: i64 = 14;
    pub(super) const CONSTRAINT: i64 = 19;
    pub(super) const MISMATCH: i64 = 20;
    pub(super) const NOTADB: i64 = 26;
}

/// The primary result code of a SQLite error, if `e` is one.
fn primary(e: &sqlx::Error) -> Option<i64> {
    let db = e.as_database_error()?;
    let code: i64 = db.code()?.parse().ok()?;
    Some(code & 0xff)
}

/// Whether `e` says another connection holds the file's lock past the busy timeout:
/// nothing of the page committed, another attempt may get the lock.
pub(crate) fn is_locked(e: &FaucetError) -> bool {
    sqlx_error(e)
        .and_then(primary)
        .is_some_and(|c| c == code::BUSY || c == code::LOCKED)
}

/// Whether `e` leaves the outcome of the statement in flight unknown: the connection's
/// worker is gone, or the file failed under SQLite (I/O error, disk full, corruption).
pub(crate) fn is_lost(e: &FaucetError) -> bool {
    sqlx_error(e).is_some_and(|s| {
        matches!(
            s,
            sqlx::Error::WorkerCrashed | sqlx::Error::Io(_) | sqlx::Error::PoolClosed
        ) || primary(s).is_some_and(|c| matches!(c, code::IOERR | code::FULL | code::CORRUPT))
    })
}

/// `e`, from `what` (`INSERT into orders`, `COMMIT`) against `target`, as this sink's
/// error: a [`FaucetError::Write`] (keeping `e` as its source, so [`is_locked`] and
/// [`is_lost`] can tell) whose message says what happened to which file, or a
/// [`FaucetError::Data`] for a value a constraint or column type refused.
pub(crate) fn classify(e: sqlx::Error, what: &str, target: &Target<'_>) -> FaucetError {
    let path = target.path.display();
    let message = e
        .as_database_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_else(|| e.to_string());
    let said = match primary(&e) {
        Some(code::BUSY | code::LOCKED) => format!(
            "the database file {path} is locked by another connection (waited \
             busy_timeout_ms = {} ms); nothing of the page was committed — stop the other \
             writer, or raise busy_timeout_ms",
            target.busy_timeout_ms
        ),
        Some(code::READONLY) => {
            let os = match std::fs::OpenOptions::new().write(true).open(target.path) {
                Err(e) => format!("opening it for writing says: {e}"),
                Ok(_) => format!("SQLite says: {message}"),
            };
            format!(
                "the database file {path} is read-only ({os}): this user cannot write it or \
                 its directory (SQLite's WAL keeps `-wal` and `-shm` files beside it), it is \
                 immutable, or it is on a read-only file system"
            )
        }
        Some(code::CANTOPEN) => {
            let why = if target.path.is_dir() {
                "it is a directory; name a file in it".to_owned()
            } else {
                "does its directory exist, and may this user create files there?".to_owned()
            };
            format!("cannot open the database file {path} ({message}): {why}")
        }
        Some(code::NOTADB) => {
            format!("{path} is not a SQLite database file ({message}); name another path")
        }
        Some(code::CONSTRAINT | code::MISMATCH) => {
            return FaucetError::data(
                CONNECTOR,
                format!("{}, {what}", target.name),
                format!("SQLite refused a value: {message} (nothing of the page was committed)"),
            );
        }
        _ => format!("{what} in {path} failed: {message}"),
    };
    FaucetError::write(CONNECTOR, format!("{what}: {said}"), Some(Box::new(e)))
}
