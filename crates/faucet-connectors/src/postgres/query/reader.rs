//! The read itself: a background task owns the session and streams `COPY (SELECT ...) TO
//! STDOUT` in text format, handing over the raw rows in chunks of whole lines (at most
//! [`CHUNK_BYTES`] or `batch_size` rows each); [`QueryStream::next_page`] decodes them with
//! the [`Assembler`] into pages.
//!
//! Memory: decoded values exist for one page at a time — the run loop drops a page before it
//! asks for the next one, and the next one is decoded then; the raw prefetch holds at most
//! `batch_size` rows of COPY text (a semaphore of `batch_size` permits, one per row, released
//! when a chunk is decoded), so the server streams the next page while this one is being
//! written. When the prefetch is full the task stops reading the socket and the server waits
//! (TCP back-pressure).

use std::collections::VecDeque;
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

/// What the task sends.
enum Message {
    /// Whole COPY text lines, each ending in `\n`, and the prefetch permits of their rows.
    Rows(Vec<u8>, OwnedSemaphorePermit),
    /// The COPY finished; no more rows.
    End,
    Failed(FaucetError),
}

/// The [`PageStream`] of a query read (boxed: small wherever it is held).
pub(crate) struct QueryStream(Box<State>);

struct State {
    rx: mpsc::Receiver<Message>,
    task: JoinHandle<()>,
    assembler: Assembler,
    /// Pages decoded and not yet handed over (more than one only when a chunk holds more
    /// than a page of rows, i.e. with small pages).
    ready: VecDeque<Page>,
    cancel: CancellationToken,
    ended: bool,
}

impl Drop for State {
    fn drop(&mut self) {
        // Dropping the task drops its session: the server ends the COPY.
        self.task.abort();
    }
}

#[async_trait]
impl PageStream for QueryStream {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        self.0.next_page().await
    }
}

impl State {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        loop {
            if let Some(page) = self.ready.pop_front() {
                return Ok(Some(page));
            }
            if self.ended {
                return Ok(None);
            }
            if self.cancel.is_cancelled() {
                // Hand over the rows in hand, then end.
                self.ended = true;
                self.task.abort();
                return Ok(self.assembler.finish_cancelled());
            }
            let message = tokio::select! {
                biased;
                () = self.cancel.cancelled() => continue,
                m = self.rx.recv() => m,
            };
            match message {
                Some(Message::Rows(chunk, permit)) => {
                    for line in chunk.split_inclusive(|&b| b == b'\n') {
                        let line = line.strip_suffix(b"\n").unwrap_or(line);
                        if let Some(page) = self.assembler.push_line(line)? {
                            self.ready.push_back(page);
                        }
                    }
                    drop(permit);
                }
                Some(Message::End) => {
                    self.ended = true;
                    if let Some(page) = self.assembler.finish() {
                        self.ready.push_back(page);
                    }
                }
                Some(Message::Failed(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                None => {
                    self.ended = true;
                    return Err(FaucetError::read(
                        CONNECTOR,
                        "the reader task stopped without finishing the read",
                        None,
                    ));
                }
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
    let (tx, rx) = mpsc::channel(batch_size.min(1024));
    let prefetch = Arc::new(Semaphore::new(batch_size));
    let sql = plan.copy_sql(&start);
    let label = plan.label.clone();
    let task_cancel = cancel.clone();
    let task = tokio::spawn(async move {
        let outcome = pump(conn, &sql, &label, &task_cancel, &tx, prefetch, batch_size).await;
        let last = match outcome {
            Ok(()) => Message::End,
            Err(e) => Message::Failed(e),
        };
        // The consumer may be gone (it dropped the stream): nothing to tell.
        let _ = tx.send(last).await;
    });
    QueryStream(Box::new(State {
        rx,
        task,
        assembler: Assembler::new(plan, batch_size, start),
        ready: VecDeque::new(),
        cancel,
        ended: false,
    }))
}

/// Streams the COPY into the channel in chunks of whole lines, holding a prefetch permit per
/// row.
async fn pump(
    mut conn: PgConnection,
    sql: &str,
    label: &str,
    cancel: &CancellationToken,
    tx: &mpsc::Sender<Message>,
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
    loop {
        let chunk = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(()),
            chunk = copy.next() => chunk,
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
    tx: &mpsc::Sender<Message>,
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
    tx.send(Message::Rows(chunk, permit)).await.is_ok()
}
