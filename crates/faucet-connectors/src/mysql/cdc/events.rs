//! Binlog events as the change stream needs them: mysql_common parses the MySQL events and
//! leaves the rest to the caller. This module
//!
//! * verifies every event's CRC32 (mysql_common strips it without checking);
//! * reads Rotate events itself: the first, fake Rotate (`log_pos == 0`) arrives before the
//!   format description, so its name still ends in the 4 CRC bytes on MariaDB;
//! * parses MariaDB's GTID event (type 162: `seq` u64 LE, `domain` u32 LE, `flags` u8; the
//!   server id is in the header) into `domain-server-seq`;
//! * lets through the events that carry nothing for row changes (format description,
//!   GTID_LIST 163, BINLOG_CHECKPOINT 161, ANNOTATE_ROWS 160, ROWS_QUERY, INTVAR/RAND/USER_VAR,
//!   STOP);
//! * reads MySQL's PREVIOUS_GTIDS (the GTID set before its file) into a [`MysqlGtidSet`];
//! * and stops on everything else with a [`BinlogError`] naming the event type and position:
//!   compressed events (165–171, `log_bin_compress=ON`), MySQL's compressed transaction
//!   payloads, partial JSON updates, XA, incidents (a gap in the log), unknown types. No
//!   event is ever skipped because it could not be read.

use mysql_async::binlog::events::{Event, GtidEvent, PreviousGtidsEvent, QueryEvent};
use mysql_async::binlog::{BinlogChecksumAlg, EventType};

use super::gtid_set::MysqlGtidSet;
use super::position::BinlogPos;

/// A binlog event the reader cannot take, with where it is.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BinlogError {
    /// An event of a type this reader does not know or does not support.
    #[error("binlog event type {code} ({name}) at {at} cannot be read: {why}")]
    Unsupported {
        /// The raw event type.
        code: u8,
        /// Its name, where known.
        name: &'static str,
        /// The event's start position.
        at: BinlogPos,
        /// Why, and the fix.
        why: String,
    },
    /// An event whose checksum does not match its bytes.
    #[error(
        "binlog event type {code} at {at} fails its CRC32 check (got {got:08x}, computed {computed:08x}): the stream is corrupt"
    )]
    Checksum {
        /// The raw event type.
        code: u8,
        /// The event's start position.
        at: BinlogPos,
        /// The checksum sent.
        got: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// An event of a known type whose bytes do not decode.
    #[error("binlog event type {code} ({name}) at {at} cannot be decoded: {why}")]
    Undecodable {
        /// The raw event type.
        code: u8,
        /// Its name.
        name: &'static str,
        /// The event's start position.
        at: BinlogPos,
        /// The decoder's message.
        why: String,
    },
}

/// MariaDB's event types (sql/log_event.h).
pub(crate) mod mariadb {
    /// The SQL text of the statement that made the next rows events.
    pub(crate) const ANNOTATE_ROWS: u8 = 160;
    /// A binlog file that crash recovery still needs.
    pub(crate) const BINLOG_CHECKPOINT: u8 = 161;
    /// A transaction's (event group's) first event, with its GTID.
    pub(crate) const GTID: u8 = 162;
    /// The GTID state at the start of a file.
    pub(crate) const GTID_LIST: u8 = 163;
    /// Encryption of the binlog file starts.
    pub(crate) const START_ENCRYPTION: u8 = 164;
    /// The first compressed event type (QUERY_COMPRESSED).
    pub(crate) const FIRST_COMPRESSED: u8 = 165;
    /// The last compressed event type (DELETE_ROWS_COMPRESSED_EVENT).
    pub(crate) const LAST_COMPRESSED: u8 = 171;
    /// GTID flag: the group is one statement without BEGIN/COMMIT (DDL).
    pub(crate) const FL_STANDALONE: u8 = 1;
    /// GTID flag: the group is an XA PREPARE.
    pub(crate) const FL_PREPARED_XA: u8 = 64;
    /// GTID flag: the group is an XA COMMIT/ROLLBACK.
    pub(crate) const FL_COMPLETED_XA: u8 = 128;
}

