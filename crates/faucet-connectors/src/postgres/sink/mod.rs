//! The `postgres` sink: writes pages into one table, each page in one transaction.
//!
//! * `append`: `COPY target (fields) FROM STDIN` in text format (the fastest way in).
//!   Change records are appended as rows of a change table (op, table, lsn, commit_ts,
//!   before, after, unchanged_toast): an audit log of the source.
//! * `upsert` by `key`: change records are applied (`d` deletes by the key in `before`,
//!   `c`/`u`/`r` upsert `after`, `t` truncates the table), plain rows upsert themselves; the
//!   page is collapsed to the last operation per key in source order, so several changes to
//!   one key in a page are applied as if one by one (cases 14, 15), and a column named in
//!   `unchanged_toast` keeps its stored value (case 01). See its `changes` module.
//! * Atomic watermark ([`SinkWriter::write_committed`]): the page's rows and the commit token
//!   (`faucet_commit_tokens` in the target's schema) commit in one transaction; the stored
//!   sequence only moves forward, a stale writer's page is rolled back with an error.
//! * No blind retries: when the session is lost around a COMMIT the outcome is unknown, so
//!   the write fails (and the writer refuses further pages) instead of writing the page
//!   again; the run loop re-delivers from the last durable bookmark, where the commit token
//!   or the upsert key absorbs the replay.
//! * Values are written in the text input form of their types (its `encode` module), so numerics,
//!   NaN and infinities, arrays, bytea and jsonb round-trip exactly (cases 04, 22, 23, 24).
//!   A value the column cannot hold is a [`FaucetError::Data`] naming table, column and row.
//!
//! Capabilities: `atomic_watermark` always; `keyed_upsert` with `write_mode: upsert`.

mod changes;
mod config;
mod encode;
mod fence;
mod nul;
mod table;
mod token;
mod write;

use async_trait::async_trait;
use sqlx::Connection as _;
use sqlx::postgres::PgConnection;

use faucet_core::{CommitToken, FaucetError, Page, Sink, SinkCapabilities, SinkWriter, fault};

pub use config::{PostgresSinkConfig, ValidatedSinkConfig, WriteMode};
pub use nul::NulBytes;

use super::config::CONNECTOR;
use super::connection::PostgresUrl;
use super::ident::TableName;
use table::TargetTable;
use write::{Buffers, Target};

/// The `postgres` sink. Built from a validated [`PostgresSinkConfig`] without I/O;
/// [`Sink::open`] and [`Sink::check`] connect.
pub struct PostgresSink {
    config: PostgresSinkConfig,
    connection: PostgresUrl,
    table: TableName,
    tokens: TableName,
    /// The writer-fence table beside it ([`fence::FENCES`]).
    fences: TableName,
}

