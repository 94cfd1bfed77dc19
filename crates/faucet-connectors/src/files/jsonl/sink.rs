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
//! * Fault point: [`faucet_core::fault::MID_PAGE`] fires in `write` after about half of a
//!   page's lines reached the file, so crash tests can leave a half-written page on disk.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use faucet_core::{FaucetError, Page, Schema, Sink, SinkCapabilities, SinkWriter, fault};
use serde::{Deserialize, Serialize};

use super::keys::{NestedKeys, encoded_keys};
use crate::files::blocking;

const CONNECTOR: &str = "jsonl";
/// The serialized bytes `write` holds before handing them to a write: 256 KiB.
const WRITE_CHUNK: usize = 256 << 10;
/// Once this much has been handed to writes since the last sync, a `sync_data` starts in the
/// background while the page goes on being serialized, so the disk writes most of a page
/// before `flush` asks for it and `flush`'s own sync has only the tail left (1 MiB). It
/// changes when bytes reach the disk, never what `flush` promises: `flush` still waits for
/// a sync started after the last write.
const EARLY_SYNC_BYTES: usize = 1 << 20;

/// The longest unterminated last line `open` reads to decide whether it is data: 16 MiB.
const MAX_TAIL_BYTES: u64 = 16 << 20;

static PROBE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Configuration of the `jsonl` sink (`type: jsonl`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlSinkConfig {
    /// The output file; created with its parent directories by the first record when
    /// missing (a run that writes nothing creates nothing), appended to when present. A
    /// relative path is relative to the process's current directory (the CLI resolves it
    /// against the config file's directory first). `-` is standard output (no fsync);
    /// another path that is not a regular file is refused. A symbolic link is followed to
    /// the regular file it points at; a dangling one is refused.
    pub path: PathBuf,
}

impl JsonlSinkConfig {
    /// A configuration writing `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Checks the configuration without touching the file system.
    ///
    /// # Errors
    /// [`FaucetError::Config`] with field `path` when it is empty.
    pub fn validate(&self) -> Result<(), FaucetError> {
        super::validate_path(&self.path)
    }

    /// Whether the lines go to standard output (`path: "-"`).
    pub fn writes_stdout(&self) -> bool {
        self.path.as_os_str() == "-"
    }
}

/// The `jsonl` sink.
#[derive(Debug, Clone)]
pub struct JsonlSink {
    config: JsonlSinkConfig,
}

impl JsonlSink {
    /// A sink for `config`, validated; no I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`JsonlSinkConfig::validate`].
    pub fn new(config: JsonlSinkConfig) -> Result<Self, FaucetError> {
        config.validate()?;
        Ok(Self { config })
    }

    /// The configuration.
    pub fn config(&self) -> &JsonlSinkConfig {
        &self.config
    }
}

/// `path` made absolute against the working directory, `.` dropped and `..` applied
/// lexically (no file system access beyond the working directory; symlinks are kept).
fn absolute(path: &Path) -> PathBuf {
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
    /// `jsonl -` for standard output.
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
    /// (as [`Sink::check`]) and leaves its creation to the first write.
    ///
    /// # Errors
    /// [`FaucetError::Write`] naming the file or directory that cannot be created, opened or
    /// read, or whose unterminated last line is longer than 16 MiB.
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        let path = self.config.path.clone();
        let to_stdout = self.config.writes_stdout();
        let opened = if to_stdout {
            OpenFile::stdout()?
        } else {
            blocking::write(CONNECTOR, move || OpenFile::open_existing(&path)).await??
        };
        Ok(Box::new(JsonlWriter {
            path: self.config.path.clone(),
            file: opened.file.map(Arc::new),
            buf: Vec::new(),
            in_flight: None,
            spare: Vec::new(),
            early_sync: None,
            early_sync_error: Arc::default(),
            unsynced: 0,
            dirs_to_sync: opened.dirs_to_sync,
            tail: opened.tail,
            to_stdout,
            keys_for: None,
            keys: Vec::new(),
            nested: NestedKeys::default(),
            failed: false,
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
        let path = self.config.path.clone();
        blocking::write(CONNECTOR, move || check_writable(&path)).await?
    }
}

/// The output file, opened and inspected.
struct OpenFile {
    /// `None`: the file does not exist yet; the first write creates it.
    file: Option<File>,
    /// Directories holding entries this open created, fsynced at the first flush.
    dirs_to_sync: Vec<PathBuf>,
    /// The unterminated last line found, to repair before the first write.
    tail: Option<Tail>,
}

/// A last line without `\n`, as found by `open`.
#[derive(Debug, Clone)]
struct Tail {
    /// The file's length up to and including its last `\n`.
    keep: u64,
    /// The file's length.
    len: u64,
    /// Whether the bytes after `keep` parse as one JSON value (then they are data).
    parses: bool,
    /// The first bytes of the line, for the warning.
    preview: String,
}

impl OpenFile {
    /// Standard output, as a file (a duplicate of descriptor 1).
    #[cfg(unix)]
    fn stdout() -> Result<Self, FaucetError> {
        use std::os::fd::AsFd as _;
        let fd = io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| write_error(Path::new("-"), "cannot use standard output as", e))?;
        Ok(Self {
            file: Some(File::from(fd)),
            dirs_to_sync: Vec::new(),
            tail: None,
        })
    }

    /// Standard output is supported on Unix only.
    #[cfg(not(unix))]
    fn stdout() -> Result<Self, FaucetError> {
        Err(FaucetError::write(
            CONNECTOR,
            "path `-` (standard output) is supported on Unix only",
            None,
        ))
    }

    /// The file when it exists (opened as [`OpenFile::open`] does); when it does not, only
    /// checks that it could be created, and changes nothing.
    fn open_existing(path: &Path) -> Result<Self, FaucetError> {
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                check_writable(path)?;
                Ok(Self {
                    file: None,
                    dirs_to_sync: Vec::new(),
                    tail: None,
                })
            }
            _ => Self::open(path),
        }
    }

    /// Opens the file for appending, creating it and its missing parent directories.
    fn open(path: &Path) -> Result<Self, FaucetError> {
        refuse_special(path)?;
        let parent = parent_dir(path);
        let mut dirs_to_sync = Vec::new();
        let mut missing = parent.clone();
        while !missing.exists() {
            match missing.parent() {
                Some(up) if !up.as_os_str().is_empty() => {
                    dirs_to_sync.push(up.to_path_buf());
                    missing = up.to_path_buf();
                }
                _ => {
                    dirs_to_sync.push(PathBuf::from("."));
                    break;
                }
            }
        }
        fs::create_dir_all(&parent)
            .map_err(|e| write_error(&parent, "cannot create the directory", e))?;
        let created = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(path);
        let (file, tail) = match created {
            Ok(file) => {
                dirs_to_sync.push(parent);
                (file, None)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let mut file = OpenOptions::new()
                    .read(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| write_error(path, "cannot open", e))?;
                let tail = inspect_tail(path, &mut file)?;
                (file, tail)
            }
            Err(e) => return Err(write_error(path, "cannot create", e)),
        };
        Ok(Self {
            file: Some(file),
            dirs_to_sync,
            tail,
        })
    }
}

