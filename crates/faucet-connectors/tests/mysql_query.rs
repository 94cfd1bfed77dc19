//! The `mysql` query source against the private MariaDB (scripts/services.sh): incremental
//! reads with 1,000 rows sharing one `updated_at` across pages, resumes mid-table from every
//! page (incremental and full_table by primary key), a read stopped after some pages and
//! resumed, and every problem as a typed error.

use faucet_connectors::mysql::{MysqlQueryConfig, MysqlQuerySource, ReplicationMethod};
use faucet_core::testing::conformance;
use faucet_core::{FaucetError, Page, ReadOptions, Source as _};
use serde_json::json;

use crate::mysql_support::{TestDb, mysql_url_for};
use crate::support::{json_lines, read_pages};

fn incremental(url: String, table: &str, key: &[&str]) -> MysqlQueryConfig {
    let mut c = MysqlQueryConfig::for_table(url, table);
    c.replication_method = ReplicationMethod::Incremental;
    c.replication_key = key.iter().map(|s| (*s).to_owned()).collect();
    c
}

fn ids(pages: &[Page]) -> Vec<i64> {
    pages
        .iter()
        .flat_map(|p| {
            p.rows().map(|r| match r.get("id") {
                Some(faucet_core::Value::Int(i)) => *i,
                other => panic!("id {other:?}"),
            })
        })
        .collect()
}

/// `events`: 10 rows before, 1,000 rows sharing one `updated_at`, 10 rows after.
async fn events_db(name: &str) -> TestDb {
    let mut db = TestDb::new(name).await;
    db.exec(
        "CREATE TABLE events (id INT PRIMARY KEY, updated_at DATETIME(3) NOT NULL, \
         note VARCHAR(20), KEY (updated_at))",
    )
    .await;
    let mut values = Vec::new();
    for id in 1..=1020 {
        let at = match id {
            1..=10 => format!("2024-01-01 00:00:{id:02}.000"),
            11..=1010 => "2024-06-01 12:00:00.500".to_owned(),
            _ => format!("2024-12-31 00:00:{:02}.000", id - 1010),
        };
        values.push(format!("({id}, '{at}', 'n{id}')"));
    }
    // Inserted in a shuffled id order, so key order is the server's doing.
    values.reverse();
    db.exec(&format!("INSERT INTO events VALUES {}", values.join(",")))
        .await;
    db
}

#[tokio::test]
async fn a_thousand_rows_sharing_one_updated_at_are_all_delivered_once() {
    let mut db = events_db("q_ties").await;
    // The key alone is not unique: the group of 1,000 spans 16 pages of 64.
    let src = MysqlQuerySource::new(incremental(db.url(), "events", &["updated_at"])).expect("ok");
    src.check().await.expect("check");
    assert!(
        src.warnings()
            .iter()
            .any(|w| w.contains("not known to be unique")),
        "{:?}",
        src.warnings()
    );
    let pages = read_pages(&src, None, 64).await.expect("read");
    let mut got = ids(&pages);
    assert_eq!(got.len(), 1020, "every row once");
    got.sort_unstable();
    got.dedup();
    assert_eq!(got, (1..=1020).collect::<Vec<_>>());
    // A bookmark never points inside the tie group: a page cut inside it carries the last
    // complete key (the end of the 10 early rows), so a resume from any page re-reads the
    // rest of the group, never skips it.
    let all = ids(&pages);
    let mut seen = 0;
    for p in &pages {
        seen += p.len();
        let b = p.bookmark().cloned().expect("bookmark");
        if b["values"][0] == json!("2024-06-01 12:00:00.500000") {
            assert!(
                seen >= 1010,
                "a bookmark inside the tie group after {seen} rows: {b}"
            );
        }
        let resumed: std::collections::HashSet<i64> =
            ids(&read_pages(&src, Some(b.clone()), 64).await.expect("resume"))
                .into_iter()
                .collect();
        let missing: Vec<i64> = all[seen..]
            .iter()
            .filter(|id| !resumed.contains(id))
            .copied()
            .collect();
        assert!(missing.is_empty(), "resuming from {b} skips {missing:?}");
    }
    let last = pages
        .last()
        .and_then(|p| p.bookmark().cloned())
        .expect("last");
    assert_eq!(
        last,
        json!({"replication_key": ["updated_at"], "values": ["2024-12-31 00:00:10.000000"]})
    );
    // Nothing new: nothing read. One new row: only it.
    assert!(
        read_pages(&src, Some(last.clone()), 64)
            .await
            .expect("again")
            .is_empty()
    );
    db.exec("INSERT INTO events VALUES (5000, '2025-01-01 00:00:00', 'new')")
        .await;
    let pages = read_pages(&src, Some(last), 64).await.expect("new");
    assert_eq!(ids(&pages), [5000]);

    // With the primary key ending the key tuple, every page's bookmark resumes exactly.
    let src =
        MysqlQuerySource::new(incremental(db.url(), "events", &["updated_at", "id"])).expect("ok");
    src.check().await.expect("check");
    assert!(src.warnings().is_empty(), "{:?}", src.warnings());
    let pages = read_pages(&src, None, 64).await.expect("read");
    let got = ids(&pages);
    assert_eq!(got.len(), 1021);
    let mut sorted = got.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 1021, "no duplicates");
    conformance::source_bookmarks_round_trip(&src, 250)
        .await
        .expect("resumes from every page");
    db.drop_db().await;
}

