//! Every row of DESIGN.md's MySQL value table through the `mysql` query source, against the
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

/// The table of every type; `id` orders the rows.
pub(crate) const VALUE_TABLE: &str = "CREATE TABLE v (
    id INT PRIMARY KEY,
    ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED, i INT,
    iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
    d DECIMAL(20,4), f FLOAT, db DOUBLE, b1 BIT(1), b64 BIT(64),
    dt DATE, dtm DATETIME(6), dt0 DATETIME, ts TIMESTAMP(3) NULL, tm TIME(6), y YEAR,
    c CHAR(5) CHARACTER SET latin1, vc VARCHAR(20) CHARACTER SET utf8mb4,
    tx TEXT CHARACTER SET latin1,
    bn BINARY(4), vb VARBINARY(8), bl BLOB,
    e ENUM('small','large'), s SET('a','b','c'),
    j JSON, u UUID, i4 INET4, i6 INET6, g POINT
) DEFAULT CHARSET = utf8mb4";

/// The rows, written under a +05:30 session zone and a permissive sql_mode (zero dates).
pub(crate) const VALUE_ROWS: &str = "SET SESSION time_zone = '+05:30', SESSION sql_mode = '';
INSERT INTO v VALUES
 (1, -128, 0, -32768, 0, -2147483648, 0, -9223372036854775808, 0,
  -1234567890123456.1234, 0.1, 0.1, b'0', 0,
  '1000-01-01', '1000-01-01 00:00:00.000001', '2024-02-29 13:45:00', '2024-02-29 18:15:00.123',
  '-838:59:59.000000', 0,
  'café', '日本語😀', 'Ünïcödé',
  x'0102', x'00ff', x'',
  'small', 'c,a',
  '{\"k\": [1, 2.50, \"x\"]}', '00112233-4455-6677-8899-aabbccddeeff', '192.168.0.1',
  '::ffff:1.2.3.4', ST_GeomFromText('POINT(1 2)', 4326)),
 (2, 127, 255, 32767, 16777215, 2147483647, 4294967295, 9223372036854775807,
  18446744073709551615,
  9999999999999999.9999, -123.456, 1.7976931348623157e308, b'1', 18446744073709551615,
  '9999-12-31', '9999-12-31 23:59:59.999999', '0000-00-00 00:00:00', '2038-01-19 08:44:07.999',
  '838:59:59.000000', 2155,
  'abc', '', '',
  x'00000000', x'', x'deadbeef',
  'large', '',
  '[]', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '0.0.0.0',
  '2001:db8::1', ST_GeomFromText('POINT(0 0)')),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  '0000-00-00', '2024-00-10 00:00:00', NULL, NULL, '-00:00:01.500000', NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
SET SESSION time_zone = '+00:00'";

/// The JSON lines of [`VALUE_ROWS`], by DESIGN.md's table (and the module's zero-date
/// policy: NULL).
pub(crate) const VALUE_JSON: [&str; 3] = [
    r#"{"id":1,"ti":-128,"tu":0,"si":-32768,"mi":0,"i":-2147483648,"iu":0,"bi":-9223372036854775808,"bu":0,"d":-1234567890123456.1234,"f":0.1,"db":0.1,"b1":0,"b64":0,"dt":"1000-01-01","dtm":"1000-01-01T00:00:00.000001","dt0":"2024-02-29T13:45:00","ts":"2024-02-29T12:45:00.123Z","tm":"-838:59:59.000000","y":0,"c":"café","vc":"日本語😀","tx":"Ünïcödé","bn":"AQIAAA==","vb":"AP8=","bl":"","e":"small","s":"a,c","j":{"k":[1,2.50,"x"]},"u":"00112233-4455-6677-8899-aabbccddeeff","i4":"192.168.0.1","i6":"::ffff:1.2.3.4","g":{"srid":4326,"wkb":"AQEAAAAAAAAAAADwPwAAAAAAAABA"}}"#,
    r#"{"id":2,"ti":127,"tu":255,"si":32767,"mi":16777215,"i":2147483647,"iu":4294967295,"bi":9223372036854775807,"bu":18446744073709551615,"d":9999999999999999.9999,"f":-123.456,"db":1.7976931348623157e+308,"b1":1,"b64":18446744073709551615,"dt":"9999-12-31","dtm":"9999-12-31T23:59:59.999999","dt0":null,"ts":"2038-01-19T03:14:07.999Z","tm":"838:59:59.000000","y":2155,"c":"abc","vc":"","tx":"","bn":"AAAAAA==","vb":"","bl":"3q2+7w==","e":"large","s":"","j":[],"u":"ffffffff-ffff-ffff-ffff-ffffffffffff","i4":"0.0.0.0","i6":"2001:db8::1","g":{"srid":0,"wkb":"AQEAAAAAAAAAAAAAAAAAAAAAAAAA"}}"#,
    r#"{"id":3,"ti":null,"tu":null,"si":null,"mi":null,"i":null,"iu":null,"bi":null,"bu":null,"d":null,"f":null,"db":null,"b1":null,"b64":null,"dt":null,"dtm":null,"dt0":null,"ts":null,"tm":"-00:00:01.500000","y":null,"c":null,"vc":null,"tx":null,"bn":null,"vb":null,"bl":null,"e":null,"s":null,"j":null,"u":null,"i4":null,"i6":null,"g":null}"#,
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
