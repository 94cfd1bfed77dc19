//! From pgoutput changes to change records (docs/change-records.md).
//!
//! A change record has the fields of [`record_schema`] (the contract of
//! [`faucet_core::change`], with PostgreSQL's `lsn` and `unchanged_toast`):
//!
//! | field | value |
//! |---|---|
//! | `op` | `c` insert, `u` update, `d` delete, `t` truncate |
//! | `table` | `schema.table` |
//! | `lsn` | the commit LSN of the change's transaction (`X/X`): every change of a transaction carries the same one, in the order the transaction made them |
//! | `commit_ts` | the transaction's commit time, RFC 3339 in UTC |
//! | `before` | a row ([`Value::Row`]) or null, per the table's REPLICA IDENTITY: the key columns by default (from the old key the server sent when the key changed, else from the new row), the whole old row with FULL; null for inserts, truncates and REPLICA IDENTITY NOTHING |
//! | `after` | the new row, or null for deletes and truncates |
//! | `unchanged_toast` | the names of the columns left out of `after` (an array, usually empty) |
//!
//! Unchanged TOASTed values (case 01): when an UPDATE leaves a large, out-of-line value alone
//! the server does not send it (`u` in the tuple). The column is then left out of `after` and
//! named in `unchanged_toast` — never turned into null. With REPLICA IDENTITY FULL the old row
//! holds the value, and `after` takes it from there.
//!
//! Relations: each Relation message replaces the cached shape of its table (case 26), so a
//! column added or dropped mid-stream shows in the records after it; the schemas of `before`
//! and `after` are shared (`Arc`) by all records of one relation shape. A change whose
//! table's shape differs from the one last announced gets a schema-change record (`s`)
//! right before it ([`ChangeDecoder::shape_change`], [`super::shapes`]).
//!
//! Truncate (case 17): one `t` record per truncated table, in the statement's order; a
//! statement naming two published tables gives two records. Values are decoded from text by
//! [`crate::postgres::types::decode_text`].

use std::collections::{HashMap, HashSet};

use faucet_core::change::schema::Identified;
use std::sync::Arc;

use faucet_core::change::{self, Op};
use faucet_core::{DataType, FaucetError, Field, Schema, Value};

use super::CONNECTOR;
use super::config::TableName;
use super::pgoutput::{Datum, Message, OldKind, RelationColumn, Tuple};
use super::shapes::{Shapes, shape_of};
use crate::postgres::types::{data_type_of, decode_text};
use crate::sql::table_pattern::TablePattern;

/// How many distinct "columns left out" shapes are cached per relation.
const MAX_PARTIAL_SCHEMAS: usize = 16;

/// The fields of a PostgreSQL change record, in order: `op`, `table`, `lsn`, `commit_ts`,
/// `before`, `after`, `unchanged_toast` (the contract of [`faucet_core::change`], with `lsn`
/// as the position field and [`faucet_core::change::unchanged_field`] trailing).
pub(crate) fn record_schema() -> Arc<Schema> {
    change::record_schema(
        vec![Field::new("lsn", DataType::Text)],
        vec![change::unchanged_field()],
    )
}

/// What every record of a transaction shares.
#[derive(Debug, Clone)]
pub(crate) struct TxnContext {
    /// The commit LSN, as text.
    pub(crate) lsn: String,
    /// The commit time, RFC 3339 UTC.
    pub(crate) commit_ts: String,
}

/// One change record: the seven values of [`record_schema`].
pub(crate) type Record = [Value; 7];

struct Relation {
    table: String,
    included: bool,
    identity: u8,
    columns: Vec<RelationColumn>,
    full: Arc<Schema>,
    key_idx: Vec<usize>,
    key: Arc<Schema>,
    /// Schemas of rows with some columns left out, by the kept column indexes.
    partial: Vec<(Vec<usize>, Arc<Schema>)>,
    /// The columns' shape, for schema changes ([`super::shapes`]).
    shape: Vec<Identified>,
    /// Whether the table's announced shape is this relation's already.
    settled: bool,
}

