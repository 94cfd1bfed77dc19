//! What the source asks the server over a plain SQL connection: its identity and kind, the
//! current end of the binlog, the binlog files it still has, and the prerequisites of
//! reading row changes (each failure naming its fix). Nothing here consumes or changes
//! anything.
//!
//! | | MariaDB (tested) | MySQL 8 (per its manual, untested here) |
//! |---|---|---|
//! | end of the log | `SHOW MASTER STATUS` | `SHOW BINARY LOG STATUS` (8.2+), else `SHOW MASTER STATUS`; its `Executed_Gtid_Set` |
//! | GTIDs held, purged | `@@gtid_binlog_pos`, `BINLOG_GTID_POS` | `@@gtid_mode`, `@@gtid_executed`, `@@gtid_purged` |
//! | identity | `@@server_id` | `@@server_id`, `@@server_uuid` |
//! | replicas | `SHOW SLAVE HOSTS` | `SHOW REPLICAS` |
//! | position privilege | BINLOG MONITOR | REPLICATION CLIENT |

use mysql_async::Row;
use mysql_async::prelude::Queryable;

use faucet_core::FaucetError;

use super::CONNECTOR;
use super::bookmark::ServerIdentity;
use super::gtid_set::MysqlGtidSet;
use super::position::{BinlogPos, GtidState};

/// MySQL/MariaDB's "access denied" error codes (ER_SPECIFIC_ACCESS_DENIED_ERROR,
/// ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR).
const ACCESS_DENIED: [u16; 4] = [1227, 1044, 1045, 1142];
/// ER_PARSE_ERROR.
const PARSE_ERROR: u16 = 1064;

/// What open and check learn about the server.
#[derive(Debug, Clone)]
pub(crate) struct ServerFacts {
    /// Whether the server is MariaDB.
    pub(crate) mariadb: bool,
    /// `@@server_id` (and `@@server_uuid` on MySQL).
    pub(crate) identity: ServerIdentity,
}

fn sql_error(what: &str, e: mysql_async::Error) -> FaucetError {
    match &e {
        mysql_async::Error::Server(s) if ACCESS_DENIED.contains(&s.code) => FaucetError::read(
            CONNECTOR,
            format!(
                "{what}: access denied ({}); grant the reading user REPLICATION SLAVE and \
                 BINLOG MONITOR (MariaDB) / REPLICATION CLIENT (MySQL): \
                 GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'user'@'host'",
                s.message
            ),
            Some(Box::new(e)),
        ),
        mysql_async::Error::Server(_) => FaucetError::read(CONNECTOR, what, Some(Box::new(e))),
        _ => FaucetError::connect(CONNECTOR, what, Some(Box::new(e))),
    }
}

fn text(row: &Row, i: usize) -> Option<String> {
    row.get_opt::<Option<String>, _>(i)
        .and_then(Result::ok)
        .flatten()
}

/// The server's kind and identity.
pub(crate) async fn facts(conn: &mut mysql_async::Conn) -> Result<ServerFacts, FaucetError> {
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(|e| sql_error("reading the server version", e))?;
    let mariadb = version.unwrap_or_default().contains("MariaDB");
    let server_id: Option<u32> = conn
        .query_first("SELECT @@server_id")
        .await
        .map_err(|e| sql_error("reading @@server_id", e))?;
    let server_uuid = if mariadb {
        None
    } else {
        conn.query_first::<Option<String>, _>("SELECT @@server_uuid")
            .await
            .map_err(|e| sql_error("reading @@server_uuid", e))?
            .flatten()
    };
    Ok(ServerFacts {
        mariadb,
        identity: ServerIdentity {
            server_id: server_id.unwrap_or_default(),
            server_uuid,
        },
    })
}

