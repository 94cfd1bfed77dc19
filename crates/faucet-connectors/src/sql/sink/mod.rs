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
//!   resuming at it would skip every row it vouched for.

pub(crate) mod columns;
mod dialect;
pub(crate) mod fence;
pub(crate) mod keys;
pub(crate) mod token;

use async_trait::async_trait;

use faucet_core::{CommitToken, FaucetError, Page, SinkWriter, fault};

pub(crate) use dialect::SinkDialect;
use fence::WriterFence;

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

/// An open SQL sink: one session, one transaction per page (see the module).
pub(crate) struct SqlSinkWriter<'a, D: SinkDialect> {
    dialect: &'a D,
    /// `None` once a failure left the session in an unknown state.
    conn: Option<D::Conn>,
    /// The target, once it exists.
    table: Option<D::Table>,
    tokens_ready: bool,
    /// The run's lease fence, checked in every page's transaction.
    fence: Option<WriterFence>,
    /// Whether this writer created the target and has not committed a page into it yet.
    created_here: bool,
    scratch: D::Scratch,
}

impl<'a, D: SinkDialect> SqlSinkWriter<'a, D> {
    /// A writer on `conn`, the session `open` checked the target on; `table` is the
    /// target when it exists.
    pub(crate) fn new(
        dialect: &'a D,
        conn: D::Conn,
        table: Option<D::Table>,
        scratch: D::Scratch,
    ) -> Self {
        Self {
            dialect,
            conn: Some(conn),
            table,
            tokens_ready: false,
            fence: None,
            created_here: false,
            scratch,
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

    /// Makes sure the target exists for `page` (creating it when configured), outside any
    /// transaction.
    async fn ensure_table(&mut self, page: &Page) -> Result<(), FaucetError> {
        if self.table.is_some() || page.is_empty() {
            return Ok(());
        }
        let dialect = self.dialect;
        let Some(conn) = self.conn.as_mut() else {
            self.conn()?;
            return Ok(());
        };
        if let Some((table, created)) = dialect.create_target(conn, page, &mut self.scratch).await?
        {
            self.created_here = created;
            dialect
                .ready_target(conn, &table, &mut self.scratch)
                .await?;
            self.table = Some(table);
        }
        Ok(())
    }

    /// After a failed first page into a table this writer created: drops it if it is still
    /// empty, and forgets it, so the next page creates it again.
    async fn undo_create(&mut self) {
        if !std::mem::take(&mut self.created_here) {
            return;
        }
        self.table = None;
        if let Some(conn) = self.conn.as_mut() {
            self.dialect.drop_if_empty(conn, &mut self.scratch).await;
        }
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
        if let Err(e) = self.ensure_table(page).await {
            self.undo_create().await;
            return Err(e);
        }
        self.conn()?;
        let Self {
            conn,
            table,
            fence,
            scratch,
            ..
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
            page,
            token,
            fence: fence.as_ref(),
        };
        let result = page_tx.run(session, table.as_ref(), scratch).await;
        match result {
            Ok(()) => {
                self.created_here = false;
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

/// How many times a page's transaction runs while the server rolls it back for a deadlock
/// or a serialization failure.
const ATTEMPTS: u64 = 5;

/// One page's transaction: what it writes and checks.
struct PageTx<'p, D: SinkDialect> {
    dialect: &'p D,
    page: &'p Page,
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
        table: Option<&D::Table>,
        scratch: &mut D::Scratch,
    ) -> Result<(), (FaucetError, bool)> {
        let mut attempt = 1;
        loop {
            match self.once(conn, table, scratch).await {
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
        table: Option<&D::Table>,
        scratch: &mut D::Scratch,
    ) -> Result<(), (FaucetError, bool)> {
        let dialect = self.dialect;
        let lost = |e: FaucetError| {
            let gone = dialect.is_lost(&e);
            (e, gone)
        };
        dialect.begin(conn).await.map_err(lost)?;
        if let Err(e) = self.statements(conn, table, scratch).await {
            if dialect.is_lost(&e) {
                return Err((e, true));
            }
            if let Err(r) = dialect.rollback(conn).await {
                tracing::warn!(
                    table = %dialect.target_name(),
                    error = %r,
                    "ROLLBACK of a refused page failed; the session is dropped"
                );
                return Err((e, true));
            }
            return Err((e, false));
        }
        fault::point(fault::BEFORE_COMMIT);
        dialect.commit(conn).await.map_err(lost)
    }

    /// The statements of the transaction: the fence check, the rows, the token.
    async fn statements(
        &self,
        conn: &mut D::Conn,
        table: Option<&D::Table>,
        scratch: &mut D::Scratch,
    ) -> Result<(), FaucetError> {
        let dialect = self.dialect;
        if let Some(writer) = self.fence {
            dialect.check_fence(conn, writer).await?;
        }
        if let Some(t) = table.filter(|_| !self.page.is_empty()) {
            dialect.write_rows(conn, t, self.page, scratch).await?;
        } else if !self.page.is_empty() {
            // No table yet (create_table, and no row to take its columns from): a page of
            // only deletes and truncates has nothing to do, a malformed one is an error,
            // not skipped.
            faucet_core::change::check_records(
                self.page,
                dialect.connector(),
                &dialect.target_name(),
            )?;
        }
        if let Some((state_key, token)) = self.token {
            let scope = token::scope(state_key, &dialect.target_name());
            dialect.advance_token(conn, &scope, token).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl<D: SinkDialect> SinkWriter for SqlSinkWriter<'_, D> {
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        if let Some(refusal) = self.dialect.refusal(&self.scratch, false) {
            return Err(refusal);
        }
        if page.is_empty() {
            return Ok(());
        }
        self.write_page(page, None).await
    }

    /// Each page commits in [`SinkWriter::write`]; nothing is left to flush.
    async fn flush(&mut self) -> Result<(), FaucetError> {
        Ok(())
    }

    async fn write_committed(
        &mut self,
        page: &Page,
        scope: &str,
        token: &CommitToken,
    ) -> Result<(), FaucetError> {
        if let Some(refusal) = self.dialect.refusal(&self.scratch, true) {
            return Err(refusal);
        }
        if page.is_empty() && self.table.is_none() {
            // No token for a table that does not exist yet (see the module); the run's
            // state store keeps the bookmark, the next page's token carries it on.
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
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        if self.table.is_none() {
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
    async fn fence(
        &mut self,
        scope: &str,
        fence: u64,
        ttl: std::time::Duration,
        take_over: bool,
    ) -> Result<bool, FaucetError> {
        let dialect = self.dialect;
        if dialect.refusal(&self.scratch, false).is_some() {
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

    async fn last_committed_token(
        &mut self,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        let dialect = self.dialect;
        if let Some(refusal) = dialect.refusal(&self.scratch, true) {
            return Err(refusal);
        }
        let target = dialect.target_name();
        let scope = token::scope(scope, &target);
        let last = dialect.last_token(self.conn()?, &scope).await?;
        if last.is_some() && self.table.is_none() {
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
}
