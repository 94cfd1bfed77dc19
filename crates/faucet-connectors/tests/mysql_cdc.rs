//! The `mysql-cdc` source against the private MariaDB with a binlog (scripts/services.sh):
//! exact change records of several tables, transactions, resuming from bookmarks, a page
//! boundary inside a transaction, rotation, schema changes, TRUNCATE.

use faucet_connectors::mysql::cdc::{MysqlCdcConfig, MysqlCdcSource};
use faucet_core::{Bookmark, Page, Source as _};
use serde_json::Value as J;

use crate::mysql_support::TestDb;
use crate::support::{json_lines, read_pages};

/// A replica id for a test: distinct per test and per process, never the server's own (1).
pub(crate) fn server_id(n: u32) -> u32 {
    10_000 + (std::process::id() % 50_000) * 16 + n
}

pub(crate) fn source(db: &TestDb, tables: &[&str], id: u32) -> MysqlCdcSource {
    MysqlCdcSource::new(MysqlCdcConfig::new(
        db.url(),
        server_id(id),
        tables.iter().map(|t| db.table(t)),
    ))
    .expect("valid config")
}

/// The records as JSON values.
pub(crate) fn records(pages: &[Page]) -> Vec<J> {
    json_lines(pages)
        .iter()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

/// `op table before after` of each record, compact.
pub(crate) fn changes(records: &[J]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r["op"].as_str().unwrap_or("?"),
                r["table"].as_str().unwrap_or("?"),
                r["before"],
                r["after"]
            )
        })
        .collect()
}

pub(crate) fn last_bookmark(pages: &[Page]) -> Bookmark {
    pages
        .iter()
        .rev()
        .find_map(|p| p.bookmark().cloned())
        .expect("a bookmark")
}

