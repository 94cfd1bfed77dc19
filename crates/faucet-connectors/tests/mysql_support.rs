//! Helpers shared by every MySQL/MariaDB test (query source, `mysql-cdc`): the server from
//! `FAUCET_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3307/test`, the private MariaDB
//! with a binlog that scripts/services.sh starts), one database per test, statements.
//!
//! Tests share the server: none changes its global settings (a test that needs other ones
//! starts a `mysql_private::PrivateMariadb`); set the session zone before writing TIMESTAMP
//! values.

use mysql_async::prelude::Queryable as _;
use mysql_async::{Conn, Opts};

/// The test server's URL (its database is `test`; each test makes its own database).
pub(crate) use faucet_test_support::mysql_url;

/// The test server's URL with database `db` instead of the default one.
pub(crate) fn mysql_url_for(db: &str) -> String {
    let url = mysql_url();
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b.to_owned(), format!("?{q}")),
        None => (url.clone(), String::new()),
    };
    let base = match base.rfind('/') {
        Some(i) if i > "mysql://".len() => base[..i].to_owned(),
        _ => base,
    };
    format!("{base}/{db}{query}")
}

/// A session on the test server (no session setup: the server's own zone and charset, as
/// a workload sees them); fails the test, naming the service and the script that starts it,
/// when the server is unreachable.
pub(crate) async fn admin() -> Conn {
    let opts = Opts::from_url(&mysql_url()).expect("FAUCET_TEST_MYSQL_URL parses");
    let opts = mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
    faucet_test_support::Service::Mysql.expect_up(Conn::new(opts).await)
}

/// A fresh database `t_<name>_<pid>` (dropped first if left over, dropped again by
/// [`TestDb::drop_db`]) and a session using it.
pub(crate) struct TestDb {
    /// The session (its default database is [`TestDb::db`]).
    pub(crate) conn: Conn,
    /// The database name.
    pub(crate) db: String,
}

impl TestDb {
    /// Creates the database.
    pub(crate) async fn new(name: &str) -> Self {
        let mut conn = admin().await;
        let db = format!("t_{name}_{}", std::process::id());
        conn.query_drop(format!(
            "DROP DATABASE IF EXISTS `{db}`; CREATE DATABASE `{db}` CHARACTER SET utf8mb4; USE `{db}`"
        ))
        .await
        .unwrap_or_else(|e| panic!("create database {db}: {e}"));
        Self { conn, db }
    }

    /// The URL of this database.
    pub(crate) fn url(&self) -> String {
        mysql_url_for(&self.db)
    }

    /// `db.table`.
    pub(crate) fn table(&self, table: &str) -> String {
        format!("{}.{table}", self.db)
    }

    /// Runs `sql` (several statements allowed, text protocol).
    pub(crate) async fn exec(&mut self, sql: &str) {
        self.conn
            .query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The first column of every row of `sql`, as text (NULL as `None`).
    pub(crate) async fn column(&mut self, sql: &str) -> Vec<Option<String>> {
        self.conn
            .query::<Option<String>, _>(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Drops the database.
    pub(crate) async fn drop_db(mut self) {
        let db = self.db.clone();
        self.exec(&format!("DROP DATABASE IF EXISTS `{db}`")).await;
        let _ = self.conn.disconnect().await;
    }
}
