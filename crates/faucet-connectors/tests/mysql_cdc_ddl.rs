//! `mysql-cdc` across DDL that changes a listed table's rows without rows events, against
//! the private MariaDB with a binlog: `DROP TABLE` (a `t` record, in binlog order; an upsert
//! target ends equal to the source), `RENAME TABLE` away (a `t`) and into a listed name (a
//! typed error), and the catalog as of the binlog point (an `ALTER … MODIFY c INET6` after
//! the events being read).

use faucet_core::Sink as _;
use serde_json::Value as J;

use crate::mysql_cdc::{changes, last_bookmark, records, source};
use crate::mysql_sink_support::{sink_db, texts, upsert_sink};
use crate::mysql_support::TestDb;
use crate::sink_support::write_all;
use crate::support::read_pages;

#[tokio::test]
async fn a_dropped_listed_table_is_a_truncate_in_binlog_order() {
    let mut db = TestDb::new("cdc_drop").await;
    db.exec(
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10));
         CREATE TABLE b (id INT PRIMARY KEY);
         CREATE TABLE c (id INT PRIMARY KEY)",
    )
    .await;
    let src = source(&db, &["a", "b"], 9);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    let d = db.db.clone();
    db.exec(&format!(
        "INSERT INTO a VALUES (1, 'one'), (2, 'two');
         INSERT INTO b VALUES (1);
         DROP TABLE IF EXISTS `a`, c;
         CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10));
         INSERT INTO a VALUES (3, 'three');
         CREATE TEMPORARY TABLE b (id INT);
         INSERT INTO b VALUES (99);
         DROP TEMPORARY TABLE b;
         INSERT INTO b VALUES (2);
         USE test;
         DROP TABLE `{d}`.`b`;
         USE `{d}`;
         CREATE OR REPLACE TABLE a (id INT PRIMARY KEY, v VARCHAR(10));
         INSERT INTO a VALUES (4, 'four')"
    ))
    .await;
    let recs = records(
        &read_pages(&src, Some(start.clone()), 10)
            .await
            .expect("read"),
    );
    let (a, b) = (db.table("a"), db.table("b"));
    assert_eq!(
        changes(&recs),
        [
            format!(r#"c {a} null {{"id":1,"v":"one"}}"#),
            format!(r#"c {a} null {{"id":2,"v":"two"}}"#),
            format!(r#"c {b} null {{"id":1}}"#),
            format!("t {a} null null"),
            format!(r#"c {a} null {{"id":3,"v":"three"}}"#),
            format!(r#"c {b} null {{"id":2}}"#),
            format!("t {b} null null"),
            format!("t {a} null null"),
            format!(r#"c {a} null {{"id":4,"v":"four"}}"#),
        ],
        "the temporary `b` is not the listed one; the qualified DROP from another database is"
    );
    // The DROP's `t` is a transaction of its own, after the inserts before it.
    assert!(recs[3]["binlog_pos"].as_i64() > recs[2]["binlog_pos"].as_i64());
    // Paged one record at a time: the same records.
    let one = records(
        &read_pages(&src, Some(start), 1)
            .await
            .expect("pages of one"),
    );
    assert_eq!(changes(&one), changes(&recs));
    db.drop_db().await;
}

#[tokio::test]
async fn an_upsert_target_of_a_dropped_table_ends_equal_to_the_source() {
    let mut db = TestDb::new("cdc_drop_upsert").await;
    db.exec("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10))")
        .await;
    let src = source(&db, &["a"], 10);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec(
        "INSERT INTO a VALUES (1, 'one'), (2, 'two');
         UPDATE a SET v = 'uno' WHERE id = 1;
         DROP TABLE a;
         CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10));
         INSERT INTO a VALUES (3, 'three'), (2, 'deux')",
    )
    .await;
    let pages = read_pages(&src, Some(start), 2).await.expect("read");
    let mut target = sink_db("cdc_drop_target").await;
    target
        .exec("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10)) ENGINE=InnoDB")
        .await;
    let sink = upsert_sink(&target, "a", &["id"]);
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &pages).await;
    let sql = "SELECT id, v FROM a ORDER BY id";
    let source_rows = texts(&mut db, sql).await;
    assert_eq!(
        texts(&mut target, sql).await,
        source_rows,
        "the rows the DROP removed are gone from the target too"
    );
    assert_eq!(source_rows.len(), 2);
    drop(w);
    target.drop_db().await;
    db.drop_db().await;
}

#[tokio::test]
async fn a_listed_table_renamed_away_is_a_truncate_and_one_renamed_in_stops_the_run() {
    let mut db = TestDb::new("cdc_rename").await;
    db.exec(
        "CREATE TABLE a (id INT PRIMARY KEY);
         CREATE TABLE b (id INT PRIMARY KEY)",
    )
    .await;
    let src = source(&db, &["a", "b"], 11);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec(
        "INSERT INTO a VALUES (1);
         RENAME TABLE a TO a_old;
         INSERT INTO a_old VALUES (2);
         CREATE TABLE a (id INT PRIMARY KEY);
         INSERT INTO a VALUES (3);
         ALTER TABLE a ADD COLUMN n INT, RENAME TO a_gone;
         INSERT INTO b VALUES (1);
         RENAME TABLE b TO b_tmp, b_tmp TO b;
         ALTER TABLE b RENAME COLUMN id TO key_id;
         INSERT INTO b VALUES (2)",
    )
    .await;
    let pages = read_pages(&src, Some(start), 10).await.expect("read");
    let (a, b) = (db.table("a"), db.table("b"));
    // The column rename is a schema-change record before b's first row of the new shape.
    let (schema, rows): (Vec<J>, Vec<J>) =
        records(&pages).into_iter().partition(|r| r["op"] == "s");
    assert_eq!(schema.len(), 1, "{schema:?}");
    assert_eq!(schema[0]["table"], b.as_str());
    assert_eq!(
        schema[0]["after"]["changes"][0]["kind"], "rename",
        "{schema:?}"
    );
    assert_eq!(
        changes(&rows),
        [
            format!(r#"c {a} null {{"id":1}}"#),
            format!("t {a} null null"),
            format!(r#"c {a} null {{"id":3}}"#),
            format!("t {a} null null"),
            format!(r#"c {b} null {{"id":1}}"#),
            format!(r#"c {b} null {{"key_id":2}}"#),
        ],
        "renamed away: its name has no rows; renamed and back in one statement: nothing"
    );
    let end = last_bookmark(&pages);
    // The cut-over of pt-online-schema-change / gh-ost: rows written under `_a_new` arrive
    // under a listed name. They were never read as changes of `a`: a typed error.
    db.exec(
        "CREATE TABLE a (id INT PRIMARY KEY);
         INSERT INTO a VALUES (5);
         CREATE TABLE _a_new (id INT PRIMARY KEY, extra INT);
         INSERT INTO _a_new VALUES (5, 0), (6, 0);
         RENAME TABLE a TO _a_old2, _a_new TO a",
    )
    .await;
    let e = read_pages(&src, Some(end.clone()), 10)
        .await
        .expect_err("a table renamed into a listed name");
    let message = e.to_string();
    for part in [
        format!("the listed table {a} is {}._a_new renamed", db.db),
        "RENAME TABLE a TO _a_old2, _a_new TO a".to_owned(),
        end["binlog_file"].as_str().expect("file").to_owned(),
        "faucet replicate".to_owned(),
    ] {
        assert!(message.contains(&part), "{part:?} in {message}");
    }
    assert_eq!(e.kind(), "read");
    assert!(!e.is_retryable());
    db.drop_db().await;
}

#[tokio::test]
async fn events_before_an_alter_to_inet6_decode_by_the_type_they_were_written_with() {
    let mut db = TestDb::new("cdc_asof").await;
    db.exec(
        "CREATE TABLE t (id INT PRIMARY KEY, c VARCHAR(40));
         CREATE TABLE u (id INT PRIMARY KEY, c INET6)",
    )
    .await;
    let src = source(&db, &["t"], 12);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec(
        "INSERT INTO t VALUES (1, '::1'), (2, '2001:db8::1');
         ALTER TABLE t MODIFY c INET6;
         INSERT INTO t VALUES (3, '::ffff:1.2.3.4')",
    )
    .await;
    // The reader starts from before both, with today's catalog saying INET6.
    let recs = records(&read_pages(&src, Some(start), 10).await.expect("read"));
    // The type change is a schema-change record between the rows (module `shapes`).
    let ops: Vec<&J> = recs.iter().map(|r| &r["op"]).collect();
    assert_eq!(ops, ["c", "c", "s", "c"], "{recs:?}");
    let values: Vec<&J> = recs
        .iter()
        .filter(|r| r["op"] != "s")
        .map(|r| &r["after"]["c"])
        .collect();
    assert_eq!(
        values,
        [
            &J::from("::1"),
            &J::from("2001:db8::1"),
            &J::from("::ffff:1.2.3.4")
        ],
        "VARCHAR text before the ALTER, INET6 after"
    );

    // The other way: INET6 events, then the column becomes VARCHAR. The binlog logs INET6
    // as BINARY(16); today's catalog says VARCHAR: which it was cannot be known.
    let src = source(&db, &["u"], 12);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec(
        "INSERT INTO u VALUES (1, '::1');
         ALTER TABLE u MODIFY c VARCHAR(40);
         INSERT INTO u VALUES (2, 'x')",
    )
    .await;
    let e = read_pages(&src, Some(start.clone()), 10)
        .await
        .expect_err("an INET6 event decoded by a VARCHAR catalog");
    let message = e.to_string();
    for part in [
        db.table("u"),
        "`c`".to_owned(),
        "BINARY(16)".to_owned(),
        "declares it VARCHAR".to_owned(),
        start["binlog_file"].as_str().expect("file").to_owned(),
        "faucet replicate".to_owned(),
    ] {
        assert!(message.contains(&part), "{part:?} in {message}");
    }
    db.drop_db().await;
}
