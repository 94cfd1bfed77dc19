//! Schema changes on a system whose DDL is not transactional (MySQL, MariaDB: every DDL
//! statement commits the open transaction implicitly, [`SinkDialect::transactional_ddl`]).
//!
//! The DDL cannot go inside the page's transaction there, so it goes **ahead of it**, in its
//! own step: before the page's transaction begins, each schema-change record of a target's
//! records is applied in page order by the one apply step ([`super::schema::apply`]), which
//! reads the target's catalog first and runs only what the target lacks. Then the page's
//! rows are written in one transaction with the commit token, as always — every row in the
//! target's new shape: the rows that came before a change are translated into the shape
//! after it ([`translate`]: a renamed column's values under its new name, a column dropped
//! with `dropped_columns: drop` left out; an added column or a widened type needs nothing).
//!
//! Why this is still exact: the DDL is committed before the rows, so a crash between the
//! two leaves the target altered and the page not written (its token not advanced). The
//! page is delivered again from its bookmark; its schema changes find the target altered
//! and run nothing, and its rows are written with the token once. The target never holds
//! a row of the page without its schema change, and no change runs twice.

use std::collections::HashMap;
use std::sync::Arc;

use faucet_core::change::ChangeLayout;
use faucet_core::change::schema::{ChangeKind, ColumnChange};
use faucet_core::{FaucetError, Field, Page, PageBuilder, Schema, Value};

use super::SinkDialect;
use super::fence::WriterFence;
use super::schema::{self, DroppedColumns, SchemaApply};

/// Applies the schema changes among `part` (one target's records of a page) to `table`
/// ahead of the page's transaction, each as one committed step after the writer's fence is
/// checked: the records to write instead of `part` (every row in the target's new shape,
/// no schema-change record), or `None` when `part` has no schema change. `table` is the
/// target as the catalog has it afterwards.
///
/// # Errors
/// [`FaucetError::Data`] naming target, column, change and fix for a change the policy or
/// the target refuses (the changes before it in the page stay applied: a rerun finds
/// them); the fence's error; [`FaucetError::Write`] when a statement fails.
pub(crate) async fn apply_ahead<D: SinkDialect>(
    d: &D,
    conn: &mut D::Conn,
    table: &mut Option<D::Table>,
    scratch: &mut D::Scratch,
    part: &Page,
    fence: Option<&WriterFence>,
) -> Result<Option<Page>, FaucetError> {
    let SchemaApply::Apply(policy) = schema::apply_mode(d, table.as_ref()) else {
        return Ok(None);
    };
    let Some(layout) = ChangeLayout::of(part.schema()) else {
        return Ok(None);
    };
    let changes: Vec<usize> = (0..part.len())
        .filter(|&r| {
            part.row(r)
                .is_some_and(|row| layout.is_schema(row.values()))
        })
        .collect();
    if changes.is_empty() {
        return Ok(None);
    }
    if let Some(writer) = fence {
        // A writer whose lease a newer run took changes nothing, DDL included.
        d.check_fence(conn, writer).await?;
    }
    let mut read = Vec::with_capacity(changes.len());
    for &row in &changes {
        let (change, position) = schema::read(part, row, d.connector(), &d.target_name())?;
        // No target yet (`create_table` waits for rows): it is created with the shape of
        // the rows it first gets.
        if let Some(t) = table.as_ref()
            && let Some(altered) = schema::apply(d, conn, t, scratch, &change, &position).await?
        {
            *table = Some(altered);
        }
        read.push((row, change.changes));
    }
    Ok(Some(translate(part, &layout, &read, policy.dropped)))
}

/// `part` without its schema-change records (`changes`: their rows, in page order, with
/// what each changed), each other record's `before` and `after` in the shape after every
/// change that follows it: renamed columns under their new names, columns dropped with
/// `dropped_columns: drop` left out (also from `unchanged_toast`).
pub(crate) fn translate(
    part: &Page,
    layout: &ChangeLayout,
    changes: &[(usize, Vec<ColumnChange>)],
    dropped: DroppedColumns,
) -> Page {
    let mut out = PageBuilder::new(part.schema().clone(), part.len());
    let mut next = 0; // the first schema change after the current row
    let mut cache: HashMap<(usize, *const Schema), Reshaped> = HashMap::new();
    for r in 0..part.len() {
        let Some(row) = part.row(r) else { continue };
        if changes.get(next).is_some_and(|(at, _)| *at == r) {
            next += 1;
            continue;
        }
        let later: Vec<&ColumnChange> = changes[next..].iter().flat_map(|(_, c)| c).collect();
        if later.is_empty() {
            out.push_row(row.values().iter().cloned());
            continue;
        }
        let mut values = row.values().to_vec();
        for i in [layout.before_index(), layout.after_index()] {
            if let Value::Row(inner) = &values[i] {
                let (schema, pick) = cache
                    .entry((next, Arc::as_ptr(&inner.schema)))
                    .or_insert_with(|| reshape(&inner.schema, &later, dropped))
                    .clone();
                let kept = pick.iter().map(|&k| inner.values[k].clone()).collect();
                values[i] = Value::row(schema, kept);
            }
        }
        if let Some(i) = layout.unchanged_index()
            && let Value::Array(names) = &values[i]
        {
            let renamed = names
                .iter()
                .filter_map(|n| match n {
                    Value::Text(t) => final_name(t, &later, dropped).map(|n| Value::Text(n.into())),
                    other => Some(other.clone()),
                })
                .collect();
            values[i] = Value::Array(renamed);
        }
        out.push_row(values);
    }
    out.finish(part.bookmark().cloned())
}

