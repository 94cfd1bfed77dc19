//! The SQL sink engine: one implementation of a SQL sink's writer ([`SqlSinkWriter`]) for
//! every database, each database a [`SinkDialect`].
//!
//! A page is one transaction. Before it, outside any transaction (DDL commits implicitly in
//! MySQL, and a failed DDL would abort PostgreSQL's transaction): the commit token table
//! (when a token is asked for) and the target (`create_table`). In it, in this order: the
//! writer fence check ([`fence`]), the rows ([`SinkDialect::write_rows`]), the commit token
//! ([`token`]), the [`fault::BEFORE_COMMIT`] point, `COMMIT`.
//!
//! * A refused page is rolled back at once (its locks, the fence row among them, must not
//!   stay while the writer is open); a rollback that fails drops the session.
//! * No blind retries: when the session is lost around a statement or `COMMIT` the outcome
//!   is unknown, so the write fails and the writer refuses further pages instead of writing
//!   the page again; the run loop re-delivers from the last durable bookmark, where the
//!   commit token or the upsert key absorbs the replay.
//! * A table this writer created whose first page failed is dropped again if still empty,
//!   so a refused first page leaves no table behind.
//! * An empty page's token is not stored while the target does not exist yet
//!   (`create_table` waits for rows): a token then would vouch for a table that does not
//!   exist, and a restart would take it for a dropped table's.
//! * A token whose target table is gone is forgotten ([`SinkWriter::last_committed_token`]):
//!   resuming at it would skip every row it vouched for (a sink of one table; a routed
//!   sink's targets are not all known before records name them, so its token is kept).
//!
//! **Routing** ([`route`]): a sink whose `table` is a template or that has `tables:` writes
//! each source table's change records into its own target. The engine splits each page by
//! the records' `table`, in source order within each table; meets each target once (the
//! dialect's [`SinkDialect::for_target`], opened with [`SinkDialect::open_target`] outside
//! any transaction, created from its table's first records with `create_table`); and writes
//! every target of the page in the **one** transaction, with the one commit token and fence
//! check — so the atomic watermark holds across tables. Two source tables rendered to one
//! target are refused naming both.
//!
//! **Schema changes** ([`schema`]): an upsert target applies a schema-change record (`op:
//! "s"`) where it is in the page: the target's records are cut at it
//! ([`faucet_core::change::segments`]), the rows before it are written, its DDL runs, then
//! the rows after it — all in the page's one transaction, with the commit token. Where DDL
//! is not transactional (MySQL: [`SinkDialect::transactional_ddl`]), the changes are applied
//! ahead of the page's transaction instead, each a committed step that checks the catalog
//! first, and the rows before a change are written in the shape after it ([`schema_ahead`]).

pub(crate) mod columns;
mod dialect;
pub(crate) mod drift;
pub(crate) mod fence;
pub(crate) mod keys;
pub(crate) mod route;
pub(crate) mod schema;
pub(crate) mod schema_ahead;
pub(crate) mod token;

use std::borrow::Cow;
use std::collections::HashMap;

use async_trait::async_trait;

use faucet_core::change::Segment;
use faucet_core::keys::TableKeys;
use faucet_core::{Commit, CommitToken, FaucetError, Fence, Page, PageBuilder, SinkWriter, fault};

pub(crate) use dialect::{BeginFailed, SinkDialect};
use fence::WriterFence;

/// One target of a writer: the sink's own table, or a routed target met in the records.
struct Slot<D: SinkDialect> {
    /// A routed target's dialect ([`SinkDialect::for_target`]); `None`: the sink's own.
    own: Option<D>,
    /// A routed target's source table and name, for messages and the one-target rule.
    routed: Option<(String, String)>,
    /// The target, once it exists.
    table: Option<D::Table>,
    /// Whether this writer created the target and has not committed a page into it yet.
    created_here: bool,
    scratch: D::Scratch,
}

