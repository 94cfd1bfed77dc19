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
//! * A key-changing update whose `after` leaves unchanged columns out (PostgreSQL's TOAST
//!   values under the default replica identity): their value is the old key's. When an
//!   earlier record of the page has it, it is carried over; otherwise it is only in the
//!   target's stored row of the old key, and the upsert of the new key gets a [`Moved`]: the
//!   sink renames that stored row to the new key ([`Collapsed::moves`]) before it deletes and
//!   upserts, so the values move inside the target and the upsert leaves those columns out.
//!   Two key changes in a row (1 → 5 → 9) are two renames, applied in source order with the
//!   page's other renames, so a key freed between them (9 → 12 before 5 → 9) is free.
//!
//! After collapsing, every key appears once, so the deletes and the upserts touch disjoint
//! rows and their order no longer matters; an upsert statement never meets a key twice.

use std::collections::HashMap;

use crate::error::FaucetError;
use crate::page::Page;
use crate::value::json::write_value;
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
        /// Left-out columns whose value is in the target's stored row of another key (a
        /// key-changing update): the renames that bring that row to this key, in source
        /// order (empty: none). The sink applies them first.
        moved: Vec<Moved<'a>>,
    },
}

/// One rename of a stored row: a key-changing update moved the row of `from` to `to`,
/// leaving `columns` out of its `after` (unchanged TOAST values), and their value exists only
/// in the target. The renames of one row in a page form a chain ([`Collapsed::move_chains`]:
/// the stored row of the first `from` ends at the last `to`, the upsert's key). A sink,
/// before the page's deletes and upserts:
///
/// 1. skips a chain whose last `to` has a row while its first `from` has none, or while
///    `keep_target` (a replayed page: the row is already where the page leaves it);
/// 2. applies the renames of the other chains in source order ([`Collapsed::moves`]: a
///    later rename may take a key an earlier one freed): when a row of `from` exists, it
///    deletes a row of `to` (stale: the source had that key free then) and renames the row
///    of `from` to `to` — only the key columns change, every other stored value moves with it;
/// 3. then the last `to` of every chain it applied must have a row, else the page fails with
///    [`moved_row_missing`] (the old row was never delivered: faucet does not write null).
///
/// The upsert of the last `to` then leaves `columns` out, so they keep the moved values.
#[derive(Debug, Clone)]
pub struct Moved<'a> {
    /// The old key (in `key` order), as the target held it before this page.
    pub from: Vec<&'a Value>,
    /// The new key (in `key` order): the key of the upsert this belongs to.
    pub to: Vec<&'a Value>,
    /// The columns whose value comes from the row of `from`.
    pub columns: Vec<&'a str>,
    /// The page row (0-based) of the update: renames apply in this order.
    pub row: usize,
    /// Whether this is the row's last rename in the page (`to` is the upsert's key).
    pub last: bool,
    /// For the chain: keep an existing row of its last `to` even when its first `from` has
    /// a row, because the page ends with a row at that first key (inserted again, or another
    /// row moved there): on a replayed page that row is the newer one, and the row of the
    /// last `to` this page's own result. False when the page deleted or moved the last `to`
    /// away before the chain reached it (a row there is stale then).
    pub keep_target: bool,
    /// The source table of the update, for the error's advice.
    pub table: Option<&'a str>,
    /// Whether the page deleted (or moved away) `to` before this rename.
    target_was_deleted: bool,
}

/// A collapsed page.
#[derive(Debug, Default)]
pub struct Collapsed<'a> {
    /// Truncate the target first.
    pub truncate: bool,
    /// One slot per key, in the order keys first appeared (after the last truncate).
    pub slots: Vec<Slot<'a>>,
}

