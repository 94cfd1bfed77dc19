//! Connections of the `postgres-cdc` source: the connection URL, split into what the two
//! clients need, with the password kept out of every `Debug` and error.
//!
//! * catalog queries (prerequisites, slot and publication creation) go through one sqlx
//!   connection ([`ConnectionParams::connect_sql`]);
//! * the change stream goes through `pgwire-replication`'s [`ReplicationClient`]
//!   ([`ConnectionParams::replication_config`]): a background task reads the socket into a
//!   bounded channel and answers the server's keepalives itself (with the last acknowledged
//!   LSN), also while the consumer is busy writing a page, so `wal_sender_timeout` never
//!   fires on a slow sink (PostgreSQL manual, "Streaming Replication Protocol").
//!
//! The walsender renders tuple values in text under the startup `options` below, the same
//! settings [`crate::postgres::types::SESSION_SETUP`] pins on ordinary sessions, so
//! `decode_text` reads every path alike (e.g. `bytea_output=hex` even when the database
//! default is `escape`, case 24).
//!
//! [`ReplicationClient`]: pgwire_replication::ReplicationClient

use std::str::FromStr;
use std::time::Duration;

use pgwire_replication::{Lsn, ReplicationConfig};
use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgSslMode};

use faucet_core::FaucetError;

use super::CONNECTOR;

/// Session settings of the walsender, as startup `options` (`-c name=value`): UTF-8, UTC,
/// ISO dates, ISO 8601 intervals, shortest-exact floats, hex bytea.
const WALSENDER_OPTIONS: &str = "-c client_encoding=UTF8 -c TimeZone=UTC -c DateStyle=ISO \
     -c IntervalStyle=iso_8601 -c extra_float_digits=1 -c bytea_output=hex";

/// How often an acknowledged LSN is reported at most (the standby status update interval),
/// at the longest: short, so a bounded run's last acknowledgement does not hold up its end; a
/// status update is 34 bytes, and none is sent while the acknowledged position stands still.
/// A shorter `max_page_delay` shortens it to match (not under [`MIN_STATUS_INTERVAL`]), so the
/// slot's flush position follows the durable bookmark within the page delay.
const STATUS_INTERVAL: Duration = Duration::from_millis(200);
/// The shortest standby status update interval.
const MIN_STATUS_INTERVAL: Duration = Duration::from_millis(10);

/// The standby status update interval for a page delay of `max_page_delay`.
pub(crate) fn status_interval(max_page_delay: Duration) -> Duration {
    max_page_delay.clamp(MIN_STATUS_INTERVAL, STATUS_INTERVAL)
}

/// How long a silent stream waits before sending a status update anyway.
const IDLE_WAKEUP: Duration = Duration::from_secs(10);

/// Events buffered between the socket reader and the page assembly (one event per change).
const EVENT_BUFFER: usize = 4096;

/// The parts of a `postgres://` URL. `Debug` never shows the password.
#[derive(Clone)]
pub(crate) struct ConnectionParams {
    sql: PgConnectOptions,
    /// TCP host name or address, or a Unix socket directory (starting with `/`).
    host: String,
    port: u16,
    user: String,
    password: Option<String>,
    database: String,
}

impl std::fmt::Debug for ConnectionParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionParams")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("database", &self.database)
            .finish()
    }
}

fn url_error(message: impl Into<String>) -> FaucetError {
    FaucetError::config("connection_url", message)
}

impl ConnectionParams {
    /// Parses `url` (`postgres://` or `postgresql://`). Errors never quote the URL, which may
    /// hold a password.
    ///
    /// # Errors
    /// [`FaucetError::Config`] on `connection_url` when the URL is malformed, or asks for TLS.
    pub(crate) fn parse(url: &str) -> Result<Self, FaucetError> {
        let parsed = url::Url::parse(url).map_err(|e| {
            url_error(format!(
                "not a valid URL ({e}); expected postgres://user:password@host:port/database"
            ))
        })?;
        if !matches!(parsed.scheme(), "postgres" | "postgresql") {
            return Err(url_error(format!(
                "scheme `{}` is not postgres:// or postgresql://",
                parsed.scheme()
            )));
        }
        let sql = PgConnectOptions::from_str(url)
            .map_err(|e| url_error(format!("cannot be read: {}", redact_error(&e.to_string()))))?;
        if matches!(
            sql.get_ssl_mode(),
            PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull
        ) {
            return Err(url_error(
                "TLS (sslmode=require/verify-ca/verify-full) is not compiled into faucet; \
                 use sslmode=disable or prefer on a trusted network",
            ));
        }
        let password = parsed
            .password()
            .map(|p| {
                percent_decode(p)
                    .map_err(|_| url_error("the password is not valid percent-encoded UTF-8"))
            })
            .transpose()?;
        let host = match sql.get_socket() {
            Some(dir) => dir.to_string_lossy().into_owned(),
            None => sql.get_host().to_owned(),
        };
        let database = sql
            .get_database()
            .map(str::to_owned)
            .unwrap_or_else(|| sql.get_username().to_owned());
        Ok(Self {
            host,
            port: sql.get_port(),
            user: sql.get_username().to_owned(),
            password,
            database,
            sql,
        })
    }

