//! The stream's GTID bookkeeping beyond a commit: MySQL's GTID set (a transaction added,
//! a file's PREVIOUS_GTIDS taken), and a carried-over MariaDB stream settling on the
//! connected server's own position.

use super::super::gtid_set::{MysqlGtid, MysqlGtidSet};
use super::super::position::{BinlogPos, GtidState};
use super::{CONNECTOR, CdcPageStream};

impl CdcPageStream {
    /// MySQL: adds the GTID of the transaction just committed (`self.gtid`) to the GTID
    /// set; a transaction without one (anonymous) ends the set, with a warning.
    pub(super) fn add_to_gtid_set(&mut self) {
        let Some(set) = self.gtid_set.as_mut() else {
            return;
        };
        match self.gtid.as_deref().map(MysqlGtid::parse) {
            Some(Ok(g)) => {
                if set.contains(&g) {
                    // The set holds what was read before: the server sent it twice.
                    tracing::warn!(
                        source = CONNECTOR,
                        gtid = %g,
                        "the binlog stream sent transaction {g} again, which the GTID set \
                         already holds: its changes may be delivered twice"
                    );
                }
                set.add(&g);
            }
            other => {
                tracing::warn!(
                    source = CONNECTOR,
                    at = %self.position,
                    gtid = ?other,
                    "a transaction without a MySQL GTID (gtid_mode is not ON): from here on \
                     bookmarks have no GTID set, and cannot be carried over to another server"
                );
                self.gtid_set = None;
                self.gtid_set_lost = true;
            }
        }
    }

    /// MySQL: a file's PREVIOUS_GTIDS is the GTID set at its start; a stream without a set
    /// (a first run from `start: beginning` or `start.at` with offset 4) takes it when it
    /// reads the file from its start: between transactions, its position in that file, and
    /// no transaction without a GTID passed.
    pub(super) fn previous_gtids(&mut self, set: MysqlGtidSet) {
        if self.gtid_set.is_none()
            && !self.gtid_set_lost
            && self.server.server_uuid.is_some()
            && self.txn.is_none()
            && self.pending_gtid.is_none()
            && self.resume.is_none()
            && self.carry.is_none()
            && self.position.file == self.file
        {
            tracing::info!(
                source = CONNECTOR,
                at = %self.position,
                gtid_set = %set,
                "the GTID set is known from here on (the file's PREVIOUS_GTIDS)"
            );
            self.gtid_set = Some(set);
        }
    }

    /// Settles a carried-over stream at `at`, the end of the transaction just committed, when
    /// the server's GTID state there (`BINLOG_GTID_POS`, on the catalog connection) is the
    /// stream's: then every event before `at` is at or before the state in its domain and
    /// every event after it past it (sequence numbers grow within a domain), so a file
    /// position resume from `at` neither repeats nor skips. This settles a stream one of
    /// whose domains gets no new transaction (which the domain count alone never would). Any
    /// other answer, or a failed query, leaves the stream carried (bookmarks `by_gtid`).
    pub(super) async fn try_settle(&mut self, at: BinlogPos) {
        let Some(state) = self.gtid_state.clone() else {
            return;
        };
        if self.catalog_conn.is_none() {
            self.catalog_conn = self.connection.connect().await.ok();
        }
        let Some(conn) = self.catalog_conn.as_mut() else {
            return;
        };
        let answer = match super::super::server::gtid_state_at(conn, &at).await {
            Ok(answer) => answer,
            Err(_) => {
                self.catalog_conn = None;
                return;
            }
        };
        if answer.as_deref().and_then(GtidState::parse) != Some(state) {
            return;
        }
        if let Some(c) = self.carry.take() {
            tracing::info!(
                source = CONNECTOR,
                server_id = c.server.server_id,
                at = %at,
                "the carried-over stream settled on this server's binlog position (its GTID \
                 state there is the stream's)"
            );
            self.server = c.server;
            self.position = at;
        }
    }
}
