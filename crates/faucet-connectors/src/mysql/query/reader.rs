//! The read itself: a task owns the session, streams the `SELECT` unbuffered
//! (`exec_iter`: mysql_async reads one row packet at a time from the socket), decodes each
//! row by [`to_value`] into pages, and hands them over a channel of one slot. Memory is
//! bounded by the page size: the page being filled, at most one finished page waiting, and
//! the one the run loop is writing; when the channel is full the task stops reading and the
//! server waits (TCP back-pressure).
//!
//! Pages and their bookmarks are cut by [`RowPages`], the rule shared with the `postgres`
//! query source (a tie group of a key not known unique is never split by a bookmark).

use std::sync::Arc;

use mysql_async::prelude::Queryable as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use faucet_core::{FaucetError, Page};

use super::plan::{Plan, Start, key_text};
use super::{CONNECTOR, Mysql};
use crate::mysql::connection::MysqlConnection;
use crate::mysql::task_pages::TaskPages;
use crate::mysql::value::to_value;
use crate::sql::query::rows::RowPages;

/// The [`PageStream`] of a query read.
pub(crate) type QueryStream = TaskPages;

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
    TaskPages::new(rx, task)
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
    let sql = plan.read_sql(start);
    tracing::debug!(source = CONNECTOR, target = %plan.label, %sql, "reading");
    let what = format!("reading {}", plan.label);
    let mut result = conn
        .exec_iter(sql, ())
        .await
        .map_err(|e| connection.error(&what, e))?;
    // A row already received is taken without looking at `cancel` (a look takes its lock, a
    // fresh waiter two more); the cancellation is awaited while the next row is not there,
    // and looked at after every page handed over.
    let mut cancelled = std::pin::pin!(cancel.cancelled());
    loop {
        let row = tokio::select! {
            biased;
            row = result.next() => row.map_err(|e| {
                connection.error(&format!("{what} (after {} rows)", assembler.rows_read), e)
            })?,
            () = &mut cancelled => return Ok(true),
        };
        let Some(row) = row else {
            break;
        };
        if let Some(page) = assembler.push_row(row.unwrap())? {
            if tx.send(Ok(page)).await.is_err() {
                // The stream was dropped.
                return Ok(true);
            }
            if cancel.is_cancelled() {
                return Ok(true);
            }
        }
    }
    drop(result);
    // A cancellation that came while the last rows were already in hand is still one.
    Ok(cancel.is_cancelled())
}

/// Cuts decoded rows into pages.
pub(crate) type Assembler = RowPages<Mysql>;

impl RowPages<Mysql> {
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
        let mut has_key = !self.pages.key_buffers().is_empty();
        self.row.clear();
        for (i, raw) in values.into_iter().enumerate() {
            let column = &columns[i];
            if let Some(k) = self.key_pos[i] {
                has_key &= key_text(column, &raw, &mut self.pages.key_buffers()[k]);
            }
            let value =
                to_value(column, raw).map_err(|m| self.data_error(Some(&column.name), m))?;
            self.row.push(value);
        }
        Ok(self.end_row(has_key))
    }
}
