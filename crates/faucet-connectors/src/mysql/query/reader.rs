//! The read itself: a task owns the session, streams the `SELECT` unbuffered
//! (`exec_iter`: mysql_async reads one row packet at a time from the socket), decodes each
//! row by [`to_value`] into pages, and hands them over a channel of one slot. Memory is
//! bounded by the page size: the page being filled, at most one finished page waiting, and
//! the one the run loop is writing; when the channel is full the task stops reading and the
//! server waits (TCP back-pressure).
//!
//! Page bookmarks (the rule of the `postgres` query source): a page is handed over once the
//! row after it has been read (or the read ended), so its bookmark can say whether the key
//! group of its last row is complete:
//! * a unique ordering key: the page's last key tuple;
//! * a key not known unique: the last key tuple whose group is known complete, so a resumed
//!   read never skips the rest of a tie group (it may deliver that group's rows again);
//! * the last page of a finished read: [`Plan::bookmark_done`];
//! * the rows in hand when the read is cancelled: as mid-read, the last group incomplete.

use std::sync::Arc;

use async_trait::async_trait;
use mysql_async::prelude::Queryable as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use faucet_core::{Bookmark, FaucetError, Page, PageBuilder, PageStream, Value};

use super::config::{CONNECTOR, ReplicationMethod};
use super::plan::{Plan, Start, key_text};
use crate::mysql::connection::MysqlConnection;
use crate::mysql::value::to_value;

/// The [`PageStream`] of a query read.
pub(crate) struct QueryStream {
    pages: mpsc::Receiver<Result<Page, FaucetError>>,
    task: JoinHandle<()>,
    ended: bool,
}

impl Drop for QueryStream {
    fn drop(&mut self) {
        // Dropping the task drops its session: the server stops sending.
        self.task.abort();
    }
}

#[async_trait]
impl PageStream for QueryStream {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        if self.ended {
            return Ok(None);
        }
        match self.pages.recv().await {
            Some(Ok(page)) => Ok(Some(page)),
            Some(Err(e)) => {
                self.ended = true;
                Err(e)
            }
            None => {
                self.ended = true;
                Ok(None)
            }
        }
    }
}

/// Starts the read of `plan` from `start` on `conn`.
pub(crate) fn spawn(
    conn: mysql_async::Conn,
    connection: MysqlConnection,
    plan: Arc<Plan>,
    start: Start,
    batch_size: usize,
    cancel: CancellationToken,
) -> QueryStream {
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        let mut assembler = Assembler::new(plan.clone(), batch_size.max(1), start.clone());
        let outcome = pump(
            conn,
            &connection,
            &plan,
            &start,
            &mut assembler,
            &tx,
            &cancel,
        )
        .await;
        let last = match outcome {
            Ok(true) => assembler.finish_cancelled(),
            Ok(false) => assembler.finish(),
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        if let Some(page) = last {
            let _ = tx.send(Ok(page)).await;
        }
    });
    QueryStream {
        pages: rx,
        task,
        ended: false,
    }
}

/// Streams the rows into pages; `Ok(true)` when cancelled (or the consumer left).
async fn pump(
    mut conn: mysql_async::Conn,
    connection: &MysqlConnection,
    plan: &Plan,
    start: &Start,
    assembler: &mut Assembler,
    tx: &mpsc::Sender<Result<Page, FaucetError>>,
    cancel: &CancellationToken,
) -> Result<bool, FaucetError> {
    let sql = plan.select_sql(start);
    tracing::debug!(source = CONNECTOR, target = %plan.label, %sql, "reading");
    let what = format!("reading {}", plan.label);
    let mut result = conn
        .exec_iter(sql, ())
        .await
        .map_err(|e| connection.error(&what, e))?;
    loop {
        let row = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(true),
            row = result.next() => row.map_err(|e| {
                connection.error(&format!("{what} (after {} rows)", assembler.rows_read), e)
            })?,
        };
        let Some(row) = row else {
            break;
        };
        if let Some(page) = assembler.push_row(row.unwrap())?
            && tx.send(Ok(page)).await.is_err()
        {
            // The stream was dropped.
            return Ok(true);
        }
    }
    drop(result);
    Ok(false)
}

