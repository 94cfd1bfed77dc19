//! Cutting decoded rows into pages, and each page's bookmark. A page is only handed over
//! once the row after it has been decoded (or the read ended), so its bookmark can say
//! whether the key group of its last row is complete:
//! * a unique ordering key (primary key, or a replication key containing a unique index):
//!   the page's last key tuple;
//! * a key not known unique: the last key tuple whose group is known complete (the next
//!   row has a greater key), so a resumed read never skips the rest of a tie group; it may
//!   deliver that group's rows again (at-least-once, absorbed by an upsert sink);
//! * the last page of a finished read: [`Plan::bookmark_done`];
//! * the rows in hand when the read is cancelled: as mid-read, treating the group of the
//!   last row as incomplete.

use std::borrow::Cow;
use std::sync::Arc;

use faucet_core::{Bookmark, FaucetError, Page, PageBuilder, Value};

use super::config::ReplicationMethod;
use super::copy_text::fields;
use super::plan::{Plan, Start};
use crate::postgres::config::CONNECTOR;
use crate::postgres::types::decode_text;

/// Cuts decoded rows into pages and works out each page's bookmark.
pub(crate) struct Assembler {
    plan: Arc<Plan>,
    batch_size: usize,
    builder: PageBuilder,
    row: Vec<Value>,
    /// For each column, its position in the ordering key.
    key_pos: Vec<Option<usize>>,
    /// The key tuple of the row being decoded (buffers reused from row to row; the tuples
    /// of `last_key` / `last_complete` are recycled into it, so a row costs no allocation
    /// for its key).
    key: Vec<String>,
    /// Whether the row being decoded has a key tuple (an ordering key, none of it NULL).
    has_key: bool,
    /// Rows read so far in this run (for error locations).
    pub(crate) rows_read: u64,
    /// The key tuple of the last row pushed.
    last_key: Option<Vec<String>>,
    /// For a key not known unique: the last key tuple whose group is complete.
    last_complete: Option<Vec<String>>,
}

impl Assembler {
    /// An assembler for a read of `plan` from `start`, in pages of `batch_size`.
    pub(crate) fn new(plan: Arc<Plan>, batch_size: usize, start: Start) -> Self {
        let start_key = match start {
            Start::After(values) => Some(values),
            Start::Beginning => None,
        };
        let mut key_pos = vec![None; plan.columns.len()];
        let key_len = plan.order.as_ref().map_or(0, |o| {
            for (k, &i) in o.indexes.iter().enumerate() {
                key_pos[i] = Some(k);
            }
            o.indexes.len()
        });
        Self {
            builder: PageBuilder::new(plan.schema.clone(), batch_size),
            row: Vec::with_capacity(plan.columns.len()),
            plan,
            batch_size,
            key_pos,
            key: vec![String::new(); key_len],
            has_key: false,
            rows_read: 0,
            last_key: None,
            last_complete: start_key,
        }
    }

    fn unique(&self) -> bool {
        self.plan.order.as_ref().is_some_and(|o| o.unique)
    }

