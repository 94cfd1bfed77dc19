//! `MysqlReplicateSource` (`faucet replicate` from MariaDB) against the private MariaDB with
//! a binlog: a snapshot read while another session writes, then the binlog from the
//! snapshot's point. The records are replayed (`r`, then `c`/`u`/`d`) into a table state
//! that must equal the source as its own SELECT reads it (the `mysql` query source), with no
//! key read twice and no change applied to a row the state did not have (overlap) or lacks
//! (gap). An interrupted copy resumes in a new snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use faucet_connectors::mysql::cdc::MysqlCdcConfig;
use faucet_connectors::mysql::snapshot::MysqlReplicateSource;
use faucet_connectors::mysql::{MysqlQueryConfig, MysqlQuerySource};
use faucet_core::{Bookmark, FaucetError, Page, ReadOptions, Source as _};
use mysql_async::prelude::Queryable as _;
use serde_json::Value as J;

use crate::mysql_cdc::{records, server_id};
use crate::mysql_support::{TestDb, admin};
use crate::support::read_pages;

const BIG: i64 = 3_000;

async fn setup(db: &mut TestDb) {
    db.exec(
        "CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT UNSIGNED, d DECIMAL(12,3));
         CREATE TABLE small (name VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, n INT);
         INSERT INTO big SELECT seq, CONCAT('b', seq), seq * 1000003, seq / 7 FROM seq_1_to_3000;
         INSERT INTO small SELECT CONCAT('Name', seq), seq FROM seq_1_to_40;",
    )
    .await;
}

fn source(db: &TestDb, id: u32) -> MysqlReplicateSource {
    MysqlReplicateSource::new(MysqlCdcConfig::new(
        db.url(),
        server_id(id),
        [db.table("big"), db.table("small")],
    ))
    .expect("config")
}

/// Inserts, updates (some moving a key), deletes on both tables, until stopped.
fn workload(db: &TestDb, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let big = db.table("big");
    let small = db.table("small");
    let statement = move |i: i64| {
        let k = (i * 7919) % BIG + 1;
        match i % 6 {
            0 => format!(
                "INSERT INTO {big} VALUES ({}, 'new{i}', {i}, 1.5) \
                     ON DUPLICATE KEY UPDATE v = 'again{i}'",
                BIG + i
            ),
            1 => format!("UPDATE {big} SET v = 'u{i}', n = n + 1 WHERE id = {k}"),
            2 => format!("DELETE FROM {big} WHERE id = {k}"),
            3 => format!(
                "UPDATE IGNORE {big} SET id = {} WHERE id = {k}",
                BIG * 10 + i
            ),
            4 => format!(
                "INSERT INTO {small} VALUES ('name{}', {i}) ON DUPLICATE KEY UPDATE n = {i}",
                i % 60
            ),
            _ => format!("DELETE FROM {small} WHERE name = 'NAME{}'", i % 45),
        }
    };
    tokio::spawn(async move {
        let exec = |mut c: mysql_async::Conn, sql: String| async move {
            c.query_drop(sql).await.expect("workload statement");
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            c
        };
        faucet_test_support::write_until(stop, admin().await, statement, exec).await
    })
}

/// The primary key of a record's row.
fn key(table: &str, row: &J) -> String {
    if table.ends_with(".big") {
        row["id"].to_string()
    } else {
        // The collation is case-insensitive.
        row["name"].as_str().unwrap_or_default().to_lowercase()
    }
}

type State = BTreeMap<(String, String), J>;

/// Applies records; `strict`: no key read twice, no change to a missing row or insert of a
/// present one.
fn replay(state: &mut State, recs: &[J], strict: bool) {
    for r in recs {
        let table = r["table"].as_str().expect("table").to_owned();
        let op = r["op"].as_str().expect("op");
        match op {
            "r" | "c" => {
                let k = key(&table, &r["after"]);
                let before = state.insert((table.clone(), k.clone()), r["after"].clone());
                assert!(
                    !strict || before.is_none(),
                    "{op} of {table} {k} already present (overlap): {r}"
                );
            }
            "u" => {
                let old = key(&table, &r["before"]);
                let gone = state.remove(&(table.clone(), old.clone()));
                assert!(
                    !strict || gone.is_some(),
                    "update of missing {table} {old}: {r}"
                );
                state.insert(
                    (table.clone(), key(&table, &r["after"])),
                    r["after"].clone(),
                );
            }
            "d" => {
                let old = key(&table, &r["before"]);
                let gone = state.remove(&(table.clone(), old.clone()));
                assert!(
                    !strict || gone.is_some(),
                    "delete of missing {table} {old}: {r}"
                );
            }
            other => panic!("unexpected op {other}: {r}"),
        }
    }
}

