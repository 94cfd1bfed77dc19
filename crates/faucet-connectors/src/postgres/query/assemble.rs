//! Decoding COPY text lines into rows and their key tuples; the pages and their bookmarks
//! are cut by [`RowPages`], the rule shared with the `mysql` query source.

use std::borrow::Cow;

use faucet_core::{FaucetError, Page, Value};

use super::Postgres;
use super::copy_text::fields;
use crate::postgres::types::decode_text;
use crate::sql::query::rows::RowPages;

/// Cuts decoded COPY lines into pages.
pub(crate) type Assembler = RowPages<Postgres>;

impl RowPages<Postgres> {
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
        Ok(self.end_row(has_key))
    }
}
