//! Turning a `sqlx` error into a [`FaucetError`] that says what is at fault and what to do.
//!
//! The error is classified once, by the PostgreSQL connectors' [`PgFailure`] (SQLSTATE
//! codes of the PostgreSQL manual, appendix A, and I/O kinds); this module adds the store's
//! messages and hints. An unreachable server or a lost session is a retryable
//! [`FaucetError::Connect`]; everything a person has to fix is a [`FaucetError::State`].
//! Messages name the server as `postgres://user@host:port/db`
//! ([`faucet_connectors::postgres::connection::describe`]) — never the password.

use faucet_connectors::postgres::failure::PgFailure;
use faucet_core::FaucetError;

/// The store's name in errors (`StateStore::name`).
pub(crate) const STORE: &str = "postgres";
/// The `connector` of its [`FaucetError::Connect`] errors.
pub(crate) const CONNECTOR: &str = "state store postgres";

/// What was being done when an error happened: the operation (`put`, `acquire lease`),
/// the server and the table it touched.
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    pub(crate) op: &'a str,
    pub(crate) target: &'a str,
    pub(crate) table: &'a str,
}

impl Context<'_> {
    /// Classifies `err` (see the module documentation).
    pub(crate) fn classify(self, err: sqlx::Error) -> FaucetError {
        let Context { op, target, table } = self;
        let state = |message: String, err: sqlx::Error| FaucetError::state_io(STORE, message, err);
        // A Connect error already reads "cannot connect"; only other operations are named.
        let lead = if op == "connect" {
            String::new()
        } else {
            format!("{op}: ")
        };
        let connect = |message: String, err: sqlx::Error| {
            FaucetError::connect(CONNECTOR, message, Some(Box::new(err)))
        };
        // The driver's own words for an I/O failure ("Connection reset by peer").
        let io_text = |err: &sqlx::Error| match err {
            sqlx::Error::Io(io) => io.to_string(),
            other => other.to_string(),
        };
        match PgFailure::of(&err) {
            PgFailure::PasswordRejected => state(
                format!(
                    "{op}: password authentication failed at {target} (SQLSTATE 28P01); hint: \
                     check the user and password in the state url"
                ),
                err,
            ),
            PgFailure::LoginRejected => state(
                format!(
                    "{op}: {target} rejected the login (SQLSTATE 28000); hint: the role may \
                     not exist, or pg_hba.conf has no entry for this host, user and database \
                     — check the user in the state url and the server's pg_hba.conf"
                ),
                err,
            ),
            PgFailure::NoDatabase => state(
                format!(
                    "{op}: {target}: the database does not exist (SQLSTATE 3D000); hint: \
                     create it, or fix the database name in the state url"
                ),
                err,
            ),
            PgFailure::NoTable => state(
                format!(
                    "{op}: table {table:?} does not exist at {target} (SQLSTATE 42P01); \
                     hint: set `ensure_table: true` in the state config \
                     (PostgresStateStore::ensure_table) or create the table"
                ),
                err,
            ),
            PgFailure::PermissionDenied => state(
                format!(
                    "{op}: permission denied on table {table:?} at {target} (SQLSTATE \
                     42501); hint: GRANT SELECT, INSERT, UPDATE, DELETE ON {table:?} TO the \
                     state url's user"
                ),
                err,
            ),
            PgFailure::SessionEnded(c) => connect(
                format!(
                    "{lead}the connection to {target} failed (SQLSTATE {c}); hint: the server \
                     may be restarting; retry"
                ),
                err,
            ),
            PgFailure::TooManyConnections => connect(
                format!(
                    "{lead}{target} has too many connections (SQLSTATE 53300); hint: lower \
                     max_connections or raise the server's limit"
                ),
                err,
            ),
            PgFailure::Refused => connect(
                format!(
                    "{lead}connection refused by {target}; hint: is PostgreSQL running and \
                     listening on that host and port? check the state url"
                ),
                err,
            ),
            PgFailure::Dropped => {
                let why = io_text(&err);
                connect(
                    format!(
                        "{lead}the connection to {target} was lost ({why}); hint: the server \
                         restarted or ended the session (idle timeout, pg_terminate_backend); \
                         the next operation reconnects — if it keeps happening, see the \
                         server's log"
                    ),
                    err,
                )
            }
            PgFailure::Network => {
                let why = io_text(&err);
                connect(
                    format!(
                        "{lead}cannot reach {target} ({why}); hint: check the host and port in \
                         the state url and the network"
                    ),
                    err,
                )
            }
            PgFailure::Tls => connect(
                format!(
                    "{lead}TLS with {target} failed; hint: check `sslmode` in the state url and \
                     the server's certificates"
                ),
                err,
            ),
            PgFailure::PoolTimedOut => connect(
                format!(
                    "{lead}no connection to {target} became available in time; hint: the \
                     server may be down or unreachable, or every pooled connection is busy"
                ),
                err,
            ),
            PgFailure::BadConfig => {
                let why = err.to_string();
                FaucetError::config("url", format!("the state url is not usable: {why}"))
            }
            PgFailure::Other(Some(c)) => state(
                format!("{op} on table {table:?} at {target} failed (SQLSTATE {c})"),
                err,
            ),
            _ => state(format!("{op} on table {table:?} at {target} failed"), err),
        }
    }
}

/// The error for a connection attempt that did not finish within `secs` seconds.
pub(crate) fn connect_timeout(op: &str, target: &str, secs: u64) -> FaucetError {
    let lead = if op == "connect" {
        String::new()
    } else {
        format!("{op}: ")
    };
    FaucetError::connect(
        CONNECTOR,
        format!(
            "{lead}no answer from {target} within {secs} s; hint: check the host and port in \
             the state url, and that no firewall drops the connection"
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(kind: std::io::ErrorKind) -> FaucetError {
        Context {
            op: "put",
            target: "postgres://faucet@db:5432/app",
            table: "faucet_state",
        }
        .classify(sqlx::Error::Io(std::io::Error::from(kind)))
    }

    #[test]
    fn a_lost_connection_is_told_apart_from_an_unreachable_server() {
        let lost = classify(std::io::ErrorKind::ConnectionReset);
        assert!(lost.is_retryable(), "{lost}");
        let text = lost.to_string();
        assert!(
            text.contains("connection to postgres://faucet@db:5432/app was lost"),
            "{text}"
        );
        assert!(!text.contains("check the host and port"), "{text}");

        let refused = classify(std::io::ErrorKind::ConnectionRefused);
        assert!(refused.is_retryable(), "{refused}");
        assert!(
            refused.to_string().contains("connection refused"),
            "{refused}"
        );
    }
}
