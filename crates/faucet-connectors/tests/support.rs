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
