//! What a `faucet replicate` copy remembers of each table: which primary-key ranges were
//! copied as of which consistent point, and which range was in flight at an interruption.
//! The one definition for the PostgreSQL (`postgres::snapshot`, points are LSNs) and the
//! MySQL (`mysql::snapshot`, points are binlog positions) replicate sources.
//!
//! JSON form of one table (inside the sources' bookmarks):
//!
//! ```json
//! {"key": ["id"],
//!  "parts": [{"at": "<point>", "to": ["42"]}, {"at": "<later point>", "to": null}],
//!  "dirty": [{"at": "<point>", "after": ["42"], "to": ["44"]}]}
//! ```
//!
//! A part covers the primary keys after the previous part's `to` (from the first key for the
//! first part) up to and including its own `to`, as seen by the snapshot taken at `at`;
//! `to: null` means "to the last key", so a table whose last part has `to: null` is
//! finished. `key` names the primary-key columns the tuples are made of (their text as the
//! source's query reader writes it back). A `dirty` range is a page handed out after the
//! last stored bookmark (the copy holds one page back to know its last key): it may have
//! reached the sink as of `at` without its bookmark being stored, so its keys' changes are
//! delivered from `at` on.
//!
//! After a copy the change-stream bookmark carries the history in a `replicate` member
//! while the stream needs it ([`with_history`]), and for good a `copied` member naming the
//! tables copied ([`with_copied`], [`KeepCopied`]): a replicate run reads both
//! ([`StreamBookmark`]) and copies, in a late copy, the listed tables neither names.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use faucet_core::serde_json::{Map, Value as Json, json};
use faucet_core::{Bookmark, FaucetError, Page, PageStream, Schema};

/// What a copy hands out after [`TableCopy::hold_back`]: `page` (the page held back until
/// now) carrying `bookmark`; for a table's first page, with nothing to hand out yet, an empty
/// page of `schema` carrying it, so the bookmark naming the page in flight is stored all the
/// same.
pub(crate) fn carrying(
    page: Option<Page>,
    schema: Arc<Schema>,
    bookmark: Option<Bookmark>,
) -> Page {
    match page {
        None => Page::empty(schema, bookmark),
        Some(mut page) => {
            page.set_bookmark(bookmark);
            page
        }
    }
}

/// A consistent point of a snapshot: totally ordered, with a text form for bookmarks.
pub(crate) trait Point: Clone + Ord + Debug {
    /// The text stored in bookmarks.
    fn to_text(&self) -> String;
    /// The point of a text [`Point::to_text`] wrote; `None` for anything else.
    fn parse(text: &str) -> Option<Self>;
}

/// A key range of one table copied as of one consistent point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part<P> {
    /// The consistent point of the snapshot the range was read in.
    pub(crate) at: P,
    /// The last primary-key tuple of the range; `None`: to the last key.
    pub(crate) to: Option<Vec<String>>,
}

/// A key range that may have reached the sink as of `at` without its bookmark being stored
/// (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dirty<P> {
    /// The consistent point of the snapshot the page was read in.
    pub(crate) at: P,
    /// The key before the range (exclusive); `None`: from the first key.
    pub(crate) after: Option<Vec<String>>,
    /// The last key of the range (inclusive); `None`: to the last key.
    pub(crate) to: Option<Vec<String>>,
}

/// What was copied of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableCopy<P> {
    /// The primary-key columns of the `to` tuples, when recorded.
    pub(crate) key: Option<Vec<String>>,
    /// The ranges copied, in key order.
    pub(crate) parts: Vec<Part<P>>,
    /// Ranges that may have been delivered from an earlier snapshot than the part holding
    /// them (at most one per interruption).
    pub(crate) dirty: Vec<Dirty<P>>,
}

impl<P> Default for TableCopy<P> {
    fn default() -> Self {
        Self {
            key: None,
            parts: Vec::new(),
            dirty: Vec::new(),
        }
    }
}

