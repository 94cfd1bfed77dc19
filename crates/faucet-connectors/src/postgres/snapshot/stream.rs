//! The replicate stream: the tables (or what is missing of them) read inside an exported
//! snapshot, one after the other, as `op: r` records, then the slot's change stream from
//! its consistent point, filtered when a resumed copy read parts as of later points.

use std::sync::Arc;

use async_trait::async_trait;
use pgwire_replication::Lsn;

use faucet_core::change::Op;
use faucet_core::serde_json::Value as Json;
use faucet_core::{
    Bookmark, FaucetError, Page, PageBuilder, PageStream, ReadOptions, Source, Value,
};

use super::CONNECTOR;
use super::bookmark::{SnapshotBookmark, TableCopy};
use super::export::ExportedSnapshot;
use super::filter::Filter;
use crate::copy_filter::{EmptyStream, FilteredChanges};
use crate::copy_history::{KeepCopied, Staged, after_copy, carrying};
use crate::copy_progress::{CopyProgress, CopyThenChanges, copy_progress, copy_then_changes};
use crate::postgres::cdc::PostgresCdcSource;
use crate::postgres::cdc::changes::record_schema;
use crate::postgres::cdc::client::lsn_text;
use crate::postgres::cdc::config::TableName;
use crate::postgres::connection::PostgresUrl;
use crate::postgres::query::Postgres;
use crate::postgres::query::ReplicationMethod;
use crate::postgres::query::Target;
use crate::postgres::query::plan::{Plan, Start};
use crate::postgres::query::reader::{self, QueryStream};

/// The table being copied.
struct Copying {
    /// `schema.table`.
    name: String,
    rows: QueryStream,
    /// Whether the table has a primary key (mid-table bookmarks, one page held back).
    keyed: bool,
    /// The page read but not handed out yet: a page is handed out only once the next one
    /// is read, so its bookmark can name the page in flight after it (module `bookmark`,
    /// `dirty`).
    staged: Option<Staged>,
    /// The last key handed out (or the key the copy resumed after).
    after: Option<Vec<String>>,
}

/// The last key tuple (and key names) of a reader page, from its bookmark; `(None, None)`
/// for the last page (`full_table: done`) or a page without a key.
fn page_end(page: &Page) -> (Option<Vec<String>>, Option<Vec<String>>) {
    let Some(b) = page.bookmark() else {
        return (None, None);
    };
    let strings = |v: &Json| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    if b.get("full_table").and_then(Json::as_str) == Some("done") {
        return (None, None);
    }
    (
        b.get("values").and_then(strings),
        b.get("key").and_then(strings),
    )
}

enum Phase<'a> {
    Snapshot {
        /// Keeps the snapshot importable; dropped when the change stream starts. `None` when
        /// nothing is left to copy.
        exported: Option<ExportedSnapshot>,
        /// Index of the next table to consider.
        next: usize,
        copying: Option<Box<Copying>>,
    },
    Changes(Box<dyn PageStream + 'a>),
}

/// See the module docs of [`super`].
pub(crate) struct ReplicateStream<'a> {
    cdc: &'a PostgresCdcSource,
    sql: PostgresUrl,
    /// The tables, parsed once by the connectors' one table-name rule (in `new`, before
    /// anything is created).
    tables: Vec<TableName>,
    /// What was copied so far, and the slot's consistent point.
    position: SnapshotBookmark,
    /// The consistent point of the snapshot being read now.
    point: Lsn,
    /// The snapshot's text form, the `lsn` of the `op: r` records.
    point_text: String,
    options: ReadOptions,
    phase: Phase<'a>,
    /// Whether the first page (the position, before any row) was handed over.
    announced: bool,
    /// The copy's share read ([`CopyProgress`]), worked out before its first table.
    progress: Option<CopyProgress>,
}

