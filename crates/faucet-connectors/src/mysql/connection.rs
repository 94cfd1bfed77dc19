//! The connection rules shared by every MySQL/MariaDB connector (the `mysql` query source,
//! `mysql-cdc`, a later sink): the connection URL parsed once into [`MysqlConnection`] (a
//! secret, never printed), opening a session with [`SESSION_SETUP`], and the mapping of
//! driver errors to [`FaucetError`]s ([`ErrorKind`], [`MysqlConnection::error`]) that never
//! carry the URL.

use std::time::Duration;

use mysql_async::{Conn, Opts, OptsBuilder};
use secrecy::{ExposeSecret, SecretString};

use faucet_core::FaucetError;

/// Statements run on every new session, before anything else:
/// * `time_zone = '+00:00'`: TIMESTAMP values come out in UTC whatever the server's or the
///   host's zone (docs/values.md), and bookmark literals are read back in UTC;
/// * `NAMES utf8mb4`: every text column of a result set arrives in UTF-8 (the server
///   transcodes from the column's charset; binary columns stay bytes, collation 63).
///
/// `sql_mode` is the server's: faucet's SQL quotes names with backticks and writes string
/// literals as `_utf8mb4 X'…'`, which read the same under every mode.
pub const SESSION_SETUP: [&str; 2] = ["SET time_zone = '+00:00'", "SET NAMES utf8mb4"];

/// The longest `abs_conn_ttl` (with its jitter) a URL may set: 100 years.
const ABS_CONN_TTL_MAX: Duration = Duration::from_secs(100 * 365 * 86_400);

/// How long opening a TCP connection may take before it fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed `connection_url`: `mysql://user:password@host:port/database?params` (also
/// `mariadb://`; the query parameters are mysql_async's, e.g. `?prefer_socket=true`). Made
/// once by [`MysqlConnection::parse`]; `Debug` and [`MysqlConnection::describe`] never show
/// the password.
#[derive(Clone)]
pub struct MysqlConnection {
    opts: Opts,
    description: String,
    connector: &'static str,
}

impl std::fmt::Debug for MysqlConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlConnection")
            .field("server", &self.description)
            .finish_non_exhaustive()
    }
}

/// What a driver error means for the run, from the server's error code (MySQL's
/// "Server Error Message Reference"; MariaDB uses the same codes) or the driver's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The session is gone (I/O, the server closing it or shutting down, a killed
    /// connection: 1053, 1927, 2006, 2013, 3169): a statement in flight has an unknown
    /// outcome; reconnecting may work.
    ConnectionLost,
    /// Wrong user or password (1045), or the account cannot log in from here.
    Auth,
    /// A privilege is missing (1044, 1142, 1143, 1227, 1370, 1410, 1698 …).
    AccessDenied,
    /// The database in the URL does not exist (1049).
    UnknownDatabase,
    /// A table or column does not exist (1146, 1054).
    UnknownObject,
    /// A statement the server rejected (syntax, a bad value …).
    Statement,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// Classifies `e`.
    pub fn of(e: &mysql_async::Error) -> Self {
        use mysql_async::Error;
        match e {
            Error::Io(_) => Self::ConnectionLost,
            Error::Driver(d) => match d {
                mysql_async::DriverError::ConnectionClosed
                | mysql_async::DriverError::PoolDisconnected => Self::ConnectionLost,
                _ => Self::Other,
            },
            Error::Server(s) => Self::of_code(s.code),
            Error::Url(_) | Error::Other(_) => Self::Other,
        }
    }

    /// Classifies a server error code.
    pub fn of_code(code: u16) -> Self {
        match code {
            1053
            | 1077
            | 1078
            | 1079
            | 1080
            | 1152
            | 1153
            | 1158..=1161
            | 1184
            | 1927
            | 2006
            | 2013
            | 3169 => Self::ConnectionLost,
            1045 | 1251 | 1862 | 1820 => Self::Auth,
            1044 | 1142 | 1143 | 1227 | 1370 | 1410 | 1698 | 1211 => Self::AccessDenied,
            1049 => Self::UnknownDatabase,
            1146 | 1054 | 1109 => Self::UnknownObject,
            1064 | 1065 | 1149 | 1292 | 1366 | 1406 | 1690 => Self::Statement,
            _ => Self::Other,
        }
    }
}