impl<P: Point> TableCopy<P> {
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
    pub(crate) fn advance(&mut self, at: P, to: Option<Vec<String>>) {
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
    pub(crate) fn in_flight(&mut self, at: P, after: Option<Vec<String>>, to: Option<Vec<String>>) {
        self.dirty.retain(|d| d.at != at);
        self.dirty.push(Dirty { at, after, to });
    }

    /// The copy hands a page out only once the next one is read, so that each bookmark names
    /// the page in flight after it. Records the page just read as of `at` — the keys after
    /// `after` (the last key handed out) up to `end` — as in flight, and the page `held`
    /// back until now, if any, as copied; returns that page to hand out (`None` for a
    /// table's first page: nothing to hand out yet).
    pub(crate) fn hold_back(
        &mut self,
        at: &P,
        after: Option<Vec<String>>,
        end: Option<Vec<String>>,
        held: Option<Staged>,
    ) -> Option<Page> {
        match held {
            None => {
                self.in_flight(at.clone(), after, end);
                None
            }
            Some(previous) => {
                self.advance(at.clone(), previous.end.clone());
                self.in_flight(at.clone(), previous.end, end);
                Some(previous.page)
            }
        }
    }

    /// Every consistent point this table's history mentions.
    pub(crate) fn points(&self) -> impl Iterator<Item = P> + '_ {
        self.parts
            .iter()
            .map(|p| p.at.clone())
            .chain(self.dirty.iter().map(|d| d.at.clone()))
    }
}

/// A page of `op: r` records held back until the page after it is read
/// ([`TableCopy::hold_back`]).
pub(crate) struct Staged {
    /// The records.
    pub(crate) page: Page,
    /// Its last primary-key tuple; `None` for the table's last page.
    pub(crate) end: Option<Vec<String>>,
}

/// Every table's copy history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Copied<P> {
    /// By qualified table name.
    pub(crate) tables: BTreeMap<String, TableCopy<P>>,
}

impl<P> Default for Copied<P> {
    fn default() -> Self {
        Self {
            tables: BTreeMap::new(),
        }
    }
}

impl<P: Point> Copied<P> {
    /// Whether `table` is copied to its last key.
    pub(crate) fn finished(&self, table: &str) -> bool {
        self.tables.get(table).is_some_and(TableCopy::finished)
    }

    /// The latest consistent point of any part (`None` when nothing was copied).
    pub(crate) fn latest_point(&self) -> Option<P> {
        self.tables.values().flat_map(TableCopy::points).max()
    }

    /// The JSON form (module docs), by table name.
    pub(crate) fn to_json(&self) -> Json {
        let mut tables = Map::new();
        for (name, t) in &self.tables {
            let parts: Vec<Json> = t
                .parts
                .iter()
                .map(|p| json!({"at": p.at.to_text(), "to": p.to}))
                .collect();
            let dirty: Vec<Json> = t
                .dirty
                .iter()
                .map(|d| json!({"at": d.at.to_text(), "after": d.after, "to": d.to}))
                .collect();
            tables.insert(
                name.clone(),
                json!({"key": t.key, "parts": parts, "dirty": dirty}),
            );
        }
        Json::Object(tables)
    }

