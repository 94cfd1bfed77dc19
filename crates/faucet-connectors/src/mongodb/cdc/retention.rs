//! The oplog window and the bookmark's place in it ([`faucet_core::Retention`]): MongoDB's
//! twin of a PostgreSQL slot's retention horizon. The oplog is one capped collection for the
//! whole replica set, so nothing is retained per pipeline (no byte figures): what matters is
//! how much time it holds and how far the pipeline's bookmark is from its oldest end.
//!
//! Each sample reads the oldest and newest entries of `local.oplog.rs` (`$natural` order; the
//! user needs `find` on it) and gives
//! * `window_seconds`: newest minus oldest entry's time (`faucet_oplog_window_seconds`);
//! * `bookmark_age_seconds`: newest entry's time minus the bookmark's cluster time;
//! * `horizon_seconds`: the bookmark's cluster time minus the oldest entry's: how long a
//!   stopped pipeline may stay stopped, if the window keeps its length in time.
//!
//! The CLI warns when the age reaches [`faucet_core::Retention::NEAR_WINDOW`] of the window.
//! mongod documents the same figures through `rs.printReplicationInfo()` (`db.getReplicationInfo()`:
//! `tFirst`, `tLast`, `timeDiff` from the same two oplog entries) and `replSetGetStatus`'s
//! `optimes`; SecantusDB answers `local.oplog.rs` queries (checked), has no
//! `serverStatus().oplog`.

use async_trait::async_trait;
use mongodb::Client;

use faucet_core::{Bookmark, FaucetError, Retention, RetentionMonitor};

use super::CONNECTOR;
use super::bookmark::CdcBookmark;
use super::probe::{OplogWindow, oplog_window};
use crate::mongodb::connection::MongoConnection;

/// Samples the oplog window (module docs), on a client of its own.
pub(crate) struct OplogMonitor {
    connection: MongoConnection,
    client: Option<Client>,
}

impl OplogMonitor {
    pub(crate) fn new(connection: MongoConnection) -> Self {
        Self {
            connection,
            client: None,
        }
    }
}

/// The figures of `window` for a bookmark read up to cluster time `at` (module docs).
pub(crate) fn retention(window: OplogWindow, at: Option<mongodb::bson::Timestamp>) -> Retention {
    Retention {
        window_seconds: Some(window.seconds() as f64),
        bookmark_age_seconds: at.map(|t| f64::from(window.last.time.saturating_sub(t.time))),
        horizon_seconds: at.map(|t| f64::from(t.time.saturating_sub(window.first.time))),
        ..Retention::unknown()
    }
}

#[async_trait]
impl RetentionMonitor for OplogMonitor {
    /// `bookmark`: the pipeline's last durable one (a bookmark of another source is
    /// ignored: the window alone is sampled).
    async fn sample(&mut self, bookmark: Option<&Bookmark>) -> Result<Retention, FaucetError> {
        if self.client.is_none() {
            self.client = Some(self.connection.client().await?);
        }
        let Some(client) = self.client.as_ref() else {
            return Err(FaucetError::read(CONNECTOR, "no client", None));
        };
        let window = oplog_window(client).await.ok_or_else(|| {
            FaucetError::read(
                CONNECTOR,
                format!(
                    "cannot read local.oplog.rs on {} (the user needs the find action on it): \
                     the oplog window is unknown",
                    self.connection.describe()
                ),
                None,
            )
        })?;
        let at = bookmark
            .filter(|b| !b.is_null())
            .and_then(|b| CdcBookmark::from_json(b).ok())
            .and_then(|b| b.cluster_time);
        Ok(retention(window, at))
    }
}

#[cfg(test)]
mod tests {
    use mongodb::bson::Timestamp;

    use super::*;

    fn ts(time: u32) -> Timestamp {
        Timestamp { time, increment: 1 }
    }

    #[test]
    fn the_horizon_is_the_bookmark_time_past_the_oldest_entry() {
        let w = OplogWindow {
            first: ts(1_000),
            last: ts(2_000),
        };
        let r = retention(w, Some(ts(1_900)));
        assert_eq!(r.window_seconds, Some(1_000.0));
        assert_eq!(r.bookmark_age_seconds, Some(100.0));
        assert_eq!(r.horizon_seconds, Some(900.0));
        assert!(!r.near_window_end());
        let old = retention(w, Some(ts(1_150)));
        assert_eq!(old.bookmark_age_seconds, Some(850.0));
        assert!(old.near_window_end(), "850 of 1000 s is near the end");
        let none = retention(w, None);
        assert_eq!(
            (none.horizon_seconds, none.bookmark_age_seconds),
            (None, None)
        );
        assert!(!none.near_window_end());
        assert_eq!(
            none.retained_bytes, None,
            "an oplog retains no bytes per pipeline"
        );
    }
}
