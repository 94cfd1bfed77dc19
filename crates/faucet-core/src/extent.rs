//! How far along a read is, where its end is known: an [`Extent`] a source attaches to a
//! page ([`crate::Page::extent`]), and the arithmetic every display shares — the percentage
//! ([`Extent::percent`]) and the time left at the rate so far ([`EtaClock`]).
//!
//! A source says what it knows, in the unit it knows it: a file's bytes (`csv`, `jsonl`:
//! the byte offset after the page of the file's size), a table's rows (a full read of a
//! table: rows read of the catalog's row estimate, which can be exceeded), a change log's
//! bytes (a bounded change stream: its position minus its start, of its end minus its
//! start). A page without an extent (`None`) means "not known": a continuous change stream
//! has no end, a query no row count. Nothing is invented in its place.
//!
//! A read made of parts of their own — the tables of a `faucet replicate` copy — also
//! says which part a page is in and how far along that part is ([`ExtentPart`]).

use std::time::{Duration, Instant};

use serde::Serialize;

/// The unit of an [`Extent`]'s `done` and `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtentUnit {
    /// Bytes of a file.
    Bytes,
    /// Rows of a table.
    Rows,
    /// Bytes of a change log: PostgreSQL WAL, a MySQL binlog (across its files).
    WalBytes,
    /// Seconds of a MongoDB oplog: a bounded `mongodb-cdc` run's cluster time minus its
    /// start, of its end minus its start (the oplog has no byte position; the share is of
    /// time, not of events).
    OplogSeconds,
}

impl ExtentUnit {
    /// The unit as a word for a progress line: `bytes`, `rows`, `WAL bytes`.
    pub fn word(self) -> &'static str {
        match self {
            Self::Bytes => "bytes",
            Self::Rows => "rows",
            Self::WalBytes => "WAL bytes",
            Self::OplogSeconds => "oplog seconds",
        }
    }
}

/// How far along a read is: `done` of `total`, in `unit`. `estimate` when `total` is an
/// estimate that the read may exceed (a table's row estimate); then [`Extent::percent`]
/// stays below 100 until the read ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Extent {
    /// How much was read up to the page's end (from the source's beginning, not the run's).
    pub done: u64,
    /// How much there is to read in all.
    pub total: u64,
    /// The unit of both.
    pub unit: ExtentUnit,
    /// Whether `total` is an estimate (it may be exceeded, or not reached).
    pub estimate: bool,
    /// The part of the read the page is in, where the read has parts (the tables of a
    /// `faucet replicate` copy); `None` otherwise.
    pub part: Option<ExtentPart>,
}

/// The part of a read a page is in — a table of a `faucet replicate` copy — and how far
/// along that part is, in its [`Extent`]'s unit (an estimate when the extent's is).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExtentPart {
    /// The part's name: a table (`schema.table`, `database.table`) or collection (`db.coll`).
    pub name: String,
    /// Its place among the parts this read has, from 1.
    pub number: u32,
    /// How many parts this read has.
    pub count: u32,
    /// Read of this part so far.
    pub done: u64,
    /// This part's total.
    pub total: u64,
}

impl ExtentPart {
    /// The share of the part read, percent, with the rule of its extent ([`Extent::percent`];
    /// `estimate`: at most [`Extent::ESTIMATE_CAP`] until the part ends).
    pub fn percent(&self, estimate: bool) -> f64 {
        share_percent(self.done, self.total, estimate)
    }
}

/// `done` of `total`, percent, in `0.0..=100.0` (an empty total is 100); an `estimate` shows
/// at most [`Extent::ESTIMATE_CAP`]. The one rule of [`Extent::percent`] and
/// [`ExtentPart::percent`].
fn share_percent(done: u64, total: u64, estimate: bool) -> f64 {
    let share = if total == 0 {
        1.0
    } else {
        (done as f64 / total as f64).min(1.0)
    };
    let percent = share * 100.0;
    if estimate {
        percent.min(Extent::ESTIMATE_CAP)
    } else {
        percent
    }
}

impl Extent {
    /// The most an estimated extent shows before its read ends, percent: 99.
    pub const ESTIMATE_CAP: f64 = 99.0;

    /// An exact extent: `done` of `total` (`done` is capped at `total`).
    pub fn exact(done: u64, total: u64, unit: ExtentUnit) -> Self {
        Self {
            done: done.min(total),
            total,
            unit,
            estimate: false,
            part: None,
        }
    }

    /// An extent whose `total` is an estimate (`done` may exceed it).
    pub fn estimated(done: u64, total: u64, unit: ExtentUnit) -> Self {
        Self {
            done,
            total,
            unit,
            estimate: true,
            part: None,
        }
    }

    /// This extent, in `part` of the read.
    pub fn with_part(mut self, part: ExtentPart) -> Self {
        self.part = Some(part);
        self
    }

    /// The share done, percent, in `0.0..=100.0`. Exact: `done / total` (an empty total is
    /// 100). Estimate: the same, but at most [`Extent::ESTIMATE_CAP`] — an exceeded or empty
    /// estimate shows the cap, not 100 or more: only the read's end says it is done.
    pub fn percent(&self) -> f64 {
        share_percent(self.done, self.total, self.estimate)
    }