/// The current end of the binlog (the position the next transaction will be written at).
///
/// MariaDB: `SHOW MASTER STATUS` (`SHOW BINARY LOG STATUS` is a syntax error there). MySQL:
/// `SHOW BINARY LOG STATUS` (8.2+; `SHOW MASTER STATUS` is gone in 8.4), and where the
/// server does not know it (8.0, 8.1: ER_PARSE_ERROR) `SHOW MASTER STATUS`. Both answer one
/// row `File, Position, Binlog_Do_DB, Binlog_Ignore_DB, Executed_Gtid_Set` (MySQL 8.4
/// Reference Manual, 15.7.7.1 "SHOW BINARY LOG STATUS Statement",
/// <https://dev.mysql.com/doc/refman/8.4/en/show-binary-log-status.html>; MariaDB has no
/// `Executed_Gtid_Set`), and no row when the binlog is off; see [`status_position`]. With
/// the position comes, on MySQL, the row's `Executed_Gtid_Set` as text (`None` on MariaDB,
/// and where the column is missing).
///
/// # Errors
/// [`FaucetError::Read`] when the binlog is off or the privilege is missing, with the fix.
pub(crate) async fn end_of_log(
    conn: &mut mysql_async::Conn,
    mariadb: bool,
) -> Result<(BinlogPos, Option<String>), FaucetError> {
    let row: Option<Row> = if mariadb {
        conn.query_first("SHOW MASTER STATUS")
            .await
            .map_err(|e| sql_error("SHOW MASTER STATUS", e))?
    } else {
        match conn.query_first("SHOW BINARY LOG STATUS").await {
            Ok(row) => row,
            Err(e) if predates_binary_log_status(&e) => conn
                .query_first("SHOW MASTER STATUS")
                .await
                .map_err(|e| sql_error("SHOW MASTER STATUS", e))?,
            Err(e) => return Err(sql_error("SHOW BINARY LOG STATUS", e)),
        }
    };
    let executed = if mariadb {
        None
    } else {
        row.as_ref().and_then(|r| text(r, 4))
    };
    Ok((
        status_position(row.map(|r| (text(&r, 0), text(&r, 1))))?,
        executed,
    ))
}

/// On MySQL: whether GTIDs are on (`@@GLOBAL.gtid_mode` is `ON`: every transaction has a
/// GTID; `OFF`, `OFF_PERMISSIVE` and `ON_PERMISSIVE` allow anonymous ones, which a GTID set
/// does not describe).
pub(crate) async fn mysql_gtid_mode_on(conn: &mut mysql_async::Conn) -> Result<bool, FaucetError> {
    let mode: Option<Option<String>> = conn
        .query_first("SELECT @@GLOBAL.gtid_mode")
        .await
        .map_err(|e| sql_error("SELECT @@GLOBAL.gtid_mode", e))?;
    Ok(mode.flatten().is_some_and(|m| m.eq_ignore_ascii_case("ON")))
}

/// On MySQL: `@@GLOBAL.gtid_executed` (every transaction the server committed or applied)
/// and `@@GLOBAL.gtid_purged` (those of them no longer in its binlog), as GTID sets (MySQL
/// 8.4 Reference Manual, 19.1.6.5 "Global Transaction ID System Variables").
///
/// # Errors
/// [`FaucetError::Read`] naming the variable and its text when it is not a GTID set.
pub(crate) async fn mysql_gtid_sets(
    conn: &mut mysql_async::Conn,
) -> Result<(MysqlGtidSet, MysqlGtidSet), FaucetError> {
    let row: Option<(Option<String>, Option<String>)> = conn
        .query_first("SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged")
        .await
        .map_err(|e| sql_error("SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged", e))?;
    let (executed, purged) = row.unwrap_or_default();
    Ok((
        server_gtid_set("@@gtid_executed", executed.as_deref())?,
        server_gtid_set("@@gtid_purged", purged.as_deref())?,
    ))
}

/// A GTID set the server printed (`what` names where from; NULL is the empty set).
///
/// # Errors
/// [`FaucetError::Read`] naming `what` and the parse error.
pub(crate) fn server_gtid_set(what: &str, text: Option<&str>) -> Result<MysqlGtidSet, FaucetError> {
    MysqlGtidSet::parse(text.unwrap_or_default()).map_err(|e| {
        FaucetError::read(
            CONNECTOR,
            format!("the server's {what} cannot be read"),
            Some(Box::new(e)),
        )
    })
}

