//! Every row of the MySQL value table of docs/values.md through the `mysql` query source, against the
//! private MariaDB (scripts/services.sh), asserted as exact JSON text: integer extremes
//! (BIGINT UNSIGNED max), DECIMAL digits, FLOAT without f64 noise, BIT(64), dates, DATETIME
//! and TIMESTAMP fractions (TIMESTAMP written under a +05:30 session and read as UTC), TIME
//! past 24 hours and negative, YEAR 0, latin1 and utf8mb4 text, BINARY(4) with its trailing
//! zeros, ENUM/SET, JSON, UUID/INET4/INET6, spatial, zero dates (NULL by policy), NULLs.

use faucet_connectors::mysql::catalog::TableCatalog;
use faucet_connectors::mysql::value::{Collations, columns_of_table_map, to_value};
use faucet_connectors::mysql::{MysqlConnection, MysqlQueryConfig, MysqlQuerySource};
use faucet_core::value::json::{write_str, write_value};
use faucet_core::{DataType, Source as _};
use futures_util::StreamExt as _;
use mysql_async::binlog::events::{EventData, RowsEventData};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable as _;

use crate::mysql_private::PrivateMariadb;
use crate::mysql_support::TestDb;
use crate::support::{json_lines, read_pages};

use faucet_test_support::mysql_value_table;

/// The table of every type; `id` orders the rows.
pub(crate) const VALUE_TABLE: &str = concat!(
    "CREATE TABLE v (\n    id INT PRIMARY KEY,\n    ",
    mysql_value_table!(columns_ddl),
    "\n) DEFAULT CHARSET = utf8mb4"
);

/// The rows, written under a +05:30 session zone and a permissive sql_mode (zero dates).
pub(crate) const VALUE_ROWS: &str = concat!(
    "SET SESSION time_zone = '+05:30', SESSION sql_mode = '';\nINSERT INTO v VALUES\n (1, ",
    mysql_value_table!(row 0),
    "),\n (2, ",
    mysql_value_table!(row 1),
    "),\n (3, ",
    mysql_value_table!(row 2),
    ");\nSET SESSION time_zone = '+00:00'"
);

