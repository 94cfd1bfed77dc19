//! A position in the binlog, in the server's own terms: a file name and a byte offset in it.
//!
//! Files of one server are numbered (`mariadb-bin.000012`): positions of different files
//! compare by that number, positions of one file by offset.

use std::cmp::Ordering;
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

#[cfg(test)]
mod tests {
    use super::*;

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
