//! Cutting the rows of a keyed SQL read into pages, and each page's bookmark: the one rule of
//! the `postgres` and `mysql` query sources. A page is only handed over once the row after
//! it has been decoded (or the read ended), so its bookmark can say whether the key group of
//! its last row is complete:
//! * a unique ordering key (primary key, or a replication key containing a unique index):
//!   the page's last key tuple;
//! * a key not known unique: the last key tuple whose group is known complete (the next
//!   row has another key), so a resumed read never skips the rest of a tie group; it may
//!   deliver that group's rows again (at-least-once, absorbed by an upsert sink);
//! * the last page of a finished read: [`KeyBookmarks::bookmark_done`];
//! * the rows in hand when the read is cancelled: as mid-read, treating the group of the
//!   last row as incomplete.
//!
//! Key tuples are the key columns' text as the source binds them back when resuming.

use std::sync::Arc;

use faucet_core::{Bookmark, Page, PageBuilder, Schema, Value};

/// How a read's plan writes its bookmarks.
pub(crate) trait KeyBookmarks {
    /// The bookmark after a row whose key tuple is `key`, mid-read (`None` when the read
    /// cannot resume mid-way: a full read without a key).
    fn bookmark_after(&self, key: &[String]) -> Option<Bookmark>;
    /// The bookmark of the last page of a finished read whose last key tuple is `last`.
    fn bookmark_done(&self, last: Option<&[String]>) -> Option<Bookmark>;
}

/// Rows in, pages with their bookmarks out (module docs).
pub(crate) struct KeyedPages {
    schema: Arc<Schema>,
    batch_size: usize,
    builder: PageBuilder,
    /// Whether the ordering key is known unique.
    unique: bool,
    /// Whether a finished read with no rows hands over nothing (an incremental read: the
    /// stored bookmark stays) rather than an empty page marking the read done.
    incremental: bool,
    /// The key tuple of the row being decoded (buffers reused from row to row; the tuples
    /// of `last_key` / `last_complete` are recycled into it, so a row costs no allocation
    /// for its key).
    key: Vec<String>,
    /// The key tuple of the last row pushed.
    last_key: Option<Vec<String>>,
    /// For a key not known unique: the last key tuple whose group is complete.
    last_complete: Option<Vec<String>>,
}

impl KeyedPages {
    /// Pages of `batch_size` rows of `schema`, ordered by a key of `key_len` columns
    /// (`unique` or not), resuming after the key tuple `start_after` when there is one.
    pub(crate) fn new(
        schema: Arc<Schema>,
        batch_size: usize,
        key_len: usize,
        unique: bool,
        incremental: bool,
        start_after: Option<Vec<String>>,
    ) -> Self {
        Self {
            builder: PageBuilder::new(schema.clone(), batch_size),
            schema,
            batch_size,
            unique,
            incremental,
            key: vec![String::new(); key_len],
            last_key: None,
            last_complete: start_after,
        }
    }

    /// The buffers of the key tuple of the row being decoded, one per key column, to fill
    /// before [`KeyedPages::push`]. Empty when the read has no ordering key.
    pub(crate) fn key_buffers(&mut self) -> &mut [String] {
        &mut self.key
    }

    /// Adds a decoded row whose key tuple is in [`KeyedPages::key_buffers`] (`has_key`:
    /// the read has a key and none of the row's key columns is NULL); returns the previous
    /// page when this row starts a new one.
    pub(crate) fn push(
        &mut self,
        row: impl IntoIterator<Item = Value>,
        has_key: bool,
        plan: &impl KeyBookmarks,
    ) -> Option<Page> {
        let differs = match (&self.last_key, has_key) {
            (None, false) => false,
            (Some(last), true) => *last != self.key,
            _ => true,
        };
        let mut page = None;
        if self.builder.len() >= self.batch_size {
            let bookmark = self.bookmark_mid_read(has_key && differs, plan);
            page = Some(self.take_page(bookmark));
        }
        self.builder.push_row(row);
        if differs {
            // last_complete ← last_key ← this row's key; the tuple dropped out of
            // last_complete becomes the next row's key buffer.
            let key = if has_key {
                let width = self.key.len();
                let mut spare = self.last_complete.take().unwrap_or_default();
                spare.resize_with(width, String::new);
                Some(std::mem::replace(&mut self.key, spare))
            } else {
                None
            };
            self.last_complete = std::mem::replace(&mut self.last_key, key);
        }
        page
    }

    /// The bookmark of a page cut mid-read; `next_differs`: the row after it has another key.
    fn bookmark_mid_read(&self, next_differs: bool, plan: &impl KeyBookmarks) -> Option<Bookmark> {
        let key = if self.unique || next_differs {
            self.last_key.as_ref()
        } else {
            self.last_complete.as_ref()
        };
        key.and_then(|k| plan.bookmark_after(k))
    }

    fn take_page(&mut self, bookmark: Option<Bookmark>) -> Page {
        let builder = std::mem::replace(
            &mut self.builder,
            PageBuilder::new(self.schema.clone(), self.batch_size),
        );
        builder.finish(bookmark)
    }

    /// The last page of a finished read: the rows in hand with
    /// [`KeyBookmarks::bookmark_done`]; for a full read also an empty page, to mark the read
    /// done. An incremental read that found nothing new hands over nothing.
    pub(crate) fn finish(&mut self, plan: &impl KeyBookmarks) -> Option<Page> {
        if self.builder.is_empty() && self.incremental {
            return None;
        }
        let bookmark = plan.bookmark_done(self.last_key.as_deref());
        Some(self.take_page(bookmark))
    }

    /// The rows in hand when the read is cancelled.
    pub(crate) fn finish_cancelled(&mut self, plan: &impl KeyBookmarks) -> Option<Page> {
        if self.builder.is_empty() {
            return None;
        }
        let bookmark = self.bookmark_mid_read(false, plan);
        Some(self.take_page(bookmark))
    }
}
