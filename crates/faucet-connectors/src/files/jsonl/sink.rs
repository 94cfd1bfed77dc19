//! The `jsonl` sink: [`JsonlSink`] appends one JSON object per line.
//!
//! * Lines: fields in schema order, values by [`faucet_core::value::json::write_value`]
//!   (exact integers and numerics, shortest round-trip floats, base64 bytes, JSON as itself).
//! * Appends, never truncates output on resume. A missing file (and its missing parent
//!   directories) is created by the first `write`, not by `open`: a run that writes nothing
//!   — its source refused to start, found no records, or the run was refused — leaves no
//!   file behind (`open` only checks that it could be created).
//! * Durability: `write` serializes into a buffer; each time it passes 256 KiB it is handed
//!   to a blocking task that writes it while the next chunk is serialized (two buffers, so
//!   memory stays bounded, and the chunk is still in the CPU cache when the kernel copies
//!   it). `flush` waits for that write, writes the rest and fsyncs the file (`fdatasync`),
//!   and the first time also every directory whose entries it created, so a confirmed page
//!   survives a crash.
//! * Crash repair: a crash can leave the file ending in a line without `\n`. `open` only
//!   looks at it; nothing in the file changes until the first `write`, so a run the run loop
//!   refuses (e.g. a lost bookmark: [`faucet_core::SinkWriter::holds_data`]) leaves the file
//!   as it was. Before the first write, a last line that parses as JSON is data (a file
//!   written by someone else, or a crash between a line and its `\n`): it is kept and
//!   completed with a `\n`. One that does not parse is a torn line: the bytes after the last
//!   `\n` are truncated away (fsynced) and a warning names the file, how many bytes were
//!   dropped and how they began. They belong to a page whose bookmark was never persisted, so
//!   the run loop delivers that page again: nothing is lost, and no record is ever glued
//!   onto a torn line. An unterminated last line longer than 16 MiB is not
//!   inspected: the open fails, naming the file.
//! * Symbolic links: a `path` that is a link to a regular file appends to that file, as a
//!   shell's `>>` does (the link itself is never replaced, and crash repair truncates the
//!   file it points at); a link to a directory, device or FIFO is refused like the thing
//!   itself, and a dangling link is refused (no file is created through a link).
//! * Standard output: `path: "-"` writes the lines to stdout (`faucet run p.yaml | jq`), with
//!   no fsync, no repair and no lost-bookmark check (what a reader downstream kept is out of
//!   reach): at-least-once by definition. Any other path that exists and is not a regular
//!   file (`/dev/stdout`, `/dev/null`, a FIFO) is refused before anything is written.
//! * Guarantee: at-least-once (no atomic watermark, no upsert key).
//! * Routing: a `path` with a placeholder (`out/{table}.jsonl`) writes each source table's
//!   change records into its own file, each file durable and repaired as above
//!   ([`super::route`]). A path without one is one file for every record (change records of
//!   several tables included); `{{` and `}}` are literal braces.
//! * Fault point: [`faucet_core::fault::MID_PAGE`] fires in `write` after about half of a
//!   page's lines reached the file, so crash tests can leave a half-written page on disk.
//!
//! The file handling is in [`super::file`], one file's writing in [`super::output`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use faucet_core::route::TableTemplate;
use faucet_core::{FaucetError, Page, Schema, Sink, SinkCapabilities, SinkWriter, Value, fault};
use serde::{Deserialize, Serialize};

use super::file::{OpenFile, check_writable};
use super::keys::{NestedKeys, encoded_keys};
use super::output::Output;
use super::route::Routed;
use crate::files::blocking;

pub(super) const CONNECTOR: &str = "jsonl";

/// The default of [`JsonlSinkConfig::max_open_files`].
const DEFAULT_MAX_OPEN_FILES: usize = 64;

fn default_max_open_files() -> usize {
    DEFAULT_MAX_OPEN_FILES
}

/// Configuration of the `jsonl` sink (`type: jsonl`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlSinkConfig {
    /// The output file; created with its parent directories by the first record when
    /// missing (a run that writes nothing creates nothing), appended to when present. A
    /// relative path is relative to the process's current directory (the CLI resolves it
    /// against the config file's directory first). `-` is standard output (no fsync);
    /// another path that is not a regular file is refused. A symbolic link is followed to
    /// the regular file it points at; a dangling one is refused. With a placeholder of
    /// [`faucet_core::route::TableTemplate`] (`out/{table}.jsonl`, `{schema}/{table}.jsonl`)
    /// each source table's change records go to their own file, created on its table's
    /// first record and repaired and fsynced as the one file is; a record without a source
    /// table, or a table whose name would not make a safe file name (`/`, `\`, `..`, control
    /// characters), is a data error naming it. `{{` / `}}` are literal braces.
    pub path: PathBuf,
    /// A routed `path`: the most files kept open at once (≥ 1); past it the least recently
    /// written is fsynced and closed, and reopened when its table comes back. Default 64.
    #[serde(default = "default_max_open_files")]
    pub max_open_files: usize,
}

