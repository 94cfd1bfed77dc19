//! One output of the `jsonl` sink being written: its serialization buffer, the write in
//! flight on the blocking pool, the early background sync and the fsync that makes it
//! durable (the policy is in the module docs of [`super::sink`]). A sink writing one file
//! has one [`Output`]; a routed sink one per open file ([`super::route`]).

use std::fs::File;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use faucet_core::FaucetError;
use tokio::task::JoinHandle;

use super::file::{OpenFile, Tail, repair_tail, sync, write_error};
use super::sink::CONNECTOR;
use crate::files::blocking;

/// The serialized bytes an output holds before handing them to a write: 256 KiB.
pub(super) const WRITE_CHUNK: usize = 256 << 10;
/// Once this much has been handed to writes since the last sync, a `sync_data` starts in the
/// background while the page goes on being serialized, so the disk writes most of a page
/// before `flush` asks for it and `flush`'s own sync has only the tail left (1 MiB). It
/// changes when bytes reach the disk, never what `flush` promises: `flush` still waits for
/// a sync started after the last write.
const EARLY_SYNC_BYTES: usize = 1 << 20;

/// A sync of one output in progress: the directories it syncs come back with the outcome.
pub(super) type SyncTask = JoinHandle<(Vec<PathBuf>, Result<(), FaucetError>)>;

/// One output file (or standard output) being written.
pub(super) struct Output {
    path: PathBuf,
    /// `None` until the first write creates a file that did not exist at `open`.
    file: Option<Arc<File>>,
    /// Serialized lines not yet handed to a write.
    pub(super) buf: Vec<u8>,
    /// The write in progress (it hands its buffer back), at most one at a time.
    in_flight: Option<JoinHandle<(Vec<u8>, io::Result<()>)>>,
    /// The buffer of the last finished write, reused for the next chunk.
    spare: Vec<u8>,
    /// A `sync_data` started while the page is still being written (see
    /// [`EARLY_SYNC_BYTES`]), awaited by `flush` before its own.
    early_sync: Option<JoinHandle<()>>,
    /// The first failure of a background sync. Linux reports a writeback error to one
    /// `fsync` of a file description only, so it must not be dropped: `flush` fails with it.
    early_sync_error: Arc<Mutex<Option<io::Error>>>,
    /// Bytes handed to writes since the last sync started.
    unsynced: usize,
    /// Whether bytes were handed to writes since the last completed sync.
    dirty: bool,
    dirs_to_sync: Vec<PathBuf>,
    /// The unterminated last line `open` found, repaired by the first write.
    tail: Option<Tail>,
    /// Writing to standard output: never fsynced.
    to_stdout: bool,
    /// A write failed: the file may end in a torn line until the next open repairs it.
    failed: bool,
}

impl Output {
    /// An output of `path` as `opened` found it.
    pub(super) fn new(path: PathBuf, opened: OpenFile, to_stdout: bool) -> Self {
        Self {
            path,
            file: opened.file.map(Arc::new),
            buf: Vec::new(),
            in_flight: None,
            spare: Vec::new(),
            early_sync: None,
            early_sync_error: Arc::default(),
            unsynced: 0,
            dirty: false,
            dirs_to_sync: opened.dirs_to_sync,
            tail: opened.tail,
            to_stdout,
            failed: false,
        }
    }

