//! A private MariaDB with a binlog, started by a test that changes global settings or breaks
//! the server (the shared one on 3307 must not see that), stopped when dropped. The commands
//! are those `scripts/services.sh` runs for the shared one (`mariadb-install-db` and
//! `mariadbd`, both `--no-defaults`; docs/testing.md): ≈ 4 s to initialize, 1–2 s to start.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running private server.
pub(crate) struct PrivateMariadb {
    child: Child,
    dir: tempfile::TempDir,
    /// Server options beyond the binlog settings (kept across restarts).
    options: Vec<String>,
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
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        // Its own tmpdir: the bootstrap's temporary tables are files there, and under load a
        // bootstrap sharing /tmp with others was seen losing one (ERROR 1051 on
        // `mysql.tmp_proxies_priv`); one retry from an empty data directory besides.
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).expect("tmpdir");
        let install = || {
            let _ = std::fs::remove_dir_all(&data);
            Command::new("mariadb-install-db")
                .args([
                    "--no-defaults",
                    "--basedir=/usr",
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ])
                .arg(format!("--datadir={}", data.display()))
                .arg(format!("--tmpdir={}", tmp.display()))
                .output()
                .unwrap_or_else(|e| {
                    panic!("mariadb-install-db (package mariadb-server) cannot run: {e}")
                })
        };
        let mut out = install();
        if !out.status.success() {
            out = install();
        }
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let options: Vec<String> = options.iter().map(|o| (*o).to_owned()).collect();
        let mut server = Self {
            child: Self::spawn(&dir, port, server_id, &options),
            dir,
            options,
            port,
        };
        server.wait_up().await;
        server.exec("CREATE DATABASE test").await;
        server
    }

    fn spawn(dir: &tempfile::TempDir, port: u16, server_id: u32, options: &[String]) -> Child {
        let d = dir.path();
        Command::new("mariadbd")
            .args([
                "--no-defaults",
                "--basedir=/usr",
                "--user=root",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=16M",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_general_ci",
                "--log-bin=mariadb-bin",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--binlog-row-metadata=FULL",
            ])
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--tmpdir={}", d.join("tmp").display()))
            .arg(format!("--port={port}"))
            .arg(format!("--socket={}", d.join("s.sock").display()))
            .arg(format!("--pid-file={}", d.join("m.pid").display()))
            .arg(format!("--log-error={}", d.join("err.log").display()))
            .arg(format!("--server-id={server_id}"))
            .args(options)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("mariadbd (package mariadb-server) cannot start: {e}"))
    }

    async fn wait_up(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(conn) = mysql_async::Conn::new(
                mysql_async::Opts::from_url(&self.url("mysql")).expect("url"),
            )
            .await
            {
                let _ = conn.disconnect().await;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the private MariaDB did not start: see {}",
                self.dir.path().join("err.log").display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `mysql://root@127.0.0.1:port/db`.
    pub(crate) fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    /// Runs `sql` as root in database `test`.
    pub(crate) async fn exec(&self, sql: &str) {
        use mysql_async::prelude::Queryable as _;
        let mut conn = mysql_async::Conn::new(
            mysql_async::Opts::from_url(&self.url(if sql.starts_with("CREATE DATABASE test") {
                "mysql"
            } else {
                "test"
            }))
            .expect("url"),
        )
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
                self.dir.path().join("err.log").display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the server and starts it again on the same data with another server id.
    pub(crate) async fn restart(&mut self, server_id: u32) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(&self.dir, self.port, server_id, &self.options);
        self.wait_up().await;
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