#[tokio::test]
async fn a_read_stopped_mid_table_resumes_mid_table() {
    let mut db = events_db("q_resume").await;
    for config in [
        incremental(db.url(), "events", &["updated_at", "id"]),
        MysqlQueryConfig::for_table(db.url(), db.table("events")),
    ] {
        let src = MysqlQuerySource::new(config).expect("ok");
        // A run that stops after three pages (the process killed: the stream dropped).
        let mut stream = src
            .open(
                None,
                ReadOptions {
                    batch_size: 100,
                    ..ReadOptions::default()
                },
            )
            .await
            .expect("open");
        let mut first = Vec::new();
        for _ in 0..3 {
            first.push(stream.next_page().await.expect("page").expect("some"));
        }
        drop(stream);
        let bookmark = first[2].bookmark().cloned().expect("mid-table bookmark");
        assert_ne!(bookmark, json!({"full_table": "done"}));
        let rest = read_pages(&src, Some(bookmark), 100).await.expect("resume");
        let mut all = ids(&first);
        all.extend(ids(&rest));
        assert_eq!(all.len(), 1020, "nothing lost or repeated");
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 1020);
        // Cancelled mid-read: the rows in hand come with a mid-read bookmark.
        let options = ReadOptions {
            batch_size: 100,
            ..ReadOptions::default()
        };
        let cancel = options.cancel.clone();
        let mut stream = src.open(None, options).await.expect("open");
        let page = stream.next_page().await.expect("page").expect("some");
        cancel.cancel();
        let mut n = page.len();
        let mut last = page.bookmark().cloned();
        while let Some(p) = stream.next_page().await.expect("page") {
            n += p.len();
            last = p.bookmark().cloned().or(last);
        }
        assert!(n < 1020, "the read stopped");
        let rest = read_pages(&src, last, 100)
            .await
            .expect("resume after cancel");
        assert_eq!(n + ids(&rest).len(), 1020);
    }
    // The last page of a full read says so.
    let src = MysqlQuerySource::new(MysqlQueryConfig::for_table(db.url(), "events")).expect("ok");
    let pages = read_pages(&src, None, 500).await.expect("read");
    assert_eq!(
        pages.last().and_then(Page::bookmark),
        Some(&json!({"full_table": "done"}))
    );
    conformance::source_pages_are_bounded(&src, 97, 1020)
        .await
        .expect("bounded");
    // (A `done` bookmark starts the next full read over, so no round trip from it.)
    // Text keys in any collation, compared by the server, with quotes and backslashes.
    db.exec(
        "CREATE TABLE names (name VARCHAR(20) CHARACTER SET latin1 PRIMARY KEY, id INT); \
         INSERT INTO names VALUES ('a''b', 1), ('a\\\\b', 2), ('Zed', 3), ('zz', 4), ('é', 5)",
    )
    .await;
    let src = MysqlQuerySource::new(incremental(db.url(), "names", &["name"])).expect("ok");
    let lines = json_lines(&read_pages(&src, None, 100).await.expect("read"));
    assert_eq!(lines.len(), 5);
    conformance::source_bookmarks_round_trip(&src, 1)
        .await
        .expect("text keys resume");
    db.drop_db().await;
}

