//! How a keyed sink applies a page: the page is collapsed, in source order, to the final
//! operation per key, which is equivalent to applying it record by record (cases 14 and 15)
//! and lets each kind of operation run as one set-based statement.
//!
//! * A change record ([`ChangeLayout`]): `c`/`u`/`r` upsert the `after` row; `d` deletes the
//!   key taken from `before`; a `u` whose `before` key differs from its `after` key (the key
//!   itself was updated) also deletes the old key; `t` truncates the target, so everything
//!   before it in the page is dropped and the truncate runs first.
//! * A plain row upserts itself.
//! * Several changes to one key: the last one wins. An upsert following an upsert of the same
//!   key is merged: a column named in the later record's `unchanged_toast` (left out of its
//!   `after`) keeps the earlier record's value, and when no earlier record in the page has it,
//!   the column is left out of the upsert, so the stored value is kept (case 01: never
//!   nulled).
//!
//! After collapsing, every key appears once, so the deletes and the upserts touch disjoint
//! rows and their order no longer matters; an upsert statement never meets a key twice.

use std::collections::HashMap;

use crate::error::FaucetError;
use crate::page::Page;
use crate::value::{Row, Value};

use super::{ChangeLayout, Op};

/// The final operation on one key.
#[derive(Debug)]
pub enum Slot<'a> {
    /// Delete the row with these key values (in `key` order).
    Delete {
        /// The key values.
        key: Vec<&'a Value>,
        /// The page row (0-based) this comes from, for error messages.
        row: usize,
    },
    /// Insert or update the row with these columns; columns not listed keep their value.
    Upsert {
        /// (column, value) pairs, the key columns included.
        columns: Vec<(&'a str, &'a Value)>,
        /// The page row (0-based) that last set this key.
        row: usize,
    },
}

/// A collapsed page.
#[derive(Debug, Default)]
pub struct Collapsed<'a> {
    /// Truncate the target first.
    pub truncate: bool,
    /// One slot per key, in the order keys first appeared (after the last truncate).
    pub slots: Vec<Slot<'a>>,
}

/// How a sink tells keys apart: the bytes that identify a key as the target will hold it
/// (two keys with equal bytes are one row in the target). A sink whose target folds values
/// (e.g. strips U+0000 from text) folds them here too.
pub trait KeyIdentity {
    /// Writes the identity of `key` (values in key order) into `out` (empty on entry).
    fn identify(&mut self, key: &[&Value], out: &mut Vec<u8>);
}

/// Collapses `page` by `key` (see the module docs). `connector` and `target` name the sink
/// and its table in errors. `source_table` remembers the `table` of the change records seen
/// by this writer: one sink table takes the changes of one source table.
///
/// # Errors
/// [`FaucetError::Data`] naming the page row when a record lacks a key column, has an
/// unknown `op`, lacks the row its op needs, or comes from another source table than earlier
/// records.
pub fn collapse<'a>(
    page: &'a Page,
    key: &[String],
    connector: &str,
    target: &str,
    source_table: &mut Option<String>,
    ids: &mut dyn KeyIdentity,
) -> Result<Collapsed<'a>, FaucetError> {
    let mut state = State {
        out: Collapsed::default(),
        index: HashMap::new(),
        ids,
    };
    let layout = ChangeLayout::of(page.schema());
    for (row_no, row) in page.rows().enumerate() {
        let values = row.values();
        let err = |message: String| {
            FaucetError::data(
                connector,
                format!("{target}, page row {}", row_no + 1),
                message,
            )
        };
        let Some(layout) = &layout else {
            let columns: Vec<(&str, &Value)> = row
                .schema()
                .fields()
                .iter()
                .map(|fl| fl.name.as_str())
                .zip(values)
                .collect();
            let k = key_values(&columns, key).map_err(err)?;
            state.upsert(k, columns, &[], row_no);
            continue;
        };
        let change = layout.read(values).map_err(err)?;
        if let Some(t) = change.table {
            match source_table {
                Some(seen) if seen != t => {
                    return Err(err(format!(
                        "change records of `{t}` after records of `{seen}`: the {connector} \
                         sink writes one table; route each source table to its own sink"
                    )));
                }
                Some(_) => {}
                None => *source_table = Some(t.to_owned()),
            }
        }
        match change.op {
            Op::Truncate => {
                state.out.truncate = true;
                state.out.slots.clear();
                state.index.clear();
            }
            Op::Delete => {
                let before = change.before.ok_or_else(|| {
                    err("a delete without a `before` row (no replica identity?)".into())
                })?;
                let k = key_values(&row_columns(before), key).map_err(err)?;
                state.delete(k, row_no);
            }
            op @ (Op::Insert | Op::Update | Op::Read) => {
                let after = change
                    .after
                    .ok_or_else(|| err(format!("an `{op}` record without an `after` row")))?;
                let mut columns = row_columns(after);
                let k = key_values(&columns, key).map_err(err)?;
                let unchanged: Vec<&str> = change.unchanged().collect();
                if op == Op::Update
                    && let Some(before) = change.before
                    && let Ok(old) = key_values(&row_columns(before), key)
                    // Equal values are one key without building identities (every update of a
                    // full row image has a `before`); unequal ones may still be one key to the
                    // target (its identity folds them).
                    && old != k
                    && state.id(&old) != state.id(&k)
                {
                    state
                        .move_unchanged(&old, &k, &mut columns, &unchanged, change.table)
                        .map_err(err)?;
                    state.delete(old, row_no);
                }
                state.upsert(k, columns, &unchanged, row_no);
            }
        }
    }
    Ok(state.out)
}

