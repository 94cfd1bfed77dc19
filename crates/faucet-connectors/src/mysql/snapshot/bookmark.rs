//! The bookmarks of a MySQL replicate run.
//!
//! While the tables are copied:
//!
//! ```json
//! {"snapshot": {"start": {"binlog_file": "mariadb-bin.000003", "binlog_pos": 1234,
//!                         "gtid": "0-1-30", "server": {"server_id": 1, "server_uuid": null}},
//!               "gtid_state": "0-1-30",
//!               "tables": {"shop.a": {"key": ["id"], "parts": [{"at": "mariadb-bin.000003:1234", "to": null}]},
//!                          "shop.b": {"key": ["id"], "parts": [{"at": "mariadb-bin.000003:1234", "to": ["42"]}],
//!                                     "dirty": [...]}}}}
//! ```
//!
//! `start` is the first snapshot's point C1 as a `mysql-cdc` bookmark: the binlog is read
//! from there once every table is copied. `gtid_state` is the server's whole GTID state at
//! C1 (several domains on MariaDB, `uuid:1-N,...` on MySQL; `start.gtid` holds it only when
//! it is one GTID, as `mysql-cdc` checks it). `tables` is the copy history of
//! [`crate::copy_history`], points written `file:pos`.
//!
//! Once every table is copied the bookmark is the `mysql-cdc` one of C1 plus a `copied`
//! member naming every table the copy holds (kept for good; `faucet run` on this state key
//! carries it on, minus the tables it no longer lists), and, while the binlog has not passed
//! the latest point of any part, a `replicate` member with the same `tables`
//! ([`crate::copy_history::with_history`]).
//!
//! **A table added to `tables` later**: a run whose change-stream bookmark L does not name
//! a listed table in `copied` copies just the missing tables in a new snapshot at a new
//! point C' (a *late copy*), then reads the binlog from L, dropping their changes before C'
//! (their history: parts as of C'). During it the bookmark is a snapshot bookmark whose
//! `start` is L itself (`in_txn` included: the binlog goes on exactly from there),
//! `gtid_state` null, and `"copied"` the tables copied before (not read again). An
//! interrupted late copy resumes like a first one.
//!
//! **A bookmark without `copied`** (written by `faucet run`, or by a `faucet replicate`
//! older than the member) does not say what was copied: only the tables of its `replicate`
//! history count as copied, every other listed table is copied again by a late copy (with
//! a warning) — an upsert target is unchanged by it, an append target receives those rows
//! again as `op: r`; nothing is lost.

use faucet_core::FaucetError;
use faucet_core::serde_json::{Map, Value as Json, json};

use super::CONNECTOR;
use super::point::SnapshotPoint;
use crate::copy_history::{self, SnapshotStart, optional_string};
use crate::mysql::cdc::bookmark::CdcBookmark;

/// What was copied of one table, points as binlog positions.
pub(crate) type TableCopy = copy_history::TableCopy<SnapshotPoint>;
/// Every table's copy history.
pub(crate) type Copied = copy_history::Copied<SnapshotPoint>;

/// The MySQL part of a snapshot bookmark: `start` and `gtid_state` (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BinlogStart {
    /// The first snapshot's point C1, where the binlog is read from.
    pub(crate) cdc: CdcBookmark,
    /// The GTID state at C1.
    pub(crate) gtid_state: Option<String>,
}

/// Where a snapshot copy stands ([`copy_history::SnapshotBookmark`]).
pub(crate) type SnapshotBookmark = copy_history::SnapshotBookmark<BinlogStart>;

impl SnapshotStart for BinlogStart {
    type Point = SnapshotPoint;
    const CONNECTOR: &'static str = CONNECTOR;
    const NAME: &'static str = "mysql replicate snapshot bookmark";

    fn to_members(&self, snapshot: &mut Map<String, Json>) {
        snapshot.insert("start".into(), self.cdc.to_json());
        snapshot.insert("gtid_state".into(), json!(self.gtid_state));
    }

    fn from_members(s: &Json, bad: &dyn Fn() -> FaucetError) -> Result<Self, FaucetError> {
        // A late copy's `start` may be inside a transaction (module docs).
        let cdc = CdcBookmark::from_json(s.get("start").ok_or_else(bad)?).map_err(|_| bad())?;
        Ok(Self {
            cdc,
            gtid_state: optional_string(s, "gtid_state", bad)?,
        })
    }
}

impl SnapshotBookmark {
    /// The first point C1.
    pub(crate) fn start_point(&self) -> SnapshotPoint {
        SnapshotPoint(self.start.cdc.position.clone())
    }
}