/// The sqlx error under a [`FaucetError::Write`], if any: what the dialects on sqlx
/// (PostgreSQL, SQLite) classify.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) fn sqlx_error(e: &FaucetError) -> Option<&sqlx::Error> {
    match e {
        FaucetError::Write {
            source: Some(s), ..
        } => s.downcast_ref::<sqlx::Error>(),
        _ => None,
    }
}

/// A statement of a page that failed with `e` (not a bad value): [`FaucetError::Write`] of
/// `connector` saying `what` failed on `target`, or, when `lost` (the session dropped while
/// it ran), that whether the page committed is unknown and the page is not retried. The
/// one wording of the MySQL and PostgreSQL sinks.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn statement_failed(
    connector: &str,
    what: &str,
    target: &dyn std::fmt::Display,
    lost: bool,
    e: faucet_core::BoxError,
) -> FaucetError {
    let message = if lost {
        format!(
            "{what} on {target}: the session was lost, so whether the page committed is \
             unknown; it is not retried (the run loop re-delivers it from the last bookmark)"
        )
    } else {
        format!("{what} on {target} failed")
    };
    FaucetError::write(connector, message, Some(e))
}

/// An open SQL sink: one session, one transaction per page (see the module).
pub(crate) struct SqlSinkWriter<'a, D: SinkDialect> {
    dialect: &'a D,
    /// `None` once a failure left the session in an unknown state.
    conn: Option<D::Conn>,
    tokens_ready: bool,
    /// The run's lease fence, checked in every page's transaction.
    fence: Option<WriterFence>,
    /// The sink's one table (one slot), or the routed targets met so far.
    slots: Vec<Slot<D>>,
    /// A routed sink's source table → its slot.
    by_source: HashMap<String, usize>,
    /// A routed sink's session scratch (the server's settings), that each target's starts
    /// from; `None` for a sink of one table.
    base: Option<D::Scratch>,
    /// The source's keys of its tables ([`SinkWriter::source_keys`]).
    source_keys: Vec<TableKeys>,
    /// The last page's records per target ([`SinkWriter::written_targets`]).
    written: Vec<(String, u64)>,
}

impl<'a, D: SinkDialect> SqlSinkWriter<'a, D> {
    /// A writer of one table on `conn`, the session `open` checked the target on; `table` is
    /// the target when it exists.
    pub(crate) fn new(
        dialect: &'a D,
        conn: D::Conn,
        table: Option<D::Table>,
        scratch: D::Scratch,
    ) -> Self {
        Self {
            dialect,
            conn: Some(conn),
            tokens_ready: false,
            fence: None,
            slots: vec![Slot {
                own: None,
                routed: None,
                table,
                created_here: false,
                scratch,
            }],
            by_source: HashMap::new(),
            base: None,
            source_keys: Vec::new(),
            written: Vec::new(),
        }
    }

    /// A routed writer ([`SinkDialect::route`]) on `conn`; its targets are opened as the
    /// records name them, each from `base`, the session's scratch.
    pub(crate) fn routed(dialect: &'a D, conn: D::Conn, base: D::Scratch) -> Self {
        Self {
            dialect,
            conn: Some(conn),
            tokens_ready: false,
            fence: None,
            slots: Vec::new(),
            by_source: HashMap::new(),
            base: Some(base),
            source_keys: Vec::new(),
            written: Vec::new(),
        }
    }

    fn conn(&mut self) -> Result<&mut D::Conn, FaucetError> {
        let (connector, target) = (self.dialect.connector(), self.dialect.target_name());
        self.conn.as_mut().ok_or_else(|| {
            FaucetError::write(
                connector,
                format!(
                    "an earlier write to {target} failed and left the session unusable; \
                     reopen the sink (the next run resumes from the last durable bookmark)"
                ),
                None,
            )
        })
    }

    /// Why nothing may be written into any target met so far ([`SinkDialect::refusal`]).
    fn refusal(&self, effectively_once: bool) -> Option<FaucetError> {
        self.slots.iter().find_map(|s| {
            s.own
                .as_ref()
                .unwrap_or(self.dialect)
                .refusal(&s.scratch, effectively_once)
        })
    }