/// Cuts decoded rows into pages and works out each page's bookmark.
pub(crate) struct Assembler {
    plan: Arc<Plan>,
    batch_size: usize,
    builder: PageBuilder,
    /// For each column, its position in the ordering key.
    key_pos: Vec<Option<usize>>,
    /// The key tuple of the row being read (buffers reused).
    key: Vec<String>,
    /// Rows read so far in this run (for error locations).
    pub(crate) rows_read: u64,
    /// The key tuple of the last row pushed.
    last_key: Option<Vec<String>>,
    /// For a key not known unique: the last key tuple whose group is complete.
    last_complete: Option<Vec<String>>,
}

impl Assembler {
    /// An assembler for a read of `plan` from `start`, in pages of `batch_size`.
    pub(crate) fn new(plan: Arc<Plan>, batch_size: usize, start: Start) -> Self {
        let mut key_pos = vec![None; plan.columns.len()];
        let key_len = plan.order.as_ref().map_or(0, |o| {
            for (k, &i) in o.indexes.iter().enumerate() {
                key_pos[i] = Some(k);
            }
            o.indexes.len()
        });
        Self {
            builder: PageBuilder::new(plan.schema.clone(), batch_size),
            plan,
            batch_size,
            key_pos,
            key: vec![String::new(); key_len],
            rows_read: 0,
            last_key: None,
            last_complete: match start {
                Start::After(values) => Some(values),
                Start::Beginning => None,
            },
        }
    }

    fn unique(&self) -> bool {
        self.plan.order.as_ref().is_some_and(|o| o.unique)
    }

    /// Decodes one row; returns the previous page when this row starts a new one.
    ///
    /// # Errors
    /// [`FaucetError::Data`] naming the row and column when a value does not decode.
    pub(crate) fn push_row(
        &mut self,
        values: Vec<mysql_async::Value>,
    ) -> Result<Option<Page>, FaucetError> {
        self.rows_read += 1;
        let columns = &self.plan.columns;
        if values.len() != columns.len() {
            return Err(self.data_error(
                None,
                format!("{} columns, expected {}", values.len(), columns.len()),
            ));
        }
        let mut has_key = !self.key.is_empty();
        let mut row: Vec<Value> = Vec::with_capacity(values.len());
        for (i, raw) in values.into_iter().enumerate() {
            let column = &columns[i];
            if let Some(k) = self.key_pos[i] {
                has_key &= key_text(column, &raw, &mut self.key[k]);
            }
            let value =
                to_value(column, raw).map_err(|m| self.data_error(Some(&column.name), m))?;
            row.push(value);
        }
        let differs = match (&self.last_key, has_key) {
            (None, false) => false,
            (Some(last), true) => *last != self.key,
            _ => true,
        };
        let mut page = None;
        if self.builder.len() >= self.batch_size {
            let bookmark = self.bookmark_mid_read(has_key && differs);
            page = Some(self.take_page(bookmark));
        }
        self.builder.push_row(row);
        if differs {
            let key = if has_key {
                let width = self.key.len();
                let mut spare = self.last_complete.take().unwrap_or_default();
                spare.resize_with(width, String::new);
                Some(std::mem::replace(&mut self.key, spare))
            } else {
                None
            };
            self.last_complete = std::mem::replace(&mut self.last_key, key);
        }
        Ok(page)
    }

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

    /// The last page of a finished read: the rows in hand with [`Plan::bookmark_done`]; for a
    /// full read also an empty page, to mark the read done. An incremental read that found
    /// nothing new hands over nothing (the stored bookmark stays).
    pub(crate) fn finish(&mut self) -> Option<Page> {
        if self.builder.is_empty() && self.plan.method == ReplicationMethod::Incremental {
            return None;
        }
        let bookmark = self.plan.bookmark_done(self.last_key.as_deref());
        Some(self.take_page(bookmark))
    }

    /// The rows in hand when the read is cancelled.
    pub(crate) fn finish_cancelled(&mut self) -> Option<Page> {
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
