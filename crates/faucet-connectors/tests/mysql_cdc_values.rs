//! Every row of the MySQL value table of docs/values.md read both ways: the binlog's row images
//! (`mysql-cdc`, inserted and then deleted) serialize exactly as the same rows read by a
//! SELECT (the `mysql` query source), and as the expected JSON of `mysql_values`.

use faucet_connectors::mysql::{MysqlQueryConfig, MysqlQuerySource};

use crate::mysql_cdc::{last_bookmark, records, source};
use crate::mysql_support::TestDb;
use crate::mysql_values::{VALUE_JSON, VALUE_ROWS, VALUE_TABLE};
use crate::support::{json_lines, read_pages};

#[tokio::test]
async fn every_type_reads_the_same_from_the_binlog_as_from_select() {
    let mut db = TestDb::new("cdc_values").await;
    db.exec(VALUE_TABLE).await;
    let src = source(&db, &["v"], 3);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec(VALUE_ROWS).await;
    let select = MysqlQuerySource::new(MysqlQueryConfig::for_table(db.url(), "v")).expect("valid");
    let selected = json_lines(&read_pages(&select, None, 10).await.expect("select"));
    db.exec("DELETE FROM v").await;
    let recs = records(&read_pages(&src, Some(start), 10).await.expect("binlog"));
    assert_eq!(recs.len(), 6, "3 inserts, 3 deletes");
    let text = |v: &serde_json::Value| serde_json::to_string(v).expect("json");
    for (i, want) in VALUE_JSON.iter().enumerate() {
        assert_eq!(&selected[i], want, "SELECT, row {}", i + 1);
        assert_eq!(recs[i]["op"], "c");
        assert_eq!(
            &text(&recs[i]["after"]),
            want,
            "binlog insert, row {}",
            i + 1
        );
        assert_eq!(recs[i + 3]["op"], "d");
        assert_eq!(
            &text(&recs[i + 3]["before"]),
            want,
            "binlog delete, row {}",
            i + 1
        );
    }
    db.drop_db().await;
}

/// Negative TIME values with one to six fraction digits (mysql_common mis-decodes TIME(1)
/// and TIME(2) ones: see `mysql::value::binlog`) read the same from the binlog as from SELECT.
#[tokio::test]
async fn negative_times_with_every_precision_read_the_same_both_ways() {
    let mut db = TestDb::new("cdc_times").await;
    db.exec(
        "CREATE TABLE tm (id INT PRIMARY KEY, t0 TIME, t1 TIME(1), t2 TIME(2), t3 TIME(3), \
         t4 TIME(4), t6 TIME(6))",
    )
    .await;
    let src = source(&db, &["tm"], 3);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec(
        "INSERT INTO tm VALUES
         (1, '-00:00:01', '-00:00:01.5', '-00:00:01.25', '-00:00:01.125', '-00:00:01.0625',
             '-00:00:01.000001'),
         (2, '-838:59:59', '-838:59:58.9', '-838:59:58.99', '-12:00:00.001', '-0:0:0.5',
             '-838:59:58.999999'),
         (3, '25:00:00', '00:00:00.1', '838:59:58.99', '00:00:00.999', '-00:00:00.0001',
             '00:00:00')",
    )
    .await;
    let select = MysqlQuerySource::new(MysqlQueryConfig::for_table(db.url(), "tm")).expect("ok");
    let selected = json_lines(&read_pages(&select, None, 10).await.expect("select"));
    assert_eq!(
        selected[0],
        r#"{"id":1,"t0":"-00:00:01","t1":"-00:00:01.5","t2":"-00:00:01.25","t3":"-00:00:01.125","t4":"-00:00:01.0625","t6":"-00:00:01.000001"}"#
    );
    let recs = records(&read_pages(&src, Some(start), 10).await.expect("binlog"));
    assert_eq!(recs.len(), 3);
    for (i, want) in selected.iter().enumerate() {
        let got = serde_json::to_string(&recs[i]["after"]).expect("json");
        assert_eq!(&got, want, "row {}", i + 1);
    }
    db.drop_db().await;
}