    /// What is left to read, in `unit` (0 for an exceeded estimate: then not known).
    pub fn remaining(&self) -> u64 {
        self.total.saturating_sub(self.done)
    }
}

/// Estimates the time left of a read from the rate so far: the first extent it sees is the
/// baseline, and [`EtaClock::eta`] divides what is left by the rate since then. No estimate
/// is made before [`EtaClock::MIN_SPAN`] of data, at a zero rate, when the unit or total
/// changed (another table, another file), or when an estimated total was reached.
#[derive(Debug, Clone, Default)]
pub struct EtaClock {
    first: Option<(Instant, Extent)>,
}

impl EtaClock {
    /// The least time between the baseline and now for an ETA: 3 s.
    pub const MIN_SPAN: Duration = Duration::from_secs(3);

    /// A clock with no baseline yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The time left for `extent`, seen at `now`; takes it as the baseline when there is
    /// none yet (or the unit or total changed).
    pub fn eta(&mut self, extent: &Extent, now: Instant) -> Option<Duration> {
        let (since, first) = match &self.first {
            Some((at, first)) if first.unit == extent.unit && first.total == extent.total => {
                (*at, first)
            }
            _ => {
                self.first = Some((now, extent.clone()));
                return None;
            }
        };
        eta_from(first, extent, now.saturating_duration_since(since))
    }
}

/// The time left for `now_at` given that `first` was seen `span` earlier: what is left,
/// divided by the rate between them. `None` when `span` is under [`EtaClock::MIN_SPAN`],
/// nothing was read since `first` (a zero rate), or an estimated total was reached (what is
/// left is not known). Zero when an exact read is complete.
pub fn eta_from(first: &Extent, now_at: &Extent, span: Duration) -> Option<Duration> {
    if span < EtaClock::MIN_SPAN {
        return None;
    }
    let remaining = now_at.remaining();
    if remaining == 0 {
        return (!now_at.estimate).then_some(Duration::ZERO);
    }
    let read = now_at.done.checked_sub(first.done).filter(|&d| d > 0)?;
    let per_second = read as f64 / span.as_secs_f64();
    Duration::try_from_secs_f64(remaining as f64 / per_second).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_extent_goes_to_100() {
        assert_eq!(Extent::exact(0, 200, ExtentUnit::Bytes).percent(), 0.0);
        assert_eq!(Extent::exact(50, 200, ExtentUnit::Bytes).percent(), 25.0);
        assert_eq!(Extent::exact(200, 200, ExtentUnit::Bytes).percent(), 100.0);
        assert_eq!(Extent::exact(0, 0, ExtentUnit::Bytes).percent(), 100.0);
        // Done is capped at the total.
        assert_eq!(Extent::exact(300, 200, ExtentUnit::Bytes).done, 200);
    }

    #[test]
    fn an_exceeded_estimate_stays_below_100() {
        let e = Extent::estimated(150, 100, ExtentUnit::Rows);
        assert_eq!(e.percent(), Extent::ESTIMATE_CAP);
        assert_eq!(e.remaining(), 0);
        assert_eq!(
            Extent::estimated(0, 0, ExtentUnit::Rows).percent(),
            Extent::ESTIMATE_CAP
        );
        assert_eq!(Extent::estimated(37, 100, ExtentUnit::Rows).percent(), 37.0);
        // No time left is claimed for an exceeded estimate.
        let first = Extent::estimated(10, 100, ExtentUnit::Rows);
        assert_eq!(eta_from(&first, &e, Duration::from_secs(10)), None);
    }

    #[test]
    fn the_eta_is_what_is_left_at_the_rate_so_far() {
        let first = Extent::exact(100, 1_000, ExtentUnit::Bytes);
        let now = Extent::exact(400, 1_000, ExtentUnit::Bytes);
        // 300 bytes in 10 s: 30 B/s; 600 left: 20 s.
        assert_eq!(
            eta_from(&first, &now, Duration::from_secs(10)),
            Some(Duration::from_secs(20))
        );
        // Too soon.
        assert_eq!(eta_from(&first, &now, Duration::from_secs(2)), None);
        // Zero rate.
        assert_eq!(eta_from(&first, &first, Duration::from_secs(10)), None);
        // Done.
        let end = Extent::exact(1_000, 1_000, ExtentUnit::Bytes);
        assert_eq!(
            eta_from(&first, &end, Duration::from_secs(10)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn the_clock_takes_its_first_extent_as_the_baseline() {
        let t0 = Instant::now();
        let mut clock = EtaClock::new();
        let a = Extent::estimated(0, 100, ExtentUnit::Rows);
        assert_eq!(clock.eta(&a, t0), None);
        let b = Extent::estimated(50, 100, ExtentUnit::Rows);
        assert_eq!(
            clock.eta(&b, t0 + Duration::from_secs(5)),
            Some(Duration::from_secs(5))
        );
        // Another total (the next table): a new baseline, no ETA yet.
        let c = Extent::estimated(10, 1_000, ExtentUnit::Rows);
        assert_eq!(clock.eta(&c, t0 + Duration::from_secs(6)), None);
        assert_eq!(
            clock.eta(
                &Extent::estimated(110, 1_000, ExtentUnit::Rows),
                t0 + Duration::from_secs(16)
            ),
            Some(Duration::from_secs(89))
        );
    }
}