    /// The page's records per target: the whole page into the one table, or (routed) the
    /// records of each source table into its slot, opening the targets not met before.
    async fn split<'p>(
        &mut self,
        page: &'p Page,
        effectively_once: bool,
    ) -> Result<Vec<(usize, Cow<'p, Page>)>, FaucetError> {
        let dialect = self.dialect;
        let Some(route) = dialect.route() else {
            return Ok(vec![(0, Cow::Borrowed(page))]);
        };
        if page.is_empty() {
            return Ok(Vec::new());
        }
        let connector = self.dialect.connector();
        let groups = match faucet_core::change::rows_by_table(page) {
            Ok(Some(groups)) => groups,
            Ok(None) => {
                return Err(FaucetError::data(
                    connector,
                    self.dialect.target_name(),
                    "the records are not change records (no `op`, `table`, `before`, \
                     `after`): a sink routed by source table (`table` with a placeholder, or \
                     `tables:`) takes a change source's records; write plain rows into one \
                     fixed `table`",
                ));
            }
            Err(i) => {
                return Err(FaucetError::data(
                    connector,
                    format!("{}, page row {}", self.dialect.target_name(), i + 1),
                    "a change record without its source `table`, which routing needs",
                ));
            }
        };
        let mut out = Vec::with_capacity(groups.len());
        let whole = groups.len() == 1;
        for (source, rows) in groups {
            let slot = match self.by_source.get(&source) {
                Some(&s) => s,
                None => self.open_slot(route, &source, effectively_once).await?,
            };
            let part = if whole {
                Cow::Borrowed(page)
            } else {
                Cow::Owned(sub_page(page, &rows))
            };
            out.push((slot, part));
        }
        Ok(out)
    }

    /// Opens the target of `source` ([`route::Route::resolve`], [`SinkDialect::for_target`],
    /// [`SinkDialect::open_target`]), refusing one that another source table already writes.
    async fn open_slot(
        &mut self,
        route: &route::Route,
        source: &str,
        effectively_once: bool,
    ) -> Result<usize, FaucetError> {
        let dialect = self.dialect;
        let connector = dialect.connector();
        let target = route.resolve(connector, source, &self.source_keys, self.slots.len())?;
        if let Some((other, _)) = self
            .slots
            .iter()
            .filter_map(|s| s.routed.as_ref())
            .find(|(_, name)| *name == target.name)
        {
            return Err(FaucetError::data(
                connector,
                format!("table {}", target.name),
                format!(
                    "the records of `{source}` and of `{other}` both route to {}: two source \
                     tables in one target overwrite each other's rows; give `{source}` its \
                     own target in `tables:`, or use a template that keeps them apart \
                     (`{{schema}}_{{table}}`)",
                    target.name
                ),
            ));
        }
        let own = dialect.for_target(&target)?;
        self.conn()?;
        let (Some(conn), Some(base)) = (self.conn.as_mut(), self.base.as_ref()) else {
            return Err(FaucetError::write(
                connector,
                "a routed writer without its session",
                None,
            ));
        };
        let (table, scratch) = own.open_target(conn, base).await?;
        if let Some(refusal) = own.refusal(&scratch, effectively_once) {
            return Err(refusal);
        }
        tracing::info!(
            sink = connector,
            source_table = source,
            target = %target.name,
            write_mode = ?target.write_mode,
            key = ?target.key,
            "routing a source table to its target"
        );
        self.slots.push(Slot {
            own: Some(own),
            routed: Some((source.to_owned(), target.name)),
            table,
            created_here: false,
            scratch,
        });
        let at = self.slots.len() - 1;
        self.by_source.insert(source.to_owned(), at);
        Ok(at)
    }

    /// Makes sure the target of `slot` exists for `page` (creating it when configured),
    /// outside any transaction.
    async fn ensure_table(&mut self, slot: usize, page: &Page) -> Result<(), FaucetError> {
        let dialect = self.dialect;
        let Some(conn) = self.conn.as_mut() else {
            self.conn()?;
            return Ok(());
        };
        let Some(s) = self.slots.get_mut(slot) else {
            return Ok(());
        };
        if s.table.is_some() || page.is_empty() || only_schema_changes(page) {
            return Ok(());
        }
        let d = s.own.as_ref().unwrap_or(dialect);
        if let Some((table, created)) = d.create_target(conn, page, &mut s.scratch).await? {
            s.created_here = created;
            d.ready_target(conn, &table, &mut s.scratch).await?;
            s.table = Some(table);
        }
        Ok(())
    }

    /// After a failed page: drops each table this writer created for it if it is still
    /// empty, and forgets it, so the next page creates it again.
    async fn undo_create(&mut self) {
        let dialect = self.dialect;
        for s in &mut self.slots {
            if !std::mem::take(&mut s.created_here) {
                continue;
            }
            s.table = None;
            if let Some(conn) = self.conn.as_mut() {
                let d = s.own.as_ref().unwrap_or(dialect);
                d.drop_if_empty(conn, &mut s.scratch).await;
            }
        }
    }

    /// Applies the schema changes of each target's records ahead of the page's transaction
    /// ([`schema_ahead`]): the records to write instead.
    async fn schema_ahead<'p>(
        &mut self,
        parts: Vec<(usize, Cow<'p, Page>)>,
    ) -> Result<Vec<(usize, Cow<'p, Page>)>, FaucetError> {
        let dialect = self.dialect;
        let Self {
            conn, slots, fence, ..
        } = self;
        let mut out = Vec::with_capacity(parts.len());
        for (slot, part) in parts {
            let (Some(conn), Some(s)) = (conn.as_mut(), slots.get_mut(slot)) else {
                out.push((slot, part));
                continue;
            };
            let d = s.own.as_ref().unwrap_or(dialect);
            let ahead = schema_ahead::apply_ahead(
                d,
                conn,
                &mut s.table,
                &mut s.scratch,
                &part,
                fence.as_ref(),
            )
            .await?;
            out.push((slot, ahead.map_or(part, Cow::Owned)));
        }
        Ok(out)
    }

    /// Writes `page` (and the token) in one transaction.
    async fn write_page(
        &mut self,
        page: &Page,
        token: Option<(&str, &CommitToken)>,
    ) -> Result<(), FaucetError> {
        let dialect = self.dialect;
        if token.is_some() && !self.tokens_ready {
            dialect.ensure_tokens(self.conn()?).await?;
            self.tokens_ready = true;
        }
        let parts = self.split(page, token.is_some()).await?;
        for (slot, part) in &parts {
            if let Err(e) = self.ensure_table(*slot, part).await {
                self.undo_create().await;
                return Err(e);
            }
        }
        self.conn()?;
        let parts = if dialect.transactional_ddl() {
            parts
        } else {
            match self.schema_ahead(parts).await {
                Ok(parts) => parts,
                Err(e) => {
                    self.undo_create().await;
                    return Err(e);
                }
            }
        };
        let Self {
            conn, slots, fence, ..
        } = self;
        let Some(session) = conn.as_mut() else {
            return Err(FaucetError::write(
                dialect.connector(),
                "the session is unusable",
                None,
            ));
        };
        let page_tx = PageTx {
            dialect,
            parts: &parts,
            token,
            fence: fence.as_ref(),
        };
        let result = page_tx.run(session, slots).await;
        match result {
            Ok(()) => {
                for s in &mut self.slots {
                    s.created_here = false;
                }
                self.written = parts
                    .iter()
                    .filter(|(_, part)| !part.is_empty())
                    .map(|(slot, part)| {
                        let name = match self.slots.get(*slot).and_then(|s| s.routed.as_ref()) {
                            Some((_, target)) => target.clone(),
                            None => dialect.target_name(),
                        };
                        (name, part.len() as u64)
                    })
                    .collect();
                Ok(())
            }
            Err((e, drop_session)) => {
                if drop_session {
                    self.conn = None;
                }
                self.undo_create().await;
                Err(dialect.explain(e, self.fence.as_ref()).await)
            }
        }
    }
}