    /// The file's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Fails when an earlier write failed (the writer must be reopened).
    pub(super) fn check_usable(&self) -> Result<(), FaucetError> {
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

    /// Readies the output for lines: creates the file (and its missing directories) when
    /// `open` found none, and repairs the last line `open` found without `\n`.
    pub(super) async fn prepare(&mut self) -> Result<(), FaucetError> {
        self.check_usable()?;
        if self.file.is_none() {
            let path = self.path.clone();
            let opened = blocking::write(CONNECTOR, move || OpenFile::open(&path)).await??;
            self.file = opened.file.map(Arc::new);
            self.dirs_to_sync = opened.dirs_to_sync;
            self.tail = opened.tail;
        }
        if let Some(tail) = self.tail.take() {
            let (file, path) = (self.file()?, self.path.clone());
            blocking::write(CONNECTOR, move || repair_tail(&path, &file, &tail)).await??;
        }
        Ok(())
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

    /// Hands the buffer to a write when it holds [`WRITE_CHUNK`] bytes.
    pub(super) async fn write_full(&mut self) -> Result<(), FaucetError> {
        if self.buf.len() >= WRITE_CHUNK {
            self.write_out().await?;
        }
        Ok(())
    }

    /// Hands the buffer to a blocking write (after the previous one finished), and goes on
    /// with the spare buffer.
    pub(super) async fn write_out(&mut self) -> Result<(), FaucetError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.wait_written().await?;
        self.start_early_sync();
        let spare = std::mem::take(&mut self.spare);
        let buf = std::mem::replace(&mut self.buf, spare);
        self.unsynced += buf.len();
        self.dirty = true;
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
                let mut slot = error.lock().unwrap_or_else(PoisonError::into_inner);
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
            .unwrap_or_else(PoisonError::into_inner)
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
    pub(super) async fn wait_written(&mut self) -> Result<(), FaucetError> {
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

    /// Whether the output holds a line (a torn last line, which the first write removes,
    /// does not count; nothing is changed); `None` for standard output.
    pub(super) fn holds_data(&self) -> Result<Option<bool>, FaucetError> {
        if self.to_stdout {
            return Ok(None);
        }
        let Some(file) = &self.file else {
            return Ok(Some(!self.buf.is_empty()));
        };
        let len = match &self.tail {
            Some(tail) if !tail.parses => tail.keep,
            _ => file
                .metadata()
                .map(|m| m.len())
                .map_err(|e| write_error(&self.path, "cannot inspect", e))?,
        };
        Ok(Some(len > 0 || !self.buf.is_empty()))
    }

    /// Writes out everything buffered and waits for every write and background sync: the
    /// first half of [`Output::flush`].
    pub(super) async fn drain(&mut self) -> Result<(), FaucetError> {
        self.check_usable()?;
        self.write_out().await?;
        self.wait_written().await?;
        self.wait_early_sync().await?;
        self.unsynced = 0;
        Ok(())
    }

    /// After [`Output::drain`]: starts the fsync of the file (and of the directories whose
    /// entries it created), or `None` when there is nothing to make durable (nothing
    /// written since the last sync, standard output, no file).
    pub(super) fn start_sync(&mut self) -> Option<SyncTask> {
        if self.to_stdout || (!self.dirty && self.dirs_to_sync.is_empty()) {
            return None;
        }
        let file = self.file.clone()?;
        let dirs = std::mem::take(&mut self.dirs_to_sync);
        let path = self.path.clone();
        Some(tokio::task::spawn_blocking(move || {
            let synced = sync(&file, &path, &dirs);
            (dirs, synced)
        }))
    }

    /// Takes the outcome of the sync [`Output::start_sync`] started.
    pub(super) async fn finish_sync(&mut self, task: SyncTask) -> Result<(), FaucetError> {
        let (dirs, synced) = task.await.map_err(|e| {
            self.failed = true;
            FaucetError::write(CONNECTOR, "the file sync task failed", Some(Box::new(e)))
        })?;
        match synced {
            Ok(()) => {
                self.dirty = false;
                Ok(())
            }
            Err(e) => {
                // Not durable yet: the directories are synced again at the next flush.
                self.dirs_to_sync = dirs;
                Err(e)
            }
        }
    }

    /// Makes everything written durable: [`Output::drain`], then the fsync.
    pub(super) async fn flush(&mut self) -> Result<(), FaucetError> {
        self.drain().await?;
        match self.start_sync() {
            Some(task) => self.finish_sync(task).await,
            None => Ok(()),
        }
    }
}
