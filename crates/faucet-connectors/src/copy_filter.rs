//! The change stream after a resumed `faucet replicate` copy, the part shared by the
//! PostgreSQL and MySQL replicate sources: which records the copy already holds, decided
//! from a table's copy history ([`crate::copy_history`]), and the stream wrapper that applies
//! a source's filter until the stream has passed the copy's latest point.
//!
//! A change of key k at position L is *in the copy* when the range holding k was copied as
//! of a point P with L < P; a key inside a range in flight at an interruption (`dirty`)
//! counts as copied as of that range's point if it is lower. Each source works out where
//! its keys fall (the server compares them with [`Bounds::keys`]) and L for its records
//! ([`SourceFilter`]); the page loop, the verdicts and the bookmarks are shared (the
//! [`ChangeFilter`] of every [`SourceFilter`]).

use std::collections::HashMap;

use async_trait::async_trait;

use faucet_core::{Bookmark, FaucetError, Page, PageBuilder, PageStream, Value};

use crate::copy_history::{Copied, Point, TableCopy, with_history};

/// What a record's position alone says, before any key is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Early {
    /// At or after every point of the table: delivered.
    Keep,
    /// Before every point of the table: the copy holds it.
    Drop,
    /// Between the table's points: decided by its keys.
    Lookup,
}

impl<P: Point> TableCopy<P> {
    /// [`Early`] for a record of this table at `at`.
    pub(crate) fn early(&self, at: &P) -> Early {
        match (self.points().min(), self.points().max()) {
            (Some(min), Some(max)) if *at < max => {
                if *at < min {
                    Early::Drop
                } else {
                    Early::Lookup
                }
            }
            _ => Early::Keep,
        }
    }

    /// The key tuples a changed key is compared with: the parts' ends, then each dirty
    /// range's two ends.
    pub(crate) fn bounds(&self) -> Bounds<'_, P> {
        let mut keys: Vec<&Vec<String>> = self.parts.iter().filter_map(|p| p.to.as_ref()).collect();
        let parts = keys.len();
        let mut dirty = Vec::with_capacity(self.dirty.len());
        for d in &self.dirty {
            let after = d.after.as_ref().map(|k| {
                keys.push(k);
                keys.len() - 1
            });
            let to = d.to.as_ref().map(|k| {
                keys.push(k);
                keys.len() - 1
            });
            dirty.push((after, to, &d.at));
        }
        Bounds {
            copy: self,
            keys,
            parts,
            dirty,
        }
    }
}

/// A table's range boundaries, for placing changed keys ([`TableCopy::bounds`]).
pub(crate) struct Bounds<'a, P> {
    copy: &'a TableCopy<P>,
    /// The boundary key tuples, in the order the comparison answers must follow.
    pub(crate) keys: Vec<&'a Vec<String>>,
    /// How many of `keys` are part ends (the rest are dirty ranges' ends).
    parts: usize,
    /// Per dirty range: the indexes of its `after` and `to` in `keys`, and its point.
    dirty: Vec<(Option<usize>, Option<usize>, &'a P)>,
}

impl<P: Point> Bounds<'_, P> {
    /// The point a key's changes are delivered from, given `greater[j]`: whether the key
    /// is above `keys[j]` by the source's ordering. `floor` for a key past every part (a
    /// table not finished: nothing of it is held).
    pub(crate) fn point(&self, greater: &[bool], floor: &P) -> P {
        let part = greater[..self.parts].iter().filter(|&&b| b).count();
        let mut point = self
            .copy
            .parts
            .get(part)
            .map_or_else(|| floor.clone(), |p| p.at.clone());
        for &(after, to, at) in &self.dirty {
            let inside = after.is_none_or(|j| greater[j]) && to.is_none_or(|j| !greater[j]);
            if inside && *at < point {
                point = at.clone();
            }
        }
        point
    }
}

/// What becomes of a change whose keys' points are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Delivered as it is.
    Keep,
    /// The copy holds it.
    Drop,
    /// An update that moved a key into a range copied later: delivered as a delete of the
    /// old key.
    AsDelete,
    /// An update that moved a key out of a range copied later: delivered as an insert of
    /// the new row.
    AsInsert,
}

