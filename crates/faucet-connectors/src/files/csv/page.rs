//! [`CsvPageReader`]: the blocking half of the `csv` source. Opens the file, reads the
//! header, seeks to a bookmark and turns records into pages of typed values.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use faucet_core::{FaucetError, Field, Page, PageBuilder, Schema, Value};

use super::CONNECTOR;
use super::config::{ColumnType, Columns};
use super::convert::convert;
use super::reader::{Next, ReadError, RecordReader};
use crate::files::bookmark::{ContentProbe, FileBookmark, read_error};
use crate::files::last_line::{UnterminatedLastLine, warn_held_back};
use crate::files::prefetch::{PageReader, value_bytes};
use crate::files::regular::open_regular;

/// Everything a read needs from the configuration, validated.
#[derive(Debug, Clone)]
pub(super) struct Dialect {
    pub(super) path: PathBuf,
    /// The path as configured, for bookmarks and error locations.
    pub(super) label: String,
    pub(super) has_header: bool,
    /// The path is a pattern of several files: a declared column may be missing from a
    /// file's header (it may come in a later file).
    pub(super) several: bool,
    pub(super) delimiter: u8,
    pub(super) quote: u8,
    pub(super) null_values: Vec<Vec<u8>>,
    pub(super) columns: Columns,
    pub(super) read_buffer: usize,
    pub(super) last_line: UnterminatedLastLine,
    pub(super) max_field_bytes: usize,
}

/// An open CSV file, positioned at the next record to read.
pub(super) struct CsvPageReader {
    dialect: Arc<Dialect>,
    reader: RecordReader,
    /// A second handle on the file, for each bookmark's fingerprint.
    probe: ContentProbe,
    schema: Arc<Schema>,
    /// The declared type of each column, in file order.
    types: Vec<ColumnType>,
    /// Data records read from the start of the file up to the last page taken.
    records: u64,
    /// The end of the file was reached.
    done: bool,
    /// A last record without its line break was held back (the file may still grow).
    held: bool,
    /// The next page, holding the records read ahead of it, and their estimated size.
    ahead: Option<PageBuilder>,
    ahead_bytes: usize,
}

impl CsvPageReader {
    /// Opens the file, reads the header (if any) and moves to `from` (or the first record).
    pub(super) fn open(
        dialect: Arc<Dialect>,
        from: Option<FileBookmark>,
    ) -> Result<Self, FaucetError> {
        let path = &dialect.path;
        let (file, meta) = open_regular(CONNECTOR, path)?;
        let mut reader =
            RecordReader::new(file, dialect.delimiter, dialect.quote, dialect.read_buffer)
                .map_err(|e| read_error(CONNECTOR, path, "cannot read", e))?
                .with_limits(
                    dialect.last_line == UnterminatedLastLine::Wait,
                    dialect.max_field_bytes,
                );
        let mut done = false;
        let mut held = false;
        let (names, types) = if dialect.has_header {
            let next = reader
                .read_record()
                .map_err(|e| reader_error(&dialect, e, &[]))?;
            if next == Next::HeldBack {
                warn_held(&dialect, &reader);
                held = true;
            }
            if next == Next::Record {
                header_columns(&dialect, &reader)?
            } else {
                done = true;
                (Vec::new(), Vec::new())
            }
        } else {
            dialect
                .columns
                .iter()
                .map(|(n, t)| (n.to_owned(), t))
                .unzip()
        };
        let schema = Arc::new(Schema::new(
            names
                .into_iter()
                .zip(&types)
                .map(|(name, ty)| Field::new(name, ty.data_type()))
                .collect(),
        ));
        let mut records = 0;
        if let Some(b) = from {
            let data_start = reader.offset();
            let size = meta.len();
            b.check_fits(
                CONNECTOR,
                path,
                reader.file_mut(),
                size,
                data_start,
                b"\r\n",
            )?;
            reader
                .seek(b.byte_offset, b.line)
                .map_err(|e| read_error(CONNECTOR, path, "cannot seek in", e))?;
            records = b.records;
        }
        let probe = ContentProbe::open(CONNECTOR, path)?;
        Ok(Self {
            dialect,
            reader,
            probe,
            schema,
            types,
            records,
            done,
            held,
            ahead: None,
            ahead_bytes: 0,
        })
    }

