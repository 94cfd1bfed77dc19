//! The errors of a binlog dump: the server's refusals (not retryable) and lost connections
//! (retryable).

use faucet_core::FaucetError;

use super::super::CONNECTOR;
use super::super::position::BinlogPos;

/// A dump error of a dump started from GTID state `state` (a carried-over bookmark; MariaDB's
/// state or MySQL's set, as text): the server's refusals (1236: a GTID it does not have,
/// purged binlogs, a hole or divergence in strict mode) are bookmark errors, not retryable;
/// the rest as [`stream_error`].
pub(crate) fn gtid_stream_error(e: mysql_async::Error, state: &str) -> FaucetError {
    match &e {
        mysql_async::Error::Server(s) if s.code == 1236 => FaucetError::bookmark(
            CONNECTOR,
            format!(
                "the server cannot send its binlog from GTID state {state} ({}): its binlog \
                 does not hold that state — the binlog files with the transactions after it \
                 were purged, its binlog began after that state (a server restored from a \
                 backup logs from its restore on), or its history diverged from the server \
                 the bookmark was made on; the changes after it cannot be read here. Point connection_url back at \
                 that server, or re-snapshot the tables, delete this pipeline's state, and \
                 start again",
                s.message
            ),
            Some(Box::new(e)),
        ),
        _ => stream_error(e, &BinlogPos::new(format!("GTID {state}"), 0)),
    }
}

/// A dump error: the server's refusals (a purged or unknown position: 1236) are not
/// retryable; a lost connection is.
pub(crate) fn stream_error(e: mysql_async::Error, at: &BinlogPos) -> FaucetError {
    match &e {
        mysql_async::Error::Server(s) if s.code == 1236 => FaucetError::bookmark(
            CONNECTOR,
            format!(
                "the server cannot send its binlog from {at} ({}): the file was purged or the \
                 position is not an event boundary of this server's binlog; the changes after \
                 it cannot be read. Re-snapshot the tables, delete this pipeline's state, and \
                 start again",
                s.message
            ),
            Some(Box::new(e)),
        ),
        mysql_async::Error::Server(s) if s.code == 1227 || s.code == 1045 => FaucetError::read(
            CONNECTOR,
            format!(
                "the server refused the binlog dump ({}): GRANT REPLICATION SLAVE ON *.* TO the \
                 reading user",
                s.message
            ),
            Some(Box::new(e)),
        ),
        mysql_async::Error::Server(_) => FaucetError::read(
            CONNECTOR,
            format!("the server refused the binlog stream at {at}"),
            Some(Box::new(e)),
        ),
        _ => FaucetError::connect(
            CONNECTOR,
            format!("the binlog connection failed at {at}"),
            Some(Box::new(e)),
        ),
    }
}

pub(super) fn short(sql: &str) -> String {
    sql.chars().take(80).collect()
}

pub(super) fn protocol(what: &str) -> FaucetError {
    FaucetError::read(CONNECTOR, format!("unexpected binlog stream: {what}"), None)
}

pub(super) fn undecodable(name: &str, at: &BinlogPos, e: std::io::Error) -> FaucetError {
    FaucetError::read(
        CONNECTOR,
        format!("the {name} event at {at} cannot be decoded"),
        Some(Box::new(e)),
    )
}