impl<'a> Collapsed<'a> {
    /// Every rename ([`Moved`]) in the order the source made them: the order a sink applies
    /// them in (a later rename may take a key an earlier one freed).
    pub fn moves(&self) -> Vec<&Moved<'a>> {
        let mut out: Vec<&Moved<'a>> = self.move_chains().into_iter().flatten().collect();
        out.sort_by_key(|m| m.row);
        out
    }

    /// The renames grouped by row: each chain in source order, its last `to` the key of the
    /// upsert it belongs to (see [`Moved`] for how a sink applies them).
    pub fn move_chains(&self) -> Vec<&[Moved<'a>]> {
        self.slots
            .iter()
            .filter_map(|s| match s {
                Slot::Upsert { moved, .. } if !moved.is_empty() => Some(moved.as_slice()),
                _ => None,
            })
            .collect()
    }

    /// The [`Slot::Delete`]s in slot order: each one's key values (in `key` order) and page
    /// row.
    pub fn deletes(&self) -> Vec<(&[&'a Value], usize)> {
        self.slots
            .iter()
            .filter_map(|s| match s {
                Slot::Delete { key, row } => Some((key.as_slice(), *row)),
                Slot::Upsert { .. } => None,
            })
            .collect()
    }
}

/// The error for a [`Moved`] whose row is not in the target: neither key has a row after the
/// rename, so the left-out values exist nowhere faucet can read them. `connector` and
/// `target` name the sink and its table.
pub fn moved_row_missing(connector: &str, target: &str, moved: &Moved<'_>) -> FaucetError {
    let text = |key: &[&Value]| {
        let mut out = Vec::new();
        for (i, v) in key.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            write_value(&mut out, v);
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    FaucetError::data(
        connector,
        format!("{target}, page row {}", moved.row + 1),
        format!(
            "an update moved the row of key ({}) to key ({}) and left column(s) {} unchanged \
             (TOASTed values the server did not resend), so their value is only in the \
             target's row of the old key, and {target} has no row of either key (the old row \
             was never delivered?); faucet does not write null instead, and nothing of this \
             page was committed. Re-copy the table (e.g. with `faucet replicate`), and set \
             `ALTER TABLE {} REPLICA IDENTITY FULL` on the source so such updates carry every \
             value",
            text(&moved.from),
            text(&moved.to),
            moved.columns.join(", "),
            moved.table.unwrap_or("<the source table>")
        ),
    )
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
            state.upsert(k, columns, &[], row_no, Vec::new());
            continue;
        };
        let change = layout.read(values).map_err(err)?;
        if let Some(t) = change.table {
            match source_table {
                Some(seen) if seen != t => {
                    return Err(err(format!(
                        "change records of `{t}` after records of `{seen}`: the {connector} \
                         sink writes one table; route each source table to its own target \
                         with a template (`table: \"<schema>.{{table}}\"`) or `tables:`"
                    )));
                }
                Some(_) => {}
                None => *source_table = Some(t.to_owned()),
            }
        }
        match change.op {
            // The table's shape changed here: no row to apply (a sink that applies schema
            // changes splits the page at it, `change::segments`).
            Op::Schema => {}
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
                let after = change.after.ok_or_else(|| err(change.missing_after()))?;
                let mut columns = row_columns(after);
                let k = key_values(&columns, key).map_err(err)?;
                let unchanged: Vec<&str> = change.unchanged().collect();
                let mut moved = Vec::new();
                if op == Op::Update
                    && let Some(before) = change.before
                    && let Ok(old) = key_values(&row_columns(before), key)
                    // Equal values are one key without building identities (every update of a
                    // full row image has a `before`); unequal ones may still be one key to the
                    // target (its identity folds them).
                    && old != k
                    && state.id(&old) != state.id(&k)
                {
                    moved = state.move_unchanged(
                        &old,
                        &k,
                        &mut columns,
                        &unchanged,
                        change.table,
                        row_no,
                    );
                    state.delete(old, row_no);
                }
                state.upsert(k, columns, &unchanged, row_no, moved);
            }
        }
    }
    state.settle_moves();
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
                change.missing_after(),
            ));
        }
    }
    Ok(())
}

