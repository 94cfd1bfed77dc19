//! The `jsonl` source: [`JsonlSource`] reads one JSON object per line into pages.
//!
//! A page holds consecutive objects with the same keys (a page ends early where the keys
//! change), so a key a line lacks stays absent: it is never written as `null` downstream, and
//! the output does not depend on `batch_size`. The schema is those keys in first-seen order.
//! (A file whose lines vary their keys line by line gets small pages: correct, slower.) A
//! key given twice in one object is an error naming the line and the key, never collapsed.
//! Values: a number that is an integer within 64 bits → `Value::Int`, any other number →
//! `Value::Numeric` with exactly the text of the line (`1e400` stays `1e400`, `1E5` stays
//! `1E5`: nothing goes through f64 or is respelled), strings → `Value::Text`, booleans, null,
//! and objects / arrays → `Value::Json`. A field's type in the schema is its values' type in
//! the page (`Numeric` when integers and other numbers mix, `Unknown` for other mixes or all
//! nulls).
//!
//! Lines may end in LF or CRLF. A last line without a newline is held back until it has one
//! (a writer may still be appending it), unless it is already one whole JSON object (or
//! array), which nothing appended can turn into another record, or `unterminated_last_line:
//! read`: then it is read when it is valid JSON. A writer appending `\n{...}\n` after such a
//! line later only ends it: the next run passes over the empty rest and reads on. A line that is not a JSON object — including a torn last
//! line, left by a writer that died — or longer than `max_line_bytes` is a
//! [`FaucetError::Data`] at `<path>:<line>`, never skipped. Lines holding only whitespace
//! carry no record and are passed over. A UTF-8 BOM at byte 0 is ignored. Only regular
//! files are read (a FIFO or device is refused before it is opened).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use faucet_core::{
    Bookmark, DataType, FaucetError, Field, Json, Page, PageBuilder, PageStream, ReadOptions,
    ReplayGuarantee, Schema, Source, Value,
};
use serde::{Deserialize, Serialize};

use crate::files::blocking;
use crate::files::bookmark::{ContentProbe, FileBookmark, read_error};
use crate::files::last_line::{UnterminatedLastLine, default_max_bytes, warn_held_back};
use crate::files::prefetch::{PageReader, PrefetchStream, value_bytes};
use crate::files::regular::open_regular;

const CONNECTOR: &str = "jsonl";
const READ_BUFFER: usize = 256 * 1024;
const BOM: &[u8; 3] = b"\xef\xbb\xbf";

/// Configuration of the `jsonl` source (`type: jsonl`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlSourceConfig {
    /// The JSON Lines file. A relative path is relative to the process's current directory
    /// (the CLI resolves it against the config file's directory first).
    pub path: PathBuf,
    /// What to do with a last line that does not end in a line break: `wait` (the default:
    /// not read until it has one, so a file still being written is never read half-way) or
    /// `read` (the file is complete; read it as the last record). See
    /// [`UnterminatedLastLine`].
    #[serde(default)]
    pub unterminated_last_line: UnterminatedLastLine,
    /// The longest line, in bytes without its line break; a longer one is an error naming
    /// `file:line`. Default 16 MiB (16777216); memory for one line stays within this.
    #[serde(default = "default_max_bytes")]
    pub max_line_bytes: u64,
}

impl JsonlSourceConfig {
    /// A configuration reading `path`, every other field at its default.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            unterminated_last_line: UnterminatedLastLine::default(),
            max_line_bytes: default_max_bytes(),
        }
    }

    /// Checks the configuration without touching the file system.
    ///
    /// # Errors
    /// [`FaucetError::Config`] with field `path` when it is empty, `max_line_bytes` when it
    /// is 0.
    pub fn validate(&self) -> Result<(), FaucetError> {
        super::validate_path(&self.path)?;
        if self.max_line_bytes == 0 {
            return Err(FaucetError::config(
                "max_line_bytes",
                "must be at least 1 (the default is 16777216, 16 MiB)",
            ));
        }
        Ok(())
    }
}

