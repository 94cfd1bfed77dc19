//! The replicate stream: the tables (or what is missing of them) read inside one consistent
//! snapshot, one after the other, in primary-key order and bounded pages, as `op: r`
//! records; then the binlog from the first snapshot's point, filtered when a resumed copy
//! read parts as of later points.

use std::sync::Arc;

use async_trait::async_trait;
use mysql_async::prelude::Queryable as _;

use faucet_core::change::Op;
use faucet_core::{
    Bookmark, FaucetError, Page, PageBuilder, PageStream, ReadOptions, Source, Value,
};

use super::CONNECTOR;
use super::bookmark::{SnapshotBookmark, TableCopy};
use super::filter::Filter;
use super::point::{SnapshotPoint, SnapshotSession};
use crate::copy_filter::{EmptyStream, FilteredChanges};
use crate::copy_history::{KeepCopied, Staged, after_copy, carrying, strings};
use crate::copy_progress::{CopyProgress, CopyThenChanges, copy_progress, copy_then_changes};
use crate::mysql::cdc::MysqlCdcSource;
use crate::mysql::cdc::changes::record_schema;
use crate::mysql::connection::MysqlConnection;
use crate::mysql::query::Mysql;
use crate::mysql::query::ReplicationMethod;
use crate::mysql::query::Target;
use crate::mysql::query::plan::{Plan, Start};
use crate::mysql::query::reader::Assembler;
use crate::mysql::table::TableName;
use crate::sql::query::QueryColumn as _;

/// The table being copied.
struct Copying {
    /// `database.table`.
    name: String,
    plan: Arc<Plan>,
    /// Where the next page's `SELECT` starts; `None` once the last page was read.
    next: Option<Start>,
    /// The page read but not handed out yet: a page is handed out only once the next one
    /// is read, so its bookmark can name the page in flight after it (`dirty`).
    staged: Option<Staged>,
    /// The last key handed out (or the key the copy resumed after).
    after: Option<Vec<String>>,
}

enum Phase<'a> {
    Snapshot {
        /// The session inside the snapshot; `None` when nothing is left to copy.
        session: Option<SnapshotSession>,
        /// Index of the next table to consider.
        next: usize,
        copying: Option<Box<Copying>>,
    },
    Changes(Box<dyn PageStream + 'a>),
}

/// See the module docs of [`super`].
pub(crate) struct ReplicateStream<'a> {
    cdc: &'a MysqlCdcSource,
    connection: MysqlConnection,
    tables: Vec<TableName>,
    /// What was copied so far, and the first snapshot's point.
    position: SnapshotBookmark,
    /// The point of the snapshot being read now.
    point: SnapshotPoint,
    options: ReadOptions,
    phase: Phase<'a>,
    /// The copy's share read ([`CopyProgress`]), worked out before its first table.
    progress: Option<CopyProgress>,
}

impl<'a> ReplicateStream<'a> {
    /// A stream copying, inside `session`, what `position` says is missing of `tables`
    /// (all of them on a first run), then streaming the binlog from `position.start`.
    pub(crate) fn new(
        cdc: &'a MysqlCdcSource,
        connection: MysqlConnection,
        tables: Vec<TableName>,
        session: Option<SnapshotSession>,
        position: SnapshotBookmark,
        options: ReadOptions,
    ) -> Self {
        let point = session.as_ref().map_or_else(
            || position.start_point(),
            |s| SnapshotPoint(s.point.clone()),
        );
        Self {
            cdc,
            connection,
            tables,
            position,
            point,
            options,
            phase: Phase::Snapshot {
                session,
                next: 0,
                copying: None,
            },
            progress: None,
        }
    }

    /// The tables left to copy (qualified), for the copy's [`CopyProgress`]; `None` when
    /// one resumes mid-way (how much of it is left is not known).
    fn tables_left(&self) -> Option<Vec<TableName>> {
        let left = crate::copy_progress::tables_left(
            &self.tables,
            ToString::to_string,
            |name| self.position.holds(name),
            &self.position.copied,
        )?;
        let database = self.connection.database();
        Some(left.into_iter().map(|t| t.qualified_in(database)).collect())
    }

    fn all_finished(&self) -> bool {
        self.tables
            .iter()
            .all(|t| self.position.holds(&t.to_string()))
    }

    /// The listed tables, every one copied once the copy is over (the `copied` member).
    fn listed(&self) -> std::collections::BTreeSet<String> {
        self.tables.iter().map(ToString::to_string).collect()
    }

