//! Shared helpers of the file connector tests: temp files, reading a source to the end,
//! running a pipeline into a jsonl file, and capturing log lines.

pub(crate) use crate::support::{json_lines, read_pages};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use faucet_connectors::files::{CsvSource, CsvSourceConfig, JsonlSink, JsonlSinkConfig};
use faucet_core::state::FileStateStore;
use faucet_core::{FaucetError, Pipeline, RunStreamOptions, RunSummary, Source};

/// Writes `bytes` to `dir/name` and returns the path.
pub(crate) fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("create test file");
    f.write_all(bytes).expect("write test file");
    path
}

/// A csv config reading `path` as a complete file: a last record without a line break is
/// read (`unterminated_last_line: read`), as the shared cases' files expect.
pub(crate) fn complete_csv(path: impl Into<std::path::PathBuf>) -> CsvSourceConfig {
    let mut config = CsvSourceConfig::new(path);
    config.unterminated_last_line = faucet_connectors::files::UnterminatedLastLine::Read;
    config
}

/// A csv source over `path` with default settings and a `read_buffer`-byte read buffer
/// (`None`: the default).
pub(crate) fn csv_source(config: CsvSourceConfig, read_buffer: Option<usize>) -> CsvSource {
    let source = CsvSource::new(config).expect("valid csv config");
    match read_buffer {
        Some(n) => source.with_read_buffer(n),
        None => source,
    }
}

/// Runs `source` → jsonl file `out` with a file state store under `state_dir`.
pub(crate) async fn run_to_jsonl(
    source: &dyn Source,
    out: &Path,
    state_dir: &Path,
    batch_size: usize,
) -> Result<RunSummary, FaucetError> {
    let sink = JsonlSink::new(JsonlSinkConfig::new(out)).expect("valid jsonl config");
    Pipeline::from_dyn(source, &sink)
        .with_state_store(Arc::new(FileStateStore::new(state_dir)))
        .with_options(RunStreamOptions {
            batch_size,
            state_key: "files-test".into(),
            ..RunStreamOptions::default()
        })
        .run()
        .await
}

/// The data error's location and message; panics on any other outcome.
pub(crate) fn data_error(e: FaucetError) -> (String, String) {
    match e {
        FaucetError::Data {
            location, message, ..
        } => (location, message),
        other => panic!("expected a data error, got: {other}"),
    }
}

/// The message of a [`FaucetError::Bookmark`] (the source cannot resume from the stored
/// bookmark); panics on any other outcome.
pub(crate) fn bookmark_error(e: FaucetError) -> String {
    match e {
        FaucetError::Bookmark { message, .. } => message,
        other => panic!("expected a bookmark error, got: {other}"),
    }
}

static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs (once) a global subscriber that keeps every log line of this test binary, from
/// every thread (the file connectors log from tokio's blocking pool).
pub(crate) fn capture_logs() {
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = Capture(buf.clone());
        let installed = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .try_init();
        assert!(
            installed.is_ok(),
            "another global tracing subscriber is installed in this test binary; the files \
             tests need theirs to see warnings"
        );
        buf
    });
}

/// The captured log lines at WARN or ERROR that mention `needle` (e.g. a test's temp path).
pub(crate) fn warnings_mentioning(needle: &str) -> Vec<String> {
    let Some(buf) = LOGS.get() else {
        panic!("call capture_logs() first");
    };
    let text = String::from_utf8_lossy(&buf.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
    text.lines()
        .filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains(needle))
        .map(str::to_owned)
        .collect()
}

/// Asserts that every page of a whole-file read says how far along it is in bytes: exact,
/// `done` its bookmark's byte offset, growing, `total` the file's `size`, and the last page
/// at `size`.
pub(crate) fn assert_byte_extents(pages: &[faucet_core::Page], size: u64) {
    assert!(!pages.is_empty(), "no pages");
    let mut before = 0;
    for (i, page) in pages.iter().enumerate() {
        let extent = page
            .extent()
            .unwrap_or_else(|| panic!("page {i} has no extent"));
        assert_eq!(extent.unit, faucet_core::ExtentUnit::Bytes, "page {i}");
        assert!(!extent.estimate, "a file's size is exact");
        assert_eq!(extent.total, size, "page {i}: the file's size");
        let offset = page
            .bookmark()
            .and_then(|b| b["byte_offset"].as_u64())
            .expect("a byte offset");
        assert_eq!(
            extent.done, offset,
            "page {i}: done is the bookmark's offset"
        );
        assert!(extent.done > before, "page {i}: done grows");
        before = extent.done;
    }
    let last = pages.last().and_then(|p| p.extent()).expect("extent");
    assert_eq!(last.done, size, "the last page reaches the file's end");
    assert_eq!(last.percent(), 100.0);
}