fn row_columns(row: &Row) -> Vec<(&str, &Value)> {
    row.schema.names().zip(&row.values).collect()
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

    /// The slot of `key`, if any.
    fn slot_of(&mut self, key: &[&Value]) -> Option<&Slot<'a>> {
        let id = self.id(key);
        self.index.get(&id).map(|&i| &self.out.slots[i])
    }

    /// A key-changing update (`old` → `new`) whose `unchanged` columns are not in its
    /// `after`: their value is the old key's. Taken from the old key's earlier upsert in this
    /// page when it has them (pushed onto `columns`); otherwise they are in the target's
    /// stored row of the old key — or of the key that row had before this page, when an
    /// earlier update of the page moved it — and the result says which row to move.
    fn move_unchanged(
        &mut self,
        old: &[&'a Value],
        new: &[&'a Value],
        columns: &mut Vec<(&'a str, &'a Value)>,
        unchanged: &[&'a str],
        table: Option<&'a str>,
        row: usize,
    ) -> Vec<Moved<'a>> {
        if unchanged.is_empty() {
            return Vec::new();
        }
        let (from_old, old_moved) = match self.slot_of(old) {
            Some(Slot::Upsert { columns, moved, .. }) => (columns.clone(), moved.clone()),
            _ => (Vec::new(), Vec::new()),
        };
        let (from_new, target_was_deleted) = match self.slot_of(new) {
            Some(Slot::Upsert { columns, .. }) => (columns.clone(), false),
            Some(Slot::Delete { .. }) => (Vec::new(), true),
            None => (Vec::new(), false),
        };
        let mut pending = Vec::new();
        for name in unchanged {
            if columns.iter().any(|(c, _)| c == name) {
                continue;
            }
            match from_old.iter().find(|(n, _)| n == name) {
                Some(&carried) => columns.push(carried),
                // The new key's earlier upsert has it: merged by `upsert`.
                None if from_new.iter().any(|(n, _)| n == name) => {}
                None => pending.push(*name),
            }
        }
        if pending.is_empty() {
            return Vec::new();
        }
        // The row may have been moved to `old` earlier in the page: those renames come first.
        let mut chain = old_moved;
        for hop in &mut chain {
            hop.last = false;
            hop.columns.clone_from(&pending);
        }
        chain.push(Moved {
            from: old.to_vec(),
            to: new.to_vec(),
            columns: pending,
            row,
            last: true,
            keep_target: false,
            table,
            target_was_deleted,
        });
        chain
    }

    fn upsert(
        &mut self,
        key: Vec<&'a Value>,
        mut columns: Vec<(&'a str, &'a Value)>,
        unchanged: &[&str],
        row: usize,
        mut moved: Vec<Moved<'a>>,
    ) {
        let id = self.id(&key);
        match self.index.get(&id) {
            Some(&i) => {
                if let Slot::Upsert {
                    columns: earlier,
                    moved: earlier_moved,
                    ..
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
                    // A later update of a moved row: what it still leaves out still comes
                    // from the moved row.
                    if moved.is_empty() {
                        let mut chain = earlier_moved.clone();
                        for hop in &mut chain {
                            hop.columns.retain(|c| !columns.iter().any(|(n, _)| n == c));
                        }
                        chain.retain(|hop| !hop.columns.is_empty());
                        moved = chain;
                    }
                }
                self.out.slots[i] = Slot::Upsert {
                    columns,
                    row,
                    moved,
                };
            }
            None => {
                self.index.insert(id, self.out.slots.len());
                self.out.slots.push(Slot::Upsert {
                    columns,
                    row,
                    moved,
                });
            }
        }
    }

    /// Once the page is read: a move keeps an existing row of its new key when the page
    /// ends with a row of the old key (see [`Moved::keep_target`]).
    fn settle_moves(&mut self) {
        let mut keep = Vec::new();
        for (i, slot) in self.out.slots.iter().enumerate() {
            if let Slot::Upsert { moved, .. } = slot
                && let (Some(first), Some(last)) = (moved.first(), moved.last())
            {
                let mut id = Vec::new();
                self.ids.identify(&first.from, &mut id);
                let again = self
                    .index
                    .get(&id)
                    .is_some_and(|&j| matches!(self.out.slots[j], Slot::Upsert { .. }));
                keep.push((i, again && !last.target_was_deleted));
            }
        }
        for (i, keep) in keep {
            if let Slot::Upsert { moved, .. } = &mut self.out.slots[i] {
                for m in moved {
                    m.keep_target = keep;
                }
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

    /// A page of change records.
    fn changes<const N: usize>(rows: [Vec<Value>; N]) -> Page {
        let mut b = PageBuilder::new(change_schema(), 16);
        for r in rows {
            b.push_row(r);
        }
        b.finish(None)
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
        let page = changes([
            change("d", key(1), Value::Null, &[]),
            change("c", Value::Null, device(1, "a-reborn", 2), &[]),
            change("c", Value::Null, device(4, "d", 1), &[]),
            change("d", key(4), Value::Null, &[]),
            change("u", key(2), device(2, "b2", 2), &[]),
            change("d", key(2), Value::Null, &[]),
            change("c", Value::Null, device(2, "b3", 3), &[]),
            change("d", key(3), Value::Null, &[]),
            change("c", Value::Null, device(3, "c-new", 2), &[]),
        ]);
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

    /// The moves of a collapsed page as (from, to, columns, keep_target) in apply order.
    fn moves(c: &Collapsed<'_>) -> Vec<(i64, i64, Vec<String>, bool)> {
        let id = |k: &[&Value]| match k[0] {
            Value::Int(i) => *i,
            other => panic!("key {other:?}"),
        };
        c.moves()
            .into_iter()
            .map(|m| {
                (
                    id(&m.from),
                    id(&m.to),
                    m.columns.iter().map(|s| s.to_string()).collect(),
                    m.keep_target,
                )
            })
            .collect()
    }

    #[test]
    fn a_key_change_carries_unchanged_columns_or_moves_the_stored_row() {
        let partial = |id: i64| row(&[("id", Value::Int(id)), ("ver", Value::Int(3))]);
        // The old key's value is earlier in the page: it is carried to the new key.
        let page = changes([
            change("c", Value::Null, device(1, "kept", 1), &[]),
            change("u", key(1), partial(5), &["name"]),
        ]);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert_eq!(
            summary(&c),
            vec![('d', 1, None), ('u', 5, Some("kept".into()))]
        );
        assert!(moves(&c).is_empty());
        // Only the target has it: the stored row of 1 moves to 5, `name` left out.
        let page = changes([
            change("u", key(2), device(2, "b", 2), &[]),
            change("u", key(1), partial(5), &["name"]),
        ]);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert_eq!(
            summary(&c),
            vec![('u', 2, Some("b".into())), ('d', 1, None), ('u', 5, None)]
        );
        assert_eq!(moves(&c), vec![(1, 5, vec!["name".to_owned()], false)]);
        // The same key (no move): the stored value is kept by leaving the column out.
        let page = changes([change("u", key(5), partial(5), &["name"])]);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert_eq!(summary(&c), vec![('u', 5, None)]);
        assert!(moves(&c).is_empty());
    }

    #[test]
    fn moves_chain_keep_source_order_and_end_when_the_value_arrives() {
        let partial = |id: i64| row(&[("id", Value::Int(id)), ("ver", Value::Int(3))]);
        // 1 → 5 → 9: two renames, in source order; a later same-key update of 9 that still
        // leaves `name` out keeps them.
        let page = changes([
            change("u", key(1), partial(5), &["name"]),
            change("u", key(5), partial(9), &["name"]),
            change("u", key(9), partial(9), &["name"]),
        ]);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert_eq!(
            summary(&c),
            vec![('d', 1, None), ('d', 5, None), ('u', 9, None)]
        );
        let name = || vec!["name".to_owned()];
        assert_eq!(
            moves(&c),
            vec![(1, 5, name(), false), (5, 9, name(), false)]
        );
        assert_eq!(
            c.moves().iter().map(|m| m.last).collect::<Vec<_>>(),
            [false, true]
        );
        // 1 → 5, then 9 → 12 frees 9, then 5 → 9: the renames interleave in source order.
        let page = changes([
            change("u", key(1), partial(5), &["name"]),
            change("u", key(9), partial(12), &["name"]),
            change("u", key(5), partial(9), &["name"]),
        ]);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert_eq!(
            moves(&c),
            vec![
                (1, 5, name(), false),
                (9, 12, name(), true),
                (5, 9, name(), false)
            ]
        );
        // 5 → 8 frees 5, then 1 → 5 takes it: applied in that order. The page ends with a
        // row of 5, so the move 5 → 8 keeps a row of 8 it finds (on a replay the row of 5 is
        // the moved row of 1).
        let page = changes([
            change("u", key(5), partial(8), &["name"]),
            change("u", key(1), partial(5), &["name"]),
        ]);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert_eq!(
            moves(&c),
            vec![
                (5, 8, vec!["name".to_owned()], true),
                (1, 5, vec!["name".to_owned()], false)
            ]
        );
        // The old key inserted again after the move: an existing row of the new key is kept
        // (on a replay the row of the old key is the newer one).
        let page = changes([
            change("u", key(1), partial(5), &["name"]),
            change("c", Value::Null, device(1, "new", 1), &[]),
        ]);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert_eq!(moves(&c), vec![(1, 5, vec!["name".to_owned()], true)]);
        // The moved row's value arrives later in the page: no move is left.
        let page = changes([
            change("u", key(1), partial(5), &["name"]),
            change("u", key(5), device(5, "set", 4), &[]),
        ]);
        let c = run(&page, "id", &mut None).expect("collapse");
        assert!(moves(&c).is_empty());
        assert_eq!(
            summary(&c),
            vec![('d', 1, None), ('u', 5, Some("set".into()))]
        );
        // A move whose new key is deleted later in the page: no move either.
        let page = changes([
            change("u", key(1), partial(5), &["name"]),
            change("d", key(5), Value::Null, &[]),
        ]);
        assert!(moves(&run(&page, "id", &mut None).expect("collapse")).is_empty());
    }

    #[test]
    fn a_missing_moved_row_names_keys_columns_row_and_the_fix() {
        let partial = row(&[("id", Value::Int(5)), ("ver", Value::Int(3))]);
        let page = changes([
            change("u", key(2), device(2, "b", 2), &[]),
            change("u", key(1), partial, &["name"]),
        ]);
        let c = run(&page, "id", &mut None).expect("collapse");
        match moved_row_missing("test", "t", c.moves()[0]) {
            FaucetError::Data {
                location, message, ..
            } => {
                assert!(location.contains("page row 2"), "{location}");
                for want in [
                    "key (1)",
                    "key (5)",
                    "name",
                    "REPLICA IDENTITY FULL",
                    "public.device",
                ] {
                    assert!(message.contains(want), "{want}: {message}");
                }
            }
            other => panic!("expected a data error, got {other:?}"),
        }
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
    fn an_update_with_only_its_description_is_refused_naming_full_document() {
        let schema = record_schema(
            vec![Field::new("resume_token", DataType::Text)],
            vec![Field::new(
                crate::change::UPDATE_DESCRIPTION,
                DataType::Json,
            )],
        );
        let described = |desc: Value| {
            let mut b = PageBuilder::new(Arc::clone(&schema), 1);
            b.push_row(vec![
                Value::Text("u".into()),
                Value::Text("shop.orders".into()),
                Value::Text("82".into()),
                Value::Null,
                key(7),
                Value::Null,
                desc,
            ]);
            b.finish(None)
        };
        let page = described(row(&[("updatedFields", row(&[("n", Value::Int(2))]))]));
        for e in [
            run(&page, "id", &mut None)
                .map(|_| ())
                .expect_err("collapse refuses"),
            check_records(&page, "test", "t").expect_err("check refuses"),
        ] {
            let text = e.to_string();
            assert!(text.contains("`full_document: required`"), "{text}");
        }
        // Without a description the message is the plain one.
        let page = described(Value::Null);
        let text = check_records(&page, "test", "t")
            .expect_err("refused")
            .to_string();
        assert!(text.contains("without an `after` row"), "{text}");
        assert_eq!(
            ChangeLayout::of(&schema).expect("layout").position_fields(),
            &[2]
        );
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
                Slot::Upsert { columns, row, .. } => match columns[1].1 {
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
