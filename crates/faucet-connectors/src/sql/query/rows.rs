//! Decoded rows into pages: a dialect's reader decodes each row's values (and the text of
//! its key columns) into a [`RowPages`], which hands them to [`KeyedPages`], the page cutter
//! that keeps key ties whole. Each dialect adds its own `push_*` method that decodes one row
//! of its wire format (`postgres`: a COPY text line; `mysql`: a binary-protocol row).

use std::sync::Arc;

use faucet_core::{Bookmark, FaucetError, Page, Value};

use super::{Plan, QueryDialect};
use crate::sql::ReplicationMethod;
use crate::sql::bookmark::Start;
use crate::sql::keyed_pages::{KeyBookmarks, KeyedPages};

impl<D: QueryDialect> KeyBookmarks for Plan<D> {
    fn bookmark_after(&self, key: &[String]) -> Option<Bookmark> {
        Plan::bookmark_after(self, key)
    }

    fn bookmark_done(&self, last: Option<&[String]>) -> Option<Bookmark> {
        Plan::bookmark_done(self, last)
    }
}

/// The rows of one read of a [`Plan`], being cut into pages.
pub(crate) struct RowPages<D: QueryDialect> {
    /// The read.
    pub(crate) plan: Arc<Plan<D>>,
    /// The page cutter; its key buffers take the key text of the row being decoded.
    pub(crate) pages: KeyedPages,
    /// The row being decoded (its buffer reused from row to row).
    pub(crate) row: Vec<Value>,
    /// For each column, its position in the ordering key.
    pub(crate) key_pos: Vec<Option<usize>>,
    /// Rows read so far in this run (for error locations).
    pub(crate) rows_read: u64,
}

impl<D: QueryDialect> RowPages<D> {
    /// The rows of a read of `plan` from `start`, in pages of `batch_size`.
    pub(crate) fn new(plan: Arc<Plan<D>>, batch_size: usize, start: Start) -> Self {
        let mut key_pos = vec![None; plan.columns.len()];
        let key_len = plan.order.as_ref().map_or(0, |o| {
            for (k, &i) in o.indexes.iter().enumerate() {
                key_pos[i] = Some(k);
            }
            o.indexes.len()
        });
        let pages = KeyedPages::new(
            plan.schema.clone(),
            batch_size,
            key_len,
            plan.order.as_ref().is_some_and(|o| o.unique),
            plan.method == ReplicationMethod::Incremental,
            match start {
                Start::After(values) => Some(values),
                Start::Beginning => None,
            },
        );
        Self {
            row: Vec::with_capacity(plan.columns.len()),
            plan,
            pages,
            key_pos,
            rows_read: 0,
        }
    }

    /// Hands the decoded row to the page cutter (`has_key`: no key column was NULL); returns
    /// the previous page when this row starts a new one.
    pub(crate) fn end_row(&mut self, has_key: bool) -> Option<Page> {
        self.pages.push(self.row.drain(..), has_key, &*self.plan)
    }

    /// The last page of a finished read ([`KeyedPages::finish`]).
    pub(crate) fn finish(&mut self) -> Option<Page> {
        self.pages.finish(&*self.plan)
    }

    /// The rows in hand when the read is cancelled.
    pub(crate) fn finish_cancelled(&mut self) -> Option<Page> {
        self.pages.finish_cancelled(&*self.plan)
    }

    /// A [`FaucetError::Data`] at the current row (and `column`, when known).
    pub(crate) fn data_error(&self, column: Option<&str>, message: String) -> FaucetError {
        let location = match column {
            Some(c) => format!("{} row {}, column {c}", self.plan.label, self.rows_read),
            None => format!("{} row {}", self.plan.label, self.rows_read),
        };
        FaucetError::data(D::CONNECTOR, location, message)
    }
}
