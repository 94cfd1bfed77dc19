//! How far along a `faucet replicate` copy is: the rows this run copied, of the sum of the
//! catalog's row estimates of the tables it copies (`pg_class.reltuples`,
//! `information_schema.TABLES.TABLE_ROWS`: [`crate::sql::extent`]), stamped on every page of
//! the copy as an estimated [`faucet_core::Extent`] in rows, in the part of the table the
//! page is of ([`faucet_core::ExtentPart`]: its rows of its own estimate, its place among
//! the tables). Not known — the pages carry
//! none — when a table to copy has no estimate (a PostgreSQL table never analyzed) or the
//! run resumes a table mid-way (how much of it is left is not known). Once the copy is over
//! the change stream's pages carry their own (a bounded run's log bytes) or none.
//!
//! Also the loop of every `faucet replicate` stream ([`copy_then_changes`]): the copy's
//! pages, stamped, then the change stream from the copy's point.

use async_trait::async_trait;
use faucet_core::{Extent, ExtentPart, ExtentUnit, FaucetError, Page, PageStream, Value};

use crate::copy_history::{Copied, Point, TableCopy};
use crate::sql::query::QueryDialect;

/// A `faucet replicate` stream of one database, as [`copy_then_changes`] drives it: a copy
/// of tables inside a snapshot, then that database's change stream.
#[async_trait]
pub(crate) trait CopyThenChanges: Send {
    /// The connector's name, in errors.
    const CONNECTOR: &'static str;

    /// The change stream, once the copy is over (or its opening failed: then an empty one).
    fn changes(&mut self) -> Option<&mut (dyn PageStream + '_)>;

    /// A page to hand over before the copy starts, once (PostgreSQL: the bookmark of the
    /// slot it just created); none by default.
    fn before_copy(&mut self) -> Option<Page> {
        None
    }

    /// The copy's share read, `None` until worked out.
    fn progress(&mut self) -> &mut Option<CopyProgress>;

    /// Works out the copy's share ([`copy_progress`] of the tables left to copy).
    async fn start_progress(&mut self) -> CopyProgress;

    /// The next step of the copy: `Ok(None)` when the copy is over (or cancelled),
    /// `Ok(Some(None))` when a step produced nothing to hand over.
    ///
    /// # Errors
    /// As the copy's reads.
    async fn copy_page(&mut self) -> Result<Option<Option<Page>>, FaucetError>;

    /// Whether the run was cancelled.
    fn cancelled(&self) -> bool;

    /// Whether every listed table is copied.
    fn all_finished(&self) -> bool;

    /// Ends the copy and opens the change stream from the copy's point, filtered by what
    /// was copied; [`CopyThenChanges::changes`] returns it from then on.
    ///
    /// # Errors
    /// As the change source's `open`.
    async fn open_changes(&mut self) -> Result<(), FaucetError>;
}

/// The next page of a `faucet replicate` stream: the page `before_copy` gives, then the
/// copy's pages stamped with its share read, then, once every table is copied, the change
/// stream's.
///
/// # Errors
/// [`FaucetError::Read`] when the copy ended before every table was copied (and not by a
/// cancellation); otherwise as the copy's reads and the change stream.
pub(crate) async fn copy_then_changes<S: CopyThenChanges>(
    s: &mut S,
) -> Result<Option<Page>, FaucetError> {
    loop {
        if let Some(stream) = s.changes() {
            return stream.next_page().await;
        }
        if let Some(page) = s.before_copy() {
            return Ok(Some(page));
        }
        if s.progress().is_none() {
            let progress = s.start_progress().await;
            *s.progress() = Some(progress);
        }
        match s.copy_page().await? {
            Some(Some(page)) => {
                return Ok(Some(match s.progress() {
                    Some(progress) => progress.stamp(page),
                    None => page,
                }));
            }
            Some(None) => {}
            None if s.cancelled() => return Ok(None),
            None => {
                if !s.all_finished() {
                    return Err(FaucetError::read(
                        S::CONNECTOR,
                        "the snapshot ended before every table was copied",
                        None,
                    ));
                }
                s.open_changes().await?;
            }
        }
    }
}

/// The [`CopyProgress`] of copying `tables` (qualified names) on `connection`: their row
/// estimates ([`QueryDialect::row_estimate`]); none known for `None`, no table, or a server
/// that cannot be reached.
pub(crate) async fn copy_progress<D: QueryDialect>(
    connection: &D::Connection,
    tables: Option<Vec<D::Table>>,
) -> CopyProgress {
    let tables = match tables {
        Some(t) if !t.is_empty() => t,
        _ => return CopyProgress::unknown(),
    };
    let mut session = match D::connect(connection).await {
        Ok(session) => session,
        Err(e) => {
            tracing::debug!(error = %e, "no row estimates: the copy's share is not known");
            return CopyProgress::unknown();
        }
    };
    let mut estimates = Vec::with_capacity(tables.len());
    for t in &tables {
        let estimate = D::row_estimate(&mut session, connection, t).await;
        estimates.push((t.to_string(), estimate));
    }
    D::close(session).await;
    CopyProgress::new(estimates)
}

/// The rows a copy read of the tables' summed estimate, and of each table's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CopyProgress {
    /// The tables this run copies, in the order it copies them, with their estimates;
    /// `None` when one is not known (then neither is the whole copy's share).
    tables: Option<Vec<TableShare>>,
    /// The sum of the estimates.
    total: u64,
    /// Rows copied by this run.
    done: u64,
}

