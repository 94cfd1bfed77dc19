//! The snapshot and its exact binlog point: one session holding a consistent-snapshot
//! transaction, and the binlog position that separates what it sees from what it does not.
//!
//! * **MariaDB** (tested): `START TRANSACTION WITH CONSISTENT SNAPSHOT`, then `SHOW STATUS
//!   LIKE 'binlog_snapshot_%'`: `binlog_snapshot_file` / `binlog_snapshot_position` are the
//!   binlog position of exactly that snapshot (MariaDB manual, "Enhancements for START
//!   TRANSACTION WITH CONSISTENT SNAPSHOT"), taken without any lock while other sessions
//!   commit. `BINLOG_GTID_POS(file, pos)` gives the GTID state there.
//! * **MySQL** (from its manual, untested here: no MySQL server on this machine): it has no
//!   such status variables, so the point is taken the way `mysqldump --single-transaction
//!   --source-data` does: `FLUSH TABLES WITH READ LOCK` (needs RELOAD; blocks commits for
//!   the few milliseconds until `UNLOCK TABLES`), `START TRANSACTION WITH CONSISTENT
//!   SNAPSHOT`, `SHOW BINARY LOG STATUS` (`SHOW MASTER STATUS` before 8.2) for the position
//!   and `@@GLOBAL.gtid_executed`, `UNLOCK TABLES`. No transaction can commit between the
//!   snapshot and the position read, so they agree.
//!
//! Every transaction whose first binlog event starts before the point is in the snapshot;
//! every one starting at or after it is not (the binlog is written in commit order).

use std::cmp::Ordering;

use mysql_async::prelude::Queryable as _;

use faucet_core::serde_json::Value as Json;
use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use crate::copy_history::Point;
use crate::mysql::cdc::position::{BinlogPos, file_number};
use crate::mysql::cdc::server;
use crate::mysql::connection::MysqlConnection;

/// A binlog position as a consistent point: ordered by file number, then offset (positions
/// of one server; files without a number order by name). Text form `file:pos`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotPoint(pub(crate) BinlogPos);

impl Ord for SnapshotPoint {
    fn cmp(&self, other: &Self) -> Ordering {
        let a = &self.0;
        let b = &other.0;
        (file_number(&a.file), &a.file, a.pos).cmp(&(file_number(&b.file), &b.file, b.pos))
    }
}

impl PartialOrd for SnapshotPoint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Point for SnapshotPoint {
    fn to_text(&self) -> String {
        self.0.to_string()
    }

    fn parse(text: &str) -> Option<Self> {
        let (file, pos) = text.rsplit_once(':')?;
        if file.is_empty() {
            return None;
        }
        Some(Self(BinlogPos::new(file, pos.parse().ok()?)))
    }
}

/// Which way the point is taken (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// MariaDB: lock-free, `binlog_snapshot_*`.
    MariaDb,
    /// MySQL: a brief global read lock around the snapshot's start.
    Mysql,
}

impl Flavor {
    /// The statements that open the snapshot, in order, before the position is read.
    pub(crate) fn opening(self) -> &'static [&'static str] {
        match self {
            Self::MariaDb => &[
                "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
            ],
            Self::Mysql => &[
                "FLUSH TABLES WITH READ LOCK",
                "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
            ],
        }
    }

    /// The statements run once the position is read (the lock released).
    pub(crate) fn closing(self) -> &'static [&'static str] {
        match self {
            Self::MariaDb => &[],
            Self::Mysql => &["UNLOCK TABLES"],
        }
    }
}

