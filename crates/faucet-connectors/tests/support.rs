//! Helpers every connector test module shares: reading a source to the end, and records as
//! their JSON lines.

use faucet_core::{Bookmark, FaucetError, Page, Source};

/// Reads `source` from `from` to the end in pages of `batch_size`
/// ([`faucet_core::testing::read_pages`]); asserts no page is larger.
pub(crate) async fn read_pages(
    source: &dyn Source,
    from: Option<Bookmark>,
    batch_size: usize,
) -> Result<Vec<Page>, FaucetError> {
    let pages = faucet_core::testing::read_pages(source, from, batch_size).await?;
    assert!(
        pages.iter().all(|p| p.len() <= batch_size),
        "a page over batch_size"
    );
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
            .filter(|r| r.get("op") == Some(&faucet_core::Value::Text("r".into())))
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