/// Refuses a path that exists and is not a regular file (a device, FIFO, directory): the
/// sink appends to it and fsyncs it, which only a regular file supports. A symbolic link is
/// followed to what it points at, by the same rule; a link to nothing (dangling) is refused:
/// the sink creates no file through a link, where the link's owner and not the config
/// decides where it lands.
fn refuse_special(path: &Path) -> Result<(), FaucetError> {
    let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    match fs::metadata(path) {
        Err(e) if is_link && e.kind() == io::ErrorKind::NotFound => {
            let to = fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".to_owned());
            Err(FaucetError::write(
                CONNECTOR,
                format!(
                    "{} is a symbolic link to {to}, which does not exist: the jsonl sink \
                     appends to the file a link points at but does not create one through a \
                     link. Create the file it points at, or set `path` to the file itself",
                    path.display()
                ),
                None,
            ))
        }
        Ok(meta) if !meta.is_file() => Err(FaucetError::write(
            CONNECTOR,
            format!(
                "{} exists and is not a regular file (a device, FIFO or directory): the jsonl \
                 sink appends to a regular file and fsyncs it. Write to a file, or set `path: \
                 \"-\"` to write the lines to standard output",
                path.display()
            ),
            None,
        )),
        _ => Ok(()),
    }
}

/// The directory a file path lives in (`.` for a bare file name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The file's last line when it has no `\n` (read only, nothing changes).
fn inspect_tail(path: &Path, file: &mut File) -> Result<Option<Tail>, FaucetError> {
    let len = file
        .metadata()
        .map_err(|e| write_error(path, "cannot stat", e))?
        .len();
    if len == 0 {
        return Ok(None);
    }
    let keep = last_line_end(file, len).map_err(|e| write_error(path, "cannot read", e))?;
    if keep == len {
        return Ok(None);
    }
    if len - keep > MAX_TAIL_BYTES {
        return Err(FaucetError::write(
            CONNECTOR,
            format!(
                "{} ends in a line of {} bytes without a line break, too long to check \
                 whether it is a record (more than {MAX_TAIL_BYTES} bytes); end it with a \
                 line break or remove it, then run again",
                path.display(),
                len - keep
            ),
            None,
        ));
    }
    let mut bytes = vec![0u8; usize::try_from(len - keep).unwrap_or(0)];
    file.seek(SeekFrom::Start(keep))
        .and_then(|_| file.read_exact(&mut bytes))
        .map_err(|e| write_error(path, "cannot read", e))?;
    let text = bytes.strip_suffix(b"\r").unwrap_or(&bytes);
    let parses = serde_json::from_slice::<serde::de::IgnoredAny>(text).is_ok();
    let shown = &bytes[..bytes.len().min(60)];
    let mut preview = String::from_utf8_lossy(shown).into_owned();
    if shown.len() < bytes.len() {
        preview.push('…');
    }
    Ok(Some(Tail {
        keep,
        len,
        parses,
        preview,
    }))
}

