//! Helpers every connector test module shares: reading a source to the end, and records as
//! their JSON lines.

use std::sync::Arc;

use faucet_core::change::record_schema;
use faucet_core::{
    Bookmark, DataType, FaucetError, Field, Page, PageBuilder, ReadOptions, Schema, Source, Value,
};
use serde_json::Value as Json;

/// Reads `source` from `from` to the end in pages of `batch_size`; asserts no page is larger.
pub(crate) async fn read_pages(
    source: &dyn Source,
    from: Option<Bookmark>,
    batch_size: usize,
) -> Result<Vec<Page>, FaucetError> {
    let options = ReadOptions {
        batch_size,
        ..ReadOptions::default()
    };
    let mut stream = source.open(from, options).await?;
    let mut pages = Vec::new();
    while let Some(page) = stream.next_page().await? {
        assert!(page.len() <= batch_size, "a page over batch_size");
        pages.push(page);
    }
    Ok(pages)
}

/// The copy of a `faucet replicate` read, from its pages' extents: each page of snapshot
/// records (`op` `r`) carries an estimated extent in rows whose `done` counts the rows
/// copied so far, and names its table ([`faucet_core::ExtentPart`]) with the same place
/// among the same number of tables every time and that table's rows copied so far. Returns
/// each table in its place, `(name, rows copied, its estimate)`, and the copy's total.
#[allow(dead_code)] // only the replicate tests read copies
pub(crate) fn copy_shares(pages: &[Page]) -> (Vec<(String, u64, u64)>, u64) {
    let mut tables: Vec<Option<(String, u64, u64)>> = Vec::new();
    let mut copied = 0;
    let mut total = None;
    for page in pages {
        let snapshot_rows = page
            .rows()
            .filter(|r| r.get("op") == Some(&Value::Text("r".into())))
            .count() as u64;
        if snapshot_rows == 0 {
            continue;
        }
        copied += snapshot_rows;
        let e = page.extent().expect("a page of the copy has an extent");
        assert_eq!(e.unit, faucet_core::ExtentUnit::Rows);
        assert!(e.estimate, "row estimates");
        assert_eq!(e.done, copied, "rows copied so far");
        assert_eq!(*total.get_or_insert(e.total), e.total, "one total");
        let part = e.part.as_ref().expect("a page of the copy names its table");
        tables.resize(part.count as usize, None);
        let slot = &mut tables[part.number as usize - 1];
        let (name, done, estimate) = slot.get_or_insert((part.name.clone(), 0, part.total));
        *done += snapshot_rows;
        assert_eq!(
            (&part.name, part.done, part.total),
            (&*name, *done, *estimate),
            "one table in one place, its rows copied so far of one estimate"
        );
    }
    let tables = tables
        .into_iter()
        .map(|t| t.expect("every table copied"))
        .collect();
    (tables, total.expect("a copy"))
}

/// Each record as its JSON line (the JSON form of docs/values.md, fields in schema order).
pub(crate) fn json_lines(pages: &[Page]) -> Vec<String> {
    let mut out = Vec::new();
    for page in pages {
        for row in page.rows() {
            let mut line = Vec::new();
            row.write_json(&mut line);
            out.push(String::from_utf8(line).expect("utf8 json"));
        }
    }
    out
}

/// `(op, table, before, after)` of one change record of `(id int, v text)` rows.
pub(crate) type ChangeRow<'a> = (
    &'a str,
    &'a str,
    Option<(i64, &'a str)>,
    Option<(i64, &'a str)>,
);

/// A page of change records of `(id, v)` rows shaped like postgres-cdc's (`lsn` `0/<i>`,
/// one `commit_ts`), `before` / `after` as given, ending at `bookmark`.
#[allow(dead_code)] // not every feature set has a test that writes change records
pub(crate) fn change_page(rows: &[ChangeRow<'_>], bookmark: Json) -> Page {
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
    b.finish(Some(bookmark))
}

/// [`change_page`] of `(op, table, id, v)`: a `d` has the row as `before`, any other op as
/// `after`.
#[allow(dead_code)] // not every feature set has a bus sink test
pub(crate) fn keyed_change_page(rows: &[(&str, &str, i64, &str)], bookmark: Json) -> Page {
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