    /// Reads [`Copied::to_json`]'s form.
    ///
    /// # Errors
    /// `bad()` when `v` has another shape (also when a part other than the last runs to
    /// the last key).
    pub(crate) fn from_json(v: &Json, bad: &dyn Fn() -> FaucetError) -> Result<Self, FaucetError> {
        let key_or_null = |v: Option<&Json>| -> Result<Option<Vec<String>>, FaucetError> {
            match v {
                None | Some(Json::Null) => Ok(None),
                Some(k) => Ok(Some(strings(k).ok_or_else(bad)?)),
            }
        };
        let point = |v: &Json| -> Result<P, FaucetError> {
            v.get("at")
                .and_then(Json::as_str)
                .and_then(P::parse)
                .ok_or_else(bad)
        };
        let mut tables = BTreeMap::new();
        for (name, t) in v.as_object().ok_or_else(bad)? {
            let key = key_or_null(t.get("key"))?;
            let mut parts = Vec::new();
            for p in t.get("parts").and_then(Json::as_array).ok_or_else(bad)? {
                parts.push(Part {
                    at: point(p)?,
                    to: key_or_null(p.get("to"))?,
                });
            }
            let mut dirty = Vec::new();
            for d in t
                .get("dirty")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                dirty.push(Dirty {
                    at: point(d)?,
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

/// An array of strings, `None` for anything else.
pub(crate) fn strings(v: &Json) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// The name of the change-stream bookmark member that carries the copy history.
const REPLICATE: &str = "replicate";

/// A change-stream bookmark: `cdc` plus the copy history (`{"replicate": {"tables":
/// ...}}`), for as long as the change stream needs it to drop what the copy holds.
pub(crate) fn with_history<P: Point>(mut cdc: Bookmark, copied: &Copied<P>) -> Bookmark {
    if let Some(obj) = cdc.as_object_mut() {
        obj.insert(REPLICATE.into(), json!({"tables": copied.to_json()}));
    }
    cdc
}

/// Splits a change-stream bookmark into the change source's own bookmark and the copy
/// history, if it has one.
///
/// # Errors
/// [`FaucetError::Bookmark`] of `connector` when the `replicate` member has the wrong shape.
pub(crate) fn split_history<P: Point>(
    b: &Bookmark,
    connector: &str,
) -> Result<(Bookmark, Option<Copied<P>>), FaucetError> {
    let Some(history) = b.get(REPLICATE) else {
        return Ok((b.clone(), None));
    };
    let bad = || {
        FaucetError::bookmark(
            connector,
            format!("the `replicate` member of the stored bookmark {b} is malformed"),
            None,
        )
    };
    let copied = Copied::from_json(history.get("tables").ok_or_else(bad)?, &bad)?;
    Ok((strip_history(b), Some(copied)))
}

/// The change source's own bookmark of a change-stream bookmark (the history stripped).
pub(crate) fn strip_history(b: &Bookmark) -> Bookmark {
    let mut cdc = b.clone();
    if let Some(obj) = cdc.as_object_mut() {
        obj.remove(REPLICATE);
    }
    cdc
}

/// Every table's copy history without the tables not in `listed` (removed from `tables`:
/// their records are no longer read, so the filter must not wait for their points).
pub(crate) fn retain_listed<P>(copied: &mut Copied<P>, listed: &BTreeSet<String>) {
    copied.tables.retain(|name, _| listed.contains(name));
}

/// The name of the change-stream bookmark member that lists the tables a replicate copy
/// holds (`{"copied": ["s.a", "s.b"]}`).
const COPIED: &str = "copied";

/// Splits the `copied` member off a change-stream bookmark: the bookmark without it, and the
/// tables it lists — `None` when it has none: a bookmark `faucet run` started, or one a
/// `faucet replicate` wrote before the member existed (the replicate sources then count
/// the tables of a `replicate` history as copied, and copy every other listed table).
///
/// The member is written by the replicate sources after a copy, and carried unchanged
/// (minus the tables no longer listed) by the `postgres-cdc` and `mysql-cdc` sources of
/// `faucet run` ([`KeepCopied`]), so that a later `faucet replicate` knows which listed
/// tables were never copied.
///
/// # Errors
/// [`FaucetError::Bookmark`] of `connector` when the member is not an array of table names.
pub(crate) fn split_copied(
    b: Bookmark,
    connector: &str,
) -> Result<(Bookmark, Option<BTreeSet<String>>), FaucetError> {
    let mut b = b;
    let Some(member) = b.as_object_mut().and_then(|o| o.remove(COPIED)) else {
        return Ok((b, None));
    };
    let tables = strings(&member).ok_or_else(|| {
        FaucetError::bookmark(
            connector,
            format!(
                "the `copied` member of the stored bookmark ({member}) is not a list of table                  names"
            ),
            None,
        )
    })?;
    Ok((b, Some(tables.into_iter().collect())))
}

/// [`split_copied`] for a change source of `faucet run` opened at `from`, before the listed
/// tables are known (a source with table patterns learns them from the catalog): the
/// bookmark to read and its `copied` member, read offline so a bookmark of another kind is
/// named before anything connects. [`keep_listed`] then keeps the `copied` tables to carry
/// on ([`KeepCopied`]).
///
/// # Errors
/// As [`split_copied`].
pub(crate) fn split_resume(
    from: Option<Bookmark>,
    connector: &str,
) -> Result<(Option<Bookmark>, Option<BTreeSet<String>>), FaucetError> {
    match from {
        None => Ok((None, None)),
        Some(b) => split_copied(b, connector).map(|(b, copied)| (Some(b), copied)),
    }
}

/// The `copied` tables of [`split_resume`] still `listed`, to carry on: a table removed from
/// `tables` (whose changes are no longer read) is copied again if it is listed again.
pub(crate) fn keep_listed(
    copied: Option<BTreeSet<String>>,
    listed: impl IntoIterator<Item = String>,
) -> Option<BTreeSet<String>> {
    let listed: BTreeSet<String> = listed.into_iter().collect();
    copied.map(|c| c.intersection(&listed).cloned().collect())
}

/// The listed tables whose copy the change stream at a change-stream bookmark already holds:
/// those its `copied` member names and those of its copy `history`, both only as far as
/// they are `listed`. A bookmark without a `copied` member was written by `faucet run`, or
/// by a `faucet replicate` before the member existed: only the tables of its history (a
/// copy the stream has not passed yet) are known to be copied, so every other listed table
/// is copied again (said in a warning) — rows delivered once more as `op: r`, never a gap.
pub(crate) fn known_copied<P: Point>(
    copied: Option<BTreeSet<String>>,
    history: Option<&Copied<P>>,
    listed: &BTreeSet<String>,
) -> BTreeSet<String> {
    if copied.is_none() {
        let unknown: Vec<&String> = listed
            .iter()
            .filter(|t| !history.is_some_and(|h| h.tables.contains_key(*t)))
            .collect();
        if !unknown.is_empty() {
            tracing::warn!(
                tables = ?unknown,
                "the stored bookmark does not record which tables were copied (written by \
                 `faucet run`, or by an older `faucet replicate`): copying them now, in a new \
                 snapshot; an append sink receives rows it may already hold again as `op: r`"
            );
        }
    }
    let mut known = copied.unwrap_or_default();
    if let Some(h) = history {
        known.extend(
            h.tables
                .iter()
                .filter(|(_, t)| t.finished())
                .map(|(name, _)| name.clone()),
        );
    }
    known.retain(|t| listed.contains(t));
    known
}

/// A replicate run's change-stream bookmark taken apart for the listed tables.
#[derive(Debug)]
pub(crate) struct StreamBookmark<P> {
    /// The change source's own bookmark (`copied` and `replicate` removed).
    pub(crate) cdc: Bookmark,
    /// The copy history the stream still needs, without the tables no longer listed.
    pub(crate) history: Option<Copied<P>>,
    /// The listed tables already copied ([`known_copied`]).
    pub(crate) known: BTreeSet<String>,
    /// The listed tables never copied: a late copy takes them.
    pub(crate) missing: BTreeSet<String>,
}

impl<P: Point> StreamBookmark<P> {
    /// Reads `b` ([`split_copied`], [`split_history`]) for the `listed` tables.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] of `connector` when a member is malformed.
    pub(crate) fn read(
        b: &Bookmark,
        connector: &str,
        listed: &BTreeSet<String>,
    ) -> Result<Self, FaucetError> {
        let (b, copied) = split_copied(b.clone(), connector)?;
        let (cdc, mut history) = split_history::<P>(&b, connector)?;
        if let Some(h) = &mut history {
            retain_listed(h, listed);
        }
        let known = known_copied(copied, history.as_ref(), listed);
        let missing = listed.difference(&known).cloned().collect();
        Ok(Self {
            cdc,
            history,
            known,
            missing,
        })
    }
}

/// The bookmark of the page that ends a copy: the change stream's `start` (at
/// `start_point`), with the copy history while the stream is before its latest point, and
/// the `listed` tables as copied.
pub(crate) fn after_copy<P: Point>(
    start: Bookmark,
    start_point: &P,
    copied: &Copied<P>,
    listed: &BTreeSet<String>,
) -> Bookmark {
    let b = match copied.latest_point() {
        Some(p) if p > *start_point => with_history(start, copied),
        _ => start,
    };
    with_copied(b, listed)
}

/// `b` with the `copied` member listing `tables`.
pub(crate) fn with_copied(mut b: Bookmark, tables: &BTreeSet<String>) -> Bookmark {
    if let Some(obj) = b.as_object_mut() {
        obj.insert(COPIED.into(), json!(tables));
    }
    b
}

/// A change stream whose bookmarks carry the `copied` member ([`split_copied`]): added to
/// every page's bookmark, removed again before the inner stream hears it is durable.
pub(crate) struct KeepCopied<'a> {
    inner: Box<dyn PageStream + 'a>,
    tables: BTreeSet<String>,
}

impl<'a> KeepCopied<'a> {
    /// `inner`, its bookmarks listing `tables` as copied; `inner` itself when `tables` is
    /// `None` (the bookmark had no member: none is invented).
    pub(crate) fn wrap(
        inner: Box<dyn PageStream + 'a>,
        tables: Option<BTreeSet<String>>,
    ) -> Box<dyn PageStream + 'a> {
        match tables {
            Some(tables) => Box::new(Self { inner, tables }),
            None => inner,
        }
    }
}

#[async_trait]
impl PageStream for KeepCopied<'_> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        let Some(mut page) = self.inner.next_page().await? else {
            return Ok(None);
        };
        if let Some(b) = page.bookmark().cloned() {
            page.set_bookmark(Some(with_copied(b, &self.tables)));
        }
        Ok(Some(page))
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        let mut plain = bookmark.clone();
        if let Some(obj) = plain.as_object_mut() {
            obj.remove(COPIED);
        }
        self.inner.bookmark_durable(&plain).await
    }

