//! How faucet's tests reach the services they talk to (docs/architecture.md, "The shape the code keeps", point 10): one
//! environment variable per service with a localhost default, the failure message when a
//! service is down (naming the variable and `scripts/services.sh`), and unique names so
//! tests can run in parallel; and [`private_pg::PrivatePostgres`], a PostgreSQL server of a
//! test's own; [`private_mariadb::PrivateMariadb`], a MariaDB with a binlog of a test's own;
//! [`private_mongo::PrivateMongo`], a SecantusDB (MongoDB wire protocol) server of a test's
//! own; [`private_nats::PrivateNats`], a nats-server with users and permissions of a test's
//! own; [`mysql_value_table!`], the MySQL value table of docs/values.md as test data; and
//! [`weather`], the columns of the example weather data. Used as a dev-dependency by every crate's tests; it has no database client,
//! so each crate connects with its own and hands the result to [`Service::expect_up`].
//!
//! | service | variable | default |
//! |---|---|---|
//! | PostgreSQL | `FAUCET_TEST_PG_URL` | `postgres://postgres@127.0.0.1:5432/test` |
//! | Redis | `FAUCET_TEST_REDIS_URL` | `redis://127.0.0.1:6379/` |
//! | MariaDB with a binlog | `FAUCET_TEST_MYSQL_URL` | `mysql://root@127.0.0.1:3307/test` |
//! | SecantusDB (MongoDB wire protocol) | `FAUCET_TEST_MONGODB_URL` | `mongodb://127.0.0.1:27117/?directConnection=true` |
//! | nats-server (JetStream) | `FAUCET_TEST_NATS_URL` | `nats://127.0.0.1:4222` |
//! | tansu (Kafka API; S3 storage in moto) | `FAUCET_TEST_KAFKA_BROKERS` | `127.0.0.1:19092` |
//!
//! A new service is one more [`Service`] variant with its arms in [`Service::env_var`], [`Service::default_url`] and
//! [`Service::name`], a row in the table above, and a `*_url()` shortcut.

pub mod mysql_values;
pub mod private_mariadb;
pub mod private_mongo;
pub mod private_nats;
pub mod private_pg;
pub mod weather;

use std::fmt::Display;
use std::sync::atomic::{AtomicU32, Ordering};

/// A service the tests need, started on this machine by `scripts/services.sh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// PostgreSQL (with `wal_level=logical`, for the CDC tests).
    Postgres,
    /// Redis.
    Redis,
    /// MariaDB with a binlog: the private server `scripts/services.sh` starts on port 3307
    /// (the machine's own MariaDB runs without one).
    Mysql,
    /// SecantusDB, a MongoDB-wire-compatible server with change streams (a one-node replica
    /// set), which `scripts/services.sh` starts on port 27117 with `--sync-on-commit`.
    Mongodb,
    /// nats-server with JetStream (`-js`), which `scripts/services.sh` starts on port 4222.
    Nats,
    /// tansu, a Kafka-compatible broker (S3 storage served by moto), which
    /// `scripts/services.sh` starts on port 19092; its "URL" is a broker list, `host:port`.
    Kafka,
}

impl Service {
    /// The environment variable holding the service's URL.
    pub const fn env_var(self) -> &'static str {
        match self {
            Self::Postgres => "FAUCET_TEST_PG_URL",
            Self::Redis => "FAUCET_TEST_REDIS_URL",
            Self::Mysql => "FAUCET_TEST_MYSQL_URL",
            Self::Mongodb => "FAUCET_TEST_MONGODB_URL",
            Self::Nats => "FAUCET_TEST_NATS_URL",
            Self::Kafka => "FAUCET_TEST_KAFKA_BROKERS",
        }
    }

    /// The URL used when [`Service::env_var`] is not set: the local server.
    pub const fn default_url(self) -> &'static str {
        match self {
            Self::Postgres => "postgres://postgres@127.0.0.1:5432/test",
            Self::Redis => "redis://127.0.0.1:6379/",
            Self::Mysql => "mysql://root@127.0.0.1:3307/test",
            Self::Mongodb => "mongodb://127.0.0.1:27117/?directConnection=true",
            Self::Nats => "nats://127.0.0.1:4222",
            Self::Kafka => "127.0.0.1:19092",
        }
    }

    /// The service's name in messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Postgres => "PostgreSQL",
            Self::Redis => "Redis",
            Self::Mysql => "MariaDB (with a binlog)",
            Self::Mongodb => "SecantusDB (MongoDB)",
            Self::Nats => "nats-server (JetStream)",
            Self::Kafka => "tansu (Kafka API)",
        }
    }

    /// The service's URL: [`Service::env_var`] if set, else [`Service::default_url`].
    pub fn url(self) -> String {
        std::env::var(self.env_var()).unwrap_or_else(|_| self.default_url().to_owned())
    }

    /// The failure message when the service cannot be reached: which service, the variable
    /// and its default, the client's `cause`, and how to start it.
    pub fn unreachable(self, cause: &dyn Display) -> String {
        format!(
            "{} at {} (default {}) is unreachable: {cause}; start it with scripts/services.sh",
            self.name(),
            self.env_var(),
            self.default_url()
        )
    }

    /// The connection (or client) in `result`; panics with [`Service::unreachable`] when
    /// connecting failed.
    ///
    /// # Panics
    /// When `result` is an error: the test cannot run without the service.
    #[track_caller]
    pub fn expect_up<T, E: Display>(self, result: Result<T, E>) -> T {
        match result {
            Ok(v) => v,
            Err(e) => panic!("{}", self.unreachable(&e)),
        }
    }
}

