//! The file connectors: the `csv` and `jsonl` sources and the `jsonl` sink (feature `files`).
//!
//! * [`CsvSource`] reads an RFC 4180 CSV file (quoted delimiters, doubled quotes, line breaks
//!   inside quotes, LF / CRLF / CR record ends, a UTF-8 BOM at byte 0) into pages of typed
//!   records, strings unless [`CsvSourceConfig::columns`] declares a type;
//! * [`JsonlSource`] reads one JSON object per line; a page holds consecutive objects with
//!   the same keys, so a key a line lacks stays absent;
//! * [`JsonlSink`] appends one JSON object per line (values in the JSON form of docs/values.md), repairs
//!   a torn last line left by a crash at its first write (never before the run loop decided
//!   to write), and is durable on `flush`; `path: "-"` is standard output.
//!
//! Both sources replay deterministically (the file only grows while read) and put a
//! [`FileBookmark`] after every page: `{"file", "byte_offset", "line", "records",
//! "fingerprint"}`, enough to resume exactly after the page's last record and to tell that
//! the file is still the one it was made on. Every page also carries its
//! [`faucet_core::Extent`]: the bookmark's byte offset of the file's size (both sources read
//! uncompressed files only). A bookmark that does not fit the file (another
//! content before the offset, beyond its end, or not at a record boundary) is an error naming
//! the file. A last line without a line break waits for one unless
//! [`UnterminatedLastLine::Read`]. Only regular files are read. Malformed input (an unclosed
//! quote, a field or line over its limit) is a [`faucet_core::FaucetError::Data`] naming
//! `file:line`, never skipped.
//!
//! Every connector has the crate's shape: `XConfig` (serde, unknown fields rejected) with a
//! pure `validate()`, `X::new(config)` (validates, no I/O), the I/O in `open()` / `check()`.
//! Relative paths are relative to the process's current directory. File I/O never blocks the
//! async executor: a source reads on its own thread (one page ahead, memory bounded, see
//! `prefetch.rs`), the sink writes and fsyncs on tokio's blocking pool.
//!
//! ```no_run
//! # async fn run() -> Result<(), faucet_core::FaucetError> {
//! use std::sync::Arc;
//! use faucet_connectors::files::{CsvSource, CsvSourceConfig, JsonlSink, JsonlSinkConfig};
//! use faucet_core::{Pipeline, state::FileStateStore};
//!
//! let mut config = CsvSourceConfig::new("weather.csv");
//! config.null_values = vec!["NA".into()];
//! let source = CsvSource::new(config)?;
//! let sink = JsonlSink::new(JsonlSinkConfig::new("out/weather.jsonl"))?;
//! let summary = Pipeline::new(&source, &sink)
//!     .with_state_store(Arc::new(FileStateStore::new("state")))
//!     .run()
//!     .await?;
//! println!("{} records, {}", summary.records_out, summary.guarantee);
//! # Ok(())
//! # }
//! ```

mod blocking;
mod bookmark;
mod csv;
mod jsonl;
mod last_line;
mod prefetch;
mod regular;

pub use self::bookmark::{FileBookmark, Fingerprint};
pub use self::csv::{ColumnType, Columns, CsvSource, CsvSourceConfig};
pub use self::jsonl::{JsonlSink, JsonlSinkConfig, JsonlSource, JsonlSourceConfig};
pub use self::last_line::UnterminatedLastLine;
