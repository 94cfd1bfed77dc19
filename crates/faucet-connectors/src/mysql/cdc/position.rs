//! A position in the binlog, in the server's own terms: a file name and a byte offset in it
//! ([`BinlogPos`]); and, on MariaDB, in the terms every server of a replication topology
//! shares: a GTID state ([`GtidState`]).
//!
//! Files of one server are numbered (`mariadb-bin.000012`): positions of different files
//! compare by that number, positions of one file by offset.
//!
//! A MariaDB GTID is `domain-server-seq` ([`MariadbGtid`]): the replication domain, the
//! `server_id` of the server that first committed the transaction, and a sequence number
//! that grows within the domain. A GTID state (`@@gtid_binlog_pos`, `BINLOG_GTID_POS(file,
//! pos)`, `@slave_connect_state`) is the last GTID of each domain, comma-separated
//! (`0-1-30,7-1-4`; empty when no transaction was logged yet): a position that a replica
//! with a different binlog can still find (MariaDB Knowledge Base, "Global Transaction ID").

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

/// A binlog position: `file` (as the server names it) and `pos`, the offset of the next
/// event to read (the end of the last event read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BinlogPos {
    /// The binlog file name (`mariadb-bin.000012`), without directory.
    pub(crate) file: String,
    /// The byte offset in it.
    pub(crate) pos: u64,
}

impl BinlogPos {
    /// A position.
    pub(crate) fn new(file: impl Into<String>, pos: u64) -> Self {
        Self {
            file: file.into(),
            pos,
        }
    }

    /// The file's sequence number: the digits after its last `.` (`000012` → 12), or `None`
    /// for a name without one.
    pub(crate) fn file_number(&self) -> Option<u64> {
        file_number(&self.file)
    }

    /// Whether `self` is at or past `other`: by file number, then offset. Positions of files
    /// whose names carry no number compare equal only in the same file.
    pub(crate) fn reached(&self, other: &BinlogPos) -> bool {
        matches!(
            self.compare(other),
            Some(Ordering::Greater | Ordering::Equal)
        )
    }

    /// The order of two positions, `None` when they cannot be compared (unnumbered files of
    /// different names).
    pub(crate) fn compare(&self, other: &BinlogPos) -> Option<Ordering> {
        if self.file == other.file {
            return Some(self.pos.cmp(&other.pos));
        }
        match (self.file_number(), other.file_number()) {
            (Some(a), Some(b)) if a != b => Some(a.cmp(&b)),
            _ => None,
        }
    }
}

impl fmt::Display for BinlogPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}

