//! The read itself, in three stages that overlap with the writing of the previous page:
//! 1. a task owns the session and streams `COPY (SELECT ...) TO STDOUT` in text format,
//!    handing over raw rows in chunks of whole lines (at most [`CHUNK_BYTES`] or
//!    `batch_size` rows each);
//! 2. one decoder thread turns them into pages with the [`Assembler`];
//! 3. [`QueryStream::next_page`] hands the pages over.
//!
//! Memory is bounded by the page size: at most two decoded pages (the one the run loop is
//! writing and the one being decoded: the decoder waits until a page is taken before it goes
//! on), and at most `batch_size` rows of raw COPY text (a semaphore of `batch_size` permits,
//! one per row, released when a chunk is decoded). When the prefetch is full the task stops
//! reading the socket and the server waits (TCP back-pressure). Decoding on one thread keeps
//! the page allocations in one malloc arena (with tokio worker threads they spread over
//! several and the process holds more memory than it uses).

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use sqlx::postgres::PgConnection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use faucet_core::{FaucetError, Page, PageStream};

use super::assemble::Assembler;
use super::plan::{Plan, Start};
use crate::postgres::config::CONNECTOR;

/// Raw rows are handed over in chunks of about this many bytes (whole lines).
const CHUNK_BYTES: usize = 128 * 1024;

/// What the COPY task hands the decoder.
enum Raw {
    /// Whole COPY text lines, each ending in `\n`, and the prefetch permits of their rows.
    Rows(Vec<u8>, OwnedSemaphorePermit),
    /// The COPY finished (or the read was cancelled); no more rows.
    End,
    Failed(FaucetError),
}

/// What the decoder hands the stream.
enum Decoded {
    Page(Page),
    /// The read is over; no more pages.
    End,
    Failed(FaucetError),
}

/// The [`PageStream`] of a query read (boxed: small wherever it is held).
pub(crate) struct QueryStream(Box<State>);

struct State {
    pages: mpsc::Receiver<Decoded>,
    /// Tells the decoder that a page was taken (the page before it is gone).
    taken: std::sync::mpsc::Sender<()>,
    copy_task: JoinHandle<()>,
    ended: bool,
}

impl Drop for State {
    fn drop(&mut self) {
        // Dropping the COPY task drops its session: the server ends the COPY. The decoder
        // thread ends when its channels close.
        self.copy_task.abort();
    }
}

#[async_trait]
impl PageStream for QueryStream {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        let state = &mut *self.0;
        if state.ended {
            return Ok(None);
        }
        match state.pages.recv().await {
            Some(Decoded::Page(page)) => {
                // The decoder may start on the page after this one.
                let _ = state.taken.send(());
                Ok(Some(page))
            }
            Some(Decoded::End) => {
                state.ended = true;
                Ok(None)
            }
            Some(Decoded::Failed(e)) => {
                state.ended = true;
                Err(e)
            }
            None => {
                state.ended = true;
                Err(FaucetError::read(
                    CONNECTOR,
                    "the decoder stopped without finishing the read",
                    None,
                ))
            }
        }
    }
}

/// Starts the read of `plan` from `start` on `conn`.
pub(crate) fn spawn(
    conn: PgConnection,
    plan: Arc<Plan>,
    start: Start,
    batch_size: usize,
    cancel: CancellationToken,
) -> QueryStream {
    let batch_size = batch_size.max(1);
    // Every chunk holds at most `batch_size` rows, so the channel never needs more slots
    // than the semaphore lets through.
    let (raw_tx, raw_rx) = mpsc::channel(batch_size.min(1024));
    let (pages_tx, pages_rx) = mpsc::channel(1);
    let (taken_tx, taken_rx) = std::sync::mpsc::channel();
    // A semaphore holds at most `MAX_PERMITS` (2^61 - 1) permits and panics above: a
    // `batch_size` beyond it (the config allows any positive number) reads ahead that many.
    let prefetch = Arc::new(Semaphore::new(batch_size.min(Semaphore::MAX_PERMITS)));
    let sql = plan.read_sql(&start);
    let label = plan.label.clone();
    let assembler = Assembler::new(plan, batch_size, start);
    let copy_cancel = cancel.clone();
    let copy_task = tokio::spawn(async move {
        let outcome = pump(
            conn,
            &sql,
            &label,
            &copy_cancel,
            &raw_tx,
            prefetch,
            batch_size,
        )
        .await;
        let last = match outcome {
            Ok(()) => Raw::End,
            Err(e) => Raw::Failed(e),
        };
        // The decoder may be gone (the stream was dropped): nothing to tell.
        let _ = raw_tx.send(last).await;
    });
    // One thread decodes for the whole read: its allocations come from one malloc arena,
    // and decoding overlaps with the writing of the previous page.
    tokio::task::spawn_blocking(move || {
        decode(assembler, raw_rx, &pages_tx, &taken_rx, &cancel);
    });
    QueryStream(Box::new(State {
        pages: pages_rx,
        taken: taken_tx,
        copy_task,
        ended: false,
    }))
}