/// Repairs `tail` before the first write: a line that parses gets its `\n`, a torn one is
/// truncated away; either is fsynced.
fn repair_tail(path: &Path, file: &File, tail: &Tail) -> Result<(), FaucetError> {
    if tail.parses {
        (&*file)
            .write_all(b"\n")
            .and_then(|()| file.sync_data())
            .map_err(|e| write_error(path, "cannot complete the last line of", e))?;
        tracing::warn!(
            file = %path.display(),
            line = %tail.preview,
            "jsonl sink: the file's last line had no line break; it is valid JSON, so it was \
             kept and completed with one before appending"
        );
        return Ok(());
    }
    file.set_len(tail.keep)
        .and_then(|()| file.sync_all())
        .map_err(|e| write_error(path, "cannot truncate the torn last line of", e))?;
    tracing::warn!(
        file = %path.display(),
        dropped_bytes = tail.len - tail.keep,
        dropped = %tail.preview,
        "jsonl sink: the file ended in a torn line (no line break, not valid JSON), left by a \
         crash; truncated it before appending. Its page was never confirmed and is delivered \
         again"
    );
    Ok(())
}

/// The length up to and including the last `\n` (0 when there is none).
fn last_line_end(file: &mut File, len: u64) -> io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

fn check_writable(path: &Path) -> Result<(), FaucetError> {
    let mut dir = parent_dir(path);
    while !dir.exists() {
        dir = parent_dir(&dir);
    }
    if !dir.is_dir() {
        return Err(FaucetError::write(
            CONNECTOR,
            format!("{} is not a directory", dir.display()),
            None,
        ));
    }
    let probe = dir.join(format!(
        ".faucet-probe-{}-{}",
        std::process::id(),
        PROBE_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut f| f.write_all(b"probe"))
        .and_then(|()| fs::remove_file(&probe))
        .map_err(|e| write_error(&dir, "cannot create files in", e))?;
    refuse_special(path)?;
    match fs::metadata(path) {
        Ok(meta) if meta.permissions().readonly() => Err(FaucetError::write(
            CONNECTOR,
            format!("{} is read-only", path.display()),
            None,
        )),
        _ => Ok(()),
    }
}

fn write_error(path: &Path, what: &str, e: io::Error) -> FaucetError {
    FaucetError::write(
        CONNECTOR,
        format!("{what} {}", path.display()),
        Some(Box::new(e)),
    )
}

/// fsyncs the file's data, then each directory in `dirs`.
fn sync(file: &File, path: &Path, dirs: &[PathBuf]) -> Result<(), FaucetError> {
    file.sync_data()
        .map_err(|e| write_error(path, "cannot fsync", e))?;
    for dir in dirs {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| write_error(dir, "cannot fsync the directory", e))?;
    }
    Ok(())
}