/// One table of a [`CopyProgress`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct TableShare {
    name: String,
    estimate: u64,
    done: u64,
}

impl CopyProgress {
    /// A copy whose share is not known: its pages carry no extent.
    pub(crate) fn unknown() -> Self {
        Self {
            tables: None,
            total: 0,
            done: 0,
        }
    }

    /// A copy of the tables named, in copy order, with these row estimates (`None`: not
    /// known, which leaves the whole copy's share not known).
    pub(crate) fn new(estimates: impl IntoIterator<Item = (String, Option<u64>)>) -> Self {
        let tables: Option<Vec<TableShare>> = estimates
            .into_iter()
            .map(|(name, estimate)| {
                estimate.map(|estimate| TableShare {
                    name,
                    estimate,
                    done: 0,
                })
            })
            .collect();
        match tables {
            Some(tables) if !tables.is_empty() => Self {
                total: tables.iter().map(|t| t.estimate).sum(),
                tables: Some(tables),
                done: 0,
            },
            _ => Self::unknown(),
        }
    }

    /// `page` of the copy, counted, with the copy's extent when its total is known, in the
    /// part of its table. A copy's page holds one table's rows (each replicate reads a
    /// table a page at a time); its table is the first record's `table`.
    pub(crate) fn stamp(&mut self, page: Page) -> Page {
        let rows = page.len() as u64;
        self.done += rows;
        let Some(tables) = &mut self.tables else {
            return page;
        };
        let extent = Extent::estimated(self.done, self.total, ExtentUnit::Rows);
        let table = page.row(0).and_then(|r| match r.get("table") {
            Some(Value::Text(t)) => Some(t.as_str().to_owned()),
            _ => None,
        });
        let count = u32::try_from(tables.len()).unwrap_or(u32::MAX);
        let part = table.and_then(|name| {
            let (i, share) = tables
                .iter_mut()
                .enumerate()
                .find(|(_, t)| t.name == name)?;
            share.done += rows;
            Some(ExtentPart {
                name,
                number: u32::try_from(i + 1).unwrap_or(u32::MAX),
                count,
                done: share.done,
                total: share.estimate,
            })
        });
        page.with_extent(Some(match part {
            Some(part) => extent.with_part(part),
            None => extent,
        }))
    }
}

/// The tables of `tables` a copy has left, named by `name`: those `holds` does not count as
/// copied; `None` when one of them resumes mid-way (`copied` has a key to resume after: how
/// much of it is left is not known). The one rule both replicate snapshots use.
pub(crate) fn tables_left<'t, T, P: Point>(
    tables: &'t [T],
    name: impl Fn(&T) -> String,
    holds: impl Fn(&str) -> bool,
    copied: &Copied<P>,
) -> Option<Vec<&'t T>> {
    let mut left = Vec::new();
    for t in tables {
        let name = name(t);
        if holds(&name) {
            continue;
        }
        let history = copied.tables.get(&name);
        if history.and_then(TableCopy::resume_after).is_some() {
            return None;
        }
        left.push(t);
    }
    Some(left)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use faucet_core::{DataType, Field, PageBuilder, Schema};

    use super::*;

    /// A copy's page of `rows` records of `table`.
    fn page(table: &str, rows: i64) -> Page {
        let schema = Arc::new(Schema::new(vec![
            Field::new("table", DataType::Text),
            Field::new("id", DataType::Int),
        ]));
        let mut b = PageBuilder::new(schema, 4);
        for i in 0..rows {
            b.push_row([Value::Text(table.into()), Value::Int(i)]);
        }
        b.finish(None)
    }

    fn estimates(e: &[(&str, Option<u64>)]) -> Vec<(String, Option<u64>)> {
        e.iter().map(|(n, e)| ((*n).to_owned(), *e)).collect()
    }

    #[test]
    fn the_copy_counts_rows_of_the_summed_estimates_and_of_each_table() {
        let mut p = CopyProgress::new(estimates(&[("s.a", Some(10)), ("s.b", Some(30))]));
        let e = p.stamp(page("s.a", 4)).extent().cloned().expect("extent");
        assert_eq!((e.done, e.total, e.estimate), (4, 40, true));
        let part = e.part.expect("the table's part");
        assert_eq!(
            (
                part.name.as_str(),
                part.number,
                part.count,
                part.done,
                part.total
            ),
            ("s.a", 1, 2, 4, 10)
        );
        let e = p.stamp(page("s.b", 6)).extent().cloned().expect("extent");
        assert_eq!(e.done, 10);
        let part = e.part.expect("the table's part");
        assert_eq!((part.number, part.done, part.total), (2, 6, 30));
        assert_eq!(part.percent(true), 20.0);
        let e = p.stamp(page("s.b", 0)).extent().cloned().expect("extent");
        assert_eq!(e.done, 10, "an empty page counts nothing");
        assert_eq!(e.part, None, "an empty page names no table");
        let mut unknown = CopyProgress::new(estimates(&[("s.a", Some(10)), ("s.b", None)]));
        assert_eq!(unknown.stamp(page("s.a", 3)).extent(), None);
        assert_eq!(CopyProgress::unknown().stamp(page("s.a", 3)).extent(), None);
    }
}