    fn reads_ahead(&self) -> bool {
        self.inner.reads_ahead()
    }
}

/// Whether `bookmark` is one of `faucet replicate`'s (a `snapshot` or `replicate` member: a
/// copy in progress, or the history of one), which `faucet run` of a change source refuses.
pub(crate) fn is_replicate_bookmark(bookmark: &Bookmark) -> bool {
    bookmark
        .as_object()
        .is_some_and(|o| o.contains_key("snapshot") || o.contains_key(REPLICATE))
}

/// The members of a change source's bookmark, for `faucet run`: `bookmark` must be an
/// object with no member outside `known`, and not a bookmark of `faucet replicate` (a copy
/// in progress, or the history of one, which only `faucet replicate` continues). `source`
/// is `(connector, stream, own)`: the connector named in the error, what its change stream
/// reads ("binlog stream"), what a pipeline must own to start afresh (`` `name` (state key)
/// ``); `invalid` makes the error for a bookmark of another shape.
///
/// # Errors
/// `invalid(bookmark, why)` for a value that is not an object or has a member outside
/// `known`; [`FaucetError::Bookmark`] of the connector for a bookmark of `faucet replicate`
/// (a `snapshot` or `replicate` member).
pub(crate) fn change_bookmark_fields<'b>(
    bookmark: &'b Bookmark,
    (connector, stream, own): (&str, &str, &str),
    known: &[&str],
    invalid: impl Fn(&Bookmark, &str) -> FaucetError,
) -> Result<&'b Map<String, Json>, FaucetError> {
    let obj = bookmark
        .as_object()
        .ok_or_else(|| invalid(bookmark, "not an object"))?;
    if is_replicate_bookmark(bookmark) {
        return Err(FaucetError::bookmark(
            connector,
            format!(
                "this state key holds a bookmark of `faucet replicate` (a snapshot copy in \
                 progress, or the history of one the {stream} has not passed yet), which \
                 `faucet run` cannot continue: run `faucet replicate` with this config until \
                 it is done, or give this pipeline its own {own}"
            ),
            None,
        ));
    }
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(extra) => Err(invalid(bookmark, &format!("unknown field `{extra}`"))),
        None => Ok(obj),
    }
}

