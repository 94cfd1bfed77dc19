//! The columns `create_table` makes for a page, the same for every SQL sink: the names and
//! faucet types; each dialect maps a type to its own column type.

use faucet_core::change::ChangeLayout;
use faucet_core::{DataType, Page, Value};

/// The columns and types of a table made for `page`: when `apply_changes` (upsert) a change
/// page's first `after` row (`None` when the page has none: only deletes or truncates),
/// otherwise the page's own fields — for change records appended as rows (an audit log) `op`,
/// `table`, the position fields, `commit_ts`, `before`, `after` and `unchanged_toast`. A
/// field of unknown type takes the type of its first non-null value in the page (text when
/// there is none).
pub(crate) fn columns_for(page: &Page, apply_changes: bool) -> Option<Vec<(String, DataType)>> {
    if apply_changes && let Some(layout) = ChangeLayout::of(page.schema()) {
        let after = layout.after_index();
        return page.rows().find_map(|r| match &r.values()[after] {
            // A schema-change record's `after` is the table's shape, not a row.
            _ if layout.is_schema(r.values()) => None,
            Value::Row(row) => Some(
                row.schema
                    .fields()
                    .iter()
                    .zip(&row.values)
                    .map(|(f, v)| (f.name.clone(), known_type(&f.data_type, v)))
                    .collect(),
            ),
            _ => None,
        });
    }
    let fields = page.schema().fields();
    Some(
        fields
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), page.field_type(i)))
            .collect(),
    )
}

fn known_type(declared: &DataType, value: &Value) -> DataType {
    if *declared == DataType::Unknown {
        value.data_type()
    } else {
        declared.clone()
    }
}

/// The data error of `connector` for a record field `field` that the existing table
/// `table` (with `columns`) does not have; `changes_appended`: the records are change
/// records appended as rows, and the message says how to apply them instead.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
pub(crate) fn unknown_field(
    connector: &str,
    table: &dyn std::fmt::Display,
    field: &str,
    columns: &[&str],
    changes_appended: bool,
) -> faucet_core::FaucetError {
    let hint = if changes_appended {
        " — these are change records, appended as rows (an audit log); to apply the changes \
         to a copy of the source table instead, set `write_mode: upsert` with its `key`, or \
         let `create_table: true` create the audit table under a new name"
    } else {
        ""
    };
    faucet_core::FaucetError::data(
        connector,
        format!("{table}, column {field}"),
        format!(
            "the records have a field `{field}` that table {table} does not have (columns: \
             {}){hint}",
            columns.join(", ")
        ),
    )
}

/// One column layout of a collapsed page's upserts: the column names (in the records'
/// order) and the upserts that have exactly them, as (columns, page row).
pub(crate) type Layout<'c, 'a> = (
    Vec<&'a str>,
    Vec<(&'c [(&'a str, &'a faucet_core::Value)], usize)>,
);

/// The upserts of `collapsed` grouped by column layout, layouts in the order they first
/// appear (plain rows: one layout; change records whose `after` leaves columns out: more),
/// so each layout is one statement shape.
pub(crate) fn upsert_layouts<'c, 'a>(
    collapsed: &'c faucet_core::change::Collapsed<'a>,
) -> Vec<Layout<'c, 'a>> {
    let mut layouts: Vec<Layout<'c, 'a>> = Vec::new();
    for slot in &collapsed.slots {
        if let faucet_core::change::Slot::Upsert { columns, row, .. } = slot {
            let same = |names: &Vec<&str>| {
                names.len() == columns.len() && columns.iter().zip(names).all(|((n, _), m)| n == m)
            };
            match layouts.iter_mut().find(|(names, _)| same(names)) {
                Some((_, group)) => group.push((columns.as_slice(), *row)),
                None => layouts.push((
                    columns.iter().map(|(n, _)| *n).collect(),
                    vec![(columns.as_slice(), *row)],
                )),
            }
        }
    }
    layouts
}