/// Checks every change record of `page` the way [`collapse`] reads it, for a sink that has
/// no table to write a page into yet (a `create_table` sink whose page has no row to take
/// the columns from): a page of only deletes and truncates passes, a record whose rows are
/// not rows fails — never skipped with its bookmark moved on.
///
/// # Errors
/// [`FaucetError::Data`] naming the page row, as [`collapse`] gives.
pub fn check_records(page: &Page, connector: &str, target: &str) -> Result<(), FaucetError> {
    let Some(layout) = ChangeLayout::of(page.schema()) else {
        return Ok(());
    };
    for (row_no, row) in page.rows().enumerate() {
        let change = layout.read(row.values()).map_err(|message| {
            FaucetError::data(
                connector,
                format!("{target}, page row {}", row_no + 1),
                message,
            )
        })?;
        if matches!(change.op, Op::Insert | Op::Update | Op::Read) && change.after.is_none() {
            return Err(FaucetError::data(
                connector,
                format!("{target}, page row {}", row_no + 1),
                format!("an `{}` record without an `after` row", change.op),
            ));
        }
    }
    Ok(())
}

fn row_columns(row: &Row) -> Vec<(&str, &Value)> {
    row.schema
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .zip(&row.values)
        .collect()
}

/// The values of the `key` columns among `columns`, in key order.
fn key_values<'a>(columns: &[(&str, &'a Value)], key: &[String]) -> Result<Vec<&'a Value>, String> {
    key.iter()
        .map(|k| {
            columns
                .iter()
                .find(|(name, _)| *name == k.as_str())
                .map(|(_, v)| *v)
                .ok_or_else(|| format!("key column `{k}` is missing from the record"))
                .and_then(|v| {
                    if v.is_null() {
                        Err(format!(
                            "key column `{k}` is null: a keyed sink cannot tell rows with a null \
                             key apart (a unique index lets many nulls in, so an upsert would \
                             add a row each replay); give every record a key value or use \
                             `write_mode: append`"
                        ))
                    } else {
                        Ok(v)
                    }
                })
        })
        .collect()
}

struct State<'a, 'i> {
    out: Collapsed<'a>,
    index: HashMap<Vec<u8>, usize>,
    ids: &'i mut dyn KeyIdentity,
}

