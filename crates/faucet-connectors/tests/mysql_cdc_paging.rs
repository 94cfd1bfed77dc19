//! `mysql-cdc`: a transaction far larger than a page is split into pages of at most
//! `batch_size` records, and a run stopped in its middle resumes from the page's bookmark
//! without losing or repeating a change.

use std::collections::BTreeSet;

use faucet_core::{FaucetError, ReadOptions, Source as _};

use crate::mysql_cdc::{last_bookmark, records, source};
use crate::mysql_support::TestDb;
use crate::support::read_pages;

const ROWS: u64 = 200_000;
const BATCH: usize = 5_000;

#[tokio::test]
async fn a_200k_row_update_is_paged_and_resumes_from_its_middle() {
    let mut db = TestDb::new("cdc_paging").await;
    db.exec(&format!(
        "CREATE TABLE big (id INT PRIMARY KEY, v INT NOT NULL);
         INSERT INTO big SELECT seq, 0 FROM seq_1_to_{ROWS}"
    ))
    .await;
    let src = source(&db, &["big"], 2);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec("UPDATE big SET v = v + 1").await;

    // Stop after 7 pages: the bookmark is inside the transaction.
    let mut stream = src
        .open(
            Some(start),
            ReadOptions {
                batch_size: BATCH,
                ..ReadOptions::default()
            },
        )
        .await
        .expect("open");
    let mut delivered = BTreeSet::new();
    let mut mid = None;
    for _ in 0..7 {
        let page = stream.next_page().await.expect("page").expect("a page");
        assert!(
            page.len() <= BATCH && !page.is_empty(),
            "{} records",
            page.len()
        );
        for r in records(std::slice::from_ref(&page)) {
            assert_eq!(r["op"], "u");
            assert_eq!(r["after"]["v"], 1);
            assert!(delivered.insert(r["after"]["id"].as_u64().expect("id")));
        }
        mid = page.bookmark().cloned();
    }
    drop(stream);
    let mid = mid.expect("bookmark");
    assert_eq!(mid["in_txn"]["skip"], delivered.len() as u64, "{mid}");

    // Resume: exactly the rest, once each.
    let rest = read_pages(&src, Some(mid), BATCH).await.expect("resume");
    let mut again = 0;
    for r in records(&rest) {
        if !delivered.insert(r["after"]["id"].as_u64().expect("id")) {
            again += 1;
        }
    }
    assert_eq!(again, 0, "changes repeated");
    assert_eq!(delivered.len() as u64, ROWS, "changes lost");
    assert_eq!(delivered.first(), Some(&1));
    assert_eq!(delivered.last(), Some(&ROWS));
    let end = last_bookmark(&rest);
    assert!(end.get("in_txn").is_none(), "{end}");
    db.drop_db().await;
}

/// A bookmark inside a transaction whose `in_txn.skip` says more row changes were delivered
/// than the transaction has (an edited state, or a `tables` list changed mid-transaction) is
/// a bookmark error naming the field, not a resume that silently drops the transaction: the
/// stream finds out at the transaction's commit, before any later change is delivered.
#[tokio::test]
async fn a_skip_count_past_the_transactions_end_is_a_bookmark_error() {
    let mut db = TestDb::new("cdc_bad_skip").await;
    db.exec("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
        .await;
    let src = source(&db, &["t"], 3);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec("INSERT INTO t SELECT seq, 0 FROM seq_1_to_30")
        .await;
    db.exec("INSERT INTO t VALUES (100, 1)").await;
    let mut stream = src
        .open(
            Some(start),
            ReadOptions {
                batch_size: 10,
                ..ReadOptions::default()
            },
        )
        .await
        .expect("open");
    let page = stream.next_page().await.expect("page").expect("a page");
    assert_eq!(page.len(), 10);
    let mut mid = page.bookmark().cloned().expect("a bookmark");
    drop(stream);
    assert_eq!(mid["in_txn"]["skip"], 10, "{mid}");

    // The same bookmark with a sane skip resumes with the rest: 20 + 1 changes.
    let rest = read_pages(&src, Some(mid.clone()), 10)
        .await
        .expect("resume");
    assert_eq!(records(&rest).len(), 21);

    mid["in_txn"]["skip"] = 1000.into();
    let e = read_pages(&src, Some(mid), 10)
        .await
        .expect_err("a skip count past the transaction's 30 changes");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("in_txn.skip") && msg.contains("1000") && msg.contains("30"),
        "{msg}"
    );
    db.drop_db().await;
}