/// The sequence number of a binlog file name (`mariadb-bin.000012` → 12).
pub(crate) fn file_number(file: &str) -> Option<u64> {
    let (_, digits) = file.rsplit_once('.')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A MariaDB GTID, `domain-server-seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MariadbGtid {
    /// The replication domain (`gtid_domain_id`).
    pub(crate) domain: u32,
    /// The `server_id` of the server that first committed the transaction.
    pub(crate) server: u32,
    /// The sequence number within the domain.
    pub(crate) seq: u64,
}

impl MariadbGtid {
    /// Parses `domain-server-seq`; `None` for anything else (a MySQL `uuid:n`, say).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('-');
        let domain = parts.next()?.parse().ok()?;
        let server = parts.next()?.parse().ok()?;
        let seq = parts.next()?.parse().ok()?;
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            domain,
            server,
            seq,
        })
    }
}

impl fmt::Display for MariadbGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

/// A MariaDB GTID state: the last GTID of each replication domain, in MariaDB's text form
/// `0-1-30,7-1-4` (domains ascending; empty for no transaction yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GtidState {
    /// Domain → (server, seq) of its last GTID.
    domains: BTreeMap<u32, (u32, u64)>,
}

/// How a server's GTID state compares with a state a reader needs it to hold
/// ([`GtidState::holds`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holding {
    /// The server's binlog reaches every domain of the needed state.
    Holds,
    /// In `needed`'s domain the server's binlog ends at `has` (`None`: the domain is not in
    /// it at all), before `needed`: the server has not (yet) logged that transaction.
    Behind {
        /// The GTID needed.
        needed: MariadbGtid,
        /// The server's last GTID of that domain.
        has: Option<MariadbGtid>,
    },
    /// The server's last GTID of a domain has the needed sequence number but another
    /// origin server: a different transaction under the same domain and number (the two
    /// servers' histories diverged).
    Diverged {
        /// The GTID needed.
        needed: MariadbGtid,
        /// The server's GTID with the same domain and sequence number.
        has: MariadbGtid,
    },
}

impl GtidState {
    /// Parses MariaDB's text form (`0-1-30,7-1-4`, spaces and an empty text allowed); `None`
    /// when an element is not `domain-server-seq` or a domain repeats.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let mut domains = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let g = MariadbGtid::parse(part)?;
            if domains.insert(g.domain, (g.server, g.seq)).is_some() {
                return None;
            }
        }
        Some(Self { domains })
    }

    /// The state of one GTID (a bookmark of the old form, holding only the last GTID).
    pub(crate) fn of(gtid: MariadbGtid) -> Self {
        let mut state = Self::default();
        state.apply(gtid);
        state
    }

    /// The state after transaction `gtid` (it becomes its domain's last).
    pub(crate) fn apply(&mut self, gtid: MariadbGtid) {
        self.domains.insert(gtid.domain, (gtid.server, gtid.seq));
    }

    /// The last GTID of `domain`.
    pub(crate) fn get(&self, domain: u32) -> Option<MariadbGtid> {
        self.domains.get(&domain).map(|&(server, seq)| MariadbGtid {
            domain,
            server,
            seq,
        })
    }

    /// Its GTIDs, by domain.
    pub(crate) fn gtids(&self) -> impl Iterator<Item = MariadbGtid> + '_ {
        self.domains
            .iter()
            .map(|(&domain, &(server, seq))| MariadbGtid {
                domain,
                server,
                seq,
            })
    }

    /// Its domains.
    pub(crate) fn domains(&self) -> impl Iterator<Item = u32> + '_ {
        self.domains.keys().copied()
    }

    /// The number of domains.
    pub(crate) fn len(&self) -> usize {
        self.domains.len()
    }

    /// Whether a server whose binlog ends at state `self` (`@@gtid_binlog_pos`) holds every
    /// transaction up to `needed`: per domain of `needed`, the server's sequence number is at
    /// least as far; the same number with another origin server is a divergence. A larger
    /// number cannot prove that the server logged *the same* transaction under the needed
    /// number (that is for the dump itself, started in GTID strict mode, to find out).
    pub(crate) fn holds(&self, needed: &GtidState) -> Holding {
        for want in needed.gtids() {
            match self.get(want.domain) {
                Some(has) if has.seq > want.seq => {}
                Some(has) if has.seq == want.seq && has.server == want.server => {}
                Some(has) if has.seq == want.seq => {
                    return Holding::Diverged { needed: want, has };
                }
                has => return Holding::Behind { needed: want, has },
            }
        }
        Holding::Holds
    }

    /// The first domain in which state `self` of the oldest binlog file left (its
    /// `Gtid_list`, `BINLOG_GTID_POS(oldest, 4)`) is past `needed`: the transactions between
    /// were in files purged since. A domain of `self` that `needed` lacks counts too: none of
    /// its transactions was there at the needed point, and some were purged. `None` when no
    /// domain is past; else the needed GTID of that domain (`None`: none) and the oldest
    /// file's.
    pub(crate) fn purged_past(
        &self,
        needed: &GtidState,
    ) -> Option<(Option<MariadbGtid>, MariadbGtid)> {
        self.gtids()
            .find_map(|oldest| match needed.get(oldest.domain) {
                Some(want) if want.seq >= oldest.seq => None,
                want => Some((want, oldest)),
            })
    }
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.gtids().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtid_states_parse_apply_and_print_in_mariadb_form() {
        let mut s = GtidState::parse("7-1-4, 0-1-30").expect("a state");
        assert_eq!(s.to_string(), "0-1-30,7-1-4");
        s.apply(MariadbGtid::parse("0-2-31").expect("gtid"));
        assert_eq!(s.to_string(), "0-2-31,7-1-4");
        assert_eq!(GtidState::parse("").expect("empty").len(), 0);
        assert_eq!(GtidState::parse("0-1-3,0-1-4"), None, "a domain twice");
        for bad in [
            "x",
            "0-1",
            "0-1-2-3",
            "3e11f8a2-2f1c-11ee-9d3a-0242ac120002:5",
        ] {
            assert_eq!(MariadbGtid::parse(bad), None, "{bad}");
            assert_eq!(GtidState::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_server_holds_a_state_it_reached_in_every_domain() {
        let st = |t: &str| GtidState::parse(t).expect("state");
        let g = |t: &str| MariadbGtid::parse(t).expect("gtid");
        let needed = st("0-1-30,7-1-4");
        assert_eq!(st("0-1-30,7-1-4").holds(&needed), Holding::Holds);
        assert_eq!(st("0-2-35,7-1-9,9-3-1").holds(&needed), Holding::Holds);
        assert_eq!(
            st("0-1-29,7-1-4").holds(&needed),
            Holding::Behind {
                needed: g("0-1-30"),
                has: Some(g("0-1-29"))
            }
        );
        assert_eq!(
            st("0-1-30").holds(&needed),
            Holding::Behind {
                needed: g("7-1-4"),
                has: None
            }
        );
        assert_eq!(
            st("0-3-30,7-1-4").holds(&needed),
            Holding::Diverged {
                needed: g("0-1-30"),
                has: g("0-3-30")
            }
        );
        assert_eq!(st("0-1-12").purged_past(&needed), None);
        assert_eq!(st("0-1-30,7-1-4").purged_past(&needed), None);
        assert_eq!(st("").purged_past(&needed), None);
        assert_eq!(
            st("0-1-31").purged_past(&needed),
            Some((Some(g("0-1-30")), g("0-1-31")))
        );
        assert_eq!(
            st("0-1-12,9-2-1").purged_past(&needed),
            Some((None, g("9-2-1"))),
            "a domain the needed state lacks, purged in part"
        );
    }

    #[test]
    fn positions_order_by_file_number_then_offset() {
        let a = BinlogPos::new("mariadb-bin.000009", 900);
        let b = BinlogPos::new("mariadb-bin.000010", 4);
        assert!(b.reached(&a));
        assert!(!a.reached(&b));
        assert!(a.reached(&a.clone()));
        assert!(BinlogPos::new("mariadb-bin.000010", 5).reached(&b));
        assert_eq!(file_number("x.000123"), Some(123));
        assert_eq!(file_number("nofile"), None);
        assert_eq!(
            BinlogPos::new("a", 1).compare(&BinlogPos::new("b", 1)),
            None
        );
        assert_eq!(b.to_string(), "mariadb-bin.000010:4");
    }
}