impl Relation {
    fn schema_of(&mut self, kept: &[usize]) -> Arc<Schema> {
        if kept.len() == self.columns.len() {
            return self.full.clone();
        }
        if kept == self.key_idx.as_slice() {
            return self.key.clone();
        }
        if let Some((_, s)) = self.partial.iter().find(|(k, _)| k == kept) {
            return s.clone();
        }
        let schema = Arc::new(Schema::new(
            kept.iter()
                .map(|&i| self.full.fields()[i].clone())
                .collect(),
        ));
        if self.partial.len() < MAX_PARTIAL_SCHEMAS {
            self.partial.push((kept.to_vec(), schema.clone()));
        }
        schema
    }
}

/// Turns pgoutput messages into change records, keeping the current shape of every relation.
pub(crate) struct ChangeDecoder {
    wanted: HashSet<TableName>,
    /// The `tables` patterns: a Relation message of a table they match that is not in
    /// `wanted` (created after the start) is read from then on.
    patterns: Vec<TablePattern>,
    relations: HashMap<u32, Relation>,
    /// The shape each table was last announced with ([`super::shapes`]).
    announced: Shapes,
}

impl ChangeDecoder {
    /// A decoder that emits records of `tables` (the listed ones and those the patterns
    /// matched at start) and of the tables `patterns` match when first described.
    pub(crate) fn new(tables: &[TableName], patterns: &[TablePattern]) -> Self {
        Self {
            wanted: tables.iter().cloned().collect(),
            patterns: patterns.to_vec(),
            relations: HashMap::new(),
            announced: Shapes::new(),
        }
    }

    /// This decoder, resuming with the shapes a bookmark carried ([`super::shapes`]).
    pub(crate) fn with_shapes(mut self, announced: Shapes) -> Self {
        self.announced = announced;
        self
    }

    /// The shapes announced so far, for the bookmark.
    pub(crate) fn shapes(&self) -> &Shapes {
        &self.announced
    }

    /// The schema-change record to deliver before `message` (an insert, update or delete),
    /// when its table's shape differs from the one last announced; `txn` `None`: the change
    /// was delivered before (a resumed transaction's prefix), so the shape is taken as
    /// announced without a record. A table's first shape is taken as it is.
    pub(crate) fn shape_change(
        &mut self,
        message: &Message<'_>,
        txn: Option<&TxnContext>,
    ) -> Option<Record> {
        let oid = match message {
            Message::Insert { oid, .. }
            | Message::Update { oid, .. }
            | Message::Delete { oid, .. } => *oid,
            _ => return None,
        };
        let rel = self.relations.get_mut(&oid).filter(|r| r.included)?;
        if rel.settled {
            return None;
        }
        rel.settled = true;
        let previous = self.announced.insert(rel.table.clone(), rel.shape.clone());
        let (old, txn) = previous.zip(txn)?;
        let (before, after) = faucet_core::change::schema::announce(
            &rel.table,
            &format!("lsn {}", txn.lsn),
            &old,
            &rel.shape,
        )?;
        Some([
            Value::Text(Op::Schema.code().into()),
            Value::Text(rel.table.as_str().into()),
            Value::Text(txn.lsn.as_str().into()),
            Value::TimestampTz(txn.commit_ts.as_str().into()),
            before,
            after,
            Value::Array(Vec::new()),
        ])
    }