/// The test PostgreSQL server's URL ([`Service::Postgres`]).
pub fn pg_url() -> String {
    Service::Postgres.url()
}

/// The test Redis server's URL ([`Service::Redis`]).
pub fn redis_url() -> String {
    Service::Redis.url()
}

/// The test nats-server's URL ([`Service::Nats`]).
pub fn nats_url() -> String {
    Service::Nats.url()
}

/// The test Kafka broker list, `host:port` ([`Service::Kafka`]).
pub fn kafka_brokers() -> String {
    Service::Kafka.url()
}

/// The test MariaDB's URL ([`Service::Mysql`]).
pub fn mysql_url() -> String {
    Service::Mysql.url()
}

/// The test SecantusDB server's URL ([`Service::Mongodb`]).
pub fn mongodb_url() -> String {
    Service::Mongodb.url()
}

/// `sqlite3 -json <db> <sql>` — Debian's `sqlite3` command-line tool, which the `sqlite`
/// sink's tests read its files with (scripts/services.sh installs it): the rows as a JSON
/// array of objects, `[]` for none. It waits up to 5 s for a lock (`.timeout`): a sink's
/// connection closing checkpoints the WAL under the file's lock for a moment.
///
/// # Panics
/// When `sqlite3` cannot be run or fails (the message has its stderr).
pub fn sqlite3_json(db: &std::path::Path, sql: &str) -> String {
    let out = std::process::Command::new("sqlite3")
        .args(["-json", "-cmd", ".timeout 5000"])
        .arg(db)
        .arg(sql)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run sqlite3 (Debian's `sqlite3`; scripts/services.sh installs it): {e}")
        });
    assert!(
        out.status.success(),
        "sqlite3 {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if text.is_empty() {
        "[]".to_owned()
    } else {
        text
    }
}

/// A suffix that makes a test's schema, slot, publication or key prefix its own: the
/// process id, a per-process counter and the current instant's nanoseconds in hex
/// (`<pid>_<n>_<nanos>`), lower-case ASCII digits, letters and `_` only (valid in slot
/// names), at most 28 bytes.
pub fn unique_suffix() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}_{}_{nanos:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// The member names of the JSON object `value` in order (the order a record or a report writes
/// them); empty when `value` is not an object.
pub fn json_keys(value: &serde_json::Value) -> Vec<&str> {
    value
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// A test's write workload: runs `exec(conn, statement(i))` for `i` = 1, 2, … one at a time
/// until `stop` is set, each call handing the connection on to the next (it may pause after
/// its statement); returns how many statements ran.
pub async fn write_until<C, Fut>(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    mut conn: C,
    statement: impl Fn(i64) -> String,
    exec: impl Fn(C, String) -> Fut,
) -> u64
where
    Fut: std::future::Future<Output = C>,
{
    let mut i: i64 = 0;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        conn = exec(conn, statement(i)).await;
    }
    u64::try_from(i).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_service_the_variable_and_the_script() {
        let m = Service::Postgres.unreachable(&"Connection refused");
        assert_eq!(
            m,
            "PostgreSQL at FAUCET_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test) \
             is unreachable: Connection refused; start it with scripts/services.sh"
        );
        let m = Service::Redis.unreachable(&"x");
        assert!(m.starts_with("Redis at FAUCET_TEST_REDIS_URL (default redis://127.0.0.1:6379/)"));
    }

    #[test]
    fn suffixes_differ_and_are_valid_in_slot_names() {
        let (a, b) = (unique_suffix(), unique_suffix());
        assert_ne!(a, b);
        assert!(a.len() <= 28, "{a}");
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'),
            "{a}"
        );
    }

    #[test]
    #[should_panic(expected = "Redis at FAUCET_TEST_REDIS_URL")]
    fn a_service_that_is_down_fails_the_test_by_name() {
        Service::Redis.expect_up::<(), _>(Err("Connection refused"));
    }
}
