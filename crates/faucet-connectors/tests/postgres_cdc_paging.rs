//! postgres-cdc paging: a 200,000-row transaction comes in pages of at most `batch_size`,
//! and a stream reopened from the bookmark of a page in the middle of that transaction
//! delivers exactly the rest — nothing lost, nothing repeated.

use std::time::{Duration, Instant};

use faucet_core::serde_json::Value as Json;
use faucet_core::{Bookmark, Page, Source};

use crate::postgres_cdc::{Fixture, prime, read_options, records};

const ROWS: i64 = 200_000;
const BATCH: usize = 10_000;

/// Reads to the end without acknowledging anything (so every bookmark stays resumable).
async fn read_unacknowledged(source: &dyn Source, from: Option<Bookmark>) -> Vec<Page> {
    let mut stream = source.open(from, read_options(BATCH)).await.expect("open");
    let mut pages = Vec::new();
    while let Some(page) = tokio::time::timeout(Duration::from_secs(120), stream.next_page())
        .await
        .expect("the bounded stream ends by itself")
        .expect("next_page")
    {
        pages.push(page);
    }
    pages
}

#[tokio::test]
async fn a_200k_row_transaction_is_paged_and_resumes_from_its_middle() {
    let fx = Fixture::new("big").await;
    fx.sql(&format!(
        "CREATE TABLE {{s}}.big (id int PRIMARY KEY, v int NOT NULL);
         INSERT INTO {{s}}.big SELECT g, g FROM generate_series(1, {ROWS}) g;"
    ))
    .await;
    let source = fx.source(&["big"]);
    prime(&fx, &source).await;
    // One transaction of 200,000 updates.
    fx.sql("UPDATE {s}.big SET v = v + 1").await;

    let started = Instant::now();
    let pages = read_unacknowledged(&source, None).await;
    let first_read = started.elapsed();
    let sizes: Vec<usize> = pages.iter().map(Page::len).collect();
    assert!(sizes.iter().all(|&n| n <= BATCH), "{sizes:?}");
    let full: Vec<&Page> = pages.iter().filter(|p| !p.is_empty()).collect();
    assert_eq!(
        full.len(),
        20,
        "200,000 changes in pages of 10,000: {sizes:?}"
    );
    assert!(full.iter().all(|p| p.len() == BATCH), "{sizes:?}");

    let all = records(&pages);
    assert_eq!(all.len() as i64, ROWS);
    let mut ids: Vec<i64> = all
        .iter()
        .map(|r| {
            assert_eq!(r["op"], "u");
            let id = r["after"]["id"].as_i64().expect("id");
            assert_eq!(r["after"]["v"].as_i64(), Some(id + 1), "{r}");
            id
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as i64, ROWS, "every row once");
    let lsn = &all[0]["lsn"];
    assert!(all.iter().all(|r| &r["lsn"] == lsn), "one transaction");

    // Pages 1..19 end inside the transaction: their bookmarks say how far.
    for (i, page) in full.iter().enumerate().take(19) {
        let b = page.bookmark().expect("bookmark");
        assert_eq!(
            b["in_txn"]["skip"].as_u64(),
            Some(((i + 1) * BATCH) as u64),
            "{b}"
        );
    }

    // Resume from the bookmark after page 7 (70,000 delivered): exactly the other 130,000,
    // in the same order.
    fx.wait_slot_released().await;
    let from = full[6].bookmark().expect("bookmark").clone();
    let rest_pages = read_unacknowledged(&source, Some(from)).await;
    let rest = records(&rest_pages);
    assert_eq!(rest.len(), all.len() - 7 * BATCH);
    assert!(
        rest == all[7 * BATCH..],
        "the rest, in order, without loss or repeat"
    );
    assert!(rest_pages.iter().all(|p| p.len() <= BATCH));

    // And from the last page's bookmark (the transaction's end): nothing more.
    fx.wait_slot_released().await;
    let end = pages
        .last()
        .and_then(Page::bookmark)
        .expect("bookmark")
        .clone();
    let nothing: Vec<Json> = records(&read_unacknowledged(&source, Some(end)).await);
    assert!(
        nothing.is_empty(),
        "{} records after the end",
        nothing.len()
    );
    eprintln!("postgres-cdc: 200,000-row transaction read in {first_read:?}");
}