/// The point from MariaDB's `SHOW STATUS LIKE 'binlog_snapshot_%'` rows (name, value).
pub(crate) fn mariadb_point(rows: &[(String, String)]) -> Option<BinlogPos> {
    let get = |name: &str| {
        rows.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let file = get("binlog_snapshot_file").filter(|f| !f.is_empty())?;
    let pos = get("binlog_snapshot_position")?.parse().ok()?;
    Some(BinlogPos::new(file, pos))
}

/// A session inside a consistent snapshot, and the snapshot's binlog point.
pub(crate) struct SnapshotSession {
    /// The session holding the snapshot's transaction: every read of the copy runs on it.
    pub(crate) conn: mysql_async::Conn,
    /// The binlog point of the snapshot.
    pub(crate) point: BinlogPos,
    /// The GTID state at the point (MariaDB `BINLOG_GTID_POS`, MySQL `@@GLOBAL.gtid_executed`),
    /// `None` when the server logs none yet.
    pub(crate) gtid: Option<String>,
}

fn failed(connection: &MysqlConnection, what: &str, e: mysql_async::Error) -> FaucetError {
    connection.error(&format!("taking the snapshot: {what}"), e)
}

impl SnapshotSession {
    /// Opens a session and starts the snapshot (module docs).
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when the server is unreachable; [`FaucetError::Read`] when a
    /// statement is refused (MySQL: `FLUSH TABLES WITH READ LOCK` needs RELOAD) or the
    /// server reports no snapshot position (binlog off).
    pub(crate) async fn start(
        connection: &MysqlConnection,
        mariadb: bool,
    ) -> Result<Self, FaucetError> {
        let flavor = if mariadb {
            Flavor::MariaDb
        } else {
            Flavor::Mysql
        };
        let mut conn = connection.connect().await?;
        for sql in flavor.opening() {
            conn.query_drop(*sql)
                .await
                .map_err(|e| failed(connection, sql, e))?;
        }
        let (point, gtid) = match flavor {
            Flavor::MariaDb => {
                let rows: Vec<(String, String)> = conn
                    .query("SHOW STATUS LIKE 'binlog_snapshot_%'")
                    .await
                    .map_err(|e| failed(connection, "SHOW STATUS", e))?;
                let point = mariadb_point(&rows).ok_or_else(|| {
                    FaucetError::read(
                        CONNECTOR,
                        format!(
                            "the server reported no binlog snapshot position ({rows:?}): is \
                             log_bin on?"
                        ),
                        None,
                    )
                })?;
                let gtid = server::gtid_state_at(&mut conn, &point)
                    .await?
                    .filter(|g| !g.is_empty());
                (point, gtid)
            }
            Flavor::Mysql => {
                let (point, _) = server::end_of_log(&mut conn, false).await?;
                let gtid: Option<Option<String>> = conn
                    .query_first("SELECT @@GLOBAL.gtid_executed")
                    .await
                    .map_err(|e| failed(connection, "SELECT @@GLOBAL.gtid_executed", e))?;
                let gtid = gtid.flatten().filter(|g| !g.is_empty());
                (point, gtid)
            }
        };
        for sql in flavor.closing() {
            conn.query_drop(*sql)
                .await
                .map_err(|e| failed(connection, sql, e))?;
        }
        tracing::info!(point = %point, gtid = ?gtid, ?flavor, "consistent snapshot taken");
        Ok(Self { conn, point, gtid })
    }
}

/// The binlog position of a change-stream bookmark (`binlog_file`, `binlog_pos`).
pub(crate) fn cdc_point(b: &Bookmark) -> Option<SnapshotPoint> {
    let file = b.get("binlog_file").and_then(Json::as_str)?;
    let pos = b.get("binlog_pos").and_then(Json::as_u64)?;
    SnapshotPoint::parse(&format!("{file}:{pos}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_order_across_files_and_round_trip() {
        let a = SnapshotPoint(BinlogPos::new("mariadb-bin.000009", 900));
        let b = SnapshotPoint(BinlogPos::new("mariadb-bin.000010", 4));
        assert!(a < b);
        assert!(SnapshotPoint(BinlogPos::new("mariadb-bin.000010", 5)) > b);
        assert_eq!(a.to_text(), "mariadb-bin.000009:900");
        assert_eq!(SnapshotPoint::parse(&a.to_text()), Some(a));
        assert_eq!(SnapshotPoint::parse("x"), None);
        assert_eq!(SnapshotPoint::parse(":4"), None);
        assert_eq!(SnapshotPoint::parse("f.1:-4"), None);
    }

    #[test]
    fn the_mariadb_point_comes_from_the_snapshot_status() {
        let rows = vec![
            (
                "binlog_snapshot_file".to_owned(),
                "mariadb-bin.000003".to_owned(),
            ),
            ("binlog_snapshot_position".to_owned(), "1234".to_owned()),
        ];
        assert_eq!(
            mariadb_point(&rows),
            Some(BinlogPos::new("mariadb-bin.000003", 1234))
        );
        assert_eq!(mariadb_point(&rows[..1]), None);
        assert_eq!(
            mariadb_point(&[
                ("binlog_snapshot_file".to_owned(), String::new()),
                ("binlog_snapshot_position".to_owned(), "0".to_owned()),
            ]),
            None,
            "binlog off: no file"
        );
    }

    #[test]
    fn mysql_takes_its_point_under_a_brief_global_read_lock() {
        // Untested against a server (module docs): the order is what makes it exact.
        let open = Flavor::Mysql.opening();
        assert_eq!(open.first(), Some(&"FLUSH TABLES WITH READ LOCK"));
        assert_eq!(
            open.last(),
            Some(&"START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        );
        assert_eq!(Flavor::Mysql.closing(), &["UNLOCK TABLES"]);
        assert!(
            !Flavor::MariaDb.opening().iter().any(|s| s.contains("LOCK")),
            "MariaDB's point is lock-free"
        );
    }
}
