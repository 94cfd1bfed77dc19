//! The `mysql-cdc` bookmark: where to resume, and on which server.
//!
//! ```json
//! {"binlog_file": "mariadb-bin.000003", "binlog_pos": 1234, "gtid": "0-1-30",
//!  "gtid_state": "0-1-30,7-1-4", "server": {"server_id": 1, "server_uuid": null}}
//! {"binlog_file": "mariadb-bin.000003", "binlog_pos": 1234, "gtid": "0-1-30",
//!  "gtid_state": "0-1-30,7-1-4", "server": {"server_id": 1, "server_uuid": null},
//!  "in_txn": {"binlog_pos": 1300, "gtid": "0-1-31", "skip": 10000}}
//! ```
//!
//! * `shapes` / `column_renames` (absent when none): the table shapes delivered and the
//!   column renames read since, for schema-change records across restarts (module
//!   `super::shapes`); inside a transaction, as of its start.
//! * `binlog_file` / `binlog_pos`: the position right after the last transaction delivered
//!   completely (the end of its commit event), or a later event boundary reached between
//!   transactions (events of other tables, a rotation to a new file). Everything committed
//!   before it was delivered; a resumed stream requests the binlog from there.
//! * `gtid`: the GTID of that last transaction (MariaDB `domain-server-seq`, MySQL `uuid:n`),
//!   or null when none was seen yet or the server logs none.
//! * `gtid_state` (absent from bookmarks made before it existed, and null where the server
//!   could not say): on MariaDB the GTID state at `binlog_pos`, the last GTID of *every*
//!   replication domain (`0-1-30,7-1-4`, as `@@gtid_binlog_pos` prints it), read with
//!   `BINLOG_GTID_POS` where the stream starts and kept up to date with every GTID event the
//!   stream passes, listed tables or not. One `gtid` is not a position on a server with
//!   several domains; the state is, on any server of the replication topology. On MySQL
//!   (the bookmark's `server_uuid` is set) the GTID *set* of every transaction before
//!   `binlog_pos` (`uuid:1-57,uuid2:1-3`, module `gtid_set`): on a first run at the end of
//!   the log the server's `Executed_Gtid_Set` (`SHOW BINARY LOG STATUS`), then every GTID
//!   the stream passes added to it; for a first run from elsewhere (`start: beginning`,
//!   `start.at`), where no server statement gives the set, and for an older bookmark, null
//!   until the stream reads a binlog file from its start (its PREVIOUS_GTIDS event is the
//!   set there); null for good from the first transaction without a GTID (`gtid_mode` not
//!   ON) on.
//! * `server`: the server the position belongs to: its `@@server_id` and, on MySQL, its
//!   `@@server_uuid` (MariaDB has none: null). On the same server the position is checked
//!   with `BINLOG_GTID_POS` (the state there must be `gtid_state`). On another server (a
//!   failover, a rebuilt replica) a MariaDB bookmark with a GTID state is *carried over*:
//!   the stream starts from that state (`@slave_connect_state`), after the checks of
//!   `MysqlCdcSource::carry_over`; a bookmark without one (or any bookmark on MySQL) is
//!   refused. A MySQL bookmark with a GTID set is carried over the same way by
//!   `COM_BINLOG_DUMP_GTID` (written to MySQL's manual, not tested against a server).
//! * `by_gtid: true`, while a carried-over stream has not yet settled on the new server's
//!   own file and position: `binlog_file` / `binlog_pos` / `server` are still the old
//!   server's, and a resume (on any server) starts again from `gtid_state`. The position is
//!   the new server's once every domain of the state the stream started from has been passed
//!   (the server skips, per domain, the transactions up to the state; before it has passed
//!   all of them a file position could replay some), or once the server's GTID state at the
//!   end of a transaction read is the stream's. A MySQL stream carried over never settles
//!   (MySQL has no `BINLOG_GTID_POS` to tell that no transaction of the set lies after a
//!   position): it resumes by its GTID set every time, as MySQL's own replicas do with
//!   `SOURCE_AUTO_POSITION=1`.
//! * `in_txn`, when a page ended inside a transaction (pages hold at most `batch_size`
//!   records, transactions may be larger): the transaction starts at `in_txn.binlog_pos` in
//!   `binlog_file` (the offset of its first event), has GTID `in_txn.gtid` (or null), and its
//!   first `skip` row changes of the listed tables were delivered. A resumed stream reads from
//!   `binlog_pos`, checks that the first transaction is that one, and skips them. Carried
//!   over, the stream starts from `gtid_state` (the state before that transaction) and
//!   checks the first transaction by its GTID alone.