/// The database's part of a [`SnapshotBookmark`]: where its change stream starts after the
/// copy, and whatever else that database's copy remembers (PostgreSQL: the slot's LSN and an
/// unkeyed table in flight; MySQL: a `mysql-cdc` bookmark and the GTID state; MongoDB: a
/// `mongodb-cdc` bookmark).
pub(crate) trait SnapshotStart: Sized {
    /// The consistent point of the copy's parts.
    type Point: Point;
    /// The connector named in bookmark errors.
    const CONNECTOR: &'static str;
    /// What the error for a wrong shape calls the bookmark: "the stored bookmark {b} is not
    /// a {NAME}".
    const NAME: &'static str;

    /// Writes this part's members into the `snapshot` object (before `tables`).
    fn to_members(&self, snapshot: &mut Map<String, Json>);

    /// Reads this part from the `snapshot` object.
    ///
    /// # Errors
    /// `bad()` when a member has the wrong shape.
    fn from_members(snapshot: &Json, bad: &dyn Fn() -> FaucetError) -> Result<Self, FaucetError>;

    /// Whether the copy history `copied` can belong to this start (default: any).
    fn fits(&self, _copied: &Copied<Self::Point>) -> bool {
        true
    }

    /// Reads a `snapshot` object that has no `tables` member: an older shape the database
    /// still resumes from.
    ///
    /// # Errors
    /// By default `bad()`: there is no older shape.
    fn without_tables(
        self,
        _b: &Bookmark,
        _snapshot: &Json,
        bad: &dyn Fn() -> FaucetError,
    ) -> Result<SnapshotBookmark<Self>, FaucetError> {
        Err(bad())
    }
}