/// The `jsonl` source. Replays deterministically (the file must not change).
#[derive(Debug, Clone)]
pub struct JsonlSource {
    config: JsonlSourceConfig,
}

impl JsonlSource {
    /// A source for `config`, validated; no I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`JsonlSourceConfig::validate`].
    pub fn new(config: JsonlSourceConfig) -> Result<Self, FaucetError> {
        config.validate()?;
        Ok(Self { config })
    }

    /// The configuration.
    pub fn config(&self) -> &JsonlSourceConfig {
        &self.config
    }
}

#[async_trait]
impl Source for JsonlSource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::Deterministic
    }

    /// Opens the file and seeks to `from`.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the file cannot be opened; [`FaucetError::Bookmark`] when
    /// `from` is not a jsonl bookmark or does not fit the file.
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let config = self.config.clone();
        let from = from
            .map(|b| FileBookmark::parse(CONNECTOR, &config.path, b))
            .transpose()?;
        let reader =
            blocking::read(CONNECTOR, move || JsonlPageReader::open(&config, from)).await??;
        let stream =
            PrefetchStream::start(CONNECTOR, reader, options.batch_size.max(1), options.cancel)?;
        Ok(Box::new(stream))
    }

    /// Opens the file.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when it cannot be opened or is not a regular file.
    async fn check(&self) -> Result<(), FaucetError> {
        let config = self.config.clone();
        blocking::read(CONNECTOR, move || {
            JsonlPageReader::open(&config, None).map(drop)
        })
        .await?
    }
}

/// The blocking half: an open file positioned at the next line.
struct JsonlPageReader {
    path: PathBuf,
    label: String,
    reader: BufReader<File>,
    /// A second handle on the file, for each bookmark's fingerprint.
    probe: ContentProbe,
    offset: u64,
    /// The line at `offset`.
    line: u64,
    /// Records up to the last page taken.
    records: u64,
    done: bool,
    pending: Option<Pending>,
    line_buf: Vec<u8>,
    /// Hold back a last line without a line break.
    hold_unterminated: bool,
    /// The longest line allowed, in bytes without its line break.
    max_line: u64,
    /// The previous page's schema, reused when the next page has the same fields.
    last_schema: Option<Arc<Schema>>,
    /// A record read whose keys differ from the page being read: the next page's first.
    carry: Option<Carried>,
}

/// A parsed record waiting for the next page, with where it ends.
struct Carried {
    entries: Vec<(String, Value)>,
    end: (u64, u64),
}

/// One record while its page is read: `(field index, value)` pairs.
type Row = Vec<(usize, Value)>;

/// The page being read: the keys seen so far, in order, and the records.
#[derive(Default)]
struct Pending {
    keys: Vec<String>,
    index: HashMap<String, usize>,
    rows: Vec<Row>,
    /// Estimated memory of the values.
    bytes: usize,
    /// The byte offset and line after the last record (or blank line) taken.
    end: Option<(u64, u64)>,
    /// A record with other keys came: the page ends here.
    closed: bool,
}

impl Pending {
    /// Whether `entries` has exactly this page's keys (any order).
    fn same_keys(&self, entries: &[(String, Value)]) -> bool {
        entries.len() == self.keys.len() && entries.iter().all(|(k, _)| self.index.contains_key(k))
    }

    /// Adds a record that ends at `end`.
    fn push(&mut self, entries: Vec<(String, Value)>, end: (u64, u64)) {
        let mut row = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let i = match self.index.get(&key) {
                Some(i) => *i,
                None => {
                    self.keys.push(key.clone());
                    self.index.insert(key, self.keys.len() - 1);
                    self.keys.len() - 1
                }
            };
            self.bytes += value_bytes(&value);
            row.push((i, value));
        }
        self.rows.push(row);
        self.end = Some(end);
    }
}

