//! The read itself: a background task owns the session, streams `COPY (SELECT ...) TO
//! STDOUT` in text format, decodes every value with [`decode_text`], cuts pages of at most
//! `batch_size` rows and hands them over a channel of one page. Memory is bounded by two
//! pages: the task reserves the channel's slot (the consumer has taken the previous page)
//! before it builds the next one, so one page is being written while the next is built; when
//! the consumer is slower, the task stops reading the socket and the server waits (TCP
//! back-pressure).
//!
//! Bookmarks: a page is only handed over once the row after it has arrived (or the read
//! ended), so its bookmark can say whether the key group of its last row is complete:
//! * a unique ordering key (primary key, or a replication key containing a unique index):
//!   the page's last key tuple;
//! * a key not known unique: the last key tuple whose group is known complete (the next
//!   row has a greater key), so a resumed read never skips the rest of a tie group; it may
//!   deliver that group's rows again (at-least-once, absorbed by an upsert sink);
//! * the last page of a finished read: [`Plan::bookmark_done`].
//!
//! When the read is cancelled, the rows in hand go out as a last page (its bookmark as
//! above, treating the group of the last row as incomplete) and the stream ends.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use sqlx::postgres::PgConnection;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use faucet_core::{Bookmark, FaucetError, Page, PageBuilder, PageStream, Value};

use super::config::ReplicationMethod;
use super::copy_text::{LineSplitter, fields};
use super::plan::{Plan, Start};
use crate::postgres::config::CONNECTOR;
use crate::postgres::types::decode_text;

/// What the task sends.
enum Message {
    Page(Page),
    /// The read finished (or was cancelled) normally; no more pages.
    End,
    Failed(FaucetError),
}

/// The [`PageStream`] of a query read: receives pages from the reader task.
pub(crate) struct QueryStream {
    rx: mpsc::Receiver<Message>,
    task: JoinHandle<()>,
    ended: bool,
}

impl Drop for QueryStream {
    fn drop(&mut self) {
        // Dropping the task drops its session: the server ends the COPY.
        self.task.abort();
    }
}

#[async_trait]
impl PageStream for QueryStream {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        if self.ended {
            return Ok(None);
        }
        match self.rx.recv().await {
            Some(Message::Page(p)) => Ok(Some(p)),
            Some(Message::End) => {
                self.ended = true;
                Ok(None)
            }
            Some(Message::Failed(e)) => {
                self.ended = true;
                Err(e)
            }
            None => {
                self.ended = true;
                Err(FaucetError::read(
                    CONNECTOR,
                    "the reader task stopped without finishing the read",
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
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        let outcome = read(conn, &plan, start, batch_size, &cancel, &tx).await;
        let last = match outcome {
            Ok(()) => Message::End,
            Err(e) => Message::Failed(e),
        };
        // The consumer may be gone (it dropped the stream): nothing to tell.
        let _ = tx.send(last).await;
    });
    QueryStream {
        rx,
        task,
        ended: false,
    }
}

async fn read(
    mut conn: PgConnection,
    plan: &Plan,
    start: Start,
    batch_size: usize,
    cancel: &CancellationToken,
    tx: &mpsc::Sender<Message>,
) -> Result<(), FaucetError> {
    let sql = plan.copy_sql(&start);
    tracing::debug!(source = CONNECTOR, target = %plan.label, %sql, "reading");
    let mut assembler = Assembler::new(plan, batch_size, start);
    let mut copy = conn.copy_out_raw(&sql).await.map_err(|e| {
        FaucetError::read(
            CONNECTOR,
            format!("cannot read {}", plan.label),
            Some(Box::new(e)),
        )
    })?;
    let mut splitter = LineSplitter::default();
    let mut ready: Vec<Page> = Vec::new();
    // A slot in the channel is reserved *before* the next page is built: the consumer has
    // taken the previous page, so at most two pages exist (one being written, one being
    // built or waiting), and the socket is not read while the consumer is behind.
    let mut permit = None;
    loop {
        if permit.is_none() {
            permit = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    if let Some(page) = assembler.finish_cancelled() {
                        let _ = tx.send(Message::Page(page)).await;
                    }
                    return Ok(());
                }
                reserved = tx.reserve() => match reserved {
                    Ok(p) => Some(p),
                    // The consumer dropped the stream: nothing more to do.
                    Err(_) => return Ok(()),
                },
            };
        }
        let chunk = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                if let Some(page) = assembler.finish_cancelled() {
                    match permit.take() {
                        Some(p) => p.send(Message::Page(page)),
                        None => { let _ = tx.send(Message::Page(page)).await; }
                    }
                }
                return Ok(());
            }
            chunk = copy.next() => chunk,
        };
        let bytes = match chunk {
            None => break,
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => {
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!(
                        "reading {} failed after {} rows",
                        plan.label, assembler.rows_read
                    ),
                    Some(Box::new(e)),
                ));
            }
        };
        splitter.feed(&bytes, |line| {
            if let Some(page) = assembler.push_line(line)? {
                ready.push(page);
            }
            Ok::<(), FaucetError>(())
        })?;
        for page in ready.drain(..) {
            let slot = match permit.take() {
                Some(p) => p,
                None => match tx.reserve().await {
                    Ok(p) => p,
                    Err(_) => return Ok(()),
                },
            };
            slot.send(Message::Page(page));
        }
    }
    if splitter.has_partial_line() {
        return Err(FaucetError::read(
            CONNECTOR,
            format!(
                "the COPY stream of {} ended inside a row (after {} rows)",
                plan.label, assembler.rows_read
            ),
            None,
        ));
    }
    if let Some(page) = assembler.finish() {
        match permit.take() {
            Some(p) => p.send(Message::Page(page)),
            None => {
                let _ = tx.send(Message::Page(page)).await;
            }
        }
    }
    Ok(())
}

