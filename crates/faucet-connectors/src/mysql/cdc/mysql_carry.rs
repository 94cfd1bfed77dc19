//! Carrying a MySQL bookmark over to another MySQL server by its GTID set (a failover, a
//! rebuilt replica: the connected server's `@@server_uuid` is not the bookmark's, or the
//! bookmark is `by_gtid`). Written to the MySQL 8.4 Reference Manual and the client/server
//! protocol documentation, and unit-tested on the shapes they give; **not tested against a
//! MySQL server** (none can run where faucet is built). MariaDB's carry-over
//! (`MysqlCdcSource::carry_over`) is the tested one.
//!
//! * The bookmark's `gtid_state` is the GTID set of every transaction before its position
//!   (module `gtid_set`). Inside a transaction (`in_txn`), that transaction is not in it and
//!   must have a GTID.
//! * Checked before anything is read, with the server's `@@gtid_executed` and
//!   `@@gtid_purged` (subsets computed here, [`MysqlGtidSet::is_subset_of`], not with the
//!   server's `GTID_SUBSET()`), each failure a [`FaucetError::Bookmark`] naming the cause
//!   and the fix ([`check`]): `gtid_mode` is ON; the server executed every transaction of
//!   the set and the partly delivered one (else it has not caught up, or the bookmark's
//!   server committed transactions of its own); every transaction it purged from its binlog
//!   is in the set (else changes after the bookmark are gone from this server).
//! * The dump is `COM_BINLOG_DUMP_GTID` with the set as its SID block
//!   ([`MysqlGtidSet::sids`], intervals end-exclusive on the wire), an empty file name and
//!   position 4: the server sends every transaction of its binlog not in the set, in its
//!   binlog's order (MySQL 8.4 Reference Manual, 19.1.3.3 "GTID Auto-Positioning").
//! * MySQL has no `BINLOG_GTID_POS`, so a reader cannot tell when no transaction of the set
//!   lies after a file position: a carried-over stream keeps resuming by its GTID set
//!   (`by_gtid`), which the set being kept exact makes safe on any server.

use faucet_core::FaucetError;

use super::bookmark::CdcBookmark;
use super::gtid_set::{MysqlGtid, MysqlGtidSet};
use super::server;

/// Why a MySQL server cannot take a bookmark's GTID set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The server has not executed `missing`, transactions the bookmark was read up to (or
    /// the one it is inside).
    NotCaughtUp {
        /// GTIDs of the bookmark (and its partly delivered transaction) the server lacks.
        missing: MysqlGtidSet,
        /// The set the server must reach.
        reach: MysqlGtidSet,
    },
    /// The server purged `purged`, transactions after the bookmark, from its binlog.
    Purged {
        /// GTIDs in `@@gtid_purged` that are not in the bookmark's set.
        purged: MysqlGtidSet,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotCaughtUp { missing, reach } => write!(
                f,
                "this server has not executed the transactions {missing} that the bookmark \
                 was read up to (they are not in its @@gtid_executed): a replica that has not \
                 caught up, or transactions committed on the bookmark's server alone. Wait \
                 until SELECT GTID_SUBSET('{reach}', @@GLOBAL.gtid_executed) is 1, or point \
                 connection_url back at that server; resuming now would skip changes"
            ),
            Self::Purged { purged } => write!(
                f,
                "this server purged the transactions {purged} from its binlog (they are in its \
                 @@gtid_purged but were not read), so the changes after the bookmark are gone \
                 here. Re-snapshot the tables, delete this pipeline's state, and start again; \
                 keep binlogs longer than the longest pause (binlog_expire_logs_seconds)"
            ),
        }
    }
}

/// Whether a server with `executed` (`@@gtid_executed`) and `purged` (`@@gtid_purged`) can
/// send what follows `needed`, a bookmark's set, and `in_txn`, the GTID of the transaction
/// the bookmark is inside (not in `needed`): `needed ∪ in_txn ⊆ executed`, and
/// `purged ⊆ needed` (a partly delivered transaction that was purged cannot be finished).
///
/// # Errors
/// The first [`Refusal`], in that order.
pub(crate) fn check(
    needed: &MysqlGtidSet,
    in_txn: Option<&MysqlGtid>,
    executed: &MysqlGtidSet,
    purged: &MysqlGtidSet,
) -> Result<(), Refusal> {
    let mut reach = needed.clone();
    if let Some(g) = in_txn {
        reach.add(g);
    }
    if !reach.is_subset_of(executed) {
        let missing = reach.subtract(executed);
        return Err(Refusal::NotCaughtUp { missing, reach });
    }
    if !purged.is_subset_of(needed) {
        return Err(Refusal::Purged {
            purged: purged.subtract(needed),
        });
    }
    Ok(())
}

