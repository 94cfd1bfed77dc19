//! [`FileBookmark`]: where a file source stopped, and the checks that it still fits the file.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use faucet_core::{Bookmark, FaucetError};
use serde::{Deserialize, Serialize};

/// The bookmark the `csv` and `jsonl` sources put after every page:
/// `{"file": "data/orders.csv", "byte_offset": 5120, "line": 101, "records": 99}`.
///
/// Resuming seeks to `byte_offset` and reads on; nothing before it is read again (except a
/// CSV header, re-read from the start for the column names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileBookmark {
    /// The source's configured path, as given (for the identity check and for people).
    pub file: String,
    /// The byte position right after the page's last record (its line terminator included
    /// when it has one); counted from the start of the file, a UTF-8 BOM included.
    pub byte_offset: u64,
    /// The 1-based line number at `byte_offset` (one more than the `\n` bytes before it).
    pub line: u64,
    /// The data records read from the start of the file up to `byte_offset` (a CSV header
    /// is not a record).
    pub records: u64,
}

impl FileBookmark {
    /// The bookmark as the JSON value a page carries.
    pub fn to_json(&self) -> Bookmark {
        serde_json::json!({
            "file": self.file,
            "byte_offset": self.byte_offset,
            "line": self.line,
            "records": self.records,
        })
    }

    /// Reads a stored bookmark back.
    ///
    /// # Errors
    /// [`FaucetError::State`] when `value` is not a bookmark a file source made.
    pub(crate) fn parse(
        connector: &str,
        path: &Path,
        value: Bookmark,
    ) -> Result<Self, FaucetError> {
        serde_json::from_value(value.clone()).map_err(|e| {
            FaucetError::state_io(
                connector,
                format!(
                    "the stored bookmark {value} was not made by a {connector} source reading {} \
                     ({e}); delete the state key to read the file from the beginning",
                    path.display()
                ),
                e,
            )
        })
    }

    /// Checks that this bookmark fits the file at `path` (opened as `file`, `size` bytes):
    /// the same file name, `byte_offset` between `data_start` (after a BOM and a header) and
    /// the end, and right after a record terminator (one of `terminators`) unless it is at
    /// `data_start` or at the end. A bookmark made at the end of a file whose last record
    /// had no line break also fits when the file grew by a terminator (or `\r\n`) and more:
    /// that record is unchanged, and what follows are new records.
    /// A different directory only logs a warning (the same file may be reached another way).
    ///
    /// # Errors
    /// [`FaucetError::State`] naming the file when the bookmark cannot belong to it (the file
    /// was replaced or truncated), [`FaucetError::Read`] when the file cannot be read.
    pub(crate) fn check_fits(
        &self,
        connector: &str,
        path: &Path,
        file: &mut File,
        size: u64,
        data_start: u64,
        terminators: &[u8],
    ) -> Result<(), FaucetError> {
        let stored = Path::new(&self.file);
        if stored.file_name() != path.file_name() {
            return Err(mismatch(
                connector,
                path,
                self,
                format!("it was made for the file `{}`", self.file),
            ));
        }
        if stored != path {
            tracing::warn!(
                connector,
                file = %path.display(),
                bookmark_file = %self.file,
                "resuming a bookmark made for the same file name under another path"
            );
        }
        if self.byte_offset > size {
            return Err(mismatch(
                connector,
                path,
                self,
                format!(
                    "its byte_offset {} is beyond the end of the file ({size} bytes): the file \
                     was replaced or truncated",
                    self.byte_offset
                ),
            ));
        }
        if self.byte_offset < data_start {
            return Err(mismatch(
                connector,
                path,
                self,
                format!(
                    "its byte_offset {} is before the first record (byte {data_start})",
                    self.byte_offset
                ),
            ));
        }
        if self.byte_offset == data_start || self.byte_offset == size {
            return Ok(());
        }
        // The byte before the offset and the (up to) two after it.
        let mut around = [0u8; 3];
        file.seek(SeekFrom::Start(self.byte_offset - 1))
            .and_then(|_| file.read_exact(&mut around[..1]))
            .map_err(|e| read_error(connector, path, "cannot read", e))?;
        let after_terminator = terminators.contains(&around[0]);
        // A bookmark at the old end of a file whose last record had no line break: the file
        // grew by a line break and more records, so that record is unchanged. Told apart from
        // a replaced file by the line count before the offset (read only in this case).
        let grown_after_break = !after_terminator && {
            let n = (size - self.byte_offset).min(2) as usize;
            file.read_exact(&mut around[1..=n])
                .map_err(|e| read_error(connector, path, "cannot read", e))?;
            (terminators.contains(&around[1]) || around[1..=n] == *b"\r\n")
                && self.line
                    == 1 + count_newlines(file, self.byte_offset)
                        .map_err(|e| read_error(connector, path, "cannot read", e))?
        };
        if !after_terminator && !grown_after_break {
            return Err(mismatch(
                connector,
                path,
                self,
                format!(
                    "byte_offset {} is not right after a record: the file was replaced or \
                     changed since the bookmark was made",
                    self.byte_offset
                ),
            ));
        }
        Ok(())
    }
}

/// The `\n` bytes in the first `len` bytes of `file`.
fn count_newlines(file: &mut File, len: u64) -> std::io::Result<u64> {
    file.seek(SeekFrom::Start(0))?;
    let mut left = len;
    let mut count = 0;
    let mut buf = vec![0u8; 1 << 16];
    while left > 0 {
        let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
        let n = match file.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        count += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
        left -= n as u64;
    }
    Ok(count)
}

fn mismatch(connector: &str, path: &Path, b: &FileBookmark, why: String) -> FaucetError {
    FaucetError::state(
        connector,
        format!(
            "the stored bookmark (byte_offset {}, line {}, {} records) does not fit {}: {why}; \
             restore the original file, or delete the state key to read it from the beginning",
            b.byte_offset,
            b.line,
            b.records,
            path.display()
        ),
    )
}

/// A [`FaucetError::Read`] for an I/O failure on `path`.
pub(crate) fn read_error(
    connector: &str,
    path: &Path,
    what: &str,
    e: std::io::Error,
) -> FaucetError {
    FaucetError::read(
        connector,
        format!("{what} {}: {e}", path.display()),
        Some(Box::new(e)),
    )
}
