//! [`FileStateStore`]: one JSON file per key in a directory, written atomically and durably.
//!
//! `put` writes a uniquely named temporary file in the same directory, fsyncs it, renames it
//! over `<dir>/<key>.json` and fsyncs the directory, so after a crash at any instant the file
//! is either the old bookmark or the new one — never empty, never half written — and two
//! concurrent writers cannot tear it. A file that is empty or not JSON is reported as an
//! error naming the file, never as "no bookmark" (a torn state file must not restart a run
//! from the beginning).
//!
//! Why the directory is fsynced on every `put`, not only when the file is first created:
//! POSIX `rename` promises that the name switch is atomic (readers see the old file or the
//! new one), not that it is durable, and `fsync` of a file covers its data, not the directory
//! entry naming it (Linux `fsync(2)`: "an explicit fsync() on a file descriptor for the
//! directory is also needed"). On ext4 a rename over an existing file is a journaled metadata
//! change that reaches the disk with the next journal commit — the `commit=` interval (5 s by
//! default) or an fsync that forces one; `auto_da_alloc` only makes the replacing file's data
//! go out with that commit (no zero-length file), it does not make the rename durable when it
//! returns. Without the directory fsync a crash seconds after `put` returned could bring back
//! the previous bookmark after the source was told the new one is durable (a postgres-cdc slot
//! then has released the WAL in between). Measured on ext4 (virtio disk): the temp-file fsync,
//! rename and directory fsync take about 0.5 ms together per bookmark while the journal is
//! idle, 5–15 ms when they queue behind another file's commit; per page of a run they are a
//! small part of the sink's own `fdatasync` of the page.
//!
//! Leases are OS file locks: acquiring the lease on `key` opens `<dir>/<key>.lock` and takes
//! an exclusive, non-blocking `flock` on it (std's `File::try_lock`), held by the open file
//! until the run releases it or the process exits — a crashed run's lock is freed by the
//! kernel at once. The holder (`{"fence":N,"holder":{"id","host","pid","since"}}`) is written
//! into the lock file, so a second run is told who holds the key. Because the kernel never
//! expires a lock while its process lives, the lease cannot be lost by stalling: renewal
//! only confirms that the lock file is still the one locked (not deleted or replaced), and
//! `put_fenced` is `put` while the lock is held. Lock files stay in the directory after
//! release (deleting them would let two runs lock two different files of one name). The
//! lock only excludes runs that share the directory through one kernel: it is meant for a
//! local disk, not a network file system shared by several hosts.

use std::collections::HashMap;
use std::fs;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::lease::{Lease, LeaseError, LeaseHolder, LeaseOutcome, LeaseRequest};
use super::{StateStore, validate_state_key};
use crate::error::FaucetError;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A state store keeping one file per key under a directory, with leases as OS file locks
/// on `<dir>/<key>.lock` (see the module documentation). Clones share the held locks.
#[derive(Debug, Clone)]
pub struct FileStateStore {
    dir: PathBuf,
    locks: Arc<Mutex<HashMap<String, HeldLock>>>,
}

impl FileStateStore {
    /// The longest key this store holds, in bytes: a file name is at most 255 bytes, and the
    /// temporary file of an atomic write, `.{key}.json.{pid}.{n}.tmp`, adds up to 42.
    pub const MAX_KEY_LEN: usize = 200;

    /// Checks `key` for this store: [`validate_state_key`], and at most [`Self::MAX_KEY_LEN`]
    /// bytes.
    ///
    /// # Errors
    /// [`FaucetError::Config`] on field `state key`.
    pub fn validate_key(key: &str) -> Result<(), FaucetError> {
        validate_state_key(key)?;
        if key.len() > Self::MAX_KEY_LEN {
            return Err(FaucetError::config(
                "state key",
                format!(
                    "{} is {} bytes long; the file state store holds keys of at most {} bytes \
                     (each is a file name)",
                    super::key::shown_key(key),
                    key.len(),
                    Self::MAX_KEY_LEN
                ),
            ));
        }
        Ok(())
    }

