//! Pages: the records a source hands over at once, plus the bookmark after them.
//!
//! A page holds at most `batch_size` records that share one [`Schema`]; the values are kept
//! in one flat buffer (row-major), so a page costs a few allocations, not one per row. The
//! representation is private: use [`PageBuilder`] to make a page and [`Page::rows`] to read it.

use std::sync::Arc;
use std::time::SystemTime;

use crate::extent::Extent;
use crate::value::{DataType, Schema, Value};

/// A source position reached after a page: a JSON value such as `{"lsn": "0/16B3748"}` or
/// `{"updated_at": "...", "id": 42}`. Opaque to everything but the source that made it.
pub type Bookmark = serde_json::Value;

/// Where a page starts in its source's order, as the run loop saw it: the bookmark the run
/// stood at before the page (the one it resumed from, or the last page's; `None` on a first
/// run) and how many records came after that bookmark before this page (0 unless pages without
/// a bookmark came between). A source that replays from a bookmark hands over the same records
/// in the same order, however it cuts them into pages, so `(bookmark, offset + index)` names
/// one record across runs — what the bus sinks' message ids are made of.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PageStart {
    /// The bookmark before the page.
    pub bookmark: Option<Bookmark>,
    /// Records after that bookmark before the page.
    pub offset: u64,
}

/// Records sharing a schema, plus the bookmark after them.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    schema: Arc<Schema>,
    values: Vec<Value>,
    bookmark: Option<Bookmark>,
    source_time: Option<SystemTime>,
    start: PageStart,
    extent: Option<Extent>,
}

impl Page {
    /// An empty page of `schema` carrying only `bookmark` (a source that advanced without
    /// producing records, e.g. past a transaction of unpublished tables).
    pub fn empty(schema: Arc<Schema>, bookmark: Option<Bookmark>) -> Self {
        Self {
            schema,
            values: Vec::new(),
            bookmark,
            source_time: None,
            start: PageStart::default(),
            extent: None,
        }
    }

    /// The shared schema.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        if self.schema.is_empty() {
            0
        } else {
            self.values.len() / self.schema.len()
        }
    }

    /// Whether the page has no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bookmark after this page's records; `None` when the source cannot resume.
    pub fn bookmark(&self) -> Option<&Bookmark> {
        self.bookmark.as_ref()
    }

    /// Replaces the bookmark.
    pub fn set_bookmark(&mut self, bookmark: Option<Bookmark>) {
        self.bookmark = bookmark;
    }

    /// Where the page starts ([`PageStart`]); set by the run loop before a sink sees the
    /// page, the default (no bookmark, offset 0) until then.
    pub fn start(&self) -> &PageStart {
        &self.start
    }

    /// Sets where the page starts (the run loop does, before writing it).
    pub fn set_start(&mut self, start: PageStart) {
        self.start = start;
    }

    /// When the source was at this page's bookmark, by the source's clock: for a change
    /// stream, the commit time of the last transaction in the page, or the server time of
    /// the keepalive that moved the position. `None` when the source has no such time (a
    /// file, a query). The run loop reports the lag of a durable bookmark from it
    /// ([`crate::RunSummary::lag_seconds`]).
    pub fn source_time(&self) -> Option<SystemTime> {
        self.source_time
    }

    /// This page, with [`Page::source_time`] set to `at`.
    #[must_use]
    pub fn with_source_time(mut self, at: Option<SystemTime>) -> Self {
        self.source_time = at;
        self
    }

    /// How far along the source's read is at this page's end, where the source knows its
    /// end ([`crate::extent`]: a file's bytes, a table's estimated rows, a bounded change
    /// stream's log bytes); `None` when it is not known. The run loop reports it with the
    /// page's progress ([`crate::pipeline::Progress::extent`]).
    pub fn extent(&self) -> Option<&Extent> {
        self.extent.as_ref()
    }

    /// This page, with [`Page::extent`] set to `extent`.
    #[must_use]
    pub fn with_extent(mut self, extent: Option<Extent>) -> Self {
        self.extent = extent;
        self
    }

    /// The records, in order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = RowRef<'_>> + '_ {
        let width = self.schema.len().max(1);
        let n = self.len();
        (0..n).map(move |i| RowRef {
            schema: &self.schema,
            values: &self.values[i * width..(i + 1) * width],
        })
    }

    /// The data type of field `i`: the schema's, or where it is [`DataType::Unknown`] (a
    /// schemaless source: JSON Lines, a CSV without declared columns) the type of the
    /// field's first value in the page that has one, and [`DataType::Text`] when none has —
    /// what a SQL sink makes a column of.
    pub fn field_type(&self, i: usize) -> DataType {
        match self.schema.fields().get(i).map(|f| &f.data_type) {
            Some(DataType::Unknown) | None => self
                .rows()
                .filter_map(|r| r.values().get(i).map(Value::data_type))
                .find(|t| *t != DataType::Unknown)
                .unwrap_or(DataType::Text),
            Some(t) => t.clone(),
        }
    }

    /// The records' values, taking the page apart: record after record, `schema().len()`
    /// values each (for a stage that turns records into others without copying their values).
    pub fn into_values(self) -> Vec<Value> {
        self.values
    }

    /// The record at `index`.
    pub fn row(&self, index: usize) -> Option<RowRef<'_>> {
        let width = self.schema.len();
        (index < self.len()).then(|| RowRef {
            schema: &self.schema,
            values: &self.values[index * width..(index + 1) * width],
        })
    }
}

