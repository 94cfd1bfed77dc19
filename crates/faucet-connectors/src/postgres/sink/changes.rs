//! How an upsert page becomes statements: the page is collapsed, in source order, to the
//! final operation per key, which is equivalent to applying it record by record
//! (cases 14 and 15) and lets each kind of operation run as one set-based statement.
//!
//! * A change record (a page whose schema has `op`, `before` and `after`, DESIGN.md "Change
//!   records"): `c`/`u`/`r` upsert the `after` row; `d` deletes the key taken from `before`;
//!   a `u` whose `before` key differs from its `after` key (the key itself was updated) also
//!   deletes the old key; `t` truncates the target, so everything before it in the page is
//!   dropped and the statement runs first.
//! * A plain row upserts itself.
//! * Several changes to one key: the last one wins. An upsert following an upsert of the same
//!   key is merged: a column named in the later record's `unchanged_toast` (left out of its
//!   `after`) keeps the earlier record's value, and when no earlier record in the page has it,
//!   the column is left out of the statement, so the stored value is kept (case 01: never
//!   nulled).
//!
//! After collapsing, every key appears once, so the deletes and the upserts touch disjoint
//! rows and their order no longer matters; `ON CONFLICT DO UPDATE` never meets a key twice.

use std::collections::HashMap;

use faucet_core::value::Row;
use faucet_core::{FaucetError, Page, Value};

use super::encode::write_copy_value;
use super::nul::{NulBytes, cleaned, holds_nul};
use crate::postgres::config::CONNECTOR;

/// The final operation on one key.
#[derive(Debug)]
pub(crate) enum Slot<'a> {
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
pub(crate) struct Collapsed<'a> {
    /// Truncate the target first.
    pub(crate) truncate: bool,
    /// One slot per key, in the order keys first appeared (after the last truncate).
    pub(crate) slots: Vec<Slot<'a>>,
}

/// The column layout of a change-record page.
struct ChangeFields {
    op: usize,
    table: Option<usize>,
    before: usize,
    after: usize,
    unchanged: Option<usize>,
}

fn change_fields(page: &Page) -> Option<ChangeFields> {
    let s = page.schema();
    Some(ChangeFields {
        op: s.index_of("op")?,
        table: s.index_of("table"),
        before: s.index_of("before")?,
        after: s.index_of("after")?,
        unchanged: s.index_of("unchanged_toast"),
    })
}

/// Whether `page` holds change records rather than plain rows.
pub(crate) fn is_change_page(page: &Page) -> bool {
    change_fields(page).is_some()
}

