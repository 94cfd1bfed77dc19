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

/// A page of `(id bigint, v text)` rows, `{id, "v<id>"}` for each of `ids`, with
/// `bookmark`: the rows of the commit-token and lost-session tests.
pub(crate) fn id_v_page(ids: &[i64], bookmark: Json) -> Page {
    plain_page(
        &[("id", DataType::Int), ("v", DataType::Text)],
        ids.iter()
            .map(|i| vec![Value::Int(*i), Value::Text(format!("v{i}").into())])
            .collect(),
        bookmark,
    )
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

/// The table of the TOAST key-change tests, as its change records name it.
pub(crate) const ARTICLE: &str = "public.article";

/// The key `{id}` of an `article (id, title, body)` row (and of any table keyed by `id`).
pub(crate) fn article_key(id: i64) -> Value {
    row(&[("id", Value::Int(id))])
}

/// A row `{id, <text column>, <int column>}`: the shape of the small keyed tables of the
/// sink cases (`contact {id, phone, seq}`, `device {id, name, ver}`); their key is
/// [`article_key`]'s `{id}` too.
pub(crate) fn id_row(id: i64, text: (&str, &str), int: (&str, i64)) -> Value {
    row(&[
        ("id", Value::Int(id)),
        (text.0, Value::Text(text.1.into())),
        (int.0, Value::Int(int.1)),
    ])
}

/// An `article` row without its `body` (`id`, `title`).
pub(crate) fn article_partial(id: i64, title: &str) -> Value {
    row(&[("id", Value::Int(id)), ("title", Value::Text(title.into()))])
}

/// The update of `article` `from` to key `to` and `title`, its `body` unchanged (TOAST).
pub(crate) fn moved(from: i64, to: i64, title: &str) -> Vec<Value> {
    change(
        "u",
        ARTICLE,
        article_key(from),
        article_partial(to, title),
        &["body"],
    )
}

/// The key-change pages of the TOAST move tests, on `article` rows `(1, one, a…)`,
/// `(2, two, b…)`, `(3, three, c…)` (10,000 characters of body each), with the bookmarks
/// `bookmarks` in order:
///
/// 1. the moves 1 → 5; 2 → 6 → 7, the title edited on the way; 3 → 2 (the key the page
///    freed): then 2 `three` c, 5 `one` a, 7 `two-edited` b;
/// 2. 5 → 50, 7 → 70 (frees 7), 50 → 7: the renames in source order: then 2 `three` c,
///    7 `one` a, 70 `two-edited` b;
/// 3. a move of 7 and one of 9, a row the target never got: refused
///    ([`expect_old_row_missing`]).
pub(crate) fn toast_move_pages(bookmarks: [Json; 3]) -> [Page; 3] {
    let [b1, b2, b3] = bookmarks;
    [
        change_page(
            vec![
                moved(1, 5, "one"),
                moved(2, 6, "two"),
                moved(6, 7, "two-edited"),
                moved(3, 2, "three"),
            ],
            b1,
        ),
        change_page(
            vec![
                moved(5, 50, "one"),
                moved(7, 70, "two-edited"),
                moved(50, 7, "one"),
            ],
            b2,
        ),
        change_page(vec![moved(7, 7, "one-edited"), moved(9, 10, "ten")], b3),
    ]
}

/// Panics unless `err` (the write of the third of [`toast_move_pages`]) is a data error
/// naming the page row, both keys, the column and the fix.
pub(crate) fn expect_old_row_missing(err: &faucet_core::FaucetError) {
    let text = err.to_string();
    for part in [
        "page row 2",
        "key (9)",
        "key (10)",
        "body",
        "REPLICA IDENTITY FULL",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    assert!(
        matches!(err, faucet_core::FaucetError::Data { .. }),
        "{err:?}"
    );
}

/// Writes and flushes each page.
pub(crate) async fn write_all(writer: &mut (dyn SinkWriter + '_), pages: &[Page]) {
    for p in pages {
        writer.write(p).await.expect("write");
        writer.flush().await.expect("flush");
    }
}
