//! Several CSV files as one source: a `path` whose file name holds `*` (`exports/orders-*.csv`)
//! reads every regular file of its directory whose name matches, in name order, each with
//! its own header — so a later file may have more columns than an earlier one (the wrapper
//! in the CLI turns them into added columns, `faucet_core::change::NewFields`).
//!
//! * Order: names sorted bytewise; name files so that a later file sorts after every earlier
//!   one (dates `YYYY-MM-DD`, zero-padded numbers). A file that appears later but sorts
//!   before the file being read is never read.
//! * Bookmarks: the [`FileBookmark`] of the file being read (its `file` names it); the files
//!   sorting before it are done. Resuming opens that file at its offset, with the checks of
//!   one file; a bookmark whose file no longer matches is refused (the position is lost).
//!   A page never holds records of two files.
//! * A file whose last line is held back (no line break yet) holds back the files after it
//!   too, until it ends.
//! * `*` matches any run of characters (`/` is not in a file name); only the file name may
//!   hold one (checked by [`super::CsvSourceConfig::validate`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use faucet_core::{FaucetError, Page};

use super::CONNECTOR;
use super::page::{CsvPageReader, Dialect};
use crate::files::bookmark::FileBookmark;
use crate::files::prefetch::PageReader;

/// Whether `path` names several files (its file name holds `*`).
pub(super) fn is_pattern(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().contains('*'))
}

/// Whether `name` matches `pattern`, whose `*`s match any run of characters.
fn matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = parts.split_first().unwrap_or((&"", &[]));
    let Some(mut left) = name.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return left.is_empty();
    };
    for part in middle {
        match left.find(part) {
            Some(at) => left = &left[at + part.len()..],
            None => return false,
        }
    }
    left.len() >= last.len() && left.ends_with(last)
}

/// The regular files matching the pattern `path`, in name order.
///
/// # Errors
/// [`FaucetError::Read`] when the directory cannot be listed.
pub(super) fn matching(path: &Path) -> Result<Vec<PathBuf>, FaucetError> {
    let pattern = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        crate::files::bookmark::read_error(CONNECTOR, &dir, "cannot list the directory", e)
    })?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| matches(&pattern, n))
        .collect();
    names.sort();
    Ok(names.into_iter().map(|n| path.with_file_name(n)).collect())
}

/// Warns when a declared column (`columns`) is in the header of none of `files`: it may
/// come in a file not there yet, or be misspelt (then nothing is typed as declared).
///
/// # Errors
/// The errors of [`CsvPageReader::open`] for a file.
fn warn_undeclared(dialect: &Arc<Dialect>, files: &[PathBuf]) -> Result<(), FaucetError> {
    if dialect.columns.is_empty() || !dialect.has_header {
        return Ok(());
    }
    let mut names = std::collections::BTreeSet::new();
    for file in files {
        let reader = CsvPageReader::open(per_file(dialect, file.clone()), None)?;
        names.extend(reader.column_names());
    }
    for (missing, _) in dialect.columns.iter().filter(|(n, _)| !names.contains(*n)) {
        tracing::warn!(
            connector = CONNECTOR,
            path = %dialect.label,
            column = missing,
            headers = ?names,
            "a column declared in `columns` is in no matching file yet: typed once a file \
             has it (check its spelling)"
        );
    }
    Ok(())
}

/// A read of several files in order, one [`CsvPageReader`] at a time.
pub(super) struct FilesReader {
    dialect: Arc<Dialect>,
    /// The files after the one being read.
    rest: std::vec::IntoIter<PathBuf>,
    current: Option<CsvPageReader>,
}

impl FilesReader {
    /// Opens the read of `files` (in order; `None`: the one file of the dialect's path) at
    /// `from`: a bookmark of one of them, which is opened at its offset (the files before
    /// it are done), or the first file.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `from` names none of `files`; the errors of
    /// [`CsvPageReader::open`].
    pub(super) fn open(
        dialect: Arc<Dialect>,
        files: Option<Vec<PathBuf>>,
        from: Option<FileBookmark>,
    ) -> Result<Self, FaucetError> {
        let Some(files) = files else {
            let current = CsvPageReader::open(dialect.clone(), from)?;
            return Ok(Self {
                dialect,
                rest: Vec::new().into_iter(),
                current: Some(current),
            });
        };
        warn_undeclared(&dialect, &files)?;
        let start = match &from {
            None => 0,
            Some(b) => {
                let name = Path::new(&b.file).file_name();
                files
                    .iter()
                    .position(|f| f.file_name() == name)
                    .ok_or_else(|| {
                        FaucetError::bookmark(
                            CONNECTOR,
                            format!(
                                "the stored bookmark is in `{}` (byte_offset {}), which is no \
                                 longer among the files matching {}: the files after it \
                                 cannot be placed. Restore the file, or delete the state key \
                                 to read every matching file from the beginning",
                                b.file, b.byte_offset, dialect.label
                            ),
                            None,
                        )
                    })?
            }
        };
        let mut rest = files
            .into_iter()
            .skip(start)
            .collect::<Vec<_>>()
            .into_iter();
        let current = match rest.next() {
            Some(first) => Some(CsvPageReader::open(per_file(&dialect, first), from)?),
            None => {
                tracing::warn!(
                    connector = CONNECTOR,
                    path = %dialect.label,
                    "no file matches the path: nothing to read"
                );
                None
            }
        };
        Ok(Self {
            dialect,
            rest,
            current,
        })
    }
}

/// The dialect of one file of a pattern.
pub(super) fn per_file(dialect: &Arc<Dialect>, file: PathBuf) -> Arc<Dialect> {
    if file == dialect.path {
        return dialect.clone();
    }
    let mut d = Dialect::clone(dialect);
    d.label = file.to_string_lossy().into_owned();
    d.path = file;
    Arc::new(d)
}

impl PageReader for FilesReader {
    fn read_ahead(&mut self, batch_size: usize, budget: usize) -> Result<(), FaucetError> {
        match self.current.as_mut() {
            Some(r) => r.read_ahead(batch_size, budget),
            None => Ok(()),
        }
    }

    fn read_page(&mut self, batch_size: usize) -> Result<Option<Page>, FaucetError> {
        loop {
            let Some(current) = self.current.as_mut() else {
                return Ok(None);
            };
            if let Some(page) = current.read_page(batch_size)? {
                return Ok(Some(page));
            }
            if current.held_back() {
                return Ok(None);
            }
            self.current = match self.rest.next() {
                Some(next) => Some(CsvPageReader::open(per_file(&self.dialect, next), None)?),
                None => None,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_match_any_run() {
        assert!(matches("a-*.csv", "a-2026-12-01.csv"));
        assert!(matches("a-*.csv", "a-.csv"));
        assert!(!matches("a-*.csv", "b-1.csv"));
        assert!(!matches("a-*.csv", "a-1.csv.tmp"));
        assert!(matches("*", "x"));
        assert!(matches("*x*y", "axbxy"));
        assert!(!matches("*ab*ba", "aba"));
        assert!(matches("plain.csv", "plain.csv"));
        assert!(!matches("plain.csv", "plain.csvx"));
    }
}