/// A borrowed record of a page.
#[derive(Debug, Clone, Copy)]
pub struct RowRef<'a> {
    schema: &'a Schema,
    values: &'a [Value],
}

impl<'a> RowRef<'a> {
    /// Appends the record as a JSON object, fields in schema order (docs/values.md), without a newline.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        crate::value::json::write_object(out, self.schema, self.values());
    }

    /// The record as a `serde_json::Value` object (field order kept): handy for comparing
    /// sink output with source input in tests.
    pub fn to_json(&self) -> serde_json::Value {
        crate::value::json::object_to_json(self.schema, self.values())
    }

    /// The page's schema.
    pub fn schema(&self) -> &'a Schema {
        self.schema
    }

    /// The values, one per field of the schema.
    pub fn values(&self) -> &'a [Value] {
        self.values
    }

    /// The value of the field called `name`.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.schema.index_of(name).map(|i| &self.values[i])
    }
}

/// Builds a [`Page`] row by row.
#[derive(Debug)]
pub struct PageBuilder {
    schema: Arc<Schema>,
    values: Vec<Value>,
}

impl PageBuilder {
    /// A builder for up to `rows` records of `schema` (capacity only; more may be pushed).
    pub fn new(schema: Arc<Schema>, rows: usize) -> Self {
        let values = Vec::with_capacity(rows.saturating_mul(schema.len()).min(1 << 20));
        Self { schema, values }
    }

    /// The schema records must follow.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// Appends one record of exactly `schema.len()` values. (A short record is padded with
    /// nulls and a long one cut, so a faulty source cannot shift later rows; debug builds
    /// assert instead.)
    pub fn push_row(&mut self, row: impl IntoIterator<Item = Value>) {
        let start = self.values.len();
        self.values.extend(row);
        let width = self.schema.len();
        debug_assert_eq!(
            self.values.len() - start,
            width,
            "row width must match schema"
        );
        self.values.resize(start + width, Value::Null);
    }

    /// Appends one record value by value, straight into the page's buffer (no row to copy):
    /// `fill` pushes the record's values through the [`RowWriter`]. When `fill` fails, the
    /// values it pushed are removed and its error returned, so the page holds whole records
    /// only. Width is enforced as in [`PageBuilder::push_row`].
    ///
    /// # Errors
    /// `fill`'s error.
    pub fn push_row_with<E>(
        &mut self,
        fill: impl FnOnce(&mut RowWriter<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let start = self.values.len();
        let width = self.schema.len();
        if let Err(e) = fill(&mut RowWriter {
            values: &mut self.values,
        }) {
            self.values.truncate(start);
            return Err(e);
        }
        debug_assert_eq!(
            self.values.len() - start,
            width,
            "row width must match schema"
        );
        self.values.resize(start + width, Value::Null);
        Ok(())
    }

    /// The number of records pushed so far.
    pub fn len(&self) -> usize {
        if self.schema.is_empty() {
            0
        } else {
            self.values.len() / self.schema.len()
        }
    }

    /// Whether no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The page, with `bookmark` after its records.
    pub fn finish(self, bookmark: Option<Bookmark>) -> Page {
        Page {
            schema: self.schema,
            values: self.values,
            bookmark,
            source_time: None,
            start: PageStart::default(),
            extent: None,
        }
    }
}

/// Pushes the values of one record into a [`PageBuilder`] (see
/// [`PageBuilder::push_row_with`]).
#[derive(Debug)]
pub struct RowWriter<'a> {
    values: &'a mut Vec<Value>,
}

impl RowWriter<'_> {
    /// Appends the record's next value, in schema order.
    #[inline]
    pub fn push(&mut self, value: Value) {
        self.values.push(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{DataType, Field};

    #[test]
    fn rows_share_the_schema() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int),
            Field::new("name", DataType::Text),
        ]));
        let mut b = PageBuilder::new(schema, 2);
        b.push_row([Value::Int(1), Value::Text("a".into())]);
        b.push_row([Value::Int(2), Value::Null]);
        let page = b.finish(Some(serde_json::json!({"offset": 2})));
        assert_eq!(page.len(), 2);
        let rows: Vec<_> = page.rows().collect();
        assert_eq!(rows[1].get("id"), Some(&Value::Int(2)));
        assert_eq!(rows[0].get("name"), Some(&Value::Text("a".into())));
        assert_eq!(page.bookmark(), Some(&serde_json::json!({"offset": 2})));
    }

    #[test]
    fn a_failed_row_leaves_no_values_behind() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int),
            Field::new("name", DataType::Text),
        ]));
        let mut b = PageBuilder::new(schema, 2);
        b.push_row_with(|r| {
            r.push(Value::Int(1));
            r.push(Value::Text("a".into()));
            Ok::<(), ()>(())
        })
        .expect("row");
        let failed = b.push_row_with(|r| {
            r.push(Value::Int(2));
            Err("bad field")
        });
        assert_eq!(failed, Err("bad field"));
        b.push_row_with(|r| {
            r.push(Value::Int(3));
            r.push(Value::Null);
            Ok::<(), ()>(())
        })
        .expect("row");
        let page = b.finish(None);
        let ids: Vec<_> = page.rows().map(|r| r.values()[0].clone()).collect();
        assert_eq!(ids, vec![Value::Int(1), Value::Int(3)]);
        assert_eq!(page.row(1).and_then(|r| r.get("name")), Some(&Value::Null));
    }
}