    /// Takes a Relation message: replaces the relation's shape.
    pub(crate) fn relation(
        &mut self,
        oid: u32,
        namespace: String,
        name: String,
        identity: u8,
        columns: Vec<RelationColumn>,
    ) {
        let table = TableName {
            schema: Some(namespace),
            name,
        };
        let mut included = self.wanted.contains(&table);
        if !included
            && let Some(p) = self
                .patterns
                .iter()
                .find(|p| p.matches(table.schema.as_deref().unwrap_or_default(), &table.name))
        {
            tracing::info!(
                table = %table.qualified(),
                pattern = %p,
                "a table created after the start matches a `tables` pattern: its changes are \
                 read from here on"
            );
            self.wanted.insert(table.clone());
            included = true;
        }
        if let Some(previous) = self.relations.get(&oid).filter(|r| r.included)
            && !included
        {
            tracing::warn!(
                table = %previous.table,
                now = %table.qualified(),
                "a table in `tables` was renamed or moved mid-stream; its changes are no \
                 longer read (add the new name to `tables`)"
            );
        }
        let full = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(c.name.clone(), data_type_of(c.decode_oid)))
                .collect(),
        ));
        let key_idx: Vec<usize> = if identity == b'n' {
            Vec::new()
        } else {
            columns
                .iter()
                .enumerate()
                .filter(|(_, c)| c.key)
                .map(|(i, _)| i)
                .collect()
        };
        let key = Arc::new(Schema::new(
            key_idx.iter().map(|&i| full.fields()[i].clone()).collect(),
        ));
        let shape = shape_of(&columns);
        self.relations.insert(
            oid,
            Relation {
                table: table.qualified(),
                included,
                identity,
                columns,
                full,
                key_idx,
                key,
                partial: Vec::new(),
                shape,
                settled: false,
            },
        );
    }

    fn known(&mut self, oid: u32) -> Result<&mut Relation, FaucetError> {
        self.relations.get_mut(&oid).ok_or_else(|| {
            FaucetError::read(
                CONNECTOR,
                format!("pgoutput sent a change of relation {oid} before its Relation message"),
                None,
            )
        })
    }

    /// The record of an Insert, Update or Delete, or `None` when its table is not one of
    /// `tables`.
    ///
    /// # Errors
    /// [`FaucetError::Data`] naming table, column and commit LSN when a value cannot be
    /// decoded; [`FaucetError::Read`] when the change does not fit its relation.
    pub(crate) fn change(
        &mut self,
        message: &Message<'_>,
        txn: &TxnContext,
    ) -> Result<Option<Record>, FaucetError> {
        let (oid, op) = match message {
            Message::Insert { oid, .. } => (*oid, Op::Insert),
            Message::Update { oid, .. } => (*oid, Op::Update),
            Message::Delete { oid, .. } => (*oid, Op::Delete),
            _ => return Ok(None),
        };
        let rel = self.known(oid)?;
        if !rel.included {
            return Ok(None);
        }
        let (before, after, unchanged) = match message {
            Message::Insert { new, .. } => {
                let (after, unchanged) = new_row(rel, new, None, txn)?;
                (Value::Null, after, unchanged)
            }
            Message::Update { old, new, .. } => {
                let full_old = match old {
                    Some((OldKind::Full, t)) => Some(t),
                    _ => None,
                };
                let before = match old {
                    Some((OldKind::Full, t)) => row(rel, t, None, txn)?,
                    Some((OldKind::Key, t)) => row(rel, t, Some(KeyOnly), txn)?,
                    // The key did not change: take it from the new row. With FULL the server
                    // always sends the old row, so there is nothing to say otherwise.
                    None if rel.identity == b'f' => Value::Null,
                    None => row(rel, new, Some(KeyOnly), txn)?,
                };
                let (after, unchanged) = new_row(rel, new, full_old, txn)?;
                (before, after, unchanged)
            }
            Message::Delete { old, .. } => {
                let before = match old {
                    (OldKind::Full, t) => row(rel, t, None, txn)?,
                    (OldKind::Key, t) => row(rel, t, Some(KeyOnly), txn)?,
                };
                (before, Value::Null, Vec::new())
            }
            _ => return Ok(None),
        };
        Ok(Some([
            Value::Text(op.code().into()),
            Value::Text(rel.table.as_str().into()),
            Value::Text(txn.lsn.as_str().into()),
            Value::TimestampTz(txn.commit_ts.as_str().into()),
            before,
            after,
            Value::Array(unchanged),
        ]))
    }

    /// The `t` record for one relation of a Truncate message, or `None` when its table is not
    /// one of `tables`.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the relation was never described.
    pub(crate) fn truncate(
        &mut self,
        oid: u32,
        txn: &TxnContext,
    ) -> Result<Option<Record>, FaucetError> {
        let rel = self.known(oid)?;
        if !rel.included {
            return Ok(None);
        }
        Ok(Some([
            Value::Text(Op::Truncate.code().into()),
            Value::Text(rel.table.as_str().into()),
            Value::Text(txn.lsn.as_str().into()),
            Value::TimestampTz(txn.commit_ts.as_str().into()),
            Value::Null,
            Value::Null,
            Value::Array(Vec::new()),
        ]))
    }
}