/// A row schema after some changes, and the index of the old field each field takes its
/// value from ([`reshape`]).
type Reshaped = (Arc<Schema>, Vec<usize>);

/// The name a column `name` has after `changes` (in order), or `None` when one of them
/// drops it and dropped columns are dropped.
fn final_name(name: &str, changes: &[&ColumnChange], dropped: DroppedColumns) -> Option<String> {
    let mut name = name.to_owned();
    for c in changes {
        match c.kind {
            ChangeKind::Rename if c.from.as_deref() == Some(name.as_str()) => {
                name.clone_from(&c.column);
            }
            ChangeKind::Drop if c.column == name && dropped == DroppedColumns::Drop => {
                return None;
            }
            _ => {}
        }
    }
    Some(name)
}

/// The row schema of `schema` after `changes`, and for each of its fields the index of the
/// old field it takes its value from.
fn reshape(schema: &Schema, changes: &[&ColumnChange], dropped: DroppedColumns) -> Reshaped {
    let mut fields = Vec::new();
    let mut pick = Vec::new();
    for (k, f) in schema.fields().iter().enumerate() {
        if let Some(name) = final_name(&f.name, changes, dropped) {
            fields.push(Field::new(name, f.data_type.clone()));
            pick.push(k);
        }
    }
    (Arc::new(Schema::new(fields)), pick)
}

#[cfg(test)]
mod tests {
    use faucet_core::DataType;
    use faucet_core::change::schema::ColumnChange;

    use super::*;

    fn change(kind: ChangeKind, column: &str, from: Option<&str>) -> ColumnChange {
        ColumnChange {
            kind,
            column: column.into(),
            from: from.map(Into::into),
            to: None,
            source_type: None,
            data_type: None,
        }
    }

    #[test]
    fn rows_before_a_change_take_the_shape_after_it() {
        let record = Arc::new(Schema::new(vec![
            Field::new("op", DataType::Text),
            Field::new("before", DataType::Json),
            Field::new("after", DataType::Json),
        ]));
        let old = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int),
            Field::new("v", DataType::Int),
            Field::new("x", DataType::Int),
        ]));
        let new = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int),
            Field::new("vv", DataType::Int),
        ]));
        let mut b = PageBuilder::new(record.clone(), 3);
        b.push_row(vec![
            Value::Text("c".into()),
            Value::Null,
            Value::row(old, vec![Value::Int(1), Value::Int(2), Value::Int(3)]),
        ]);
        b.push_row(vec![Value::Text("s".into()), Value::Null, Value::Null]);
        b.push_row(vec![
            Value::Text("c".into()),
            Value::Null,
            Value::row(new, vec![Value::Int(4), Value::Int(5)]),
        ]);
        let page = b.finish(None);
        let layout = ChangeLayout::of(&record).expect("change records");
        let changes = vec![(
            1,
            vec![
                change(ChangeKind::Rename, "vv", Some("v")),
                change(ChangeKind::Drop, "x", None),
            ],
        )];
        let out = translate(&page, &layout, &changes, DroppedColumns::Drop);
        assert_eq!(out.len(), 2);
        let after = |r: usize| match &out.row(r).expect("row").values()[2] {
            Value::Row(row) => (
                row.schema
                    .fields()
                    .iter()
                    .map(|f| f.name.clone())
                    .collect::<Vec<_>>(),
                row.values.to_vec(),
            ),
            _ => panic!("a row"),
        };
        assert_eq!(
            after(0),
            (
                vec!["id".to_owned(), "vv".to_owned()],
                vec![Value::Int(1), Value::Int(2)]
            )
        );
        assert_eq!(after(1).1, vec![Value::Int(4), Value::Int(5)]);
        // `keep`: the dropped column stays in the rows before (the target keeps it).
        let out = translate(&page, &layout, &changes, DroppedColumns::Keep);
        assert_eq!(
            after_names(&out),
            vec!["id".to_owned(), "vv".to_owned(), "x".to_owned()]
        );
    }

    fn after_names(page: &Page) -> Vec<String> {
        match &page.row(0).expect("row").values()[2] {
            Value::Row(row) => row.schema.fields().iter().map(|f| f.name.clone()).collect(),
            _ => Vec::new(),
        }
    }
}
