//! [`PostgresUrl`]: a PostgreSQL connection URL parsed once, with the password kept as a
//! [`SecretString`]. Every user of a PostgreSQL URL takes one: the query source and the sink
//! (sqlx sessions), `postgres-cdc` and `faucet replicate` (sqlx catalog sessions and the
//! `pgwire-replication` stream, whose config is built from it in `cdc::client`), and
//! `faucet-state-postgres` (its pool). From it come the sqlx [`PgConnectOptions`], the
//! description used in messages ([`describe`], never the password) and, for errors, the one
//! classification of [`super::failure`].

use std::fmt;
use std::str::FromStr;

use secrecy::{ExposeSecret, SecretString};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgSslMode};
use sqlx::{ConnectOptions, Executor as _};

use faucet_core::FaucetError;

use super::types::SESSION_SETUP;

/// The `application_name` of faucet's sessions when the URL names none.
const APPLICATION_NAME: &str = "faucet";

/// A parsed `postgres://` / `postgresql://` URL: where to connect, as whom, and the password
/// as a secret. `Debug` shows [`PostgresUrl::describe`], never the password.
///
/// Parsing follows sqlx's reading of the URL (user info, `?host=/socket/dir`, `?port=`,
/// `?dbname=`, `?password=`, `?sslmode=`, `PGPASSWORD`, `~/.pgpass`), so the replication
/// stream logs in exactly as the sqlx sessions do.
#[derive(Clone)]
pub struct PostgresUrl {
    /// sqlx's options: statement logging off, `application_name` `faucet` unless the URL
    /// names one. Holds the password too, so it is never printed.
    options: PgConnectOptions,
    password: Option<SecretString>,
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgresUrl({})", self.describe())
    }
}

impl PostgresUrl {
    /// Parses `url` (`postgres://user:password@host:port/database?...`) without ever putting
    /// it in an error message.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field` when the URL is empty, has another scheme or cannot
    /// be parsed; the message says what is wrong, not what the URL is.
    pub fn parse(url: &SecretString, field: &str) -> Result<Self, FaucetError> {
        let text = url.expose_secret();
        if text.trim().is_empty() {
            return Err(FaucetError::config(field, "must not be empty"));
        }
        if !(text.starts_with("postgres://") || text.starts_with("postgresql://")) {
            return Err(FaucetError::config(
                field,
                "must be a URL starting with `postgres://` or `postgresql://`",
            ));
        }
        let options = PgConnectOptions::from_str(text).map_err(|e| {
            // sqlx's parse errors describe the part at fault, never echoing the password;
            // still, only the error kind is shown.
            let kind = match e {
                sqlx::Error::Configuration(_) => "malformed connection URL",
                _ => "unusable connection URL",
            };
            FaucetError::config(field, format!("{kind} (the URL itself is not shown)"))
        })?;
        // Sessions show up as `faucet` in pg_stat_activity unless the URL names them
        // (`?application_name=...`). No sqlx statement logs (its "slow statement" WARN after
        // 1 s): a wait that matters is reported by faucet itself.
        let named = options.get_application_name().is_some();
        let options = options.disable_statement_logging();
        let options = if named {
            options
        } else {
            options.application_name(APPLICATION_NAME)
        };
        writable_as_url(&options).map_err(|m| FaucetError::config(field, m))?;
        let password = password_of(&options)
            .map_err(|()| {
                FaucetError::config(field, "the password is not valid percent-encoded UTF-8")
            })?
            .map(SecretString::from);
        Ok(Self { options, password })
    }

    /// [`PostgresUrl::parse`] of a plain string (an API that takes `&str`, such as
    /// `PostgresStateStore::connect`); the string is wrapped as a secret at once.
    ///
    /// # Errors
    /// As [`PostgresUrl::parse`].
    pub fn parse_str(url: &str, field: &str) -> Result<Self, FaucetError> {
        Self::parse(&SecretString::from(url.to_owned()), field)
    }

    /// The sqlx options (a clone, to adjust and connect with).
    pub fn options(&self) -> PgConnectOptions {
        self.options.clone()
    }

    /// `postgres://user@host:port/database`, for messages and logs ([`describe`]).
    pub fn describe(&self) -> String {
        describe(&self.options)
    }