    /// The database the URL names.
    pub(crate) fn database(&self) -> &str {
        &self.database
    }

    /// One ordinary (non-replication) connection, with the shared session settings.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] naming host, port and database (never the password).
    pub(crate) async fn connect_sql(&self) -> Result<PgConnection, FaucetError> {
        let options = self
            .sql
            .clone()
            .application_name("faucet-postgres-cdc")
            // No sqlx statement logs (its "slow statement" WARN after 1 s): a wait that
            // matters is reported by faucet itself, naming what it waits for.
            .disable_statement_logging();
        options.connect().await.map_err(|e| {
            FaucetError::connect(
                CONNECTOR,
                format!(
                    "PostgreSQL at {}:{} database `{}` as `{}`",
                    self.host, self.port, self.database, self.user
                ),
                Some(Box::new(e)),
            )
        })
    }

    /// The replication session's configuration: stream `slot` of `publication` from
    /// `start`, reporting `ack` as flushed until told otherwise (never a position that is not
    /// durable, case 03).
    pub(crate) fn replication_config(
        &self,
        slot: &str,
        publication: &str,
        start: Lsn,
        ack: Lsn,
        status_interval: Duration,
    ) -> ReplicationConfig {
        let password = self.password.clone().unwrap_or_default();
        let base = if self.host.starts_with('/') {
            ReplicationConfig::unix(
                self.host.clone(),
                self.port,
                self.user.clone(),
                password,
                self.database.clone(),
                slot,
                publication,
            )
        } else {
            ReplicationConfig::new(
                self.host.clone(),
                self.user.clone(),
                password,
                self.database.clone(),
                slot,
                publication,
            )
            .with_port(self.port)
        };
        base.with_start_lsn(start)
            .with_ack_lsn(ack)
            .with_status_interval(status_interval)
            .with_wakeup_interval(IDLE_WAKEUP)
            .with_buffer_size(EVENT_BUFFER)
            .with_options(WALSENDER_OPTIONS)
            .with_application_name(format!("faucet-postgres-cdc:{slot}"))
    }
}

/// Percent-decodes a URL component.
fn percent_decode(s: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out)
}

/// sqlx's URL errors can quote the URL; drop anything after `://` up to `@`.
fn redact_error(message: &str) -> String {
    match (message.find("://"), message.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            format!("{}://[redacted]{}", &message[..start], &message[at..])
        }
        _ => message.to_owned(),
    }
}

/// Formats an LSN as PostgreSQL does: `X/X`, upper-case hex.
pub(crate) fn lsn_text(lsn: Lsn) -> String {
    format!("{:X}/{:X}", lsn.0 >> 32, lsn.0 & 0xFFFF_FFFF)
}

/// Parses PostgreSQL's `X/X` LSN text.
pub(crate) fn parse_lsn(text: &str) -> Option<Lsn> {
    let (hi, lo) = text.split_once('/')?;
    if hi.is_empty() || lo.is_empty() || hi.len() > 8 || lo.len() > 8 {
        return None;
    }
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    Some(Lsn((hi << 32) | lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_and_socket_urls_without_leaking_the_password() {
        let p =
            ConnectionParams::parse("postgres://alice:p%40ss@db.example:6543/shop").expect("valid");
        assert_eq!(p.host, "db.example");
        assert_eq!(p.port, 6543);
        assert_eq!(p.user, "alice");
        assert_eq!(p.password.as_deref(), Some("p@ss"));
        assert_eq!(p.database(), "shop");
        assert!(!format!("{p:?}").contains("p@ss"));

        let s = ConnectionParams::parse("postgresql://bob@localhost/test?host=/tmp/pg&port=5499")
            .expect("valid");
        assert_eq!(s.host, "/tmp/pg");
        assert_eq!(s.port, 5499);
        assert_eq!(s.password, None);
    }

    #[test]
    fn rejects_tls_and_other_schemes() {
        let e =
            ConnectionParams::parse("postgres://u:secret@h/db?sslmode=require").expect_err("tls");
        assert!(e.to_string().contains("TLS"), "{e}");
        assert!(!e.to_string().contains("secret"));
        let e = ConnectionParams::parse("mysql://u:secret@h/db").expect_err("scheme");
        assert!(!e.to_string().contains("secret"), "{e}");
        let e = ConnectionParams::parse("not a url").expect_err("garbage");
        assert!(matches!(e, FaucetError::Config { .. }));
    }

    #[test]
    fn lsn_round_trip() {
        for text in ["0/0", "0/16B3748", "16/B374D848", "FFFFFFFF/FFFFFFFF"] {
            let lsn = parse_lsn(text).expect(text);
            assert_eq!(lsn_text(lsn), text);
        }
        for bad in ["", "0", "/1", "1/", "x/1", "123456789/0", "0/0/0"] {
            assert!(parse_lsn(bad).is_none(), "{bad}");
        }
    }
}