/// Collapses `page` by `key` (see the module docs). `source_table` remembers the `table` of
/// the change records seen by this writer: one sink table takes the changes of one source
/// table.
///
/// # Errors
/// [`FaucetError::Data`] naming the page row when a record lacks a key column, has an
/// unknown `op`, or comes from another source table than earlier records.
pub(crate) fn collapse<'a>(
    page: &'a Page,
    key: &[String],
    target: &str,
    source_table: &mut Option<String>,
    nul: NulBytes,
) -> Result<Collapsed<'a>, FaucetError> {
    let mut out = Collapsed::default();
    let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut scratch = KeyIds {
        scratch: Vec::new(),
        nul,
    };
    let fields = change_fields(page);
    for (row_no, row) in page.rows().enumerate() {
        let values = row.values();
        let err = |message: String| {
            FaucetError::data(
                CONNECTOR,
                format!("{target}, page row {}", row_no + 1),
                message,
            )
        };
        let Some(f) = &fields else {
            let columns: Vec<(&str, &Value)> = row
                .schema()
                .fields()
                .iter()
                .map(|fl| fl.name.as_str())
                .zip(values)
                .collect();
            let k = key_values(&columns, key).map_err(err)?;
            upsert(&mut out, &mut index, &mut scratch, k, columns, &[], row_no);
            continue;
        };
        if let Some(t) = f.table.and_then(|i| text_of(&values[i])) {
            match source_table {
                Some(seen) if seen != t => {
                    return Err(err(format!(
                        "change records of `{t}` after records of `{seen}`: the postgres sink \
                         writes one table; route each source table to its own sink"
                    )));
                }
                Some(_) => {}
                None => *source_table = Some(t.to_owned()),
            }
        }
        let op = text_of(&values[f.op]).unwrap_or("");
        match op {
            "t" => {
                out.truncate = true;
                out.slots.clear();
                index.clear();
            }
            "d" => {
                let before = row_of(&values[f.before]).ok_or_else(|| {
                    err("a delete without a `before` row (REPLICA IDENTITY NOTHING?)".into())
                })?;
                let k = key_values(&row_columns(before), key).map_err(err)?;
                delete(&mut out, &mut index, &mut scratch, k, row_no);
            }
            "c" | "u" | "r" => {
                let after = row_of(&values[f.after])
                    .ok_or_else(|| err(format!("an `{op}` record without an `after` row")))?;
                let columns = row_columns(after);
                let k = key_values(&columns, key).map_err(err)?;
                if op == "u"
                    && let Some(before) = row_of(&values[f.before])
                    && let Ok(old) = key_values(&row_columns(before), key)
                    && old != k
                {
                    delete(&mut out, &mut index, &mut scratch, old, row_no);
                }
                let unchanged: Vec<&str> = f
                    .unchanged
                    .map(|i| match &values[i] {
                        Value::Array(items) => items.iter().filter_map(text_of).collect(),
                        _ => Vec::new(),
                    })
                    .unwrap_or_default();
                upsert(
                    &mut out,
                    &mut index,
                    &mut scratch,
                    k,
                    columns,
                    &unchanged,
                    row_no,
                );
            }
            other => return Err(err(format!("unknown change op `{other}`"))),
        }
    }
    Ok(out)
}

fn text_of(v: &Value) -> Option<&str> {
    match v {
        Value::Text(s) => Some(s),
        _ => None,
    }
}

fn row_of(v: &Value) -> Option<&Row> {
    match v {
        Value::Row(r) => Some(r),
        _ => None,
    }
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
        })
        .collect()
}

/// Key identities for collapsing, as the target will hold them.
struct KeyIds {
    scratch: Vec<u8>,
    /// The sink's U+0000 policy: keys that differ only by U+0000 are one key once it is
    /// stripped or replaced (`x\0` and `x` under `strip`).
    nul: NulBytes,
}

/// The key's identity for collapsing: its COPY text (types and all), after the NUL policy.
fn key_text(ids: &mut KeyIds, key: &[&Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, v) in key.iter().enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        if ids.nul != NulBytes::Fail && holds_nul(v) {
            write_copy_value(&mut out, &cleaned(v, ids.nul), &mut ids.scratch);
        } else {
            write_copy_value(&mut out, v, &mut ids.scratch);
        }
    }
    out
}

fn delete<'a>(
    out: &mut Collapsed<'a>,
    index: &mut HashMap<Vec<u8>, usize>,
    scratch: &mut KeyIds,
    key: Vec<&'a Value>,
    row: usize,
) {
    let id = key_text(scratch, &key);
    let slot = Slot::Delete { key, row };
    match index.get(&id) {
        Some(&i) => out.slots[i] = slot,
        None => {
            index.insert(id, out.slots.len());
            out.slots.push(slot);
        }
    }
}

