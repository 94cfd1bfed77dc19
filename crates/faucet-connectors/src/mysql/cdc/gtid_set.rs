//! MySQL GTID sets ([`MysqlGtidSet`]): what `@@gtid_executed`, `@@gtid_purged` and the
//! `Executed_Gtid_Set` of `SHOW BINARY LOG STATUS` print, what a `mysql-cdc` bookmark of a
//! MySQL server keeps as its `gtid_state`, and what `COM_BINLOG_DUMP_GTID` carries.
//!
//! Written to the MySQL 8.4 Reference Manual, 19.1.3.1 "GTID Format and Storage"
//! (<https://dev.mysql.com/doc/refman/8.4/en/replication-gtids-concepts.html>), section
//! "GTID Sets"; not tested against a MySQL server (none can run here):
//!
//! ```text
//! gtid_set: uuid_set [, uuid_set] ... | ''
//! uuid_set: uuid:[tag:]interval[:interval]...[:tag:interval[:interval]...]...
//! uuid:     hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh   (h: hex digit, either case)
//! tag:      [a-z_][a-z0-9_]{0,31}                  (MySQL 8.3+, case-insensitive)
//! interval: m[-n]                                  (1 <= m <= n)
//! ```
//!
//! * A GTID is `uuid:n`, or tagged (MySQL 8.3+) `uuid:tag:n`: the transaction source
//!   (TSID: the uuid and the tag, [`Tsid`]) and its transaction number (GNO, ≥ 1 and below
//!   2^63 − 1).
//! * Servers print sets normalized (intervals sorted and merged, each uuid once, tags after
//!   the untagged intervals of their uuid), lower-case, and `@@gtid_executed` separates its
//!   uuid sets with `,\n`. Any of these forms parse here, uuids and tags in either case,
//!   overlapping or unsorted intervals merged; [`fmt::Display`] prints the normalized form
//!   with `,` alone. The empty text is the empty set.
//! * Tagged GTIDs are parsed (not refused): the tag rules are mysql_common's
//!   [`mysql_common::packets::Tag`] (MySQL's, after lower-casing).
//! * On the wire ([`MysqlGtidSet::sids`], `COM_BINLOG_DUMP_GTID`) an interval's end is
//!   *exclusive*: `1-5` is sent as start 1, end 6 (MySQL client/server protocol,
//!   "COM_BINLOG_DUMP_GTID"; mysql_common's `GnoInterval::end` "exclusive", and its
//!   `Sid::from_str` adds one to the text's end).
//!
//! Errors are typed ([`GtidSetError`]) and name the text and what in it is wrong.

use std::collections::BTreeMap;
use std::fmt;

use mysql_common::binlog::events::PreviousGtidsEvent;
use mysql_common::packets::{GnoInterval, Sid, Tag};

/// The largest transaction number a GTID can have: MySQL's `GNO_END` is 2^63 − 1, exclusive.
const GNO_MAX: u64 = i64::MAX as u64 - 1;

/// Error texts quote at most this many characters of the set they could not read.
const QUOTE_MAX: usize = 200;

/// A transaction source: a server uuid and, for tagged GTIDs (MySQL 8.3+), a tag. Sorts by
/// uuid bytes, then untagged before tagged, tags by name (the order servers print them in).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Tsid {
    /// The uuid's 16 bytes.
    pub(crate) uuid: [u8; 16],
    /// The tag, lower-case.
    pub(crate) tag: Option<Tag<'static>>,
}

/// One MySQL GTID: `uuid:n` or `uuid:tag:n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MysqlGtid {
    /// Its transaction source.
    pub(crate) tsid: Tsid,
    /// Its transaction number (GNO), ≥ 1.
    pub(crate) gno: u64,
}

/// A set of MySQL GTIDs: per transaction source, sorted, disjoint, non-adjacent inclusive
/// intervals of transaction numbers (never an empty list).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MysqlGtidSet {
    tsids: BTreeMap<Tsid, Vec<(u64, u64)>>,
}

/// A text that is not a MySQL GTID set (or GTID), with what is wrong in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not a MySQL GTID{what}: {why} (expected `uuid:1-5:7,uuid:tag:1-3`, MySQL 8.4 \
     Reference Manual 19.1.3.1, GTID Sets)"
)]
pub(crate) struct GtidSetError {
    /// The text (its first 200 characters).
    pub(crate) text: String,
    /// ` set`, or empty for one GTID.
    pub(crate) what: &'static str,
    /// What is wrong.
    pub(crate) why: GtidSetProblem,
}