impl<'a> ReplicateStream<'a> {
    /// A stream copying, inside `exported`, what `position` says is missing of `tables`
    /// (all of them on a first run), then streaming the slot from `position.start.slot_lsn`.
    pub(crate) fn new(
        cdc: &'a PostgresCdcSource,
        sql: PostgresUrl,
        tables: Vec<TableName>,
        exported: Option<ExportedSnapshot>,
        position: SnapshotBookmark,
        options: ReadOptions,
    ) -> Self {
        let point = exported
            .as_ref()
            .map_or(position.start.slot_lsn, |e| e.consistent_point);
        Self {
            cdc,
            sql,
            tables,
            position,
            point,
            point_text: lsn_text(point),
            options,
            phase: Phase::Snapshot {
                exported,
                next: 0,
                copying: None,
            },
            announced: false,
            progress: None,
        }
    }

    /// The tables left to copy, for the copy's [`CopyProgress`]; `None` when one
    /// resumes mid-way (how much of it is left is not known).
    fn tables_left(&self) -> Option<Vec<TableName>> {
        let left = crate::copy_progress::tables_left(
            &self.tables,
            TableName::qualified,
            |name| self.position.holds(name),
            &self.position.copied,
        )?;
        Some(left.into_iter().cloned().collect())
    }

    fn all_finished(&self) -> bool {
        self.tables
            .iter()
            .all(|t| self.position.holds(&t.qualified()))
    }

    /// The listed tables, every one copied once the copy is over (the `copied` member).
    fn listed(&self) -> std::collections::BTreeSet<String> {
        self.tables.iter().map(TableName::qualified).collect()
    }

    /// The bookmark after a page of the copy: the snapshot position, or, once every table is
    /// copied, the change stream's start with the tables copied (and with the copy history
    /// when it is needed).
    fn copy_bookmark(&self) -> Bookmark {
        if !self.all_finished() {
            return self.position.to_json();
        }
        after_copy(
            self.position.stream_start(),
            &self.position.start.slot_lsn,
            &self.position.copied,
            &self.listed(),
        )
    }

    /// `op: r` records of a page of `table`'s rows (the rows' values move into them).
    fn records(&self, page: Page, table: &str) -> PageBuilder {
        let row_schema = Arc::clone(page.schema());
        let (rows, width) = (page.len(), row_schema.len());
        let mut out = PageBuilder::new(record_schema(), rows);
        let mut values = page.into_values().into_iter();
        for _ in 0..rows {
            let row: Vec<Value> = values.by_ref().take(width).collect();
            out.push_row([
                Value::Text(Op::Read.code().into()),
                Value::Text(table.into()),
                Value::Text(self.point_text.as_str().into()),
                Value::Null,
                Value::Null,
                Value::row(Arc::clone(&row_schema), row),
                Value::Array(Vec::new()),
            ]);
        }
        out
    }

    /// Opens the read of `table` from where its copy stopped; `Ok((rows, keyed))`.
    async fn open_table(
        sql: &PostgresUrl,
        options: &ReadOptions,
        exported: &ExportedSnapshot,
        name: &TableName,
        history: Option<&TableCopy>,
    ) -> Result<(QueryStream, bool), FaucetError> {
        let table = name.qualified();
        let table = table.as_str();
        let mut conn = sql.open_session(crate::postgres::config::CONNECTOR).await?;
        exported.import(&mut conn).await?;
        let target = Target::Table(name.clone());
        let plan =
            Plan::describe(&mut conn, sql, &target, ReplicationMethod::FullTable, &[]).await?;
        let start = match history.and_then(|h| h.resume_after()) {
            None => Start::Beginning,
            Some(after) => {
                let Some(order) = &plan.order else {
                    return Err(FaucetError::bookmark(
                        CONNECTOR,
                        format!(
                            "the copy of {table} stopped after key {after:?}, but {table} has no \
                             primary key now; rerun the replicate from scratch"
                        ),
                        None,
                    ));
                };
                let recorded = history.and_then(|h| h.key.as_ref());
                if recorded.is_some_and(|k| *k != order.names) || after.len() != order.names.len() {
                    return Err(FaucetError::bookmark(
                        CONNECTOR,
                        format!(
                            "the copy of {table} stopped after key {after:?} in the order of \
                             {recorded:?}, but its primary key is now {:?}; rerun the replicate \
                             from scratch",
                            order.names
                        ),
                        None,
                    ));
                }
                Start::After(after.to_vec())
            }
        };
        let keyed = plan.order.is_some();
        if !keyed {
            tracing::warn!(
                table,
                "no primary key: the table is copied in one pass; an interruption before it \
                 finishes cannot be resumed"
            );
        }
        tracing::info!(table, snapshot = %exported.name, from = ?start, "copying");
        let rows = reader::spawn(
            conn,
            Arc::new(plan),
            start,
            options.batch_size.max(1),
            options.cancel.clone(),
        );
        Ok((rows, keyed))
    }