    /// A store under `dir`; the directory is created on the first `put` or lease.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            locks: Arc::default(),
        }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds `key`: `<dir>/<key>.json`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] for an invalid key.
    pub fn path_of(&self, key: &str) -> Result<PathBuf, FaucetError> {
        Self::validate_key(key)?;
        Ok(self.dir.join(format!("{key}.json")))
    }

    /// The lock file of `key`'s lease: `<dir>/<key>.lock`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] for an invalid key.
    pub fn lock_path_of(&self, key: &str) -> Result<PathBuf, FaucetError> {
        Self::validate_key(key)?;
        Ok(self.dir.join(format!("{key}.lock")))
    }

    fn held_locks(&self) -> MutexGuard<'_, HashMap<String, HeldLock>> {
        // A poisoned map is still consistent: every critical section is one insert/remove.
        self.locks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Ok` while `lease` is this store's and its lock file is still the file locked.
    fn holds(&self, lease: &Lease) -> Result<(), FaucetError> {
        let locks = self.held_locks();
        let Some(held) = locks
            .get(&lease.key)
            .filter(|h| h.holder.id == lease.holder.id && h.fence == lease.fence)
        else {
            return Err(lost(
                lease,
                "this run does not hold the lock (it was released)",
            ));
        };
        match same_file(&held.file, &held.path) {
            Ok(true) => Ok(()),
            Ok(false) => Err(lost(
                lease,
                &format!(
                    "lock file {} was deleted or replaced while held, so another run may hold \
                     a lock on the new file",
                    held.path.display()
                ),
            )),
            Err(e) => Err(io_err(&held.path, "cannot inspect lock file", e)),
        }
    }
}

/// A lease this store holds: the open, locked lock file and who holds it.
#[derive(Debug)]
struct HeldLock {
    file: fs::File,
    path: PathBuf,
    holder: LeaseHolder,
    fence: u64,
}

/// The content of a lock file: the last fence handed out and the current holder (`null`
/// once released).
#[derive(Debug, Serialize, Deserialize)]
struct LockContent {
    fence: u64,
    holder: Option<LeaseHolder>,
}

fn lost(lease: &Lease, reason: &str) -> FaucetError {
    LeaseError::Lost {
        key: lease.key.clone(),
        reason: reason.to_owned(),
    }
    .into()
}

/// Whether the open `file` is the file at `path` now (same device and inode).
#[cfg(unix)]
fn same_file(file: &fs::File, path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt as _;
    let open = file.metadata()?;
    match fs::metadata(path) {
        Ok(now) => Ok(open.dev() == now.dev() && open.ino() == now.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Without inode numbers, only the file's existence can be checked.
#[cfg(not(unix))]
fn same_file(_file: &fs::File, path: &Path) -> std::io::Result<bool> {
    Ok(path.exists())
}

fn read_lock_content(mut file: &fs::File) -> Option<LockContent> {
    let mut text = String::new();
    file.seek(std::io::SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_lock_content(
    mut file: &fs::File,
    path: &Path,
    content: &LockContent,
) -> Result<(), FaucetError> {
    let bytes = serde_json::to_vec(content)
        .map_err(|e| FaucetError::state_io("file", "cannot encode the lease holder", e))?;
    (|| {
        file.seek(std::io::SeekFrom::Start(0))?;
        file.write_all(&bytes)?;
        file.set_len(bytes.len() as u64)?;
        file.sync_data()
    })()
    .map_err(|e| io_err(path, "cannot write lock file", e))
}

/// Who holds the lock on `path`, read from the file. The holder writes itself in right after
/// it locks, so an empty or half-written file is read again for up to ~100 ms.
fn read_holder(path: &Path) -> LeaseHolder {
    for _ in 0..20 {
        let content = fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<LockContent>(&b).ok());
        if let Some(holder) = content.and_then(|c| c.holder) {
            return holder;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    LeaseHolder {
        id: String::new(),
        host: format!("unknown (lock file {} names no holder)", path.display()),
        pid: 0,
        since: "unknown".to_owned(),
        process: None,
    }
}

fn try_lock(
    dir: &Path,
    path: &Path,
    key: &str,
    holder: &LeaseHolder,
    locks: &mut HashMap<String, HeldLock>,
) -> Result<LeaseOutcome, FaucetError> {
    fs::create_dir_all(dir).map_err(|e| io_err(dir, "cannot create state directory", e))?;
    for _ in 0..3 {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_err(path, "cannot open lock file", e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Ok(LeaseOutcome::HeldBy(read_holder(path)));
            }
            Err(fs::TryLockError::Error(e)) => return Err(io_err(path, "cannot lock", e)),
        }
        // Locked; but if the file was deleted and re-created in between, the lock is on a
        // file nobody else will open: start over with the file now at `path`.
        if !same_file(&file, path).map_err(|e| io_err(path, "cannot inspect lock file", e))? {
            continue;
        }
        let fence = read_lock_content(&file).map_or(0, |c| c.fence) + 1;
        write_lock_content(
            &file,
            path,
            &LockContent {
                fence,
                holder: Some(holder.clone()),
            },
        )?;
        let lease = Lease {
            key: key.to_owned(),
            holder: holder.clone(),
            fence,
        };
        locks.insert(
            key.to_owned(),
            HeldLock {
                file,
                path: path.to_owned(),
                holder: holder.clone(),
                fence,
            },
        );
        return Ok(LeaseOutcome::Acquired(lease));
    }
    Err(FaucetError::state(
        "file",
        format!(
            "lock file {} keeps being replaced while it is locked; is something deleting it?",
            path.display()
        ),
    ))
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> FaucetError {
    FaucetError::state_io("file", format!("{what} {}", path.display()), e)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FaucetError> + Send + 'static,
) -> Result<T, FaucetError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| FaucetError::state_io("file", "state I/O task failed", e))?
}

fn read(path: &Path) -> Result<Option<Value>, FaucetError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, "cannot read state file", e)),
    };
    if bytes.is_empty() {
        return Err(FaucetError::state(
            "file",
            format!(
                "state file {} is empty: it is unreadable, not \"no bookmark\"; restore it, or \
                 delete it to start from the beginning on purpose",
                path.display()
            ),
        ));
    }
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        FaucetError::state_io(
            "file",
            format!(
                "state file {} is not valid JSON; restore it, or delete it to start from the \
                 beginning on purpose",
                path.display()
            ),
            e,
        )
    })
}

fn write_atomic(dir: &Path, path: &Path, value: &Value) -> Result<(), FaucetError> {
    fs::create_dir_all(dir).map_err(|e| io_err(dir, "cannot create state directory", e))?;
    let bytes = serde_json::to_vec(value)
        .map_err(|e| FaucetError::state_io("file", "cannot encode bookmark", e))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp).map_err(|e| io_err(&tmp, "cannot create", e))?;
        f.write_all(&bytes)
            .map_err(|e| io_err(&tmp, "cannot write", e))?;
        f.sync_all().map_err(|e| io_err(&tmp, "cannot fsync", e))?;
        drop(f);
        crate::fault::point(crate::fault::STATE_MID_PUT);
        fs::rename(&tmp, path).map_err(|e| io_err(path, "cannot rename into", e))?;
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(dir, "cannot fsync directory", e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[async_trait]
impl StateStore for FileStateStore {
    fn name(&self) -> &str {
        "file"
    }

    /// An OS lock is held while the process lives, stopped or not: it cannot expire.
    fn leases_expire(&self) -> bool {
        false
    }

    async fn get(&self, key: &str) -> Result<Option<Value>, FaucetError> {
        let path = self.path_of(key)?;
        blocking(move || read(&path)).await
    }

    async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError> {
        let path = self.path_of(key)?;
        let dir = self.dir.clone();
        let value = value.clone();
        blocking(move || write_atomic(&dir, &path, &value)).await
    }

    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        let path = self.path_of(key)?;
        let dir = self.dir.clone();
        blocking(move || match fs::remove_file(&path) {
            Ok(()) => fs::File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_err(&dir, "cannot fsync directory", e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&path, "cannot delete", e)),
        })
        .await
    }

    /// Takes an exclusive `flock` on `<dir>/<key>.lock` without waiting. `ttl` is not used:
    /// the OS lock lasts until release or process exit. A holder that already holds the key
    /// through this store re-acquires it with the next fence.
    async fn acquire_lease(&self, request: &LeaseRequest) -> Result<LeaseOutcome, FaucetError> {
        let path = self.lock_path_of(&request.key)?;
        let store = self.clone();
        let (key, holder) = (request.key.clone(), request.holder.clone());
        blocking(move || {
            let mut locks = store.held_locks();
            if let Some(held) = locks.get_mut(&key) {
                if held.holder.id != holder.id {
                    return Ok(LeaseOutcome::HeldBy(held.holder.clone()));
                }
                held.fence += 1;
                held.holder = holder.clone();
                write_lock_content(
                    &held.file,
                    &held.path,
                    &LockContent {
                        fence: held.fence,
                        holder: Some(holder.clone()),
                    },
                )?;
                return Ok(LeaseOutcome::Acquired(Lease {
                    key,
                    holder,
                    fence: held.fence,
                }));
            }
            try_lock(&store.dir, &path, &key, &holder, &mut locks)
        })
        .await
    }

    /// Nothing to extend (an OS lock does not expire); confirms the lock is still held on
    /// the file at `<dir>/<key>.lock`.
    async fn renew_lease(&self, lease: &Lease, _ttl: Duration) -> Result<(), FaucetError> {
        self.holds(lease)
    }

    /// Marks the lock file as free (keeping the fence) and unlocks it; releasing a lease
    /// this store does not hold is a no-op.
    async fn release_lease(&self, lease: &Lease) -> Result<(), FaucetError> {
        let store = self.clone();
        let lease = lease.clone();
        blocking(move || {
            let held = {
                let mut locks = store.held_locks();
                match locks.get(&lease.key) {
                    Some(h) if h.holder.id == lease.holder.id && h.fence == lease.fence => {
                        locks.remove(&lease.key)
                    }
                    _ => None,
                }
            };
            if let Some(held) = held {
                let freed = LockContent {
                    fence: held.fence,
                    holder: None,
                };
                let written = write_lock_content(&held.file, &held.path, &freed);
                // Closing the file unlocks it even if the explicit unlock fails.
                let _ = held.file.unlock();
                written?;
            }
            Ok(())
        })
        .await
    }

    /// `put`, after confirming the lock is still held (see [`StateStore::renew_lease`]).
    async fn put_fenced(&self, key: &str, value: &Value, lease: &Lease) -> Result<(), FaucetError> {
        validate_state_key(key)?;
        self.holds(lease)?;
        self.put(key, value).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn lifecycle_and_torn_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStateStore::new(dir.path().join("state"));
        assert_eq!(store.get("p::a").await.expect("get"), None);
        store
            .put("p::a", &json!({"lsn": "0/16B3748"}))
            .await
            .expect("put");
        assert_eq!(
            store.get("p::a").await.expect("get"),
            Some(json!({"lsn": "0/16B3748"}))
        );
        store.delete("p::a").await.expect("delete");
        store.delete("p::a").await.expect("delete missing");
        assert_eq!(store.get("p::a").await.expect("get"), None);

        let path = store.path_of("p::b").expect("path");
        fs::write(&path, b"").expect("write");
        let err = store.get("p::b").await.expect_err("empty file").to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        fs::write(&path, br#"{"lsn": "0/1"#).expect("write");
        let err = store.get("p::b").await.expect_err("torn file").to_string();
        assert!(err.contains("not valid JSON"), "{err}");
        store.check().await.expect("check");
        let left: Vec<_> = fs::read_dir(store.dir()).expect("dir").collect();
        assert_eq!(left.len(), 1, "check must leave nothing but p::b behind");
    }

    #[tokio::test]
    async fn concurrent_writers_never_tear_a_bookmark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = std::sync::Arc::new(FileStateStore::new(dir.path()));
        let mut tasks = Vec::new();
        for i in 0..16 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .put("k", &json!({ "writer": i, "pad": "x".repeat(4096) }))
                    .await
            }));
        }
        for t in tasks {
            t.await.expect("join").expect("put");
        }
        let v = store.get("k").await.expect("get").expect("some");
        assert!(v["writer"].as_u64().is_some_and(|w| w < 16));
    }

    fn other_holder(id: &str) -> LeaseHolder {
        LeaseHolder {
            id: id.to_owned(),
            host: "elsewhere".to_owned(),
            pid: 4711,
            since: "2026-11-30T06:00:00Z".to_owned(),
            process: None,
        }
    }

    async fn acquired(store: &FileStateStore, key: &str, holder: &LeaseHolder) -> Lease {
        match store
            .acquire_lease(&LeaseRequest::new(key, holder, Duration::from_millis(1)))
            .await
            .expect("acquire")
        {
            LeaseOutcome::Acquired(lease) => lease,
            other => panic!("expected the lease, got {other:?}"),
        }
    }

    async fn held_by(store: &FileStateStore, key: &str, holder: &LeaseHolder) -> LeaseHolder {
        match store
            .acquire_lease(&LeaseRequest::new(key, holder, Duration::from_secs(30)))
            .await
            .expect("acquire")
        {
            LeaseOutcome::HeldBy(other) => other,
            other => panic!("expected HeldBy, got {other:?}"),
        }
    }

    fn is_lost(err: FaucetError) -> bool {
        matches!(err, FaucetError::Lease(LeaseError::Lost { .. }))
    }

    #[tokio::test]
    async fn lease_is_an_os_lock_across_separate_file_handles() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Two stores on one directory open the lock file separately, like two processes
        // (flock belongs to the open file, so they exclude each other).
        let a = FileStateStore::new(dir.path().join("state"));
        let b = FileStateStore::new(dir.path().join("state"));
        let (ha, hb) = (LeaseHolder::this_process(), other_holder("b"));

        let la = acquired(&a, "p::a", &ha).await;
        assert_eq!(la.fence, 1);
        assert_eq!(
            held_by(&b, "p::a", &hb).await,
            ha,
            "second store names the holder"
        );
        assert_eq!(
            held_by(&a, "p::a", &hb).await,
            ha,
            "same store, other holder"
        );
        let on_disk = fs::read_to_string(a.lock_path_of("p::a").expect("path")).expect("read");
        assert!(
            on_disk.contains(&ha.id) && on_disk.contains(&ha.host),
            "{on_disk}"
        );
        // Another key is independent.
        let other_key = acquired(&b, "p::b", &hb).await;

        // The OS lock never expires: renewing long after the "ttl" still holds.
        tokio::time::sleep(Duration::from_millis(20)).await;
        a.renew_lease(&la, Duration::from_millis(1))
            .await
            .expect("renew");
        a.put_fenced("p::a", &json!({"lsn": "0/1"}), &la)
            .await
            .expect("fenced put");

        a.release_lease(&la).await.expect("release");
        a.release_lease(&la).await.expect("release twice is fine");
        let lb = acquired(&b, "p::a", &hb).await;
        assert_eq!(lb.fence, 2, "the fence grows across holders");

        let stale = a.put_fenced("p::a", &json!({"lsn": "0/0"}), &la).await;
        assert!(is_lost(stale.expect_err("stale put refused")));
        let renew = a.renew_lease(&la, Duration::from_secs(1)).await;
        assert!(is_lost(renew.expect_err("stale renew refused")));
        assert_eq!(
            a.get("p::a").await.expect("get"),
            Some(json!({"lsn": "0/1"}))
        );
        b.put_fenced("p::a", &json!({"lsn": "0/2"}), &lb)
            .await
            .expect("new holder writes");

        // Dropping the store closes the file, which frees the lock (as a crash would).
        drop(b);
        let lc = acquired(&a, "p::a", &other_holder("c")).await;
        assert_eq!(lc.fence, 3);
        let ld = acquired(&a, "p::b", &other_holder("d")).await;
        assert_eq!(ld.fence, other_key.fence + 1);
    }

    #[tokio::test]
    async fn a_deleted_lock_file_is_a_lost_lease() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = FileStateStore::new(dir.path());
        let la = acquired(&a, "k", &LeaseHolder::this_process()).await;
        fs::remove_file(a.lock_path_of("k").expect("path")).expect("rm");
        let err = a
            .renew_lease(&la, Duration::from_secs(1))
            .await
            .expect_err("lost");
        assert!(err.to_string().contains("deleted or replaced"), "{err}");
        let err = a.put_fenced("k", &json!(1), &la).await.expect_err("lost");
        assert!(is_lost(err));
        assert_eq!(a.get("k").await.expect("get"), None, "nothing written");
    }

    #[tokio::test]
    async fn lease_keys_are_validated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = FileStateStore::new(dir.path());
        let err = a
            .acquire_lease(&LeaseRequest::new(
                "../x",
                &LeaseHolder::this_process(),
                Duration::from_secs(1),
            ))
            .await
            .expect_err("bad key");
        assert!(matches!(err, FaucetError::Config { .. }), "{err:?}");
        assert_eq!(fs::read_dir(dir.path()).expect("dir").count(), 0);
    }

    const CHILD_ENV: &str = "FAUCET_FILE_LEASE_CHILD_DIR";

    /// Helper process for `a_killed_process_frees_its_lock_and_is_named_while_alive`, which
    /// starts it with `--ignored`; not a test of its own.
    #[tokio::test]
    #[ignore = "a helper process, started by a_killed_process_frees_its_lock_and_is_named_while_alive"]
    async fn lease_child_process_helper() {
        let Ok(dir) = std::env::var(CHILD_ENV) else {
            return;
        };
        let store = FileStateStore::new(dir);
        let _lease = acquired(&store, "p::a", &LeaseHolder::this_process()).await;
        println!("FAUCET_CHILD_LOCKED");
        // Hold the lock until killed (or, at the latest, for a minute).
        tokio::time::sleep(Duration::from_secs(60)).await;
    }

    #[tokio::test]
    async fn a_killed_process_frees_its_lock_and_is_named_while_alive() {
        use std::io::BufRead as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(["state::file::tests::lease_child_process_helper", "--exact"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let mut locked = false;
        for line in std::io::BufReader::new(stdout).lines() {
            if line.expect("line").contains("FAUCET_CHILD_LOCKED") {
                locked = true;
                break;
            }
        }
        assert!(locked, "child never took the lock");

        let store = FileStateStore::new(dir.path());
        let holder = held_by(&store, "p::a", &LeaseHolder::this_process()).await;
        assert_eq!(holder.pid, child.id(), "the other process is named by pid");

        child.kill().expect("kill child");
        child.wait().expect("reap child");
        let lease = acquired(&store, "p::a", &LeaseHolder::this_process()).await;
        assert_eq!(lease.fence, 2);
    }
}