/// The one GTID of a MariaDB GTID state (`domain-server-seq`), for `mysql-cdc`'s bookmark
/// check; `None` for an empty state, one of several domains, or a MySQL GTID set
/// (`uuid:1-N`, which that check does not use).
pub(crate) fn single_gtid(state: Option<&str>) -> Option<String> {
    let s = state?.trim();
    (!s.is_empty() && !s.contains([',', ':'])).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy_history::Point as _;
    use crate::mysql::cdc::position::BinlogPos;

    fn at(pos: u64) -> SnapshotPoint {
        SnapshotPoint(BinlogPos::new("mariadb-bin.000003", pos))
    }

    #[test]
    fn round_trip_and_malformed() {
        let mut copied = Copied::default();
        let mut t = TableCopy {
            key: Some(vec!["id".into()]),
            ..TableCopy::default()
        };
        t.in_flight(at(100), None, Some(vec!["10".into()]));
        t.advance(at(100), Some(vec!["10".into()]));
        t.in_flight(at(100), Some(vec!["10".into()]), Some(vec!["20".into()]));
        t.in_flight(at(200), Some(vec!["10".into()]), None);
        t.advance(at(200), None);
        copied.tables.insert("shop.a".into(), t);
        let s = SnapshotBookmark {
            start: BinlogStart {
                cdc: CdcBookmark::from_json(&json!({"binlog_file": "mariadb-bin.000003",
                    "binlog_pos": 100, "gtid": "0-1-5", "server": {"server_id": 1}}))
                .expect("cdc bookmark"),
                gtid_state: Some("0-1-5".into()),
            },
            copied: copied.clone(),
            earlier: ["shop.z".to_owned()].into(),
        };
        assert!(s.holds("shop.z") && s.holds("shop.a") && !s.holds("shop.b"));
        let json = s.to_json();
        assert_eq!(
            json["snapshot"]["tables"]["shop.a"]["parts"][1]["at"],
            json!(at(200).to_text())
        );
        assert_eq!(SnapshotBookmark::from_json(&json).expect("ok"), Some(s));
        assert_eq!(
            copied.tables["shop.a"].dirty.len(),
            1,
            "the page in flight at the first point stays dirty"
        );
        assert_eq!(
            SnapshotBookmark::from_json(&json!({"binlog_file": "f.1"})).expect("ok"),
            None
        );
        for bad in [
            json!({"snapshot": {}}),
            json!({"snapshot": {"start": {"binlog_file": "f.1"}, "tables": {}}}),
            json!({"snapshot": {"start": {"binlog_file": "f.1", "binlog_pos": 4,
                   "server": {"server_id": 1}}, "tables": {"a.b": {"parts": [
                   {"at": "f.1:4", "to": null}, {"at": "f.1:9", "to": ["1"]}]}}}}),
        ] {
            let e = SnapshotBookmark::from_json(&bad).expect_err("refused");
            assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
        }
    }

    #[test]
    fn todays_shape_still_reads() {
        // As written before the bookmark became `copy_history::SnapshotBookmark`.
        let stored = json!({"snapshot": {
            "start": {"binlog_file": "mariadb-bin.000003", "binlog_pos": 100, "gtid": "0-1-5",
                      "server": {"server_id": 1, "server_uuid": null}},
            "gtid_state": "0-1-5",
            "tables": {"shop.a": {"key": ["id"],
                                  "parts": [{"at": "mariadb-bin.000003:200", "to": null}],
                                  "dirty": []}},
            "copied": ["shop.z"]}});
        let s = SnapshotBookmark::from_json(&stored)
            .expect("ok")
            .expect("snapshot");
        assert_eq!(s.start_point(), at(100));
        assert_eq!(s.start.gtid_state.as_deref(), Some("0-1-5"));
        assert_eq!(s.start.cdc.gtid.as_deref(), Some("0-1-5"));
        assert!(s.holds("shop.a") && s.holds("shop.z") && !s.holds("shop.b"));
        let back = s.to_json();
        assert_eq!(
            SnapshotBookmark::from_json(&back).expect("ok"),
            Some(s),
            "{back}"
        );
        for member in ["start", "gtid_state", "tables", "copied"] {
            assert!(back["snapshot"].get(member).is_some(), "{member}: {back}");
        }
    }

    #[test]
    fn only_a_single_gtid_goes_into_the_cdc_bookmark() {
        assert_eq!(single_gtid(Some("0-1-30")).as_deref(), Some("0-1-30"));
        assert_eq!(single_gtid(Some("0-1-30,1-2-4")), None);
        assert_eq!(single_gtid(Some("")), None);
        assert_eq!(single_gtid(None), None);
        assert_eq!(
            single_gtid(Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")),
            None,
            "a MySQL range"
        );
    }
}