impl MysqlConnection {
    /// Parses `url` for `connector` (the connector name used in its errors: `mysql`,
    /// `mysql-cdc`) without ever putting the URL in an error message.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field` when the URL is empty, has another scheme than
    /// `mysql://` / `mariadb://`, or does not parse; the message says what is wrong, never
    /// the URL.
    pub fn parse(
        url: &SecretString,
        field: &str,
        connector: &'static str,
    ) -> Result<Self, FaucetError> {
        let text = url.expose_secret().trim();
        if text.is_empty() {
            return Err(FaucetError::config(field, "must not be empty"));
        }
        let rest = if let Some(rest) = text.strip_prefix("mysql://") {
            rest
        } else if let Some(rest) = text.strip_prefix("mariadb://") {
            rest
        } else {
            return Err(FaucetError::config(
                field,
                "must be a URL starting with `mysql://` or `mariadb://` (the URL itself is \
                 not shown)",
            ));
        };
        let normalized = format!("mysql://{rest}");
        let opts = Opts::from_url(&normalized).map_err(|e| {
            use mysql_async::UrlError;
            // Parameter names and values are safe to show; the rest may hold the password.
            let what = match &e {
                UrlError::UnknownParameter { .. }
                | UrlError::InvalidParamValue { .. }
                | UrlError::FeatureRequired { .. }
                | UrlError::InvalidPoolConstraints { .. } => e.to_string(),
                _ => "malformed connection URL".to_owned(),
            };
            FaucetError::config(field, format!("{what} (the URL itself is not shown)"))
        })?;
        // mysql_async adds these to `Instant::now()` unchecked for every new connection and
        // panics on an overflow (`?abs_conn_ttl=18446744073709551615`).
        let ttl = opts.abs_conn_ttl().unwrap_or_default();
        let jitter = opts.abs_conn_ttl_jitter().unwrap_or_default();
        if ttl.saturating_add(jitter) > ABS_CONN_TTL_MAX {
            return Err(FaucetError::config(
                field,
                format!(
                    "`abs_conn_ttl` plus `abs_conn_ttl_jitter` is {} s; at most {} s (100 \
                     years) are taken",
                    ttl.saturating_add(jitter).as_secs(),
                    ABS_CONN_TTL_MAX.as_secs()
                ),
            ));
        }
        if opts.db_name().is_none_or(str::is_empty) {
            return Err(FaucetError::config(
                field,
                "names no database: write it as `mysql://user:password@host:port/database`",
            ));
        }
        let prefer_socket = rest.contains("prefer_socket=");
        let description = format!(
            "{}@{}:{}/{}",
            opts.user().unwrap_or(""),
            opts.ip_or_hostname(),
            opts.tcp_port(),
            opts.db_name().unwrap_or("")
        );
        let mut builder = OptsBuilder::from_opts(opts)
            .init(SESSION_SETUP.to_vec())
            .stmt_cache_size(Some(8));
        if !prefer_socket {
            // mysql_async would otherwise switch a loopback TCP connection to the server's
            // Unix socket (`@@socket`), a different path from the one the URL names.
            builder = builder.prefer_socket(false);
        }
        Ok(Self {
            opts: builder.into(),
            description,
            connector,
        })
    }

    /// The driver's options (they hold the password: never print them).
    pub fn opts(&self) -> &Opts {
        &self.opts
    }

    /// `user@host:port/database`: the URL without its password, for messages and logs.
    pub fn describe(&self) -> &str {
        &self.description
    }

    /// The database the URL names.
    pub fn database(&self) -> &str {
        self.opts.db_name().unwrap_or("")
    }