    /// The TCP host name or address; see [`PostgresUrl::socket_dir`] for Unix sockets.
    pub fn host(&self) -> &str {
        self.options.get_host()
    }

    /// The Unix socket directory, when the URL names one (`?host=/run/postgresql`).
    pub fn socket_dir(&self) -> Option<&std::path::Path> {
        self.options.get_socket().map(std::path::PathBuf::as_path)
    }

    /// The port (5432 unless the URL says otherwise).
    pub fn port(&self) -> u16 {
        self.options.get_port()
    }

    /// The role logging in.
    pub fn user(&self) -> &str {
        self.options.get_username()
    }

    /// The database; as libpq, the user's name when the URL names none.
    pub fn database(&self) -> &str {
        self.options
            .get_database()
            .unwrap_or(self.options.get_username())
    }

    /// The password, when there is one.
    pub fn password(&self) -> Option<&SecretString> {
        self.password.as_ref()
    }

    /// Whether the URL demands TLS (`sslmode=require`, `verify-ca`, `verify-full`). faucet
    /// is built without TLS, so such a URL cannot connect.
    pub fn requires_tls(&self) -> bool {
        matches!(
            self.options.get_ssl_mode(),
            PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull
        )
    }

    /// Opens one session and runs `SESSION_SETUP` on it (UTC, ISO dates, ISO 8601
    /// intervals, hex bytea).
    ///
    /// # Errors
    /// [`FaucetError::Connect`] for `connector`, naming [`PostgresUrl::describe`] (never the
    /// password), with the driver's error as the source.
    pub async fn open_session(&self, connector: &str) -> Result<PgConnection, FaucetError> {
        let mut conn = self.options.connect().await.map_err(|e| {
            FaucetError::connect(
                connector,
                format!("PostgreSQL at {}", self.describe()),
                Some(Box::new(e)),
            )
        })?;
        // A plain string runs as a simple query: several statements in one round trip.
        (&mut conn).execute(SESSION_SETUP).await.map_err(|e| {
            FaucetError::connect(
                connector,
                format!("session setup failed on {}", self.describe()),
                Some(Box::new(e)),
            )
        })?;
        Ok(conn)
    }

    /// Who the server and database are, to tell whether two URLs reach one database (a
    /// host under two names): the cluster's `system_identifier` (`pg_control_system()`,
    /// unique per `initdb`) and `current_database()`.
    ///
    /// # Errors
    /// [`PostgresUrl::open_session`]'s; [`FaucetError::Read`] when the query fails.
    pub async fn server_identity(&self, connector: &str) -> Result<String, FaucetError> {
        use sqlx::Connection as _;
        let mut conn = self.open_session(connector).await?;
        let id: Result<String, _> = sqlx::query_scalar(
            "SELECT system_identifier::text || ' database ' || current_database() \
             FROM pg_control_system()",
        )
        .fetch_one(&mut conn)
        .await;
        let _ = conn.close().await;
        id.map_err(|e| {
            FaucetError::read(
                connector,
                format!("reading the server's identity on {}", self.describe()),
                Some(Box::new(e)),
            )
        })
    }
}

/// Checks that sqlx can write `options` back as a URL, as [`password_of`] has it do: sqlx
/// builds `postgres://<user>@<host>:<port>` unescaped and panics ("BUG: generated
/// un-parseable URL") when that does not parse — a `?host=` a URL cannot hold (`a%20b`,
/// `%00`, `a%3Ab`) or such a user.
///
/// # Errors
/// A message naming the host and the user (neither is a secret).
fn writable_as_url(options: &PgConnectOptions) -> Result<(), String> {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    let host = match options.get_socket() {
        Some(socket) => {
            utf8_percent_encode(&socket.to_string_lossy(), NON_ALPHANUMERIC).to_string()
        }
        None => options.get_host().to_owned(),
    };
    let (user, port) = (options.get_username(), options.get_port());
    url::Url::parse(&format!("postgres://{user}@{host}:{port}"))
        .map(drop)
        .map_err(|e| {
            format!(
                "the host {:?} or the user {user:?} is not one a connection URL can hold ({e})",
                options.get_host()
            )
        })
}