/// What is wrong in a GTID set's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GtidSetProblem {
    /// A uuid that is not 32 hex digits grouped 8-4-4-4-12.
    #[error("`{0}` is not a uuid (32 hex digits grouped 8-4-4-4-12)")]
    Uuid(String),
    /// A uuid set, or a tag, without transaction numbers after it.
    #[error("`{0}` has no transaction numbers after it")]
    NoInterval(String),
    /// An interval that is not `n` or `m-n` with 1 ≤ m ≤ n < 2^63 − 1.
    #[error("`{0}` is not a transaction number `n` or an interval `m-n` (1 <= m <= n < 2^63-1)")]
    Interval(String),
    /// A tag that breaks MySQL's rules.
    #[error("`{tag}` is not a GTID tag ({why}; tags are [a-z_][a-z0-9_]{{0,31}})")]
    Tag {
        /// The tag as written.
        tag: String,
        /// mysql_common's reason.
        why: String,
    },
    /// An empty member between commas.
    #[error("it has an empty member between commas")]
    EmptyMember,
    /// Not exactly one GTID (for [`MysqlGtid::parse`]).
    #[error("it is not one GTID `uuid:n` or `uuid:tag:n`")]
    NotOne,
}

fn quote(text: &str) -> String {
    if text.chars().count() <= QUOTE_MAX {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(QUOTE_MAX).collect();
        s.push('…');
        s
    }
}

/// Parses a uuid, either case, hyphens at 8-4-4-4-12.
fn parse_uuid(text: &str) -> Result<[u8; 16], GtidSetProblem> {
    let bad = || GtidSetProblem::Uuid(text.to_owned());
    let groups: Vec<&str> = text.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lens != [8, 4, 4, 4, 12] {
        return Err(bad());
    }
    let hex: Vec<u8> = groups.concat().into_bytes();
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16).ok_or_else(bad);
        let (hi, lo) = (digit(pair[0])?, digit(pair[1])?);
        out[i] = u8::try_from(hi * 16 + lo).map_err(|_| bad())?;
    }
    Ok(out)
}

fn parse_gno(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|n| (1..=GNO_MAX).contains(n))
}

/// `n` or `m-n`, inclusive.
fn parse_interval(text: &str) -> Result<(u64, u64), GtidSetProblem> {
    let bad = || GtidSetProblem::Interval(text.to_owned());
    let (a, b) = match text.split_once('-') {
        Some((a, b)) => (parse_gno(a).ok_or_else(bad)?, parse_gno(b).ok_or_else(bad)?),
        None => {
            let n = parse_gno(text).ok_or_else(bad)?;
            (n, n)
        }
    };
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

fn parse_tag(text: &str) -> Result<Tag<'static>, GtidSetProblem> {
    Tag::new(text.to_ascii_lowercase()).map_err(|e| GtidSetProblem::Tag {
        tag: text.to_owned(),
        why: e.to_string(),
    })
}

fn write_uuid(f: &mut fmt::Formatter<'_>, uuid: &[u8; 16]) -> fmt::Result {
    for (i, b) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            f.write_str("-")?;
        }
        write!(f, "{b:02x}")?;
    }
    Ok(())
}

impl MysqlGtid {
    /// Parses one GTID, `uuid:n` or `uuid:tag:n` (as `events::mysql_gtid` prints a GTID
    /// event's).
    ///
    /// # Errors
    /// [`GtidSetError`] naming the text.
    pub(crate) fn parse(text: &str) -> Result<Self, GtidSetError> {
        let err = |why| GtidSetError {
            text: quote(text),
            what: "",
            why,
        };
        let set = MysqlGtidSet::parse(text).map_err(|e| err(e.why))?;
        let mut one = set.tsids.into_iter();
        match (one.next(), one.next()) {
            (Some((tsid, intervals)), None)
                if intervals.len() == 1 && intervals[0].0 == intervals[0].1 =>
            {
                Ok(Self {
                    tsid,
                    gno: intervals[0].0,
                })
            }
            _ => Err(err(GtidSetProblem::NotOne)),
        }
    }
}