/// Whether every record of `page` is a schema change: nothing to make a table from (a file
/// or query source's added field, [`faucet_core::change::NewFields`], comes in a page of its
/// own; a change source's comes with the change after it). The table is made from the rows
/// that follow, in their shape.
fn only_schema_changes(page: &Page) -> bool {
    faucet_core::change::ChangeLayout::of(page.schema())
        .is_some_and(|l| page.rows().all(|r| l.is_schema(r.values())))
}

/// The rows `rows` of `page`, in that order, as a page of their own (with its bookmark).
fn sub_page(page: &Page, rows: &[usize]) -> Page {
    let mut b = PageBuilder::new(page.schema().clone(), rows.len());
    for &r in rows {
        if let Some(row) = page.row(r) {
            b.push_row(row.values().iter().cloned());
        }
    }
    b.finish(page.bookmark().cloned())
}

/// How many times a page's transaction runs while the server rolls it back for a deadlock
/// or a serialization failure.
const ATTEMPTS: u64 = 5;

/// One page's transaction: what it writes and checks.
struct PageTx<'p, D: SinkDialect> {
    /// The sink as configured: the session, the token and the fence are its.
    dialect: &'p D,
    /// The page's records per target slot.
    parts: &'p [(usize, Cow<'p, Page>)],
    /// The atomic watermark's token, under its state key.
    token: Option<(&'p str, &'p CommitToken)>,
    /// The writer's fence, checked first.
    fence: Option<&'p WriterFence>,
}

