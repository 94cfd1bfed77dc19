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
//! Once every table is copied the bookmark is the `postgres-cdc` one, plus, while the
//! change stream has not yet passed the latest consistent point of any part, a `replicate`
//! member with the same `tables`, which the change stream needs to drop what the copy
//! already holds: `{"lsn": "0/16B3748", "replicate": {"tables": {...}}}`. Without a
//! `replicate` member (and always once past every point) it is a plain `postgres-cdc`
//! bookmark.
//!
//! The shape written before resumption existed, `{"snapshot": {"slot_lsn", "done",
//! "table", "after_key"}}`, is read as parts as of `slot_lsn` when it names the table and key
//! it stopped at; stopped between tables it is refused (it cannot tell whether a table
//! without a primary key was partly delivered).

use std::collections::BTreeMap;

use pgwire_replication::Lsn;

use faucet_core::serde_json::{self, Map, Value as Json, json};
use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use crate::postgres::cdc::client::{lsn_text, parse_lsn};

/// A key range of one table copied as of one consistent point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    /// The consistent point of the snapshot the range was read in.
    pub(crate) at: Lsn,
    /// The last primary-key tuple of the range (text, as PostgreSQL prints it); `None`: to
    /// the last key.
    pub(crate) to: Option<Vec<String>>,
}

/// A key range that may have reached the sink as of `at` without its bookmark being
/// stored: the page handed out after the last stored bookmark (the copy holds one page
/// back to know its last key). Its keys' changes are delivered from `at` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dirty {
    /// The consistent point of the snapshot the page was read in.
    pub(crate) at: Lsn,
    /// The key before the range (exclusive); `None`: from the first key.
    pub(crate) after: Option<Vec<String>>,
    /// The last key of the range (inclusive); `None`: to the last key.
    pub(crate) to: Option<Vec<String>>,
}

/// What was copied of one table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct TableCopy {
    /// The primary-key columns of the `to` tuples, when recorded.
    pub(crate) key: Option<Vec<String>>,
    /// The ranges copied, in key order.
    pub(crate) parts: Vec<Part>,
    /// Ranges that may have been delivered from an earlier snapshot than the part holding
    /// them (at most one per interruption).
    pub(crate) dirty: Vec<Dirty>,
}

impl TableCopy {
    /// Whether the table is copied to its last key.
    pub(crate) fn finished(&self) -> bool {
        self.parts.last().is_some_and(|p| p.to.is_none())
    }

    /// The last key copied of a partly copied table.
    pub(crate) fn resume_after(&self) -> Option<&[String]> {
        self.parts.last().and_then(|p| p.to.as_deref())
    }

    /// Records that the keys up to `to` (`None`: all) were copied as of `at`; once the
    /// table is finished, the page in flight as of `at` is no longer dirty.
    pub(crate) fn advance(&mut self, at: Lsn, to: Option<Vec<String>>) {
        if to.is_none() {
            self.dirty.retain(|d| d.at != at);
        }
        match self.parts.last_mut() {
            Some(last) if last.at == at && last.to.is_some() => last.to = to,
            _ => self.parts.push(Part { at, to }),
        }
    }

    /// Records the page about to be handed out as of `at`: the keys after `after` up to
    /// `to` (replacing the previous one of `at`).
    pub(crate) fn in_flight(
        &mut self,
        at: Lsn,
        after: Option<Vec<String>>,
        to: Option<Vec<String>>,
    ) {
        self.dirty.retain(|d| d.at != at);
        self.dirty.push(Dirty { at, after, to });
    }

    /// Every consistent point this table's history mentions.
    pub(crate) fn points(&self) -> impl Iterator<Item = Lsn> + '_ {
        self.parts
            .iter()
            .map(|p| p.at)
            .chain(self.dirty.iter().map(|d| d.at))
    }
}

/// Every table's copy history.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Copied {
    /// By `schema.table`.
    pub(crate) tables: BTreeMap<String, TableCopy>,
}

impl Copied {
    /// The latest consistent point of any part (`None` when nothing was copied).
    pub(crate) fn latest_point(&self) -> Option<Lsn> {
        self.tables.values().flat_map(TableCopy::points).max()
    }

    fn to_json(&self) -> Json {
        let mut tables = Map::new();
        for (name, t) in &self.tables {
            let parts: Vec<Json> = t
                .parts
                .iter()
                .map(|p| json!({"at": lsn_text(p.at), "to": p.to}))
                .collect();
            let dirty: Vec<Json> = t
                .dirty
                .iter()
                .map(|d| json!({"at": lsn_text(d.at), "after": d.after, "to": d.to}))
                .collect();
            tables.insert(
                name.clone(),
                json!({"key": t.key, "parts": parts, "dirty": dirty}),
            );
        }
        Json::Object(tables)
    }