impl<'a> State<'a, '_> {
    fn id(&mut self, key: &[&Value]) -> Vec<u8> {
        let mut out = Vec::new();
        self.ids.identify(key, &mut out);
        out
    }

    fn delete(&mut self, key: Vec<&'a Value>, row: usize) {
        let id = self.id(&key);
        let slot = Slot::Delete { key, row };
        match self.index.get(&id) {
            Some(&i) => self.out.slots[i] = slot,
            None => {
                self.index.insert(id, self.out.slots.len());
                self.out.slots.push(slot);
            }
        }
    }

    /// A key-changing update (`old` → `new`) whose `unchanged` columns are not in its
    /// `after`: their value is the old key's, so it is taken from the old key's earlier upsert
    /// in this page. When the page has none and the new key has none either, the value exists
    /// only in the target's old row, which this update deletes: an error, never a null.
    fn move_unchanged(
        &mut self,
        old: &[&'a Value],
        new: &[&'a Value],
        columns: &mut Vec<(&'a str, &'a Value)>,
        unchanged: &[&str],
        table: Option<&str>,
    ) -> Result<(), String> {
        if unchanged.is_empty() {
            return Ok(());
        }
        let earlier_of = |state: &mut Self, key: &[&'a Value]| {
            let id = state.id(key);
            state
                .index
                .get(&id)
                .and_then(|&i| match &state.out.slots[i] {
                    Slot::Upsert { columns, .. } => Some(columns.clone()),
                    Slot::Delete { .. } => None,
                })
        };
        let from_old = earlier_of(self, old).unwrap_or_default();
        let from_new = earlier_of(self, new).unwrap_or_default();
        let mut missing = Vec::new();
        for name in unchanged {
            if columns.iter().any(|(c, _)| c == name) {
                continue;
            }
            match from_old.iter().find(|(n, _)| n == name) {
                Some(&carried) => columns.push(carried),
                None if from_new.iter().any(|(n, _)| n == name) => {}
                None => missing.push(*name),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "an update moved a row to a new key and left column(s) {} unchanged (a TOASTed \
             value the server did not resend), so their value is only in the target's row of \
             the old key, which the update deletes; faucet does not write null instead. Set \
             `ALTER TABLE {} REPLICA IDENTITY FULL` on the source so such updates carry every \
             value; changes already logged stay as they are (re-copy the table, e.g. with \
             `faucet replicate`)",
            missing.join(", "),
            table.unwrap_or("<the source table>")
        ))
    }

    fn upsert(
        &mut self,
        key: Vec<&'a Value>,
        mut columns: Vec<(&'a str, &'a Value)>,
        unchanged: &[&str],
        row: usize,
    ) {
        let id = self.id(&key);
        match self.index.get(&id) {
            Some(&i) => {
                if let Slot::Upsert {
                    columns: earlier, ..
                } = &self.out.slots[i]
                {
                    for name in unchanged {
                        let carried = earlier.iter().find(|(n, _)| n == name);
                        if let Some(&(n, v)) = carried
                            && !columns.iter().any(|(c, _)| *c == n)
                        {
                            columns.push((n, v));
                        }
                    }
                }
                self.out.slots[i] = Slot::Upsert { columns, row };
            }
            None => {
                self.index.insert(id, self.out.slots.len());
                self.out.slots.push(Slot::Upsert { columns, row });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::change::{record_schema, unchanged_field};
    use crate::page::PageBuilder;
    use crate::value::json::write_value;
    use crate::value::{DataType, Field, Schema};

    use super::*;

    /// Keys as their JSON text, as a sink without folding would tell them apart.
    struct JsonIds;

    impl KeyIdentity for JsonIds {
        fn identify(&mut self, key: &[&Value], out: &mut Vec<u8>) {
            for v in key {
                write_value(out, v);
                out.push(0);
            }
        }
    }

    fn change_schema() -> Arc<Schema> {
        record_schema(
            vec![Field::new("lsn", DataType::Text)],
            vec![unchanged_field()],
        )
    }

    fn row(cols: &[(&str, Value)]) -> Value {
        let schema = Arc::new(Schema::new(
            cols.iter()
                .map(|(n, v)| Field::new(*n, v.data_type()))
                .collect(),
        ));
        Value::row(schema, cols.iter().map(|(_, v)| v.clone()).collect())
    }

    fn change(op: &str, before: Value, after: Value, unchanged: &[&str]) -> Vec<Value> {
        vec![
            Value::Text(op.into()),
            Value::Text("public.device".into()),
            Value::Text("0/1".into()),
            Value::Null,
            before,
            after,
            Value::Array(unchanged.iter().map(|s| Value::Text((*s).into())).collect()),
        ]
    }

    fn device(id: i64, name: &str, ver: i64) -> Value {
        row(&[
            ("id", Value::Int(id)),
            ("name", Value::Text(name.into())),
            ("ver", Value::Int(ver)),
        ])
    }

    fn key(id: i64) -> Value {
        row(&[("id", Value::Int(id))])
    }

    fn run<'a>(
        page: &'a Page,
        key: &str,
        seen: &mut Option<String>,
    ) -> Result<Collapsed<'a>, FaucetError> {
        collapse(page, &[key.into()], "test", "t", seen, &mut JsonIds)
    }

    /// The collapsed page as (op, id, name) in slot order.
    fn summary(c: &Collapsed<'_>) -> Vec<(char, i64, Option<String>)> {
        c.slots
            .iter()
            .map(|s| match s {
                Slot::Delete { key, .. } => match key[0] {
                    Value::Int(i) => ('d', *i, None),
                    other => panic!("key {other:?}"),
                },
                Slot::Upsert { columns, .. } => {
                    let get = |n: &str| columns.iter().find(|(c, _)| *c == n).map(|(_, v)| *v);
                    let id = match get("id") {
                        Some(Value::Int(i)) => *i,
                        other => panic!("id {other:?}"),
                    };
                    let name = match get("name") {
                        Some(Value::Text(s)) => Some(s.to_string()),
                        _ => None,
                    };
                    ('u', id, name)
                }
            })
            .collect()
    }

    #[test]
    fn case_15_delete_insert_order_is_kept() {
        let mut b = PageBuilder::new(change_schema(), 16);
        b.push_row(change("d", key(1), Value::Null, &[]));
        b.push_row(change("c", Value::Null, device(1, "a-reborn", 2), &[]));
        b.push_row(change("c", Value::Null, device(4, "d", 1), &[]));
        b.push_row(change("d", key(4), Value::Null, &[]));
        b.push_row(change("u", key(2), device(2, "b2", 2), &[]));
        b.push_row(change("d", key(2), Value::Null, &[]));
        b.push_row(change("c", Value::Null, device(2, "b3", 3), &[]));
        b.push_row(change("d", key(3), Value::Null, &[]));
        b.push_row(change("c", Value::Null, device(3, "c-new", 2), &[]));
        let page = b.finish(None);
        let mut seen = None;
        let c = run(&page, "id", &mut seen).expect("collapse");
        assert!(!c.truncate);
        assert_eq!(
            summary(&c),
            vec![
                ('u', 1, Some("a-reborn".into())),
                ('d', 4, None),
                ('u', 2, Some("b3".into())),
                ('u', 3, Some("c-new".into()))
            ]
        );
        assert_eq!(seen.as_deref(), Some("public.device"));
    }

    #[test]
    fn key_updates_truncates_and_unchanged_columns_merge() {
        let mut b = PageBuilder::new(change_schema(), 16);
        b.push_row(change("c", Value::Null, device(9, "x", 1), &[]));
        b.push_row(change("t", Value::Null, Value::Null, &[]));
        b.push_row(change("c", Value::Null, device(1, "a", 1), &[]));
        // The key itself changes 1 → 5.
        b.push_row(change("u", key(1), device(5, "a", 2), &[]));
        // `name` unchanged (TOAST): carried from the earlier record of key 5.
        b.push_row(change(
            "u",
            key(5),
            row(&[("id", Value::Int(5)), ("ver", Value::Int(3))]),
            &["name"],
        ));
        // `name` unchanged and no earlier value in the page: left out.
        b.push_row(change(
            "u",
            key(7),
            row(&[("id", Value::Int(7)), ("ver", Value::Int(3))]),
            &["name"],
        ));
        let page = b.finish(None);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert!(c.truncate);
        assert_eq!(
            summary(&c),
            vec![('d', 1, None), ('u', 5, Some("a".into())), ('u', 7, None)]
        );
        let Slot::Upsert { columns, .. } = &c.slots[2] else {
            panic!("slot 2 is not an upsert: {:?}", c.slots[2])
        };
        assert!(!columns.iter().any(|(n, _)| *n == "name"));
    }

    #[test]
    fn a_key_change_moves_unchanged_columns_or_refuses_to_null_them() {
        let partial = |id: i64| row(&[("id", Value::Int(id)), ("ver", Value::Int(3))]);
        // The old key's value is earlier in the page: it moves to the new key.
        let mut b = PageBuilder::new(change_schema(), 16);
        b.push_row(change("c", Value::Null, device(1, "kept", 1), &[]));
        b.push_row(change("u", key(1), partial(5), &["name"]));
        let page = b.finish(None);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert_eq!(
            summary(&c),
            vec![('d', 1, None), ('u', 5, Some("kept".into()))]
        );
        // Only the target has it: a data error naming the row and the fix, never a null.
        let mut b = PageBuilder::new(change_schema(), 16);
        b.push_row(change("u", key(2), device(2, "b", 2), &[]));
        b.push_row(change("u", key(1), partial(5), &["name"]));
        let page = b.finish(None);
        match run(&page, "id", &mut None) {
            Err(FaucetError::Data {
                location, message, ..
            }) => {
                assert!(location.contains("page row 2"), "{location}");
                assert!(
                    message.contains("name") && message.contains("REPLICA IDENTITY FULL"),
                    "{message}"
                );
            }
            other => panic!("expected a data error, got {other:?}"),
        }
        // The same key (no move): the stored value is kept by leaving the column out.
        let mut b = PageBuilder::new(change_schema(), 16);
        b.push_row(change("u", key(5), partial(5), &["name"]));
        let page = b.finish(None);
        assert_eq!(
            summary(&run(&page, "id", &mut None).expect("collapse")),
            vec![('u', 5, None)]
        );
    }

    #[test]
    fn a_null_key_is_a_data_error_not_a_row_merged_or_added_per_replay() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Text),
            Field::new("v", DataType::Int),
        ]));
        let mut b = PageBuilder::new(schema, 4);
        b.push_row(vec![Value::Text("a".into()), Value::Int(1)]);
        b.push_row(vec![Value::Null, Value::Int(2)]);
        let page = b.finish(None);
        match run(&page, "k", &mut None) {
            Err(FaucetError::Data {
                location, message, ..
            }) => {
                assert!(location.contains("page row 2"), "{location}");
                assert!(message.contains("`k` is null"), "{message}");
            }
            other => panic!("expected a data error, got {other:?}"),
        }
    }

    #[test]
    fn change_records_whose_rows_are_json_text_are_errors_never_skipped() {
        let json_after = Value::json(serde_json::json!({"id": 2, "name": "ok"}));
        let mut b = PageBuilder::new(change_schema(), 4);
        b.push_row(change("c", Value::Null, json_after, &[]));
        let page = b.finish(None);
        for e in [
            run(&page, "id", &mut None)
                .map(|_| ())
                .expect_err("collapse refuses"),
            check_records(&page, "test", "t").expect_err("check refuses"),
        ] {
            let text = e.to_string();
            assert!(
                text.contains("not a row") && text.contains("page row 1"),
                "{text}"
            );
        }
        // Only deletes and truncates: nothing to check against a table that does not exist.
        let mut b = PageBuilder::new(change_schema(), 4);
        b.push_row(change("d", key(1), Value::Null, &[]));
        b.push_row(change("t", Value::Null, Value::Null, &[]));
        check_records(&b.finish(None), "test", "t").expect("deletes pass");
    }

    #[test]
    fn case_14_last_writer_wins_for_plain_rows() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int),
            Field::new("phone", DataType::Text),
        ]));
        let mut b = PageBuilder::new(schema, 8);
        for (id, phone) in [(1, "111"), (2, "222"), (1, "333"), (2, "444"), (1, "555")] {
            b.push_row([Value::Int(id), Value::Text(phone.into())]);
        }
        let page = b.finish(None);
        let c = run(&page, "id", &mut None).expect("collapse");
        let got: Vec<(usize, String)> = c
            .slots
            .iter()
            .map(|s| match s {
                Slot::Upsert { columns, row } => match columns[1].1 {
                    Value::Text(p) => (*row, p.to_string()),
                    other => panic!("phone {other:?}"),
                },
                Slot::Delete { .. } => panic!("a delete from plain rows"),
            })
            .collect();
        assert_eq!(got, vec![(4, "555".to_owned()), (3, "444".to_owned())]);
        let err = run(&page, "nope", &mut None).expect_err("no key");
        assert!(err.to_string().contains("page row 1"), "{err}");
    }

    #[test]
    fn one_source_table_per_sink_and_unknown_ops_are_errors() {
        let mut b = PageBuilder::new(change_schema(), 2);
        b.push_row(change("c", Value::Null, device(1, "a", 1), &[]));
        let page = b.finish(None);
        let mut seen = Some("public.other".to_owned());
        assert!(matches!(
            run(&page, "id", &mut seen),
            Err(FaucetError::Data { .. })
        ));
        let mut b = PageBuilder::new(change_schema(), 2);
        b.push_row(change("x", Value::Null, device(1, "a", 1), &[]));
        let page = b.finish(None);
        let err = run(&page, "id", &mut None).expect_err("unknown op");
        assert!(err.to_string().contains("unknown change op `x`"), "{err}");
    }

    #[test]
    fn a_page_without_a_position_or_unchanged_field_still_applies() {
        let schema = record_schema(Vec::new(), Vec::new());
        let mut b = PageBuilder::new(schema, 2);
        b.push_row([
            Value::Text("c".into()),
            Value::Text("db.t".into()),
            Value::Null,
            Value::Null,
            device(1, "a", 1),
        ]);
        b.push_row([
            Value::Text("d".into()),
            Value::Text("db.t".into()),
            Value::Null,
            key(1),
            Value::Null,
        ]);
        let page = b.finish(None);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert_eq!(summary(&c), vec![('d', 1, None)]);
    }
}