/// The verdict for a record of `op` whose keys (`u`: old then new; else one) are `applied`:
/// the record is at or after the point each key's changes are delivered from.
pub(crate) fn verdict(op: &str, applied: &[bool]) -> Verdict {
    match (op, applied) {
        ("u", &[old, new]) => match (old, new) {
            (true, true) => Verdict::Keep,
            (false, false) => Verdict::Drop,
            (true, false) => Verdict::AsDelete,
            (false, true) => Verdict::AsInsert,
        },
        (_, &[one]) if !one => Verdict::Drop,
        _ => Verdict::Keep,
    }
}

/// A source's filter of the change stream after a resumed copy.
#[async_trait]
pub(crate) trait ChangeFilter: Send {
    /// `page` without the changes the copy holds, with the bookmark to store.
    async fn apply(&mut self, page: Page) -> Result<Page, FaucetError>;
    /// Whether the stream at `bookmark` is past every point (the filter can go).
    fn passed(&self, bookmark: &Bookmark) -> bool;
}

/// What becomes of one record, before its keys' points are known.
pub(crate) enum Fate {
    /// Delivered as it is.
    Keep,
    /// The copy holds it.
    Drop,
    /// Decided by the ranges of these keys (`u`: old, new; else one), indexes into the
    /// page's lookups of its table.
    Keys(Vec<usize>),
}

/// The keys of a page's records to place in their tables' ranges, by table.
pub(crate) type Lookups = HashMap<String, Vec<Vec<String>>>;

/// What a source's change filter knows of its records and its server; the shared
/// [`ChangeFilter`] (the page loop, the bookmarks, the verdicts) is built on it.
#[async_trait]
pub(crate) trait SourceFilter: Send {
    /// The source's consistent points.
    type Point: Point + Send + Sync;
    /// The connector's name, in errors.
    const CONNECTOR: &'static str;
    /// The position of the `op` field in a change record.
    const OP: usize;
    /// The position of the `table` field.
    const TABLE: usize;
    /// The position of the `before` row.
    const BEFORE: usize;
    /// The position of the `after` row.
    const AFTER: usize;
    /// The copy history the filter applies.
    fn copied(&self) -> &Copied<Self::Point>;
    /// The latest point of the history: the filter goes once the stream is there.
    fn latest(&self) -> &Self::Point;
    /// The stream position of a change-stream bookmark.
    fn stream_point(bookmark: &Bookmark) -> Option<Self::Point>;
    /// The position a record compares with the points (its transaction's).
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the record has none.
    fn position(v: &[Value]) -> Result<Self::Point, FaucetError>;
    /// The error for a TRUNCATE of `table` at `at`, between the points of its ranges.
    fn truncated(table: &str, at: &Self::Point) -> FaucetError;
    /// The primary-key column names of `table` now, from the server.
    async fn key_names(&mut self, table: &str) -> Result<Vec<String>, FaucetError>;
    /// The primary-key tuple (`names`) of a record's `before` / `after` row (`before` says
    /// which), in the text the copy's ranges are written in.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the row lacks a key column or has one faucet cannot
    /// compare.
    fn key_of(
        row: &Value,
        names: &[String],
        table: &str,
        before: bool,
        at: &Self::Point,
    ) -> Result<Vec<String>, FaucetError>;
    /// For each of `keys` of `table`, the point its changes are delivered from.
    async fn points_of(
        &mut self,
        table: &str,
        keys: &[Vec<String>],
    ) -> Result<Vec<Self::Point>, FaucetError>;
    /// A record as the delete of its old key ([`Verdict::AsDelete`]).
    fn as_delete(v: &[Value]) -> Vec<Value>;
    /// A record as the insert of its new row ([`Verdict::AsInsert`]).
    ///
    /// # Errors
    /// When the record cannot stand as an insert (the source says why).
    fn as_insert(v: &[Value], table: &str, at: &Self::Point) -> Result<Vec<Value>, FaucetError>;
}