#[tokio::test]
async fn problems_are_typed_errors() {
    let mut db = TestDb::new("q_errors").await;
    db.exec("CREATE TABLE t (id INT PRIMARY KEY, f FLOAT, e ENUM('a'))")
        .await;
    let field = |r: Result<(), FaucetError>| match r {
        Err(FaucetError::Config { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    let check = |c: MysqlQueryConfig| async move { MysqlQuerySource::new(c)?.check().await };
    assert_eq!(
        field(check(incremental(db.url(), "t", &["nope"])).await),
        "replication_key[0]"
    );
    assert_eq!(
        field(check(incremental(db.url(), "t", &["id", "f"])).await),
        "replication_key[1]"
    );
    assert_eq!(
        field(check(incremental(db.url(), "t", &["e"])).await),
        "replication_key[0]"
    );
    match check(MysqlQueryConfig::for_table(db.url(), "missing")).await {
        Err(FaucetError::Read { message, .. }) => {
            assert!(message.contains("does not exist"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match check(MysqlQueryConfig::for_table(
        mysql_url_for("no_such_db_faucet"),
        "t",
    ))
    .await
    {
        Err(FaucetError::Connect { message, .. }) => {
            assert!(
                message.contains("`no_such_db_faucet` does not exist"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    match check(MysqlQueryConfig::for_table(
        "mysql://nobody:hunter2@127.0.0.1:3307/test",
        "t",
    ))
    .await
    {
        Err(e @ FaucetError::Connect { .. }) => {
            let text = e.to_string();
            assert!(text.contains("refused the user or password"), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    match check(MysqlQueryConfig::for_table(
        "mysql://root@127.0.0.1:1/test",
        "t",
    ))
    .await
    {
        Err(FaucetError::Connect { message, .. }) => {
            assert!(message.contains("root@127.0.0.1:1/test"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let mut q = MysqlQueryConfig::for_table(db.url(), "t");
    q.table = None;
    q.query = Some("SELEC nonsense".into());
    assert!(matches!(check(q).await, Err(FaucetError::Read { .. })));
    // A bookmark of another key, or a tampered value: refused, never a silent restart.
    let src = MysqlQuerySource::new(incremental(db.url(), "t", &["id"])).expect("ok");
    for wrong in [
        json!({"replication_key": ["f"], "values": ["1"]}),
        json!({"replication_key": ["id"], "values": ["1 OR 1=1"]}),
        json!({"full_table": "done"}),
    ] {
        assert!(
            matches!(
                read_pages(&src, Some(wrong.clone()), 10).await,
                Err(FaucetError::Bookmark { .. })
            ),
            "{wrong}"
        );
    }
    db.drop_db().await;
}

/// The config check of the conformance battery (the read checks are in
/// [`a_read_stopped_mid_table_resumes_mid_table`]), and errors instead of panics.
#[tokio::test]
async fn the_config_is_strict_and_failures_are_errors() {
    conformance::config_is_strict::<MysqlQueryConfig>(&json!({
        "connection_url": "mysql://root@127.0.0.1:3306/test",
        "table": "test.t",
        "replication_method": "incremental",
        "replication_key": ["id"]
    }))
    .expect("config_is_strict");
    let unreachable = MysqlQuerySource::new(MysqlQueryConfig::for_table(
        "mysql://nobody@127.0.0.1:1/none",
        "none.t",
    ))
    .expect("valid");
    conformance::errors_not_panics("check an unreachable server", async move {
        unreachable.check().await
    })
    .await
    .expect("errors_not_panics");
}

#[tokio::test]
async fn a_full_read_counts_rows_of_the_catalogs_estimate() {
    let mut db = events_db("q_extent").await;
    db.exec("ANALYZE TABLE events").await;
    let src = MysqlQuerySource::new(MysqlQueryConfig::for_table(db.url(), "events")).expect("ok");
    let pages = read_pages(&src, None, 100).await.expect("read");
    assert_eq!(pages.len(), 11);
    let mut done = 0;
    let total = pages[0].extent().expect("an estimate").total;
    // InnoDB's TABLE_ROWS samples pages: near the 1,020 rows, not necessarily equal.
    assert!((500..=2000).contains(&total), "estimate {total}");
    for page in &pages {
        done += page.len() as u64;
        let e = page.extent().expect("every page of a full read");
        assert_eq!(e.unit, faucet_core::ExtentUnit::Rows);
        assert!(e.estimate);
        assert_eq!((e.done, e.total), (done, total));
    }
    assert_eq!(done, 1020);
    // Resumed mid-table, or a query: not known.
    let rest = read_pages(&src, pages[3].bookmark().cloned(), 100)
        .await
        .expect("resume");
    assert!(rest.iter().all(|p| p.extent().is_none()));
    let mut q = MysqlQueryConfig::for_table(db.url(), "events");
    q.table = None;
    q.query = Some("SELECT id FROM events".into());
    let pages = read_pages(&MysqlQuerySource::new(q).expect("ok"), None, 1000)
        .await
        .expect("query");
    assert!(pages.iter().all(|p| p.extent().is_none()));
    db.drop_db().await;
}