/// An open `jsonl` output.
struct JsonlWriter {
    path: PathBuf,
    /// `None` until the first write creates a file that did not exist at `open`.
    file: Option<Arc<File>>,
    /// Serialized lines not yet handed to a write.
    buf: Vec<u8>,
    /// The write in progress (it hands its buffer back), at most one at a time.
    in_flight: Option<tokio::task::JoinHandle<(Vec<u8>, io::Result<()>)>>,
    /// The buffer of the last finished write, reused for the next chunk.
    spare: Vec<u8>,
    /// A `sync_data` started while the page is still being written (see
    /// [`EARLY_SYNC_BYTES`]), awaited by `flush` before its own.
    early_sync: Option<tokio::task::JoinHandle<()>>,
    /// The first failure of a background sync. Linux reports a writeback error to one
    /// `fsync` of a file description only, so it must not be dropped: `flush` fails with it.
    early_sync_error: Arc<std::sync::Mutex<Option<io::Error>>>,
    /// Bytes handed to writes since the last sync started.
    unsynced: usize,
    dirs_to_sync: Vec<PathBuf>,
    /// The unterminated last line `open` found, repaired by the first `write`.
    tail: Option<Tail>,
    /// Writing to standard output: never fsynced.
    to_stdout: bool,
    /// The schema `keys` were made for.
    keys_for: Option<Arc<Schema>>,
    /// Per field: `"name":`, with a leading `,` after the first.
    keys: Vec<Vec<u8>>,
    /// The same for the schemas of nested rows (a change record's `before` / `after`).
    nested: NestedKeys,
    /// A write failed: the file may end in a torn line until the next open repairs it.
    failed: bool,
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

    /// The open file (the first write opened or created it).
    fn file(&self) -> Result<Arc<File>, FaucetError> {
        self.file.clone().ok_or_else(|| {
            FaucetError::write(
                CONNECTOR,
                format!("{} is not open yet", self.path.display()),
                None,
            )
        })
    }

    /// Creates the file (and its missing directories) when `open` found none.
    async fn create_if_missing(&mut self) -> Result<(), FaucetError> {
        if self.file.is_some() {
            return Ok(());
        }
        let path = self.path.clone();
        let opened = blocking::write(CONNECTOR, move || OpenFile::open(&path)).await??;
        self.file = opened.file.map(Arc::new);
        self.dirs_to_sync = opened.dirs_to_sync;
        self.tail = opened.tail;
        Ok(())
    }

    fn check_usable(&self) -> Result<(), FaucetError> {
        if self.failed {
            return Err(FaucetError::write(
                CONNECTOR,
                format!(
                    "an earlier write to {} failed; reopen the sink (a torn last line is \
                     repaired before the next write)",
                    self.path.display()
                ),
                None,
            ));
        }
        Ok(())
    }