/// Negative signed integers of every width, MEDIUMINT's among them (mysql_common's binlog
/// decoder does not sign-extend a 3-byte integer: -1 came out as 16777215), read the same
/// from the binlog as from SELECT.
#[tokio::test]
async fn negative_integers_of_every_width_read_the_same_both_ways() {
    let mut db = TestDb::new("cdc_ints").await;
    db.exec(
        "CREATE TABLE it (id INT PRIMARY KEY, t TINYINT, s SMALLINT, m MEDIUMINT, i INT, \
         b BIGINT, mu MEDIUMINT UNSIGNED)",
    )
    .await;
    let src = source(&db, &["it"], 3);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec(
        "INSERT INTO it VALUES
         (1, -1, -1, -1, -1, -1, 16777215),
         (2, -128, -32768, -8388608, -2147483648, -9223372036854775808, 8388608),
         (3, 127, 32767, 8388607, 2147483647, 9223372036854775807, 0),
         (4, -2, -300, -70000, -5000000, -6000000000, 1)",
    )
    .await;
    let select = MysqlQuerySource::new(MysqlQueryConfig::for_table(db.url(), "it")).expect("ok");
    let selected = json_lines(&read_pages(&select, None, 10).await.expect("select"));
    assert_eq!(
        selected[0],
        r#"{"id":1,"t":-1,"s":-1,"m":-1,"i":-1,"b":-1,"mu":16777215}"#
    );
    let recs = records(&read_pages(&src, Some(start), 10).await.expect("binlog"));
    assert_eq!(recs.len(), 4);
    for (i, want) in selected.iter().enumerate() {
        let got = serde_json::to_string(&recs[i]["after"]).expect("json");
        assert_eq!(&got, want, "row {}", i + 1);
    }
    db.drop_db().await;
}

/// MariaDB counts a GEOMETRY column among a table map's charset columns: text columns after
/// a POINT keep their own charsets (they came out shifted by one: latin1 text as base64,
/// utf8mb4 text decoded as latin1) and read the same from the binlog as from SELECT.
#[tokio::test]
async fn text_columns_after_a_geometry_column_keep_their_charsets() {
    let mut db = TestDb::new("cdc_geom_cs").await;
    db.exec(
        "CREATE TABLE gt (id INT PRIMARY KEY, g POINT, a VARCHAR(5) CHARACTER SET latin1, \
         b VARCHAR(5), p POLYGON, j JSON, u UUID, z VARCHAR(3)) DEFAULT CHARSET = utf8mb4",
    )
    .await;
    let src = source(&db, &["gt"], 3);
    let start = last_bookmark(&read_pages(&src, None, 10).await.expect("first run"));
    db.exec(
        "INSERT INTO gt VALUES (1, POINT(1, 1), 'é', 'ü€', \
         ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))'), '[1]', \
         '00112233-4455-6677-8899-aabbccddeeff', 'zz'), \
         (2, NULL, 'ß', NULL, NULL, NULL, NULL, 'ok')",
    )
    .await;
    // The server holds the text itself (not bytes of another charset).
    assert_eq!(
        db.column("SELECT CONCAT(HEX(a), ' ', b) FROM gt ORDER BY id")
            .await,
        [Some("E9 ü€".to_owned()), None]
    );
    let select = MysqlQuerySource::new(MysqlQueryConfig::for_table(db.url(), "gt")).expect("ok");
    let selected = json_lines(&read_pages(&select, None, 10).await.expect("select"));
    let recs = records(&read_pages(&src, Some(start), 10).await.expect("binlog"));
    assert_eq!(recs.len(), 2);
    for (i, want) in selected.iter().enumerate() {
        let got = serde_json::to_string(&recs[i]["after"]).expect("json");
        assert_eq!(&got, want, "row {}", i + 1);
    }
    let text = |r: &serde_json::Value, c: &str| r["after"][c].clone();
    assert_eq!(text(&recs[0], "a"), "é");
    assert_eq!(text(&recs[0], "b"), "ü€");
    assert_eq!(text(&recs[0], "z"), "zz");
    assert_eq!(text(&recs[1], "a"), "ß");
    assert_eq!(text(&recs[1], "z"), "ok");
    db.drop_db().await;
}
