//! The bookmarks of a MongoDB replicate run.
//!
//! While the collections are copied:
//!
//! ```json
//! {"snapshot": {"start": {"resume_token": "<hex>", "cluster_time": {"t": 1700000000, "i": 3}},
//!               "tables": {"shop.a": {"key": ["_id"], "parts": [{"at": "<hex>", "to": null}]},
//!                          "shop.b": {"key": ["_id"], "parts": [{"at": "<hex>", "to": ["{\"$oid\":\"65f1…\"}"]}],
//!                                     "dirty": [...]}},
//!               "copied": []}}
//! ```
//!
//! `start` is the anchor A as a `mongodb-cdc` bookmark: the change stream is read from there
//! once every collection is copied, and a resumed copy tracks the changes from there again.
//! `tables` is the copy history of [`crate::copy_history`] with one point for every part,
//! the anchor's resume token (module docs of [`super`]: every document the copy hands out
//! is the one of A, whichever run read it); the key tuples are the `_id`s as canonical
//! Extended JSON. `copied` names, in a late copy, the collections copied before.
//!
//! Once every collection is copied the bookmark is the `mongodb-cdc` one of A plus the
//! `copied` member of [`crate::copy_history`] naming every collection the copy holds (kept
//! for good; `faucet run` on this state key reads it as its own bookmark, ignoring the
//! member).

use faucet_core::FaucetError;
use faucet_core::serde_json::{Map, Value as Json};

use super::CONNECTOR;
use crate::copy_history::{self, Point, SnapshotStart};
use crate::mongodb::cdc::CdcBookmark;

/// The point of every part of a MongoDB copy: the anchor's resume token (`_data`). Parts are
/// only ever compared for equality (one anchor per copy); the order is the text's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Anchor(pub(crate) String);

impl Point for Anchor {
    fn to_text(&self) -> String {
        self.0.clone()
    }

    fn parse(text: &str) -> Option<Self> {
        (!text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(text.to_owned()))
    }
}

/// What was copied of one collection.
pub(crate) type TableCopy = copy_history::TableCopy<Anchor>;
/// Every collection's copy history.
pub(crate) type Copied = copy_history::Copied<Anchor>;

/// Where a copy stands ([`copy_history::SnapshotBookmark`]); its `start` is the anchor A as
/// a `mongodb-cdc` bookmark.
pub(crate) type SnapshotBookmark = copy_history::SnapshotBookmark<CdcBookmark>;

impl SnapshotStart for CdcBookmark {
    type Point = Anchor;
    const CONNECTOR: &'static str = CONNECTOR;
    const NAME: &'static str = "mongodb replicate snapshot bookmark";

    fn to_members(&self, snapshot: &mut Map<String, Json>) {
        snapshot.insert("start".into(), self.to_json());
    }

    fn from_members(s: &Json, bad: &dyn Fn() -> FaucetError) -> Result<Self, FaucetError> {
        CdcBookmark::from_json(s.get("start").ok_or_else(bad)?).map_err(|_| bad())
    }

    /// Every part is as of the anchor.
    fn fits(&self, copied: &Copied) -> bool {
        let anchor = Anchor(self.resume_token.clone());
        copied
            .tables
            .values()
            .flat_map(TableCopy::points)
            .all(|p| p == anchor)
    }
}

impl SnapshotBookmark {
    /// The anchor as a copy point.
    pub(crate) fn anchor(&self) -> Anchor {
        Anchor(self.start.resume_token.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faucet_core::serde_json::json;

    #[test]
    fn todays_shape_still_reads() {
        // As written before the bookmark became `copy_history::SnapshotBookmark`.
        let stored = json!({"snapshot": {
            "start": {"resume_token": "82aa"},
            "tables": {"shop.a": {"key": ["_id"], "parts": [{"at": "82aa", "to": ["5"]}],
                                  "dirty": [{"at": "82aa", "after": ["5"], "to": null}]}},
            "copied": ["shop.z"]}});
        let s = SnapshotBookmark::from_json(&stored)
            .expect("ok")
            .expect("snapshot");
        assert_eq!(s.anchor(), Anchor("82aa".into()));
        assert_eq!(
            s.copied.tables["shop.a"].resume_after(),
            Some(&["5".to_owned()][..])
        );
        assert!(s.holds("shop.z") && !s.holds("shop.a"));
        let back = s.to_json();
        assert_eq!(back["snapshot"]["tables"], stored["snapshot"]["tables"]);
        assert_eq!(back["snapshot"]["copied"], stored["snapshot"]["copied"]);
        assert_eq!(SnapshotBookmark::from_json(&back).expect("ok"), Some(s));
    }

    #[test]
    fn round_trip_and_malformed() {
        let start = CdcBookmark {
            resume_token: "82aa".into(),
            cluster_time: None,
        };
        let a = Anchor("82aa".into());
        let mut t = TableCopy {
            key: Some(vec!["_id".into()]),
            ..TableCopy::default()
        };
        t.in_flight(a.clone(), None, Some(vec!["5".into()]));
        t.advance(a.clone(), Some(vec!["5".into()]));
        let mut copied = Copied::default();
        copied.tables.insert("shop.a".into(), t);
        let s = SnapshotBookmark {
            start,
            copied,
            earlier: ["shop.z".to_owned()].into(),
        };
        assert!(s.holds("shop.z") && !s.holds("shop.a"));
        assert_eq!(
            SnapshotBookmark::from_json(&s.to_json()).expect("ok"),
            Some(s)
        );
        assert_eq!(
            SnapshotBookmark::from_json(&json!({"resume_token": "82"})).expect("ok"),
            None
        );
        for bad in [
            json!({"snapshot": {}}),
            json!({"snapshot": {"start": {"lsn": "0/1"}, "tables": {}}}),
            json!({"snapshot": {"start": {"resume_token": "82aa"}, "tables": {"a.b": {"parts": [
                   {"at": "82bb", "to": null}]}}}}),
        ] {
            let e = SnapshotBookmark::from_json(&bad).expect_err("refused");
            assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
        }
    }
}
