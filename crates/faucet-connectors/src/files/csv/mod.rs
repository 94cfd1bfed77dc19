//! The `csv` source: [`CsvSource`] reads an RFC 4180 file into pages of typed records.
//!
//! * Tokenizing: `csv-core` (the `csv` crate's engine), see `reader.rs`; quoted delimiters,
//!   doubled quotes and line breaks (LF and CRLF, kept byte for byte) survive any buffer
//!   boundary (RFC 4180); a UTF-8 BOM at byte 0 is not part
//!   of the first column name, a BOM anywhere else is data.
//! * Values: `Value::Text` unless [`CsvSourceConfig::columns`] declares a type; an unquoted
//!   field equal to one of `null_values` is null.
//! * Bookmarks: a [`crate::files::FileBookmark`] after every page; resuming seeks to its byte
//!   offset (the header is re-read from the start for the names).
//! * Several files: a `path` whose file name holds `*` reads the matching files in name
//!   order, each with its own header (`files.rs`).
//! * Errors: a record with the wrong number of fields, invalid UTF-8, a value that does not
//!   parse as its declared type, or a field longer than `max_field_bytes` is a
//!   [`FaucetError::Data`] at `<path>:<line>` (the line the record starts on), naming the
//!   column for field errors; a quote still open at the end of the file is one at the line
//!   where it opened. So is text after the closing quote of a quoted field (`"bob"x`), which
//!   `csv-core` would read as `bobx` without a word; a quote inside an unquoted field
//!   (`5'10"`) is text and kept as written. Nothing is skipped.
//! * A last record without a line break is held back until it has one, unless
//!   `unterminated_last_line: read` (see [`crate::files::UnterminatedLastLine`]); so is one
//!   whose quoted field is still open at the end of the file, line breaks in it or not (a
//!   field spanning lines, half written, is read whole by a later run) — with `read`, that
//!   open quote is the error above.
//! * Only regular files are read (a FIFO or device is refused before it is opened: a
//!   bookmark is a byte offset to seek to).
//! * Memory: the page the run loop holds, at most 8 MiB (estimated) of the next page read
//!   ahead, and the read buffer (1 MiB unless [`CsvSource::with_read_buffer`] says
//!   otherwise; it grows only for a longer record); the [`faucet_core::Schema`] is built once
//!   and shared by every page. Fields are converted straight into the next page's buffer; a
//!   text field of up to 24 bytes is stored inline ([`faucet_core::Text`]), a longer one
//!   costs one allocation.
//! * Why `csv-core` and not `csv::Reader`: the reader hides the raw bytes, so it cannot tell
//!   a quoted `""` from an empty field (needed for `null_values`), and it strips a BOM at
//!   whatever offset it starts or seeks to.

mod config;
mod convert;
mod files;
mod page;
mod reader;

use std::sync::Arc;

use async_trait::async_trait;
use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

pub use self::config::{ColumnType, Columns, CsvSourceConfig};
use self::files::FilesReader;
use self::page::{CsvPageReader, Dialect};
use super::blocking;
use super::bookmark::FileBookmark;
use super::prefetch::PrefetchStream;

const CONNECTOR: &str = "csv";
/// The default read buffer: 1 MiB.
const DEFAULT_READ_BUFFER: usize = 1 << 20;

/// The `csv` source. Replays deterministically: the file must not change while it is read
/// or between runs (a bookmark that no longer fits the file is an error).
#[derive(Debug, Clone)]
pub struct CsvSource {
    config: CsvSourceConfig,
    dialect: Arc<Dialect>,
}

impl CsvSource {
    /// A source for `config`, validated; no I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`CsvSourceConfig::validate`].
    pub fn new(config: CsvSourceConfig) -> Result<Self, FaucetError> {
        config.validate()?;
        let dialect = Dialect {
            path: config.path.clone(),
            label: config.path.to_string_lossy().into_owned(),
            has_header: config.has_header,
            several: files::is_pattern(&config.path),
            delimiter: config.delimiter_byte()?,
            quote: config.quote_byte()?,
            null_values: config
                .null_values
                .iter()
                .map(|v| v.as_bytes().to_vec())
                .collect(),
            columns: config.columns.clone().unwrap_or_default(),
            read_buffer: DEFAULT_READ_BUFFER,
            last_line: config.unterminated_last_line,
            max_field_bytes: usize::try_from(config.max_field_bytes).unwrap_or(usize::MAX),
        };
        Ok(Self {
            config,
            dialect: Arc::new(dialect),
        })
    }

    /// Reads at most `bytes` (≥ 1) from the file at a time; the buffer grows only to hold a
    /// longer record. The output does not depend on it; tests use tiny buffers to put read
    /// boundaries inside quoted fields.
    pub fn with_read_buffer(mut self, bytes: usize) -> Self {
        Arc::make_mut(&mut self.dialect).read_buffer = bytes.max(1);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &CsvSourceConfig {
        &self.config
    }
}

#[async_trait]
impl Source for CsvSource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::Deterministic
    }

    /// Opens the file, reads the header (if any) and seeks to `from`.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the file cannot be opened or read;
    /// [`FaucetError::Data`] for a malformed header; [`FaucetError::Config`] when a declared
    /// column is not in the header; [`FaucetError::Bookmark`] when `from` is not a csv bookmark
    /// or does not fit the file.
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let from = from
            .map(|b| FileBookmark::parse(CONNECTOR, &self.dialect.path, b))
            .transpose()?;
        let dialect = self.dialect.clone();
        let reader = blocking::read(CONNECTOR, move || {
            let files = files::is_pattern(&dialect.path)
                .then(|| files::matching(&dialect.path))
                .transpose()?;
            FilesReader::open(dialect, files, from)
        })
        .await??;
        let stream =
            PrefetchStream::start(CONNECTOR, reader, options.batch_size.max(1), options.cancel)?;
        Ok(Box::new(stream))
    }

    /// Opens the file (with a pattern: each matching file) and reads its header, checking
    /// the declared columns against it (with a pattern, a declared column may be missing:
    /// it may come in a later file).
    ///
    /// # Errors
    /// As [`CsvSource::open`] without a bookmark; with a pattern, [`FaucetError::Read`] when
    /// no file matches it.
    async fn check(&self) -> Result<(), FaucetError> {
        let dialect = self.dialect.clone();
        blocking::read(CONNECTOR, move || {
            if !files::is_pattern(&dialect.path) {
                return CsvPageReader::open(dialect, None).map(drop);
            }
            let found = files::matching(&dialect.path)?;
            if found.is_empty() {
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!("no file matches {}", dialect.label),
                    None,
                ));
            }
            for file in found {
                CsvPageReader::open(files::per_file(&dialect, file), None)?;
            }
            Ok(())
        })
        .await?
    }
}