/// Marker: build the row of the replica identity key columns only.
#[derive(Clone, Copy)]
struct KeyOnly;

fn check_width(rel: &Relation, tuple: &Tuple<'_>) -> Result<(), FaucetError> {
    if tuple.len() == rel.columns.len() {
        Ok(())
    } else {
        Err(FaucetError::read(
            CONNECTOR,
            format!(
                "pgoutput sent {} columns for {}, whose Relation message has {}",
                tuple.len(),
                rel.table,
                rel.columns.len()
            ),
            None,
        ))
    }
}

fn decode(rel: &Relation, i: usize, bytes: &[u8], txn: &TxnContext) -> Result<Value, FaucetError> {
    let col = &rel.columns[i];
    let location = || {
        format!(
            "table {} column `{}` (transaction committed at {})",
            rel.table, col.name, txn.lsn
        )
    };
    let text = std::str::from_utf8(bytes)
        .map_err(|_| FaucetError::data(CONNECTOR, location(), "the value is not valid UTF-8"))?;
    decode_text(col.decode_oid, text)
        .map_err(|message| FaucetError::data(CONNECTOR, location(), message))
}

/// A row of the columns present in `tuple` (all, or the key columns): a `u` column, whose
/// value the server did not send, is left out.
fn row(
    rel: &mut Relation,
    tuple: &Tuple<'_>,
    key_only: Option<KeyOnly>,
    txn: &TxnContext,
) -> Result<Value, FaucetError> {
    check_width(rel, tuple)?;
    let indexes: Vec<usize> = match key_only {
        Some(KeyOnly) => rel.key_idx.clone(),
        None => (0..rel.columns.len()).collect(),
    };
    if key_only.is_some() && indexes.is_empty() {
        return Ok(Value::Null);
    }
    let mut kept = Vec::with_capacity(indexes.len());
    let mut values = Vec::with_capacity(indexes.len());
    for i in indexes {
        let value = match tuple[i] {
            Datum::Null => Value::Null,
            Datum::Text(bytes) => decode(rel, i, bytes, txn)?,
            Datum::UnchangedToast => continue,
            Datum::Binary(_) => return Err(binary_datum(rel, i)),
        };
        kept.push(i);
        values.push(value);
    }
    let schema = rel.schema_of(&kept);
    Ok(Value::row(schema, values))
}

/// The `after` row and the names of the unchanged TOASTed columns left out of it. A `u`
/// column takes its value from `full_old` (REPLICA IDENTITY FULL) when that has it.
fn new_row(
    rel: &mut Relation,
    tuple: &Tuple<'_>,
    full_old: Option<&Tuple<'_>>,
    txn: &TxnContext,
) -> Result<(Value, Vec<Value>), FaucetError> {
    check_width(rel, tuple)?;
    if let Some(old) = full_old {
        check_width(rel, old)?;
    }
    let n = rel.columns.len();
    let mut kept = Vec::with_capacity(n);
    let mut values = Vec::with_capacity(n);
    let mut unchanged = Vec::new();
    for i in 0..n {
        let datum = match (tuple[i], full_old.map(|o| o[i])) {
            (Datum::UnchangedToast, Some(old @ Datum::Text(_))) => old,
            (d, _) => d,
        };
        let value = match datum {
            Datum::Null => Value::Null,
            Datum::Text(bytes) => decode(rel, i, bytes, txn)?,
            Datum::UnchangedToast => {
                unchanged.push(Value::Text(rel.columns[i].name.as_str().into()));
                continue;
            }
            Datum::Binary(_) => return Err(binary_datum(rel, i)),
        };
        kept.push(i);
        values.push(value);
    }
    let schema = rel.schema_of(&kept);
    Ok((Value::row(schema, values), unchanged))
}