/// Where a snapshot copy stands, the one bookmark of every replicate source while it copies:
///
/// ```json
/// {"snapshot": {<the database's members>, "tables": {<copy history>}, "copied": ["s.z"]}}
/// ```
///
/// `tables` is [`Copied::to_json`]'s form; `copied` names, in a late copy, the tables copied
/// before (not read again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotBookmark<S: SnapshotStart> {
    /// The database's part: where the change stream starts ([`SnapshotStart`]).
    pub(crate) start: S,
    /// What was copied so far.
    pub(crate) copied: Copied<S::Point>,
    /// A late copy's tables copied before (not read again). Empty for a first copy.
    pub(crate) earlier: BTreeSet<String>,
}

impl<S: SnapshotStart> SnapshotBookmark<S> {
    /// Whether `table` needs no copying: copied before, or copied to its last key.
    pub(crate) fn holds(&self, table: &str) -> bool {
        self.earlier.contains(table) || self.copied.finished(table)
    }

    /// The JSON form.
    pub(crate) fn to_json(&self) -> Bookmark {
        let mut s = Map::new();
        self.start.to_members(&mut s);
        s.insert("tables".into(), self.copied.to_json());
        s.insert(COPIED.into(), json!(self.earlier));
        json!({"snapshot": s})
    }