/// The password sqlx would log in with, percent-decoded; `Err` when it is not UTF-8. Only
/// after [`writable_as_url`] passed.
fn password_of(options: &PgConnectOptions) -> Result<Option<String>, ()> {
    // sqlx keeps no getter for the password; its URL form holds it percent-encoded.
    let url = options.to_url_lossy();
    url.password()
        .map(|p| {
            percent_encoding::percent_decode_str(p)
                .decode_utf8()
                .map(std::borrow::Cow::into_owned)
                .map_err(drop)
        })
        .transpose()
}

/// `postgres://user@host:port/database` (a Unix socket as `postgres://user@[/dir]:port/db`),
/// the one description of a PostgreSQL server in faucet's messages, Debug output and logs:
/// the URL without its password and parameters. The database defaults to the user, as in
/// libpq. Takes options rather than a [`PostgresUrl`] so a caller's own pool
/// (`PostgresStateStore::from_pool`) is described alike.
pub fn describe(options: &PgConnectOptions) -> String {
    let user = options.get_username();
    let db = options.get_database().unwrap_or(user);
    let port = options.get_port();
    match options.get_socket() {
        Some(socket) => format!("postgres://{user}@[{}]:{port}/{db}", socket.display()),
        None => format!("postgres://{user}@{}:{port}/{db}", options.get_host()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<PostgresUrl, FaucetError> {
        PostgresUrl::parse_str(url, "connection_url")
    }

    #[test]
    fn urls_are_never_echoed() {
        let err = parse("postgres://u:hunter2@[::1:5432/db").expect_err("bad");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err = parse("mysql://u:hunter2@h/db").expect_err("bad");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err = parse("  ").expect_err("empty");
        assert!(err.to_string().contains("must not be empty"), "{err}");
        let ok = parse("postgres://u:hunter2@h:5433/db").expect("ok");
        assert_eq!(ok.describe(), "postgres://u@h:5433/db");
        assert!(!format!("{ok:?}").contains("hunter2"));
        let e = parse("not a url").expect_err("garbage");
        assert!(matches!(e, FaucetError::Config { .. }));
        // Hosts a URL cannot hold: a config error, where sqlx's URL writer panicked.
        for host in ["a%20b", "%00", "%5B", "a%3Ab"] {
            let url = format!("postgres://u:hunter2@h:5432/db?host={host}");
            let e = parse(&url).expect_err(&url);
            assert!(
                matches!(&e, FaucetError::Config { field, .. } if field == "connection_url"),
                "{e}"
            );
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn tcp_and_socket_urls_and_the_password_as_a_secret() {
        let p = parse("postgres://alice:p%40ss@db.example:6543/shop").expect("valid");
        assert_eq!(p.host(), "db.example");
        assert_eq!(p.socket_dir(), None);
        assert_eq!(p.port(), 6543);
        assert_eq!(p.user(), "alice");
        assert_eq!(p.password().map(ExposeSecret::expose_secret), Some("p@ss"));
        assert_eq!(p.database(), "shop");
        assert!(!format!("{p:?}").contains("p@ss"));
        assert_eq!(p.options().get_application_name(), Some("faucet"));

        let s = parse("postgresql://bob@localhost/test?host=/tmp/pg&port=5499").expect("valid");
        assert_eq!(s.socket_dir(), Some(std::path::Path::new("/tmp/pg")));
        assert_eq!(s.port(), 5499);
        assert!(s.password().is_none());
        assert_eq!(s.describe(), "postgres://bob@[/tmp/pg]:5499/test");

        let d = parse("postgres://carol@h/?application_name=mine&password=x%2Fy").expect("ok");
        assert_eq!(d.database(), "carol");
        assert_eq!(d.options().get_application_name(), Some("mine"));
        assert_eq!(d.password().map(ExposeSecret::expose_secret), Some("x/y"));
    }

    #[test]
    fn tls_demands_are_seen() {
        assert!(
            parse("postgres://u@h/db?sslmode=require")
                .expect("ok")
                .requires_tls()
        );
        assert!(
            !parse("postgres://u@h/db?sslmode=prefer")
                .expect("ok")
                .requires_tls()
        );
    }
}
