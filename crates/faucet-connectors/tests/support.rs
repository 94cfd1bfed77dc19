//! Helpers every connector test module shares: reading a source to the end, and records as
//! their JSON lines.

use faucet_core::{Bookmark, FaucetError, Page, ReadOptions, Source};

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