/// Whether `e`, the answer to `SHOW BINARY LOG STATUS`, says the server predates it (MySQL
/// before 8.2 answers ER_PARSE_ERROR, 1064), so `SHOW MASTER STATUS` is to be asked.
pub(crate) fn predates_binary_log_status(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.code == PARSE_ERROR)
}

/// The position of a `SHOW BINARY LOG STATUS` / `SHOW MASTER STATUS` answer: its row's
/// `File` and `Position` columns as text (`None` for no row: the binlog is off).
///
/// # Errors
/// [`FaucetError::Read`] saying the binlog is off (with the server options that turn it on)
/// when there is no row, no file name, or a position that is not an offset.
pub(crate) fn status_position(
    row: Option<(Option<String>, Option<String>)>,
) -> Result<BinlogPos, FaucetError> {
    let (file, pos) = row.ok_or_else(binlog_off)?;
    let file = file.filter(|f| !f.is_empty()).ok_or_else(binlog_off)?;
    let pos = pos.and_then(|p| p.parse().ok()).ok_or_else(binlog_off)?;
    Ok(BinlogPos::new(file, pos))
}

fn binlog_off() -> FaucetError {
    FaucetError::read(
        CONNECTOR,
        "the server's binary log is off (log_bin=OFF): start the server with \
         --log-bin --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL",
        None,
    )
}

/// The binlog files the server still has, oldest first (`SHOW BINARY LOGS`).
pub(crate) async fn binlog_files(conn: &mut mysql_async::Conn) -> Result<Vec<String>, FaucetError> {
    Ok(binlog_sizes(conn)
        .await?
        .into_iter()
        .map(|(name, _)| name)
        .collect())
}

/// The binlog files the server still has and their sizes in bytes (`None` when the server
/// shows none), oldest first (`SHOW BINARY LOGS`).
pub(crate) async fn binlog_sizes(
    conn: &mut mysql_async::Conn,
) -> Result<Vec<(String, Option<u64>)>, FaucetError> {
    let rows: Vec<Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(|e| sql_error("SHOW BINARY LOGS", e))?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let size = text(r, 1).and_then(|s| s.parse::<u64>().ok());
            text(r, 0).map(|name| (name, size))
        })
        .collect())
}

/// ER_ERROR_WHEN_EXECUTING_COMMAND: `SHOW BINLOG EVENTS` from an offset where no event
/// starts, or past the file's end ("Wrong offset or I/O error", MariaDB 10.11).
const NOT_AN_EVENT: u16 = 1220;

/// Why `position` (of a file the server has) is not where an event starts, so that no dump
/// can resume there; `None` when it is: the offset is the file's size (`SHOW BINARY LOGS`),
/// or `SHOW BINLOG EVENTS IN file FROM pos LIMIT 1` reads an event there. A position past
/// the file's end is a file that is not the one the position was read from (a binlog
/// started again under the same names); one inside an event, a position never handed out.
///
/// # Errors
/// [`FaucetError::Read`] / [`FaucetError::Connect`] when the server cannot be asked.
pub(crate) async fn not_an_event_boundary(
    conn: &mut mysql_async::Conn,
    position: &BinlogPos,
) -> Result<Option<String>, FaucetError> {
    let rows: Vec<Row> = conn
        .query("SHOW BINARY LOGS")
        .await
        .map_err(|e| sql_error("SHOW BINARY LOGS", e))?;
    let size = rows
        .iter()
        .find(|r| text(r, 0).as_deref() == Some(position.file.as_str()))
        .and_then(|r| text(r, 1))
        .and_then(|s| s.parse::<u64>().ok());
    let file = &position.file;
    let pos = position.pos;
    match size {
        Some(size) if pos > size => {
            return Ok(Some(format!(
                "its position {pos} is past the end of `{file}`, which holds {size} bytes"
            )));
        }
        Some(size) if pos == size => return Ok(None),
        _ => {}
    }
    if pos < 4 {
        return Ok(Some(format!(
            "its position {pos} is before the first event of `{file}` (offset 4)"
        )));
    }
    let quoted = file.replace('\\', "\\\\").replace('\'', "''");
    let sql = format!("SHOW BINLOG EVENTS IN '{quoted}' FROM {pos} LIMIT 1");
    match conn.query_drop(&sql).await {
        Ok(()) => Ok(None),
        Err(mysql_async::Error::Server(s)) if s.code == NOT_AN_EVENT => Ok(Some(format!(
            "no event starts at its position {pos} in `{file}`{} (the server: {})",
            size.map(|s| format!(", which holds {s} bytes"))
                .unwrap_or_default(),
            s.message
        ))),
        Err(e) => Err(sql_error("SHOW BINLOG EVENTS", e)),
    }
}

