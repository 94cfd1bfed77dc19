//! The bookmark of a replicate run while it copies the tables:
//! `{"snapshot": {"slot_lsn": "X/X", "done": ["s.t", ...], "table": "s.t" | null,
//! "after_key": ["42"] | null}}`. Once every table is copied the bookmark is the
//! `postgres-cdc` one (`{"lsn": "X/X", ...}`), starting at the slot's consistent point.

use faucet_core::serde_json::{self, json};
use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;

/// Where a snapshot copy stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotBookmark {
    /// The slot's consistent point, as PostgreSQL prints it (`X/X`).
    pub(crate) slot_lsn: String,
    /// The tables copied completely, in the order they were copied.
    pub(crate) done: Vec<String>,
    /// The table being copied, if any.
    pub(crate) table: Option<String>,
    /// The primary-key tuple (text) of the last row of `table` delivered.
    pub(crate) after_key: Option<Vec<String>>,
}

impl SnapshotBookmark {
    /// The JSON form.
    pub(crate) fn to_json(&self) -> Bookmark {
        json!({"snapshot": {
            "slot_lsn": self.slot_lsn,
            "done": self.done,
            "table": self.table,
            "after_key": self.after_key,
        }})
    }

    /// Reads a snapshot bookmark; `Ok(None)` when `b` is not one (a CDC bookmark).
    ///
    /// # Errors
    /// [`FaucetError::State`] when `b` has a `snapshot` member of the wrong shape.
    pub(crate) fn from_json(b: &Bookmark) -> Result<Option<Self>, FaucetError> {
        let Some(s) = b.get("snapshot") else {
            return Ok(None);
        };
        let bad = || {
            FaucetError::state(
                CONNECTOR,
                format!("the stored bookmark {b} is not a replicate snapshot bookmark"),
            )
        };
        let strings = |v: &serde_json::Value| -> Option<Vec<String>> {
            v.as_array()?
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let slot_lsn = s.get("slot_lsn").and_then(|v| v.as_str()).ok_or_else(bad)?;
        let done = s.get("done").and_then(strings).ok_or_else(bad)?;
        let table = match s.get("table") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(v.as_str().ok_or_else(bad)?.to_owned()),
        };
        let after_key = match s.get("after_key") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(strings(v).ok_or_else(bad)?),
        };
        Ok(Some(Self {
            slot_lsn: slot_lsn.to_owned(),
            done,
            table,
            after_key,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_cdc_bookmarks_are_not_snapshots() {
        let b = SnapshotBookmark {
            slot_lsn: "0/16B3748".into(),
            done: vec!["s.a".into()],
            table: Some("s.b".into()),
            after_key: Some(vec!["42".into()]),
        };
        assert_eq!(
            SnapshotBookmark::from_json(&b.to_json()).expect("ok"),
            Some(b)
        );
        assert_eq!(
            SnapshotBookmark::from_json(&json!({"lsn": "0/1"})).expect("ok"),
            None
        );
        assert!(SnapshotBookmark::from_json(&json!({"snapshot": {"done": 1}})).is_err());
    }
}