/// Carries MySQL bookmark `b` over to the connected server (module docs): the GTID set the
/// dump starts from, after the checks. `refuse` turns a reason into the bookmark error that
/// names both servers.
///
/// # Errors
/// [`FaucetError::Bookmark`] (via `refuse`) when the bookmark has no GTID set, is inside a
/// transaction without a GTID, the server's `gtid_mode` is not ON, or [`check`] refuses;
/// [`FaucetError::Read`] / [`FaucetError::Connect`] when the server cannot be asked.
pub(crate) async fn carry_over(
    conn: &mut mysql_async::Conn,
    b: &CdcBookmark,
    refuse: impl Fn(String) -> FaucetError,
) -> Result<MysqlGtidSet, FaucetError> {
    let Some(needed) = &b.gtid_set else {
        return Err(refuse(
            "the bookmark has no GTID set to carry its position over (it was made by an older \
             faucet, by a first run from `start: beginning` or `start.at`, or on a server \
             whose gtid_mode was not ON), and its binlog positions do not apply here. Point \
             connection_url back at that server, or delete this pipeline's state and \
             re-snapshot the tables from this one"
                .to_owned(),
        ));
    };
    let in_txn = match &b.in_txn {
        None => None,
        Some(t) => match t.gtid.as_deref().map(MysqlGtid::parse) {
            Some(Ok(g)) => Some(g),
            _ => {
                return Err(refuse(
                    "the bookmark is inside a transaction without a MySQL GTID, which cannot be \
                     found on another server. Point connection_url back at that server to \
                     finish it"
                        .to_owned(),
                ));
            }
        },
    };
    if !server::mysql_gtid_mode_on(conn).await? {
        return Err(refuse(
            "this server's gtid_mode is not ON, so it cannot send its binlog from a GTID set. \
             SET GLOBAL gtid_mode stepwise to ON (MySQL 8.4 Reference Manual, 19.1.4 \
             \"Changing GTID Mode on Online Servers\"), or point connection_url back at that \
             server"
                .to_owned(),
        ));
    }
    let (executed, purged) = server::mysql_gtid_sets(conn).await?;
    check(needed, in_txn.as_ref(), &executed, &purged).map_err(|r| refuse(r.to_string()))?;
    Ok(needed.clone())
}

#[cfg(test)]
mod tests {
    use mysql_common::misc::raw::Either;
    use mysql_common::packets::BinlogDumpFlags;
    use mysql_common::packets::binlog_request::BinlogRequest;
    use mysql_common::proto::MySerialize;

    use super::*;

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "2174b383-5441-11e8-b90a-c80aa9429562";