    /// The next page of the copy: `Ok(None)` when the copy is over (or cancelled),
    /// `Ok(Some(None))` when a step produced nothing to hand over.
    async fn next_snapshot_page(&mut self) -> Result<Option<Option<Page>>, FaucetError> {
        let Phase::Snapshot {
            exported, copying, ..
        } = &self.phase
        else {
            return Ok(None);
        };
        if copying.is_none() {
            return self.open_next(exported.is_some()).await;
        }
        let Phase::Snapshot {
            copying: Some(current),
            ..
        } = &mut self.phase
        else {
            return Ok(None);
        };
        if current.staged.as_ref().is_some_and(|s| s.end.is_none()) {
            // The staged page is the table's last: nothing to look ahead to.
            let staged = current.staged.take();
            let name = current.name.clone();
            self.end_table();
            return Ok(Some(staged.map(|s| self.hand_over_last(&name, s.page))));
        }
        let fetched = current.rows.next_page().await?;
        let name = current.name.clone();
        let keyed = current.keyed;
        let Some(page) = fetched else {
            // A cancelled read ends early: the table is not finished.
            if self.options.cancel.is_cancelled() {
                return Ok(None);
            }
            // The reader ended without a last-page marker: what is staged is the last page.
            let staged = self.copying_mut().and_then(|c| c.staged.take());
            self.end_table();
            let page = staged.map_or_else(|| Page::empty(record_schema(), None), |s| s.page);
            return Ok(Some(Some(self.hand_over_last(&name, page))));
        };
        let (end, key_names) = page_end(&page);
        let records = self.records(page, &name).finish(None);
        if !keyed {
            // One pass without mid-table bookmarks (a resume is refused: `unkeyed`).
            if end.is_none() {
                self.end_table();
                return Ok(Some(Some(self.hand_over_last(&name, records))));
            }
            return Ok(Some(Some(records)));
        }
        let point = self.point;
        let staged = self.copying_mut().and_then(|c| {
            c.staged.replace(Staged {
                page: records,
                end: end.clone(),
            })
        });
        let after = self.copying_mut().and_then(|c| c.after.clone());
        let entry = self.position.copied.tables.entry(name.clone()).or_default();
        if key_names.is_some() {
            entry.key = key_names;
        }
        let handed = staged.as_ref().map(|s| s.end.clone());
        // The first page is recorded in flight before anything of it is handed out.
        let page = entry.hold_back(&point, after, end, staged);
        if let (Some(to), Some(c)) = (handed, self.copying_mut()) {
            c.after = to;
        }
        let bookmark = Some(self.position.to_json());
        Ok(Some(Some(carrying(page, record_schema(), bookmark))))
    }

    /// Opens the next table that is not finished; `Ok(None)` when there is none.
    async fn open_next(&mut self, has_snapshot: bool) -> Result<Option<Option<Page>>, FaucetError> {
        if !has_snapshot || self.options.cancel.is_cancelled() {
            return Ok(None);
        }
        let Phase::Snapshot {
            exported: Some(exported),
            next,
            ..
        } = &self.phase
        else {
            return Ok(None);
        };
        let Some(i) =
            (*next..self.tables.len()).find(|&i| !self.position.holds(&self.tables[i].qualified()))
        else {
            return Ok(None);
        };
        let name = self.tables[i].qualified();
        let history = self.position.copied.tables.get(&name);
        let after = history
            .and_then(|h| h.resume_after())
            .map(<[String]>::to_vec);
        let (rows, keyed) =
            Self::open_table(&self.sql, &self.options, exported, &self.tables[i], history).await?;
        if let Phase::Snapshot { next, copying, .. } = &mut self.phase {
            *next = i + 1;
            *copying = Some(Box::new(Copying {
                name: name.clone(),
                rows,
                keyed,
                staged: None,
                after,
            }));
        }
        if !keyed {
            // Durable before any of its rows: a crash mid-table is then refused.
            self.position.start.unkeyed = Some(name);
            return Ok(Some(Some(Page::empty(
                record_schema(),
                Some(self.position.to_json()),
            ))));
        }
        Ok(Some(None))
    }

