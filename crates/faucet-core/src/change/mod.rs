//! The change-record contract (docs/change-records.md): what a CDC source emits and how a
//! keyed sink recognises and applies it, whatever the database the change came from.
//!
//! A change record is one row of a page whose schema is built by [`record_schema`]:
//!
//! | field | type | value |
//! |---|---|---|
//! | `op` | text | [`Op`]: `c` insert, `u` update, `d` delete, `r` snapshot read, `t` truncate, `s` schema change ([`schema`]) |
//! | `table` | text | the source table, in the source system's qualified form (`schema.table`, `db.table`) |
//! | *position fields* | the system's own | where the change is in the source's log, in its own terms: PostgreSQL `lsn`; MySQL/MariaDB `binlog_file`, `binlog_pos`, `gtid` |
//! | `commit_ts` | timestamptz | the transaction's commit time, RFC 3339 in UTC |
//! | `before` | a row or null | the old row (or its key), null for inserts and truncates |
//! | `after` | a row or null | the new row, null for deletes and truncates |
//! | *trailing fields* | | optional; [`UNCHANGED`] (`unchanged_toast`, an array of column names) is the one a sink must honour: those columns were left out of `after` because they did not change, and no sink may turn them into null; [`UPDATE_DESCRIPTION`] (MongoDB's `updateDescription` of an update) says what an update changed, and an update with it and no `after` is refused by a keyed sink naming `full_document` |
//!
//! ```json
//! {"op":"u","table":"public.orders","lsn":"0/16B3748","commit_ts":"2026-11-30T06:00:00Z",
//!  "before":{"id":7},"after":{"id":7,"status":"paid"},"unchanged_toast":["notes"]}
//! ```
//!
//! A source builds its schema once with [`record_schema`] and pushes rows in that field order.
//! A sink asks [`ChangeLayout::of`] whether a page holds change records, reads each record
//! with [`ChangeLayout::read`], and a keyed sink applies a page through [`collapse`], which
//! reduces it, in source order, to the final operation per key (`d` deletes by key, `c`/`u`/`r`
//! upsert, `t` truncates, a key-changing `u` also deletes the old key, unchanged columns keep
//! the stored value — moved with the row to its new key by a key-changing `u`, [`Moved`]).

mod announced;
mod collapse;
mod drift;
mod layout;
mod new_fields;
pub mod schema;

pub use announced::{Announced, announced_in};
pub use collapse::{
    Collapsed, KeyIdentity, Moved, Slot, check_records, collapse, moved_row_missing,
};
pub use drift::Drift;
pub use layout::{Change, ChangeLayout};
pub use new_fields::NewFields;

use std::fmt;
use std::sync::Arc;

use crate::value::{DataType, Field, Schema};

/// `op`: the kind of change.
pub const OP: &str = "op";
/// `table`: the source table, qualified as the source system qualifies it.
pub const TABLE: &str = "table";
/// `commit_ts`: the commit time of the change's transaction.
pub const COMMIT_TS: &str = "commit_ts";
/// `before`: the old row, or null.
pub const BEFORE: &str = "before";
/// `after`: the new row, or null.
pub const AFTER: &str = "after";
/// `unchanged_toast`: the columns left out of `after` because their value did not change
/// (PostgreSQL's unchanged TOAST values, case 01). A sink keeps the stored value.
pub const UNCHANGED: &str = "unchanged_toast";

/// `update_description`: what a MongoDB update changed (`{updatedFields, removedFields,
/// truncatedArrays}`), null for other records. A `u` record that has one and no `after` (no
/// full document: `full_document: when_available` without a post-image, or `update_lookup`
/// of a document deleted since) cannot be applied by a keyed sink, which refuses it naming
/// `full_document` ([`Change::missing_after`]).
pub const UPDATE_DESCRIPTION: &str = "update_description";

/// The field names every change record has, in this order around the position fields:
/// `op`, `table`, …, `commit_ts`, `before`, `after`.
pub const COMMON_FIELDS: [&str; 5] = [OP, TABLE, COMMIT_TS, BEFORE, AFTER];

/// The kind of a change, as the `op` field spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `c`: a row was inserted.
    Insert,
    /// `u`: a row was updated (its key may have changed: compare `before` and `after`).
    Update,
    /// `d`: a row was deleted.
    Delete,
    /// `r`: a row read by a snapshot (applied as an upsert).
    Read,
    /// `t`: the table was truncated.
    Truncate,
    /// `s`: the table's columns changed ([`schema`]): `before` and `after` hold its shape
    /// before and after, not rows. Delivered in stream order between the rows before and
    /// after the change; [`collapse`] leaves it out (a sink that applies schema changes
    /// splits the page at it, [`segments`]).
    Schema,
}