/// The kind of a rows event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowsKind {
    /// WRITE_ROWS v1/v2: `c`.
    Write,
    /// UPDATE_ROWS v1/v2: `u`.
    Update,
    /// DELETE_ROWS v1/v2: `d`.
    Delete,
}

/// What one event means to the change stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Item {
    /// A Rotate: the stream continues at `to` (a fake one names where it starts).
    Rotate {
        /// The new file and offset.
        to: BinlogPos,
        /// Whether it is the server's announcement at stream start (`log_pos == 0`).
        fake: bool,
    },
    /// A transaction's GTID event.
    Gtid {
        /// `domain-server-seq` (MariaDB), `uuid:n` (MySQL), `None` for an anonymous one.
        gtid: Option<String>,
        /// MariaDB: the group is one statement without BEGIN (DDL). MySQL: always false
        /// (a DML group has a BEGIN query, a DDL group has none).
        standalone: bool,
        /// The commit time, microseconds since 1970 (MySQL's immediate commit timestamp;
        /// MariaDB's event time, whole seconds).
        commit_us: u64,
    },
    /// A Query event.
    Query {
        /// The default database of the statement.
        schema: String,
        /// Its SQL text.
        sql: String,
    },
    /// XID: a transaction commits.
    Xid,
    /// A table map (the stream's reader keeps it; the caller builds its table shape).
    TableMap,
    /// Row changes.
    Rows(RowsKind),
    /// A heartbeat: the server is alive and has nothing new.
    Heartbeat,
    /// MySQL's PREVIOUS_GTIDS: the GTID set of every transaction before this binlog file.
    PreviousGtids(MysqlGtidSet),
    /// An event with nothing for the change stream.
    Ignored,
}

