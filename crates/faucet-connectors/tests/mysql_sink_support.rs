//! Helpers of the `mysql` sink tests: the target server (`FAUCET_TEST_MYSQL_SINK_URL`,
//! default the system MariaDB `mysql://root@127.0.0.1:3306/test`: the sink needs no binlog,
//! so its tests spread the load off the private server), one database per test, the sinks,
//! and reading a target table back as text.

use std::future::Future;
use std::pin::Pin;

use faucet_connectors::mysql::{MysqlSink, MysqlSinkConfig};
use mysql_async::prelude::Queryable as _;
use mysql_async::{Conn, Opts};
use serde_json::Value as Json;

use crate::mysql_support::TestDb;

/// The sink tests' server.
pub(crate) fn sink_server_url() -> String {
    std::env::var("FAUCET_TEST_MYSQL_SINK_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// The sink tests' server with database `db`.
pub(crate) fn url_for(db: &str) -> String {
    let url = sink_server_url();
    let base = url.rsplit_once('/').map_or(url.as_str(), |(b, _)| b);
    format!("{base}/{db}")
}

/// A session on the sink tests' server.
pub(crate) async fn admin() -> Conn {
    let opts = Opts::from_url(&sink_server_url()).expect("FAUCET_TEST_MYSQL_SINK_URL parses");
    let opts = mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
    faucet_test_support::Service::Mysql.expect_up(Conn::new(opts).await)
}

/// A fresh database `t_<name>_<suffix>` on the sink tests' server.
pub(crate) async fn sink_db(name: &str) -> TestDb {
    let mut conn = admin().await;
    let db = format!("t_{name}_{}", faucet_test_support::unique_suffix());
    conn.query_drop(format!(
        "CREATE DATABASE `{db}` CHARACTER SET utf8mb4; USE `{db}`"
    ))
    .await
    .unwrap_or_else(|e| panic!("create database {db}: {e}"));
    TestDb { conn, db }
}

/// An append sink on `table` of `db`.
pub(crate) fn append_sink(db: &TestDb, table: &str) -> MysqlSink {
    MysqlSink::new(MysqlSinkConfig::new(url_for(&db.db), table)).expect("config")
}

/// An upsert sink on `table` of `db` by `key`.
pub(crate) fn upsert_sink(db: &TestDb, table: &str, key: &[&str]) -> MysqlSink {
    MysqlSink::new(MysqlSinkConfig::new(url_for(&db.db), table).upsert(key.iter().copied()))
        .expect("config")
}

/// `Some(v)` as an owned string: one cell of [`texts`].
pub(crate) fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

/// Every row of `sql` as text (the text protocol: the server's own rendering; NULL as `None`).
pub(crate) async fn texts(db: &mut TestDb, sql: &str) -> Vec<Vec<Option<String>>> {
    let rows: Vec<mysql_async::Row> = db
        .conn
        .query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.into_iter()
        .map(|r| {
            r.unwrap()
                .into_iter()
                .map(|v| match v {
                    mysql_async::Value::NULL => None,
                    mysql_async::Value::Bytes(b) => Some(String::from_utf8_lossy(&b).into_owned()),
                    other => Some(other.as_sql(true)),
                })
                .collect()
        })
        .collect()
}

/// A read-back closure for the conformance checks: `(id, v)` of `table` as JSON objects,
/// ordered by id.
pub(crate) fn read_back(
    db: &str,
    table: &str,
) -> impl Fn() -> Pin<Box<dyn Future<Output = Vec<Json>> + Send>> + use<> {
    let sql = format!("SELECT JSON_OBJECT('id', id, 'v', v) FROM `{db}`.`{table}` ORDER BY id");
    move || {
        let sql = sql.clone();
        Box::pin(async move {
            let mut conn = admin().await;
            let rows: Vec<String> = conn.query(&sql).await.expect("read back");
            rows.iter()
                .map(|r| serde_json::from_str(r).expect("json row"))
                .collect()
        })
    }
}