fn upsert<'a>(
    out: &mut Collapsed<'a>,
    index: &mut HashMap<Vec<u8>, usize>,
    scratch: &mut KeyIds,
    key: Vec<&'a Value>,
    mut columns: Vec<(&'a str, &'a Value)>,
    unchanged: &[&str],
    row: usize,
) {
    let id = key_text(scratch, &key);
    match index.get(&id) {
        Some(&i) => {
            if let Slot::Upsert {
                columns: earlier, ..
            } = &out.slots[i]
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
            out.slots[i] = Slot::Upsert { columns, row };
        }
        None => {
            index.insert(id, out.slots.len());
            out.slots.push(Slot::Upsert { columns, row });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use faucet_core::{DataType, Field, PageBuilder, Schema};

    use super::*;

    fn change_schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("op", DataType::Text),
            Field::new("table", DataType::Text),
            Field::new("before", DataType::Json),
            Field::new("after", DataType::Json),
            Field::new("unchanged_toast", DataType::Array(Box::new(DataType::Text))),
        ]))
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

    /// The collapsed page as (op, id, name) in slot order.
    fn summary(c: &Collapsed<'_>) -> Vec<(char, i64, Option<String>)> {
        c.slots
            .iter()
            .map(|s| match s {
                Slot::Delete { key, .. } => match key[0] {
                    Value::Int(i) => ('d', *i, None),
                    _ => panic!(),
                },
                Slot::Upsert { columns, .. } => {
                    let get = |n: &str| columns.iter().find(|(c, _)| *c == n).map(|(_, v)| *v);
                    let id = match get("id") {
                        Some(Value::Int(i)) => *i,
                        _ => panic!(),
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
        let c = collapse(&page, &["id".into()], "t", &mut seen, NulBytes::Fail).expect("collapse");
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
    fn keys_that_differ_only_by_nul_are_one_key_once_it_is_stripped() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Text),
            Field::new("v", DataType::Text),
        ]));
        let mut b = PageBuilder::new(schema, 2);
        b.push_row([Value::Text("x\0".into()), Value::Text("a".into())]);
        b.push_row([Value::Text("x".into()), Value::Text("b".into())]);
        let page = b.finish(None);
        for (policy, slots) in [
            (NulBytes::Fail, 2),
            (NulBytes::Strip, 1),
            (NulBytes::Replace, 2),
        ] {
            let c = collapse(&page, &["id".into()], "t", &mut None, policy).expect("collapse");
            assert_eq!(c.slots.len(), slots, "{policy:?}");
        }
    }

    #[test]
    fn key_updates_truncates_and_toast_merges() {
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
        let c = collapse(&page, &["id".into()], "t", &mut None, NulBytes::Fail).expect("collapse");
        assert!(c.truncate);
        assert_eq!(
            summary(&c),
            vec![('d', 1, None), ('u', 5, Some("a".into())), ('u', 7, None)]
        );
        let Slot::Upsert { columns, .. } = &c.slots[2] else {
            panic!()
        };
        assert!(!columns.iter().any(|(n, _)| *n == "name"));
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
        let c = collapse(&page, &["id".into()], "t", &mut None, NulBytes::Fail).expect("collapse");
        let got: Vec<(usize, String)> = c
            .slots
            .iter()
            .map(|s| match s {
                Slot::Upsert { columns, row } => match columns[1].1 {
                    Value::Text(p) => (*row, p.to_string()),
                    _ => panic!(),
                },
                Slot::Delete { .. } => panic!(),
            })
            .collect();
        assert_eq!(got, vec![(4, "555".to_owned()), (3, "444".to_owned())]);
        let err =
            collapse(&page, &["nope".into()], "t", &mut None, NulBytes::Fail).expect_err("no key");
        assert!(err.to_string().contains("page row 1"), "{err}");
    }

    #[test]
    fn one_source_table_per_sink() {
        let mut b = PageBuilder::new(change_schema(), 2);
        b.push_row(change("c", Value::Null, device(1, "a", 1), &[]));
        let page = b.finish(None);
        let mut seen = Some("public.other".to_owned());
        assert!(matches!(
            collapse(&page, &["id".into()], "t", &mut seen, NulBytes::Fail),
            Err(FaucetError::Data { .. })
        ));
    }
}
