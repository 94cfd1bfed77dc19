//! Connections of the `postgres-cdc` source, both made from the one parsed
//! [`PostgresUrl`] (the password kept out of every `Debug` and error):
//!
//! * catalog queries (prerequisites, slot and publication creation) go through one sqlx
//!   connection ([`PostgresUrl::connect_sql`]);
//! * the change stream goes through `pgwire-replication`'s [`ReplicationClient`]
//!   ([`PostgresUrl::replication_config`]): a background task reads the socket into a
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

use std::time::Duration;

use pgwire_replication::{Lsn, ReplicationConfig};
use secrecy::ExposeSecret;
use sqlx::ConnectOptions;
use sqlx::postgres::PgConnection;

use faucet_core::FaucetError;

use super::CONNECTOR;
use crate::postgres::connection::PostgresUrl;

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

impl PostgresUrl {
    /// One ordinary (non-replication) connection of `postgres-cdc`
    /// (`application_name` `faucet-postgres-cdc`), for catalog queries.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] naming [`PostgresUrl::describe`] (never the password).
    pub(crate) async fn connect_sql(&self) -> Result<PgConnection, FaucetError> {
        let options = self.options().application_name("faucet-postgres-cdc");
        options.connect().await.map_err(|e| {
            FaucetError::connect(
                CONNECTOR,
                format!("PostgreSQL at {}", self.describe()),
                Some(Box::new(e)),
            )
        })
    }

    /// The replication session's configuration: stream `slot` of `publication` from
    /// `start`, reporting `ack` as flushed until told otherwise (never a position that is not
    /// durable, case 03). The password is exposed here, to the client, and nowhere else.
    pub(crate) fn replication_config(
        &self,
        slot: &str,
        publication: &str,
        start: Lsn,
        ack: Lsn,
        status_interval: Duration,
    ) -> ReplicationConfig {
        let password = self
            .password()
            .map(|p| p.expose_secret().to_owned())
            .unwrap_or_default();
        let (user, database) = (self.user().to_owned(), self.database().to_owned());
        let base = match self.socket_dir() {
            Some(dir) => ReplicationConfig::unix(
                dir.to_string_lossy().into_owned(),
                self.port(),
                user,
                password,
                database,
                slot,
                publication,
            ),
            None => ReplicationConfig::new(
                self.host().to_owned(),
                user,
                password,
                database,
                slot,
                publication,
            )
            .with_port(self.port()),
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
    fn replication_configs_of_tcp_and_socket_urls() {
        let url = PostgresUrl::parse_str("postgres://alice:p%40ss@db.example:6543/shop", "u")
            .expect("valid");
        let c = url.replication_config("s", "p", Lsn(0), Lsn(0), STATUS_INTERVAL);
        assert_eq!((c.host.as_str(), c.port), ("db.example", 6543));
        assert_eq!((c.user.as_str(), c.password.as_str()), ("alice", "p@ss"));
        assert_eq!(c.database, "shop");
        let url = PostgresUrl::parse_str(
            "postgresql://bob@localhost/test?host=/tmp/pg&port=5499",
            "u",
        )
        .expect("valid");
        let c = url.replication_config("s", "p", Lsn(0), Lsn(0), STATUS_INTERVAL);
        assert_eq!(
            c.unix_socket_path(),
            std::path::Path::new("/tmp/pg/.s.PGSQL.5499")
        );
        assert_eq!(c.password, "");
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