impl JsonlPageReader {
    fn open(config: &JsonlSourceConfig, from: Option<FileBookmark>) -> Result<Self, FaucetError> {
        let path = config.path.clone();
        let (mut file, meta) = open_regular(CONNECTOR, &path)?;
        let mut head = [0u8; 3];
        let n = read_up_to(&mut file, &mut head)
            .map_err(|e| read_error(CONNECTOR, &path, "cannot read", e))?;
        let data_start = if n == 3 && &head == BOM { 3 } else { 0 };
        let (offset, line, records) = match from {
            Some(b) => {
                b.check_fits(CONNECTOR, &path, &mut file, meta.len(), data_start, b"\n")?;
                (b.byte_offset, b.line, b.records)
            }
            None => (data_start, 1, 0),
        };
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| read_error(CONNECTOR, &path, "cannot seek in", e))?;
        let probe = ContentProbe::open(CONNECTOR, &path)?;
        Ok(Self {
            probe,
            label: path.to_string_lossy().into_owned(),
            path,
            reader: BufReader::with_capacity(READ_BUFFER, file),
            offset,
            line,
            records,
            done: false,
            pending: None,
            line_buf: Vec::new(),
            hold_unterminated: config.unterminated_last_line == UnterminatedLastLine::Wait,
            max_line: config.max_line_bytes,
            last_schema: None,
            carry: None,
        })
    }

    /// Reads lines into `pending` until it holds `batch_size` records, the file ends, or its
    /// estimated size reaches `budget` bytes.
    fn read_lines(
        &mut self,
        pending: &mut Pending,
        batch_size: usize,
        budget: usize,
    ) -> Result<(), FaucetError> {
        if pending.rows.is_empty()
            && let Some(c) = self.carry.take()
        {
            pending.push(c.entries, c.end);
        }
        while !self.done
            && !pending.closed
            && pending.rows.len() < batch_size
            && pending.bytes < budget
        {
            if !self.read_line(pending)? {
                self.done = true;
            }
        }
        Ok(())
    }

    /// Reads one line into `pending`; `false` at the end of the file.
    fn read_line(&mut self, pending: &mut Pending) -> Result<bool, FaucetError> {
        self.line_buf.clear();
        let n = (&mut self.reader)
            .take(self.max_line.saturating_add(1))
            .read_until(b'\n', &mut self.line_buf)
            .map_err(|e| read_error(CONNECTOR, &self.path, "cannot read", e))?;
        if n == 0 {
            return Ok(false);
        }
        let line = self.line;
        let has_newline = self.line_buf.last() == Some(&b'\n');
        if (n - usize::from(has_newline)) as u64 > self.max_line {
            return Err(FaucetError::data(
                CONNECTOR,
                format!("{}:{line}", self.label),
                format!(
                    "the line is longer than max_line_bytes ({} bytes); fix the file, or raise \
                     max_line_bytes if the line is meant",
                    self.max_line
                ),
            ));
        }
        if !has_newline && self.hold_unterminated && !is_whole_container(&self.line_buf) {
            // Not consumed: the bookmark stays before it, and nothing more is read.
            if !self.line_buf.iter().all(u8::is_ascii_whitespace) {
                warn_held_back(CONNECTOR, &format!("{}:{line}", self.label));
            }
            return Ok(false);
        }
        self.offset += n as u64;
        self.line += u64::from(has_newline);
        let end = (self.offset, self.line);
        let text = trim_line_end(&self.line_buf);
        if text.iter().all(u8::is_ascii_whitespace) {
            if !pending.rows.is_empty() {
                pending.end = Some(end);
            }
            return Ok(true);
        }
        let object = parse_object(text, has_newline)
            .map_err(|msg| FaucetError::data(CONNECTOR, format!("{}:{line}", self.label), msg))?;
        let entries = object;
        if pending.rows.is_empty() || pending.same_keys(&entries) {
            pending.push(entries, end);
        } else {
            self.carry = Some(Carried { entries, end });
            pending.closed = true;
        }
        Ok(true)
    }

    /// The page's schema: the keys in first-seen order, typed by their values.
    fn schema_for(&mut self, keys: Vec<String>, rows: &[Row]) -> Arc<Schema> {
        let mut types: Vec<Option<DataType>> = vec![None; keys.len()];
        for row in rows {
            for (i, v) in row {
                let t = v.data_type();
                if t == DataType::Unknown {
                    continue;
                }
                types[*i] = Some(match types[*i].take() {
                    None => t,
                    Some(prev) if prev == t => prev,
                    Some(DataType::Int | DataType::Numeric)
                        if matches!(t, DataType::Int | DataType::Numeric) =>
                    {
                        DataType::Numeric
                    }
                    Some(_) => DataType::Unknown,
                });
            }
        }
        let schema = Schema::new(
            keys.into_iter()
                .zip(types)
                .map(|(k, t)| Field::new(k, t.unwrap_or(DataType::Unknown)))
                .collect(),
        );
        match &self.last_schema {
            Some(last) if **last == schema => last.clone(),
            _ => {
                let schema = Arc::new(schema);
                self.last_schema = Some(schema.clone());
                schema
            }
        }
    }
}

