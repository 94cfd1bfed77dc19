//! How a stored bookmark resumes on the connected server: by its own file and position
//! (verified: the file is there, the position is an event boundary inside it, on MariaDB the
//! GTID state there is the bookmark's), carried over to another server by its GTID state,
//! or refused — never resumed on a binlog history that is not the one it was read from.

use faucet_core::FaucetError;

use super::bookmark::CdcBookmark;
use super::position::{self, BinlogPos, GtidState, Holding, MariadbGtid};
use super::server::{self, ServerFacts};
use super::stream::CarryFrom;
use super::{CONNECTOR, MysqlCdcSource, mysql_carry};

impl MysqlCdcSource {
    /// How to resume from bookmark `b` on the connected server: by file and position when
    /// `b` is this server's (`server_id` / `server_uuid` the same) and its position is
    /// verified — the file is there, an event starts at the position (or it is the file's
    /// end), and on MariaDB the server's binlog reaches the bookmark's GTID state and has
    /// that state at the position (`BINLOG_GTID_POS`); else by GTID ([`Self::carry_over`] on
    /// MariaDB, `mysql_carry::carry_over` on MySQL) when `b` is another server's, `by_gtid`,
    /// or this server's with its file gone ([`Self::file_gone`]). A bookmark of this server
    /// whose position does not verify is refused as a diverged history: after `RESET MASTER`
    /// the server reuses file names, offsets and GTIDs for other transactions, and nothing
    /// resumed there is safe. The returned bookmark is `b` with its GTID state filled in
    /// where an old bookmark had none and the server told it, and where the dump starts by
    /// GTID, from what.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`]: "history diverged: re-snapshot" (the checks above), the
    /// file was purged, or the bookmark cannot be carried over (see [`Self::carry_over`]).
    pub(super) async fn plan_resume(
        &self,
        conn: &mut mysql_async::Conn,
        facts: &ServerFacts,
        files: &[String],
        mut b: CdcBookmark,
    ) -> Result<(CdcBookmark, Option<CarryFrom>), FaucetError> {
        let other_kind = if facts.mariadb {
            b.server.server_uuid.is_some()
        } else {
            b.server.server_uuid.is_none() && facts.identity.server_uuid.is_some()
        };
        if other_kind {
            // A MariaDB server has no server_uuid, a MySQL one has: the bookmark was made on
            // the other kind, whose positions and GTIDs mean nothing here.
            let (made_on, this) = if facts.mariadb {
                ("MySQL", "MariaDB")
            } else {
                ("MariaDB", "MySQL")
            };
            return Err(FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "the bookmark was made on a {made_on} server (server_id {}, `server.server_uuid` \
                     {}), but this server (server_id {}) is {this}: binlog positions and GTIDs of \
                     one do not apply to the other. Point connection_url back at that server, or \
                     delete this pipeline's state and re-snapshot the tables from this one",
                    b.server.server_id,
                    b.server.server_uuid.as_deref().unwrap_or("null"),
                    facts.identity.server_id,
                ),
                None,
            ));
        }
        let same_server = b.server.server_id == facts.identity.server_id
            && !(b.server.server_uuid.is_some()
                && facts.identity.server_uuid.is_some()
                && b.server.server_uuid != facts.identity.server_uuid);
        if b.by_gtid || !same_server {
            return self.carry(conn, facts, files, b).await;
        }
        if !files.contains(&b.position.file) {
            return self.file_gone(conn, facts, files, b).await;
        }
        if let Some(why) = server::not_an_event_boundary(conn, &b.position).await? {
            return Err(diverged(&b, &why));
        }
        if facts.mariadb {
            if let Some(state) = &b.gtid_state {
                let current = server::gtid_binlog_pos(conn).await?;
                if current.holds(state) != Holding::Holds {
                    return Err(diverged(
                        &b,
                        &format!(
                            "this server's binlog ends at GTID state {current} \
                             (@@gtid_binlog_pos), before the bookmark's {state}, though the \
                             bookmark was read from it"
                        ),
                    ));
                }
            }
            let at = server::gtid_state_at(conn, &b.position).await?;
            let said = || {
                b.gtid_state
                    .as_ref()
                    .map(ToString::to_string)
                    .or_else(|| b.gtid.clone())
                    .unwrap_or_default()
            };
            match check_position(b.gtid.as_deref(), b.gtid_state.as_ref(), at.as_deref()) {
                PositionCheck::Verified(state) => {
                    if b.gtid_state.is_none() {
                        b.gtid_state = state;
                    }
                }
                PositionCheck::CannotVerify => {
                    return Err(diverged(
                        &b,
                        &format!(
                            "the server cannot compute the GTID state at the bookmark's \
                             position (BINLOG_GTID_POS is NULL), so that the position holds \
                             {} cannot be verified. MariaDB answers NULL after an event larger \
                             than its max_allowed_packet in the same file: if the binlog was \
                             not reset, raise max_allowed_packet above the largest event and \
                             run again",
                            said()
                        ),
                    ));
                }
                PositionCheck::Differs => {
                    return Err(diverged(
                        &b,
                        &format!(
                            "this server's binlog has another GTID state at the bookmark's \
                             position: {} there, where the bookmark says {}",
                            at.as_deref().unwrap_or("none"),
                            said()
                        ),
                    ));
                }
            }
        }
        Ok((b, None))
    }

    /// A bookmark of this server (its `server_id` / `server_uuid`) whose binlog file is not
    /// in the server's binlog (`files`, oldest first):
    /// * files of the bookmark's name numbered past its file are there: the file was purged
    ///   from a history that goes on. With a GTID state the bookmark is carried over (the
    ///   checks of [`Self::carry`]); on MariaDB only when the oldest file starts exactly at
    ///   the bookmark's state (`BINLOG_GTID_POS(oldest, 4)`): past it, changes were purged;
    ///   anything else is not a continuation of the bookmark's history. Without a state:
    ///   refused as purged;
    /// * files of the bookmark's name are there, none numbered past its file: the binlog was
    ///   started again (`RESET MASTER`, a restore) and its GTIDs and positions may be reused
    ///   for other transactions: refused as a diverged history;
    /// * no file of the bookmark's name: a server rebuilt with the same `server_id` and a
    ///   binlog of its own (`--log-bin` of another name, its transactions replicated from the
    ///   bookmark's server): carried over by GTID state as from another server.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] naming which, with the fix.
    async fn file_gone(
        &self,
        conn: &mut mysql_async::Conn,
        facts: &ServerFacts,
        files: &[String],
        b: CdcBookmark,
    ) -> Result<(CdcBookmark, Option<CarryFrom>), FaucetError> {
        let stem = |f: &str| f.rsplit_once('.').map_or(f, |(s, _)| s).to_owned();
        let own = stem(&b.position.file);
        let numbers: Vec<Option<u64>> = files
            .iter()
            .filter(|f| stem(f) == own)
            .map(|f| position::file_number(f))
            .collect();
        let has_state = b.gtid_state.is_some() || b.gtid_set.is_some();
        if numbers.is_empty() {
            if !has_state {
                server::require_file(files, &b.position)?;
            }
            tracing::info!(
                source = CONNECTOR,
                position = %b.position,
                "this server (the bookmark's server_id) logs to binlog files of another name                  (a rebuilt server?): carrying the bookmark over by its GTID state"
            );
            return self.carry(conn, facts, files, b).await;
        }
        let later = numbers.iter().any(|n| {
            n.zip(b.position.file_number())
                .is_some_and(|(n, own)| n > own)
        });
        if !later {
            return Err(diverged(
                &b,
                &format!(
                    "its binlog file `{}` is gone, and this server's binlog files of that name \
                             ({}) are numbered at or before it: the binlog was started again (RESET \
                             MASTER, a restore)",
                    b.position.file,
                    files.join(", ")
                ),
            ));
        }
        if !has_state {
            server::require_file(files, &b.position)?;
        }
        if let (true, Some(needed), Some(oldest)) = (facts.mariadb, &b.gtid_state, files.first()) {
            let at_start = server::gtid_state_at(conn, &BinlogPos::new(oldest.clone(), 4))
                .await?
                .and_then(|s| GtidState::parse(&s));
            match at_start {
                Some(s) if s == *needed => {}
                Some(s) if s.purged_past(needed).is_some() => {
                    server::require_file(files, &b.position)?;
                }
                other => {
                    return Err(diverged(
                        &b,
                        &format!(
                            "its binlog file `{}` is gone, and the oldest file left, `{oldest}`, \
                             starts at GTID state {}, not at the bookmark's {needed} or after it",
                            b.position.file,
                            other.map_or_else(|| "unknown".to_owned(), |s| s.to_string()),
                        ),
                    ));
                }
            }
        }
        tracing::info!(
            source = CONNECTOR,
            position = %b.position,
            "the bookmark's binlog file was purged, the binlog after it goes on: carrying it \
             over by its GTID state"
        );
        self.carry(conn, facts, files, b).await
    }

    /// Carries `b` over by its GTID state ([`Self::carry_over`] on MariaDB,
    /// `mysql_carry::carry_over` on MySQL): the bookmark with the state it starts from, and
    /// that state.
    ///
    /// # Errors
    /// As [`Self::carry_over`] / `mysql_carry::carry_over`.
    async fn carry(
        &self,
        conn: &mut mysql_async::Conn,
        facts: &ServerFacts,
        files: &[String],
        mut b: CdcBookmark,
    ) -> Result<(CdcBookmark, Option<CarryFrom>), FaucetError> {
        let from = if facts.mariadb {
            CarryFrom::Mariadb(self.carry_over(conn, facts, files, &b).await?)
        } else {
            CarryFrom::Mysql(
                mysql_carry::carry_over(conn, &b, |why| carry_refusal(&b, facts, files, why))
                    .await?,
            )
        };
        tracing::info!(
            source = CONNECTOR,
            from_server_id = b.server.server_id,
            server_id = facts.identity.server_id,
            gtid_state = %from,
            "the bookmark is carried over to this server by its GTID state"
        );
        match &from {
            CarryFrom::Mariadb(state) => b.gtid_state = Some(state.clone()),
            CarryFrom::Mysql(set) => b.gtid_set = Some(set.clone()),
        }
        Ok((b, Some(from)))
    }

    /// Carries bookmark `b`, made on another MariaDB server (or carried over before and not
    /// yet settled: `by_gtid`), over to the connected one by its GTID state, and returns the
    /// state the dump starts from. MySQL's carry-over, by GTID set, is `mysql_carry`.
    ///
    /// Checked before anything is read, each failure a [`FaucetError::Bookmark`] saying
    /// which:
    /// * the bookmark has a GTID state (`gtid_state`; an old bookmark's single `gtid` stands
    ///   for it only when the server has that one domain), and inside a transaction its GTID;
    /// * the server's `@@gtid_binlog_pos` reaches the state (and the partly delivered
    ///   transaction) in every domain: else it has not logged them (a replica that had not
    ///   caught up), and resuming would skip what it logs later under those numbers;
    /// * the same sequence number with another origin server is a diverged history;
    /// * the oldest binlog file left does not start past the state (`BINLOG_GTID_POS(file,
    ///   4)`): else the transactions between were purged.
    ///
    /// What cannot be checked here: that the server's transaction under a needed
    /// `domain-seq` with a larger number after it is *the same* transaction (a server that
    /// took writes of its own under the same domain, with `gtid_strict_mode` off). The dump
    /// is started with `@slave_gtid_strict_mode=1`, so the server itself refuses a state
    /// that is not in its binlog (error 1236, mapped by [`stream::gtid_stream_error`]); a
    /// divergence after the state's GTIDs is not detectable by a reader.
    async fn carry_over(
        &self,
        conn: &mut mysql_async::Conn,
        facts: &ServerFacts,
        files: &[String],
        b: &CdcBookmark,
    ) -> Result<GtidState, FaucetError> {
        let refuse = |why: String| carry_refusal(b, facts, files, why);
        let current = server::gtid_binlog_pos(conn).await?;
        let needed = match (
            &b.gtid_state,
            b.gtid.as_deref().and_then(MariadbGtid::parse),
        ) {
            (Some(state), _) => state.clone(),
            (None, Some(g)) if current.len() == 1 && current.get(g.domain).is_some() => {
                GtidState::of(g)
            }
            (None, Some(g)) => {
                return Err(refuse(format!(
                    "the bookmark holds only its last GTID {g}, not the GTID state of every \
                     domain, and this server logs the domains {} (a bookmark of an older \
                     faucet): it cannot be carried over. Point connection_url back at that \
                     server and run once to refresh the bookmark, or delete this pipeline's \
                     state and re-snapshot the tables from this one",
                    current
                        .domains()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            (None, None) => {
                return Err(refuse(
                    "the bookmark has no GTID to carry the position over, and its binlog \
                     positions do not apply here. Point connection_url back at that server, or \
                     delete this pipeline's state and re-snapshot the tables from this one"
                        .to_owned(),
                ));
            }
        };
        let mut reach = needed.clone();
        if let Some(t) = &b.in_txn {
            let Some(g) = t.gtid.as_deref().and_then(MariadbGtid::parse) else {
                return Err(refuse(
                    "the bookmark is inside a transaction without a MariaDB GTID, which cannot \
                     be found on another server. Point connection_url back at that server to \
                     finish it"
                        .to_owned(),
                ));
            };
            reach.apply(g);
        }
        match current.holds(&reach) {
            Holding::Holds => {}
            Holding::Behind { needed, has } => {
                return Err(refuse(format!(
                    "this server's binlog has not logged transaction {needed} that the \
                     bookmark was read up to: in domain {} it ends at {} (@@gtid_binlog_pos {}). \
                     A replica that has not caught up? Wait until its @@gtid_binlog_pos \
                     reaches {reach}, or point connection_url back at that server; resuming \
                     now would lose or skip changes",
                    needed.domain,
                    has.map_or_else(|| "nothing".to_owned(), |g| g.to_string()),
                    current,
                )));
            }
            Holding::Diverged { needed, has } => {
                return Err(refuse(format!(
                    "this server logged {has} where the bookmark's server logged {needed}: a \
                     different transaction under the same domain and number, so the two \
                     histories diverged and no position on this server follows the bookmark. \
                     Delete this pipeline's state and re-snapshot the tables from this one"
                )));
            }
        }
        if let Some(oldest) = files.first() {
            let at_start = server::gtid_state_at(conn, &BinlogPos::new(oldest.clone(), 4))
                .await?
                .and_then(|s| GtidState::parse(&s));
            if let Some((want, first)) = at_start.and_then(|s| s.purged_past(&needed)) {
                return Err(refuse(format!(
                    "this server's oldest binlog `{oldest}` starts after {first}, but the \
                     bookmark needs the transactions of domain {} after {}: they were purged, \
                     and the changes in between are gone here. Re-snapshot the tables, delete this \
                     pipeline's state, and start again; keep binlogs longer than the longest \
                     pause (binlog_expire_logs_seconds / expire_logs_days)",
                    first.domain,
                    want.map_or_else(|| "its first".to_owned(), |g| g.to_string()),
                )));
            }
        }
        Ok(needed)
    }
}

/// The refusal of a bookmark of this server whose binlog history is not the one it was read
/// from (`why`: what shows it): its positions and GTIDs may name other transactions now, so
/// no resume is safe, by position or by GTID.
fn diverged(b: &CdcBookmark, why: &str) -> FaucetError {
    FaucetError::bookmark(
        CONNECTOR,
        format!(
            "history diverged: re-snapshot. The bookmark ({}, GTID state {}) was read from this \
             server's binlog (server_id {}), but {why}. The binlog is not the history the \
             bookmark was read from, and its positions and GTIDs may name other transactions: \
             resuming by position or by GTID could skip changes. Delete this pipeline's state \
             and re-snapshot the tables (copy them anew, e.g. `faucet replicate`)",
            b.position,
            b.gtid_state
                .as_ref()
                .map(ToString::to_string)
                .or_else(|| b.gtid_set.as_ref().map(ToString::to_string))
                .or_else(|| b.gtid.clone())
                .unwrap_or_else(|| "none".to_owned()),
            b.server.server_id,
        ),
        None,
    )
}

/// The bookmark error of a carry-over of `b` to the server of `facts` (binlog files
/// `files`) refused for `why`, naming both servers (or, for a bookmark of this server, why
/// its position was not taken: its file is not in the binlog, or the server's GTID state
/// there is not the bookmark's).
fn carry_refusal(
    b: &CdcBookmark,
    facts: &ServerFacts,
    files: &[String],
    why: String,
) -> FaucetError {
    let uuid = |u: Option<&str>| u.map(|u| format!(" ({u})")).unwrap_or_default();
    let whose = if b.server == facts.identity && !b.by_gtid && files.contains(&b.position.file) {
        format!(
            "this server's binlog (server_id {}{}, the bookmark's) has another GTID state at \
             the bookmark's position {} than the bookmark's `gtid_state` (a server rebuilt \
             with the same server_id, or an edited state), so it is carried over by its GTID \
             state",
            facts.identity.server_id,
            uuid(facts.identity.server_uuid.as_deref()),
            b.position,
        )
    } else if b.server == facts.identity && !b.by_gtid {
        format!(
            "the bookmark's position {} is not in this server's binlog (server_id {}{}, the \
             bookmark's: its file was purged, or the server was rebuilt), so it is carried \
             over by its GTID state",
            b.position,
            facts.identity.server_id,
            uuid(facts.identity.server_uuid.as_deref()),
        )
    } else {
        format!(
            "the bookmark was made on the server with server_id {}{} at {}, but this one has \
             server_id {}{} (a failover or a rebuilt server?)",
            b.server.server_id,
            uuid(b.server.server_uuid.as_deref()),
            b.position,
            facts.identity.server_id,
            uuid(facts.identity.server_uuid.as_deref()),
        )
    };
    FaucetError::bookmark(CONNECTOR, format!("{whose}: {why}"), None)
}

/// What the GTID state a server computes at a bookmark's position (`BINLOG_GTID_POS`) says
/// about a bookmark of that server ([`check_position`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum PositionCheck {
    /// The state there is the bookmark's (or the bookmark has none to compare): the
    /// server's state there, when it told one.
    Verified(Option<GtidState>),
    /// The server could not compute it (NULL): the position is taken as the server's own,
    /// with a warning. MariaDB 10.11 answers NULL for every position after an event larger
    /// than its `max_allowed_packet` in the same file, and for a position that is not an
    /// event boundary (which the dump then refuses).
    CannotVerify,
    /// A different state: not the binlog the bookmark was read from.
    Differs,
}

/// The decision of [`PositionCheck`] for a bookmark with last GTID `gtid` and GTID state
/// `state` (either may be missing: older bookmarks, a first run on a server that could not
/// tell), given the server's answer `at` (`None`: NULL).
fn check_position(
    gtid: Option<&str>,
    state: Option<&GtidState>,
    at: Option<&str>,
) -> PositionCheck {
    let Some(at) = at else {
        return if gtid.is_none() && state.is_none() {
            PositionCheck::Verified(None)
        } else {
            PositionCheck::CannotVerify
        };
    };
    let Some(server_state) = GtidState::parse(at) else {
        return PositionCheck::CannotVerify;
    };
    let same = match (state, gtid) {
        (Some(state), _) => *state == server_state,
        (None, Some(gtid)) => at.split(',').any(|g| g.trim() == gtid),
        (None, None) => true,
    };
    if same {
        PositionCheck::Verified(Some(server_state))
    } else {
        PositionCheck::Differs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NULL `BINLOG_GTID_POS` (the server cannot compute it) is not evidence of another
    /// binlog: the resume goes on with a warning; a different state is a refusal.
    #[test]
    fn a_null_gtid_state_cannot_verify_and_a_different_one_refuses() {
        let st = |t: &str| GtidState::parse(t).expect("state");
        let state = st("0-1-30,7-1-4");
        assert_eq!(
            check_position(Some("0-1-30"), Some(&state), None),
            PositionCheck::CannotVerify
        );
        assert_eq!(
            check_position(Some("0-1-30"), None, None),
            PositionCheck::CannotVerify
        );
        assert_eq!(
            check_position(None, None, None),
            PositionCheck::Verified(None),
            "nothing to verify"
        );
        // The server's order of domains is its own.
        assert_eq!(
            check_position(Some("0-1-30"), Some(&state), Some("7-1-4,0-1-30")),
            PositionCheck::Verified(Some(state.clone()))
        );
        assert_eq!(
            check_position(Some("0-1-30"), Some(&state), Some("0-1-30,7-1-5")),
            PositionCheck::Differs
        );
        assert_eq!(
            check_position(Some("0-1-30"), Some(&state), Some("0-1-30")),
            PositionCheck::Differs,
            "a domain missing"
        );
        // Old bookmarks: the last GTID must be in the state there, which then fills it in.
        assert_eq!(
            check_position(Some("0-1-30"), None, Some("7-1-4,0-1-30")),
            PositionCheck::Verified(Some(state))
        );
        assert_eq!(
            check_position(Some("0-1-30"), None, Some("0-1-29")),
            PositionCheck::Differs
        );
        assert_eq!(
            check_position(Some("0-1-30"), None, Some("not a state")),
            PositionCheck::CannotVerify
        );
        assert_eq!(
            check_position(None, None, Some("")),
            PositionCheck::Verified(Some(GtidState::default()))
        );
    }
}
