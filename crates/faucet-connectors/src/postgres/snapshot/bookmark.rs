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

use faucet_core::serde_json::{self, Map, Value as Json, json};
use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use crate::copy_history::{self, Point, SnapshotStart, optional_string, strings};
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

/// The PostgreSQL part of a snapshot bookmark: `slot_lsn`, `unkeyed` and, in a late copy,
/// `stream` (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotStart {
    /// The slot's consistent point C1: the change stream starts there.
    pub(crate) slot_lsn: Lsn,
    /// A table without a primary key whose copy started and did not finish.
    pub(crate) unkeyed: Option<String>,
    /// A late copy's change-stream bookmark to continue from; `None`: `{"lsn": slot_lsn}`.
    pub(crate) stream: Option<Bookmark>,
}

/// Where a snapshot copy stands ([`copy_history::SnapshotBookmark`]).
pub(crate) type SnapshotBookmark = copy_history::SnapshotBookmark<SlotStart>;

impl SnapshotStart for SlotStart {
    type Point = Lsn;
    const CONNECTOR: &'static str = CONNECTOR;
    const NAME: &'static str = "replicate snapshot bookmark";

    fn to_members(&self, snapshot: &mut Map<String, Json>) {
        snapshot.insert("slot_lsn".into(), json!(lsn_text(self.slot_lsn)));
        snapshot.insert("unkeyed".into(), json!(self.unkeyed));
        if let Some(stream) = &self.stream {
            snapshot.insert("stream".into(), stream.clone());
        }
    }

    fn from_members(s: &Json, bad: &dyn Fn() -> FaucetError) -> Result<Self, FaucetError> {
        let slot_lsn = s
            .get("slot_lsn")
            .and_then(Json::as_str)
            .and_then(parse_lsn)
            .ok_or_else(bad)?;
        let stream = match s.get("stream") {
            None | Some(Json::Null) => None,
            Some(v) if cdc_position(v) == Some(slot_lsn) => Some(v.clone()),
            Some(_) => return Err(bad()),
        };
        Ok(Self {
            slot_lsn,
            unkeyed: optional_string(s, "unkeyed", bad)?,
            stream,
        })
    }

    /// The shape before resumption: `{"slot_lsn", "done", "table", "after_key"}`.
    fn without_tables(
        self,
        b: &Bookmark,
        s: &Json,
        bad: &dyn Fn() -> FaucetError,
    ) -> Result<SnapshotBookmark, FaucetError> {
        let slot_lsn = self.slot_lsn;
        let done = s.get("done").and_then(strings).ok_or_else(bad)?;
        let table = optional_string(s, "table", bad)?;
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
        Ok(SnapshotBookmark {
            start: Self {
                slot_lsn,
                unkeyed: None,
                stream: None,
            },
            copied,
            earlier: BTreeSet::new(),
        })
    }
}

impl SnapshotBookmark {
    /// The change-stream bookmark the stream starts from once everything is copied.
    pub(crate) fn stream_start(&self) -> Bookmark {
        self.start
            .stream
            .clone()
            .unwrap_or_else(|| json!({"lsn": lsn_text(self.start.slot_lsn)}))
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
            start: SlotStart {
                slot_lsn: Lsn(0x100),
                unkeyed: Some("s.c".into()),
                stream: None,
            },
            copied: copied.clone(),
            earlier: BTreeSet::new(),
        };
        assert_eq!(
            SnapshotBookmark::from_json(&s.to_json()).expect("ok"),
            Some(s.clone())
        );
        // A late copy: the tables copied before, and the stream's bookmark to go on from.
        let late = SnapshotBookmark {
            earlier: ["s.a".to_owned()].into(),
            start: SlotStart {
                stream: Some(
                    json!({"lsn": "0/100", "in_txn": {"final_lsn": "0/180", "xid": 7,
                                                              "skip": 3}}),
                ),
                ..s.start.clone()
            },
            ..s
        };
        assert_eq!(
            SnapshotBookmark::from_json(&late.to_json()).expect("ok"),
            Some(late.clone())
        );
        assert!(late.holds("s.a") && late.holds("s.b") && !late.holds("s.c"));
        assert_eq!(
            late.stream_start(),
            late.start.stream.clone().expect("stream")
        );
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
    fn todays_shape_still_reads() {
        // As written before the bookmark became `copy_history::SnapshotBookmark`.
        let stored = json!({"snapshot": {"slot_lsn": "0/100",
            "tables": {"s.b": {"key": ["id"], "parts": [{"at": "0/100", "to": ["42"]},
                                                        {"at": "0/200", "to": null}],
                               "dirty": [{"at": "0/100", "after": ["42"], "to": ["44"]}]}},
            "unkeyed": "s.c", "copied": ["s.a"],
            "stream": {"lsn": "0/100", "in_txn": {"final_lsn": "0/180", "xid": 7, "skip": 3}}}});
        let s = SnapshotBookmark::from_json(&stored)
            .expect("ok")
            .expect("snapshot");
        assert_eq!(s.copied, history());
        assert_eq!(s.start.slot_lsn, Lsn(0x100));
        assert_eq!(s.start.unkeyed.as_deref(), Some("s.c"));
        assert!(s.holds("s.a") && s.holds("s.b"));
        assert_eq!(s.stream_start(), stored["snapshot"]["stream"]);
        assert_eq!(s.to_json(), stored, "written back member for member");
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