impl PageReader for JsonlPageReader {
    fn read_ahead(&mut self, batch_size: usize, budget: usize) -> Result<(), FaucetError> {
        let mut pending = self.pending.take().unwrap_or_default();
        let read = self.read_lines(&mut pending, batch_size, budget);
        self.pending = Some(pending);
        read
    }

    fn read_page(&mut self, batch_size: usize) -> Result<Option<Page>, FaucetError> {
        let mut pending = self.pending.take().unwrap_or_default();
        self.read_lines(&mut pending, batch_size, usize::MAX)?;
        if pending.rows.is_empty() {
            return Ok(None);
        }
        self.records += pending.rows.len() as u64;
        let schema = self.schema_for(pending.keys, &pending.rows);
        let width = schema.len();
        let mut page = PageBuilder::new(schema, pending.rows.len());
        for row in pending.rows {
            let mut values = vec![Value::Null; width];
            for (i, v) in row {
                values[i] = v;
            }
            page.push_row(values);
        }
        let (byte_offset, line) = pending.end.unwrap_or((self.offset, self.line));
        let fingerprint = self.probe.fingerprint(CONNECTOR, &self.path, byte_offset)?;
        let bookmark = FileBookmark {
            file: self.label.clone(),
            byte_offset,
            line,
            records: self.records,
            fingerprint: Some(fingerprint),
        };
        let extent = self.probe.extent(byte_offset);
        Ok(Some(
            page.finish(Some(bookmark.to_json())).with_extent(extent),
        ))
    }
}

fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The members of the JSON object on one line, each value's text as given.
struct Members<'a>(Vec<(String, &'a serde_json::value::RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> serde::de::Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    members.push((key, map.next_value()?));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

/// The line's object as `(key, value)` pairs in the line's order. Objects and arrays inside
/// it are kept as their text ([`Json::parse`]: compact, everything else as given, nested
/// duplicate keys included); a key given twice at the top level is an error (a record's
/// fields must be unique, and keeping either value would change the data).
fn parse_object(text: &[u8], has_newline: bool) -> Result<Vec<(String, Value)>, String> {
    let members = match serde_json::from_slice::<Members<'_>>(text) {
        Ok(m) => m.0,
        Err(_) => return Err(not_an_object(text, has_newline)),
    };
    let mut seen = std::collections::HashSet::with_capacity(members.len());
    if let Some((key, _)) = members.iter().find(|(k, _)| !seen.insert(k.as_str())) {
        return Err(format!(
            "the key `{key}` appears twice in this object; a record's keys must be unique \
             (fix the line: keeping either value would change the data)"
        ));
    }
    let mut out = Vec::with_capacity(members.len());
    for (key, raw) in members {
        let t = raw.get();
        let bad = |e: serde_json::Error| format!("`{key}`: {e}");
        // The raw text is valid JSON already: scalars are read straight into values.
        let value = match t.as_bytes().first() {
            Some(b'{' | b'[') => Value::Json(Json::parse(t).map_err(bad)?),
            Some(b'"') => Value::Text(serde_json::from_str::<String>(t).map_err(bad)?.into()),
            Some(b'n') => Value::Null,
            Some(b't') => Value::Bool(true),
            Some(b'f') => Value::Bool(false),
            _ => number_value(t).map_err(bad)?,
        };
        out.push((key, value));
    }
    Ok(out)
}