impl std::fmt::Debug for PostgresSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSink")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PostgresSink {
    /// A sink for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`PostgresSinkConfig::validate`].
    pub fn new(config: PostgresSinkConfig) -> Result<Self, FaucetError> {
        Ok(Self::from_validated(config.validate()?))
    }

    /// A sink for a config [`PostgresSinkConfig::validate`] accepted (no I/O, nothing parsed
    /// again).
    pub fn from_validated(validated: ValidatedSinkConfig) -> Self {
        let ValidatedSinkConfig {
            config,
            connection,
            table,
        } = validated;
        let tokens = table.sibling(token::TOKENS);
        let fences = table.sibling(fence::FENCES);
        Self {
            config,
            connection,
            table,
            tokens,
            fences,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PostgresSinkConfig {
        &self.config
    }

    fn upsert_key(&self) -> &[String] {
        match self.config.write_mode {
            WriteMode::Upsert => &self.config.key,
            WriteMode::Append => &[],
        }
    }

    /// Checks an existing table against the config: the key columns exist and, for upsert,
    /// a primary key or unique index covers exactly them.
    async fn verify(
        &self,
        conn: &mut PgConnection,
        table: &TargetTable,
    ) -> Result<(), FaucetError> {
        for (i, k) in self.config.key.iter().enumerate() {
            if !table.columns.contains(k) {
                return Err(FaucetError::config(
                    format!("key[{i}]"),
                    format!(
                        "`{k}` is not a column of {} (columns: {})",
                        self.table,
                        table.columns.join(", ")
                    ),
                ));
            }
        }
        if self.config.write_mode == WriteMode::Upsert
            && !table::has_unique_key(conn, &self.table, &self.config.key).await?
        {
            return Err(FaucetError::config(
                "key",
                format!(
                    "upsert needs a primary key or unique index on exactly ({}) of {}; add \
                     one (`ALTER TABLE {} ADD PRIMARY KEY ({})`) or change `key`",
                    self.config.key.join(", "),
                    self.table,
                    self.table.quoted(),
                    self.config.key.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl Sink for PostgresSink {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    fn capabilities(&self) -> SinkCapabilities {
        SinkCapabilities {
            atomic_watermark: true,
            keyed_upsert: self.config.write_mode == WriteMode::Upsert
                && !self.config.key.is_empty(),
        }
    }

    /// `postgres host:port/database table schema.table`: no user, no password.
    fn target(&self) -> Option<String> {
        Some(format!(
            "{CONNECTOR} {}:{}/{} table {}",
            self.connection.host(),
            self.connection.port(),
            self.connection.database(),
            self.table
        ))
    }

    /// Connects, and checks the table (see [`PostgresSinkConfig`]); a missing table is
    /// created with the first page when `create_table` is set.
    ///
    /// # Errors
    /// [`FaucetError::Connect`]; [`FaucetError::Write`] when the table is missing and
    /// `create_table` is off; [`FaucetError::Config`] when the key does not fit the table.
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        let mut conn = self.connection.open_session(CONNECTOR).await?;
        let table = table::load(&mut conn, &self.table).await?;
        match &table {
            Some(t) => self.verify(&mut conn, t).await?,
            None if !self.config.create_table => {
                return Err(missing_table(&self.table));
            }
            None => {}
        }
        let mut writer = PostgresSinkWriter {
            sink: self,
            conn: Some(conn),
            table,
            stage_ready: false,
            tokens_ready: false,
            fence: None,
            created_here: false,
            source_table: None,
            bufs: Buffers::default(),
        };
        writer.ensure_stage().await?;
        Ok(Box::new(writer))
    }

    /// Connects; checks that the table exists (or may be created), fits the key, and that
    /// the role may write it (INSERT; UPDATE and DELETE for upsert).
    ///
    /// # Errors
    /// The first failing prerequisite, with its fix.
    async fn check(&self) -> Result<(), FaucetError> {
        let mut conn = self.connection.open_session(CONNECTOR).await?;
        let Some(t) = table::load(&mut conn, &self.table).await? else {
            if self.config.create_table {
                return Ok(());
            }
            return Err(missing_table(&self.table));
        };
        self.verify(&mut conn, &t).await?;
        let privileges: &[&str] = match self.config.write_mode {
            WriteMode::Append => &["INSERT"],
            WriteMode::Upsert => &["INSERT", "UPDATE", "DELETE"],
        };
        for p in privileges {
            let ok: bool = sqlx::query_scalar("SELECT has_table_privilege($1, $2)")
                .bind(self.table.quoted())
                .bind(*p)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| {
                    table::write_err(format!("cannot check privileges on {}", self.table), e)
                })?;
            if !ok {
                return Err(FaucetError::write(
                    CONNECTOR,
                    format!(
                        "the role has no {p} privilege on {}; GRANT {p} ON {} TO <role>",
                        self.table,
                        self.table.quoted()
                    ),
                    None,
                ));
            }
        }
        Ok(())
    }

    /// Checks that an existing table has a column for every field of `schema` (what
    /// `append` writes, and `upsert` of plain rows): for change records appended as rows,
    /// the audit columns (`op`, `table`, `lsn`, `commit_ts`, `before`, `after`,
    /// `unchanged_toast`). Change records applied by `upsert` write the source table's
    /// columns, which only the data tells, so they pass; a missing table is
    /// [`Sink::check`]'s to report.
    ///
    /// # Errors
    /// [`FaucetError::Write`] naming the missing columns and the `ALTER TABLE` that adds
    /// them.
    async fn check_schema(&self, schema: &faucet_core::Schema) -> Result<(), FaucetError> {
        if !crate::sql::write::checks_columns(self.config.write_mode, schema) {
            return Ok(());
        }
        let mut conn = self.connection.open_session(CONNECTOR).await?;
        let Some(t) = table::load(&mut conn, &self.table).await? else {
            return Ok(());
        };
        match crate::sql::write::missing_columns(
            CONNECTOR,
            schema,
            |name| t.columns.iter().any(|c| c == name),
            (&self.table, &self.table.quoted()),
            |f| {
                format!(
                    "{} {}",
                    crate::sql::ident::quote_ident(&f.name),
                    crate::postgres::types::sql_type_of(&f.data_type)
                )
            },
        ) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn missing_table(name: &TableName) -> FaucetError {
    FaucetError::write(
        CONNECTOR,
        format!(
            "table {name} does not exist (names are case-sensitive and matched exactly); \
             create it, or set `create_table: true` to create it from the records"
        ),
        None,
    )
}

/// An open [`PostgresSink`]: one session, one transaction per page.
struct PostgresSinkWriter<'a> {
    sink: &'a PostgresSink,
    /// `None` once a failure left the session in an unknown state.
    conn: Option<PgConnection>,
    table: Option<TargetTable>,
    stage_ready: bool,
    tokens_ready: bool,
    /// The run's lease fence, checked in every page's transaction ([`fence`]).
    fence: Option<fence::WriterFence>,
    /// Whether this writer created the target and has not committed a page into it yet: a
    /// failure then drops the (still empty) table again, so a refused first page leaves no
    /// table behind.
    created_here: bool,
    /// The `table` of the change records written so far.
    source_table: Option<String>,
    bufs: Buffers,
}

impl PostgresSinkWriter<'_> {
    fn conn(&mut self) -> Result<&mut PgConnection, FaucetError> {
        self.conn.as_mut().ok_or_else(|| {
            FaucetError::write(
                CONNECTOR,
                format!(
                    "an earlier write to {} failed and left the session unusable; reopen the \
                     sink (the next run resumes from the last durable bookmark)",
                    self.sink.table
                ),
                None,
            )
        })
    }

    /// Creates the staging table once the target exists (upsert only).
    async fn ensure_stage(&mut self) -> Result<(), FaucetError> {
        if self.stage_ready
            || self.table.is_none()
            || self.sink.config.write_mode != WriteMode::Upsert
        {
            return Ok(());
        }
        let name = self.sink.table.clone();
        table::create_stage(self.conn()?, &name).await?;
        self.stage_ready = true;
        Ok(())
    }

    /// Makes sure the target exists for `page` (creating it when configured).
    async fn ensure_table(&mut self, page: &Page) -> Result<(), FaucetError> {
        if self.table.is_none() && self.sink.config.create_table && !page.is_empty() {
            let key = self.sink.config.key.clone();
            let name = self.sink.table.clone();
            let apply_changes = self.sink.config.write_mode == WriteMode::Upsert;
            let created = table::create(self.conn()?, &name, page, &key, apply_changes).await?;
            self.created_here = created.is_some();
            if let Some(t) = &created {
                let sink = self.sink;
                sink.verify(self.conn()?, t).await?;
            }
            self.table = created;
        }
        self.ensure_stage().await
    }

    /// After a failed first page into a table this writer created: drops the table if it is
    /// still empty (under an exclusive lock, so no other writer's rows can be lost), and
    /// forgets it, so the next page creates it again. Best effort: a failure is logged.
    async fn undo_create(&mut self) {
        if !std::mem::take(&mut self.created_here) {
            return;
        }
        let name = self.sink.table.clone();
        self.table = None;
        self.stage_ready = false;
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if let Err(e) = table::drop_if_empty(conn, &name).await {
            tracing::warn!(table = %name, error = %e, "could not drop the table created for a page that failed");
        }
    }

    /// Writes `page` (and the token) in one transaction.
    async fn write_page(
        &mut self,
        page: &Page,
        token: Option<(&str, &CommitToken)>,
    ) -> Result<(), FaucetError> {
        if token.is_some() && !self.tokens_ready {
            let tokens = self.sink.tokens.clone();
            token::ensure(self.conn()?, &tokens).await?;
            self.tokens_ready = true;
        }
        if !page.is_empty()
            && let Err(e) = self.ensure_table(page).await
        {
            self.undo_create().await;
            return Err(e);
        }
        self.conn()?;
        let sink = self.sink;
        let Self {
            conn,
            table,
            source_table,
            bufs,
            fence,
            ..
        } = self;
        let Some(session) = conn.as_mut() else {
            return Err(FaucetError::write(
                CONNECTOR,
                "the session is unusable",
                None,
            ));
        };
        let result = transaction(
            session,
            sink,
            table.as_ref(),
            page,
            Commit {
                token,
                fence: fence.as_ref(),
            },
            bufs,
            source_table,
        )
        .await;
        if let Err(failure) = &result
            && failure.lost
        {
            *conn = None;
        }
        match result {
            Ok(()) => {
                self.created_here = false;
                Ok(())
            }
            Err(failure) => {
                self.undo_create().await;
                match (&self.fence, failure.idle_aborted) {
                    (Some(writer), true) => Err(fence::explain_idle_abort(
                        &sink.connection,
                        &sink.fences,
                        &sink.table,
                        writer,
                        failure.error,
                    )
                    .await),
                    _ => Err(failure.error),
                }
            }
        }
    }
}

/// A failed page transaction: the error, whether the session is gone (outcome unknown),
/// and whether the server ended it for idling in the transaction for longer than the
/// lease's ttl (SQLSTATE 25P03, [`fence::abort_stalled_pages_after`]): then the page was
/// certainly rolled back.
struct Failure {
    error: FaucetError,
    lost: bool,
    idle_aborted: bool,
}

impl From<FaucetError> for Failure {
    fn from(error: FaucetError) -> Self {
        let sql = match &error {
            FaucetError::Write {
                source: Some(s), ..
            } => s.downcast_ref::<sqlx::Error>(),
            _ => None,
        };
        let idle_aborted = sql.is_some_and(fence::is_idle_abort);
        let lost = idle_aborted || sql.is_some_and(super::failure::is_connection_lost);
        Self {
            error,
            lost,
            idle_aborted,
        }
    }
}

/// What a page's transaction stores and checks beside its rows.
struct Commit<'a> {
    /// The atomic watermark's token, under its state key.
    token: Option<(&'a str, &'a CommitToken)>,
    /// The writer's fence, checked first.
    fence: Option<&'a fence::WriterFence>,
}

async fn transaction(
    conn: &mut PgConnection,
    sink: &PostgresSink,
    table: Option<&TargetTable>,
    page: &Page,
    commit: Commit<'_>,
    bufs: &mut Buffers,
    source_table: &mut Option<String>,
) -> Result<(), Failure> {
    let begin_err = |e: sqlx::Error| Failure::from(write::classify(e, "BEGIN", &sink.table, None));
    let mut tx = conn.begin().await.map_err(begin_err)?;
    if let Err(failure) = statements(&mut tx, sink, table, page, commit, bufs, source_table).await {
        // Rolled back now, not when the session is next used: a refused page must not keep
        // its locks (the fence row among them) while the writer stays open.
        if !failure.lost {
            let _ = tx.rollback().await;
        }
        return Err(failure);
    }
    fault::point(fault::BEFORE_COMMIT);
    tx.commit()
        .await
        .map_err(|e| Failure::from(write::classify(e, "COMMIT", &sink.table, None)))?;
    Ok(())
}

/// The statements of a page's transaction: the fence check, the rows, the token.
async fn statements(
    tx: &mut PgConnection,
    sink: &PostgresSink,
    table: Option<&TargetTable>,
    page: &Page,
    commit: Commit<'_>,
    bufs: &mut Buffers,
    source_table: &mut Option<String>,
) -> Result<(), Failure> {
    if let Some(writer) = commit.fence {
        fence::check(tx, &sink.fences, &sink.table, writer).await?;
    }
    let token = commit.token;
    if let Some(t) = table.filter(|_| !page.is_empty()) {
        let target = Target {
            name: &sink.table,
            table: t,
            key: sink.upsert_key(),
            record_key: &sink.config.key,
            nul: sink.config.nul_bytes,
        };
        match sink.config.write_mode {
            WriteMode::Append => write::append(tx, &target, page, bufs).await?,
            WriteMode::Upsert => {
                write::upsert(tx, &target, page, bufs, source_table).await?;
            }
        }
    } else if !page.is_empty() {
        // No table yet (create_table, and no row to take its columns from): a page of only
        // deletes and truncates has nothing to do, a malformed one is an error, not skipped.
        faucet_core::change::check_records(page, CONNECTOR, &sink.table.to_string())?;
    }
    if let Some((scope, token)) = token {
        let scope = token::scope(scope, &sink.table);
        token::advance(tx, &sink.tokens, &scope, token).await?;
    }
    Ok(())
}

#[async_trait]
impl SinkWriter for PostgresSinkWriter<'_> {
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
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
        self.write_page(page, Some((scope, token))).await
    }

    /// Whether the target table has a row (`Some(false)` while it does not exist yet), so
    /// the run loop's lost-bookmark guard can refuse to append a whole source again into a
    /// table that already holds it (`shared/cases/13-state-missing-or-torn.md`, S1). The
    /// guard only asks at-least-once runs: a keyed upsert target absorbs the replay.
    ///
    /// # Errors
    /// [`FaucetError::Write`] when the table cannot be read.
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        if self.table.is_none() {
            return Ok(Some(false));
        }
        let name = self.sink.table.clone();
        let sql = format!("SELECT EXISTS (SELECT 1 FROM {})", name.quoted());
        let any: bool = sqlx::query_scalar(&sql)
            .fetch_one(self.conn()?)
            .await
            .map_err(|e| table::write_err(format!("cannot tell whether {name} holds data"), e))?;
        Ok(Some(any))
    }

    /// Checks `fence` in every later page's transaction ([`fence`]): a page of a writer
    /// whose lease a newer run took is rolled back. Creates the fence table now, outside
    /// any page's transaction, raises the scope's fence to `fence` (or, with `take_over`,
    /// sets it), and sets the session's `idle_in_transaction_session_timeout` to `ttl`, so
    /// the server aborts a page left open by a writer stalled mid-page rather than let its
    /// locks block the run that took over.
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
        let fences = self.sink.fences.clone();
        let target = self.sink.table.clone();
        let writer = fence::WriterFence {
            key: scope.to_owned(),
            scope: token::scope(scope, &self.sink.table),
            fence,
        };
        let conn = self.conn()?;
        fence::ensure(conn, &fences).await?;
        if take_over {
            fence::set(conn, &fences, &writer).await?;
        } else {
            fence::check(conn, &fences, &target, &writer).await?;
        }
        fence::abort_stalled_pages_after(conn, ttl).await?;
        self.fence = Some(writer);
        Ok(true)
    }

    async fn last_committed_token(
        &mut self,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        let tokens = self.sink.tokens.clone();
        let scope = token::scope(scope, &self.sink.table);
        let last = token::last(self.conn()?, &tokens, &scope).await?;
        if last.is_some() && self.table.is_none() {
            // The rows the token vouches for went with their table: resuming at it would
            // skip them all. Forget it, so the run resumes from its state store (from the
            // start when that was reset too) and its sequence starts over.
            let target = self.sink.table.clone();
            token::forget(self.conn()?, &tokens, &scope).await?;
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