#[tokio::test]
async fn changes_of_listed_tables_are_exact_records_and_resume_from_the_bookmark() {
    let mut db = TestDb::new("cdc_basic").await;
    db.exec(
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10));
         CREATE TABLE b (id INT PRIMARY KEY, n BIGINT UNSIGNED);
         CREATE TABLE c (id INT PRIMARY KEY)",
    )
    .await;
    let src = source(&db, &["a", "b"], 1);
    src.check()
        .await
        .expect("the binlog MariaDB meets every prerequisite");
    // A first run starts at the end of the log: nothing yet, but a bookmark to resume from.
    let first = read_pages(&src, None, 100).await.expect("first run");
    assert!(records(&first).is_empty());
    let start = last_bookmark(&first);
    assert_eq!(start["server"]["server_id"], 1, "{start}");

    db.exec(
        "INSERT INTO a VALUES (1, 'one'), (2, 'two');
         INSERT INTO c VALUES (1);
         BEGIN; UPDATE a SET v = 'uno' WHERE id = 1; INSERT INTO b VALUES (7, 18446744073709551615);
           DELETE FROM a WHERE id = 2; COMMIT;
         DELETE FROM b",
    )
    .await;
    let pages = read_pages(&src, Some(start.clone()), 100)
        .await
        .expect("second run");
    let recs = records(&pages);
    assert_eq!(
        changes(&recs),
        [
            format!(r#"c {0}.a null {{"id":1,"v":"one"}}"#, db.db),
            format!(r#"c {0}.a null {{"id":2,"v":"two"}}"#, db.db),
            format!(
                r#"u {0}.a {{"id":1,"v":"one"}} {{"id":1,"v":"uno"}}"#,
                db.db
            ),
            format!(r#"c {0}.b null {{"id":7,"n":18446744073709551615}}"#, db.db),
            format!(r#"d {0}.a {{"id":2,"v":"two"}} null"#, db.db),
            format!(r#"d {0}.b {{"id":7,"n":18446744073709551615}} null"#, db.db),
        ]
    );
    // Field order and positions: the three changes of the one transaction share its
    // position and GTID; GTIDs are MariaDB's domain-server-seq.
    let keys = faucet_test_support::json_keys(&recs[0]);
    assert_eq!(
        keys,
        [
            "op",
            "table",
            "binlog_file",
            "binlog_pos",
            "gtid",
            "commit_ts",
            "before",
            "after"
        ]
    );
    let gtid = |r: &J| r["gtid"].as_str().expect("gtid").to_owned();
    assert_eq!(recs[0]["binlog_pos"], recs[1]["binlog_pos"]);
    assert_eq!(gtid(&recs[2]), gtid(&recs[3]));
    assert_eq!(gtid(&recs[2]), gtid(&recs[4]));
    assert_ne!(gtid(&recs[1]), gtid(&recs[2]));
    assert_eq!(gtid(&recs[2]).split('-').count(), 3, "{}", gtid(&recs[2]));
    assert!(recs[2]["commit_ts"].as_str().expect("ts").ends_with('Z'));
    let end = last_bookmark(&pages);
    // The bookmark's GTID is that of the last transaction read: ours, or a later one of
    // another test sharing the server.
    let seq = |g: &str| g.rsplit('-').next().and_then(|n| n.parse::<u64>().ok());
    assert!(
        seq(end["gtid"].as_str().expect("gtid")) >= seq(&gtid(&recs[5])),
        "{end}"
    );
    assert!(end.get("in_txn").is_none(), "{end}");

    // Resumed from the last bookmark: nothing again. From the first one: the same records.
    let again = read_pages(&src, Some(end), 100).await.expect("third run");
    assert!(records(&again).is_empty());
    let replay = read_pages(&src, Some(start), 2).await.expect("replay");
    assert_eq!(changes(&records(&replay)), changes(&recs));
    db.drop_db().await;
}

#[tokio::test]
async fn a_bounded_run_reports_the_binlog_distance_to_its_end() {
    let mut db = TestDb::new("cdc_extent").await;
    db.exec("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(300))")
        .await;
    let src = source(&db, &["t"], 7);
    let start = last_bookmark(&read_pages(&src, None, 100).await.expect("first run"));
    let rows: Vec<String> = (1..=40)
        .map(|i| format!("({i}, REPEAT('v', 200))"))
        .collect();
    db.exec(&format!("INSERT INTO t VALUES {}", rows.join(",")))
        .await;
    // Rotate once, so the distance spans two files.
    db.exec("FLUSH BINARY LOGS").await;
    db.exec("INSERT INTO t VALUES (41, 'after the rotation')")
        .await;
    let pages = read_pages(&src, Some(start), 10)
        .await
        .expect("bounded run");
    assert_eq!(records(&pages).len(), 41);
    let extents: Vec<_> = pages
        .iter()
        .map(|p| {
            p.extent()
                .cloned()
                .expect("every page of a bounded run has an extent")
        })
        .collect();
    let total = extents[0].total;
    assert!(total > 8_000, "40 rows of 200 bytes: {total}");
    let mut before = 0;
    for e in &extents {
        assert_eq!(e.unit, faucet_core::ExtentUnit::WalBytes);
        assert!(!e.estimate);
        assert_eq!(e.total, total, "one end for the run");
        assert!(e.done >= before, "the position only grows: {extents:?}");
        before = e.done;
    }
    assert!(extents[0].done < total, "{extents:?}");
    let last = extents.last().expect("last");
    assert_eq!(last.done, total, "the run reaches its end: {extents:?}");
    // A continuous run has no end: no extent.
    let mut config = MysqlCdcConfig::new(db.url(), server_id(8), [db.table("t")]);
    config.continuous = true;
    let continuous = MysqlCdcSource::new(config).expect("config");
    let options = faucet_core::ReadOptions {
        batch_size: 100,
        ..faucet_core::ReadOptions::default()
    };
    let cancel = options.cancel.clone();
    let mut stream = continuous
        .open(Some(last_bookmark(&pages)), options)
        .await
        .expect("open");
    db.exec("INSERT INTO t VALUES (42, 'continuous')").await;
    let page = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            match stream.next_page().await.expect("page") {
                Some(p) if !p.is_empty() => break p,
                Some(_) => {}
                None => panic!("a continuous stream ends only when cancelled"),
            }
        }
    })
    .await
    .expect("the change arrives");
    assert_eq!(page.extent(), None);
    cancel.cancel();
    drop(stream);
    db.drop_db().await;
}

#[tokio::test]
async fn rotation_column_changes_and_truncate_show_in_the_records() {
    let mut db = TestDb::new("cdc_ddl").await;
    db.exec("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(5))")
        .await;
    let src = source(&db, &["t"], 4);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec(
        "INSERT INTO t VALUES (1, 'a');
         FLUSH BINARY LOGS;
         INSERT INTO t VALUES (2, 'b');
         ALTER TABLE t ADD COLUMN w INT NOT NULL DEFAULT 5;
         INSERT INTO t VALUES (3, 'c', 7);
         UPDATE t SET w = 6 WHERE id = 1;
         TRUNCATE TABLE t;
         INSERT INTO t VALUES (4, 'd', 8);
         ALTER TABLE t DROP COLUMN v, CHANGE COLUMN w weight BIGINT UNSIGNED NOT NULL;
         INSERT INTO t VALUES (5, 18446744073709551615)",
    )
    .await;
    let pages = read_pages(&src, Some(start.clone()), 10)
        .await
        .expect("read");
    // The column changes are schema-change records before the first row of each new shape
    // (module `shapes`); `CHANGE COLUMN w weight` is a rename, told by the statement.
    let (schema, recs): (Vec<J>, Vec<J>) =
        records(&pages).into_iter().partition(|r| r["op"] == "s");
    let kinds: Vec<Vec<&J>> = schema
        .iter()
        .map(|s| {
            s["after"]["changes"]
                .as_array()
                .expect("changes")
                .iter()
                .map(|c| &c["kind"])
                .collect()
        })
        .collect();
    assert_eq!(
        kinds,
        [vec!["add"], vec!["rename", "type", "drop"]],
        "{schema:?}"
    );
    let t = db.table("t");
    assert_eq!(
        changes(&recs),
        [
            format!(r#"c {t} null {{"id":1,"v":"a"}}"#),
            format!(r#"c {t} null {{"id":2,"v":"b"}}"#),
            format!(r#"c {t} null {{"id":3,"v":"c","w":7}}"#),
            format!(r#"u {t} {{"id":1,"v":"a","w":5}} {{"id":1,"v":"a","w":6}}"#),
            format!("t {t} null null"),
            format!(r#"c {t} null {{"id":4,"v":"d","w":8}}"#),
            format!(r#"c {t} null {{"id":5,"weight":18446744073709551615}}"#),
        ]
    );
    // The rotation: the records after it name the new file, and so does the bookmark.
    let file = |r: &J| r["binlog_file"].as_str().expect("file").to_owned();
    assert_ne!(file(&recs[0]), file(&recs[1]));
    assert_eq!(
        last_bookmark(&pages)["binlog_file"].as_str(),
        Some(file(&recs[6]).as_str())
    );
    assert_ne!(start["binlog_file"], last_bookmark(&pages)["binlog_file"]);
    // Paged one record at a time, the same records.
    let one_by_one = read_pages(&src, Some(start), 1)
        .await
        .expect("pages of one");
    assert_eq!(
        changes(&records(&one_by_one)),
        changes(&records(&pages)),
        "the schema-change records too"
    );
    db.drop_db().await;
}

#[tokio::test]
async fn a_continuous_run_follows_new_changes_until_cancelled() {
    let mut db = TestDb::new("cdc_follow").await;
    db.exec("CREATE TABLE f (id INT PRIMARY KEY)").await;
    let mut config = MysqlCdcConfig::new(db.url(), server_id(5), [db.table("f")]);
    config.continuous = true;
    let src = MysqlCdcSource::new(config).expect("valid");
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut stream = src
        .open(
            None,
            faucet_core::ReadOptions {
                batch_size: 100,
                max_page_delay: std::time::Duration::from_millis(50),
                cancel: cancel.clone(),
            },
        )
        .await
        .expect("open");
    // Written after the stream opened: a bounded run would not wait for them.
    db.exec("INSERT INTO f VALUES (1); INSERT INTO f VALUES (2)")
        .await;
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while got.len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "changes not delivered: {got:?}"
        );
        let page = stream.next_page().await.expect("page").expect("not ended");
        got.extend(changes(&records(std::slice::from_ref(&page))));
    }
    let f = db.table("f");
    assert_eq!(
        got,
        [
            format!(r#"c {f} null {{"id":1}}"#),
            format!(r#"c {f} null {{"id":2}}"#)
        ]
    );
    cancel.cancel();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while stream.next_page().await.expect("page").is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the stream did not end after cancellation");
    db.drop_db().await;
}

#[tokio::test]
async fn a_start_position_in_a_file_the_server_lacks_is_a_config_error() {
    let db = TestDb::new("cdc_start").await;
    let mut config = MysqlCdcConfig::new(db.url(), server_id(6), [db.table("t")]);
    config.start = faucet_connectors::mysql::cdc::StartPosition::At {
        binlog_file: "mariadb-bin.999999".into(),
        binlog_pos: 4,
    };
    let src = MysqlCdcSource::new(config).expect("valid");
    for e in [
        src.check().await.expect_err("check"),
        read_pages(&src, None, 10).await.expect_err("open"),
    ] {
        assert!(
            matches!(&e, faucet_core::FaucetError::Config { field, .. } if field == "start.at.binlog_file"),
            "{e}"
        );
    }
    db.drop_db().await;
}

/// The source checks of `faucet_core::testing::conformance` that apply to a change stream:
/// a strict config, bounded pages, every page's bookmark resumable to exactly the rest, and
/// errors instead of panics (a foreign bookmark, an unreachable server).
#[tokio::test]
async fn passes_the_source_conformance_battery() {
    use faucet_connectors::mysql::cdc::StartPosition;
    use faucet_core::testing::conformance;

    conformance::config_is_strict::<MysqlCdcConfig>(&serde_json::json!({
        "connection_url": "mysql://root@127.0.0.1:3307/test",
        "server_id": 42,
        "tables": ["test.t"],
        "continuous": false,
        "start": {"at": {"binlog_file": "mariadb-bin.000001", "binlog_pos": 4}}
    }))
    .expect("config_is_strict");

    let mut db = TestDb::new("cdc_conf").await;
    db.exec("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        .await;
    // Where the log ends now: the source reads from there (a bounded run from no bookmark
    // starts at the end of the log and would see nothing).
    let start = last_bookmark(
        &read_pages(&source(&db, &["t"], 13), None, 10)
            .await
            .expect("first run"),
    );
    let mut config = MysqlCdcConfig::new(db.url(), server_id(13), [db.table("t")]);
    config.start = StartPosition::At {
        binlog_file: start["binlog_file"].as_str().expect("binlog_file").into(),
        binlog_pos: start["binlog_pos"].as_u64().expect("binlog_pos"),
    };
    let src = MysqlCdcSource::new(config).expect("valid");
    // Several transactions, one larger than a page, an update and a delete: 17 records.
    db.exec(
        "INSERT INTO t VALUES (1,'a'),(2,'a'),(3,'a'),(4,'a'),(5,'a'),(6,'a'),(7,'a'),(8,'a'),
                              (9,'a'),(10,'a'),(11,'a'),(12,'a');
         UPDATE t SET v = 'b' WHERE id <= 3;
         DELETE FROM t WHERE id = 12;
         INSERT INTO t VALUES (13, 'c')",
    )
    .await;
    conformance::source_pages_are_bounded(&src, 5, 17)
        .await
        .expect("source_pages_are_bounded");
    conformance::source_bookmarks_round_trip(&src, 5)
        .await
        .expect("source_bookmarks_round_trip");

    let foreign = source(&db, &["t"], 14);
    conformance::errors_not_panics("open from a bookmark of another source", async move {
        foreign
            .open(
                Some(serde_json::json!({"offset": 3})),
                faucet_core::ReadOptions::default(),
            )
            .await
            .map(|_| ())
    })
    .await
    .expect("errors_not_panics");
    let unreachable = MysqlCdcSource::new(MysqlCdcConfig::new(
        "mysql://nobody@127.0.0.1:1/none",
        server_id(15),
        ["none.t"],
    ))
    .expect("valid");
    conformance::errors_not_panics("check an unreachable server", async move {
        unreachable.check().await
    })
    .await
    .expect("errors_not_panics");
    db.drop_db().await;
}
