//! Pages of change records for the sink tests: `(id int, v text)` rows of any table, shaped
//! like postgres-cdc's records (the record layout of [`crate::change`]).

use std::sync::Arc;

use serde_json::Value as Json;

use crate::change::record_schema;
use crate::keys::TableKeys;
use crate::page::{Page, PageBuilder};
use crate::value::{DataType, Field, Schema, Value};

/// `(op, table, before, after)` of one change record of `(id int, v text)` rows; `None` is a
/// missing (null) row image.
pub type ChangeRow<'a> = (
    &'a str,
    &'a str,
    Option<(i64, &'a str)>,
    Option<(i64, &'a str)>,
);

/// A page of change records of `(id, v)` rows shaped like postgres-cdc's (`lsn` `0/<i>` for
/// the `i`-th record, one `commit_ts`), `before` / `after` as given, ending at `bookmark`
/// (`None`: a page without one).
pub fn change_page(rows: &[ChangeRow<'_>], bookmark: impl Into<Option<Json>>) -> Page {
    let schema = record_schema(vec![Field::new("lsn", DataType::Text)], vec![]);
    let row_schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int),
        Field::new("v", DataType::Text),
    ]));
    let row = |r: Option<(i64, &str)>| match r {
        Some((id, v)) => Value::row(
            row_schema.clone(),
            vec![Value::Int(id), Value::Text(v.into())],
        ),
        None => Value::Null,
    };
    let mut b = PageBuilder::new(schema, rows.len());
    for (i, (op, table, before, after)) in rows.iter().enumerate() {
        b.push_row([
            Value::Text((*op).into()),
            Value::Text((*table).into()),
            Value::Text(format!("0/{i}").into()),
            Value::TimestampTz("2026-12-01T00:00:00Z".into()),
            row(*before),
            row(*after),
        ]);
    }
    b.finish(bookmark.into())
}

/// [`change_page`] of `(op, table, id, v)`: a `d` has the row as `before`, any other op as
/// `after`.
pub fn keyed_change_page(rows: &[(&str, &str, i64, &str)], bookmark: Json) -> Page {
    let rows: Vec<ChangeRow<'_>> = rows
        .iter()
        .map(|&(op, table, id, v)| {
            if op == "d" {
                (op, table, Some((id, v)), None)
            } else {
                (op, table, None, Some((id, v)))
            }
        })
        .collect();
    change_page(&rows, bookmark)
}

/// The source keys of the routed-table tests: `public.a` keyed by its primary key `id`,
/// `public.b` by its composite primary key `(id, v)` (no unique index).
pub fn keys_of_a_and_b() -> Vec<TableKeys> {
    vec![
        TableKeys {
            table: "public.a".into(),
            primary_key: Some(vec!["id".into()]),
            unique_sets: vec![vec!["id".into()]],
        },
        TableKeys {
            table: "public.b".into(),
            primary_key: Some(vec!["id".into(), "v".into()]),
            unique_sets: vec![],
        },
    ]
}