    /// Hands the buffer to a blocking write (after the previous one finished), and goes on
    /// with the spare buffer.
    async fn write_out(&mut self) -> Result<(), FaucetError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.wait_written().await?;
        self.start_early_sync();
        let spare = std::mem::take(&mut self.spare);
        let buf = std::mem::replace(&mut self.buf, spare);
        self.unsynced += buf.len();
        let file = self.file()?;
        self.in_flight = Some(tokio::task::spawn_blocking(move || {
            let result = (&*file).write_all(&buf);
            (buf, result)
        }));
        Ok(())
    }

    /// Starts a background `sync_data` of what is already written when
    /// [`EARLY_SYNC_BYTES`] have accumulated and none is running.
    fn start_early_sync(&mut self) {
        if self.to_stdout
            || self.unsynced < EARLY_SYNC_BYTES
            || self.early_sync.as_ref().is_some_and(|t| !t.is_finished())
        {
            return;
        }
        let Some(file) = self.file.clone() else {
            return;
        };
        self.unsynced = 0;
        let error = Arc::clone(&self.early_sync_error);
        // A finished task's outcome is in `early_sync_error`; its handle can go.
        self.early_sync = Some(tokio::task::spawn_blocking(move || {
            if let Err(e) = file.sync_data() {
                let mut slot = error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                slot.get_or_insert(e);
            }
        }));
    }

    /// Waits for the background sync, if one was started, and fails with the first error
    /// any of them met.
    async fn wait_early_sync(&mut self) -> Result<(), FaucetError> {
        if let Some(task) = self.early_sync.take() {
            task.await.map_err(|e| {
                self.failed = true;
                FaucetError::write(CONNECTOR, "the file sync task failed", Some(Box::new(e)))
            })?;
        }
        let failed = self
            .early_sync_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match failed {
            Some(e) => {
                self.failed = true;
                Err(write_error(&self.path, "cannot fsync", e))
            }
            None => Ok(()),
        }
    }

    /// Waits for the write in progress: everything handed out is in the file (not yet
    /// durable).
    async fn wait_written(&mut self) -> Result<(), FaucetError> {
        let Some(write) = self.in_flight.take() else {
            return Ok(());
        };
        let (mut buf, result) = write.await.map_err(|e| {
            self.failed = true;
            FaucetError::write(CONNECTOR, "the file write task failed", Some(Box::new(e)))
        })?;
        buf.clear();
        self.spare = buf;
        result.map_err(|e| {
            self.failed = true;
            write_error(&self.path, "cannot write", e)
        })
    }
}

#[async_trait]
impl SinkWriter for JsonlWriter {
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        self.check_usable()?;
        self.create_if_missing().await?;
        if let Some(tail) = self.tail.take() {
            let (file, path) = (self.file()?, self.path.clone());
            blocking::write(CONNECTOR, move || repair_tail(&path, &file, &tail)).await??;
        }
        self.set_keys(page.schema());
        let half = page.len().div_ceil(2);
        for (i, row) in page.rows().enumerate() {
            self.buf.push(b'{');
            for (key, value) in self.keys.iter().zip(row.values()) {
                self.buf.extend_from_slice(key);
                self.nested.write_value(&mut self.buf, value);
            }
            self.buf.extend_from_slice(b"}\n");
            if i + 1 == half {
                self.write_out().await?;
                self.wait_written().await?;
                fault::point(fault::MID_PAGE);
            } else if self.buf.len() >= WRITE_CHUNK {
                self.write_out().await?;
            }
        }
        Ok(())
    }

    /// Whether the output file already holds a line (a torn last line, which the first
    /// write removes, does not count; nothing is changed).
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        if self.to_stdout {
            return Ok(None);
        }
        let Some(file) = &self.file else {
            return Ok(Some(!self.buf.is_empty()));
        };
        let len = match &self.tail {
            Some(tail) if !tail.parses => tail.keep,
            _ => file.metadata().map(|m| m.len()).map_err(|e| {
                FaucetError::write(
                    CONNECTOR,
                    format!("cannot inspect {}", self.path.display()),
                    Some(Box::new(e)),
                )
            })?,
        };
        Ok(Some(len > 0 || !self.buf.is_empty()))
    }

    async fn flush(&mut self) -> Result<(), FaucetError> {
        self.check_usable()?;
        self.write_out().await?;
        self.wait_written().await?;
        self.wait_early_sync().await?;
        self.unsynced = 0;
        let Some(file) = self.file.clone() else {
            // Nothing was written: there is no file to sync.
            return Ok(());
        };
        if self.to_stdout {
            return Ok(());
        }
        let dirs = std::mem::take(&mut self.dirs_to_sync);
        let path = self.path.clone();
        let (dirs, synced) = blocking::write(CONNECTOR, move || {
            let synced = sync(&file, &path, &dirs);
            (dirs, synced)
        })
        .await?;
        if synced.is_err() {
            // Not durable yet: the directories are synced again at the next flush.
            self.dirs_to_sync = dirs;
        }
        synced
    }
}