    fn set(text: &str) -> MysqlGtidSet {
        MysqlGtidSet::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// A failover target that executed everything the bookmark read (and more, and another
    /// source's) and purged only what the bookmark read is taken; one behind, one with an
    /// errant transaction on the old server, and one that purged unread transactions are
    /// refused, naming the GTIDs.
    #[test]
    fn a_server_takes_a_set_it_executed_and_did_not_purge_past() {
        let needed = set(&format!("{A}:1-57,{B}:1-3"));
        let executed = set(&format!("{A}:1-80,\n{B}:1-3"));
        assert_eq!(check(&needed, None, &executed, &set("")), Ok(()));
        assert_eq!(
            check(&needed, None, &executed, &set(&format!("{A}:1-57"))),
            Ok(())
        );
        assert_eq!(
            check(
                &needed,
                None,
                &set(&format!("{A}:1-57,{B}:1-3")),
                &set(&format!("{A}:1-20,{B}:1-3"))
            ),
            Ok(()),
            "exactly caught up"
        );
        // Behind in one source.
        let behind = check(&needed, None, &set(&format!("{A}:1-50,{B}:1-3")), &set(""));
        assert_eq!(
            behind,
            Err(Refusal::NotCaughtUp {
                missing: set(&format!("{A}:51-57")),
                reach: needed.clone()
            })
        );
        let text = behind.expect_err("refused").to_string();
        assert!(
            text.contains(&format!("{A}:51-57")) && text.contains("GTID_SUBSET"),
            "{text}"
        );
        // A source the new server never saw (an errant transaction on the old one).
        assert!(matches!(
            check(&needed, None, &set(&format!("{A}:1-80")), &set("")),
            Err(Refusal::NotCaughtUp { missing, .. }) if missing == set(&format!("{B}:1-3"))
        ));
        // Purged past the bookmark.
        let purged = check(&needed, None, &executed, &set(&format!("{A}:1-60")));
        assert_eq!(
            purged,
            Err(Refusal::Purged {
                purged: set(&format!("{A}:58-60"))
            })
        );
        assert!(
            purged
                .expect_err("refused")
                .to_string()
                .contains("Re-snapshot")
        );
        // The empty set (a server with no GTIDs yet when the bookmark was made).
        assert_eq!(check(&set(""), None, &executed, &set("")), Ok(()));
        assert!(matches!(
            check(&set(""), None, &executed, &set(&format!("{A}:1"))),
            Err(Refusal::Purged { .. })
        ));
    }

    /// Inside a transaction: the server must have executed that one too, and not purged it.
    #[test]
    fn a_partly_delivered_transaction_must_be_on_the_server() {
        let needed = set(&format!("{A}:1-57"));
        let t = MysqlGtid::parse(&format!("{A}:58")).expect("a GTID");
        assert_eq!(
            check(&needed, Some(&t), &set(&format!("{A}:1-58")), &set("")),
            Ok(())
        );
        assert_eq!(
            check(&needed, Some(&t), &set(&format!("{A}:1-57")), &set("")),
            Err(Refusal::NotCaughtUp {
                missing: set(&format!("{A}:58")),
                reach: set(&format!("{A}:1-58"))
            })
        );
        assert_eq!(
            check(
                &needed,
                Some(&t),
                &set(&format!("{A}:1-90")),
                &set(&format!("{A}:1-58"))
            ),
            Err(Refusal::Purged {
                purged: set(&format!("{A}:58"))
            })
        );
    }

    /// The dump request the set makes, serialized by mysql_common exactly as mysql_async
    /// sends it (`BinlogRequest::as_cmd`, what `BinlogStreamRequest::with_gtid` and
    /// `with_gtid_set` configure), against the layout of the protocol documentation's
    /// COM_BINLOG_DUMP_GTID: command 0x1e, flags u16 (BINLOG_DUMP_NON_BLOCK 0x01 |
    /// BINLOG_THROUGH_GTID 0x04), server id u32, file name length u32 and name, position
    /// u64, then the SID block's length u32 and the block: the number of sids u64, and per
    /// sid its 16 uuid bytes, the number of intervals u64, and each interval's start and
    /// *exclusive* end, u64 each. All little-endian.
    #[test]
    fn the_dump_request_carries_the_set_end_exclusive() {
        let sids = set(&format!("{A}:1-57:60")).sids();
        let request = BinlogRequest::new(4101)
            .with_use_gtid(true)
            .with_flags(BinlogDumpFlags::BINLOG_DUMP_NON_BLOCK)
            .with_filename(&b""[..])
            .with_pos(4_u64)
            .with_sids(sids);
        let Either::Right(cmd) = request.as_cmd() else {
            panic!("not COM_BINLOG_DUMP_GTID");
        };
        let mut bytes = Vec::new();
        cmd.serialize(&mut bytes);
        let mut want = vec![0x1e];
        want.extend(0x0005u16.to_le_bytes());
        want.extend(4101u32.to_le_bytes());
        want.extend(0u32.to_le_bytes());
        want.extend(4u64.to_le_bytes());
        let block_len = 8 + 16 + 8 + 2 * 16;
        want.extend((block_len as u32).to_le_bytes());
        want.extend(1u64.to_le_bytes());
        want.extend([
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ]);
        want.extend(2u64.to_le_bytes());
        for (start, end) in [(1u64, 58u64), (60, 61)] {
            want.extend(start.to_le_bytes());
            want.extend(end.to_le_bytes());
        }
        assert_eq!(bytes, want);

        // A tagged source switches mysql_common to the tagged (TSID) block format: the
        // format byte 0x01 in the top byte of the sid count, and each sid with its tag.
        let tagged = BinlogRequest::new(4101)
            .with_use_gtid(true)
            .with_sids(set(&format!("{A}:1:tag_1:2")).sids());
        let Either::Right(cmd) = tagged.as_cmd() else {
            panic!("not COM_BINLOG_DUMP_GTID");
        };
        assert_eq!(cmd.sids().len(), 2);
        let mut bytes = Vec::new();
        cmd.serialize(&mut bytes);
        let header_end = 1 + 2 + 4 + 4 + 8 + 4;
        assert_eq!(bytes[header_end + 7], 0x01, "tagged format");
        assert!(bytes.windows(5).any(|w| w == b"tag_1"));
    }
}