    /// The connector name errors carry.
    pub fn connector(&self) -> &'static str {
        self.connector
    }

    /// Opens one session, with [`SESSION_SETUP`] run on it.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] naming `user@host:port/database` and what is wrong by
    /// [`ErrorKind`] (unreachable, bad credentials, unknown database, missing privilege),
    /// with the driver's error as the source.
    pub async fn connect(&self) -> Result<Conn, FaucetError> {
        match tokio::time::timeout(CONNECT_TIMEOUT, Conn::new(self.opts.clone())).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(self.connect_error(e)),
            Err(_) => Err(FaucetError::connect(
                self.connector,
                format!(
                    "MySQL at {} did not answer within {}s",
                    self.description,
                    CONNECT_TIMEOUT.as_secs()
                ),
                None,
            )),
        }
    }

    /// Who the server is, to tell whether two URLs reach one server (a host under two
    /// names): `@@server_id`, `@@hostname`, `@@port` and `@@datadir`, which two servers do
    /// not share (MariaDB has no `@@server_uuid`).
    ///
    /// # Errors
    /// [`MysqlConnection::connect`]'s, and [`MysqlConnection::error`]'s for the query.
    pub async fn server_identity(&self) -> Result<String, FaucetError> {
        use mysql_async::prelude::Queryable as _;
        let mut conn = self.connect().await?;
        let row: Result<Option<(u64, String, u64, String)>, _> = conn
            .query_first("SELECT @@server_id, @@hostname, @@port, @@datadir")
            .await;
        let _ = tokio::time::timeout(CONNECT_TIMEOUT, conn.disconnect()).await;
        let (id, host, port, datadir) = row
            .map_err(|e| self.error("reading the server's identity", e))?
            .unwrap_or_default();
        Ok(format!("{host}:{port} server_id {id} datadir {datadir}"))
    }

    fn connect_error(&self, e: mysql_async::Error) -> FaucetError {
        let at = &self.description;
        let message = match ErrorKind::of(&e) {
            ErrorKind::ConnectionLost | ErrorKind::Other => {
                format!("MySQL at {at} is unreachable or closed the connection")
            }
            ErrorKind::Auth => format!(
                "MySQL at {at} refused the user or password (check the user and password of \
                 `connection_url`)"
            ),
            ErrorKind::UnknownDatabase => format!(
                "MySQL at {at}: database `{}` does not exist (check `connection_url`)",
                self.database()
            ),
            ErrorKind::AccessDenied => {
                format!(
                    "MySQL at {at}: the user may not use database `{}`",
                    self.database()
                )
            }
            ErrorKind::UnknownObject | ErrorKind::Statement => {
                format!("session setup failed on MySQL at {at}")
            }
        };
        FaucetError::connect(self.connector, message, Some(Box::new(e)))
    }

    /// The [`FaucetError`] for `e`, a failure while doing `what` (`"reading db.orders"`):
    /// [`FaucetError::Connect`] when the session is lost, else [`FaucetError::Read`]; an
    /// access-denied error says so and names the privilege hint.
    pub fn error(&self, what: &str, e: mysql_async::Error) -> FaucetError {
        let at = &self.description;
        match ErrorKind::of(&e) {
            ErrorKind::ConnectionLost => FaucetError::connect(
                self.connector,
                format!("lost the connection to MySQL at {at} while {what}"),
                Some(Box::new(e)),
            ),
            ErrorKind::AccessDenied => FaucetError::read(
                self.connector,
                format!("{what}: access denied on {at} (grant the user the privilege named below)"),
                Some(Box::new(e)),
            ),
            _ => FaucetError::read(self.connector, format!("{what} on {at}"), Some(Box::new(e))),
        }
    }
}

/// Rows of a catalog query as `T`, without mysql_async's panicking conversion
/// (`Queryable::query::<T>` panics on a row that does not convert, e.g. a NULL where `T`
/// has none).
///
/// # Errors
/// A message naming the row that did not convert.
pub fn convert_rows<T: mysql_async::prelude::FromRow>(
    rows: Vec<mysql_async::Row>,
) -> Result<Vec<T>, String> {
    rows.into_iter()
        .map(|row| {
            mysql_async::from_row_opt::<T>(row)
                .map_err(|e| format!("unexpected catalog row {:?}", e.0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_once_and_never_echoed() {
        let ok = MysqlConnection::parse(
            &SecretString::from("mysql://u:hunter2@h:3307/db"),
            "connection_url",
            "mysql",
        )
        .expect("ok");
        assert_eq!(ok.describe(), "u@h:3307/db");
        assert_eq!(ok.database(), "db");
        assert!(!format!("{ok:?}").contains("hunter2"));
        assert_eq!(ok.opts().init().len(), SESSION_SETUP.len());
        assert!(!ok.opts().prefer_socket());
        let maria = MysqlConnection::parse(
            &SecretString::from("mariadb://root@127.0.0.1/test"),
            "f",
            "mysql",
        )
        .expect("mariadb scheme");
        assert_eq!(maria.describe(), "root@127.0.0.1:3306/test");
        for bad in [
            "",
            "postgres://u:hunter2@h/db",
            "mysql://u:hunter2@[::1/db",
            "mysql://u:hunter2@h:3306",
            "mysql://u:hunter2@h/db?nonsense=1",
            // mysql_async panicked adding it to `Instant::now()`.
            "mysql://u:hunter2@h/db?abs_conn_ttl=18446744073709551615",
            "mysql://u:hunter2@h/db?abs_conn_ttl=1&abs_conn_ttl_jitter=18446744073709551615",
        ] {
            let err = MysqlConnection::parse(&SecretString::from(bad), "connection_url", "mysql")
                .expect_err(bad);
            assert!(
                matches!(&err, FaucetError::Config { field, .. } if field == "connection_url"),
                "{err}"
            );
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn error_codes_are_classified() {
        assert_eq!(ErrorKind::of_code(2013), ErrorKind::ConnectionLost);
        assert_eq!(ErrorKind::of_code(1927), ErrorKind::ConnectionLost);
        assert_eq!(ErrorKind::of_code(1045), ErrorKind::Auth);
        assert_eq!(ErrorKind::of_code(1142), ErrorKind::AccessDenied);
        assert_eq!(ErrorKind::of_code(1227), ErrorKind::AccessDenied);
        assert_eq!(ErrorKind::of_code(1049), ErrorKind::UnknownDatabase);
        assert_eq!(ErrorKind::of_code(1146), ErrorKind::UnknownObject);
        assert_eq!(ErrorKind::of_code(1064), ErrorKind::Statement);
        assert_eq!(ErrorKind::of_code(1), ErrorKind::Other);
    }
}