/// The JSON lines of [`VALUE_ROWS`], by docs/delivery.md's table (and the module's zero-date
/// policy: NULL).
pub(crate) const VALUE_JSON: [&str; 3] = [
    concat!(r#"{"id":1,"#, mysql_value_table!(json 0), "}"),
    concat!(r#"{"id":2,"#, mysql_value_table!(json 1), "}"),
    concat!(r#"{"id":3,"#, mysql_value_table!(json 2), "}"),
];

#[tokio::test]
async fn every_type_of_the_value_table_is_exact() {
    // A private server whose own zone is not UTC (the shared one's global settings are left
    // alone): faucet's session pins +00:00 itself.
    let server = PrivateMariadb::start_with(1, &["--default-time-zone=+05:30"]).await;
    server.exec(VALUE_TABLE).await;
    server.exec(VALUE_ROWS).await;
    assert_eq!(server.column("SELECT @@GLOBAL.time_zone").await, ["+05:30"]);
    let source =
        MysqlQuerySource::new(MysqlQueryConfig::for_table(server.url("test"), "v")).expect("valid");
    let read = read_pages(&source, None, 2).await;
    let pages = read.expect("read");
    let lines = json_lines(&pages);
    assert_eq!(lines.len(), 3);
    for (got, want) in lines.iter().zip(VALUE_JSON) {
        assert_eq!(got, want);
    }
    // Typed for a typed sink: one type per column, whatever the value.
    let schema = pages[0].schema();
    let ty = |name: &str| {
        schema.fields()[schema.index_of(name).expect(name)]
            .data_type
            .clone()
    };
    assert_eq!(ty("bi"), DataType::Int);
    assert_eq!(ty("bu"), DataType::Numeric);
    assert_eq!(ty("b64"), DataType::Numeric);
    assert_eq!(ty("b1"), DataType::Int);
    assert_eq!(ty("f"), DataType::Float);
    assert_eq!(ty("ts"), DataType::TimestampTz);
    assert_eq!(ty("dtm"), DataType::Timestamp);
    assert_eq!(ty("tm"), DataType::Interval);
    assert_eq!(ty("bn"), DataType::Bytes);
    assert_eq!(ty("c"), DataType::Text);
    assert_eq!(ty("j"), DataType::Json);
    assert_eq!(ty("g"), DataType::Json);
    assert_eq!(ty("u"), DataType::Text);
}

#[tokio::test]
async fn a_query_reads_the_same_values_and_checks() {
    let mut db = TestDb::new("values_q").await;
    db.exec(VALUE_TABLE).await;
    db.exec(VALUE_ROWS).await;
    let mut config = MysqlQueryConfig::for_table(db.url(), "v");
    config.table = None;
    config.query = Some("SELECT id, bu, f, ts, tm, c, bn FROM v WHERE id <= 2 ORDER BY id".into());
    let source = MysqlQuerySource::new(config).expect("valid");
    source.check().await.expect("check");
    let lines = json_lines(&read_pages(&source, None, 10).await.expect("read"));
    assert_eq!(
        lines,
        [
            r#"{"id":1,"bu":0,"f":0.1,"ts":"2024-02-29T12:45:00.123Z","tm":"-838:59:59.000000","c":"café","bn":"AQIAAA=="}"#,
            r#"{"id":2,"bu":18446744073709551615,"f":-123.456,"ts":"2038-01-19T03:14:07.999Z","tm":"838:59:59.000000","c":"abc","bn":"AAAAAA=="}"#,
        ]
    );
    db.drop_db().await;
}

/// The same rows read back from the binlog (a replica's stream, non-blocking: it ends at the
/// end of the log), decoded through the TABLE_MAP's column models and the same `to_value`:
/// the JSON is identical to the SELECT's, value for value.
#[tokio::test]
async fn the_binlog_decodes_the_value_table_to_the_same_json() {
    let mut db = TestDb::new("values_binlog").await;
    db.exec(VALUE_TABLE).await;
    let status: Vec<mysql_async::Row> = db
        .conn
        .query("SHOW MASTER STATUS")
        .await
        .expect("binlog status");
    let row = status
        .into_iter()
        .next()
        .expect("the test server has a binlog");
    let (file, pos): (String, u64) = (row.get(0).expect("file"), row.get(1).expect("pos"));
    db.exec(VALUE_ROWS).await;
    let connection = MysqlConnection::parse(&db.url().into(), "url", "test").expect("url");
    let mut conn = connection.connect().await.expect("connect");
    let collations = Collations::load(&mut conn).await.expect("collations");
    // The binlog does not name MariaDB's UUID/INET/JSON types: the catalog does.
    let catalog = TableCatalog::load(&mut conn, &connection, &db.db, "v")
        .await
        .expect("catalog");
    let server_id = 900_000 + std::process::id() % 90_000;
    let request = mysql_async::BinlogStreamRequest::new(server_id)
        .with_filename(file.as_bytes())
        .with_pos(pos)
        .with_non_blocking();
    let mut stream = conn
        .get_binlog_stream(request)
        .await
        .expect("binlog stream");
    let mut lines = Vec::new();
    while let Some(event) = stream.next().await {
        let event = event.expect("event");
        let Some(EventData::RowsEvent(rows)) = event.read_data().expect("event data") else {
            continue;
        };
        // MariaDB logs version-1 row events.
        if !matches!(
            rows,
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)
        ) {
            continue;
        }
        let tme = stream.get_tme(rows.table_id()).expect("table map").clone();
        if tme.table_name() != "v" || tme.database_name() != db.db {
            continue;
        }
        let columns: Vec<_> = columns_of_table_map(&tme, &collations)
            .expect("column models")
            .into_iter()
            .map(|c| catalog.declare(c))
            .collect();
        for row in rows.rows(&tme) {
            let (_, after) = row.expect("row");
            let values = after.expect("an insert has an after image").unwrap();
            let mut line = vec![b'{'];
            for (i, (column, value)) in columns.iter().zip(values).enumerate() {
                if i > 0 {
                    line.push(b',');
                }
                write_str(&mut line, &column.name);
                line.push(b':');
                let BinlogValue::Value(v) = value else {
                    panic!("{}: not a plain value", column.name);
                };
                let value = to_value(column, v).unwrap_or_else(|e| panic!("{}: {e}", column.name));
                write_value(&mut line, &value);
            }
            line.push(b'}');
            lines.push(String::from_utf8(line).expect("utf8"));
        }
    }
    assert_eq!(lines.len(), 3);
    for (got, want) in lines.iter().zip(VALUE_JSON) {
        assert_eq!(got, want);
    }
    db.drop_db().await;
}