impl fmt::Display for MysqlGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_uuid(f, &self.tsid.uuid)?;
        if let Some(tag) = &self.tsid.tag {
            write!(f, ":{tag}")?;
        }
        write!(f, ":{}", self.gno)
    }
}

impl MysqlGtidSet {
    /// Parses a GTID set's text (any of the forms in the module docs).
    ///
    /// # Errors
    /// [`GtidSetError`] naming the text and the part of it that is wrong.
    pub(crate) fn parse(text: &str) -> Result<Self, GtidSetError> {
        let err = |why| GtidSetError {
            text: quote(text),
            what: " set",
            why,
        };
        let mut set = Self::default();
        if text.trim().is_empty() {
            return Ok(set);
        }
        for member in text.split(',').map(str::trim) {
            if member.is_empty() {
                return Err(err(GtidSetProblem::EmptyMember));
            }
            let mut parts = member.split(':').map(str::trim);
            let uuid = parse_uuid(parts.next().unwrap_or_default()).map_err(err)?;
            let mut tsid = Tsid { uuid, tag: None };
            // Whether any interval was read, and whether a tag waits for its first one.
            let (mut numbered, mut tag_pending) = (false, false);
            for part in parts {
                if part.starts_with(|c: char| c.is_ascii_digit()) {
                    let (a, b) = parse_interval(part).map_err(err)?;
                    set.add_interval(&tsid, a, b);
                    numbered = true;
                    tag_pending = false;
                } else {
                    if tag_pending {
                        return Err(err(GtidSetProblem::NoInterval(member.to_owned())));
                    }
                    tsid = Tsid {
                        uuid,
                        tag: Some(parse_tag(part).map_err(err)?),
                    };
                    tag_pending = true;
                }
            }
            if !numbered || tag_pending {
                return Err(err(GtidSetProblem::NoInterval(member.to_owned())));
            }
        }
        Ok(set)
    }

    /// Whether the set holds no GTID.
    pub(crate) fn is_empty(&self) -> bool {
        self.tsids.is_empty()
    }

    /// Adds the transactions `start..=end` of `tsid`.
    fn add_interval(&mut self, tsid: &Tsid, start: u64, end: u64) {
        let intervals = self.tsids.entry(tsid.clone()).or_default();
        intervals.push((start, end));
        intervals.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
        for &(a, b) in intervals.iter() {
            match merged.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        *intervals = merged;
    }

    /// Adds one GTID (a transaction the stream passed).
    pub(crate) fn add(&mut self, gtid: &MysqlGtid) {
        self.add_interval(&gtid.tsid, gtid.gno, gtid.gno);
    }

    /// The set of a MySQL `PREVIOUS_GTIDS` event (the GTIDs of every transaction before its
    /// binlog file): its sids' intervals are end-exclusive, as on the wire.
    pub(crate) fn from_previous_gtids(event: &PreviousGtidsEvent<'_>) -> Self {
        let mut set = Self::default();
        for sid in event.sids() {
            let tsid = Tsid {
                uuid: sid.uuid(),
                tag: sid.tag().map(|t| t.clone().into_owned()),
            };
            for iv in sid.intervals() {
                if iv.end() > iv.start() {
                    set.add_interval(&tsid, iv.start(), iv.end() - 1);
                }
            }
        }
        set
    }

    /// Adds every GTID of `other` (the tests' union; the stream adds one GTID at a time).
    #[cfg(test)]
    pub(crate) fn union(&mut self, other: &MysqlGtidSet) {
        for (tsid, intervals) in &other.tsids {
            for &(a, b) in intervals {
                self.add_interval(tsid, a, b);
            }
        }
    }

    /// Whether the set holds `gtid`.
    pub(crate) fn contains(&self, gtid: &MysqlGtid) -> bool {
        self.tsids
            .get(&gtid.tsid)
            .is_some_and(|iv| iv.iter().any(|&(a, b)| a <= gtid.gno && gtid.gno <= b))
    }

    /// The GTIDs of `self` that `other` lacks (MySQL's `GTID_SUBTRACT(self, other)`).
    pub(crate) fn subtract(&self, other: &MysqlGtidSet) -> MysqlGtidSet {
        let mut out = MysqlGtidSet::default();
        for (tsid, intervals) in &self.tsids {
            let holes = other.tsids.get(tsid).map(Vec::as_slice).unwrap_or_default();
            for &(a, b) in intervals {
                let mut from = a;
                for &(ha, hb) in holes {
                    if hb < from || ha > b {
                        continue;
                    }
                    if ha > from {
                        out.add_interval(tsid, from, ha - 1);
                    }
                    from = hb.saturating_add(1);
                    if from > b {
                        break;
                    }
                }
                if from <= b {
                    out.add_interval(tsid, from, b);
                }
            }
        }
        out
    }

    /// Whether every GTID of `self` is in `other` (MySQL's `GTID_SUBSET(self, other)`),
    /// computed here rather than by the server.
    pub(crate) fn is_subset_of(&self, other: &MysqlGtidSet) -> bool {
        self.subtract(other).is_empty()
    }

    /// The set as `COM_BINLOG_DUMP_GTID`'s SID block: one [`Sid`] per transaction source
    /// (tagged ones with their tag, which makes mysql_common send the tagged format), each
    /// interval with its end *exclusive* (`1-5` → `GnoInterval::new(1, 6)`).
    pub(crate) fn sids(&self) -> Vec<Sid<'static>> {
        self.tsids
            .iter()
            .map(|(tsid, intervals)| {
                let sid = Sid::new(tsid.uuid).with_intervals(
                    intervals
                        .iter()
                        .map(|&(a, b)| GnoInterval::new(a, b.saturating_add(1)))
                        .collect(),
                );
                match &tsid.tag {
                    Some(tag) => sid.with_tag(tag.clone()),
                    None => sid,
                }
            })
            .collect()
    }
}

