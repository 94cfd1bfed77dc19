//! The bookmarks of a replicate run, and what they remember of the copy.
//!
//! While the tables are copied:
//!
//! ```json
//! {"snapshot": {"slot_lsn": "0/16B3748",
//!               "tables": {"s.a": {"key": ["id"], "parts": [{"at": "0/16B3748", "to": null}]},
//!                          "s.b": {"key": ["id"], "parts": [{"at": "0/16B3748", "to": ["42"]},
//!                                                          {"at": "0/1A00000", "to": ["97"]}]}},
//!               "unkeyed": null}}
//! ```
//!
//! `slot_lsn` is the replication slot's consistent point C1, where its change stream starts.
//! `tables` records, per table, which key ranges were copied as of which consistent point
//! ("parts", in key order): a part covers the primary keys after the previous part's `to`
//! (from the first key for the first part) up to and including its own `to`, as seen by the
//! snapshot taken at `at`; `to: null` means "to the last key", so a table whose last part
//! has `to: null` is finished. The first run copies as of C1; a run resuming an interrupted
//! copy takes a new snapshot at a later point and adds parts as of that point. `key` names
//! the primary-key columns the `to` tuples are made of (their text as PostgreSQL prints it).
//! `unkeyed` names a table without a primary key whose copy started: it cannot continue
//! mid-table, so a resume is refused.
//!
//! Once every table is copied the bookmark is the `postgres-cdc` one plus a `copied` member
//! naming every table the copy holds, and, while the change stream has not yet passed the
//! latest consistent point of any part, a `replicate` member with the same `tables`, which
//! the change stream needs to drop what the copy already holds:
//! `{"lsn": "0/16B3748", "copied": ["s.a", "s.b"], "replicate": {"tables": {...}}}`. The
//! `copied` member stays for good: `faucet run` on this state key (`postgres-cdc`) carries it
//! on (`copy_history::KeepCopied`), minus the tables it no longer lists.
//!
//! **A table added to `tables` later.** A run that finds listed tables the change-stream
//! bookmark's `copied` member does not name copies just those — a *late copy* — in a new
//! snapshot at a new consistent point C' (a temporary slot, as a resumed copy), as `op: r`
//! records, then streams the slot from the stored bookmark L (< C') through the filter,
//! which drops their changes before C' (the late copy holds them); the tables already
//! copied flow on from L, no gap, no overlap. During the late copy the bookmark is a
//! snapshot bookmark with two more members: `"copied"`, the tables copied before (not
//! read again, their history, if any, in `tables`), and `"stream"`, the change-stream
//! bookmark L to continue from (a `postgres-cdc` one, `in_txn` included); `slot_lsn` is L's
//! `lsn`. An interrupted late copy resumes like an interrupted first copy.
//!
//! **A bookmark without `copied`** — written by `faucet run` (no copy was ever taken), or
//! by a `faucet replicate` older than the member — does not say what was copied: only the
//! tables of its `replicate` history (if any) count as copied, and every other listed table
//! is copied again by a late copy (with a warning): an upsert target is unchanged by it, an
//! append target receives those rows once more as `op: r`; no change is lost.
//!
//! The shape written before resumption existed, `{"snapshot": {"slot_lsn", "done",
//! "table", "after_key"}}`, is read as parts as of `slot_lsn` when it names the table and key
//! it stopped at; stopped between tables it is refused (it cannot tell whether a table
//! without a primary key was partly delivered).

use std::collections::BTreeSet;

use pgwire_replication::Lsn;

use faucet_core::serde_json::{self, Value as Json, json};
use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use crate::copy_history::{self, Point, strings};
use crate::postgres::cdc::client::{lsn_text, parse_lsn};

impl Point for Lsn {
    fn to_text(&self) -> String {
        lsn_text(*self)
    }

    fn parse(text: &str) -> Option<Self> {
        parse_lsn(text)
    }
}

/// A key range of one table copied as of one LSN ([`copy_history::Part`]).
pub(crate) type Part = copy_history::Part<Lsn>;
/// A range in flight at an interruption ([`copy_history::Dirty`]).
pub(crate) type Dirty = copy_history::Dirty<Lsn>;
/// What was copied of one table ([`copy_history::TableCopy`]).
pub(crate) type TableCopy = copy_history::TableCopy<Lsn>;
/// Every table's copy history ([`copy_history::Copied`]).
pub(crate) type Copied = copy_history::Copied<Lsn>;

/// Where a snapshot copy stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotBookmark {
    /// The slot's consistent point C1: the change stream starts there.
    pub(crate) slot_lsn: Lsn,
    /// What was copied so far.
    pub(crate) copied: Copied,
    /// A table without a primary key whose copy started and did not finish.
    pub(crate) unkeyed: Option<String>,
    /// A late copy's tables copied before (streamed since; not in `copied` unless their
    /// copy history is still needed). Empty for a first copy.
    pub(crate) earlier: BTreeSet<String>,
    /// A late copy's change-stream bookmark to continue from; `None`: `{"lsn": slot_lsn}`.
    pub(crate) stream: Option<Bookmark>,
}

