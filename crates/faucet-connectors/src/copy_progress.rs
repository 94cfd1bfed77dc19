//! How far along a `faucet replicate` copy is: the rows this run copied, of the sum of the
//! catalog's row estimates of the tables it copies (`pg_class.reltuples`,
//! `information_schema.TABLES.TABLE_ROWS`: [`crate::sql::extent`]), stamped on every page of
//! the copy as an estimated [`faucet_core::Extent`] in rows. Not known — the pages carry
//! none — when a table to copy has no estimate (a PostgreSQL table never analyzed) or the
//! run resumes a table mid-way (how much of it is left is not known). Once the copy is over
//! the change stream's pages carry their own (a bounded run's log bytes) or none.

use faucet_core::{Extent, ExtentUnit, Page};

use crate::copy_history::{Copied, Point, TableCopy};
use crate::sql::query::QueryDialect;

/// The [`CopyProgress`] of copying `tables` (qualified names) on `connection`: their row
/// estimates ([`QueryDialect::row_estimate`]); none known for `None`, no table, or a server
/// that cannot be reached.
pub(crate) async fn copy_progress<D: QueryDialect>(
    connection: &D::Connection,
    tables: Option<Vec<D::Table>>,
) -> CopyProgress {
    let tables = match tables {
        Some(t) if !t.is_empty() => t,
        _ => return CopyProgress::new([None]),
    };
    let mut session = match D::connect(connection).await {
        Ok(session) => session,
        Err(e) => {
            tracing::debug!(error = %e, "no row estimates: the copy's share is not known");
            return CopyProgress::new([None]);
        }
    };
    let mut estimates = Vec::with_capacity(tables.len());
    for t in &tables {
        estimates.push(D::row_estimate(&mut session, connection, t).await);
    }
    D::close(session).await;
    CopyProgress::new(estimates)
}

/// The rows a copy read of the tables' summed estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CopyProgress {
    total: Option<u64>,
    done: u64,
}

impl CopyProgress {
    /// A copy of tables with these estimates (`None`: not known, which leaves the whole
    /// copy's share not known).
    pub(crate) fn new(estimates: impl IntoIterator<Item = Option<u64>>) -> Self {
        Self {
            total: estimates.into_iter().sum(),
            done: 0,
        }
    }

    /// `page` of the copy, counted, with the copy's extent when its total is known.
    pub(crate) fn stamp(&mut self, page: Page) -> Page {
        self.done += page.len() as u64;
        match self.total {
            Some(total) => {
                page.with_extent(Some(Extent::estimated(self.done, total, ExtentUnit::Rows)))
            }
            None => page,
        }
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

    use faucet_core::{DataType, Field, PageBuilder, Schema, Value};

    use super::*;

    fn page(rows: i64) -> Page {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int)]));
        let mut b = PageBuilder::new(schema, 4);
        for i in 0..rows {
            b.push_row([Value::Int(i)]);
        }
        b.finish(None)
    }

    #[test]
    fn the_copy_counts_rows_of_the_summed_estimates() {
        let mut p = CopyProgress::new([Some(10), Some(30)]);
        let e = *p.stamp(page(4)).extent().expect("extent");
        assert_eq!((e.done, e.total, e.estimate), (4, 40, true));
        let e = *p.stamp(page(0)).extent().expect("extent");
        assert_eq!(e.done, 4, "an empty page counts nothing");
        let mut unknown = CopyProgress::new([Some(10), None]);
        assert_eq!(unknown.stamp(page(3)).extent(), None);
    }
}
