//! [`PrivateMongo`]: a SecantusDB server (MongoDB's wire protocol, change streams) of a test's
//! own, for tests that kill or restart the server or shrink its oplog: `secantusd-py` (PyPI
//! `SecantusDB`, installed by `scripts/services.sh`) on a free port of 127.0.0.1 with its data
//! in a temporary directory, always with `--sync-on-commit` (without it a `kill -9` soon after
//! a write loses recent writes and the oplog). Killed with SIGKILL on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::private_pg::free_port;

/// A running private SecantusDB server; see the module documentation.
pub struct PrivateMongo {
    dir: tempfile::TempDir,
    port: u16,
    args: Vec<String>,
    child: Option<Child>,
}

impl PrivateMongo {
    /// Starts a server; `args` are extra `secantusd-py` flags (`["--oplog-max-entries", "5"]`).
    ///
    /// # Panics
    /// When `secantusd-py` is missing or the server does not accept connections within 60 s
    /// (with its log).
    pub fn start(args: &[&str]) -> Self {
        let mut server = Self {
            dir: tempfile::tempdir().expect("tempdir"),
            port: free_port(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            child: None,
        };
        server.start_again();
        server
    }

    /// Starts the server again on the same port and data (after [`PrivateMongo::kill`]).
    ///
    /// # Panics
    /// As [`PrivateMongo::start`].
    pub fn start_again(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log file");
        let child = Command::new("secantusd-py")
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--storage-path")
            .arg(self.dir.path().join("data"))
            .args([
                "--sync-on-commit",
                "--cache-size",
                "64M",
                "--log-level",
                "WARNING",
            ])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("secantusd-py: {e}; install SecantusDB with scripts/services.sh")
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                let log =
                    std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
                panic!(
                    "SecantusDB on port {} did not start ({exited:?})\n{log}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs the server (`kill -9`) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The TCP port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mongodb://127.0.0.1:<port>/?directConnection=true`.
    pub fn url(&self) -> String {
        format!("mongodb://127.0.0.1:{}/?directConnection=true", self.port)
    }
}

impl Drop for PrivateMongo {
    fn drop(&mut self) {
        self.kill();
    }
}