impl<D: SinkDialect> PageTx<'_, D> {
    /// Runs the transaction, again while the server rolls it back for a deadlock or a
    /// serialization failure ([`SinkDialect::is_retryable`]; at most [`ATTEMPTS`] times).
    /// On failure, the error and whether the session must be dropped: lost, or its
    /// transaction could not be rolled back.
    async fn run(
        &self,
        conn: &mut D::Conn,
        slots: &mut [Slot<D>],
    ) -> Result<(), (FaucetError, bool)> {
        let mut attempt = 1;
        loop {
            match self.once(conn, slots).await {
                Err((e, false)) if attempt < ATTEMPTS && self.dialect.is_retryable(&e) => {
                    tracing::debug!(
                        table = %self.dialect.target_name(),
                        attempt,
                        error = %e,
                        "the server rolled the page back (a deadlock or serialization \
                         failure); running it again"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
                    attempt += 1;
                }
                done => return done,
            }
        }
    }

    /// One attempt of [`PageTx::run`].
    async fn once(
        &self,
        conn: &mut D::Conn,
        slots: &mut [Slot<D>],
    ) -> Result<(), (FaucetError, bool)> {
        let dialect = self.dialect;
        let lost = |e: FaucetError| {
            let gone = dialect.is_lost(&e);
            (e, gone)
        };
        match dialect.begin_page(conn, self.fence).await {
            Ok(()) => {}
            Err(BeginFailed::Begin(e)) => return Err(lost(e)),
            Err(BeginFailed::Begun(e)) => return Err(self.refused(conn, e).await),
        }
        let altered = match self.statements(conn, slots).await {
            Ok(altered) => altered,
            Err(e) => return Err(self.refused(conn, e).await),
        };
        fault::point(fault::BEFORE_COMMIT);
        dialect.commit(conn).await.map_err(lost)?;
        // The targets a schema change altered are what the catalog holds now.
        for (slot, table) in altered {
            if let Some(s) = slots.get_mut(slot) {
                s.table = Some(table);
            }
        }
        Ok(())
    }

    /// Rolls a refused page back: the error, and whether the session must be dropped.
    async fn refused(&self, conn: &mut D::Conn, e: FaucetError) -> (FaucetError, bool) {
        let dialect = self.dialect;
        {
            if dialect.is_lost(&e) {
                return (e, true);
            }
            if let Err(r) = dialect.rollback(conn).await {
                tracing::warn!(
                    table = %dialect.target_name(),
                    error = %r,
                    "ROLLBACK of a refused page failed; the session is dropped"
                );
                return (e, true);
            }
            (e, false)
        }
    }

    /// The statements of the transaction after the fence check: the rows of each target (cut
    /// at its schema changes, [`schema`]), the token. Returns the targets a schema change
    /// altered, as they are now (the slots keep theirs until the page commits).
    async fn statements(
        &self,
        conn: &mut D::Conn,
        slots: &mut [Slot<D>],
    ) -> Result<Vec<(usize, D::Table)>, FaucetError> {
        let dialect = self.dialect;
        let mut altered = Vec::new();
        for (slot, part) in self.parts {
            let Some(s) = slots.get_mut(*slot) else {
                continue;
            };
            let d = s.own.as_ref().unwrap_or(dialect);
            let segments = match schema::apply_mode(d, s.table.as_ref()) {
                schema::SchemaApply::Rows(_) => Vec::new(),
                _ => {
                    let all: Vec<usize> = (0..part.len()).collect();
                    faucet_core::change::segments(part, &all)
                }
            };
            if segments.len() > 1 || matches!(segments.first(), Some(Segment::Schema(_))) {
                if let Some(t) = self.segments(conn, s, part, &segments).await? {
                    altered.push((*slot, t));
                }
                continue;
            }
            if let Some(t) = s.table.as_ref().filter(|_| !part.is_empty()) {
                d.write_rows(conn, t, part, &mut s.scratch).await?;
            } else if !part.is_empty() {
                // No table yet (create_table, and no row to take its columns from): a page
                // of only deletes and truncates has nothing to do, a malformed one is an
                // error, not skipped.
                faucet_core::change::check_records(part, d.connector(), &d.target_name())?;
            }
        }
        if let Some((state_key, token)) = self.token {
            let scope = token::scope(state_key, &dialect.target_name());
            dialect.advance_token(conn, &scope, token).await?;
        }
        Ok(altered)
    }

    /// Writes one target's records cut at its schema changes, in order: each run of rows
    /// into the target as it is at that point, each schema change applied between
    /// ([`schema::apply`]). The target as altered, when a change ran a statement.
    async fn segments(
        &self,
        conn: &mut D::Conn,
        s: &mut Slot<D>,
        part: &Page,
        segments: &[Segment],
    ) -> Result<Option<D::Table>, FaucetError> {
        let d = s.own.as_ref().unwrap_or(self.dialect);
        let mut current: Option<D::Table> = None;
        for segment in segments {
            let table = current.as_ref().or(s.table.as_ref());
            match segment {
                Segment::Rows(rows) => {
                    let rows = sub_page(part, rows);
                    match table {
                        Some(t) => d.write_rows(conn, t, &rows, &mut s.scratch).await?,
                        None => faucet_core::change::check_records(
                            &rows,
                            d.connector(),
                            &d.target_name(),
                        )?,
                    }
                }
                Segment::Schema(row) => {
                    let (change, position) =
                        schema::read(part, *row, d.connector(), &d.target_name())?;
                    // No target yet (`create_table` waits for rows): it is created with the
                    // shape of the rows it first gets.
                    let Some(t) = table else { continue };
                    if let Some(t) =
                        schema::apply(d, conn, t, &mut s.scratch, &change, &position).await?
                    {
                        current = Some(t);
                    }
                }
            }
        }
        Ok(current)
    }
}