/// Reads one event; `format_seen` says whether a format description was received on this
/// stream yet, and `file` is the current file (for positions in errors).
pub(crate) fn classify(event: &Event, format_seen: bool, file: &str) -> Result<Item, BinlogError> {
    let header = event.header();
    let code = header.event_type_raw();
    let end = u64::from(header.log_pos());
    let at = BinlogPos::new(file, end.saturating_sub(u64::from(header.event_size())));
    verify_checksum(event, code, &at)?;
    let unsupported = |name: &'static str, why: &str| BinlogError::Unsupported {
        code,
        name,
        at: at.clone(),
        why: why.to_owned(),
    };
    let undecodable = |name: &'static str, e: std::io::Error| BinlogError::Undecodable {
        code,
        name,
        at: at.clone(),
        why: e.to_string(),
    };
    match code {
        mariadb::ANNOTATE_ROWS | mariadb::BINLOG_CHECKPOINT | mariadb::GTID_LIST => {
            return Ok(Item::Ignored);
        }
        mariadb::GTID => return mariadb_gtid(event, &at).map_err(|why| unsupported("GTID", &why)),
        mariadb::START_ENCRYPTION => {
            return Err(unsupported(
                "START_ENCRYPTION",
                "encrypted binlog events are not supported",
            ));
        }
        mariadb::FIRST_COMPRESSED..=mariadb::LAST_COMPRESSED => {
            return Err(unsupported(
                "compressed event",
                "the server writes compressed binlog events (log_bin_compress=ON), which this \
                 reader does not decompress; run SET GLOBAL log_bin_compress=OFF (and in the \
                 server's config), then re-snapshot the tables changed since it was turned on",
            ));
        }
        _ => {}
    }
    let Ok(kind) = header.event_type() else {
        return Err(unsupported(
            "unknown",
            "this event type is not known to the reader",
        ));
    };
    use EventType::*;
    Ok(match kind {
        PREVIOUS_GTIDS_EVENT => {
            let e = event
                .read_event::<PreviousGtidsEvent<'_>>()
                .map_err(|e| undecodable("PREVIOUS_GTIDS", e))?;
            Item::PreviousGtids(MysqlGtidSet::from_previous_gtids(&e))
        }
        FORMAT_DESCRIPTION_EVENT
        | ROWS_QUERY_EVENT
        | INTVAR_EVENT
        | RAND_EVENT
        | USER_VAR_EVENT
        | STOP_EVENT => Item::Ignored,
        ROTATE_EVENT => rotate(event, format_seen).map_err(|why| unsupported("ROTATE", &why))?,
        HEARTBEAT_EVENT => Item::Heartbeat,
        XID_EVENT => Item::Xid,
        TABLE_MAP_EVENT => Item::TableMap,
        QUERY_EVENT => {
            let q = event
                .read_event::<QueryEvent<'_>>()
                .map_err(|e| undecodable("QUERY", e))?;
            Item::Query {
                schema: q.schema().into_owned(),
                sql: q.query().into_owned(),
            }
        }
        WRITE_ROWS_EVENT | WRITE_ROWS_EVENT_V1 => Item::Rows(RowsKind::Write),
        UPDATE_ROWS_EVENT | UPDATE_ROWS_EVENT_V1 => Item::Rows(RowsKind::Update),
        DELETE_ROWS_EVENT | DELETE_ROWS_EVENT_V1 => Item::Rows(RowsKind::Delete),
        GTID_EVENT | GTID_TAGGED_LOG_EVENT => {
            let g = event
                .read_event::<GtidEvent>()
                .map_err(|e| undecodable("GTID", e))?;
            Item::Gtid {
                gtid: Some(mysql_gtid(&g)),
                standalone: false,
                commit_us: g.immediate_commit_timestamp(),
            }
        }
        ANONYMOUS_GTID_EVENT => {
            let g = event
                .read_event::<GtidEvent>()
                .map_err(|e| undecodable("ANONYMOUS_GTID", e))?;
            Item::Gtid {
                gtid: None,
                standalone: false,
                commit_us: g.immediate_commit_timestamp(),
            }
        }
        PARTIAL_UPDATE_ROWS_EVENT => {
            return Err(unsupported(
                "PARTIAL_UPDATE_ROWS",
                "the server logs partial JSON updates (binlog_row_value_options=PARTIAL_JSON), \
                 which have no full after image; SET GLOBAL binlog_row_value_options=''",
            ));
        }
        TRANSACTION_PAYLOAD_EVENT => {
            return Err(unsupported(
                "TRANSACTION_PAYLOAD",
                "the server compresses transactions (binlog_transaction_compression=ON), which \
                 this reader does not support; SET GLOBAL binlog_transaction_compression=OFF",
            ));
        }
        XA_PREPARE_LOG_EVENT => {
            return Err(unsupported(
                "XA_PREPARE",
                "XA transactions are not supported",
            ));
        }
        INCIDENT_EVENT => {
            return Err(unsupported(
                "INCIDENT",
                "the server logged an incident: changes may be missing from the binlog here; \
                 re-snapshot the tables",
            ));
        }
        TRANSACTION_CONTEXT_EVENT | VIEW_CHANGE_EVENT => Item::Ignored,
        _ => {
            return Err(unsupported(
                "legacy or unknown",
                "this event type is not supported by the reader",
            ));
        }
    })
}

/// Checks the CRC32 the server appended (mysql_common strips it unchecked).
fn verify_checksum(event: &Event, code: u8, at: &BinlogPos) -> Result<(), BinlogError> {
    let Some(sent) = event.checksum() else {
        return Ok(());
    };
    if event.footer().get_checksum_alg() != Ok(Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32)) {
        return Ok(());
    }
    let got = u32::from_le_bytes(sent);
    let computed = event.calc_checksum(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32);
    if got == computed {
        Ok(())
    } else {
        Err(BinlogError::Checksum {
            code,
            at: at.clone(),
            got,
            computed,
        })
    }
}

/// A Rotate event, read from its bytes (`position` u64 LE, then the file name). Before the
/// format description (the fake Rotate at stream start) the CRC32 is still attached: it is
/// recognised by checking it, and cut off.
fn rotate(event: &Event, format_seen: bool) -> Result<Item, String> {
    let data = event.data();
    if data.len() < 9 {
        return Err(format!("a Rotate event of {} bytes", data.len()));
    }
    let mut name = &data[8..];
    let position = u64::from_le_bytes(
        data[..8]
            .try_into()
            .map_err(|_| "a Rotate event without its position".to_owned())?,
    );
    if !format_seen && name.len() > 4 {
        let (bare, crc) = name.split_at(name.len() - 4);
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&header_bytes(event));
        hasher.update(&data[..data.len() - 4]);
        if crc == hasher.finalize().to_le_bytes() {
            name = bare;
        }
    }
    let name = std::str::from_utf8(name).map_err(|_| "a binlog file name that is not UTF-8")?;
    Ok(Item::Rotate {
        to: BinlogPos::new(name, position),
        fake: event.header().log_pos() == 0,
    })
}