    /// Decodes one COPY line; returns the previous page when this row starts a new one.
    ///
    /// # Errors
    /// [`FaucetError::Data`] naming the row and column when a value does not decode.
    pub(crate) fn push_line(&mut self, line: &[u8]) -> Result<Option<Page>, FaucetError> {
        self.rows_read += 1;
        let columns = &self.plan.columns;
        self.row.clear();
        // A key column that is NULL leaves the row without a key tuple.
        self.has_key = !self.key.is_empty();
        // One UTF-8 check per line: a field cut at ASCII tabs of a valid line is valid.
        let line_text = std::str::from_utf8(line).ok();
        for (i, field) in fields(line).enumerate() {
            let Some(column) = columns.get(i) else {
                return Err(self.data_error(None, "more columns than described".into()));
            };
            let value = match field {
                None => {
                    if self.key_pos[i].is_some() {
                        self.has_key = false;
                    }
                    Value::Null
                }
                Some(bytes) => {
                    let checked = match (&bytes, line_text) {
                        (Cow::Borrowed(b), Some(l)) => {
                            let at = (b.as_ptr() as usize).wrapping_sub(line.as_ptr() as usize);
                            at.checked_add(b.len()).and_then(|end| l.get(at..end))
                        }
                        _ => None,
                    };
                    let text = match checked {
                        Some(text) => text,
                        None => std::str::from_utf8(&bytes)
                            .map_err(|e| self.data_error(Some(&column.name), e.to_string()))?,
                    };
                    if let Some(k) = self.key_pos[i] {
                        let buf = &mut self.key[k];
                        buf.clear();
                        buf.push_str(text);
                    }
                    decode_text(column.decode_oid, text)
                        .map_err(|m| self.data_error(Some(&column.name), m))?
                }
            };
            self.row.push(value);
        }
        if self.row.len() != columns.len() {
            return Err(self.data_error(
                None,
                format!("{} columns, expected {}", self.row.len(), columns.len()),
            ));
        }
        // The key tuple (PostgreSQL's text, the COPY field unescaped: exactly what is bound
        // back when resuming) differs from the last row's.
        let differs = match (&self.last_key, self.has_key) {
            (None, false) => false,
            (Some(last), true) => *last != self.key,
            _ => true,
        };
        let mut page = None;
        if self.builder.len() >= self.batch_size {
            let next_differs = self.has_key && differs;
            let bookmark = self.bookmark_mid_read(next_differs);
            page = Some(self.take_page(bookmark));
        }
        self.builder.push_row(self.row.drain(..));
        if differs {
            // last_complete ← last_key ← this row's key; the tuple dropped out of
            // last_complete becomes the next row's key buffer.
            let key = if self.has_key {
                let width = self.key.len();
                let mut spare = self.last_complete.take().unwrap_or_default();
                spare.resize_with(width, String::new);
                Some(std::mem::replace(&mut self.key, spare))
            } else {
                None
            };
            self.last_complete = std::mem::replace(&mut self.last_key, key);
        }
        Ok(page)
    }

    /// The bookmark of a page cut mid-read; `next_differs`: the row after it has another key.
    fn bookmark_mid_read(&self, next_differs: bool) -> Option<Bookmark> {
        let key = if self.unique() || next_differs {
            self.last_key.as_ref()
        } else {
            self.last_complete.as_ref()
        };
        key.and_then(|k| self.plan.bookmark_after(k))
    }

    fn take_page(&mut self, bookmark: Option<Bookmark>) -> Page {
        let builder = std::mem::replace(
            &mut self.builder,
            PageBuilder::new(self.plan.schema.clone(), self.batch_size),
        );
        builder.finish(bookmark)
    }

    /// The last page of a finished read: the rows in hand with [`Plan::bookmark_done`]; for
    /// a full read also an empty page, to mark the read done. An incremental read that found
    /// nothing new hands over nothing (the stored bookmark stays).
    pub(crate) fn finish(&mut self) -> Option<Page> {
        if self.builder.is_empty() && self.plan.method == ReplicationMethod::Incremental {
            return None;
        }
        let bookmark = self.plan.bookmark_done(self.last_key.as_deref());
        Some(self.take_page(bookmark))
    }

    /// The rows in hand when the read is cancelled.
    pub(crate) fn finish_cancelled(&mut self) -> Option<Page> {
        if self.builder.is_empty() {
            return None;
        }
        let bookmark = self.bookmark_mid_read(false);
        Some(self.take_page(bookmark))
    }

    fn data_error(&self, column: Option<&str>, message: String) -> FaucetError {
        let location = match column {
            Some(c) => format!("{} row {}, column {c}", self.plan.label, self.rows_read),
            None => format!("{} row {}", self.plan.label, self.rows_read),
        };
        FaucetError::data(CONNECTOR, location, message)
    }
}