    /// The bookmark after a page of the copy: the snapshot position, or, once every table is
    /// copied, the binlog's start with the tables copied (and with the copy history when it
    /// is needed).
    fn copy_bookmark(&self) -> Bookmark {
        if !self.all_finished() {
            return self.position.to_json();
        }
        after_copy(
            self.position.start.cdc.to_json(),
            &self.position.start_point(),
            &self.position.copied,
            &self.listed(),
        )
    }

    /// `op: r` records of a page of `table`'s rows: `binlog_file` / `binlog_pos` the point
    /// of the snapshot they were read in, `gtid`, `commit_ts` and `before` null.
    fn records(&self, page: &Page, table: &str) -> Page {
        let row_schema = Arc::clone(page.schema());
        let mut out = PageBuilder::new(record_schema(), page.len());
        let file: faucet_core::Text = self.point.0.file.as_str().into();
        let pos = Value::Int(i64::try_from(self.point.0.pos).unwrap_or(i64::MAX));
        for row in page.rows() {
            out.push_row([
                Value::Text(Op::Read.code().into()),
                Value::Text(table.into()),
                Value::Text(file.clone()),
                pos.clone(),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::row(Arc::clone(&row_schema), row.values().to_vec()),
            ]);
        }
        out.finish(None)
    }

    /// Reads one page of `plan` from `start` on the snapshot's session: `(page, its last
    /// key)`, the key `None` when the table has no rows after it.
    async fn read_page(
        session: &mut SnapshotSession,
        connection: &MysqlConnection,
        plan: &Arc<Plan>,
        start: &Start,
        size: usize,
    ) -> Result<(Page, Option<Vec<String>>), FaucetError> {
        let sql = format!("{} LIMIT {size}", plan.select_sql(start));
        let what = format!("copying {}", plan.label);
        let mut assembler = Assembler::new(Arc::clone(plan), size, start.clone());
        let mut result = session
            .conn
            .exec_iter(sql, ())
            .await
            .map_err(|e| connection.error(&what, e))?;
        let mut rows = 0usize;
        while let Some(row) = result
            .next()
            .await
            .map_err(|e| connection.error(&what, e))?
        {
            rows += 1;
            if let Some(page) = assembler.push_row(row.unwrap())? {
                // Cannot happen under LIMIT: the page holds `size` rows.
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!("{what}: more than {size} rows in a page ({})", page.len()),
                    None,
                ));
            }
        }
        drop(result);
        let page = if rows < size {
            assembler.finish()
        } else {
            assembler.finish_cancelled()
        };
        let page = page.unwrap_or_else(|| Page::empty(Arc::clone(&plan.schema), None));
        let end = if rows < size {
            None
        } else {
            let end = page
                .bookmark()
                .and_then(|b| b.get("values"))
                .and_then(strings);
            if end.is_none() {
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!("{what}: a page ended without its last key"),
                    None,
                ));
            }
            end
        };
        Ok((page, end))
    }

    /// Describes `name` inside the snapshot and works out where its copy continues.
    async fn open_table(
        session: &mut SnapshotSession,
        connection: &MysqlConnection,
        name: &TableName,
        history: Option<&TableCopy>,
    ) -> Result<(Arc<Plan>, Start), FaucetError> {
        let table = name.to_string();
        let plan = Plan::describe(
            &mut session.conn,
            connection,
            &Target::Table(name.clone()),
            ReplicationMethod::FullTable,
            &[],
        )
        .await?;
        let Some(order) = &plan.order else {
            return Err(no_primary_key(&table));
        };
        let start = match history.and_then(TableCopy::resume_after) {
            None => Start::Beginning,
            Some(after) => {
                let recorded = history.and_then(|h| h.key.as_ref());
                let literal_ok = after
                    .iter()
                    .zip(&order.indexes)
                    .all(|(v, &i)| plan.columns[i].literal(v).is_some());
                if recorded.is_some_and(|k| *k != order.names)
                    || after.len() != order.names.len()
                    || !literal_ok
                {
                    return Err(FaucetError::bookmark(
                        CONNECTOR,
                        format!(
                            "the copy of {table} stopped after key {after:?} in the order of \
                             {recorded:?}, but its primary key is now {:?}; rerun the \
                             replicate from scratch",
                            order.names
                        ),
                        None,
                    ));
                }
                Start::After(after.to_vec())
            }
        };
        tracing::info!(table, from = ?start, "copying");
        Ok((Arc::new(plan), start))
    }

    /// The next page of the copy: `Ok(None)` when the copy is over (or cancelled),
    /// `Ok(Some(None))` when a step produced nothing to hand over.
    async fn next_snapshot_page(&mut self) -> Result<Option<Option<Page>>, FaucetError> {
        if self.options.cancel.is_cancelled() {
            return Ok(None);
        }
        let size = self.options.batch_size.max(1);
        let Phase::Snapshot {
            session: Some(session),
            next,
            copying,
        } = &mut self.phase
        else {
            return Ok(None);
        };
        let Some(current) = copying.as_deref_mut() else {
            // Open the next table that is not finished.
            let Some(i) = (*next..self.tables.len())
                .find(|&i| !self.position.holds(&self.tables[i].to_string()))
            else {
                return Ok(None);
            };
            let name = self.tables[i].to_string();
            let history = self.position.copied.tables.get(&name);
            let after = history
                .and_then(TableCopy::resume_after)
                .map(<[String]>::to_vec);
            let (plan, start) =
                Self::open_table(session, &self.connection, &self.tables[i], history).await?;
            *next = i + 1;
            *copying = Some(Box::new(Copying {
                name,
                plan,
                next: Some(start),
                staged: None,
                after,
            }));
            return Ok(Some(None));
        };
        let name = current.name.clone();
        let Some(start) = current.next.clone() else {
            // The staged page is the table's last: nothing to look ahead to.
            let staged = current.staged.take();
            *copying = None;
            let page = staged.map_or_else(|| Page::empty(record_schema(), None), |s| s.page);
            return Ok(Some(Some(self.hand_over_last(&name, page))));
        };
        let (rows, end) =
            Self::read_page(session, &self.connection, &current.plan, &start, size).await?;
        current.next = end.clone().map(Start::After);
        let key_names = current.plan.order.as_ref().map(|o| o.names.clone());
        let previous = current.staged.take();
        let after = current.after.clone();
        if let Some(p) = &previous {
            current.after.clone_from(&p.end);
        }
        let records = self.records(&rows, &name);
        let point = self.point.clone();
        if let Phase::Snapshot {
            copying: Some(c), ..
        } = &mut self.phase
        {
            c.staged = Some(Staged {
                page: records,
                end: end.clone(),
            });
        }
        let entry = self.position.copied.tables.entry(name).or_default();
        entry.key = key_names;
        // The first page is recorded in flight before anything of it is handed out.
        let page = entry.hold_back(&point, after, end, previous);
        let bookmark = Some(self.position.to_json());
        Ok(Some(Some(carrying(page, record_schema(), bookmark))))
    }

    /// `page` as the last page of `table`, with the bookmark after it.
    fn hand_over_last(&mut self, table: &str, mut page: Page) -> Page {
        let point = self.point.clone();
        self.position
            .copied
            .tables
            .entry(table.to_owned())
            .or_default()
            .advance(point, None);
        page.set_bookmark(Some(self.copy_bookmark()));
        page
    }
}