/// The 19 bytes of an event's header, as sent.
fn header_bytes(event: &Event) -> [u8; 19] {
    let h = event.header();
    let mut out = [0u8; 19];
    out[..4].copy_from_slice(&h.timestamp().to_le_bytes());
    out[4] = h.event_type_raw();
    out[5..9].copy_from_slice(&h.server_id().to_le_bytes());
    out[9..13].copy_from_slice(&h.event_size().to_le_bytes());
    out[13..17].copy_from_slice(&h.log_pos().to_le_bytes());
    out[17..].copy_from_slice(&h.flags_raw().to_le_bytes());
    out
}

/// MariaDB's GTID event: `seq_no` u64 LE, `domain_id` u32 LE, `flags2` u8, then optional
/// parts (XA xid, commit id) this reader does not need.
fn mariadb_gtid(event: &Event, at: &BinlogPos) -> Result<Item, String> {
    let data = event.data();
    if data.len() < 13 {
        return Err(format!(
            "a MariaDB GTID event of {} bytes at {at}",
            data.len()
        ));
    }
    let seq = u64::from_le_bytes(data[..8].try_into().map_err(|_| "short GTID")?);
    let domain = u32::from_le_bytes(data[8..12].try_into().map_err(|_| "short GTID")?);
    let flags = data[12];
    if flags & (mariadb::FL_PREPARED_XA | mariadb::FL_COMPLETED_XA) != 0 {
        return Err("XA transactions are not supported".into());
    }
    let header = event.header();
    Ok(Item::Gtid {
        gtid: Some(format!("{domain}-{}-{seq}", header.server_id())),
        standalone: flags & mariadb::FL_STANDALONE != 0,
        commit_us: u64::from(header.timestamp()) * 1_000_000,
    })
}

/// MySQL's GTID text of a GTID event: `source_id:transaction_id`, or with a tag (MySQL
/// 8.3+, `GTID_TAGGED_LOG_EVENT`) `source_id:tag:transaction_id`; the source id is the
/// server's uuid as 8-4-4-4-12 lower-case hex. MySQL 8.4 Reference Manual, 19.1.3.1 "GTID
/// Format and Storage" (<https://dev.mysql.com/doc/refman/8.4/en/replication-gtids-concepts.html>),
/// and WL#15294 (tags: `UUID:TAG:NUMBER`, the tag lower-case).
pub(crate) fn mysql_gtid(g: &GtidEvent) -> String {
    let hex: String = g.sid().iter().map(|b| format!("{b:02x}")).collect();
    let tag = g
        .tag()
        .map(|t| format!("{}:", t.as_str().to_ascii_lowercase()))
        .unwrap_or_default();
    format!(
        "{}-{}-{}-{}-{}:{tag}{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..],
        g.gno()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manual's source id, 3E11FA47-71CA-11E1-9E33-C80AA9429562.
    const MANUAL_SID: [u8; 16] = [
        0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95,
        0x62,
    ];

    #[test]
    fn mysql_gtids_are_uuid_colon_number() {
        // The manual's example: the 23rd transaction of that server, lower-cased.
        assert_eq!(
            mysql_gtid(&GtidEvent::new(MANUAL_SID, 23)),
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
        );
    }

    #[test]
    fn tagged_mysql_gtids_keep_their_tag() {
        let tag = mysql_common::packets::Tag::new("domain_1").expect("a valid tag");
        let g = GtidEvent::new_tagged(MANUAL_SID, tag, 23);
        assert_eq!(
            mysql_gtid(&g),
            "3e11fa47-71ca-11e1-9e33-c80aa9429562:domain_1:23"
        );
    }
}