impl fmt::Display for MysqlGtidSet {
    /// The normalized text: lower-case, each uuid once, its untagged intervals then each tag
    /// with its intervals, uuid sets separated by `,` (no newline).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last_uuid: Option<[u8; 16]> = None;
        for (tsid, intervals) in &self.tsids {
            if last_uuid != Some(tsid.uuid) {
                if last_uuid.is_some() {
                    f.write_str(",")?;
                }
                write_uuid(f, &tsid.uuid)?;
                last_uuid = Some(tsid.uuid);
            }
            if let Some(tag) = &tsid.tag {
                write!(f, ":{tag}")?;
            }
            for &(a, b) in intervals {
                if a == b {
                    write!(f, ":{a}")?;
                } else {
                    write!(f, ":{a}-{b}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manual's server uuid.
    const A: &str = "3E11FA47-71CA-11E1-9E33-C80AA9429562";
    const A_LOWER: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

    fn set(text: &str) -> MysqlGtidSet {
        MysqlGtidSet::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn gtid(text: &str) -> MysqlGtid {
        MysqlGtid::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// The manual's examples (19.1.3.1): one GTID, a range, several intervals, and the
    /// two-server set; printed the way servers print them (lower-case).
    #[test]
    fn the_manuals_examples_parse_and_print_normalized() {
        assert_eq!(
            gtid(&format!("{A}:23")).to_string(),
            format!("{A_LOWER}:23")
        );
        assert_eq!(
            set(&format!("{A}:1-5")).to_string(),
            format!("{A_LOWER}:1-5")
        );
        assert_eq!(
            set(&format!("{A}:1-3:11:47-49")).to_string(),
            format!("{A_LOWER}:1-3:11:47-49")
        );
        // "a GTID set that includes GTIDs from two servers" — and the same with the
        // `,\n` separator of @@gtid_executed.
        let two = format!("{A}:1-3:11:47-49, 2174B383-5441-11E8-B90A-C80AA9429562:1-19");
        let expected = format!("2174b383-5441-11e8-b90a-c80aa9429562:1-19,{A_LOWER}:1-3:11:47-49");
        assert_eq!(set(&two).to_string(), expected);
        assert_eq!(set(&two.replace(", ", ",\n")).to_string(), expected);
        // The empty set, and what an executed set with nothing looks like.
        assert!(set("").is_empty());
        assert!(set(" \n").is_empty());
        assert_eq!(set("").to_string(), "");
        // Unsorted, overlapping and adjacent intervals merge; a uuid set twice merges.
        assert_eq!(
            set(&format!("{A}:7:1-3:4-5:2, {A_LOWER}:6")).to_string(),
            format!("{A_LOWER}:1-7")
        );
        // Each text parses back to the same set.
        for t in [expected.as_str(), ""] {
            assert_eq!(set(&set(t).to_string()), set(t));
        }
    }

    /// MySQL 8.3+ tagged GTIDs: `uuid:tag:n`, tags after a uuid's untagged intervals, in
    /// either case (they are lower-cased).
    #[test]
    fn tagged_gtids_parse_under_their_own_source() {
        let t = set(&format!("{A}:1-5:Domain_1:1-3:11:_x:4,{A}:domain_1:4"));
        assert_eq!(t.to_string(), format!("{A_LOWER}:1-5:_x:4:domain_1:1-4:11"));
        assert!(t.contains(&gtid(&format!("{A}:domain_1:11"))));
        assert!(!t.contains(&gtid(&format!("{A}:11"))), "another source");
        assert_eq!(
            set(&format!("{A}:tag:1")).to_string(),
            format!("{A_LOWER}:tag:1")
        );
        assert_eq!(
            gtid(&format!("{A}:Domain_1:23")).to_string(),
            format!("{A_LOWER}:domain_1:23")
        );
    }

    /// Every malformed shape is a typed error naming the text and the part.
    #[test]
    fn malformed_sets_are_typed_errors_naming_the_part() {
        let cases: &[(&str, GtidSetProblem)] = &[
            (
                "3E11FA47-71CA-11E1-9E33:1",
                GtidSetProblem::Uuid("3E11FA47-71CA-11E1-9E33".into()),
            ),
            (
                "3E11FA47-71CA-11E1-9E33-C80AA942956G:1",
                GtidSetProblem::Uuid("3E11FA47-71CA-11E1-9E33-C80AA942956G".into()),
            ),
            ("0-1-30", GtidSetProblem::Uuid("0-1-30".into())),
            (A, GtidSetProblem::NoInterval(A.into())),
            (
                &format!("{A}:tag"),
                GtidSetProblem::NoInterval(format!("{A}:tag")),
            ),
            (
                &format!("{A}:1:tag"),
                GtidSetProblem::NoInterval(format!("{A}:1:tag")),
            ),
            (
                &format!("{A}:a:b:1"),
                GtidSetProblem::NoInterval(format!("{A}:a:b:1")),
            ),
            (&format!("{A}:0"), GtidSetProblem::Interval("0".into())),
            (&format!("{A}:5-3"), GtidSetProblem::Interval("5-3".into())),
            (&format!("{A}:1-"), GtidSetProblem::Interval("1-".into())),
            (
                &format!("{A}:1-2-3"),
                GtidSetProblem::Interval("1-2-3".into()),
            ),
            (&format!("{A}:1x"), GtidSetProblem::Interval("1x".into())),
            (
                &format!("{A}:9223372036854775807"),
                GtidSetProblem::Interval("9223372036854775807".into()),
            ),
            (&format!("{A}:1,,{A}:2"), GtidSetProblem::EmptyMember),
        ];
        for (text, why) in cases {
            let e = MysqlGtidSet::parse(text).expect_err(text);
            assert_eq!(&e.why, why, "{text}");
            assert_eq!(e.text, *text);
            assert!(e.to_string().contains(text), "{e}");
        }
        let e =
            MysqlGtidSet::parse(&format!("{A}:9tag:1")).expect_err("a tag starting with a digit");
        assert_eq!(e.why, GtidSetProblem::Interval("9tag".into()));
        let e = MysqlGtidSet::parse(&format!("{A}:1:t-a-g:1")).expect_err("a bad tag");
        assert!(
            matches!(&e.why, GtidSetProblem::Tag { tag, .. } if tag == "t-a-g"),
            "{e}"
        );
        let long = format!("{A}:1:{}:1", "t".repeat(33));
        assert!(matches!(
            MysqlGtidSet::parse(&long).expect_err("a tag too long").why,
            GtidSetProblem::Tag { .. }
        ));
        for not_one in [
            format!("{A}:1-2"),
            format!("{A}:1:3"),
            format!("{A}:1,{A_LOWER}:tag:1"),
            String::new(),
        ] {
            assert_eq!(
                MysqlGtid::parse(&not_one).expect_err(&not_one).why,
                GtidSetProblem::NotOne,
                "{not_one}"
            );
        }
        let huge = format!("{A}:{}", "1:".repeat(500));
        assert!(
            MysqlGtidSet::parse(&huge)
                .expect_err("trailing colon")
                .text
                .ends_with('…')
        );
    }

    /// Union, adding one GTID, subtraction and subset, on the manual's shapes.
    #[test]
    fn union_add_subtract_and_subset() {
        let mut s = set(&format!("{A}:1-3:11"));
        s.add(&gtid(&format!("{A}:4")));
        assert_eq!(s.to_string(), format!("{A_LOWER}:1-4:11"));
        s.add(&gtid(&format!("{A}:12")));
        s.add(&gtid(&format!("{A}:12")));
        assert_eq!(s.to_string(), format!("{A_LOWER}:1-4:11-12"));
        s.union(&set(&format!(
            "{A}:5-10, 2174B383-5441-11E8-B90A-C80AA9429562:1-19"
        )));
        assert_eq!(
            s.to_string(),
            format!("2174b383-5441-11e8-b90a-c80aa9429562:1-19,{A_LOWER}:1-12")
        );

        let big = set(&format!(
            "{A}:1-3:11:47-49, 2174B383-5441-11E8-B90A-C80AA9429562:1-19"
        ));
        assert!(set(&format!("{A}:1-2:48")).is_subset_of(&big));
        assert!(set("").is_subset_of(&big));
        assert!(set("").is_subset_of(&set("")));
        assert!(big.is_subset_of(&big));
        assert!(!big.is_subset_of(&set("")));
        assert!(!set(&format!("{A}:1-4")).is_subset_of(&big));
        assert!(
            !set(&format!("{A}:tag:1")).is_subset_of(&big),
            "a tag is its own source"
        );
        assert_eq!(
            set(&format!("{A}:1-20")).subtract(&big).to_string(),
            format!("{A_LOWER}:4-10:12-20")
        );
        assert_eq!(
            big.subtract(&set(&format!("{A}:2:47-100"))).to_string(),
            format!("2174b383-5441-11e8-b90a-c80aa9429562:1-19,{A_LOWER}:1:3:11")
        );
    }

    /// A `PREVIOUS_GTIDS` event's end-exclusive intervals, read back as the set's text.
    #[test]
    fn previous_gtids_events_read_end_exclusive() {
        use mysql_common::binlog::events::PreviousGtidsSid;
        let uuid = set(&format!("{A}:1")).sids()[0].uuid();
        let tag = Tag::new("tag_1").expect("a tag");
        let event = PreviousGtidsEvent::new(vec![
            PreviousGtidsSid::new(
                uuid,
                None,
                vec![GnoInterval::new(1, 58), GnoInterval::new(60, 61)],
            ),
            PreviousGtidsSid::new(uuid, Some(tag), vec![GnoInterval::new(3, 5)]),
        ]);
        assert_eq!(
            MysqlGtidSet::from_previous_gtids(&event).to_string(),
            format!("{A_LOWER}:1-57:60:tag_1:3-4")
        );
        assert!(MysqlGtidSet::from_previous_gtids(&PreviousGtidsEvent::new(vec![])).is_empty());
    }

    /// The SID block of `COM_BINLOG_DUMP_GTID`: one per source, intervals end-exclusive.
    #[test]
    fn sids_send_intervals_end_exclusive() {
        let sids = set(&format!("{A}:1-3:11:tag:5")).sids();
        assert_eq!(sids.len(), 2);
        assert_eq!(sids[0].uuid()[..4], [0x3e, 0x11, 0xfa, 0x47]);
        assert_eq!(sids[0].tag(), None);
        assert_eq!(
            sids[0].intervals(),
            [GnoInterval::new(1, 4), GnoInterval::new(11, 12)]
        );
        assert_eq!(sids[1].tag().map(|t| t.as_str()), Some("tag"));
        assert_eq!(sids[1].intervals(), [GnoInterval::new(5, 6)]);
        // mysql_common prints a Sid back in the text form: the same intervals.
        assert_eq!(sids[0].to_string(), format!("{A_LOWER}:1-3:11"));
        assert!(set("").sids().is_empty());
    }
}
