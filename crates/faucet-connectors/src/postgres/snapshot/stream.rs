//! The replicate stream: the tables read inside the exported snapshot, one after the other,
//! as `op: r` records, then the slot's change stream from the consistent point.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::postgres::PgConnectOptions;

use faucet_core::{
    Bookmark, FaucetError, Page, PageBuilder, PageStream, ReadOptions, Source, Value,
};

use super::bookmark::SnapshotBookmark;
use super::export::ExportedSnapshot;
use crate::postgres::cdc::PostgresCdcSource;
use crate::postgres::cdc::changes::record_schema;
use crate::postgres::config::{TableName as QueryTable, connect};
use crate::postgres::query::ReplicationMethod;
use crate::postgres::query::config::Target;
use crate::postgres::query::plan::{Plan, Start};
use crate::postgres::query::reader::{self, QueryStream};

/// The table being copied.
struct Copying {
    /// `schema.table`.
    name: String,
    rows: QueryStream,
    /// Whether the reader's last page (bookmark `full_table: done`) was handed over.
    closed: bool,
}

enum Phase<'a> {
    Snapshot {
        /// Keeps the snapshot importable; dropped when the change stream starts.
        exported: ExportedSnapshot,
        /// Index of the next table to open.
        next: usize,
        copying: Option<Copying>,
    },
    Changes(Box<dyn PageStream + 'a>),
}

/// See the module docs of [`super`].
pub(crate) struct ReplicateStream<'a> {
    cdc: &'a PostgresCdcSource,
    sql: PgConnectOptions,
    tables: Vec<String>,
    /// The `postgres-cdc` bookmark of the consistent point.
    start: Bookmark,
    position: SnapshotBookmark,
    options: ReadOptions,
    phase: Phase<'a>,
}

impl<'a> ReplicateStream<'a> {
    pub(crate) fn new(
        cdc: &'a PostgresCdcSource,
        sql: PgConnectOptions,
        tables: Vec<String>,
        exported: ExportedSnapshot,
        start: Bookmark,
        options: ReadOptions,
    ) -> Self {
        let position = SnapshotBookmark {
            slot_lsn: exported.consistent_point_text.clone(),
            done: Vec::new(),
            table: None,
            after_key: None,
        };
        Self {
            cdc,
            sql,
            tables,
            start,
            position,
            options,
            phase: Phase::Snapshot {
                exported,
                next: 0,
                copying: None,
            },
        }
    }

    /// The bookmark once `table` is finished: the next snapshot position, or the change
    /// stream's start after the last table.
    fn finished(&mut self, table: &str) -> Bookmark {
        self.position.done.push(table.to_owned());
        self.position.table = None;
        self.position.after_key = None;
        if self.position.done.len() == self.tables.len() {
            self.start.clone()
        } else {
            self.position.to_json()
        }
    }

    /// `op: r` records of a page of `table`'s rows.
    fn records(&self, page: &Page, table: &str) -> PageBuilder {
        let row_schema = Arc::clone(page.schema());
        let mut out = PageBuilder::new(record_schema(), page.len());
        for row in page.rows() {
            out.push_row([
                Value::Text("r".to_owned()),
                Value::Text(table.to_owned()),
                Value::Text(self.position.slot_lsn.clone()),
                Value::Null,
                Value::Null,
                Value::row(Arc::clone(&row_schema), row.values().to_vec()),
                Value::Array(Vec::new()),
            ]);
        }
        out
    }

    async fn open_table(
        sql: &PgConnectOptions,
        exported: &ExportedSnapshot,
        table: &str,
        options: &ReadOptions,
    ) -> Result<QueryStream, FaucetError> {
        let mut conn = connect(sql).await?;
        exported.import(&mut conn).await?;
        let target = Target::Table(QueryTable::parse(table, "tables")?);
        let plan = Plan::describe(&mut conn, &target, ReplicationMethod::FullTable, &[]).await?;
        if plan.order.is_none() {
            tracing::warn!(
                table,
                "no primary key: the table is copied in one pass, without mid-table bookmarks"
            );
        }
        tracing::info!(table, snapshot = %exported.name, "copying");
        Ok(reader::spawn(
            conn,
            Arc::new(plan),
            Start::Beginning,
            options.batch_size.max(1),
            options.cancel.clone(),
        ))
    }

    async fn next_snapshot_page(&mut self) -> Result<Option<Option<Page>>, FaucetError> {
        let Phase::Snapshot {
            exported,
            next,
            copying,
        } = &mut self.phase
        else {
            return Ok(None);
        };
        let Some(current) = copying else {
            if *next == self.tables.len() || self.options.cancel.is_cancelled() {
                return Ok(None);
            }
            let name = self.tables[*next].clone();
            let rows = Self::open_table(&self.sql, exported, &name, &self.options).await?;
            *next += 1;
            self.position.table = Some(name.clone());
            self.position.after_key = None;
            *copying = Some(Copying {
                name,
                rows,
                closed: false,
            });
            return Ok(Some(None));
        };
        match current.rows.next_page().await? {
            Some(page) => {
                let name = current.name.clone();
                let inner = page.bookmark().cloned();
                let done = inner
                    .as_ref()
                    .and_then(|b| b.get("full_table"))
                    .and_then(|v| v.as_str())
                    == Some("done");
                if done {
                    current.closed = true;
                }
                let builder = self.records(&page, &name);
                let bookmark = if done {
                    Some(self.finished(&name))
                } else if let Some(values) = inner.as_ref().and_then(|b| b.get("values")) {
                    let key = values
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    self.position.after_key = Some(key);
                    Some(self.position.to_json())
                } else {
                    None
                };
                Ok(Some(Some(builder.finish(bookmark))))
            }
            None => {
                // A cancelled read ends early: the table is not finished.
                if self.options.cancel.is_cancelled() {
                    return Ok(None);
                }
                let closed = current.closed;
                let name = current.name.clone();
                *copying = None;
                if closed {
                    return Ok(Some(None));
                }
                let bookmark = self.finished(&name);
                Ok(Some(Some(Page::empty(record_schema(), Some(bookmark)))))
            }
        }
    }
}

#[async_trait]
impl PageStream for ReplicateStream<'_> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        loop {
            if let Phase::Changes(stream) = &mut self.phase {
                return stream.next_page().await;
            }
            match self.next_snapshot_page().await? {
                Some(Some(page)) => return Ok(Some(page)),
                Some(None) => {}
                None if self.options.cancel.is_cancelled() => return Ok(None),
                None => {
                    // Every table is copied: end the snapshot's session, stream the slot.
                    self.phase = Phase::Changes(Box::new(EmptyStream));
                    let stream = self
                        .cdc
                        .open(Some(self.start.clone()), self.options.clone())
                        .await?;
                    tracing::info!(
                        tables = self.tables.len(),
                        "snapshot copied; streaming changes"
                    );
                    self.phase = Phase::Changes(stream);
                }
            }
        }
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        match &mut self.phase {
            Phase::Changes(stream) if bookmark.get("snapshot").is_none() => {
                stream.bookmark_durable(bookmark).await
            }
            _ => Ok(()),
        }
    }
}

/// Stands in while the change stream opens (the snapshot's session is dropped first).
struct EmptyStream;

#[async_trait]
impl PageStream for EmptyStream {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        Ok(None)
    }
}