/// The error for a listed table without a usable primary key.
pub(crate) fn no_primary_key(table: &str) -> FaucetError {
    FaucetError::config(
        "tables",
        format!(
            "{table} has no primary key (or one with a FLOAT, DOUBLE, ENUM, SET or JSON \
             column): `faucet replicate` copies a table in primary-key order so that an \
             interrupted copy resumes after its last stored key and the binlog's changes can \
             be matched to the copy. Give {table} a primary key, or leave it out of `tables`"
        ),
    )
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

    fn progress(&mut self) -> &mut Option<CopyProgress> {
        &mut self.progress
    }

    async fn start_progress(&mut self) -> CopyProgress {
        copy_progress::<Mysql>(&self.connection, self.tables_left()).await
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

    /// Ends the snapshot, reads the binlog from C1.
    async fn open_changes(&mut self) -> Result<(), FaucetError> {
        self.phase = Phase::Changes(Box::new(EmptyStream));
        let start = self.position.start.cdc.to_json();
        let stream = self.cdc.open(Some(start), self.options.clone()).await?;
        let filter = Filter::new(
            self.position.copied.clone(),
            self.position.start_point(),
            self.connection.clone(),
        );
        tracing::info!(
            tables = self.tables.len(),
            from = %self.position.start.cdc.position,
            filtered = filter.is_some(),
            "snapshot copied; reading the binlog"
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

    /// The copy reads ahead (its next page is read in the snapshot's transaction, whatever
    /// the sink does); the change stream as it says.
    fn reads_ahead(&self) -> bool {
        match &self.phase {
            Phase::Snapshot { .. } => true,
            Phase::Changes(stream) => stream.reads_ahead(),
        }
    }
}
