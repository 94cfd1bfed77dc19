//! `mysql-cdc` faults, each a typed error naming the fix, on a private MariaDB started by the
//! test (the settings changed here would disturb the shared server): binlog_format=MIXED,
//! binlog_row_metadata=NO_LOG, compressed events, a purged binlog, a bookmark of another
//! server, missing privileges, a server id in use. `check()` names each prerequisite.

use faucet_connectors::mysql::cdc::{MysqlCdcConfig, MysqlCdcSource};
use faucet_core::{Bookmark, FaucetError, ReadOptions, Source as _};

use crate::mysql_cdc::{changes, last_bookmark, records};
use crate::mysql_private::PrivateMariadb;
use crate::support::read_pages;

fn src(url: String, server_id: u32) -> MysqlCdcSource {
    MysqlCdcSource::new(MysqlCdcConfig::new(url, server_id, ["test.t"])).expect("valid")
}

async fn end_bookmark(s: &MysqlCdcSource) -> Bookmark {
    last_bookmark(&read_pages(s, None, 10).await.expect("first run"))
}

fn message(e: &FaucetError) -> String {
    e.to_string()
}

#[tokio::test]
async fn faults_are_typed_errors_that_name_the_fix() {
    let mut server = PrivateMariadb::start(1).await;
    server
        .exec("CREATE TABLE t (id INT PRIMARY KEY, v TEXT); INSERT INTO t VALUES (0, 'x')")
        .await;
    let s = src(server.url("test"), 77);
    s.check()
        .await
        .expect("a well-configured server passes check");

    // binlog_format=MIXED: check names it; a change logged as a statement stops the stream.
    let from = end_bookmark(&s).await;
    server.exec("SET GLOBAL binlog_format = 'MIXED'").await;
    let e = s.check().await.expect_err("MIXED");
    assert!(
        message(&e).contains("binlog_format is MIXED but must be ROW"),
        "{e}"
    );
    server.exec("INSERT INTO t VALUES (1, 'a')").await;
    server.exec("SET GLOBAL binlog_format = 'ROW'").await;
    let e = read_pages(&s, Some(from), 10)
        .await
        .expect_err("statement-logged change");
    assert!(matches!(e, FaucetError::Read { .. }), "{e:?}");
    assert!(message(&e).contains("logged as an SQL statement"), "{e}");
    assert!(
        message(&e).contains("mariadb-bin.000001:"),
        "names the position: {e}"
    );

    // binlog_row_metadata=NO_LOG: no column names, never `@0`.
    let from = end_bookmark(&s).await;
    server
        .exec("SET GLOBAL binlog_row_metadata = 'NO_LOG'")
        .await;
    let e = s.check().await.expect_err("NO_LOG");
    assert!(message(&e).contains("binlog_row_metadata"), "{e}");
    server.exec("INSERT INTO t VALUES (2, 'b')").await;
    server.exec("SET GLOBAL binlog_row_metadata = 'FULL'").await;
    let e = read_pages(&s, Some(from), 10).await.expect_err("no names");
    assert!(message(&e).contains("binlog_row_metadata=FULL"), "{e}");
    assert!(!message(&e).contains("@0"), "{e}");

    // Compressed events: an error naming the event type and its position.
    let from = end_bookmark(&s).await;
    server.exec("SET GLOBAL log_bin_compress = ON").await;
    let e = s.check().await.expect_err("compressed");
    assert!(message(&e).contains("log_bin_compress"), "{e}");
    server
        .exec("INSERT INTO t VALUES (3, REPEAT('c', 2000))")
        .await;
    server.exec("SET GLOBAL log_bin_compress = OFF").await;
    let e = read_pages(&s, Some(from.clone()), 10)
        .await
        .expect_err("compressed event");
    let m = message(&e);
    assert!(
        m.contains("binlog event type 16") && m.contains("compressed"),
        "{e}"
    );
    assert!(m.contains("mariadb-bin.000001:"), "{e}");

    // After the faults, with the settings right again, later changes read normally.
    let from = end_bookmark(&s).await;
    server.exec("INSERT INTO t VALUES (4, 'd')").await;
    let pages = read_pages(&s, Some(from.clone()), 10)
        .await
        .expect("clean read");
    assert_eq!(
        changes(&records(&pages)),
        [r#"c test.t null {"id":4,"v":"d"}"#]
    );

    // Privileges: each missing one named.
    server
        .exec("CREATE USER 'np'@'127.0.0.1'; GRANT SELECT ON test.* TO 'np'@'127.0.0.1'")
        .await;
    let np = src(format!("mysql://np@127.0.0.1:{}/test", server.port), 77);
    let e = np.check().await.expect_err("no REPLICATION SLAVE");
    assert!(message(&e).contains("REPLICATION SLAVE"), "{e}");
    server
        .exec("GRANT REPLICATION SLAVE ON *.* TO 'np'@'127.0.0.1'")
        .await;
    let e = np.check().await.expect_err("no BINLOG MONITOR");
    assert!(message(&e).contains("BINLOG MONITOR"), "{e}");
    server
        .exec("GRANT BINLOG MONITOR ON *.* TO 'np'@'127.0.0.1'")
        .await;
    np.check().await.expect("enough privileges");

    // The server's own id, and an id a connected replica uses.
    let e = src(server.url("test"), 1)
        .check()
        .await
        .expect_err("own id");
    assert!(
        matches!(&e, FaucetError::Config { field, .. } if field == "server_id"),
        "{e}"
    );
    let mut follower_config = MysqlCdcConfig::new(server.url("test"), 78, ["test.t"]);
    follower_config.continuous = true;
    let follower = MysqlCdcSource::new(follower_config).expect("valid");
    let stream = follower
        .open(None, ReadOptions::default())
        .await
        .expect("follow");
    let e = src(server.url("test"), 78)
        .check()
        .await
        .expect_err("in use");
    assert!(message(&e).contains("78 is in use"), "{e}");
    drop(stream);

    // A purged binlog: not retryable, says the data in between is gone.
    let old = from;
    server.exec("FLUSH BINARY LOGS").await;
    server.exec("FLUSH BINARY LOGS").await;
    // The server keeps a file a dump thread still reads (the follower's, just dropped).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        server
            .exec("PURGE BINARY LOGS TO 'mariadb-bin.000003'")
            .await;
        let files = server.column("SHOW BINARY LOGS").await;
        if !files.iter().any(|f| f == "mariadb-bin.000001") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cannot purge: {files:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let e = read_pages(&s, Some(old), 10).await.expect_err("purged");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    assert!(!e.is_retryable());
    let m = message(&e);
    assert!(
        m.contains("purged") && m.contains("gone") && m.contains("Re-snapshot"),
        "{e}"
    );

    // Another server (here: the same data restarted with another server id): carried over
    // by the bookmark's GTID state; without one, refused.
    let current = end_bookmark(&s).await;
    server.restart(2).await;
    server.exec("INSERT INTO t VALUES (5, 'e')").await;
    let carried = read_pages(&s, Some(current.clone()), 10)
        .await
        .expect("carried over by GTID");
    assert_eq!(
        changes(&records(&carried)),
        [r#"c test.t null {"id":5,"v":"e"}"#]
    );
    let mut no_gtid = current;
    no_gtid
        .as_object_mut()
        .expect("an object")
        .remove("gtid_state");
    let e = read_pages(&s, Some(no_gtid), 10)
        .await
        .expect_err("other server");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e:?}");
    assert!(message(&e).contains("server_id 1"), "{e}");
}

#[tokio::test]
async fn a_server_killed_mid_run_is_a_retryable_error_and_a_rerun_loses_nothing() {
    let mut server = PrivateMariadb::start(1).await;
    server
        .exec("CREATE TABLE t (id INT PRIMARY KEY, v TEXT)")
        .await;
    let s = src(server.url("test"), 79);
    let from = end_bookmark(&s).await;
    server.exec("INSERT INTO t VALUES (1, 'a')").await;
    let mut config = MysqlCdcConfig::new(server.url("test"), 80, ["test.t"]);
    config.continuous = true;
    let follower = MysqlCdcSource::new(config).expect("valid");
    let mut stream = follower
        .open(Some(from.clone()), ReadOptions::default())
        .await
        .expect("follow");
    let page = stream.next_page().await.expect("page").expect("a page");
    assert_eq!(records(std::slice::from_ref(&page)).len(), 1);
    let mid = page.bookmark().cloned().expect("bookmark");
    server.restart(1).await; // kill -9, then start again on the same data
    let e = loop {
        match tokio::time::timeout(std::time::Duration::from_secs(40), stream.next_page()).await {
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None)) => panic!("the stream ended quietly after the server was killed"),
            Ok(Err(e)) => break e,
            Err(_) => panic!("no error within 40 s of the server being killed"),
        }
    };
    assert!(e.is_retryable(), "{e:?}");
    drop(stream);
    server.exec("INSERT INTO t VALUES (2, 'b')").await;
    let rest = read_pages(&s, Some(mid), 10).await.expect("rerun");
    assert_eq!(
        changes(&records(&rest)),
        [r#"c test.t null {"id":2,"v":"b"}"#]
    );
}