/// A [`FaucetError::Bookmark`] (not retryable) when `file` was purged from the server.
pub(crate) fn require_file(files: &[String], position: &BinlogPos) -> Result<(), FaucetError> {
    if files.iter().any(|f| f == &position.file) {
        return Ok(());
    }
    Err(FaucetError::bookmark(
        CONNECTOR,
        format!(
            "the bookmark's binlog file `{}` is no longer on the server (it has {}): it was \
             purged, and the changes between the bookmark ({}) and the oldest binlog left are \
             gone. Re-snapshot the tables (copy them anew), delete this pipeline's state, and \
             start again; keep binlogs longer than the longest pause \
             (binlog_expire_logs_seconds / expire_logs_days)",
            position.file,
            match (files.first(), files.last()) {
                (Some(a), Some(b)) => format!("{a} to {b}"),
                _ => "none".to_owned(),
            },
            position
        ),
        None,
    ))
}

/// On MariaDB: the GTID state at `position` (`BINLOG_GTID_POS`, the last GTID of each
/// domain before it, in MariaDB's text form; empty text at the start of the first file),
/// `None` (NULL) when the server cannot tell: a position that is not an event boundary, a
/// file it does not have, or — seen on MariaDB 10.11 — any position after an event larger
/// than the server's current `max_allowed_packet` in the same file (a big row logged
/// before the setting was lowered, or an `Annotate_rows` event of a huge statement).
pub(crate) async fn gtid_state_at(
    conn: &mut mysql_async::Conn,
    position: &BinlogPos,
) -> Result<Option<String>, FaucetError> {
    let state: Option<Option<String>> = conn
        .exec_first(
            "SELECT BINLOG_GTID_POS(?, ?)",
            (position.file.as_str(), position.pos),
        )
        .await
        .map_err(|e| sql_error("SELECT BINLOG_GTID_POS", e))?;
    Ok(state.flatten())
}

/// On MariaDB: the GTID state at the end of the server's binlog (`@@GLOBAL.gtid_binlog_pos`).
///
/// # Errors
/// [`FaucetError::Read`] when the server's answer is not a GTID state.
pub(crate) async fn gtid_binlog_pos(
    conn: &mut mysql_async::Conn,
) -> Result<GtidState, FaucetError> {
    let state: Option<Option<String>> =
        conn.query_first("SELECT @@GLOBAL.gtid_binlog_pos")
            .await
            .map_err(|e| sql_error("SELECT @@GLOBAL.gtid_binlog_pos", e))?;
    let text = state.flatten().unwrap_or_default();
    GtidState::parse(&text).ok_or_else(|| {
        FaucetError::read(
            CONNECTOR,
            format!("@@gtid_binlog_pos is `{text}`, not a MariaDB GTID state"),
            None,
        )
    })
}

