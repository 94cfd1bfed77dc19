//! [`BinlogSpan`]: the binlog bytes a bounded run reads, from its start position to the end
//! of the log when it opened, across files — how far along it is for its progress
//! ([`faucet_core::Extent`] in [`ExtentUnit::WalBytes`]).
//!
//! A position's offset in the whole log is the sizes of the files before its file (`SHOW
//! BINARY LOGS`, oldest first) plus its offset in its file. The span is not known when a
//! file between the start and the end has no size, or either position's file is not listed
//! (purged, or a carried-over stream whose position is another server's).

use faucet_core::{Extent, ExtentUnit};

use super::position::{BinlogPos, file_number};

/// The binlog a bounded run reads, from `start` to `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BinlogSpan {
    /// Each file's name and the offset of its first byte in the whole log.
    files: Vec<(String, u64)>,
    start: u64,
    end: u64,
}

impl BinlogSpan {
    /// The span from `start` to `end` over `files` (name and size, oldest first); `None`
    /// when not known (see the module doc).
    pub(crate) fn new(
        files: &[(String, Option<u64>)],
        start: &BinlogPos,
        end: &BinlogPos,
    ) -> Option<Self> {
        let mut bases = Vec::with_capacity(files.len());
        let mut base = Some(0u64);
        for (name, size) in files {
            // A file without a size leaves every later file's offset unknown.
            let Some(at) = base else { break };
            bases.push((name.clone(), at));
            base = size.and_then(|s| at.checked_add(s));
        }
        let mut span = Self {
            files: bases,
            start: 0,
            end: 0,
        };
        span.start = span.offset(start)?;
        span.end = span.offset(end)?.max(span.start);
        Some(span)
    }

    /// `at`'s offset in the whole log; `None` when its file is not listed.
    fn offset(&self, at: &BinlogPos) -> Option<u64> {
        let (_, base) = self.files.iter().find(|(name, _)| *name == at.file)?;
        base.checked_add(at.pos)
    }

    /// How far along a read at `at` is: the bytes from the start to `at` of those from the
    /// start to the end; `None` when `at`'s file is not listed (a file rotated in after the
    /// run opened lies past its end: the end is then reached).
    pub(crate) fn extent(&self, at: &BinlogPos) -> Option<Extent> {
        let total = self.end - self.start;
        let done = match self.offset(at) {
            Some(offset) => offset.saturating_sub(self.start),
            None => {
                let last = self.files.last().and_then(|(f, _)| file_number(f));
                match (at.file_number(), last) {
                    (Some(n), Some(last)) if n > last => total,
                    _ => return None,
                }
            }
        };
        Some(Extent::exact(done, total, ExtentUnit::WalBytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<(String, Option<u64>)> {
        vec![
            ("bin.000001".into(), Some(1_000)),
            ("bin.000002".into(), Some(500)),
            ("bin.000003".into(), Some(300)),
        ]
    }

    #[test]
    fn the_span_runs_across_files() {
        let at = |f: &str, p| BinlogPos::new(f, p);
        let span = BinlogSpan::new(&files(), &at("bin.000001", 900), &at("bin.000003", 200))
            .expect("known");
        // 100 left in file 1, 500 in file 2, 200 in file 3.
        let e = span.extent(&at("bin.000001", 900)).expect("extent");
        assert_eq!((e.done, e.total), (0, 800));
        let e = span.extent(&at("bin.000002", 250)).expect("extent");
        assert_eq!((e.done, e.total), (350, 800));
        let e = span.extent(&at("bin.000003", 200)).expect("extent");
        assert_eq!((e.done, e.percent()), (800, 100.0));
        // Past the end (a later file, rotated in since): the end.
        let e = span.extent(&at("bin.000004", 4)).expect("extent");
        assert_eq!(e.done, 800);
        assert_eq!(span.extent(&at("other.000001", 4)), None);
    }

    #[test]
    fn an_unknown_size_or_file_leaves_the_span_unknown() {
        let at = |f: &str, p| BinlogPos::new(f, p);
        let mut holes = files();
        holes[1].1 = None;
        assert_eq!(
            BinlogSpan::new(&holes, &at("bin.000001", 4), &at("bin.000003", 4)),
            None
        );
        assert!(BinlogSpan::new(&holes, &at("bin.000001", 4), &at("bin.000002", 4)).is_some());
        assert_eq!(
            BinlogSpan::new(&files(), &at("gone.000001", 4), &at("bin.000003", 4)),
            None
        );
    }
}
