//! `mysql-cdc` bookmarks carried over to another server by their GTID state: two private
//! MariaDBs, B a replica of A (`log_slave_updates`, `MASTER_USE_GTID=slave_pos`), B's binlog
//! starting later than A's (its files and offsets are its own). A pipeline reads A, a page
//! ends inside a transaction, B catches up, the pipeline resumes on B: every change exactly
//! once, in order, values as A's SELECT. And the refusals: B behind, B's binlog purged past
//! the bookmark, a bookmark without a GTID state. A server rebuilt with the bookmark's
//! `server_id` but a binlog of its own: carried over the same way. Plus a NULL
//! `BINLOG_GTID_POS` (an event larger than `max_allowed_packet` before the position):
//! refused (the position cannot be verified) until the setting lets the server answer.

use std::collections::BTreeMap;

use faucet_connectors::mysql::cdc::{MysqlCdcConfig, MysqlCdcSource};
use faucet_core::{Bookmark, FaucetError, Page, ReadOptions, Source as _};
use serde_json::Value as J;

use crate::mysql_cdc::{changes, last_bookmark, records};
use crate::mysql_private::PrivateMariadb;
use crate::support::read_pages;

const TABLE: &str = "CREATE TABLE t (id INT PRIMARY KEY, v TEXT)";

fn src(server: &PrivateMariadb) -> MysqlCdcSource {
    MysqlCdcSource::new(MysqlCdcConfig::new(server.url("test"), 4242, ["test.t"])).expect("valid")
}

/// Reads from `from` page by page until a page's bookmark is inside a transaction.
async fn read_until_in_txn(s: &MysqlCdcSource, from: Bookmark) -> Vec<Page> {
    let options = ReadOptions {
        batch_size: 10,
        ..ReadOptions::default()
    };
    let mut stream = s.open(Some(from), options).await.expect("open");
    let mut pages = Vec::new();
    while let Some(page) = stream.next_page().await.expect("page") {
        let inside = page.bookmark().is_some_and(|b| !b["in_txn"].is_null());
        pages.push(page);
        if inside {
            return pages;
        }
    }
    panic!("no page ended inside a transaction");
}

/// `t` after applying the records in order to an empty table, as `id\tv` lines.
fn replay(records: &[J]) -> Vec<String> {
    let mut rows = BTreeMap::new();
    for r in records {
        match r["op"].as_str() {
            Some("c" | "u") => {
                if r["op"] == "u" {
                    rows.remove(&r["before"]["id"].as_i64().expect("id"));
                }
                rows.insert(
                    r["after"]["id"].as_i64().expect("id"),
                    r["after"]["v"].as_str().expect("v").to_owned(),
                );
            }
            Some("d") => {
                rows.remove(&r["before"]["id"].as_i64().expect("id"));
            }
            other => panic!("unexpected op {other:?}"),
        }
    }
    rows.iter().map(|(id, v)| format!("{id}\t{v}")).collect()
}

async fn select(server: &PrivateMariadb) -> Vec<String> {
    server
        .column("SELECT CONCAT(id, '\\t', v) FROM t ORDER BY id")
        .await
}

fn message(e: &FaucetError) -> String {
    e.to_string()
}