impl JsonlSinkConfig {
    /// A configuration writing `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max_open_files: DEFAULT_MAX_OPEN_FILES,
        }
    }

    /// Checks the configuration without touching the file system.
    ///
    /// # Errors
    /// [`FaucetError::Config`] with field `path` when it is empty or a bad template (an
    /// unknown placeholder, an unpaired brace), `max_open_files` when it is 0.
    pub fn validate(&self) -> Result<(), FaucetError> {
        super::validate_path(&self.path)?;
        self.route()?;
        if self.max_open_files == 0 {
            return Err(FaucetError::config(
                "max_open_files",
                "must be at least 1 (the files a routed `path` keeps open at once)",
            ));
        }
        Ok(())
    }

    /// Whether the lines go to standard output (`path: "-"`).
    pub fn writes_stdout(&self) -> bool {
        self.path.as_os_str() == "-"
    }

    /// The path template when `path` has a placeholder (it routes by source table), else
    /// `None` (one file; a path that is not UTF-8 is always one file).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `path` for a bad template.
    pub fn route(&self) -> Result<Option<TableTemplate>, FaucetError> {
        let Some(text) = self.path.to_str() else {
            return Ok(None);
        };
        if self.writes_stdout() {
            return Ok(None);
        }
        let template = TableTemplate::parse(text, "path")?;
        Ok(template.fixed().is_none().then_some(template))
    }

    /// The one file written when `path` does not route: `path` with `{{` / `}}` made single
    /// braces.
    pub fn file(&self) -> PathBuf {
        match self.path.to_str().map(|t| TableTemplate::parse(t, "path")) {
            Some(Ok(t)) if !self.writes_stdout() => match t.fixed() {
                Some(fixed) => PathBuf::from(fixed),
                None => self.path.clone(),
            },
            _ => self.path.clone(),
        }
    }
}

/// The `jsonl` sink.
#[derive(Debug, Clone)]
pub struct JsonlSink {
    config: JsonlSinkConfig,
    /// The path template of a routed sink.
    route: Option<TableTemplate>,
}

impl JsonlSink {
    /// A sink for `config`, validated; no I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`JsonlSinkConfig::validate`].
    pub fn new(config: JsonlSinkConfig) -> Result<Self, FaucetError> {
        config.validate()?;
        let route = config.route()?;
        Ok(Self { config, route })
    }

    /// The configuration.
    pub fn config(&self) -> &JsonlSinkConfig {
        &self.config
    }
}

