//! [`PrivateMariadb`]: a MariaDB server with a binlog of a test's own, for what the shared
//! one on 3307 must not see (global settings changed, `RESET MASTER`, restarts with another
//! `server_id`, kills): `mariadb-install-db` into a temporary directory (≈ 4 s), `mariadbd`
//! on a free port of 127.0.0.1 with the binlog settings `mysql-cdc` needs (1–2 s), killed on
//! drop. The binaries come with the Debian package `mariadb-server` (scripts/services.sh).
//! Without a database client (see the crate's documentation): it waits for the server with
//! the `mariadb` command-line client, and each crate's tests talk to it with their own.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running private MariaDB; see the module documentation.
pub struct PrivateMariadb {
    child: Child,
    dir: tempfile::TempDir,
    /// Server options beyond the binlog settings (kept across restarts).
    options: Vec<String>,
    port: u16,
}

impl PrivateMariadb {
    /// Initializes and starts a server with `--server-id=server_id`, the binlog settings
    /// `mysql-cdc` needs (ROW, FULL image and metadata) and `options` besides
    /// (`--default-time-zone=+05:30`), with an empty database `test`.
    ///
    /// # Panics
    /// When the binaries are missing, or the server does not initialize or start (naming
    /// its error log).
    pub fn start_with(server_id: u32, options: &[&str]) -> Self {
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
        let port = crate::private_pg::free_port();
        let options: Vec<String> = options.iter().map(|o| (*o).to_owned()).collect();
        let server = Self {
            child: spawn(dir.path(), port, server_id, &options),
            dir,
            options,
            port,
        };
        server.wait_up();
        server.client(&["-e", "CREATE DATABASE test"]);
        server
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://root@127.0.0.1:PORT/db`.
    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    /// The server's error log, for failure messages.
    pub fn error_log(&self) -> std::path::PathBuf {
        self.dir.path().join("err.log")
    }

    /// Runs `sql` (several statements allowed) as root in database `test` with the `mariadb`
    /// client and returns what it printed (`--batch --skip-column-names`: a line per row,
    /// tab-separated).
    ///
    /// # Panics
    /// When the server refuses, with its message.
    #[track_caller]
    pub fn sql(&self, sql: &str) -> String {
        let out = self.client(&["--batch", "--skip-column-names", "test", "-e", sql]);
        String::from_utf8(out).expect("the mariadb client prints UTF-8")
    }

    /// Kills the server and starts it again on the same data with `server_id`.
    pub fn restart(&mut self, server_id: u32) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(self.dir.path(), self.port, server_id, &self.options);
        self.wait_up();
    }

    #[track_caller]
    fn client(&self, args: &[&str]) -> Vec<u8> {
        let out = self
            .client_command()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("the mariadb client (package mariadb-client): {e}"));
        assert!(
            out.status.success(),
            "the private MariaDB refused {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn client_command(&self) -> Command {
        let mut cmd = Command::new("mariadb");
        cmd.args(["--no-defaults", "-uroot", "-h127.0.0.1"])
            .arg(format!("-P{}", self.port));
        cmd
    }

    /// Waits up to 60 s until the server answers.
    fn wait_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = self
                .client_command()
                .args(["-e", "SELECT 1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if up {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the private MariaDB did not start: see {}",
                self.error_log().display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn spawn(d: &Path, port: u16, server_id: u32, options: &[String]) -> Child {
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

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