impl SnapshotBookmark {
    /// The JSON form.
    pub(crate) fn to_json(&self) -> Bookmark {
        let mut b = json!({"snapshot": {
            "slot_lsn": lsn_text(self.slot_lsn),
            "tables": self.copied.to_json(),
            "unkeyed": self.unkeyed,
            "copied": self.earlier,
        }});
        if let (Some(stream), Some(s)) = (&self.stream, b["snapshot"].as_object_mut()) {
            s.insert("stream".into(), stream.clone());
        }
        b
    }

    /// Whether `table` needs no copying: copied before, or copied to its last key.
    pub(crate) fn holds(&self, table: &str) -> bool {
        self.earlier.contains(table) || self.copied.finished(table)
    }

    /// The change-stream bookmark the stream starts from once everything is copied.
    pub(crate) fn stream_start(&self) -> Bookmark {
        self.stream
            .clone()
            .unwrap_or_else(|| json!({"lsn": lsn_text(self.slot_lsn)}))
    }

    /// Reads a snapshot bookmark; `Ok(None)` when `b` is not one (a CDC bookmark).
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `b` has a `snapshot` member of the wrong shape, or is an
    /// old-shape bookmark stopped between tables (see the module docs).
    pub(crate) fn from_json(b: &Bookmark) -> Result<Option<Self>, FaucetError> {
        let Some(s) = b.get("snapshot") else {
            return Ok(None);
        };
        let bad = || {
            FaucetError::bookmark(
                CONNECTOR,
                format!("the stored bookmark {b} is not a replicate snapshot bookmark"),
                None,
            )
        };
        let slot_lsn = s
            .get("slot_lsn")
            .and_then(Json::as_str)
            .and_then(parse_lsn)
            .ok_or_else(bad)?;
        if let Some(tables) = s.get("tables") {
            let copied = Copied::from_json(tables, &bad)?;
            let unkeyed = match s.get("unkeyed") {
                None | Some(Json::Null) => None,
                Some(v) => Some(v.as_str().ok_or_else(bad)?.to_owned()),
            };
            let earlier = match s.get("copied") {
                None | Some(Json::Null) => BTreeSet::new(),
                Some(v) => strings(v).ok_or_else(bad)?.into_iter().collect(),
            };
            let stream = match s.get("stream") {
                None | Some(Json::Null) => None,
                Some(v) if cdc_position(v) == Some(slot_lsn) => Some(v.clone()),
                Some(_) => return Err(bad()),
            };
            return Ok(Some(Self {
                slot_lsn,
                copied,
                unkeyed,
                earlier,
                stream,
            }));
        }
        // The shape before resumption: {"slot_lsn", "done", "table", "after_key"}.
        let done = s.get("done").and_then(strings).ok_or_else(bad)?;
        let table = match s.get("table") {
            None | Some(Json::Null) => None,
            Some(v) => Some(v.as_str().ok_or_else(bad)?.to_owned()),
        };
        let after_key = match s.get("after_key") {
            None | Some(Json::Null) => None,
            Some(v) => Some(strings(v).ok_or_else(bad)?),
        };
        let (Some(table), Some(after_key)) = (table, after_key) else {
            return Err(FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "the stored bookmark {b} was written by an older faucet between two tables \
                     of the snapshot; it does not record whether a table without a primary \
                     key was partly delivered, so it cannot be resumed. Rerun from scratch: \
                     drop the slot, delete this pipeline's state entry, empty the target, and \
                     run `faucet replicate` again"
                ),
                None,
            ));
        };
        let mut copied = Copied::default();
        for t in done {
            copied.tables.insert(
                t,
                TableCopy {
                    key: None,
                    parts: vec![Part {
                        at: slot_lsn,
                        to: None,
                    }],
                    dirty: Vec::new(),
                },
            );
        }
        copied.tables.insert(
            table,
            // The old copy handed out the page after `after_key` before storing its
            // bookmark: it may have reached the sink.
            TableCopy {
                key: None,
                parts: vec![Part {
                    at: slot_lsn,
                    to: Some(after_key.clone()),
                }],
                dirty: vec![Dirty {
                    at: slot_lsn,
                    after: Some(after_key),
                    to: None,
                }],
            },
        );
        Ok(Some(Self {
            slot_lsn,
            copied,
            unkeyed: None,
            earlier: BTreeSet::new(),
            stream: None,
        }))
    }
}