/// The fate of one record, its keys queued in `lookups` when they decide: kept when at or
/// after the latest point or of a table without history, decided by [`TableCopy::early`]
/// where it can, else by the ranges of its keys (`c`: the new one, `d`: the old one, `u`:
/// both).
///
/// # Errors
/// [`FaucetError::Bookmark`] for a TRUNCATE between a table's points or a primary key that
/// changed since the copy; as [`SourceFilter::key_of`].
async fn fate<F: SourceFilter>(
    f: &mut F,
    v: &[Value],
    lookups: &mut Lookups,
) -> Result<Fate, FaucetError> {
    let at = F::position(v)?;
    if at >= *f.latest() {
        return Ok(Fate::Keep);
    }
    let table = text(&v[F::TABLE]).to_owned();
    let Some(t) = f.copied().tables.get(&table) else {
        return Ok(Fate::Keep);
    };
    match t.early(&at) {
        Early::Keep => return Ok(Fate::Keep),
        Early::Drop => return Ok(Fate::Drop),
        Early::Lookup => {}
    }
    let op = text(&v[F::OP]).to_owned();
    if op == "t" {
        return Err(F::truncated(&table, &at));
    }
    let recorded = t.key.clone();
    let names = f.key_names(&table).await?;
    if let Some(recorded) = recorded
        && recorded != names
    {
        return Err(FaucetError::bookmark(
            F::CONNECTOR,
            format!(
                "the primary key of {table} is now ({}), but its copy was made in the order \
                 of ({}); rerun the replicate from scratch",
                names.join(", "),
                recorded.join(", ")
            ),
            None,
        ));
    }
    let sides: &[usize] = match op.as_str() {
        "c" => &[F::AFTER],
        "d" => &[F::BEFORE],
        "u" => &[F::BEFORE, F::AFTER],
        _ => return Ok(Fate::Keep),
    };
    let mut ids = Vec::with_capacity(2);
    for &side in sides {
        let key = F::key_of(&v[side], &names, &table, side == F::BEFORE, &at)?;
        let queue = lookups.entry(table.clone()).or_default();
        ids.push(queue.len());
        queue.push(key);
    }
    Ok(Fate::Keys(ids))
}

/// The key tuple (`names`) of a `before` / `after` row of `table`, each value by
/// `key_text`; `missing(what)` is the source's error for an absent row or column.
///
/// # Errors
/// `missing(..)`, or [`FaucetError::Read`] of `connector` for a value `key_text` refuses.
pub(crate) fn key_tuple(
    row: &Value,
    names: &[String],
    table: &str,
    connector: &str,
    missing: &dyn Fn(&str) -> FaucetError,
    key_text: fn(&Value) -> Option<String>,
) -> Result<Vec<String>, FaucetError> {
    let Value::Row(r) = row else {
        return Err(missing("primary key"));
    };
    names
        .iter()
        .map(|n| {
            let i = r
                .schema
                .index_of(n)
                .ok_or_else(|| missing(&format!("primary-key column `{n}`")))?;
            key_text(&r.values[i]).ok_or_else(|| {
                FaucetError::read(
                    connector,
                    format!(
                        "primary-key column `{n}` of {table} has a type faucet cannot compare \
                         with the copied ranges ({:?})",
                        r.values[i].data_type()
                    ),
                    None,
                )
            })
        })
        .collect()
}

/// The text of a text field, `""` for anything else.
pub(crate) fn text(v: &Value) -> &str {
    match v {
        Value::Text(s) => s.as_ref(),
        _ => "",
    }
}

#[async_trait]
impl<F: SourceFilter> ChangeFilter for F {
    /// `page` without the changes the copy holds, key-moving updates rewritten, with the
    /// bookmark carrying the copy history while the stream is before the latest point.
    async fn apply(&mut self, page: Page) -> Result<Page, FaucetError> {
        let bookmark = page.bookmark().cloned().map(|b| match F::stream_point(&b) {
            Some(p) if p >= *self.latest() => b,
            _ => with_history(b, self.copied()),
        });
        let mut fates = Vec::with_capacity(page.len());
        let mut lookups = Lookups::new();
        let mut any_change = false;
        for row in page.rows() {
            let fate = fate(self, row.values(), &mut lookups).await?;
            any_change |= !matches!(fate, Fate::Keep);
            fates.push(fate);
        }
        if !any_change {
            let mut page = page;
            page.set_bookmark(bookmark);
            return Ok(page);
        }
        let mut points: HashMap<String, Vec<F::Point>> = HashMap::new();
        for (table, keys) in &lookups {
            points.insert(table.clone(), self.points_of(table, keys).await?);
        }
        let mut out = PageBuilder::new(page.schema().clone(), page.len());
        for (row, fate) in page.rows().zip(fates) {
            let v = row.values();
            match fate {
                Fate::Keep => out.push_row(v.iter().cloned()),
                Fate::Drop => {}
                Fate::Keys(ids) => {
                    let table = text(&v[F::TABLE]);
                    let at = F::position(v)?;
                    let found = &points[table];
                    let applied: Vec<bool> = ids.iter().map(|&id| at >= found[id]).collect();
                    match verdict(text(&v[F::OP]), &applied) {
                        Verdict::Keep => out.push_row(v.iter().cloned()),
                        Verdict::Drop => {}
                        Verdict::AsDelete => out.push_row(F::as_delete(v)),
                        Verdict::AsInsert => out.push_row(F::as_insert(v, table, &at)?),
                    }
                }
            }
        }
        Ok(out.finish(bookmark))
    }

