//! [`PrivateNats`]: a nats-server with JetStream of a test's own, for tests that need users
//! the shared server (no authorization) does not have: Debian's `nats-server` on a free port
//! of 127.0.0.1 with its configuration and JetStream store in a temporary directory. Killed
//! with SIGKILL on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::private_pg::free_port;

/// A running private nats-server; see the module documentation.
pub struct PrivateNats {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl PrivateNats {
    /// Starts a server whose configuration is `authorization` (the text of a nats-server
    /// `authorization { … }` block, e.g. users and their `permissions`) beside `listen` and
    /// `jetstream`; the users share the global account, where JetStream is on.
    ///
    /// # Panics
    /// When `nats-server` is missing or does not accept connections within 30 s (with its
    /// log).
    pub fn start(authorization: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let config = dir.path().join("server.conf");
        std::fs::write(
            &config,
            format!(
                "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: \"{}\" }}\n\
                 authorization {{\n{authorization}\n}}\n",
                dir.path().join("js").display()
            ),
        )
        .expect("nats-server configuration");
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log file");
        let mut child = Command::new("nats-server")
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "nats-server: {e}; install it with scripts/services.sh (Debian's nats-server)"
                )
            });
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let exited = child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let _ = child.kill();
                let log =
                    std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
                panic!("nats-server on port {port} did not start ({exited:?})\n{log}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            dir,
            port,
            child: Some(child),
        }
    }

    /// `nats://127.0.0.1:<port>`, without a login.
    pub fn addr(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// `nats://<user>:<password>@127.0.0.1:<port>`.
    pub fn url(&self, user: &str, password: &str) -> String {
        format!("nats://{user}:{password}@127.0.0.1:{}", self.port)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
