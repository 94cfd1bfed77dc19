//! The `postgres-cdc` bookmark: where to resume.
//!
//! ```json
//! {"lsn": "0/16B3748"}
//! {"lsn": "0/16B3748", "in_txn": {"final_lsn": "0/1A00000", "xid": 745, "skip": 10000}}
//! ```
//!
//! `lsn` is the end of the last transaction delivered completely (a Commit message's end
//! LSN), or a keepalive's WAL position received when no transaction was open — everything
//! committed before it was delivered. A resumed stream starts replication there; the server
//! then sends the transactions that commit at or after it.
//!
//! `in_txn` is present when a page ended inside a transaction (pages hold at most
//! `batch_size` records, transactions may be larger): that transaction is the next one the
//! server replays from `lsn`, and its first `skip` changes were already delivered — each
//! insert, update, delete, and each table of a truncate counts one, whether or not its table
//! is among `tables`. `final_lsn` (the commit LSN) and `xid` identify it, so a resumed stream
//! checks it replays the same transaction.
//!
//! `shapes` holds the columns each table's change records were last delivered with, for
//! schema changes across restarts (`super::shapes`).

use pgwire_replication::Lsn;
use serde_json::{Map, json};

use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use super::client::{lsn_text, parse_lsn};

/// A partly delivered transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InTxn {
    /// The transaction's commit LSN (pgoutput Begin's `final_lsn`).
    pub(crate) final_lsn: Lsn,
    /// Its transaction id.
    pub(crate) xid: u32,
    /// How many of its changes were already delivered.
    pub(crate) skip: u64,
}

/// A decoded bookmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CdcBookmark {
    /// Where replication resumes.
    pub(crate) lsn: Lsn,
    /// The transaction a page ended inside, if any.
    pub(crate) in_txn: Option<InTxn>,
}

fn invalid(bookmark: &Bookmark, why: &str) -> FaucetError {
    FaucetError::bookmark(
        CONNECTOR,
        format!(
            "`{bookmark}` is not a postgres-cdc bookmark ({why}); expected {{\"lsn\": \"X/X\"}}"
        ),
        None,
    )
}

impl CdcBookmark {
    /// The JSON form.
    pub(crate) fn to_json(self) -> Bookmark {
        let mut out = Map::new();
        out.insert("lsn".into(), json!(lsn_text(self.lsn)));
        if let Some(t) = self.in_txn {
            out.insert(
                "in_txn".into(),
                json!({"final_lsn": lsn_text(t.final_lsn), "xid": t.xid, "skip": t.skip}),
            );
        }
        Bookmark::Object(out)
    }

    /// Reads a bookmark this source made.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `bookmark` does not have this shape.
    pub(crate) fn from_json(bookmark: &Bookmark) -> Result<Self, FaucetError> {
        // `shapes`: the announced table shapes, read by `super::shapes`.
        let known = ["lsn", "in_txn", super::shapes::SHAPES];
        let source = (
            CONNECTOR,
            "change stream",
            "`name` (state key) and `slot_name`",
        );
        let obj = crate::copy_history::change_bookmark_fields(bookmark, source, &known, invalid)?;
        let lsn = obj
            .get("lsn")
            .and_then(|v| v.as_str())
            .and_then(parse_lsn)
            .ok_or_else(|| invalid(bookmark, "`lsn` is missing or not X/X"))?;
        let in_txn = match obj.get("in_txn") {
            None | Some(serde_json::Value::Null) => None,
            Some(t) => {
                let final_lsn = t
                    .get("final_lsn")
                    .and_then(|v| v.as_str())
                    .and_then(parse_lsn)
                    .ok_or_else(|| invalid(bookmark, "`in_txn.final_lsn` is missing or not X/X"))?;
                let xid = t
                    .get("xid")
                    .and_then(|v| v.as_u64())
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(|| {
                        invalid(bookmark, "`in_txn.xid` is missing or not a 32-bit number")
                    })?;
                let skip = t
                    .get("skip")
                    .and_then(|v| v.as_u64())
                    .ok_or_else(|| invalid(bookmark, "`in_txn.skip` is missing or not a count"))?;
                Some(InTxn {
                    final_lsn,
                    xid,
                    skip,
                })
            }
        };
        Ok(Self { lsn, in_txn })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let plain = CdcBookmark {
            lsn: Lsn(0x16B3748),
            in_txn: None,
        };
        assert_eq!(plain.to_json(), json!({"lsn": "0/16B3748"}));
        assert_eq!(CdcBookmark::from_json(&plain.to_json()).expect("ok"), plain);
        let mid = CdcBookmark {
            lsn: Lsn(0x16B3748),
            in_txn: Some(InTxn {
                final_lsn: Lsn((1 << 32) | 0x10),
                xid: 745,
                skip: 10_000,
            }),
        };
        assert_eq!(
            mid.to_json(),
            json!({"lsn": "0/16B3748", "in_txn": {"final_lsn": "1/10", "xid": 745, "skip": 10000}})
        );
        assert_eq!(CdcBookmark::from_json(&mid.to_json()).expect("ok"), mid);
    }

    #[test]
    fn foreign_bookmarks_are_state_errors() {
        for bad in [
            json!(null),
            json!({"offset": 3}),
            json!({"lsn": "nope"}),
            json!({"lsn": "0/1", "in_txn": {"final_lsn": "0/2", "xid": -1, "skip": 0}}),
            json!({"lsn": "0/1", "extra": true}),
        ] {
            let e = CdcBookmark::from_json(&bad).expect_err("invalid");
            assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
        }
    }
}