    fn passed(&self, bookmark: &Bookmark) -> bool {
        F::stream_point(bookmark).is_some_and(|p| p >= *self.latest())
    }
}

/// The change stream, through a [`ChangeFilter`] while it is needed.
pub(crate) struct FilteredChanges<'a, F> {
    /// The change source's stream.
    pub(crate) inner: Box<dyn PageStream + 'a>,
    /// `None` once the stream is past every point of the copy (or there never was one).
    pub(crate) filter: Option<F>,
}

#[async_trait]
impl<F: ChangeFilter> PageStream for FilteredChanges<'_, F> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        let Some(page) = self.inner.next_page().await? else {
            return Ok(None);
        };
        let Some(filter) = &mut self.filter else {
            return Ok(Some(page));
        };
        let page = filter.apply(page).await?;
        if page.bookmark().is_some_and(|b| filter.passed(b)) {
            tracing::info!("the change stream passed the copy's last snapshot point");
            self.filter = None;
        }
        Ok(Some(page))
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        self.inner
            .bookmark_durable(&crate::copy_history::strip_history(bookmark))
            .await
    }

    fn reads_ahead(&self) -> bool {
        self.inner.reads_ahead()
    }
}

/// Stands in while the change stream opens (the snapshot's session is dropped first).
pub(crate) struct EmptyStream;

#[async_trait]
impl PageStream for EmptyStream {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::copy_history::test_point::N;

    fn k(v: &str) -> Option<Vec<String>> {
        Some(vec![v.to_owned()])
    }

    #[test]
    fn keys_are_placed_in_their_range_and_dirty_ranges_lower_the_point() {
        // Copied to 42 as of 100 (the page 42..44 in flight), the rest as of 200.
        let mut t = TableCopy::<N>::default();
        t.in_flight(N(100), None, k("10"));
        t.advance(N(100), k("10"));
        t.in_flight(N(100), k("10"), k("42"));
        t.advance(N(100), k("42"));
        t.in_flight(N(100), k("42"), k("44"));
        t.in_flight(N(200), k("42"), None);
        t.advance(N(200), None);
        let b = t.bounds();
        assert_eq!(
            b.keys,
            vec![
                &vec!["42".to_owned()],
                &vec!["42".to_owned()],
                &vec!["44".to_owned()]
            ]
        );
        let floor = N(0);
        // key 7: below 42.
        assert_eq!(b.point(&[false, false, false], &floor), N(100));
        // key 43: above 42, inside the dirty 42..44.
        assert_eq!(b.point(&[true, true, false], &floor), N(100));
        // key 50: above 44.
        assert_eq!(b.point(&[true, true, true], &floor), N(200));
        assert_eq!(t.early(&N(99)), Early::Drop);
        assert_eq!(t.early(&N(150)), Early::Lookup);
        assert_eq!(t.early(&N(200)), Early::Keep);
    }

    #[test]
    fn updates_across_ranges_become_deletes_or_inserts() {
        assert_eq!(verdict("u", &[true, true]), Verdict::Keep);
        assert_eq!(verdict("u", &[false, false]), Verdict::Drop);
        assert_eq!(verdict("u", &[true, false]), Verdict::AsDelete);
        assert_eq!(verdict("u", &[false, true]), Verdict::AsInsert);
        assert_eq!(verdict("c", &[false]), Verdict::Drop);
        assert_eq!(verdict("d", &[true]), Verdict::Keep);
    }
}
