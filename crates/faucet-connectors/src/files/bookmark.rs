//! [`FileBookmark`]: where a file source stopped, and the checks that it still fits the file.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;

use faucet_core::{Bookmark, Extent, ExtentUnit, FaucetError};
use serde::{Deserialize, Serialize};

/// The bookmark the `csv` and `jsonl` sources put after every page:
/// `{"file": "data/orders.csv", "byte_offset": 5120, "line": 101, "records": 99,
/// "fingerprint": {"window_bytes": 65536, "head_sha256": "…", "tail_sha256": "…"}}`.
///
/// Resuming seeks to `byte_offset` and reads on; nothing before it is read again (except a
/// CSV header, re-read from the start for the column names). The [`Fingerprint`] ties the
/// bookmark to the content it points into, so a bookmark is never applied to another file.
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
    /// Hashes of the bytes before `byte_offset`. Absent in bookmarks made by an older
    /// faucet: those are checked by position only (file name, size, record boundary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
}

/// What a [`FileBookmark`] knows of the content before its offset: SHA-256 of the first
/// and of the last `window_bytes` bytes before `byte_offset` (the same bytes when the offset
/// is within the first window). Resuming recomputes both on the file as it is now; any
/// difference means the bookmark was made for other content and the resume is refused.
///
/// Cost: one read of at most `window_bytes` (64 KiB) per page (the head window is read once
/// per stream) and two per resume, whatever the
/// file's size. Bytes between the two windows are not covered: a file rewritten in place
/// with the same length up to the offset, same first and last 64 KiB and different bytes in
/// between is not detected (nor is it by any check short of hashing the whole prefix).
/// Appending to the file never changes a fingerprint, so a growing file resumes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fingerprint {
    /// The size of each window in bytes (64 KiB when made by this version).
    pub window_bytes: u64,
    /// Lower-case hex SHA-256 of bytes `[0, min(byte_offset, window_bytes))`.
    pub head_sha256: String,
    /// Lower-case hex SHA-256 of bytes `[byte_offset - min(byte_offset, window_bytes),
    /// byte_offset)`.
    pub tail_sha256: String,
}

/// The window of a new [`Fingerprint`]: 64 KiB.
pub(crate) const FINGERPRINT_WINDOW: u64 = 64 << 10;

impl Fingerprint {
    /// The fingerprint of the first `offset` bytes of `file` (read with seeks: the caller
    /// repositions `file` afterwards, or passes a handle of its own).
    ///
    /// # Errors
    /// The I/O error of a failed read, `UnexpectedEof` when the file is shorter than
    /// `offset`.
    pub(crate) fn of(file: &mut File, offset: u64, window_bytes: u64) -> std::io::Result<Self> {
        Self::with_head(file, offset, window_bytes, None)
    }

    /// As [`Fingerprint::of`], with the hash of a full head window (`offset >=
    /// window_bytes`) already known: only the tail is read.
    fn with_head(
        file: &mut File,
        offset: u64,
        window_bytes: u64,
        full_head: Option<&str>,
    ) -> std::io::Result<Self> {
        let len = offset.min(window_bytes);
        let head_sha256 = match full_head {
            Some(h) if len == window_bytes => h.to_owned(),
            _ => hash_range(file, 0, len)?,
        };
        let tail_sha256 = if len == offset {
            head_sha256.clone()
        } else {
            hash_range(file, offset - len, len)?
        };
        Ok(Self {
            window_bytes,
            head_sha256,
            tail_sha256,
        })
    }
}