    /// The names of the file's columns, in file order.
    pub(super) fn column_names(&self) -> impl Iterator<Item = String> + '_ {
        self.schema.fields().iter().map(|f| f.name.clone())
    }

    /// Whether the read ended at a last record held back (no line break yet): the file
    /// is not done.
    pub(super) fn held_back(&self) -> bool {
        self.held
    }

    /// Reads the next record into `page`: `None` at the end of the file, else the record's
    /// estimated size in bytes ([`value_bytes`]).
    fn next_record(&mut self, page: &mut PageBuilder) -> Result<Option<usize>, FaucetError> {
        if self.done {
            return Ok(None);
        }
        let next = self
            .reader
            .read_record()
            .map_err(|e| reader_error(&self.dialect, e, self.schema.fields()))?;
        match next {
            Next::Record => self.convert_record(page).map(Some),
            Next::End => {
                self.done = true;
                Ok(None)
            }
            Next::HeldBack => {
                self.done = true;
                self.held = true;
                warn_held(&self.dialect, &self.reader);
                Ok(None)
            }
        }
    }

    /// Appends the reader's current record to `page`, converted (straight into the page's
    /// buffer); returns its estimated size.
    fn convert_record(&mut self, page: &mut PageBuilder) -> Result<usize, FaucetError> {
        let width = self.types.len();
        if self.reader.len() != width {
            let what = if self.dialect.has_header {
                "as in the header"
            } else {
                "as many as the declared columns"
            };
            return Err(self.data_error(format!(
                "expected {width} fields ({what}), found {}",
                self.reader.len()
            )));
        }
        let nulls = &self.dialect.null_values;
        let is_null = |bytes: &[u8]| nulls.iter().any(|n| n == bytes);
        let check_nulls = !nulls.is_empty() && (0..width).any(|i| is_null(self.reader.field(i)));
        if check_nulls {
            self.reader.scan_quotes();
        }
        // One UTF-8 check for the whole record; a field is valid when the record is and the
        // field starts and ends on character boundaries.
        let all = self.reader.record_bytes();
        let text = std::str::from_utf8(all).map_err(|e| {
            let i = (0..width)
                .find(|i| self.reader.bounds(*i).1 > e.valid_up_to())
                .unwrap_or(0);
            self.utf8_error(i)
        })?;
        let mut bytes = 0;
        page.push_row_with(|row| {
            for i in 0..width {
                let (start, end) = self.reader.bounds(i);
                let value = if check_nulls && is_null(&all[start..end]) && !self.reader.is_quoted(i)
                {
                    Value::Null
                } else {
                    let Some(field) = text.get(start..end) else {
                        return Err(self.utf8_error(i));
                    };
                    match self.types[i] {
                        ColumnType::String => Value::Text(field.into()),
                        ty => convert(ty, field).map_err(|msg| self.field_error(i, msg))?,
                    }
                };
                bytes += value_bytes(&value);
                row.push(value);
            }
            Ok(())
        })?;
        Ok(bytes)
    }

    /// The error for field `i`, which is not valid UTF-8 on its own.
    fn utf8_error(&self, i: usize) -> FaucetError {
        let at = std::str::from_utf8(self.reader.field(i)).map_or_else(|e| e.valid_up_to(), |_| 0);
        self.field_error(i, format!("invalid UTF-8 at byte {at} of the field"))
    }

    fn data_error(&self, message: String) -> FaucetError {
        FaucetError::data(
            CONNECTOR,
            format!("{}:{}", self.dialect.label, self.reader.line()),
            message,
        )
    }

    fn field_error(&self, i: usize, message: String) -> FaucetError {
        let name = &self.schema.fields()[i].name;
        self.data_error(format!("column {} `{name}`: {message}", i + 1))
    }
}

impl PageReader for CsvPageReader {
    fn read_ahead(&mut self, batch_size: usize, budget: usize) -> Result<(), FaucetError> {
        let mut page = self
            .ahead
            .take()
            .unwrap_or_else(|| PageBuilder::new(self.schema.clone(), batch_size));
        let read = (|| {
            while page.len() < batch_size && self.ahead_bytes < budget {
                match self.next_record(&mut page)? {
                    Some(bytes) => self.ahead_bytes += bytes,
                    None => break,
                }
            }
            Ok(())
        })();
        self.ahead = Some(page);
        read
    }

    fn read_page(&mut self, batch_size: usize) -> Result<Option<Page>, FaucetError> {
        let mut page = self
            .ahead
            .take()
            .unwrap_or_else(|| PageBuilder::new(self.schema.clone(), batch_size));
        self.ahead_bytes = 0;
        while page.len() < batch_size && self.next_record(&mut page)?.is_some() {}
        if page.is_empty() {
            return Ok(None);
        }
        self.records += page.len() as u64;
        let byte_offset = self.reader.offset();
        let fingerprint = self
            .probe
            .fingerprint(CONNECTOR, &self.dialect.path, byte_offset)?;
        let bookmark = FileBookmark {
            file: self.dialect.label.clone(),
            byte_offset,
            line: self.reader.line_after(),
            records: self.records,
            fingerprint: Some(fingerprint),
        };
        let extent = self.probe.extent(byte_offset);
        Ok(Some(
            page.finish(Some(bookmark.to_json())).with_extent(extent),
        ))
    }
}

