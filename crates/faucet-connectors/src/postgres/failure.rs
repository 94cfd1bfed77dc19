//! [`PgFailure`]: the one classification of sqlx errors from PostgreSQL, by the SQLSTATE
//! codes of the PostgreSQL manual, appendix A ("PostgreSQL Error Codes"), and by the kind of
//! I/O failure. The connectors decide from it whether a session is gone
//! ([`is_connection_lost`]); `faucet-state-postgres` picks its messages and hints from it.

use sqlx::postgres::PgDatabaseError;

/// What a sqlx error from PostgreSQL means for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PgFailure {
    /// The server refused the TCP connection: nothing listens there.
    Refused,
    /// The session's socket broke (reset, aborted, broken pipe, unexpected EOF) or the
    /// protocol stream is out of step: the session is gone.
    Dropped,
    /// Another I/O failure reaching the server (unreachable network, DNS, timeout).
    Network,
    /// The TLS handshake failed.
    Tls,
    /// The server ended (or would not start) the session: SQLSTATE class 08 (connection
    /// exception) or 57P01 to 57P05 ([`SESSION_ENDING_57P`]); the SQLSTATE.
    SessionEnded(String),
    /// 28P01 invalid_password.
    PasswordRejected,
    /// 28000 invalid_authorization_specification: no such role, or no `pg_hba.conf` entry.
    LoginRejected,
    /// 3D000 invalid_catalog_name: the database does not exist.
    NoDatabase,
    /// 42P01 undefined_table.
    NoTable,
    /// 42501 insufficient_privilege.
    PermissionDenied,
    /// 53300 too_many_connections.
    TooManyConnections,
    /// A pool had no connection to give within its timeout.
    PoolTimedOut,
    /// The connection options are not usable (sqlx's `Configuration` error).
    BadConfig,
    /// Anything else; the SQLSTATE when the server sent one.
    Other(Option<String>),
}

/// The codes of SQLSTATE class 57 (operator intervention) after which the session is gone,
/// from the PostgreSQL manual's appendix A: 57P01 admin_shutdown (`pg_terminate_backend`,
/// a fast shutdown), 57P02 crash_shutdown, 57P03 cannot_connect_now (starting up or shutting
/// down), 57P04 database_dropped and 57P05 idle_session_timeout, all sent as FATAL. The
/// class's other codes, 57000 operator_intervention and 57014 query_canceled, leave the
/// session usable, so the class is not matched as a whole.
pub const SESSION_ENDING_57P: [&str; 5] = ["57P01", "57P02", "57P03", "57P04", "57P05"];

impl PgFailure {
    /// Classifies `e` (see the variants).
    pub fn of(e: &sqlx::Error) -> Self {
        use std::io::ErrorKind;
        match e {
            sqlx::Error::Io(io) => match io.kind() {
                ErrorKind::ConnectionRefused => Self::Refused,
                ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                | ErrorKind::UnexpectedEof => Self::Dropped,
                _ => Self::Network,
            },
            sqlx::Error::Protocol(_) => Self::Dropped,
            sqlx::Error::Tls(_) => Self::Tls,
            sqlx::Error::PoolTimedOut => Self::PoolTimedOut,
            sqlx::Error::Configuration(_) => Self::BadConfig,
            sqlx::Error::Database(d) => {
                let code = d.code().map(|c| c.into_owned()).unwrap_or_default();
                Self::of_sqlstate(&code)
            }
            _ => Self::Other(None),
        }
    }

    /// Classifies a SQLSTATE code.
    pub fn of_sqlstate(code: &str) -> Self {
        match code {
            "28P01" => Self::PasswordRejected,
            "28000" => Self::LoginRejected,
            "3D000" => Self::NoDatabase,
            "42P01" => Self::NoTable,
            "42501" => Self::PermissionDenied,
            "53300" => Self::TooManyConnections,
            c if c.starts_with("08") || SESSION_ENDING_57P.contains(&c) => {
                Self::SessionEnded(c.to_owned())
            }
            c => Self::Other((!c.is_empty()).then(|| c.to_owned())),
        }
    }

    /// Whether the session is gone (or never came up through the network): I/O, protocol
    /// or TLS failures and [`PgFailure::SessionEnded`]. The outcome of a statement in flight
    /// is then unknown and the session must not be used again.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            Self::Refused | Self::Dropped | Self::Network | Self::Tls | Self::SessionEnded(_)
        )
    }
}

/// Whether `e` means the session is gone ([`PgFailure::is_connection_lost`]).
pub fn is_connection_lost(e: &sqlx::Error) -> bool {
    PgFailure::of(e).is_connection_lost()
}

/// The server's error, when `e` is one (SQLSTATE, message, detail, context).
pub fn db_error(e: &sqlx::Error) -> Option<&PgDatabaseError> {
    match e {
        sqlx::Error::Database(d) => d.try_downcast_ref::<PgDatabaseError>(),
        _ => None,
    }
}

/// Whether `e` is what a `CREATE … IF NOT EXISTS` gets when another session created the
/// same object at the same moment: `IF NOT EXISTS` checks the catalog before the creating
/// session commits, so the later one fails on the catalog's unique index (23505
/// unique_violation on `pg_type_typname_nsp_index` or `pg_class_relname_nsp_index`) or as
/// 42P07 duplicate_table / 42P06 duplicate_schema / 42710 duplicate_object (`type "…"
/// already exists`: the row type of a table created at the same moment, seen in CI). The
/// object exists, committed, once the
/// error is seen (the unique check waited for the other session's commit): the caller
/// treats it as created.
pub fn is_concurrent_create(e: &sqlx::Error) -> bool {
    db_error(e).is_some_and(|d| matches!(d.code(), "23505" | "42P07" | "42P06" | "42710"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_that_end_the_session_and_those_that_do_not() {
        for code in [
            "08000", "08006", "08P01", "57P01", "57P02", "57P03", "57P04", "57P05",
        ] {
            let f = PgFailure::of_sqlstate(code);
            assert_eq!(f, PgFailure::SessionEnded(code.into()), "{code}");
            assert!(f.is_connection_lost(), "{code}");
        }
        // Canceled statements and other errors leave the session usable.
        for code in ["57014", "57000", "23505", "40001", "42P01", "28P01"] {
            assert!(!PgFailure::of_sqlstate(code).is_connection_lost(), "{code}");
        }
        assert_eq!(PgFailure::of_sqlstate("28P01"), PgFailure::PasswordRejected);
        assert_eq!(
            PgFailure::of_sqlstate("22P02"),
            PgFailure::Other(Some("22P02".into()))
        );
    }

    #[test]
    fn io_kinds() {
        use std::io::{Error, ErrorKind};
        let of = |k: ErrorKind| PgFailure::of(&sqlx::Error::Io(Error::from(k)));
        assert_eq!(of(ErrorKind::ConnectionRefused), PgFailure::Refused);
        assert_eq!(of(ErrorKind::ConnectionReset), PgFailure::Dropped);
        assert_eq!(of(ErrorKind::TimedOut), PgFailure::Network);
        for k in [
            ErrorKind::ConnectionRefused,
            ErrorKind::BrokenPipe,
            ErrorKind::TimedOut,
        ] {
            assert!(
                is_connection_lost(&sqlx::Error::Io(Error::from(k))),
                "{k:?}"
            );
        }
        assert!(!is_connection_lost(&sqlx::Error::RowNotFound));
        assert!(!is_connection_lost(&sqlx::Error::PoolTimedOut));
    }
}
