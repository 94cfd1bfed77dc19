//! [`CsvPageReader`]: the blocking half of the `csv` source. Opens the file, reads the
//! header, seeks to a bookmark and turns records into pages of typed values.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use faucet_core::{FaucetError, Field, Page, PageBuilder, Schema, Value};

use super::CONNECTOR;
use super::config::{ColumnType, Columns};
use super::convert::convert;
use super::reader::RecordReader;
use crate::files::bookmark::{FileBookmark, read_error};

/// Everything a read needs from the configuration, validated.
#[derive(Debug, Clone)]
pub(super) struct Dialect {
    pub(super) path: PathBuf,
    /// The path as configured, for bookmarks and error locations.
    pub(super) label: String,
    pub(super) has_header: bool,
    pub(super) delimiter: u8,
    pub(super) quote: u8,
    pub(super) null_values: Vec<Vec<u8>>,
    pub(super) columns: Columns,
    pub(super) read_buffer: usize,
}

/// An open CSV file, positioned at the next record to read.
pub(super) struct CsvPageReader {
    dialect: Arc<Dialect>,
    reader: RecordReader,
    schema: Arc<Schema>,
    /// The declared type of each column, in file order.
    types: Vec<ColumnType>,
    /// Data records read from the start of the file.
    records: u64,
    done: bool,
    failed: bool,
    /// One record's values, reused.
    row: Vec<Value>,
}

impl CsvPageReader {
    /// Opens the file, reads the header (if any) and moves to `from` (or the first record).
    pub(super) fn open(
        dialect: Arc<Dialect>,
        from: Option<FileBookmark>,
    ) -> Result<Self, FaucetError> {
        let path = &dialect.path;
        let file = File::open(path).map_err(|e| read_error(CONNECTOR, path, "cannot open", e))?;
        let meta = file
            .metadata()
            .map_err(|e| read_error(CONNECTOR, path, "cannot stat", e))?;
        if !meta.is_file() {
            return Err(FaucetError::read(
                CONNECTOR,
                format!("{} is not a regular file", path.display()),
                None,
            ));
        }
        let mut reader =
            RecordReader::new(file, dialect.delimiter, dialect.quote, dialect.read_buffer)
                .map_err(|e| read_error(CONNECTOR, path, "cannot read", e))?;
        let mut done = false;
        let (names, types) = if dialect.has_header {
            let has = reader
                .read_record()
                .map_err(|e| read_error(CONNECTOR, path, "cannot read", e))?;
            if has {
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
        let width = types.len();
        Ok(Self {
            dialect,
            reader,
            schema,
            types,
            records,
            done,
            failed: false,
            row: Vec::with_capacity(width),
        })
    }

    /// The next page of at most `batch_size` records; `None` at the end of the file.
    pub(super) fn read_page(&mut self, batch_size: usize) -> Result<Option<Page>, FaucetError> {
        if self.failed {
            return Err(FaucetError::read(
                CONNECTOR,
                format!(
                    "the read of {} stopped at an earlier error; reopen from the last bookmark",
                    self.dialect.label
                ),
                None,
            ));
        }
        if self.done {
            return Ok(None);
        }
        let result = self.fill_page(batch_size);
        self.failed = result.is_err();
        result
    }

    fn fill_page(&mut self, batch_size: usize) -> Result<Option<Page>, FaucetError> {
        let mut page = PageBuilder::new(self.schema.clone(), batch_size);
        let mut n = 0u64;
        while n < batch_size as u64 {
            let has = self
                .reader
                .read_record()
                .map_err(|e| read_error(CONNECTOR, &self.dialect.path, "cannot read", e))?;
            if !has {
                self.done = true;
                break;
            }
            self.convert_record()?;
            page.push_row(self.row.drain(..));
            n += 1;
        }
        if n == 0 {
            return Ok(None);
        }
        self.records += n;
        let bookmark = FileBookmark {
            file: self.dialect.label.clone(),
            byte_offset: self.reader.offset(),
            line: self.reader.line_after(),
            records: self.records,
        };
        Ok(Some(page.finish(Some(bookmark.to_json()))))
    }

    /// Turns the reader's current record into `self.row`.
    fn convert_record(&mut self) -> Result<(), FaucetError> {
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
        self.row.clear();
        for i in 0..width {
            let bytes = self.reader.field(i);
            if self.dialect.null_values.iter().any(|n| n == bytes) && !self.reader.is_quoted(i) {
                self.row.push(Value::Null);
                continue;
            }
            let bytes = self.reader.field(i);
            let text = match std::str::from_utf8(bytes) {
                Ok(t) => t,
                Err(e) => {
                    let msg = format!("invalid UTF-8 at byte {} of the field", e.valid_up_to());
                    return Err(self.field_error(i, msg));
                }
            };
            let value = match self.types[i] {
                ColumnType::String => Value::Text(text.to_owned()),
                ty => match convert(ty, text) {
                    Ok(v) => v,
                    Err(msg) => return Err(self.field_error(i, msg)),
                },
            };
            self.row.push(value);
        }
        Ok(())
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
        if !seen.contains_key(declared) {
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