impl Op {
    /// The one-letter code of the `op` field.
    pub const fn code(self) -> &'static str {
        match self {
            Self::Insert => "c",
            Self::Update => "u",
            Self::Delete => "d",
            Self::Read => "r",
            Self::Truncate => "t",
            Self::Schema => "s",
        }
    }

    /// The op a code names, or `None` for anything else.
    pub fn from_code(code: &str) -> Option<Self> {
        Some(match code {
            "c" => Self::Insert,
            "u" => Self::Update,
            "d" => Self::Delete,
            "r" => Self::Read,
            "t" => Self::Truncate,
            "s" => Self::Schema,
            _ => return None,
        })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The schema of a source's change records: `op`, `table`, then `position` (the system's own
/// position fields, in its own terms), then `commit_ts`, `before`, `after`, then `trailing`
/// (e.g. [`unchanged_field`]). Build it once per stream and share it (`Arc`) by every page.
///
/// # Panics
/// Never for the connectors' fixed field lists; a position or trailing field named like a
/// common field is a programming error caught by a debug assertion.
pub fn record_schema(position: Vec<Field>, trailing: Vec<Field>) -> Arc<Schema> {
    debug_assert!(
        position
            .iter()
            .chain(&trailing)
            .all(|f| !COMMON_FIELDS.contains(&f.name.as_str())),
        "a position field named like a common change-record field"
    );
    let mut fields = Vec::with_capacity(5 + position.len() + trailing.len());
    fields.push(Field::new(OP, DataType::Text));
    fields.push(Field::new(TABLE, DataType::Text));
    fields.extend(position);
    fields.push(Field::new(COMMIT_TS, DataType::TimestampTz));
    fields.push(Field::new(BEFORE, DataType::Json));
    fields.push(Field::new(AFTER, DataType::Json));
    fields.extend(trailing);
    Arc::new(Schema::new(fields))
}

/// A page's rows per source table, [`rows_by_table`]: `(table, row indexes)`.
pub type TableRows = Vec<(String, Vec<usize>)>;

/// The rows of each source table of a page of change records, by the [`TABLE`] field, tables
/// in order of first appearance and rows in page order: `(table, row indexes)`. What a sink
/// routing each source table to its own target splits a page by (the SQL engine, the
/// `mongodb` sink). `Ok(None)` when the page's records are not change records.
///
/// # Errors
/// The index of the first record whose `table` is not text (a change record without its
/// source table), for the caller to name.
pub fn rows_by_table(page: &crate::Page) -> Result<Option<TableRows>, usize> {
    let Some(at) = ChangeLayout::of(page.schema()).and_then(|_| page.schema().index_of(TABLE))
    else {
        return Ok(None);
    };
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, row) in page.rows().enumerate() {
        let Some(crate::Value::Text(t)) = row.values().get(at) else {
            return Err(i);
        };
        match groups.iter_mut().find(|(g, _)| g == t.as_str()) {
            Some((_, rows)) => rows.push(i),
            None => groups.push((t.to_string(), vec![i])),
        }
    }
    Ok(Some(groups))
}

/// One run of a page's rows between schema-change records, [`segments`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Rows that are not schema changes, in page order (never empty).
    Rows(Vec<usize>),
    /// The row of one schema-change record (`op: "s"`).
    Schema(usize),
}

/// `rows` (indexes into `page`, in page order) cut at each schema-change record: what a sink
/// applies in order, each run of rows with the table's shape in force at that point. One
/// [`Segment::Rows`] of every row when there is none (or the page holds no change records).
pub fn segments(page: &crate::Page, rows: &[usize]) -> Vec<Segment> {
    let layout = ChangeLayout::of(page.schema());
    let is_schema = |r: usize| {
        layout
            .as_ref()
            .zip(page.row(r))
            .is_some_and(|(l, row)| l.is_schema(row.values()))
    };
    let mut out = Vec::new();
    let mut run = Vec::new();
    for &r in rows {
        if is_schema(r) {
            if !run.is_empty() {
                out.push(Segment::Rows(std::mem::take(&mut run)));
            }
            out.push(Segment::Schema(r));
        } else {
            run.push(r);
        }
    }
    if !run.is_empty() {
        out.push(Segment::Rows(run));
    }
    out
}

/// The [`UNCHANGED`] field: an array of the column names left out of `after`.
pub fn unchanged_field() -> Field {
    Field::new(UNCHANGED, DataType::Array(Box::new(DataType::Text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_round_trip_their_codes() {
        for op in [
            Op::Insert,
            Op::Update,
            Op::Delete,
            Op::Read,
            Op::Truncate,
            Op::Schema,
        ] {
            assert_eq!(Op::from_code(op.code()), Some(op));
        }
        assert_eq!(Op::from_code("x"), None);
        assert_eq!(Op::from_code(""), None);
    }

    #[test]
    fn a_page_is_cut_at_its_schema_changes_in_order() {
        let schema = record_schema(vec![Field::new("lsn", DataType::Text)], vec![]);
        let mut b = crate::PageBuilder::new(schema, 5);
        for op in ["c", "u", "s", "c", "s"] {
            b.push_row([
                crate::Value::Text(op.into()),
                crate::Value::Text("public.t".into()),
                crate::Value::Text("0/1".into()),
                crate::Value::Null,
                crate::Value::Null,
                crate::Value::Null,
            ]);
        }
        let page = b.finish(None);
        assert_eq!(
            segments(&page, &[0, 1, 2, 3, 4]),
            [
                Segment::Rows(vec![0, 1]),
                Segment::Schema(2),
                Segment::Rows(vec![3]),
                Segment::Schema(4)
            ]
        );
        assert_eq!(segments(&page, &[0, 3]), [Segment::Rows(vec![0, 3])]);
    }

    #[test]
    fn the_schema_puts_position_fields_after_table_and_trailing_ones_last() {
        let s = record_schema(
            vec![Field::new("lsn", DataType::Text)],
            vec![unchanged_field()],
        );
        let names: Vec<&str> = s.names().collect();
        assert_eq!(
            names,
            [
                "op",
                "table",
                "lsn",
                "commit_ts",
                "before",
                "after",
                "unchanged_toast"
            ]
        );
        let layout = ChangeLayout::of(&s).expect("a change layout");
        assert_eq!(layout.position_fields(), &[2]);
    }
}
