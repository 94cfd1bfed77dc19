//! [`FileStateStore`]: one JSON file per key in a directory, written atomically and durably.
//!
//! `put` writes a uniquely named temporary file in the same directory, fsyncs it, renames it
//! over `<dir>/<key>.json` and fsyncs the directory, so after a crash at any instant the file
//! is either the old bookmark or the new one — never empty, never half written — and two
//! concurrent writers cannot tear it. A file that is empty or not JSON is reported as an
//! error naming the file, never as "no bookmark" (`shared/cases/13-state-missing-or-torn.md`).

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::Value;

use super::{StateStore, validate_state_key};
use crate::error::FaucetError;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A state store keeping one file per key under a directory.
#[derive(Debug, Clone)]
pub struct FileStateStore {
    dir: PathBuf,
}

impl FileStateStore {
    /// A store under `dir`; the directory is created on the first `put`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
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
        validate_state_key(key)?;
        Ok(self.dir.join(format!("{key}.json")))
    }
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> FaucetError {
    FaucetError::state_io("file", format!("{what} {}: {e}", path.display()), e)
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
                "state file {} is not valid JSON ({e}); restore it, or delete it to start from \
                 the beginning on purpose",
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
}
