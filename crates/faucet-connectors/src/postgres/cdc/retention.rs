//! The slot's retained WAL and its retention horizon ([`faucet_core::Retention`]).
//!
//! A logical replication slot keeps every WAL segment from its `restart_lsn` on, so a
//! stopped pipeline makes the server retain ever more WAL. With `max_slot_wal_keep_size`
//! set (PostgreSQL 13+; `-1`, the default, is unlimited) the server invalidates the slot once
//! it would retain more, and the pipeline can then only start over from a new slot. Each
//! sample is one statement on a session of its own (reopened after a failure):
//!
//! ```sql
//! SELECT (pg_current_wal_lsn() - '0/0')::bigint,          -- the server's WAL position
//!        (pg_current_wal_lsn() - restart_lsn)::bigint,    -- retained bytes
//!        safe_wal_size,                                   -- bytes left before danger
//!        pg_size_bytes(current_setting('max_slot_wal_keep_size'))
//!   FROM pg_replication_slots WHERE slot_name = $1
//! ```
//!
//! The WAL rate is the growth of the server's position between the oldest sample of the
//! last [`RATE_WINDOW`] and the newest (at least a second apart), so a burst fades out of it
//! within minutes; the horizon is `safe_wal_size / rate`: how long, at that rate, until the
//! slot would be invalidated if the pipeline stayed stopped (the server's own `safe_wal_size`
//! already accounts for its segment rounding). No horizon when the size is unlimited, before
//! the rate is known, or when nothing is written (an idle server never loses the slot).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::PgConnection;

use faucet_core::{Bookmark, FaucetError, Retention, RetentionMonitor};

use super::CONNECTOR;
use crate::postgres::connection::PostgresUrl;

/// How far back the WAL rate looks: 5 minutes.
pub const RATE_WINDOW: Duration = Duration::from_secs(300);

/// The shortest span two samples must cover for a rate.
const MIN_SPAN: Duration = Duration::from_secs(1);

const SAMPLE: &str = "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, \
     (pg_current_wal_lsn() - restart_lsn)::bigint, safe_wal_size, \
     pg_size_bytes(current_setting('max_slot_wal_keep_size')) \
     FROM pg_replication_slots WHERE slot_name = $1";

/// Samples the retention of one slot (module docs).
pub(crate) struct SlotMonitor {
    connection: PostgresUrl,
    slot: String,
    conn: Option<PgConnection>,
    /// `(when, the server's WAL position)`, oldest first, within [`RATE_WINDOW`].
    positions: VecDeque<(Instant, u64)>,
}

impl SlotMonitor {
    pub(crate) fn new(connection: PostgresUrl, slot: String) -> Self {
        Self {
            connection,
            slot,
            conn: None,
            positions: VecDeque::new(),
        }
    }

    /// Records the server's position at `at` and returns the WAL rate over the window.
    fn rate(&mut self, at: Instant, position: u64) -> Option<f64> {
        self.positions.push_back((at, position));
        while self
            .positions
            .front()
            .is_some_and(|(t, _)| at.duration_since(*t) > RATE_WINDOW)
            && self.positions.len() > 2
        {
            self.positions.pop_front();
        }
        let (t0, p0) = *self.positions.front()?;
        let span = at.duration_since(t0);
        if span < MIN_SPAN {
            return None;
        }
        Some(position.saturating_sub(p0) as f64 / span.as_secs_f64())
    }
}

/// The horizon of `remaining` bytes at `rate` bytes per second (module docs).
fn horizon(remaining: Option<u64>, rate: Option<f64>) -> Option<f64> {
    match (remaining, rate) {
        (Some(left), Some(r)) if r > 0.0 => Some(left as f64 / r),
        _ => None,
    }
}

fn non_negative(v: Option<i64>) -> Option<u64> {
    v.and_then(|v| u64::try_from(v).ok())
}

#[async_trait]
impl RetentionMonitor for SlotMonitor {
    /// The slot holds its own position: `_bookmark` is not needed.
    async fn sample(&mut self, _bookmark: Option<&Bookmark>) -> Result<Retention, FaucetError> {
        if self.conn.is_none() {
            self.conn = Some(self.connection.connect_sql().await?);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(FaucetError::read(CONNECTOR, "no session", None));
        };
        type Row = (i64, Option<i64>, Option<i64>, i64);
        let row: Option<Row> = match sqlx::query_as(SAMPLE)
            .bind(&self.slot)
            .fetch_optional(&mut *conn)
            .await
        {
            Ok(row) => row,
            Err(e) => {
                self.conn = None;
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!("cannot read the retention of slot `{}`", self.slot),
                    Some(Box::new(e)),
                ));
            }
        };
        let Some((position, retained, safe, limit)) = row else {
            return Err(FaucetError::read(
                CONNECTOR,
                format!("replication slot `{}` does not exist", self.slot),
                None,
            ));
        };
        let rate = self.rate(Instant::now(), non_negative(Some(position)).unwrap_or(0));
        let limit_bytes = non_negative(Some(limit));
        let remaining_bytes = limit_bytes.and(non_negative(safe).or(Some(0)));
        Ok(Retention {
            // A slot that never reserved WAL has no restart_lsn yet: it retains nothing.
            retained_bytes: Some(non_negative(retained).unwrap_or(0)),
            limit_bytes,
            remaining_bytes,
            rate_bytes_per_second: rate,
            horizon_seconds: horizon(remaining_bytes, rate),
            ..Retention::unknown()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_spans_the_window_and_the_horizon_needs_a_limit_and_a_rate() {
        let url =
            PostgresUrl::parse_str("postgres://u@127.0.0.1/db", "connection_url").expect("url");
        let mut m = SlotMonitor::new(url, "s".into());
        let t0 = Instant::now();
        assert_eq!(m.rate(t0, 1_000), None, "one sample");
        assert_eq!(
            m.rate(t0 + Duration::from_millis(500), 2_000),
            None,
            "too short"
        );
        assert_eq!(m.rate(t0 + Duration::from_secs(2), 5_000), Some(2_000.0));
        // Samples older than the window fall out (the two newest always stay).
        let later = t0 + RATE_WINDOW + Duration::from_secs(10);
        assert_eq!(m.rate(later, 5_000 + 100 * 308), Some(100.0));
        assert_eq!(horizon(Some(1_000), Some(10.0)), Some(100.0));
        assert_eq!(horizon(None, Some(10.0)), None, "unlimited");
        assert_eq!(horizon(Some(1_000), None), None, "no rate yet");
        assert_eq!(horizon(Some(1_000), Some(0.0)), None, "nothing written");
    }
}
