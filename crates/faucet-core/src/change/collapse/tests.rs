//! Tests of [`super`]: pages of change records collapsed by key.

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

/// The errors [`collapse`] and [`check_records`] give `page`, as text: both must refuse it.
fn both_refuse(page: &Page) -> [String; 2] {
    let collapsed = run(page, "id", &mut None).map(|_| ());
    [
        collapsed.expect_err("collapse refuses").to_string(),
        check_records(page, "test", "t")
            .expect_err("check refuses")
            .to_string(),
    ]
}

/// The schema of plain rows (not change records) of `fields`.
fn plain_schema<const N: usize>(fields: [(&str, DataType); N]) -> Arc<Schema> {
    Arc::new(Schema::new(
        fields.into_iter().map(|(n, t)| Field::new(n, t)).collect(),
    ))
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

/// A key-changing update of `from` to `to` that leaves `name` out (unchanged TOAST).
fn moved(from: i64, to: i64) -> Vec<Value> {
    let partial = row(&[("id", Value::Int(to)), ("ver", Value::Int(3))]);
    change("u", key(from), partial, &["name"])
}

#[test]
fn a_key_change_carries_unchanged_columns_or_moves_the_stored_row() {
    // The old key's value is earlier in the page: it is carried to the new key.
    let page = changes([
        change("c", Value::Null, device(1, "kept", 1), &[]),
        moved(1, 5),
    ]);
    let c = run(&page, "id", &mut None).expect("collapse");
    assert_eq!(
        summary(&c),
        vec![('d', 1, None), ('u', 5, Some("kept".into()))]
    );
    assert!(moves(&c).is_empty());
    // Only the target has it: the stored row of 1 moves to 5, `name` left out.
    let page = changes([change("u", key(2), device(2, "b", 2), &[]), moved(1, 5)]);
    let c = run(&page, "id", &mut None).expect("collapse");
    assert_eq!(
        summary(&c),
        vec![('u', 2, Some("b".into())), ('d', 1, None), ('u', 5, None)]
    );
    assert_eq!(moves(&c), vec![(1, 5, vec!["name".to_owned()], false)]);
    // The same key (no move): the stored value is kept by leaving the column out.
    let page = changes([moved(5, 5)]);
    let c = run(&page, "id", &mut None).expect("collapse");
    assert_eq!(summary(&c), vec![('u', 5, None)]);
    assert!(moves(&c).is_empty());
}

#[test]
fn moves_chain_keep_source_order_and_end_when_the_value_arrives() {
    // 1 → 5 → 9: two renames, in source order; a later same-key update of 9 that still
    // leaves `name` out keeps them.
    let page = changes([moved(1, 5), moved(5, 9), moved(9, 9)]);
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
    let page = changes([moved(1, 5), moved(9, 12), moved(5, 9)]);
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
    let page = changes([moved(5, 8), moved(1, 5)]);
    let c = run(&page, "id", &mut None).expect("collapse");
    assert_eq!(moves(&c), vec![(5, 8, name(), true), (1, 5, name(), false)]);
    // The old key inserted again after the move: an existing row of the new key is kept
    // (on a replay the row of the old key is the newer one).
    let page = changes([
        moved(1, 5),
        change("c", Value::Null, device(1, "new", 1), &[]),
    ]);
    let c = run(&page, "id", &mut None).expect("collapse");
    assert_eq!(moves(&c), vec![(1, 5, name(), true)]);
    // The moved row's value arrives later in the page: no move is left.
    let page = changes([moved(1, 5), change("u", key(5), device(5, "set", 4), &[])]);
    let c = run(&page, "id", &mut None).expect("collapse");
    assert!(moves(&c).is_empty());
    assert_eq!(
        summary(&c),
        vec![('d', 1, None), ('u', 5, Some("set".into()))]
    );
    // A move whose new key is deleted later in the page: no move either.
    let page = changes([moved(1, 5), change("d", key(5), Value::Null, &[])]);
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
    let mut b = PageBuilder::new(
        plain_schema([("k", DataType::Text), ("v", DataType::Int)]),
        4,
    );
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
    for text in both_refuse(&page) {
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
    for text in both_refuse(&page) {
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
    let fields = [("id", DataType::Int), ("phone", DataType::Text)];
    let mut b = PageBuilder::new(plain_schema(fields), 8);
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