/// `path` made absolute against the working directory, `.` dropped and `..` applied
/// lexically (no file system access beyond the working directory; symlinks are kept).
pub(super) fn absolute(path: &Path) -> PathBuf {
    let full = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for c in full.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[async_trait]
impl Sink for JsonlSink {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    fn capabilities(&self) -> SinkCapabilities {
        SinkCapabilities::default()
    }

    /// `jsonl <absolute path>`, `.` and `..` resolved lexically, so the same file reached
    /// from another working directory (`out.jsonl`, `dir/out.jsonl`) is the same target;
    /// `jsonl -` for standard output; a routed sink's template as configured, made absolute
    /// the same way.
    fn target(&self) -> Option<String> {
        if self.config.writes_stdout() {
            return Some(format!("{CONNECTOR} -"));
        }
        Some(format!(
            "{CONNECTOR} {}",
            absolute(&self.config.path).display()
        ))
    }

    /// Opens an existing file for appending and inspects its last line (repaired before the
    /// first write, see the module docs); for a missing file, checks that it can be created
    /// (as [`Sink::check`]) and leaves its creation to the first write. A routed sink opens
    /// no file here (each on its table's first record); it checks that the template's
    /// directory can be created.
    ///
    /// # Errors
    /// [`FaucetError::Write`] naming the file or directory that cannot be created, opened or
    /// read, or whose unterminated last line is longer than 16 MiB.
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        let mode = if let Some(template) = &self.route {
            let path = self.config.path.clone();
            blocking::write(CONNECTOR, move || check_writable(&path)).await??;
            Mode::Routed(Routed::new(template.clone(), self.config.max_open_files))
        } else if self.config.writes_stdout() {
            Mode::One(Output::new(
                self.config.path.clone(),
                OpenFile::stdout()?,
                true,
            ))
        } else {
            let path = self.config.file();
            let at = path.clone();
            let opened = blocking::write(CONNECTOR, move || OpenFile::open_existing(&at)).await??;
            Mode::One(Output::new(path, opened, false))
        };
        let label = match &mode {
            Mode::One(_) if self.config.writes_stdout() => "-".to_owned(),
            Mode::One(out) => absolute(out.path()).display().to_string(),
            Mode::Routed(_) => String::new(),
        };
        Ok(Box::new(JsonlWriter {
            mode,
            label,
            keys_for: None,
            keys: Vec::new(),
            nested: NestedKeys::default(),
            written: Vec::new(),
        }))
    }

    /// Checks that the parent directory exists and is writable, or that its nearest
    /// existing ancestor is (so it can be created), by creating and removing a probe file
    /// there; and that an existing output is a writable regular file. The output itself is
    /// not opened.
    ///
    /// # Errors
    /// [`FaucetError::Write`] naming the directory or file at fault.
    async fn check(&self) -> Result<(), FaucetError> {
        if self.config.writes_stdout() {
            return Ok(());
        }
        let path = self.config.file();
        blocking::write(CONNECTOR, move || check_writable(&path)).await?
    }
}

/// Appends one line: `{`, each key and value, `}\n` (`keys` from [`encoded_keys`]).
pub(super) fn push_line(
    buf: &mut Vec<u8>,
    keys: &[Vec<u8>],
    nested: &mut NestedKeys,
    values: &[Value],
) {
    buf.push(b'{');
    for (key, value) in keys.iter().zip(values) {
        buf.extend_from_slice(key);
        nested.write_value(buf, value);
    }
    buf.extend_from_slice(b"}\n");
}

/// What a writer writes to.
enum Mode {
    /// One file, or standard output.
    One(Output),
    /// A file per source table.
    Routed(Routed),
}

/// An open `jsonl` output.
struct JsonlWriter {
    mode: Mode,
    /// The one file's name in per-target counts: its absolute path (`.` and `..` applied
    /// lexically), `-` for standard output.
    label: String,
    /// The schema `keys` were made for.
    keys_for: Option<Arc<Schema>>,
    /// Per field: `"name":`, with a leading `,` after the first.
    keys: Vec<Vec<u8>>,
    /// The same for the schemas of nested rows (a change record's `before` / `after`).
    nested: NestedKeys,
    /// The last page's records per file.
    written: Vec<(String, u64)>,
}

impl JsonlWriter {
    fn set_keys(&mut self, schema: &Arc<Schema>) {
        if self
            .keys_for
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, schema))
        {
            return;
        }
        self.keys = encoded_keys(schema);
        self.keys_for = Some(schema.clone());
    }
}

#[async_trait]
impl SinkWriter for JsonlWriter {
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        self.written.clear();
        self.set_keys(page.schema());
        let Self {
            mode,
            label,
            keys,
            nested,
            written,
            ..
        } = self;
        let out = match mode {
            Mode::Routed(routed) => return routed.write(page, keys, nested, written).await,
            Mode::One(out) => out,
        };
        out.prepare().await?;
        let half = page.len().div_ceil(2);
        for (i, row) in page.rows().enumerate() {
            push_line(&mut out.buf, keys, nested, row.values());
            if i + 1 == half {
                out.write_out().await?;
                out.wait_written().await?;
                fault::point(fault::MID_PAGE);
            } else {
                out.write_full().await?;
            }
        }
        if !page.is_empty() {
            written.push((label.clone(), page.len() as u64));
        }
        Ok(())
    }

    /// Whether the output already holds a record (a torn last line, which the first write
    /// removes, does not count; nothing is changed); for a routed sink, whether a file the
    /// template could name does ([`super::route`]).
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        match &self.mode {
            Mode::One(out) => out.holds_data(),
            Mode::Routed(routed) => routed.holds_data().await,
        }
    }

    async fn flush(&mut self) -> Result<(), FaucetError> {
        match &mut self.mode {
            Mode::One(out) => out.flush().await,
            Mode::Routed(routed) => routed.flush().await,
        }
    }

    fn written_targets(&self) -> &[(String, u64)] {
        &self.written
    }
}