/// Whether `text` is one whole JSON object or array (surrounding whitespace allowed): such a
/// last line without a line break cannot grow into another record — anything a writer
/// appends after its closing bracket is a new line or makes the file invalid — so it is read
/// even under `unterminated_last_line: wait`. A bare number, string or literal can still
/// grow (`12` → `123`, `tru` → `true`) and stays held back.
fn is_whole_container(text: &[u8]) -> bool {
    matches!(
        text.iter().find(|b| !b.is_ascii_whitespace()),
        Some(b'{' | b'[')
    ) && serde_json::from_slice::<serde::de::IgnoredAny>(text).is_ok()
}

/// Why `text` is not one JSON object (the error path: parsed again for the message).
fn not_an_object(text: &[u8], has_newline: bool) -> String {
    match serde_json::from_slice::<serde_json::Value>(text) {
        Ok(other) => format!(
            "expected a JSON object, found {}",
            match other {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Object(_) => "an object it cannot read",
                serde_json::Value::Null => "null",
            }
        ),
        Err(e) if !has_newline => format!(
            "the last line is torn: it has no trailing newline and is not valid JSON ({e}); \
             the file was cut while being written"
        ),
        Err(e) => format!("not valid JSON ({e})"),
    }
}

/// A JSON number as written in the line (`t`, valid JSON already): an integer within 64
/// bits is `Value::Int`, any other number `Value::Numeric` with exactly the text of the line
/// (`1e400`, `1E5`, `-0`, `1.10`). Not through `serde_json::Number`: with
/// `arbitrary_precision` it respells exponents (`1e400` → `1e+400`, `1E5` → `1e+5`).
fn number_value(t: &str) -> Result<Value, serde_json::Error> {
    // `-0` parses as the integer 0; keep its spelling as a numeric instead.
    if let Ok(i) = t.parse::<i64>()
        && t != "-0"
    {
        return Ok(Value::Int(i));
    }
    match Value::numeric(t) {
        Ok(v) => Ok(v),
        // Every JSON number is decimal text; should one not be, it stays JSON, as written.
        Err(_) => Json::verbatim(t).map(Value::Json),
    }
}

fn read_up_to(file: &mut File, out: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < out.len() {
        match file.read(&mut out[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_stay_exact() {
        let line = br#"{"a":7,"b":-9223372036854775808,"c":9223372036854775808,"d":1.10,"e":1e-18,"f":-0,"g":1e400,"h":1E5,"i":-2.5E-3,"j":1e+2,"k":0}"#;
        let got: Vec<Value> = parse_object(line, true)
            .expect("object")
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let n = |t: &str| Value::numeric(t).expect("numeric");
        assert_eq!(
            got,
            vec![
                Value::Int(7),
                Value::Int(i64::MIN),
                n("9223372036854775808"),
                n("1.10"),
                n("1e-18"),
                n("-0"),
                n("1e400"),
                n("1E5"),
                n("-2.5E-3"),
                n("1e+2"),
                Value::Int(0),
            ]
        );
    }

    #[test]
    fn non_objects_and_torn_lines_are_errors() {
        assert!(
            parse_object(b"[1]", true)
                .expect_err("array")
                .contains("an array")
        );
        assert!(
            parse_object(b"{\"a\":", false)
                .expect_err("torn")
                .contains("torn")
        );
        assert!(
            parse_object(b"{\"a\":", true)
                .expect_err("bad")
                .contains("not valid JSON")
        );
        assert_eq!(parse_object(b"{\"a\":1}", false).expect("ok").len(), 1);
    }
}
