//! How far along a query source's full read of a table is: rows read of the catalog's row
//! estimate (`pg_class.reltuples`, MySQL's `information_schema.TABLES.TABLE_ROWS`), stamped
//! on every page as a [`faucet_core::Extent`] marked `estimate` (the table may hold more
//! rows, or fewer, than the catalog last counted). Only a read from the table's beginning
//! has one — a resumed read or an incremental run after the first reads an unknown share of
//! it — and only a table, not a query; without an estimate the pages carry none ("not
//! known").

use async_trait::async_trait;
use faucet_core::{Bookmark, Extent, ExtentUnit, FaucetError, Page, PageStream};

/// A query read's stream whose pages carry rows read of `total` ([`RowEstimate::wrap`]).
pub(crate) struct RowEstimate<'a> {
    inner: Box<dyn PageStream + 'a>,
    total: u64,
    done: u64,
}

impl<'a> RowEstimate<'a> {
    /// `inner`, its pages stamped with rows read of `total` when there is an estimate;
    /// `inner` itself when there is none.
    pub(crate) fn wrap(
        inner: Box<dyn PageStream + 'a>,
        total: Option<u64>,
    ) -> Box<dyn PageStream + 'a> {
        match total {
            Some(total) => Box::new(Self {
                inner,
                total,
                done: 0,
            }),
            None => inner,
        }
    }
}

#[async_trait]
impl PageStream for RowEstimate<'_> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        let Some(page) = self.inner.next_page().await? else {
            return Ok(None);
        };
        self.done += page.len() as u64;
        let extent = Extent::estimated(self.done, self.total, ExtentUnit::Rows);
        Ok(Some(page.with_extent(Some(extent))))
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        self.inner.bookmark_durable(bookmark).await
    }

    fn reads_ahead(&self) -> bool {
        self.inner.reads_ahead()
    }
}

/// A catalog's row count as an estimate: `None` for a negative one (PostgreSQL's
/// `reltuples` is -1 for a table never vacuumed or analyzed: not known).
pub(crate) fn row_estimate(catalog: Option<i64>) -> Option<u64> {
    catalog.and_then(|n| u64::try_from(n).ok())
}
