//! Shared helpers: the server URL, a store under a fresh prefix, raw access, private servers.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use faucet_state_redis::RedisStateStore;
use redis::aio::MultiplexedConnection;

use faucet_test_support::Service;
pub(crate) use faucet_test_support::redis_url;

/// A raw connection to the test server; fails the test, naming the service, when it is
/// unreachable.
pub(crate) async fn raw() -> MultiplexedConnection {
    let url = redis_url();
    let conn = async {
        redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await
    };
    Service::Redis.expect_up(conn.await)
}

/// Every key under `prefix`.
pub(crate) async fn keys_under(conn: &mut MultiplexedConnection, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(conn)
        .await
        .expect("KEYS");
    keys.sort();
    keys
}

/// Deletes every key under `prefix`.
pub(crate) async fn clear(conn: &mut MultiplexedConnection, prefix: &str) {
    for key in keys_under(conn, prefix).await {
        redis::cmd("DEL")
            .arg(&key)
            .query_async::<()>(conn)
            .await
            .expect("DEL");
    }
}

/// A store under `prefix` (cleared first) and a raw connection.
pub(crate) async fn fresh_store(prefix: &str) -> (RedisStateStore, MultiplexedConnection) {
    let mut conn = raw().await;
    clear(&mut conn, prefix).await;
    let store = RedisStateStore::connect(&redis_url(), prefix)
        .await
        .expect("connect");
    (store, conn)
}

/// The error's message with its whole source chain, and its Debug form (shared with every
/// connector's tests).
pub(crate) use faucet_core::testing::everything_printed;

/// A URL to a port where nothing listens, with a password.
pub(crate) const DEAD_URL: &str = "redis://:s3cr3t-pw@127.0.0.1:1/";

/// A `redis-server` of our own on a free port, without persistence, killed on drop.
pub(crate) struct PrivateRedis {
    child: Child,
    pub(crate) port: u16,
}

impl PrivateRedis {
    /// Starts one; `password` sets `requirepass`.
    pub(crate) fn start(password: Option<&str>) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        Self::start_on(port, password)
    }

    /// Starts one on `port`.
    pub(crate) fn start_on(port: u16, password: Option<&str>) -> Self {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(pw) = password {
            cmd.args(["--requirepass", pw]);
        }
        let child = cmd
            .spawn()
            .expect("redis-server must be installed (scripts/services.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "private redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, port }
    }

    /// `redis://[:password@]127.0.0.1:port/`.
    pub(crate) fn url(&self, password: Option<&str>) -> String {
        match password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// Kills the server (like a crash) and waits for it to exit.
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}
