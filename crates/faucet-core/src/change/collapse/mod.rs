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
mod tests;