/// The global settings the reader needs, each failure with its fix.
pub(crate) async fn check_settings(conn: &mut mysql_async::Conn) -> Result<(), FaucetError> {
    let rows: Vec<Row> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', \
             'binlog_row_image', 'binlog_row_metadata', 'log_bin_compress', \
             'binlog_transaction_compression', 'binlog_row_value_options')",
        )
        .await
        .map_err(|e| sql_error("SHOW GLOBAL VARIABLES", e))?;
    let get = |name: &str| {
        rows.iter()
            .find(|r| text(r, 0).as_deref() == Some(name))
            .and_then(|r| text(r, 1))
    };
    let is = |name: &str, want: &str| get(name).is_some_and(|v| v.eq_ignore_ascii_case(want));
    if !is("log_bin", "ON") {
        return Err(binlog_off());
    }
    let wrong = |var: &str, want: &str, why: &str| {
        FaucetError::read(
            CONNECTOR,
            format!(
                "{var} is {} but must be {want} ({why}): SET GLOBAL {var} = '{want}' and put \
                 {var}={want} in the server's config; sessions opened before the change keep \
                 the old value",
                get(var).unwrap_or_else(|| "not supported by this server".into())
            ),
            None,
        )
    };
    if !is("binlog_format", "ROW") {
        return Err(wrong(
            "binlog_format",
            "ROW",
            "statements logged as SQL text do not say which rows changed",
        ));
    }
    if !is("binlog_row_image", "FULL") {
        return Err(wrong(
            "binlog_row_image",
            "FULL",
            "change records carry whole before and after rows",
        ));
    }
    if !is("binlog_row_metadata", "FULL") {
        return Err(wrong(
            "binlog_row_metadata",
            "FULL",
            "without it the binlog has no column names, charsets or ENUM/SET members \
             (MariaDB 10.5+ / MySQL 8.0.1+)",
        ));
    }
    if is("log_bin_compress", "ON") {
        return Err(wrong(
            "log_bin_compress",
            "OFF",
            "compressed binlog events are not decoded",
        ));
    }
    if is("binlog_transaction_compression", "ON") {
        return Err(wrong(
            "binlog_transaction_compression",
            "OFF",
            "compressed transaction payloads are not decoded",
        ));
    }
    if get("binlog_row_value_options").is_some_and(|v| !v.is_empty()) {
        return Err(wrong(
            "binlog_row_value_options",
            "",
            "partial JSON updates have no full after image",
        ));
    }
    Ok(())
}

/// REPLICATION SLAVE, read from `SHOW GRANTS` (privileges through roles are not seen: the
/// dump itself is the final word).
pub(crate) async fn check_replication_grant(
    conn: &mut mysql_async::Conn,
) -> Result<(), FaucetError> {
    let grants: Vec<String> = conn
        .query("SHOW GRANTS")
        .await
        .map_err(|e| sql_error("SHOW GRANTS", e))?;
    let global = |g: &String| g.contains(" ON *.* ");
    let ok = grants.iter().filter(|g| global(g)).any(|g| {
        g.contains("ALL PRIVILEGES")
            || g.contains("REPLICATION SLAVE")
            || g.contains("REPLICATION REPLICA")
    });
    if ok {
        Ok(())
    } else {
        Err(FaucetError::read(
            CONNECTOR,
            "the user lacks REPLICATION SLAVE, needed to read the binlog: \
             GRANT REPLICATION SLAVE ON *.* TO 'user'@'host'",
            None,
        ))
    }
}