/// Hex SHA-256 of `len` bytes of `file` from `start`.
fn hash_range(file: &mut File, start: u64, len: u64) -> std::io::Result<String> {
    use sha2::Digest as _;
    file.seek(SeekFrom::Start(start))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = [0u8; 8192];
    let mut left = len;
    while left > 0 {
        let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
        file.read_exact(&mut buf[..want])?;
        hasher.update(&buf[..want]);
        left -= want as u64;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = hasher.finalize();
    let mut out = String::with_capacity(digest.len() * 2);
    for b in digest {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    Ok(out)
}

/// A second handle on a source's file, for fingerprinting the bookmark after each page
/// without moving the reader's position. The hash of the first full window is read once per
/// stream: past it, each page reads only its tail window.
pub(crate) struct ContentProbe {
    file: File,
    full_head: Option<String>,
}

impl ContentProbe {
    /// Opens `path` again for reading.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when it cannot be opened.
    pub(crate) fn open(connector: &str, path: &Path) -> Result<Self, FaucetError> {
        let file = File::open(path).map_err(|e| read_error(connector, path, "cannot open", e))?;
        Ok(Self {
            file,
            full_head: None,
        })
    }

    /// How far along a read that reached byte `offset` is: `offset` of the file's size now
    /// (one `fstat`; a file that grew since the read began has a larger total), in bytes;
    /// `None` when the size cannot be read. A last line held back (no line break yet) is
    /// not read, so such a read ends short of 100%.
    pub(crate) fn extent(&self, offset: u64) -> Option<Extent> {
        let size = self.file.metadata().ok()?.len();
        Some(Extent::exact(offset, size.max(offset), ExtentUnit::Bytes))
    }

    /// The fingerprint of the first `offset` bytes.
    ///
    /// # Errors
    /// [`FaucetError::Read`] naming the file (it shrank, or the read failed).
    pub(crate) fn fingerprint(
        &mut self,
        connector: &str,
        path: &Path,
        offset: u64,
    ) -> Result<Fingerprint, FaucetError> {
        let f = Fingerprint::with_head(
            &mut self.file,
            offset,
            FINGERPRINT_WINDOW,
            self.full_head.as_deref(),
        )
        .map_err(|e| read_error(connector, path, "cannot fingerprint", e))?;
        if offset >= FINGERPRINT_WINDOW && self.full_head.is_none() {
            self.full_head = Some(f.head_sha256.clone());
        }
        Ok(f)
    }
}

impl FileBookmark {
    /// The bookmark as the JSON value a page carries.
    pub fn to_json(&self) -> Bookmark {
        let mut value = serde_json::json!({
            "file": self.file,
            "byte_offset": self.byte_offset,
            "line": self.line,
            "records": self.records,
        });
        if let (Some(f), Some(map)) = (&self.fingerprint, value.as_object_mut()) {
            map.insert(
                "fingerprint".to_owned(),
                serde_json::json!({
                    "window_bytes": f.window_bytes,
                    "head_sha256": f.head_sha256,
                    "tail_sha256": f.tail_sha256,
                }),
            );
        }
        value
    }

    /// Reads a stored bookmark back.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `value` is not a bookmark a file source made.
    pub(crate) fn parse(
        connector: &str,
        path: &Path,
        value: Bookmark,
    ) -> Result<Self, FaucetError> {
        serde_json::from_value(value.clone()).map_err(|e| {
            FaucetError::bookmark(
                connector,
                format!(
                    "the stored bookmark {value} was not made by a {connector} source reading {}; \
                     delete the state key to read the file from the beginning",
                    path.display()
                ),
                Some(Box::new(e)),
            )
        })
    }

    /// Checks that this bookmark fits the file at `path` (opened as `file`, `size` bytes):
    /// the same file name, `byte_offset` between `data_start` (after a BOM and a header) and
    /// the end, and right after a record terminator (one of `terminators`) unless it is at
    /// `data_start` or at the end. A bookmark made at the end of a file whose last record
    /// had no line break also fits when the file grew by a terminator (or `\r\n`) and more:
    /// that record is unchanged, and what follows are new records.
    /// With a [`Fingerprint`], the bytes before the offset must hash as they did: a file
    /// under another directory, or replaced in place, is refused naming both files. A
    /// different directory with the same content is fine (the same file reached another
    /// way, or moved). A bookmark without a fingerprint (an older faucet's) gets the other
    /// checks and a warning.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] naming the file when the bookmark cannot belong to it (the file
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
        let verified = self.check_fingerprint(connector, path, file)?;
        if stored != path {
            tracing::info!(
                connector,
                file = %path.display(),
                bookmark_file = %self.file,
                "resuming a bookmark made for the same content under another path"
            );
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
                && (verified
                    || self.line
                        == 1 + count_newlines(file, self.byte_offset)
                            .map_err(|e| read_error(connector, path, "cannot read", e))?)
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

impl FileBookmark {
    /// Compares the stored fingerprint with the file's bytes before the offset: `true` when
    /// they match, `false` (and a warning) when the bookmark has none.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] naming the bookmark's file and `path` when they differ.
    fn check_fingerprint(
        &self,
        connector: &str,
        path: &Path,
        file: &mut File,
    ) -> Result<bool, FaucetError> {
        let Some(stored) = &self.fingerprint else {
            tracing::warn!(
                connector,
                file = %path.display(),
                "the stored bookmark has no content fingerprint (made by an older faucet): \
                 resuming by position only; the next bookmark will carry one"
            );
            return Ok(false);
        };
        let now = Fingerprint::of(file, self.byte_offset, stored.window_bytes.max(1))
            .map_err(|e| read_error(connector, path, "cannot read", e))?;
        if now == *stored {
            return Ok(true);
        }
        let which = if now.head_sha256 == stored.head_sha256 {
            format!("the {} bytes before that offset", stored.window_bytes)
        } else {
            format!("the first {} bytes", stored.window_bytes)
        };
        Err(FaucetError::bookmark(
            connector,
            format!(
                "the stored bookmark was made for `{}` (byte_offset {}, line {}, {} records) \
                 and does not fit {}: {which} differ from the content the bookmark was made \
                 on, so {} is another file or was replaced or rewritten, and resuming at \
                 that offset would skip or garble records. Point `path` back at `{}` if that \
                 is the file meant; to read {} from the beginning, use another state key \
                 (pipeline name or matrix id) or delete this one",
                self.file,
                self.byte_offset,
                self.line,
                self.records,
                path.display(),
                path.display(),
                self.file,
                path.display(),
            ),
            None,
        ))
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
    FaucetError::bookmark(
        connector,
        format!(
            "the stored bookmark (byte_offset {}, line {}, {} records) does not fit {}: {why}; \
             restore the original file, or delete the state key to read it from the beginning",
            b.byte_offset,
            b.line,
            b.records,
            path.display()
        ),
        None,
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
        format!("{what} {}", path.display()),
        Some(Box::new(e)),
    )
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn fingerprints_are_sha256_of_the_windows_and_the_probe_reuses_a_full_head() {
        let mut tmp = tempfile::NamedTempFile::new().expect("temp file");
        tmp.write_all(b"abcdef").expect("write");
        let mut file = File::open(tmp.path()).expect("open");
        // SHA-256("abc"), the FIPS 180-2 example.
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let f = Fingerprint::of(&mut file, 3, 3).expect("fingerprint");
        assert_eq!((f.head_sha256.as_str(), f.tail_sha256.as_str()), (abc, abc));
        // Offset 6, window 3: head "abc", tail "def".
        let f = Fingerprint::of(&mut file, 6, 3).expect("fingerprint");
        assert_eq!(f.head_sha256, abc);
        assert_ne!(f.tail_sha256, abc);

        let mut probe = ContentProbe::open("csv", tmp.path()).expect("probe");
        let big = vec![b'x'; (FINGERPRINT_WINDOW * 2) as usize];
        tmp.write_all(&big).expect("grow");
        let first = probe
            .fingerprint("csv", tmp.path(), FINGERPRINT_WINDOW + 10)
            .expect("first");
        let later = probe
            .fingerprint("csv", tmp.path(), FINGERPRINT_WINDOW * 2)
            .expect("later");
        let fresh =
            Fingerprint::of(&mut file, FINGERPRINT_WINDOW * 2, FINGERPRINT_WINDOW).expect("fresh");
        assert_eq!(first.head_sha256, later.head_sha256);
        assert_eq!(later, fresh, "the cached head equals a fresh read");
    }
}