    /// Reads a snapshot bookmark; `Ok(None)` when `b` is not one (a change-stream bookmark).
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `b` has a `snapshot` member of the wrong shape, or a
    /// history that does not fit its start ([`SnapshotStart::fits`]).
    pub(crate) fn from_json(b: &Bookmark) -> Result<Option<Self>, FaucetError> {
        let Some(s) = b.get("snapshot") else {
            return Ok(None);
        };
        let bad = || {
            FaucetError::bookmark(
                S::CONNECTOR,
                format!("the stored bookmark {b} is not a {}", S::NAME),
                None,
            )
        };
        let start = S::from_members(s, &bad)?;
        let Some(tables) = s.get("tables") else {
            return start.without_tables(b, s, &bad).map(Some);
        };
        let copied = Copied::from_json(tables, &bad)?;
        if !start.fits(&copied) {
            return Err(bad());
        }
        let earlier = match s.get(COPIED) {
            None | Some(Json::Null) => BTreeSet::new(),
            Some(v) => strings(v).ok_or_else(bad)?.into_iter().collect(),
        };
        Ok(Some(Self {
            start,
            copied,
            earlier,
        }))
    }
}

/// An optional string member of a bookmark object: `None` when absent or null.
///
/// # Errors
/// `bad()` when it is there and not a string.
pub(crate) fn optional_string(
    obj: &Json,
    name: &str,
    bad: &dyn Fn() -> FaucetError,
) -> Result<Option<String>, FaucetError> {
    match obj.get(name) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => Ok(Some(v.as_str().ok_or_else(bad)?.to_owned())),
    }
}

/// A [`Point`] for the unit tests of the copy history and the copy filter: a plain number.
#[cfg(test)]
pub(crate) mod test_point {
    use super::Point;

    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    pub(crate) struct N(pub(crate) u64);

    impl Point for N {
        fn to_text(&self) -> String {
            self.0.to_string()
        }
        fn parse(text: &str) -> Option<Self> {
            text.parse().ok().map(N)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_point::N;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|&n| n.to_owned()).collect()
    }

    #[test]
    fn the_copied_member_round_trips_and_is_carried_for_listed_tables_only() {
        let b = with_copied(json!({"lsn": "0/1"}), &set(&["s.a", "s.b"]));
        assert_eq!(b, json!({"lsn": "0/1", "copied": ["s.a", "s.b"]}));
        let (plain, copied) = split_copied(b.clone(), "x").expect("ok");
        assert_eq!(plain, json!({"lsn": "0/1"}));
        assert_eq!(copied, Some(set(&["s.a", "s.b"])));
        assert_eq!(
            split_copied(json!({"lsn": "0/1"}), "x").expect("ok").1,
            None,
            "none invented"
        );
        let (_, copied) = split_resume(Some(b), "x").expect("ok");
        assert_eq!(
            keep_listed(copied, ["s.b".to_owned(), "s.c".to_owned()]),
            Some(set(&["s.b"])),
            "a table no longer listed is dropped"
        );
        let e = split_copied(json!({"lsn": "0/1", "copied": "s.a"}), "x").expect_err("bad");
        assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
    }

    #[test]
    fn known_copied_tables_are_the_member_and_the_finished_history_as_listed() {
        let mut history = Copied::<N>::default();
        let mut done = TableCopy::default();
        done.advance(N(5), None);
        history.tables.insert("s.h".into(), done);
        history.tables.insert("s.p".into(), TableCopy::default());
        let listed = set(&["s.a", "s.h", "s.p", "s.new"]);
        assert_eq!(
            known_copied(Some(set(&["s.a", "s.gone"])), Some(&history), &listed),
            set(&["s.a", "s.h"]),
            "listed tables of the member, plus finished ones of the history"
        );
        assert_eq!(
            known_copied::<N>(None, None, &listed),
            BTreeSet::new(),
            "a bookmark of `faucet run`: nothing is known to be copied"
        );
        let mut h = history.clone();
        retain_listed(&mut h, &set(&["s.p"]));
        assert_eq!(h.tables.keys().collect::<Vec<_>>(), vec!["s.p"]);
    }
}