#[async_trait]
impl<D: SinkDialect> SinkWriter for SqlSinkWriter<'_, D> {
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        self.written.clear();
        if let Some(refusal) = self.refusal(false) {
            return Err(refusal);
        }
        if page.is_empty() {
            return Ok(());
        }
        self.write_page(page, None).await
    }

    async fn write_committed(&mut self, page: &Page, commit: &Commit) -> Result<(), FaucetError> {
        let (scope, token) = (commit.scope.as_str(), &commit.token);
        self.written.clear();
        if let Some(refusal) = self.refusal(true) {
            return Err(refusal);
        }
        if page.is_empty() && self.slots.first().is_some_and(|s| s.table.is_none()) {
            // No token for a table that does not exist yet (see the module); the run's
            // state store keeps the bookmark, the next page's token carries it on. (A
            // routed writer before its first target: the same.)
            return Ok(());
        }
        self.write_page(page, Some((scope, token))).await
    }

    /// Whether the target table has a row (`Some(false)` while it does not exist yet), so
    /// the run loop's lost-bookmark guard can refuse to append a whole source again into a
    /// table that already holds it. The guard only asks at-least-once runs: a keyed upsert
    /// target absorbs the replay.
    ///
    /// # Errors
    /// [`FaucetError::Write`] when the table cannot be read.
    ///
    /// A routed sink cannot tell (`None`): its targets are known only once records name them.
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        if self.base.is_some() {
            return Ok(None);
        }
        if self.slots.first().is_none_or(|s| s.table.is_none()) {
            return Ok(Some(false));
        }
        let dialect = self.dialect;
        Ok(Some(dialect.holds_data(self.conn()?).await?))
    }

    /// Checks `fence` in every later page's transaction ([`fence`]): a page of a writer
    /// whose lease a newer run took is rolled back. Creates the fence table now, outside
    /// any page's transaction, raises the scope's fence to `fence` (or, with `take_over`,
    /// sets it), and has the server abort a page a writer stalled mid-page leaves open for
    /// longer than `ttl` ([`SinkDialect::abort_stalled_pages_after`]), rather than let its
    /// locks block the run that took over. `Ok(false)`, and no fence table, when nothing
    /// will be written ([`SinkDialect::refusal`]).
    ///
    /// # Errors
    /// [`LeaseError::Fenced`](faucet_core::state::LeaseError::Fenced) when the table holds a
    /// larger fence and not `take_over`; [`FaucetError::Write`] when the fence table cannot
    /// be created or the timeout set.
    async fn fence(&mut self, order: &Fence) -> Result<bool, FaucetError> {
        let (scope, fence, ttl, take_over) = (
            order.scope.as_str(),
            order.number,
            order.ttl,
            order.take_over,
        );
        let dialect = self.dialect;
        if self.refusal(false).is_some() {
            return Ok(false);
        }
        let writer = WriterFence {
            key: scope.to_owned(),
            scope: token::scope(scope, &dialect.target_name()),
            fence,
        };
        let conn = self.conn()?;
        dialect.ensure_fences(conn).await?;
        if take_over {
            dialect.set_fence(conn, &writer).await?;
        } else {
            dialect.check_fence(conn, &writer).await?;
        }
        dialect.abort_stalled_pages_after(conn, ttl).await?;
        self.fence = Some(writer);
        Ok(true)
    }

    /// The tables the last page's transaction wrote: the sink's table, or each routed
    /// target by its name (`replica.orders`).
    fn written_targets(&self) -> &[(String, u64)] {
        &self.written
    }

    async fn last_committed_token(
        &mut self,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        let dialect = self.dialect;
        if let Some(refusal) = self.refusal(true) {
            return Err(refusal);
        }
        let target = dialect.target_name();
        let scope = token::scope(scope, &target);
        let last = dialect.last_token(self.conn()?, &scope).await?;
        let single_gone =
            self.base.is_none() && self.slots.first().is_none_or(|s| s.table.is_none());
        if last.is_some() && single_gone {
            // The rows the token vouches for went with their table: resuming at it would
            // skip them all. Forget it, so the run resumes from its state store (from the
            // start when that was reset too) and its sequence starts over.
            dialect.forget_token(self.conn()?, &scope).await?;
            tracing::warn!(
                %target,
                scope,
                "the target table is gone but its commit token was left: the token is \
                 forgotten, and the run resumes from the state store's bookmark"
            );
            return Ok(None);
        }
        Ok(last)
    }

    fn source_keys(&mut self, keys: &[TableKeys]) {
        self.source_keys = keys.to_vec();
    }
}