/// The source's tables as the `mysql` query source reads them.
async fn source_state(db: &TestDb) -> State {
    let mut state = State::new();
    for t in ["big", "small"] {
        let table = db.table(t);
        let src = MysqlQuerySource::new(MysqlQueryConfig::for_table(db.url(), table.clone()))
            .expect("query config");
        let pages = read_pages(&src, None, 1000).await.expect("select");
        for row in records(&pages) {
            state.insert((table.clone(), key(&table, &row)), row);
        }
    }
    state
}

fn last_bookmark(pages: &[Page]) -> Option<Bookmark> {
    pages.iter().rev().find_map(|p| p.bookmark().cloned())
}

/// Reads the stream from `from` until it ends (the binlog's end as of open).
async fn read_all(src: &MysqlReplicateSource, from: Option<Bookmark>) -> Vec<Page> {
    read_pages(src, from, 250).await.expect("replicate run")
}

#[tokio::test]
async fn snapshot_then_binlog_under_writes_replays_to_the_source() {
    let mut db = TestDb::new("repl_exact").await;
    setup(&mut db).await;
    let src = source(&db, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let writes = workload(&db, stop.clone());
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let first = read_all(&src, None).await;
    // Changes made after the first run's end.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let n = writes.await.expect("workload");
    assert!(n > 20, "the workload ran ({n} statements)");
    let recs = records(&first);
    let reads = recs.iter().filter(|r| r["op"] == "r").count();
    assert!(reads >= 3_000, "the snapshot was copied ({reads} rows)");
    assert!(
        recs.iter()
            .filter(|r| r["op"] == "r")
            .all(|r| r["binlog_file"].is_string() && r["binlog_pos"].is_u64()),
        "r records carry the snapshot point"
    );
    let bookmark = last_bookmark(&first).expect("bookmark");
    assert!(
        bookmark.get("snapshot").is_none() && bookmark.get("replicate").is_none(),
        "after the copy the bookmark is mysql-cdc's: {bookmark}"
    );
    let second = read_all(&src, Some(bookmark)).await;
    let mut state = State::new();
    replay(&mut state, &recs, true);
    replay(&mut state, &records(&second), true);
    assert!(
        records(&second).iter().all(|r| r["op"] != "r"),
        "a resumed change stream copies nothing again"
    );
    let expected = source_state(&db).await;
    assert_eq!(state.len(), expected.len());
    assert_eq!(state, expected, "replay == SELECT, value by value");
    db.drop_db().await;
}

#[tokio::test]
async fn an_interrupted_copy_resumes_in_a_new_snapshot_twice() {
    let mut db = TestDb::new("repl_resume").await;
    setup(&mut db).await;
    let src = source(&db, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let writes = workload(&db, stop.clone());
    let mut state = State::new();
    let mut from: Option<Bookmark> = None;
    let mut all = Vec::new();
    let mut in_flight: Vec<(String, String)> = Vec::new();
    // Two interruptions: stop after a few pages, deliver the page after the stored
    // bookmark too (a crash between a page's write and its bookmark), resume.
    for (interruption, pages_to_store) in [4usize, 3].into_iter().enumerate() {
        let options = ReadOptions {
            batch_size: 250,
            ..ReadOptions::default()
        };
        let mut stream = src.open(from.clone(), options).await.expect("open");
        let mut stored = None;
        let mut n = 0;
        while let Some(page) = stream.next_page().await.expect("page") {
            if n == pages_to_store {
                // In flight: written, its bookmark lost.
                let recs = records(std::slice::from_ref(&page));
                for r in &recs {
                    let t = r["table"].as_str().unwrap_or_default();
                    in_flight.push((t.to_owned(), key(t, &r["after"])));
                }
                all.extend(recs);
                break;
            }
            all.extend(records(std::slice::from_ref(&page)));
            if page.bookmark().is_some() {
                stored = page.bookmark().cloned();
            }
            n += 1;
        }
        drop(stream);
        let b = stored.expect("a stored bookmark");
        assert!(
            b.get("snapshot").is_some(),
            "interruption {interruption} is mid-snapshot: {b}"
        );
        from = Some(b);
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    let rest = read_all(&src, from).await;
    all.extend(records(&rest));
    let b = last_bookmark(&rest).expect("bookmark");
    stop.store(true, Ordering::SeqCst);
    writes.await.expect("workload");
    let tail = read_all(&src, Some(b)).await;
    all.extend(records(&tail));
    replay(&mut state, &all, false);
    let expected = source_state(&db).await;
    assert_eq!(state, expected, "an upsert replay equals the source");
    // Every key read once, except the two in-flight pages' keys (at most a page each).
    let mut reads: BTreeMap<String, usize> = BTreeMap::new();
    for r in all.iter().filter(|r| r["op"] == "r") {
        let t = r["table"].as_str().unwrap_or_default();
        *reads
            .entry(format!("{t} {}", key(t, &r["after"])))
            .or_default() += 1;
    }
    // No change the copy already holds is delivered again (outside the in-flight pages): a
    // change at binlog position L of a key whose copy was read as of a later point.
    let point = |r: &J| {
        let f = r["binlog_file"].as_str().unwrap_or_default().to_owned();
        (f, r["binlog_pos"].as_u64().unwrap_or_default())
    };
    let mut read_at: BTreeMap<(String, String), (String, u64)> = BTreeMap::new();
    for r in all.iter().filter(|r| r["op"] == "r") {
        let t = r["table"].as_str().unwrap_or_default().to_owned();
        let k = key(&t, &r["after"]);
        read_at.insert((t, k), point(r));
    }
    let mut doubled = Vec::new();
    for r in all.iter().filter(|r| r["op"] != "r") {
        let t = r["table"].as_str().unwrap_or_default().to_owned();
        let row = if r["op"] == "d" {
            &r["before"]
        } else {
            &r["after"]
        };
        let k = (t.clone(), key(&t, row));
        if let Some(p) = read_at.get(&k)
            && *p > point(r)
            && !in_flight.contains(&k)
        {
            doubled.push(r.clone());
        }
    }
    assert!(
        doubled.is_empty(),
        "{} changes delivered although the copy holds them: {:?}",
        doubled.len(),
        doubled.first()
    );
    let twice = reads.values().filter(|&&n| n > 1).count();
    assert!(twice <= 2 * 250, "{twice} keys read twice");
    assert!(reads.values().all(|&n| n <= 2), "no key read three times");
    db.drop_db().await;
}

#[tokio::test]
async fn a_table_without_a_primary_key_is_refused_before_any_data_moves() {
    let mut db = TestDb::new("repl_nopk").await;
    db.exec("CREATE TABLE big (id INT); CREATE TABLE small (name VARCHAR(5) PRIMARY KEY)")
        .await;
    let src = source(&db, 3);
    let e = match src.open(None, ReadOptions::default()).await {
        Ok(_) => panic!("opened a replicate of a table without a primary key"),
        Err(e) => e,
    };
    assert!(matches!(e, FaucetError::Config { .. }), "{e}");
    assert!(e.to_string().contains("no primary key"), "{e}");
    db.drop_db().await;
}

/// The copy's pages count rows of the tables' summed `TABLE_ROWS` estimates, and of each
/// table's, naming it.
#[tokio::test]
async fn the_copy_counts_rows_of_the_tables_summed_estimates() {
    let mut db = TestDb::new("repl_extent").await;
    setup(&mut db).await;
    db.exec("ANALYZE TABLE big, small").await;
    let src = source(&db, 0);
    let pages = read_pages(&src, None, 500).await.expect("replicate");
    let (tables, total) = crate::support::copy_shares(&pages);
    // InnoDB samples: near the 3,040 rows.
    assert!((1_500..=6_000).contains(&total), "estimate {total}");
    let copied: Vec<_> = tables
        .iter()
        .map(|(n, rows, _)| (n.as_str(), *rows))
        .collect();
    assert_eq!(
        copied,
        [
            (db.table("big").as_str(), 3_000),
            (db.table("small").as_str(), 40)
        ],
        "each table in its place, all its rows"
    );
    db.drop_db().await;
}
