//! The `mysql-cdc` bookmark: where to resume, and on which server.
//!
//! ```json
//! {"binlog_file": "mariadb-bin.000003", "binlog_pos": 1234, "gtid": "0-1-30",
//!  "server": {"server_id": 1, "server_uuid": null}}
//! {"binlog_file": "mariadb-bin.000003", "binlog_pos": 1234, "gtid": "0-1-30",
//!  "server": {"server_id": 1, "server_uuid": null},
//!  "in_txn": {"binlog_pos": 1300, "gtid": "0-1-31", "skip": 10000}}
//! ```
//!
//! * `binlog_file` / `binlog_pos`: the position right after the last transaction delivered
//!   completely (the end of its commit event), or a later event boundary reached between
//!   transactions (events of other tables, a rotation to a new file). Everything committed
//!   before it was delivered; a resumed stream requests the binlog from there.
//! * `gtid`: the GTID of that last transaction (MariaDB `domain-server-seq`, MySQL `uuid:n`),
//!   or null when none was seen yet or the server logs none.
//! * `server`: the server the position belongs to: its `@@server_id` and, on MySQL, its
//!   `@@server_uuid` (MariaDB has none: null). A resume against a server with another id or
//!   uuid is refused; on MariaDB the position is also checked with `BINLOG_GTID_POS`.
//! * `in_txn`, when a page ended inside a transaction (pages hold at most `batch_size`
//!   records, transactions may be larger): the transaction starts at `in_txn.binlog_pos` in
//!   `binlog_file` (the offset of its first event), has GTID `in_txn.gtid` (or null), and its
//!   first `skip` row changes of the listed tables were delivered. A resumed stream reads from
//!   `binlog_pos`, checks that the first transaction is that one, and skips them.

use serde_json::{Map, json};

use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use super::position::BinlogPos;

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
        let obj = bookmark
            .as_object()
            .ok_or_else(|| invalid(bookmark, "not an object"))?;
        if let Some(extra) = obj.keys().find(|k| {
            !matches!(
                k.as_str(),
                "binlog_file" | "binlog_pos" | "gtid" | "server" | "in_txn"
            )
        }) {
            return Err(invalid(bookmark, &format!("unknown field `{extra}`")));
        }
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
            server: ServerIdentity {
                server_id: 1,
                server_uuid: None,
            },
            in_txn: None,
        };
        assert_eq!(
            plain.to_json(),
            json!({"binlog_file": "mariadb-bin.000003", "binlog_pos": 1234, "gtid": "0-1-30",
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
        ] {
            let e = CdcBookmark::from_json(&bad).expect_err("invalid");
            assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
        }
    }
}