/// The `lsn` of a change-stream bookmark.
pub(crate) fn cdc_position(b: &Bookmark) -> Option<Lsn> {
    b.get("lsn")
        .and_then(serde_json::Value::as_str)
        .and_then(parse_lsn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy_history::{strip_history, with_history};

    fn split_history(b: &Bookmark) -> Result<(Bookmark, Option<Copied>), FaucetError> {
        copy_history::split_history(b, CONNECTOR)
    }

    fn history() -> Copied {
        let mut copied = Copied::default();
        let mut b = TableCopy {
            key: Some(vec!["id".into()]),
            ..TableCopy::default()
        };
        b.in_flight(Lsn(0x100), None, Some(vec!["10".into()]));
        b.advance(Lsn(0x100), Some(vec!["10".into()]));
        b.in_flight(Lsn(0x100), Some(vec!["10".into()]), Some(vec!["42".into()]));
        b.advance(Lsn(0x100), Some(vec!["42".into()]));
        b.in_flight(Lsn(0x100), Some(vec!["42".into()]), Some(vec!["44".into()]));
        // Interrupted; resumed as of 0x200.
        b.in_flight(Lsn(0x200), Some(vec!["42".into()]), Some(vec!["50".into()]));
        b.advance(Lsn(0x200), Some(vec!["50".into()]));
        b.in_flight(Lsn(0x200), Some(vec!["50".into()]), None);
        b.advance(Lsn(0x200), None);
        copied.tables.insert("s.b".into(), b);
        copied
    }

    #[test]
    fn parts_merge_per_point_and_round_trip() {
        let copied = history();
        let b = &copied.tables["s.b"];
        assert_eq!(
            b.parts,
            vec![
                Part {
                    at: Lsn(0x100),
                    to: Some(vec!["42".into()])
                },
                Part {
                    at: Lsn(0x200),
                    to: None
                }
            ]
        );
        assert!(b.finished());
        assert_eq!(
            b.dirty,
            vec![Dirty {
                at: Lsn(0x100),
                after: Some(vec!["42".into()]),
                to: Some(vec!["44".into()])
            }],
            "only the page in flight when the first copy stopped stays dirty"
        );
        assert_eq!(copied.latest_point(), Some(Lsn(0x200)));
        let s = SnapshotBookmark {
            slot_lsn: Lsn(0x100),
            copied: copied.clone(),
            unkeyed: Some("s.c".into()),
            earlier: BTreeSet::new(),
            stream: None,
        };
        assert_eq!(
            SnapshotBookmark::from_json(&s.to_json()).expect("ok"),
            Some(s.clone())
        );
        // A late copy: the tables copied before, and the stream's bookmark to go on from.
        let late = SnapshotBookmark {
            earlier: ["s.a".to_owned()].into(),
            stream: Some(
                json!({"lsn": "0/100", "in_txn": {"final_lsn": "0/180", "xid": 7,
                                                          "skip": 3}}),
            ),
            ..s
        };
        assert_eq!(
            SnapshotBookmark::from_json(&late.to_json()).expect("ok"),
            Some(late.clone())
        );
        assert!(late.holds("s.a") && late.holds("s.b") && !late.holds("s.c"));
        assert_eq!(late.stream_start(), late.stream.clone().expect("stream"));
        let mut moved = late.to_json();
        moved["snapshot"]["stream"]["lsn"] = json!("0/200");
        assert!(
            SnapshotBookmark::from_json(&moved).is_err(),
            "`stream` must be at `slot_lsn`"
        );
        let cdc = with_history(json!({"lsn": "0/100"}), &copied);
        let (plain, back) = split_history(&cdc).expect("ok");
        assert_eq!(plain, json!({"lsn": "0/100"}));
        assert_eq!(back, Some(copied));
        assert_eq!(strip_history(&cdc), plain);
        assert_eq!(split_history(&plain).expect("ok").1, None);
    }

    #[test]
    fn old_shape_and_malformed_bookmarks() {
        let old = json!({"snapshot": {"slot_lsn": "0/10", "done": ["s.a"], "table": "s.b",
                                      "after_key": ["7"]}});
        let s = SnapshotBookmark::from_json(&old)
            .expect("ok")
            .expect("snapshot");
        assert!(s.copied.tables["s.a"].finished());
        assert_eq!(
            s.copied.tables["s.b"].resume_after(),
            Some(&["7".to_owned()][..])
        );
        let between = json!({"snapshot": {"slot_lsn": "0/10", "done": ["s.a"], "table": null,
                                          "after_key": null}});
        let e = SnapshotBookmark::from_json(&between).expect_err("refused");
        assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
        assert_eq!(
            SnapshotBookmark::from_json(&json!({"lsn": "0/1"})).expect("ok"),
            None
        );
        for bad in [
            json!({"snapshot": {"done": 1}}),
            json!({"snapshot": {"slot_lsn": "0/1", "tables": {"s.a": {"parts": [
                {"at": "0/1", "to": null}, {"at": "0/2", "to": ["1"]}]}}}}),
        ] {
            assert!(SnapshotBookmark::from_json(&bad).is_err(), "{bad}");
        }
        assert!(split_history(&json!({"lsn": "0/1", "replicate": {"tables": 3}})).is_err());
    }
}