    fn from_json(v: &Json, bad: &dyn Fn() -> FaucetError) -> Result<Self, FaucetError> {
        let mut tables = BTreeMap::new();
        for (name, t) in v.as_object().ok_or_else(bad)? {
            let key = match t.get("key") {
                None | Some(Json::Null) => None,
                Some(k) => Some(strings(k).ok_or_else(bad)?),
            };
            let mut parts = Vec::new();
            for p in t.get("parts").and_then(Json::as_array).ok_or_else(bad)? {
                let at = p
                    .get("at")
                    .and_then(Json::as_str)
                    .and_then(parse_lsn)
                    .ok_or_else(bad)?;
                let to = match p.get("to") {
                    None | Some(Json::Null) => None,
                    Some(k) => Some(strings(k).ok_or_else(bad)?),
                };
                parts.push(Part { at, to });
            }
            let key_or_null = |v: Option<&Json>| -> Result<Option<Vec<String>>, FaucetError> {
                match v {
                    None | Some(Json::Null) => Ok(None),
                    Some(k) => Ok(Some(strings(k).ok_or_else(bad)?)),
                }
            };
            let mut dirty = Vec::new();
            for d in t
                .get("dirty")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                let at = d
                    .get("at")
                    .and_then(Json::as_str)
                    .and_then(parse_lsn)
                    .ok_or_else(bad)?;
                dirty.push(Dirty {
                    at,
                    after: key_or_null(d.get("after"))?,
                    to: key_or_null(d.get("to"))?,
                });
            }
            // Only the last part may run to the end.
            if parts.iter().rev().skip(1).any(|p| p.to.is_none()) {
                return Err(bad());
            }
            tables.insert(name.clone(), TableCopy { key, parts, dirty });
        }
        Ok(Self { tables })
    }
}

fn strings(v: &Json) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// Where a snapshot copy stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotBookmark {
    /// The slot's consistent point C1: the change stream starts there.
    pub(crate) slot_lsn: Lsn,
    /// What was copied so far.
    pub(crate) copied: Copied,
    /// A table without a primary key whose copy started and did not finish.
    pub(crate) unkeyed: Option<String>,
}

impl SnapshotBookmark {
    /// The JSON form.
    pub(crate) fn to_json(&self) -> Bookmark {
        json!({"snapshot": {
            "slot_lsn": lsn_text(self.slot_lsn),
            "tables": self.copied.to_json(),
            "unkeyed": self.unkeyed,
        }})
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
            return Ok(Some(Self {
                slot_lsn,
                copied,
                unkeyed,
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
        }))
    }
}

/// The name of the change-stream bookmark member that carries the copy history.
const REPLICATE: &str = "replicate";

/// A change-stream bookmark: `cdc` plus the copy history while it is still needed.
pub(crate) fn with_history(mut cdc: Bookmark, copied: &Copied) -> Bookmark {
    if let Some(obj) = cdc.as_object_mut() {
        obj.insert(REPLICATE.into(), json!({"tables": copied.to_json()}));
    }
    cdc
}

/// Splits a change-stream bookmark into the `postgres-cdc` bookmark and the copy history, if
/// it has one.
///
/// # Errors
/// [`FaucetError::Bookmark`] when the `replicate` member has the wrong shape.
pub(crate) fn split_history(b: &Bookmark) -> Result<(Bookmark, Option<Copied>), FaucetError> {
    let Some(history) = b.get(REPLICATE) else {
        return Ok((b.clone(), None));
    };
    let bad = || {
        FaucetError::bookmark(
            CONNECTOR,
            format!("the `replicate` member of the stored bookmark {b} is malformed"),
            None,
        )
    };
    let copied = Copied::from_json(history.get("tables").ok_or_else(bad)?, &bad)?;
    let mut cdc = b.clone();
    if let Some(obj) = cdc.as_object_mut() {
        obj.remove(REPLICATE);
    }
    Ok((cdc, Some(copied)))
}

/// The `postgres-cdc` bookmark of a change-stream bookmark (the history stripped).
pub(crate) fn strip_history(b: &Bookmark) -> Bookmark {
    let mut cdc = b.clone();
    if let Some(obj) = cdc.as_object_mut() {
        obj.remove(REPLICATE);
    }
    cdc
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
        };
        assert_eq!(
            SnapshotBookmark::from_json(&s.to_json()).expect("ok"),
            Some(s)
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
