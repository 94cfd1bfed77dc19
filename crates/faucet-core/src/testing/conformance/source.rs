//! The source checks: pages bounded by `batch_size`, bookmarks that resume exactly.

use crate::page::{Bookmark, Page};
use crate::source::Source;

use super::{ConformanceError, fail, io, rows_of};

/// Reads a whole source in pages of `batch_size`, returning the pages.
async fn read_all(
    check: &'static str,
    source: &dyn Source,
    from: Option<Bookmark>,
    batch_size: usize,
) -> Result<Vec<Page>, ConformanceError> {
    io(
        check,
        crate::testing::read_pages(source, from, batch_size).await,
    )
}

/// No page holds more than `batch_size` records, and the source yields `expected` records.
///
/// # Errors
/// A page over the limit, or a different record count.
pub async fn source_pages_are_bounded(
    source: &dyn Source,
    batch_size: usize,
    expected: usize,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "source_pages_are_bounded";
    let pages = read_all(CHECK, source, None, batch_size).await?;
    if let Some((i, p)) = pages.iter().enumerate().find(|(_, p)| p.len() > batch_size) {
        return fail(
            CHECK,
            format!(
                "page {i} has {} records; batch_size is {batch_size}",
                p.len()
            ),
        );
    }
    let total: usize = pages.iter().map(Page::len).sum();
    if total != expected {
        return fail(CHECK, format!("{total} records read, {expected} expected"));
    }
    Ok(())
}

/// Reading from the start gives records R in pages; reopening from page i's bookmark gives
/// exactly the records after page i, for every i. Every page must carry a bookmark.
///
/// # Errors
/// A page without a bookmark, or a resume that loses or repeats records.
pub async fn source_bookmarks_round_trip(
    source: &dyn Source,
    batch_size: usize,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "source_bookmarks_round_trip";
    let pages = read_all(CHECK, source, None, batch_size).await?;
    let all = rows_of(&pages);
    let mut seen = 0;
    for (i, page) in pages.iter().enumerate() {
        seen += page.len();
        let Some(bookmark) = page.bookmark() else {
            return fail(CHECK, format!("page {i} has no bookmark"));
        };
        let rest = rows_of(&read_all(CHECK, source, Some(bookmark.clone()), batch_size).await?);
        if rest != all[seen..] {
            return fail(
                CHECK,
                format!(
                    "resuming after page {i} (bookmark {bookmark}) gave {} records, {} expected \
                     (first: {:?}, expected first: {:?})",
                    rest.len(),
                    all.len() - seen,
                    rest.first(),
                    all.get(seen)
                ),
            );
        }
    }
    Ok(())
}