use serde_json::{Map, json};

use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use super::gtid_set::MysqlGtidSet;
use super::position::{BinlogPos, GtidState};

/// The server a bookmark belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerIdentity {
    /// `@@server_id`.
    pub(crate) server_id: u32,
    /// `@@server_uuid` (MySQL), `None` on MariaDB.
    pub(crate) server_uuid: Option<String>,
}

/// A partly delivered transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InTxn {
    /// The offset of the transaction's first event, in the bookmark's file.
    pub(crate) start_pos: u64,
    /// Its GTID, when the server logs one.
    pub(crate) gtid: Option<String>,
    /// How many of its row changes (of the listed tables) were delivered.
    pub(crate) skip: u64,
}

/// A decoded bookmark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CdcBookmark {
    /// Where the binlog is requested from on resume.
    pub(crate) position: BinlogPos,
    /// The GTID of the last transaction delivered completely.
    pub(crate) gtid: Option<String>,
    /// MariaDB: the GTID state at `position`, when known.
    pub(crate) gtid_state: Option<GtidState>,
    /// MySQL: the GTID set of every transaction before `position`, when known. At most one
    /// of `gtid_state` / `gtid_set` is set (the JSON's `gtid_state` holds either, told apart
    /// by `server.server_uuid`, which only MySQL has).
    pub(crate) gtid_set: Option<MysqlGtidSet>,
    /// A carried-over stream not settled on the new server's position yet: resume from
    /// `gtid_state`, whatever the server.
    pub(crate) by_gtid: bool,
    /// The server of `position`.
    pub(crate) server: ServerIdentity,
    /// The transaction a page ended inside, if any.
    pub(crate) in_txn: Option<InTxn>,
}

fn invalid(bookmark: &Bookmark, why: &str) -> FaucetError {
    FaucetError::bookmark(
        CONNECTOR,
        format!(
            "`{bookmark}` is not a mysql-cdc bookmark ({why}); expected {{\"binlog_file\": ..., \
             \"binlog_pos\": N, \"gtid\": ..., \"server\": {{\"server_id\": N, \
             \"server_uuid\": ...}}}}"
        ),
        None,
    )
}

fn opt_text(v: Option<&serde_json::Value>) -> Result<Option<String>, ()> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
    }
}

impl CdcBookmark {
    /// The JSON form.
    pub(crate) fn to_json(&self) -> Bookmark {
        let mut out = Map::new();
        out.insert("binlog_file".into(), json!(self.position.file));
        out.insert("binlog_pos".into(), json!(self.position.pos));
        out.insert("gtid".into(), json!(self.gtid));
        out.insert(
            "gtid_state".into(),
            json!(
                self.gtid_state
                    .as_ref()
                    .map(ToString::to_string)
                    .or_else(|| self.gtid_set.as_ref().map(ToString::to_string))
            ),
        );
        if self.by_gtid {
            out.insert("by_gtid".into(), json!(true));
        }
        out.insert(
            "server".into(),
            json!({"server_id": self.server.server_id, "server_uuid": self.server.server_uuid}),
        );
        if let Some(t) = &self.in_txn {
            out.insert(
                "in_txn".into(),
                json!({"binlog_pos": t.start_pos, "gtid": t.gtid, "skip": t.skip}),
            );
        }
        Bookmark::Object(out)
    }