/// Cuts decoded rows into pages and works out each page's bookmark.
struct Assembler<'a> {
    plan: &'a Plan,
    batch_size: usize,
    builder: PageBuilder,
    row: Vec<Value>,
    /// For each column, its position in the ordering key.
    key_pos: Vec<Option<usize>>,
    /// The key tuple of the row being decoded.
    key: Vec<Option<String>>,
    /// Rows read so far in this run (for error locations).
    rows_read: u64,
    /// The key tuple of the last row pushed.
    last_key: Option<Vec<String>>,
    /// For a key not known unique: the last key tuple whose group is complete.
    last_complete: Option<Vec<String>>,
}

impl<'a> Assembler<'a> {
    fn new(plan: &'a Plan, batch_size: usize, start: Start) -> Self {
        let start_key = match start {
            Start::After(values) => Some(values),
            Start::Beginning => None,
        };
        let mut key_pos = vec![None; plan.columns.len()];
        let key_len = plan.order.as_ref().map_or(0, |o| {
            for (k, &i) in o.indexes.iter().enumerate() {
                key_pos[i] = Some(k);
            }
            o.indexes.len()
        });
        Self {
            plan,
            batch_size,
            builder: PageBuilder::new(plan.schema.clone(), batch_size),
            row: Vec::with_capacity(plan.columns.len()),
            key_pos,
            key: vec![None; key_len],
            rows_read: 0,
            last_key: None,
            last_complete: start_key,
        }
    }

    fn unique(&self) -> bool {
        self.plan.order.as_ref().is_some_and(|o| o.unique)
    }

    /// Decodes one COPY line; returns the previous page when this row starts a new one.
    fn push_line(&mut self, line: &[u8]) -> Result<Option<Page>, FaucetError> {
        self.rows_read += 1;
        let columns = &self.plan.columns;
        self.row.clear();
        self.key.iter_mut().for_each(|k| *k = None);
        for (i, field) in fields(line).enumerate() {
            let Some(column) = columns.get(i) else {
                return Err(self.data_error(None, "more columns than described".into()));
            };
            let value = match field {
                None => Value::Null,
                Some(bytes) => {
                    let text = std::str::from_utf8(&bytes)
                        .map_err(|e| self.data_error(Some(&column.name), e.to_string()))?;
                    if let Some(k) = self.key_pos[i] {
                        self.key[k] = Some(text.to_owned());
                    }
                    decode_text(column.decode_oid, text)
                        .map_err(|m| self.data_error(Some(&column.name), m))?
                }
            };
            self.row.push(value);
        }
        if self.row.len() != columns.len() {
            return Err(self.data_error(
                None,
                format!("{} columns, expected {}", self.row.len(), columns.len()),
            ));
        }
        let key = self.current_key();
        let mut page = None;
        if self.builder.len() >= self.batch_size {
            let next_differs = key.is_some() && key != self.last_key;
            let bookmark = self.bookmark_mid_read(next_differs);
            page = Some(self.take_page(bookmark));
        }
        self.builder.push_row(self.row.drain(..));
        if key != self.last_key {
            self.last_complete = std::mem::replace(&mut self.last_key, key);
        }
        Ok(page)
    }

    /// The key tuple of the row just decoded, as PostgreSQL's text (the COPY field
    /// unescaped): exactly what is bound back when resuming. `None` without an ordering key
    /// or when a key column is NULL.
    fn current_key(&mut self) -> Option<Vec<String>> {
        if self.key.is_empty() {
            return None;
        }
        self.key.iter_mut().map(Option::take).collect()
    }

    /// The bookmark of a page cut mid-read; `next_differs`: the row after it has another key.
    fn bookmark_mid_read(&self, next_differs: bool) -> Option<Bookmark> {
        let key = if self.unique() || next_differs {
            self.last_key.as_ref()
        } else {
            self.last_complete.as_ref()
        };
        key.and_then(|k| self.plan.bookmark_after(k))
    }

    fn take_page(&mut self, bookmark: Option<Bookmark>) -> Page {
        let builder = std::mem::replace(
            &mut self.builder,
            PageBuilder::new(self.plan.schema.clone(), self.batch_size),
        );
        builder.finish(bookmark)
    }

    /// The last page of a finished read: the rows in hand with [`Plan::bookmark_done`]; for
    /// a full read also an empty page, to mark the read done. An incremental read that found
    /// nothing new hands over nothing (the stored bookmark stays).
    fn finish(&mut self) -> Option<Page> {
        if self.builder.is_empty() && self.plan.method == ReplicationMethod::Incremental {
            return None;
        }
        let bookmark = self.plan.bookmark_done(self.last_key.as_deref());
        Some(self.take_page(bookmark))
    }

    /// The rows in hand when the read is cancelled.
    fn finish_cancelled(&mut self) -> Option<Page> {
        if self.builder.is_empty() {
            return None;
        }
        let bookmark = self.bookmark_mid_read(false);
        Some(self.take_page(bookmark))
    }

    fn data_error(&self, column: Option<&str>, message: String) -> FaucetError {
        let location = match column {
            Some(c) => format!("{} row {}, column {c}", self.plan.label, self.rows_read),
            None => format!("{} row {}", self.plan.label, self.rows_read),
        };
        FaucetError::data(CONNECTOR, location, message)
    }
}