#[tokio::test]
async fn a_bookmark_is_carried_over_to_a_replica_by_its_gtid_state() {
    let a = PrivateMariadb::start_with(1, &["--log-slave-updates=ON"]).await;
    let b = PrivateMariadb::start_with(2, &["--log-slave-updates=ON"]).await;
    a.exec(TABLE).await;
    // History B's binlog will not have: its offsets differ from A's.
    a.exec("CREATE TABLE other (id INT PRIMARY KEY, pad TEXT)")
        .await;
    a.exec("INSERT INTO other SELECT seq, REPEAT('p', 200) FROM seq_1_to_300")
        .await;
    b.exec(&format!(
        "SET SESSION sql_log_bin = 0; {TABLE}; CREATE TABLE other (id INT PRIMARY KEY, pad TEXT)"
    ))
    .await;
    b.replicate_from(&a).await;

    let s_a = src(&a);
    let start = last_bookmark(&read_pages(&s_a, None, 10).await.expect("first run"));
    assert!(start["gtid_state"].is_string(), "{start}");

    // Two replication domains, a 25-row transaction (pages of 10 end inside it), updates,
    // a delete.
    a.exec("INSERT INTO t VALUES (1, 'a'), (2, 'b')").await;
    a.exec("SET SESSION gtid_domain_id = 7; INSERT INTO t VALUES (3, 'c')")
        .await;
    a.exec("UPDATE t SET v = 'a2' WHERE id = 1").await;
    a.exec("INSERT INTO t SELECT seq, CONCAT('row', seq) FROM seq_100_to_124")
        .await;
    a.exec("DELETE FROM t WHERE id = 2").await;
    a.exec("SET SESSION gtid_domain_id = 7; UPDATE t SET v = 'c2' WHERE id = 3")
        .await;
    a.exec("INSERT INTO other VALUES (1000, 'not listed')")
        .await;

    let on_a = read_until_in_txn(&s_a, start.clone()).await;
    let mid = last_bookmark(&on_a);
    assert_eq!(mid["in_txn"]["skip"], 6, "{mid}");
    assert_eq!(mid["server"]["server_id"], 1);

    b.wait_caught_up(&a).await;
    let s_b = src(&b);
    // What `faucet doctor` asks: B would take the bookmark by GTID, A by position.
    let note = s_b
        .check_resume(&mid)
        .await
        .expect("B takes the bookmark")
        .expect("a note");
    assert!(
        note.contains("by GTID state") && note.contains("server_id 1"),
        "{note}"
    );
    let note = s_a.check_resume(&mid).await.expect("A").expect("a note");
    assert!(note.starts_with("resumes at mariadb-bin."), "{note}");
    let on_b = read_pages(&s_b, Some(mid.clone()), 10)
        .await
        .expect("carried over to B");
    let mut all = records(&on_a);
    all.extend(records(&on_b));
    let mut want = vec![
        r#"c test.t null {"id":1,"v":"a"}"#.to_owned(),
        r#"c test.t null {"id":2,"v":"b"}"#.to_owned(),
        r#"c test.t null {"id":3,"v":"c"}"#.to_owned(),
        r#"u test.t {"id":1,"v":"a"} {"id":1,"v":"a2"}"#.to_owned(),
    ];
    want.extend((100..125).map(|i| format!(r#"c test.t null {{"id":{i},"v":"row{i}"}}"#)));
    want.push(r#"d test.t {"id":2,"v":"b"} null"#.to_owned());
    want.push(r#"u test.t {"id":3,"v":"c"} {"id":3,"v":"c2"}"#.to_owned());
    assert_eq!(changes(&all), want, "every change once, in order");
    assert_eq!(replay(&all), select(&a).await);

    // From here on the bookmark is B's: its id, file and offset.
    let on_b_end = last_bookmark(&on_b);
    assert_eq!(on_b_end["server"]["server_id"], 2, "{on_b_end}");
    assert!(on_b_end.get("by_gtid").is_none(), "{on_b_end}");
    let b_status = b.column("SHOW MASTER STATUS").await;
    assert_eq!(on_b_end["binlog_file"], b_status[0].as_str());
    assert_ne!(
        on_b_end["binlog_pos"],
        last_bookmark(&read_pages(&s_a, Some(mid.clone()), 10).await.expect("A"))["binlog_pos"],
        "B's offsets are its own"
    );
    // … and resumes on B by position, checked against B's GTID state there.
    a.exec("INSERT INTO t VALUES (4, 'd')").await;
    b.wait_caught_up(&a).await;
    let next = read_pages(&s_b, Some(on_b_end.clone()), 10)
        .await
        .expect("resume on B");
    assert_eq!(
        changes(&records(&next)),
        [r#"c test.t null {"id":4,"v":"d"}"#]
    );

    // Carried over again, with new transactions in domain 0 only: domain 7 is never passed,
    // and the stream settles on B's position because B's GTID state there is the stream's.
    let a_now = last_bookmark(&read_pages(&s_a, Some(mid.clone()), 10).await.expect("A"));
    a.exec("INSERT INTO t VALUES (6, 'f')").await;
    b.wait_caught_up(&a).await;
    let carried = read_pages(&s_b, Some(a_now), 10).await.expect("carried");
    assert_eq!(
        changes(&records(&carried)),
        [r#"c test.t null {"id":6,"v":"f"}"#]
    );
    let settled = last_bookmark(&carried);
    assert_eq!(settled["server"]["server_id"], 2, "{settled}");
    assert!(settled.get("by_gtid").is_none(), "{settled}");

    // B behind: refused, saying so, nothing read.
    b.exec("STOP SLAVE").await;
    a.exec("INSERT INTO t VALUES (5, 'e')").await;
    let a_end = last_bookmark(&read_pages(&s_a, Some(mid.clone()), 10).await.expect("A"));
    let e = read_pages(&s_b, Some(a_end.clone()), 10)
        .await
        .expect_err("B has not logged the bookmark's last transaction");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    assert!(
        message(&e).contains("has not logged") && message(&e).contains("caught up"),
        "{e}"
    );
    let probed = s_b
        .check_resume(&a_end)
        .await
        .expect_err("doctor gives the same refusal");
    assert_eq!(message(&probed), message(&e));

    // B takes a write of its own under the number A gave its last transaction (a split
    // brain): a diverged history, refused, saying so.
    let seq = a_end["gtid_state"]
        .as_str()
        .and_then(|st| st.split(',').find(|g| g.starts_with("0-")))
        .and_then(|g| g.rsplit('-').next())
        .expect("domain 0 in the state")
        .to_owned();
    b.exec(&format!(
        "SET SESSION gtid_seq_no = {seq}; INSERT INTO other VALUES (2000, 'b only')"
    ))
    .await;
    let e = read_pages(&s_b, Some(a_end.clone()), 10)
        .await
        .expect_err("diverged");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    assert!(
        message(&e).contains(&format!("logged 0-2-{seq} where"))
            && message(&e).contains("diverged"),
        "{e}"
    );

    // No GTID state: refused as a bookmark of another server, as before.
    let mut no_gtid = a_end.clone();
    no_gtid["gtid"] = J::Null;
    no_gtid
        .as_object_mut()
        .expect("object")
        .remove("gtid_state");
    let e = read_pages(&s_b, Some(no_gtid), 10)
        .await
        .expect_err("no GTID");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    assert!(
        message(&e).contains("server_id 1") && message(&e).contains("no GTID"),
        "{e}"
    );
    // An old bookmark with only its last GTID: not a position on a two-domain server.
    let mut old = on_b_end.clone();
    old["server"]["server_id"] = 1.into();
    old.as_object_mut().expect("object").remove("gtid_state");
    let e = read_pages(&s_b, Some(old), 10)
        .await
        .expect_err("one GTID of two domains");
    assert!(message(&e).contains("only its last GTID"), "{e}");

    // A bookmark from before B's binlog began (B was attached at that state, its first
    // binlog does not record it): MariaDB's dump refuses the state, and so does the run.
    let e = read_pages(&s_b, Some(start.clone()), 10)
        .await
        .expect_err("the state is not in B's binlog");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    assert!(!e.is_retryable());
    assert!(
        message(&e).contains("cannot send its binlog from GTID state"),
        "{e}"
    );

    // B's binlog purged past the bookmark: refused, saying the changes are gone.
    b.exec("FLUSH BINARY LOGS").await;
    let newest = b.column("SHOW MASTER STATUS").await[0].clone();
    // The server keeps a file a dump thread still reads (the runs above, just closed).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        b.exec(&format!("PURGE BINARY LOGS TO '{newest}'")).await;
        let files = b.column("SHOW BINARY LOGS").await;
        if files == [newest.clone()] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cannot purge: {files:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let e = read_pages(&s_b, Some(start), 10).await.expect_err("purged");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    assert!(
        message(&e).contains("purged") && message(&e).contains("gone"),
        "{e}"
    );
}

/// MariaDB answers NULL to `BINLOG_GTID_POS` for a position after an event larger than its
/// `max_allowed_packet` in the same file: the position cannot be verified, so it is refused
/// (a reset binlog answers NULL too), naming the setting; raised again, the run resumes.
#[tokio::test]
async fn a_null_binlog_gtid_pos_is_refused_until_the_server_can_verify_the_position() {
    let server = PrivateMariadb::start(1).await;
    server
        .exec("CREATE TABLE t (id INT PRIMARY KEY, v LONGTEXT)")
        .await;
    let s = src(&server);
    let start = last_bookmark(&read_pages(&s, None, 10).await.expect("first run"));
    server
        .exec("INSERT INTO t VALUES (1, REPEAT('x', 2000000))")
        .await;
    let pages = read_pages(&s, Some(start), 10).await.expect("the big row");
    assert_eq!(records(&pages).len(), 1);
    let after_big = last_bookmark(&pages);
    let default_packet = server.column("SELECT @@GLOBAL.max_allowed_packet").await;
    server.exec("SET GLOBAL max_allowed_packet = 1048576").await;
    let position = format!(
        "SELECT BINLOG_GTID_POS('{}', {}) IS NULL",
        after_big["binlog_file"].as_str().expect("file"),
        after_big["binlog_pos"]
    );
    assert_eq!(
        server.column(&position).await,
        ["1"],
        "the server says NULL"
    );
    server.exec("INSERT INTO t VALUES (2, 'small')").await;
    let e = read_pages(&s, Some(after_big.clone()), 10)
        .await
        .expect_err("the position cannot be verified");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    assert!(
        message(&e).contains("cannot be verified") && message(&e).contains("max_allowed_packet"),
        "{e}"
    );
    server
        .exec(&format!(
            "SET GLOBAL max_allowed_packet = {}",
            default_packet.first().expect("a size")
        ))
        .await;
    let rest = read_pages(&s, Some(after_big), 10)
        .await
        .expect("verified again");
    assert_eq!(
        changes(&records(&rest)),
        [r#"c test.t null {"id":2,"v":"small"}"#]
    );
}

/// A server rebuilt with the same `server_id` and a binlog of its own (here: a replica of A
/// that logged A's transactions in files of another name, restarted with A's server_id):
/// A's bookmark, inside a transaction, names a file this server does not have, and is carried
/// over by its GTID state — every change once, in order — rather than refused as purged.
#[tokio::test]
async fn a_bookmark_of_a_server_rebuilt_with_the_same_server_id_is_carried_over_by_gtid() {
    let a = PrivateMariadb::start_with(1, &["--log-slave-updates=ON"]).await;
    let mut b = PrivateMariadb::start_with(
        2,
        &[
            "--log-slave-updates=ON",
            "--log-bin=rebuilt-bin",
            "--skip-slave-start",
        ],
    )
    .await;
    a.exec(TABLE).await;
    b.exec(&format!("SET SESSION sql_log_bin = 0; {TABLE}"))
        .await;
    b.replicate_from(&a).await;

    let s_a = src(&a);
    let start = last_bookmark(&read_pages(&s_a, None, 10).await.expect("first run"));
    a.exec("INSERT INTO t VALUES (1, 'a')").await;
    a.exec("INSERT INTO t SELECT seq, CONCAT('row', seq) FROM seq_100_to_124")
        .await;
    let on_a = read_until_in_txn(&s_a, start).await;
    let mid = last_bookmark(&on_a);
    assert_eq!(mid["in_txn"]["skip"], 9, "{mid}");
    a.exec("DELETE FROM t WHERE id = 1").await;
    b.wait_caught_up(&a).await;
    b.exec("STOP SLAVE").await;
    b.restart(1).await;
    let file = mid["binlog_file"].as_str().expect("a file").to_owned();
    assert!(
        !b.column("SHOW BINARY LOGS").await.contains(&file),
        "the rebuilt server has no {file}"
    );

    let s_b = src(&b);
    let note = s_b
        .check_resume(&mid)
        .await
        .expect("the rebuilt server takes the bookmark")
        .expect("a note");
    assert!(note.contains("by GTID state"), "{note}");
    let on_b = read_pages(&s_b, Some(mid.clone()), 10)
        .await
        .expect("carried over by GTID on the rebuilt server");
    let mut all = records(&on_a);
    all.extend(records(&on_b));
    let mut want = vec![r#"c test.t null {"id":1,"v":"a"}"#.to_owned()];
    want.extend((100..125).map(|i| format!(r#"c test.t null {{"id":{i},"v":"row{i}"}}"#)));
    want.push(r#"d test.t {"id":1,"v":"a"} null"#.to_owned());
    assert_eq!(changes(&all), want, "every change once, in order");
    assert_eq!(replay(&all), select(&a).await);
    let end = last_bookmark(&on_b);
    assert!(
        end["binlog_file"]
            .as_str()
            .is_some_and(|f| f.starts_with("rebuilt-bin.")),
        "settled on the rebuilt server's own binlog: {end}"
    );
    assert!(end.get("by_gtid").is_none(), "{end}");
}

/// Edited bookmarks on the server they were made on: a GTID state with a domain the server
/// never logged is refused as a diverged history (not that the file is gone, which it is
/// not); a MySQL-shaped bookmark (a `server_uuid` and a GTID set) is refused on MariaDB
/// instead of being resumed by position; an empty GTID state, another than the server's at
/// the position, is refused the same way (it was carried over, reading the binlog again).
/// `check_resume` gives the run's refusal each time.
#[tokio::test]
async fn edited_bookmarks_on_their_own_server_are_refused_saying_what_is_wrong() {
    let server = PrivateMariadb::start(1).await;
    server.exec(TABLE).await;
    let s = src(&server);
    let start = last_bookmark(&read_pages(&s, None, 10).await.expect("first run"));
    server.exec("INSERT INTO t VALUES (1, 'a'), (2, 'b')").await;
    let end = last_bookmark(&read_pages(&s, Some(start), 10).await.expect("the rows"));
    let state = end["gtid_state"].as_str().expect("a state").to_owned();
    assert!(!state.is_empty(), "{end}");

    let mut unknown_domain = end.clone();
    unknown_domain["gtid_state"] = format!("{state},5-1-3").into();
    let e = read_pages(&s, Some(unknown_domain.clone()), 10)
        .await
        .expect_err("a domain the server never logged");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    let m = message(&e);
    assert!(
        m.contains("history diverged")
            && m.contains("5-1-3")
            && !m.contains("is not in this server's binlog"),
        "{m}"
    );
    let probed = s
        .check_resume(&unknown_domain)
        .await
        .expect_err("doctor gives the same refusal");
    assert_eq!(message(&probed), m);

    let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    let mut mysql_shaped = end.clone();
    mysql_shaped["gtid_state"] = format!("{uuid}:1-5").into();
    mysql_shaped["server"]["server_uuid"] = uuid.into();
    let e = read_pages(&s, Some(mysql_shaped.clone()), 10)
        .await
        .expect_err("a MySQL bookmark on MariaDB");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    let m = message(&e);
    assert!(
        m.contains("made on a MySQL server") && m.contains("is MariaDB"),
        "{m}"
    );
    let probed = s
        .check_resume(&mysql_shaped)
        .await
        .expect_err("doctor gives the same refusal");
    assert_eq!(message(&probed), m);

    let mut empty = end.clone();
    empty["gtid_state"] = "".into();
    let e = s
        .check_resume(&empty)
        .await
        .expect_err("another state at the position than the bookmark's");
    let m = message(&e);
    assert!(
        m.contains("history diverged")
            && m.contains("another GTID state at the bookmark's position"),
        "{m}"
    );
}