    /// Reads a bookmark this source made.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `bookmark` does not have this shape.
    pub(crate) fn from_json(bookmark: &Bookmark) -> Result<Self, FaucetError> {
        let known = [
            "binlog_file",
            "binlog_pos",
            "gtid",
            "gtid_state",
            "by_gtid",
            "server",
            "in_txn",
            faucet_core::change::schema::SHAPES,
            super::shapes::COLUMN_RENAMES,
        ];
        let source = (CONNECTOR, "binlog stream", "`name` (state key)");
        let obj = crate::copy_history::change_bookmark_fields(bookmark, source, &known, invalid)?;
        let file = obj
            .get("binlog_file")
            .and_then(|v| v.as_str())
            .filter(|f| !f.is_empty())
            .ok_or_else(|| invalid(bookmark, "`binlog_file` is missing"))?;
        let pos = obj
            .get("binlog_pos")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| invalid(bookmark, "`binlog_pos` is missing or not an offset"))?;
        let gtid = opt_text(obj.get("gtid"))
            .map_err(|()| invalid(bookmark, "`gtid` is not text or null"))?;
        let server = obj
            .get("server")
            .and_then(|v| v.as_object())
            .ok_or_else(|| invalid(bookmark, "`server` is missing"))?;
        let server_id = server
            .get("server_id")
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| invalid(bookmark, "`server.server_id` is missing"))?;
        let server_uuid = opt_text(server.get("server_uuid"))
            .map_err(|()| invalid(bookmark, "`server.server_uuid` is not text or null"))?;
        let state_text = opt_text(obj.get("gtid_state"))
            .map_err(|()| invalid(bookmark, "`gtid_state` is not text or null"))?;
        let (gtid_state, gtid_set) = match (state_text, &server_uuid) {
            (None, _) => (None, None),
            (Some(t), None) => {
                let state = GtidState::parse(&t).ok_or_else(|| {
                    invalid(
                        bookmark,
                        "`gtid_state` is not a MariaDB GTID state like `0-1-30,7-1-4`",
                    )
                })?;
                (Some(state), None)
            }
            (Some(t), Some(_)) => {
                let set = MysqlGtidSet::parse(&t).map_err(|e| {
                    invalid(
                        bookmark,
                        &format!("the MySQL server's `gtid_state` is not a GTID set: {e}"),
                    )
                })?;
                (None, Some(set))
            }
        };
        let by_gtid = match obj.get("by_gtid") {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(_) => return Err(invalid(bookmark, "`by_gtid` is not true or false")),
        };
        if by_gtid && gtid_state.is_none() && gtid_set.is_none() {
            return Err(invalid(bookmark, "`by_gtid` without a `gtid_state`"));
        }
        let in_txn = match obj.get("in_txn") {
            None | Some(serde_json::Value::Null) => None,
            Some(t) => Some(InTxn {
                start_pos: t
                    .get("binlog_pos")
                    .and_then(|v| v.as_u64())
                    .ok_or_else(|| invalid(bookmark, "`in_txn.binlog_pos` is missing"))?,
                gtid: opt_text(t.get("gtid"))
                    .map_err(|()| invalid(bookmark, "`in_txn.gtid` is not text or null"))?,
                skip: t
                    .get("skip")
                    .and_then(|v| v.as_u64())
                    .ok_or_else(|| invalid(bookmark, "`in_txn.skip` is missing or not a count"))?,
            }),
        };
        Ok(Self {
            position: BinlogPos::new(file, pos),
            gtid,
            gtid_state,
            gtid_set,
            by_gtid,
            server: ServerIdentity {
                server_id,
                server_uuid,
            },
            in_txn,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let plain = CdcBookmark {
            position: BinlogPos::new("mariadb-bin.000003", 1234),
            gtid: Some("0-1-30".into()),
            gtid_state: GtidState::parse("0-1-30,7-1-4"),
            gtid_set: None,
            by_gtid: false,
            server: ServerIdentity {
                server_id: 1,
                server_uuid: None,
            },
            in_txn: None,
        };
        assert_eq!(
            plain.to_json(),
            json!({"binlog_file": "mariadb-bin.000003", "binlog_pos": 1234, "gtid": "0-1-30",
                   "gtid_state": "0-1-30,7-1-4",
                   "server": {"server_id": 1, "server_uuid": null}})
        );
        assert_eq!(CdcBookmark::from_json(&plain.to_json()).expect("ok"), plain);
        let mid = CdcBookmark {
            in_txn: Some(InTxn {
                start_pos: 1300,
                gtid: Some("0-1-31".into()),
                skip: 10_000,
            }),
            ..plain
        };
        assert_eq!(
            mid.to_json()["in_txn"],
            json!({"binlog_pos": 1300, "gtid": "0-1-31", "skip": 10000})
        );
        assert_eq!(CdcBookmark::from_json(&mid.to_json()).expect("ok"), mid);
        let carried = CdcBookmark {
            by_gtid: true,
            ..mid
        };
        assert_eq!(carried.to_json()["by_gtid"], json!(true));
        assert_eq!(
            CdcBookmark::from_json(&carried.to_json()).expect("ok"),
            carried
        );
    }

    /// Bookmarks made before `gtid_state` existed still read: no state, not by GTID.
    #[test]
    fn old_bookmarks_without_a_gtid_state_read() {
        let old = CdcBookmark::from_json(&json!({"binlog_file": "mariadb-bin.000003",
            "binlog_pos": 1234, "gtid": "0-1-30", "server": {"server_id": 1, "server_uuid": null}}))
        .expect("an old bookmark");
        assert_eq!(old.gtid.as_deref(), Some("0-1-30"));
        assert_eq!(old.gtid_state, None);
        assert!(!old.by_gtid);
    }

    /// A MySQL bookmark keeps its GTID set in `gtid_state` (told from MariaDB's state by its
    /// `server_uuid`), normalized, and reads back the same, carried over or inside a
    /// transaction; an old MySQL bookmark (no `gtid_state`) still reads.
    #[test]
    fn a_mysql_bookmark_keeps_its_gtid_set() {
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let set = MysqlGtidSet::parse(&format!(
            "{uuid}:1-57,\n2174B383-5441-11E8-B90A-C80AA9429562:1-3:tag_1:4"
        ))
        .expect("a set");
        let b = CdcBookmark {
            position: BinlogPos::new("binlog.000002", 4711),
            gtid: Some(format!("{uuid}:57")),
            gtid_state: None,
            gtid_set: Some(set.clone()),
            by_gtid: true,
            server: ServerIdentity {
                server_id: 7,
                server_uuid: Some(uuid.to_owned()),
            },
            in_txn: Some(InTxn {
                start_pos: 4800,
                gtid: Some(format!("{uuid}:58")),
                skip: 3,
            }),
        };
        let json = b.to_json();
        assert_eq!(
            json["gtid_state"],
            json!(format!(
                "2174b383-5441-11e8-b90a-c80aa9429562:1-3:tag_1:4,{uuid}:1-57"
            ))
        );
        assert_eq!(CdcBookmark::from_json(&json).expect("reads back"), b);
        let empty = CdcBookmark {
            gtid_set: Some(MysqlGtidSet::default()),
            by_gtid: false,
            in_txn: None,
            ..b.clone()
        };
        assert_eq!(empty.to_json()["gtid_state"], json!(""));
        assert_eq!(
            CdcBookmark::from_json(&empty.to_json()).expect("empty set"),
            empty
        );
        let old = CdcBookmark::from_json(&json!({"binlog_file": "binlog.000002",
            "binlog_pos": 4711, "gtid": format!("{uuid}:57"),
            "server": {"server_id": 7, "server_uuid": uuid}}))
        .expect("an old MySQL bookmark");
        assert_eq!((old.gtid_state, old.gtid_set), (None, None));
        // A MariaDB state under a MySQL server, and a bad set, are bookmark errors naming it.
        for bad in ["0-1-30", &format!("{uuid}:0")] {
            let e = CdcBookmark::from_json(&json!({"binlog_file": "binlog.000002",
                "binlog_pos": 4, "gtid_state": bad,
                "server": {"server_id": 7, "server_uuid": uuid}}))
            .expect_err(bad);
            assert!(
                matches!(e, FaucetError::Bookmark { .. }) && e.to_string().contains(bad),
                "{e}"
            );
        }
    }

    #[test]
    fn foreign_bookmarks_are_bookmark_errors() {
        for bad in [
            json!(null),
            json!({"lsn": "0/1"}),
            json!({"binlog_file": "f.1", "binlog_pos": -1, "server": {"server_id": 1}}),
            json!({"binlog_file": "f.1", "binlog_pos": 4}),
            json!({"binlog_file": "f.1", "binlog_pos": 4, "server": {"server_id": 1}, "x": 1}),
            json!({"binlog_file": "f.1", "binlog_pos": 4, "server": {"server_id": 1},
                   "in_txn": {"binlog_pos": 4}}),
            json!({"binlog_file": "f.1", "binlog_pos": 4, "server": {"server_id": 1},
                   "gtid_state": "0-1"}),
            json!({"binlog_file": "f.1", "binlog_pos": 4, "server": {"server_id": 1},
                   "by_gtid": true}),
        ] {
            let e = CdcBookmark::from_json(&bad).expect_err("invalid");
            assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
        }
    }

    #[test]
    fn a_replicate_bookmark_names_faucet_replicate() {
        for b in [
            json!({"snapshot": {"tables": {}}}),
            json!({"binlog_file": "f.1", "binlog_pos": 4, "server": {"server_id": 1},
                   "replicate": {"tables": {}}}),
        ] {
            let e = CdcBookmark::from_json(&b).expect_err("a replicate bookmark");
            assert!(e.to_string().contains("run `faucet replicate`"), "{e}");
        }
    }
}
