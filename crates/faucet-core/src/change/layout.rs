//! Recognising change records in a page and reading one.

use crate::value::{Row, Schema, Value};

use super::{AFTER, BEFORE, COMMIT_TS, OP, Op, TABLE, UNCHANGED, UPDATE_DESCRIPTION};

/// Where the fields of change records are in a page's schema: a page holds change records
/// when its schema has `op`, `before` and `after` (the other fields are optional, so a page
/// that went through a projection still applies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeLayout {
    op: usize,
    table: Option<usize>,
    before: usize,
    after: usize,
    unchanged: Option<usize>,
    update_description: Option<usize>,
    position: Vec<usize>,
}

/// One change record, borrowed from its page.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    /// The kind of change.
    pub op: Op,
    /// The source table, when the page has a `table` field holding text.
    pub table: Option<&'a str>,
    /// The old row (or its key), when there is one.
    pub before: Option<&'a Row>,
    /// The new row, when there is one.
    pub after: Option<&'a Row>,
    unchanged: Option<&'a [Value]>,
    /// Whether the record carries an [`UPDATE_DESCRIPTION`] (not null).
    described: bool,
}

impl<'a> Change<'a> {
    /// Why a keyed sink cannot apply this `c`/`u`/`r` record that has no `after` row: for a
    /// MongoDB update (one with an [`UPDATE_DESCRIPTION`]) it names `full_document` and the
    /// settings that give one.
    pub fn missing_after(&self) -> String {
        if self.described {
            format!(
                "an `{}` record without its full document (only an `update_description`): a \
                 keyed sink needs the whole document; set the source's `full_document: \
                 required` (post-images: `collMod` with `changeStreamPreAndPostImages: \
                 {{enabled: true}}`) — `update_lookup` gives none for a document deleted before \
                 the lookup — or write to an append sink",
                self.op
            )
        } else {
            format!("an `{}` record without an `after` row", self.op)
        }
    }

    /// The columns left out of `after` because they did not change ([`UNCHANGED`]).
    pub fn unchanged(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.unchanged.unwrap_or(&[]).iter().filter_map(text_of)
    }
}

impl ChangeLayout {
    /// The layout of `schema`, or `None` when its rows are plain rows, not change records.
    pub fn of(schema: &Schema) -> Option<Self> {
        let op = schema.index_of(OP)?;
        let before = schema.index_of(BEFORE)?;
        let after = schema.index_of(AFTER)?;
        let table = schema.index_of(TABLE);
        let unchanged = schema.index_of(UNCHANGED);
        let update_description = schema.index_of(UPDATE_DESCRIPTION);
        let commit_ts = schema.index_of(COMMIT_TS);
        let known = [
            Some(op),
            Some(before),
            Some(after),
            table,
            unchanged,
            update_description,
            commit_ts,
        ];
        let position = (0..schema.fields().len())
            .filter(|i| !known.contains(&Some(*i)))
            .collect();
        Some(Self {
            op,
            table,
            before,
            after,
            unchanged,
            update_description,
            position,
        })
    }

    /// The indexes of the fields that are neither common fields nor [`UNCHANGED`] /
    /// [`UPDATE_DESCRIPTION`]: the
    /// source's position fields (`lsn`; `binlog_file`, `binlog_pos`, `gtid`), in order.
    pub fn position_fields(&self) -> &[usize] {
        &self.position
    }

    /// The position fields of the record in `values` (of a page of `schema`) for people:
    /// `lsn 0/16B3748`, `binlog_file mariadb-bin.000003, binlog_pos 1234`; `None` when the
    /// records have none (a file or query source's schema changes).
    pub fn position_text(&self, schema: &Schema, values: &[Value]) -> Option<String> {
        let parts: Vec<String> = self
            .position
            .iter()
            .filter_map(|&i| {
                let name = &schema.fields().get(i)?.name;
                Some(format!("{name} {}", position_value(values.get(i)?)))
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// Whether the record in `values` is a schema change (`op: "s"`), whose `before` and
    /// `after` are the table's shape, not rows ([`super::schema`]).
    pub fn is_schema(&self, values: &[Value]) -> bool {
        values.get(self.op).and_then(text_of) == Some(Op::Schema.code())
    }

    /// The index of the `before` field.
    pub fn before_index(&self) -> usize {
        self.before
    }

    /// The index of the [`UNCHANGED`] field, when the records have one.
    pub fn unchanged_index(&self) -> Option<usize> {
        self.unchanged
    }

    /// The index of the `after` field.
    pub fn after_index(&self) -> usize {
        self.after
    }

    /// Reads one record from its `values` (in the layout's schema order).
    ///
    /// # Errors
    /// A message for people when `op` is not one of `c`, `u`, `d`, `r`, `t`, or `before` /
    /// `after` holds something other than a row or null (JSON text read back from a file).
    pub fn read<'a>(&self, values: &'a [Value]) -> Result<Change<'a>, String> {
        let code = values.get(self.op).and_then(text_of).unwrap_or("");
        let op = Op::from_code(code).ok_or_else(|| format!("unknown change op `{code}`"))?;
        let row = |i: usize, field: &str| match values.get(i) {
            Some(Value::Row(r)) => Ok(Some(r)),
            None | Some(Value::Null) => Ok(None),
            Some(other) => Err(format!(
                "the `{field}` of this `{op}` record is {:?} data, not a row: change records \
                 read back from a file carry their rows as JSON, which a keyed sink cannot \
                 apply as columns; write them with `write_mode: append`, or read the changes \
                 from the database's change stream",
                other.data_type()
            )),
        };
        Ok(Change {
            op,
            table: self.table.and_then(|i| values.get(i)).and_then(text_of),
            before: row(self.before, BEFORE)?,
            after: row(self.after, AFTER)?,
            unchanged: self.unchanged.and_then(|i| match values.get(i) {
                Some(Value::Array(items)) => Some(items.as_slice()),
                _ => None,
            }),
            described: self
                .update_description
                .and_then(|i| values.get(i))
                .is_some_and(|v| !v.is_null()),
        })
    }
}

/// A position field's value as its JSON form without quotes (`0/16B3748`, `1234`).
fn position_value(value: &Value) -> String {
    let mut v = Vec::new();
    crate::value::json::write_value(&mut v, value);
    String::from_utf8_lossy(&v).trim_matches('"').to_owned()
}

fn text_of(v: &Value) -> Option<&str> {
    match v {
        Value::Text(s) => Some(s),
        _ => None,
    }
}