    fn copying_mut(&mut self) -> Option<&mut Copying> {
        match &mut self.phase {
            Phase::Snapshot { copying, .. } => copying.as_deref_mut(),
            Phase::Changes(_) => None,
        }
    }

    /// Closes the table being copied.
    fn end_table(&mut self) {
        if let Phase::Snapshot { copying, .. } = &mut self.phase {
            *copying = None;
        }
    }

    /// `page` as the last page of `table`, with the bookmark after it.
    fn hand_over_last(&mut self, table: &str, mut page: Page) -> Page {
        self.finished(table);
        page.set_bookmark(Some(self.copy_bookmark()));
        page
    }

    /// Records that `table` is copied to its last key.
    fn finished(&mut self, table: &str) {
        let point = self.point;
        self.position
            .copied
            .tables
            .entry(table.to_owned())
            .or_default()
            .advance(point, None);
        if self.position.start.unkeyed.as_deref() == Some(table) {
            self.position.start.unkeyed = None;
        }
    }
}

#[async_trait]
impl CopyThenChanges for ReplicateStream<'_> {
    const CONNECTOR: &'static str = CONNECTOR;

    fn changes(&mut self) -> Option<&mut (dyn PageStream + '_)> {
        match &mut self.phase {
            Phase::Changes(stream) => Some(stream.as_mut()),
            Phase::Snapshot { .. } => None,
        }
    }

    /// The slot exists from now on: a position is stored before anything else, so a crash
    /// from here on resumes instead of finding a slot without a bookmark.
    fn before_copy(&mut self) -> Option<Page> {
        if self.announced {
            return None;
        }
        self.announced = true;
        Some(Page::empty(record_schema(), Some(self.position.to_json())))
    }

    fn progress(&mut self) -> &mut Option<CopyProgress> {
        &mut self.progress
    }

    async fn start_progress(&mut self) -> CopyProgress {
        copy_progress::<Postgres>(&self.sql, self.tables_left()).await
    }

    async fn copy_page(&mut self) -> Result<Option<Option<Page>>, FaucetError> {
        self.next_snapshot_page().await
    }

    fn cancelled(&self) -> bool {
        self.options.cancel.is_cancelled()
    }

    fn all_finished(&self) -> bool {
        ReplicateStream::all_finished(self)
    }

    /// Ends the snapshot's session, streams the slot.
    async fn open_changes(&mut self) -> Result<(), FaucetError> {
        self.phase = Phase::Changes(Box::new(EmptyStream));
        let start = self.position.stream_start();
        let stream = self.cdc.open(Some(start), self.options.clone()).await?;
        let filter = Filter::new(
            self.position.copied.clone(),
            self.position.start.slot_lsn,
            self.sql.clone(),
        );
        tracing::info!(
            tables = self.tables.len(),
            filtered = filter.is_some(),
            "snapshot copied; streaming changes"
        );
        let changes = Box::new(FilteredChanges {
            inner: stream,
            filter,
        });
        self.phase = Phase::Changes(KeepCopied::wrap(changes, Some(self.listed())));
        Ok(())
    }
}

#[async_trait]
impl PageStream for ReplicateStream<'_> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        copy_then_changes(self).await
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        match &mut self.phase {
            Phase::Changes(stream) if bookmark.get("snapshot").is_none() => {
                stream.bookmark_durable(bookmark).await
            }
            _ => Ok(()),
        }
    }

    /// The copy reads ahead (its next page is read from the exported snapshot, whatever
    /// the sink does); the change stream as it says.
    fn reads_ahead(&self) -> bool {
        match &self.phase {
            Phase::Snapshot { .. } => true,
            Phase::Changes(stream) => stream.reads_ahead(),
        }
    }
}