/// The decoder thread: raw lines → pages. A page is handed over, then the decoder waits until
/// the stream has taken it before decoding further, so at most two decoded pages exist (the
/// one being written and the one being decoded).
fn decode(
    mut assembler: Assembler,
    mut raw: mpsc::Receiver<Raw>,
    pages: &mpsc::Sender<Decoded>,
    taken: &std::sync::mpsc::Receiver<()>,
    cancel: &CancellationToken,
) {
    let deliver = |page: Page| -> bool {
        pages.blocking_send(Decoded::Page(page)).is_ok() && taken.recv().is_ok()
    };
    loop {
        match raw.blocking_recv() {
            Some(Raw::Rows(chunk, permit)) => {
                for line in chunk.split_inclusive(|&b| b == b'\n') {
                    let line = line.strip_suffix(b"\n").unwrap_or(line);
                    match assembler.push_line(line) {
                        Ok(Some(page)) => {
                            if !deliver(page) {
                                return;
                            }
                        }
                        Ok(None) => {}
                        Err(e) => {
                            let _ = pages.blocking_send(Decoded::Failed(e));
                            return;
                        }
                    }
                }
                drop(permit);
            }
            Some(Raw::End) => {
                // Cancelled: the rows in hand, with a mid-read bookmark; else the last page.
                let last = if cancel.is_cancelled() {
                    assembler.finish_cancelled()
                } else {
                    assembler.finish()
                };
                if let Some(page) = last
                    && !deliver(page)
                {
                    return;
                }
                let _ = pages.blocking_send(Decoded::End);
                return;
            }
            Some(Raw::Failed(e)) => {
                let _ = pages.blocking_send(Decoded::Failed(e));
                return;
            }
            None => {
                let _ = pages.blocking_send(Decoded::Failed(FaucetError::read(
                    CONNECTOR,
                    "the COPY task stopped without finishing the read",
                    None,
                )));
                return;
            }
        }
    }
}

/// Streams the COPY into the channel in chunks of whole lines, holding a prefetch permit per
/// row.
async fn pump(
    mut conn: PgConnection,
    sql: &str,
    label: &str,
    cancel: &CancellationToken,
    tx: &mpsc::Sender<Raw>,
    prefetch: Arc<Semaphore>,
    batch_size: usize,
) -> Result<(), FaucetError> {
    tracing::debug!(source = CONNECTOR, target = %label, %sql, "reading");
    let mut copy = conn.copy_out_raw(sql).await.map_err(|e| {
        FaucetError::read(CONNECTOR, format!("cannot read {label}"), Some(Box::new(e)))
    })?;
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK_BYTES * 2);
    let mut rows_in_buf = 0usize;
    let mut bytes_read: u64 = 0;
    // The server sends a message per row. A row already received is taken without looking
    // at `cancel` (a look takes its lock, a fresh waiter two more); the cancellation is
    // awaited while the next row is not there, and `send` looks at it before every chunk it
    // hands over.
    let mut cancelled = std::pin::pin!(cancel.cancelled());
    loop {
        let chunk = tokio::select! {
            biased;
            chunk = copy.next() => chunk,
            () = &mut cancelled => return Ok(()),
        };
        let bytes = match chunk {
            None => break,
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => {
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!("reading {label} failed after {bytes_read} bytes"),
                    Some(Box::new(e)),
                ));
            }
        };
        bytes_read += bytes.len() as u64;
        rows_in_buf += bytes.iter().filter(|&&b| b == b'\n').count();
        buf.extend_from_slice(&bytes);
        if buf.len() >= CHUNK_BYTES || rows_in_buf >= batch_size {
            // Hand over every whole line; keep a partial last line for the next chunk.
            let Some(last_newline) = buf.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            let rest = buf.split_off(last_newline + 1);
            let full = std::mem::replace(&mut buf, rest);
            buf.reserve(CHUNK_BYTES * 2);
            let rows = std::mem::take(&mut rows_in_buf);
            if !send(tx, &prefetch, full, rows, batch_size, cancel).await {
                return Ok(());
            }
        }
    }
    if !buf.is_empty() {
        if buf.last() != Some(&b'\n') {
            return Err(FaucetError::read(
                CONNECTOR,
                format!("the COPY stream of {label} ended inside a row (after {bytes_read} bytes)"),
                None,
            ));
        }
        if !send(tx, &prefetch, buf, rows_in_buf, batch_size, cancel).await {
            return Ok(());
        }
    }
    Ok(())
}

/// Waits for prefetch room for `rows` rows (at most `batch_size`), then sends the chunk.
/// Returns false when the consumer is gone or the read was cancelled.
async fn send(
    tx: &mpsc::Sender<Raw>,
    prefetch: &Arc<Semaphore>,
    chunk: Vec<u8>,
    rows: usize,
    batch_size: usize,
    cancel: &CancellationToken,
) -> bool {
    let wanted = u32::try_from(rows.clamp(1, batch_size)).unwrap_or(u32::MAX);
    let permit = tokio::select! {
        biased;
        () = cancel.cancelled() => return false,
        p = prefetch.clone().acquire_many_owned(wanted) => match p {
            Ok(p) => p,
            Err(_) => return false,
        },
    };
    tx.send(Raw::Rows(chunk, permit)).await.is_ok()
}
