//! A private MariaDB with a binlog, started by a test that changes global settings or breaks
//! the server (the shared one on 3307 must not see that), stopped when dropped: the
//! test-support server (≈ 4 s to initialize, 1–2 s to start), with mysql_async helpers.

use std::time::{Duration, Instant};

/// A running private server: the test-support one ([`faucet_test_support::private_mariadb`]),
/// driven here with mysql_async.
pub(crate) struct PrivateMariadb {
    inner: faucet_test_support::private_mariadb::PrivateMariadb,
    /// Its port on 127.0.0.1.
    pub(crate) port: u16,
}

impl PrivateMariadb {
    /// Initializes and starts a server with `--server-id=server_id` and the binlog settings
    /// mysql-cdc needs; fails the test naming what is missing when it cannot.
    pub(crate) async fn start(server_id: u32) -> Self {
        Self::start_with(server_id, &[]).await
    }

    /// [`PrivateMariadb::start`] with more server options (`--default-time-zone=+05:30`).
    pub(crate) async fn start_with(server_id: u32, options: &[&str]) -> Self {
        let options: Vec<String> = options.iter().map(|o| (*o).to_owned()).collect();
        let inner = tokio::task::spawn_blocking(move || {
            let options: Vec<&str> = options.iter().map(String::as_str).collect();
            faucet_test_support::private_mariadb::PrivateMariadb::start_with(server_id, &options)
        })
        .await
        .expect("the private MariaDB starts");
        Self {
            port: inner.port(),
            inner,
        }
    }

    /// `mysql://root@127.0.0.1:port/db`.
    pub(crate) fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    /// Runs `sql` as root in database `test`.
    pub(crate) async fn exec(&self, sql: &str) {
        use mysql_async::prelude::Queryable as _;
        let mut conn =
            mysql_async::Conn::new(mysql_async::Opts::from_url(&self.url("test")).expect("url"))
                .await
                .expect("connect to the private MariaDB");
        conn.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let _ = conn.disconnect().await;
    }

    /// The first column of the rows of `sql`, as text.
    pub(crate) async fn column(&self, sql: &str) -> Vec<String> {
        use mysql_async::prelude::Queryable as _;
        let mut conn =
            mysql_async::Conn::new(mysql_async::Opts::from_url(&self.url("test")).expect("url"))
                .await
                .expect("connect to the private MariaDB");
        let rows: Vec<mysql_async::Row> = conn
            .query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let _ = conn.disconnect().await;
        rows.iter()
            .map(|r| {
                r.get_opt::<String, _>(0)
                    .and_then(Result::ok)
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Makes this server a replica of `primary` from `primary`'s current GTID state (the
    /// tables it needs made here beforehand, outside the binlog): `gtid_slave_pos` set to
    /// the primary's `@@gtid_binlog_pos`, `CHANGE MASTER TO … MASTER_USE_GTID=slave_pos`,
    /// `START SLAVE`. Start it with `--log-slave-updates=ON` so it logs what it applies.
    pub(crate) async fn replicate_from(&self, primary: &PrivateMariadb) {
        let at = primary.column("SELECT @@GLOBAL.gtid_binlog_pos").await;
        self.exec(&format!(
            "SET GLOBAL gtid_slave_pos = '{}'; CHANGE MASTER TO MASTER_HOST = '127.0.0.1', \
             MASTER_PORT = {}, MASTER_USER = 'root', MASTER_USE_GTID = slave_pos; START SLAVE",
            at.first().map_or("", String::as_str),
            primary.port
        ))
        .await;
    }

    /// Waits (up to 20 s) until this replica has applied everything `primary` logged
    /// (`@@gtid_slave_pos` reaches the primary's `@@gtid_binlog_pos`, domains in any order).
    pub(crate) async fn wait_caught_up(&self, primary: &PrivateMariadb) {
        let sorted = |v: Vec<String>| {
            let mut parts: Vec<String> = v
                .first()
                .map(|s| s.split(',').map(|p| p.trim().to_owned()).collect())
                .unwrap_or_default();
            parts.sort();
            parts
        };
        let want = sorted(primary.column("SELECT @@GLOBAL.gtid_binlog_pos").await);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let has = sorted(self.column("SELECT @@GLOBAL.gtid_slave_pos").await);
            if has == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not catch up: it has {has:?}, the primary {want:?}; see {}",
                self.inner.error_log().display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the server and starts it again on the same data with another server id.
    pub(crate) async fn restart(&mut self, server_id: u32) {
        self.inner.restart(server_id);
    }
}
