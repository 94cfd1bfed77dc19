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

use std::collections::BTreeSet;

use faucet_core::serde_json::{Value as Json, json};
use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use crate::copy_history::{self, Point};
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

/// Where a copy stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotBookmark {
    /// The anchor A: where the change stream is read from.
    pub(crate) start: CdcBookmark,
    /// What was copied so far.
    pub(crate) copied: Copied,
    /// A late copy's collections copied before (not read again). Empty for a first copy.
    pub(crate) earlier: BTreeSet<String>,
}

impl SnapshotBookmark {
    /// Whether `table` needs no copying: copied before, or copied to its last key.
    pub(crate) fn holds(&self, table: &str) -> bool {
        self.earlier.contains(table) || self.copied.finished(table)
    }

    /// The anchor as a copy point.
    pub(crate) fn anchor(&self) -> Anchor {
        Anchor(self.start.resume_token.clone())
    }

    /// The JSON form.
    pub(crate) fn to_json(&self) -> Bookmark {
        json!({"snapshot": {
            "start": self.start.to_json(),
            "tables": self.copied.to_json(),
            "copied": self.earlier,
        }})
    }

    /// Reads a snapshot bookmark; `Ok(None)` when `b` is not one (a change-stream bookmark).
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `b` has a `snapshot` member of the wrong shape, or one
    /// whose parts are not all as of its anchor.
    pub(crate) fn from_json(b: &Bookmark) -> Result<Option<Self>, FaucetError> {
        let Some(s) = b.get("snapshot") else {
            return Ok(None);
        };
        let bad = || {
            FaucetError::bookmark(
                CONNECTOR,
                format!("the stored bookmark {b} is not a mongodb replicate snapshot bookmark"),
                None,
            )
        };
        let start = CdcBookmark::from_json(s.get("start").ok_or_else(bad)?).map_err(|_| bad())?;
        let copied = Copied::from_json(s.get("tables").ok_or_else(bad)?, &bad)?;
        let anchor = Anchor(start.resume_token.clone());
        if copied
            .tables
            .values()
            .flat_map(TableCopy::points)
            .any(|p| p != anchor)
        {
            return Err(bad());
        }
        let earlier = match s.get("copied") {
            None | Some(Json::Null) => BTreeSet::new(),
            Some(v) => copy_history::strings(v)
                .ok_or_else(bad)?
                .into_iter()
                .collect(),
        };
        Ok(Some(Self {
            start,
            copied,
            earlier,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