/// The warning for the record the reader just held back: an unfinished last line, or a
/// quoted field still open at the end of the file.
fn warn_held(dialect: &Dialect, reader: &RecordReader) {
    let location = format!("{}:{}", dialect.label, reader.line_after());
    match reader.held_open_quote() {
        None => warn_held_back(CONNECTOR, &location),
        Some(quote_line) => tracing::warn!(
            connector = CONNECTOR,
            location,
            quote_line,
            "the record starting here has a quoted field still open at the end of the file \
             (its quote opened on line {quote_line}): not read (a writer may still be \
             appending it). A later run reads it once the quote is closed and the line \
             ends; if the file is complete, the quote is never closed: fix the file, or set \
             `unterminated_last_line: read` to have it reported as an error"
        ),
    }
}

/// A [`ReadError`] as the source's error: the file, the line and (for a field) the column
/// among `fields` (empty while reading the header).
fn reader_error(dialect: &Dialect, e: ReadError, fields: &[Field]) -> FaucetError {
    let at = |line: u64| format!("{}:{line}", dialect.label);
    // ` `name`` of the 1-based `column`, when the header named it.
    let column_name = |column: usize| {
        fields
            .get(column.wrapping_sub(1))
            .map(|f| format!(" `{}`", f.name))
            .unwrap_or_default()
    };
    match e {
        ReadError::Io(e) => read_error(CONNECTOR, &dialect.path, "cannot read", e),
        ReadError::FieldTooLong { line, column } => {
            let name = column_name(column);
            FaucetError::data(
                CONNECTOR,
                at(line),
                format!(
                    "column {column}{name}: the field is longer than max_field_bytes ({} \
                     bytes); a quote that is never closed makes one field of the rest of the \
                     file. Fix the file, or raise max_field_bytes if the field is meant",
                    dialect.max_field_bytes
                ),
            )
        }
        ReadError::TextAfterQuote { line, column } => {
            let name = column_name(column);
            FaucetError::data(
                CONNECTOR,
                at(line),
                format!(
                    "column {column}{name}: text follows the closing quote of a quoted field \
                     (as in `\"bob\"x`); read leniently it would lose its quotes and become \
                     `bobx`. Quote the whole field and double the quotes inside it \
                     (`\"\"\"bob\"\"x\"`), or leave it unquoted"
                ),
            )
        }
        ReadError::UnclosedQuote { line, record_line } => FaucetError::data(
            CONNECTOR,
            at(line),
            format!(
                "a quote opened on line {line} (in the record starting on line {record_line}) \
                 is never closed: the field would run to the end of the file. Close the quote \
                 (a quote inside a quoted field is written twice: \"\")"
            ),
        ),
    }
}

/// The header's names, and each column's declared type (string when not declared).
fn header_columns(
    dialect: &Dialect,
    reader: &RecordReader,
) -> Result<(Vec<String>, Vec<ColumnType>), FaucetError> {
    let location = format!("{}:{}", dialect.label, reader.line());
    let mut names = Vec::with_capacity(reader.len());
    let mut seen = HashMap::new();
    for i in 0..reader.len() {
        let name = std::str::from_utf8(reader.field(i)).map_err(|e| {
            FaucetError::data(
                CONNECTOR,
                location.clone(),
                format!(
                    "header column {}: invalid UTF-8 at byte {}",
                    i + 1,
                    e.valid_up_to()
                ),
            )
        })?;
        if let Some(first) = seen.insert(name.to_owned(), i) {
            return Err(FaucetError::data(
                CONNECTOR,
                location,
                format!(
                    "the header names `{name}` twice (columns {} and {})",
                    first + 1,
                    i + 1
                ),
            ));
        }
        names.push(name.to_owned());
    }
    for (declared, _) in dialect.columns.iter() {
        if !dialect.several && !seen.contains_key(declared) {
            return Err(FaucetError::config(
                "columns",
                format!(
                    "`{declared}` is not a column of {} (its header: {})",
                    dialect.label,
                    names.join(", ")
                ),
            ));
        }
    }
    let types = names
        .iter()
        .map(|n| dialect.columns.get(n).unwrap_or(ColumnType::String))
        .collect();
    Ok((names, types))
}