fn binary_datum(rel: &Relation, i: usize) -> FaucetError {
    FaucetError::read(
        CONNECTOR,
        format!(
            "pgoutput sent column `{}` of {} in binary format, which faucet does not request",
            rel.columns[i].name, rel.table
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder() -> ChangeDecoder {
        let mut d = ChangeDecoder::new(
            &[TableName {
                schema: Some("public".into()),
                name: "article".into(),
            }],
            &[],
        );
        let cols = vec![
            RelationColumn::new(true, "id".into(), 23, -1),
            RelationColumn::new(false, "title".into(), 25, -1),
            RelationColumn::new(false, "body".into(), 25, -1),
        ];
        d.relation(1, "public".into(), "article".into(), b'd', cols.clone());
        d.relation(2, "public".into(), "other".into(), b'd', cols);
        d
    }

    fn txn() -> TxnContext {
        TxnContext {
            lsn: "0/16B3748".into(),
            commit_ts: "2026-11-30T06:00:00Z".into(),
        }
    }

    fn json(v: &Value) -> String {
        let mut out = Vec::new();
        faucet_core::value::json::write_value(&mut out, v);
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn unchanged_toast_is_left_out_and_named_never_null() {
        let mut d = decoder();
        let m = Message::Update {
            oid: 1,
            old: None,
            new: vec![
                Datum::Text(b"1"),
                Datum::Text(b"published"),
                Datum::UnchangedToast,
            ],
        };
        let r = d.change(&m, &txn()).expect("ok").expect("record");
        assert_eq!(r[0], Value::Text("u".into()));
        assert_eq!(r[1], Value::Text("public.article".into()));
        assert_eq!(json(&r[4]), r#"{"id":1}"#);
        assert_eq!(json(&r[5]), r#"{"id":1,"title":"published"}"#);
        assert_eq!(json(&r[6]), r#"["body"]"#);
    }

    #[test]
    fn full_identity_takes_the_value_from_the_old_row() {
        let mut d = decoder();
        let m = Message::Update {
            oid: 1,
            old: Some((
                OldKind::Full,
                vec![
                    Datum::Text(b"1"),
                    Datum::Text(b"draft"),
                    Datum::Text(b"aaa"),
                ],
            )),
            new: vec![
                Datum::Text(b"1"),
                Datum::Text(b"published"),
                Datum::UnchangedToast,
            ],
        };
        let r = d.change(&m, &txn()).expect("ok").expect("record");
        assert_eq!(json(&r[4]), r#"{"id":1,"title":"draft","body":"aaa"}"#);
        assert_eq!(json(&r[5]), r#"{"id":1,"title":"published","body":"aaa"}"#);
        assert_eq!(json(&r[6]), "[]");
    }

    #[test]
    fn deletes_key_changes_and_filtering() {
        let mut d = decoder();
        let del = Message::Delete {
            oid: 1,
            old: (
                OldKind::Key,
                vec![Datum::Text(b"7"), Datum::Null, Datum::Null],
            ),
        };
        let r = d.change(&del, &txn()).expect("ok").expect("record");
        assert_eq!(json(&r[4]), r#"{"id":7}"#);
        assert_eq!(r[5], Value::Null);
        let other = Message::Insert {
            oid: 2,
            new: vec![Datum::Text(b"1"), Datum::Null, Datum::Null],
        };
        assert!(d.change(&other, &txn()).expect("ok").is_none());
        assert!(d.truncate(2, &txn()).expect("ok").is_none());
        let t = d.truncate(1, &txn()).expect("ok").expect("record");
        assert_eq!(t[0], Value::Text("t".into()));
        let unknown = Message::Insert {
            oid: 99,
            new: vec![],
        };
        assert!(d.change(&unknown, &txn()).is_err());
        let narrow = Message::Insert {
            oid: 1,
            new: vec![Datum::Text(b"1")],
        };
        assert!(d.change(&narrow, &txn()).is_err());
        let bad = Message::Insert {
            oid: 1,
            new: vec![Datum::Text(b"x"), Datum::Null, Datum::Null],
        };
        let e = d.change(&bad, &txn()).expect_err("not an int");
        assert!(e.to_string().contains("column `id`"), "{e}");
    }

    #[test]
    fn a_table_created_later_that_a_pattern_matches_is_read() {
        let pattern = TablePattern::parse("shop.order_*", "tables[0]", "schema")
            .expect("ok")
            .expect("pattern");
        let mut d = ChangeDecoder::new(&[], &[pattern]);
        let col = RelationColumn::new(true, "id".into(), 23, -1);
        d.relation(
            7,
            "shop".into(),
            "order_lines".into(),
            b'd',
            vec![col.clone()],
        );
        d.relation(8, "shop".into(), "orders".into(), b'd', vec![col.clone()]);
        d.relation(9, "other".into(), "order_x".into(), b'd', vec![col]);
        let insert = |oid| Message::Insert {
            oid,
            new: vec![Datum::Text(b"5")],
        };
        let r = d.change(&insert(7), &txn()).expect("ok").expect("matched");
        assert_eq!(r[1], Value::Text("shop.order_lines".into()));
        assert!(d.change(&insert(8), &txn()).expect("ok").is_none());
        assert!(d.change(&insert(9), &txn()).expect("ok").is_none());
    }

    fn described(name: &str, type_oid: u32, source_type: &str, attnum: i64) -> RelationColumn {
        let mut c = RelationColumn::new(attnum == 1, name.into(), type_oid, -1);
        c.source_type = source_type.into();
        c.attnum = attnum;
        c
    }

    #[test]
    fn a_changed_shape_is_announced_once_before_its_first_change() {
        let mut d = ChangeDecoder::new(
            &[TableName {
                schema: Some("public".into()),
                name: "t".into(),
            }],
            &[],
        );
        let before = vec![
            described("id", 23, "integer", 1),
            described("v", 23, "integer", 2),
        ];
        let after = vec![
            described("id", 23, "integer", 1),
            described("vv", 20, "bigint", 2),
            described("w", 25, "text", 3),
        ];
        let insert = |n: usize| Message::Insert {
            oid: 1,
            new: vec![Datum::Text(b"1"); n],
        };
        d.relation(1, "public".into(), "t".into(), b'd', before.clone());
        // The first shape is taken as it is.
        assert!(d.shape_change(&insert(2), Some(&txn())).is_none());
        d.relation(1, "public".into(), "t".into(), b'd', after.clone());
        let s = d
            .shape_change(&insert(3), Some(&txn()))
            .expect("a schema change");
        assert_eq!(s[0], Value::Text("s".into()));
        assert_eq!(s[2], Value::Text("0/16B3748".into()));
        let changes = json(&s[5]);
        assert!(
            changes.contains(r#""kind":"rename","column":"vv","from":"v","to":"vv""#)
                && changes
                    .contains(r#""kind":"type","column":"vv","from":"integer","to":"bigint""#)
                && changes.contains(r#""kind":"add","column":"w""#),
            "{changes}"
        );
        assert_eq!(
            json(&s[4]),
            r#"{"columns":[{"name":"id","type":"integer","data_type":"int","key":true},{"name":"v","type":"integer","data_type":"int","key":false}]}"#
        );
        // Once: the next change of the same shape has none.
        assert!(d.shape_change(&insert(3), Some(&txn())).is_none());
        // A resumed stream with the bookmark's shapes: a replayed (skipped) change of the old
        // shape moves the shape back, and the change after it announces again, as the first
        // time; a new session's first Relation of the delivered shape announces nothing.
        let mut resumed = ChangeDecoder::new(
            &[TableName {
                schema: Some("public".into()),
                name: "t".into(),
            }],
            &[],
        )
        .with_shapes(d.shapes().clone());
        resumed.relation(1, "public".into(), "t".into(), b'd', after);
        assert!(resumed.shape_change(&insert(3), Some(&txn())).is_none());
        resumed.relation(1, "public".into(), "t".into(), b'd', before);
        assert!(resumed.shape_change(&insert(2), None).is_none());
        assert_eq!(resumed.shapes()["public.t"].len(), 2);
    }

    #[test]
    fn a_new_relation_message_replaces_the_shape() {
        let mut d = decoder();
        d.relation(
            1,
            "public".into(),
            "article".into(),
            b'd',
            vec![RelationColumn::new(true, "id".into(), 23, -1)],
        );
        let m = Message::Insert {
            oid: 1,
            new: vec![Datum::Text(b"5")],
        };
        let r = d.change(&m, &txn()).expect("ok").expect("record");
        assert_eq!(json(&r[5]), r#"{"id":5}"#);
    }
}
