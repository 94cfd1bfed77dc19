//! Decoding COPY text lines into rows and their key tuples; the pages and their bookmarks
//! are cut by [`KeyedPages`], the rule shared with the `mysql` query source.

use std::borrow::Cow;
use std::sync::Arc;

use faucet_core::{Bookmark, FaucetError, Page, Value};

use super::config::ReplicationMethod;
use super::copy_text::fields;
use super::plan::{Plan, Start};
use crate::postgres::config::CONNECTOR;
use crate::postgres::types::decode_text;
use crate::sql::keyed_pages::{KeyBookmarks, KeyedPages};

/// Decodes COPY lines into rows and hands them to [`KeyedPages`].
pub(crate) struct Assembler {
    plan: Arc<Plan>,
    pages: KeyedPages,
    row: Vec<Value>,
    /// For each column, its position in the ordering key.
    key_pos: Vec<Option<usize>>,
    /// Rows read so far in this run (for error locations).
    pub(crate) rows_read: u64,
}

impl KeyBookmarks for Plan {
    fn bookmark_after(&self, key: &[String]) -> Option<Bookmark> {
        Plan::bookmark_after(self, key)
    }

    fn bookmark_done(&self, last: Option<&[String]>) -> Option<Bookmark> {
        Plan::bookmark_done(self, last)
    }
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
        let pages = KeyedPages::new(
            plan.schema.clone(),
            batch_size,
            key_len,
            plan.order.as_ref().is_some_and(|o| o.unique),
            plan.method == ReplicationMethod::Incremental,
            start_key,
        );
        Self {
            row: Vec::with_capacity(plan.columns.len()),
            plan,
            pages,
            key_pos,
            rows_read: 0,
        }
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
        let mut has_key = !self.pages.key_buffers().is_empty();
        // One UTF-8 check per line: a field cut at ASCII tabs of a valid line is valid.
        let line_text = std::str::from_utf8(line).ok();
        for (i, field) in fields(line).enumerate() {
            let Some(column) = columns.get(i) else {
                return Err(self.data_error(None, "more columns than described".into()));
            };
            let value = match field {
                None => {
                    if self.key_pos[i].is_some() {
                        has_key = false;
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
                        let buf = &mut self.pages.key_buffers()[k];
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
        // The key tuple is PostgreSQL's text, the COPY field unescaped: exactly what is
        // bound back when resuming.
        Ok(self.pages.push(self.row.drain(..), has_key, &*self.plan))
    }

    /// The last page of a finished read ([`KeyedPages::finish`]).
    pub(crate) fn finish(&mut self) -> Option<Page> {
        self.pages.finish(&*self.plan)
    }

    /// The rows in hand when the read is cancelled.
    pub(crate) fn finish_cancelled(&mut self) -> Option<Page> {
        self.pages.finish_cancelled(&*self.plan)
    }

    fn data_error(&self, column: Option<&str>, message: String) -> FaucetError {
        let location = match column {
            Some(c) => format!("{} row {}, column {c}", self.plan.label, self.rows_read),
            None => format!("{} row {}", self.plan.label, self.rows_read),
        };
        FaucetError::data(CONNECTOR, location, message)
    }
}