/// Refuses a `server_id` that is the server's own or that a connected replica registered.
/// Where listing replicas needs a privilege the user lacks (MariaDB 10.5+: REPLICATION MASTER
/// ADMIN), only the server's own id is checked, and a warning says so.
pub(crate) async fn check_server_id(
    conn: &mut mysql_async::Conn,
    facts: &ServerFacts,
    server_id: u32,
) -> Result<(), FaucetError> {
    if facts.identity.server_id == server_id {
        return Err(FaucetError::config(
            "server_id",
            format!(
                "{server_id} is the server's own @@server_id; give this reader an id no server \
                 or replica uses"
            ),
        ));
    }
    let sql = if facts.mariadb {
        "SHOW SLAVE HOSTS"
    } else {
        "SHOW REPLICAS"
    };
    match conn.query::<Row, _>(sql).await {
        Ok(rows) => {
            let used = rows
                .iter()
                .find(|r| text(r, 0).and_then(|id| id.parse::<u32>().ok()) == Some(server_id));
            match used {
                Some(r) => Err(FaucetError::config(
                    "server_id",
                    format!(
                        "{server_id} is in use by a replica connected from {}: the server would \
                         disconnect one of the two; give this pipeline its own server_id (a \
                         previous run that was killed is dropped by the server within \
                         slave_net_timeout)",
                        text(r, 1)
                            .filter(|h| !h.is_empty())
                            .unwrap_or_else(|| "an unnamed host".into())
                    ),
                )),
                None => Ok(()),
            }
        }
        Err(mysql_async::Error::Server(s)) if ACCESS_DENIED.contains(&s.code) => {
            tracing::warn!(
                server_id,
                "cannot list the server's replicas ({sql} needs REPLICATION MASTER ADMIN on \
                 MariaDB, REPLICATION SLAVE on MySQL): whether another replica uses this \
                 server_id is not checked"
            );
            Ok(())
        }
        Err(e) => Err(sql_error(sql, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of MySQL 8.4's manual (15.7.7.1 "SHOW BINARY LOG STATUS Statement"), and
    /// the same columns from MariaDB's `SHOW MASTER STATUS` (no `Executed_Gtid_Set`).
    #[test]
    fn the_binary_log_status_row_gives_the_end_of_the_log() {
        let manual = (
            Some("source-bin.000002".to_owned()),
            Some("1307".to_owned()),
        );
        assert_eq!(
            status_position(Some(manual)).expect("a position"),
            BinlogPos::new("source-bin.000002", 1307)
        );
        let mariadb = (
            Some("mariadb-bin.000012".to_owned()),
            Some("389".to_owned()),
        );
        assert_eq!(
            status_position(Some(mariadb)).expect("a position"),
            BinlogPos::new("mariadb-bin.000012", 389)
        );
        for off in [
            None,
            Some((None, None)),
            Some((Some(String::new()), Some("4".to_owned()))),
            Some((Some("source-bin.000002".to_owned()), Some("-1".to_owned()))),
        ] {
            let e = status_position(off.clone()).expect_err("the binlog is off");
            assert!(
                matches!(e, FaucetError::Read { .. }) && e.to_string().contains("--log-bin"),
                "{off:?}: {e}"
            );
        }
    }

    /// `Executed_Gtid_Set` / `@@gtid_executed` as MySQL prints them (the manual's two-server
    /// example with its `,\n` separator; NULL and empty are the empty set) read as GTID sets;
    /// anything else is a read error naming the variable and the text.
    #[test]
    fn server_gtid_sets_parse_or_name_the_variable() {
        let printed = "2174b383-5441-11e8-b90a-c80aa9429562:1-3,\n\
                       3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3:11:47-49";
        let set = server_gtid_set("@@gtid_executed", Some(printed)).expect("a set");
        assert_eq!(set.to_string(), printed.replace(",\n", ","));
        for empty in [None, Some("")] {
            assert!(
                server_gtid_set("@@gtid_purged", empty)
                    .expect("empty")
                    .is_empty()
            );
        }
        let e = server_gtid_set("@@gtid_purged", Some("0-1-30")).expect_err("MariaDB's form");
        assert!(matches!(e, FaucetError::Read { .. }), "{e:?}");
        let chain = format!(
            "{e} {:?}",
            std::error::Error::source(&e).map(ToString::to_string)
        );
        assert!(
            chain.contains("@@gtid_purged") && chain.contains("0-1-30"),
            "{chain}"
        );
    }

    /// MySQL 8.0/8.1 do not know `SHOW BINARY LOG STATUS` (ER_PARSE_ERROR): the old
    /// statement is asked then; an access error is not taken for that.
    #[test]
    fn only_a_parse_error_falls_back_to_show_master_status() {
        let server = |code: u16| {
            mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: "You have an error in your SQL syntax".into(),
                state: "42000".into(),
            })
        };
        assert!(predates_binary_log_status(&server(1064)));
        assert!(!predates_binary_log_status(&server(1227)));
    }
}
