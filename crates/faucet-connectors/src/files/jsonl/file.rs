//! One output file of the `jsonl` sink on disk: opening (creating it and its directories,
//! refusing what is not a regular file), the torn-tail inspection and repair, the
//! writability probe and the fsyncs; the policy is in the module docs of [`super::sink`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use faucet_core::FaucetError;

use super::sink::CONNECTOR;

/// The longest unterminated last line `open` reads to decide whether it is data: 16 MiB.
const MAX_TAIL_BYTES: u64 = 16 << 20;

static PROBE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The output file, opened and inspected.
pub(super) struct OpenFile {
    /// `None`: the file does not exist yet; the first write creates it.
    pub(super) file: Option<File>,
    /// Directories holding entries this open created, fsynced at the first flush.
    pub(super) dirs_to_sync: Vec<PathBuf>,
    /// The unterminated last line found, to repair before the first write.
    pub(super) tail: Option<Tail>,
}

/// A last line without `\n`, as found by `open`.
#[derive(Debug, Clone)]
pub(super) struct Tail {
    /// The file's length up to and including its last `\n`.
    pub(super) keep: u64,
    /// The file's length.
    len: u64,
    /// Whether the bytes after `keep` parse as one JSON value (then they are data).
    pub(super) parses: bool,
    /// The first bytes of the line, for the warning.
    preview: String,
}

impl OpenFile {
    /// Standard output, as a file (a duplicate of descriptor 1).
    #[cfg(unix)]
    pub(super) fn stdout() -> Result<Self, FaucetError> {
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
    pub(super) fn stdout() -> Result<Self, FaucetError> {
        Err(FaucetError::write(
            CONNECTOR,
            "path `-` (standard output) is supported on Unix only",
            None,
        ))
    }

    /// The file when it exists (opened as [`OpenFile::open`] does); when it does not, only
    /// checks that it could be created, and changes nothing.
    pub(super) fn open_existing(path: &Path) -> Result<Self, FaucetError> {
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
    pub(super) fn open(path: &Path) -> Result<Self, FaucetError> {
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
pub(super) fn refuse_special(path: &Path) -> Result<(), FaucetError> {
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
pub(super) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The file's last line when it has no `\n` (read only, nothing changes).
pub(super) fn inspect_tail(path: &Path, file: &mut File) -> Result<Option<Tail>, FaucetError> {
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
pub(super) fn repair_tail(path: &Path, file: &File, tail: &Tail) -> Result<(), FaucetError> {
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

pub(super) fn check_writable(path: &Path) -> Result<(), FaucetError> {
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

pub(super) fn write_error(path: &Path, what: &str, e: io::Error) -> FaucetError {
    FaucetError::write(
        CONNECTOR,
        format!("{what} {}", path.display()),
        Some(Box::new(e)),
    )
}

/// fsyncs the file's data, then each directory in `dirs`.
pub(super) fn sync(file: &File, path: &Path, dirs: &[PathBuf]) -> Result<(), FaucetError> {
    file.sync_data()
        .map_err(|e| write_error(path, "cannot fsync", e))?;
    for dir in dirs {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| write_error(dir, "cannot fsync the directory", e))?;
    }
    Ok(())
}

/// Whether the regular file at `path` holds a record: a complete line, or a last line
/// without `\n` that parses (a torn one, which the first write removes, does not count).
/// Read only: nothing changes.
pub(super) fn holds_records(path: &Path) -> Result<bool, FaucetError> {
    let mut file = File::open(path).map_err(|e| write_error(path, "cannot open", e))?;
    let len = file
        .metadata()
        .map_err(|e| write_error(path, "cannot stat", e))?
        .len();
    Ok(match inspect_tail(path, &mut file)? {
        Some(tail) if !tail.parses => tail.keep > 0,
        _ => len > 0,
    })
}
