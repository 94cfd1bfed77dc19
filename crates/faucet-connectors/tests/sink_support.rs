//! Pages for the sink tests of every database: change records shaped like the `postgres-cdc`
//! source's (docs/change-records.md), plain pages, and writing them.

use std::sync::Arc;

use faucet_core::{DataType, Field, Page, PageBuilder, Schema, SinkWriter, Value};
use serde_json::Value as Json;

/// The fields of a change record, as the postgres-cdc source emits them (the contract of
/// `faucet_core::change` with `lsn` and `unchanged_toast`).
pub(crate) fn change_schema() -> Arc<Schema> {
    faucet_core::change::record_schema(
        vec![Field::new("lsn", DataType::Text)],
        vec![faucet_core::change::unchanged_field()],
    )
}

/// A nested row of `(name, value)` pairs.
pub(crate) fn row(cols: &[(&str, Value)]) -> Value {
    let schema = Arc::new(Schema::new(
        cols.iter()
            .map(|(n, v)| Field::new(*n, v.data_type()))
            .collect(),
    ));
    Value::row(schema, cols.iter().map(|(_, v)| v.clone()).collect())
}

/// One change record.
pub(crate) fn change(
    op: &str,
    table: &str,
    before: Value,
    after: Value,
    unchanged: &[&str],
) -> Vec<Value> {
    vec![
        Value::Text(op.into()),
        Value::Text(table.into()),
        Value::Text("0/16B3748".into()),
        Value::TimestampTz("2026-11-30T06:00:00Z".into()),
        before,
        after,
        Value::Array(unchanged.iter().map(|s| Value::Text((*s).into())).collect()),
    ]
}

/// A page of change records.
pub(crate) fn change_page(records: Vec<Vec<Value>>, bookmark: Json) -> Page {
    let mut b = PageBuilder::new(change_schema(), records.len());
    for r in records {
        b.push_row(r);
    }
    b.finish(Some(bookmark))
}

/// A page of plain rows with `fields` (name, type).
pub(crate) fn plain_page(
    fields: &[(&str, DataType)],
    rows: Vec<Vec<Value>>,
    bookmark: Json,
) -> Page {
    let schema = Arc::new(Schema::new(
        fields
            .iter()
            .map(|(n, t)| Field::new(*n, t.clone()))
            .collect(),
    ));
    let mut b = PageBuilder::new(schema, rows.len());
    for r in rows {
        b.push_row(r);
    }
    b.finish(Some(bookmark))
}

/// Case 14's page: plain rows `(id, phone, seq)` with keys 1 and 2 several times, the last
/// versions `(1, "555", 5)` and `(2, "444", 4)`; bookmark `1`.
pub(crate) fn several_versions_page() -> Page {
    let fields = [
        ("id", DataType::Int),
        ("phone", DataType::Text),
        ("seq", DataType::Int),
    ];
    let rows = [
        (1, "111", 1),
        (2, "222", 2),
        (1, "333", 3),
        (2, "444", 4),
        (1, "555", 5),
    ];
    plain_page(
        &fields,
        rows.iter()
            .map(|(id, p, s)| vec![Value::Int(*id), Value::Text((*p).into()), Value::Int(*s)])
            .collect(),
        serde_json::json!(1),
    )
}

/// Writes and flushes each page.
pub(crate) async fn write_all(writer: &mut (dyn SinkWriter + '_), pages: &[Page]) {
    for p in pages {
        writer.write(p).await.expect("write");
        writer.flush().await.expect("flush");
    }
}
