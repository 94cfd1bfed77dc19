//! Every row of DESIGN.md's MySQL value table read both ways: the binlog's row images
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
