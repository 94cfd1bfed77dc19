//! The `postgres` sink: writes pages into one table, each page in one transaction.
//!
//! * `append`: `COPY target (fields) FROM STDIN` in text format (the fastest way in).
//!   Change records are appended as rows of a change table (op, table, lsn, commit_ts,
//!   before, after, unchanged_toast): an audit log of the source.
//! * `upsert` by `key`: change records are applied (`d` deletes by the key in `before`,
//!   `c`/`u`/`r` upsert `after`, `t` truncates the table), plain rows upsert themselves; the
//!   page is collapsed to the last operation per key in source order, so several changes to
//!   one key in a page are applied as if one by one (cases 14, 15), and a column named in
//!   `unchanged_toast` keeps its stored value (case 01). See its `changes` module. Pages of
//!   snapshot rows (`op: "r"`, `faucet replicate`'s copy) into a target that was empty take a
//!   plain `COPY` instead, falling back to the upsert on a key conflict (its `snapshot_copy`
//!   module); a page of 64 rows or more is copied in two parts at once, the second on a
//!   second session of the sink that commits its part just before the page's transaction
//!   (its `second_session` module).
//! * Each page's transaction with a writer fence reads the fence row under a shared lock
//!   (its `fence` module).
//! * The page transaction, the commit token (`faucet_commit_tokens` in the target's schema),
//!   the writer fence (`faucet_fences`) and what a failure leaves behind are the SQL sink
//!   engine's (`sql::sink`); this module is its PostgreSQL dialect.
//! * Values are written in the text input form of their types (its `encode` module), so numerics,
//!   NaN and infinities, arrays, bytea and jsonb round-trip exactly (cases 04, 22, 23, 24).
//!   A value the column cannot hold is a [`FaucetError::Data`] naming table, column and row.
//!
//! * Routing (`table: "replica.{table}"`, `tables:`): each source table's change records
//!   into its own target, every target of a page in one transaction with one commit token
//!   (`sql::sink::route`); each target has its own staging table (`faucet_stage_<n>`).
//!
//! Capabilities: `atomic_watermark` always; `keyed_upsert` with `write_mode: upsert` (a
//! routed sink: when every target upserts).

mod alter;
mod changes;
mod config;
mod encode;
mod fence;
mod nul;
mod second_session;
mod snapshot_copy;
mod table;
mod token;
mod write;

use async_trait::async_trait;
use sqlx::Executor as _;
use sqlx::postgres::PgConnection;

use faucet_core::{CommitToken, FaucetError, Page, Sink, SinkCapabilities, SinkWriter};

pub use config::{PostgresSinkConfig, ValidatedSinkConfig, WriteMode};
pub use nul::NulBytes;

use super::config::CONNECTOR;
use super::connection::PostgresUrl;
use super::ident::TableName;
use crate::sql::sink::fence::WriterFence;
use crate::sql::sink::route::{Route, RouteTarget, UpsertKeys};
use crate::sql::sink::schema::{Alter, SchemaApply, TargetColumn, Widening};
use crate::sql::sink::{BeginFailed, SinkDialect, SqlSinkWriter, sqlx_error};
use second_session::SecondSession;
use snapshot_copy::SnapshotPath;
use table::TargetTable;
use write::{Buffers, Target};

/// The `postgres` sink. Built from a validated [`PostgresSinkConfig`] without I/O;
/// [`Sink::open`] and [`Sink::check`] connect.
#[derive(Clone)]
pub struct PostgresSink {
    config: PostgresSinkConfig,
    connection: PostgresUrl,
    table: TableName,
    tokens: TableName,
    /// The writer-fence table beside it ([`crate::sql::sink::fence::FENCES`]).
    fences: TableName,
    /// The route, when the sink writes each source table into its own target.
    route: Option<Route>,
    /// The session's staging table of this target (upsert): `pg_temp.faucet_stage`, or
    /// `pg_temp.faucet_stage_<n>` for routed target n.
    stage: String,
    /// The second session on the target, shared by the sink's clones (routed targets).
    second: SecondSession,
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
            route,
        } = validated;
        let tokens = table.sibling(crate::sql::sink::token::TOKENS);
        let fences = table.sibling(crate::sql::sink::fence::FENCES);
        let second = SecondSession::new(connection.clone(), fences.clone());
        Self {
            config,
            connection,
            table,
            tokens,
            fences,
            route,
            stage: table::STAGE.to_owned(),
            second,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PostgresSinkConfig {
        &self.config
    }

    /// What the sink upserts by, routed or not.
    fn upsert_keys(&self) -> UpsertKeys<'_> {
        UpsertKeys {
            route: self.route.as_ref(),
            write_mode: self.config.write_mode,
            key: &self.config.key,
        }
    }

    fn upsert_key(&self) -> &[String] {
        self.config.write_mode.upsert_key(&self.config.key)
    }

    /// Checks an existing table against the config: the key columns exist and, for upsert,
    /// a primary key or unique index covers exactly them.
    async fn verify(
        &self,
        conn: &mut PgConnection,
        table: &TargetTable,
    ) -> Result<(), FaucetError> {
        crate::sql::sink::keys::key_columns_exist(
            &self.config.key,
            table.columns.iter().map(String::as_str),
            &self.table,
        )?;
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

    /// `key:` with `write_mode: upsert` (a routed sink: when some target upserts).
    fn upserts_by(&self) -> Option<Vec<String>> {
        self.upsert_keys().upserts_by()
    }

    /// A routed sink: the key of the source table's target ([`Route::upsert_key`]).
    fn upserts_by_table(&self, source_table: &str) -> Option<Vec<String>> {
        self.upsert_keys().upserts_by_table(source_table)
    }

    fn capabilities(&self) -> SinkCapabilities {
        self.upsert_keys().capabilities()
    }

    fn target(&self) -> Option<String> {
        let what = self.upsert_keys().target(&self.table);
        Some(format!(
            "{CONNECTOR} {}:{}/{} {what}",
            self.connection.host(),
            self.connection.port(),
            self.connection.database(),
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
        let base = Scratch::default();
        if self.route.is_some() {
            return Ok(Box::new(SqlSinkWriter::routed(self, conn, base)));
        }
        let (table, scratch) = self.open_target(&mut conn, &base).await?;
        Ok(Box::new(SqlSinkWriter::new(self, conn, table, scratch)))
    }

    /// Connects; checks that the table exists (or may be created), fits the key, and that
    /// the role may write it (INSERT; UPDATE and DELETE for upsert).
    ///
    /// # Errors
    /// The first failing prerequisite, with its fix.
    async fn check(&self) -> Result<(), FaucetError> {
        let mut conn = self.connection.open_session(CONNECTOR).await?;
        if let Some(route) = &self.route {
            // The listed targets that exist are checked as a sink of each would be; the
            // others are met in the records.
            for target in route.listed() {
                let one = self.for_target(&target)?;
                if let Some(t) = table::load(&mut conn, &one.table).await? {
                    // Without a configured key, the source's is used: known at run time.
                    let keyed = !(target.key.is_empty() && target.write_mode == WriteMode::Upsert);
                    if keyed {
                        one.verify(&mut conn, &t).await?;
                    }
                } else if !self.config.create_table {
                    return Err(missing_table(&one.table));
                }
            }
            return Ok(());
        }
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

    /// The drift of the table from the source table's `columns`, as every SQL sink tells it
    /// (`sql::sink::drift`, with the plan a run applies a schema change by); `None` for a
    /// routed sink or a table not created yet.
    async fn check_drift(
        &self,
        _source_table: &str,
        columns: &[faucet_core::change::schema::ColumnShape],
        pending: Option<&faucet_core::change::schema::SchemaChange>,
    ) -> Result<Option<faucet_core::change::Drift>, FaucetError> {
        if self.route.is_some() {
            return Ok(None);
        }
        let mut conn = self.connection.open_session(CONNECTOR).await?;
        let Some(t) = table::load(&mut conn, &self.table).await? else {
            return Ok(None);
        };
        Ok(Some(crate::sql::sink::drift::drift(
            self, &t, columns, pending,
        )))
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
        if self.route.is_some()
            || !crate::sql::write::checks_columns(self.config.write_mode, schema)
        {
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

/// What a `postgres` writer keeps from page to page (per target).
#[derive(Default)]
pub(crate) struct Scratch {
    /// Whether the session's staging table exists (upsert).
    stage_ready: bool,
    /// The `table` of the change records written so far.
    source_table: Option<String>,
    /// How the target takes snapshot rows ([`snapshot_copy`]).
    snapshot: SnapshotPath,
    bufs: Buffers,
}

impl PostgresSink {
    /// Creates the session's staging table once the target exists (upsert only).
    async fn ensure_stage(
        &self,
        conn: &mut PgConnection,
        scratch: &mut Scratch,
    ) -> Result<(), FaucetError> {
        if scratch.stage_ready || self.config.write_mode != WriteMode::Upsert {
            return Ok(());
        }
        table::create_stage(conn, &self.stage, &self.table).await?;
        scratch.stage_ready = true;
        Ok(())
    }
}

/// PostgreSQL for the SQL sink engine ([`SqlSinkWriter`]): `BEGIN`/`COMMIT`, `COPY`, the
/// staging table, `ON CONFLICT`, `idle_in_transaction_session_timeout`.
#[async_trait]
impl SinkDialect for PostgresSink {
    type Conn = PgConnection;
    type Table = TargetTable;
    type Scratch = Scratch;

    fn connector(&self) -> &'static str {
        CONNECTOR
    }

    fn target_name(&self) -> String {
        match &self.route {
            Some(r) => r.describe(),
            None => self.table.to_string(),
        }
    }

    fn route(&self) -> Option<&Route> {
        self.route.as_ref()
    }

    /// This sink for `target`: its table, key and write mode, its own staging table.
    fn for_target(&self, target: &RouteTarget) -> Result<Self, FaucetError> {
        let table = target.parsed_name(CONNECTOR, TableName::parse)?;
        let mut one = self.clone();
        one.config.key = target.key.clone();
        one.config.write_mode = target.write_mode;
        one.table = table;
        one.route = None;
        one.stage = format!("{}_{}", table::STAGE, target.ordinal);
        Ok(one)
    }

    /// Loads the table, checks it against the config (or that it may be created), and
    /// readies the staging table of an existing one.
    async fn open_target(
        &self,
        conn: &mut PgConnection,
        _base: &Scratch,
    ) -> Result<(Option<TargetTable>, Scratch), FaucetError> {
        let table = table::load(conn, &self.table).await?;
        match &table {
            Some(t) => self.verify(conn, t).await?,
            None if !self.config.create_table => {
                return Err(missing_table(&self.table));
            }
            None => {}
        }
        let mut scratch = Scratch::default();
        if table.is_some() {
            self.ensure_stage(conn, &mut scratch).await?;
        }
        Ok((table, scratch))
    }

    async fn create_target(
        &self,
        conn: &mut PgConnection,
        page: &Page,
        _scratch: &mut Scratch,
    ) -> Result<Option<(TargetTable, bool)>, FaucetError> {
        if !self.config.create_table {
            return Ok(None);
        }
        let apply_changes = self.config.write_mode == WriteMode::Upsert;
        let created =
            table::create(conn, &self.table, page, &self.config.key, apply_changes).await?;
        Ok(created.map(|t| (t, true)))
    }

    async fn ready_target(
        &self,
        conn: &mut PgConnection,
        table: &TargetTable,
        scratch: &mut Scratch,
    ) -> Result<(), FaucetError> {
        self.verify(conn, table).await?;
        self.ensure_stage(conn, scratch).await
    }

    async fn drop_if_empty(&self, conn: &mut PgConnection, scratch: &mut Scratch) {
        scratch.stage_ready = false;
        if let Err(e) = table::drop_if_empty(conn, &self.table).await {
            tracing::warn!(table = %self.table, error = %e, "could not drop the table created for a page that failed");
        }
    }

    async fn begin(&self, conn: &mut PgConnection) -> Result<(), FaucetError> {
        conn.execute("BEGIN")
            .await
            .map_err(|e| write::classify(e, "BEGIN", &self.table, None))?;
        Ok(())
    }

    /// `BEGIN` and the fence row's read in one round trip ([`fence::begin_checked`]); its
    /// failure is rolled back (outside a transaction PostgreSQL's `ROLLBACK` only warns).
    async fn begin_page(
        &self,
        conn: &mut PgConnection,
        writer: Option<&WriterFence>,
    ) -> Result<(), BeginFailed> {
        match writer {
            Some(writer) => {
                self.second.set_fence(writer);
                fence::begin_checked(conn, &self.fences, &self.table, writer)
                    .await
                    .map_err(BeginFailed::Begun)
            }
            None => self.begin(conn).await.map_err(BeginFailed::Begin),
        }
    }

    async fn commit(&self, conn: &mut PgConnection) -> Result<(), FaucetError> {
        conn.execute("COMMIT")
            .await
            .map_err(|e| write::classify(e, "COMMIT", &self.table, None))?;
        Ok(())
    }

    async fn rollback(&self, conn: &mut PgConnection) -> Result<(), FaucetError> {
        conn.execute("ROLLBACK")
            .await
            .map_err(|e| write::classify(e, "ROLLBACK", &self.table, None))?;
        Ok(())
    }

    /// Lost: the session broke, or the server ended it for idling in the page's
    /// transaction past the lease's ttl (SQLSTATE 25P03, [`fence::abort_stalled_pages_after`]).
    fn is_lost(&self, e: &FaucetError) -> bool {
        sqlx_error(e)
            .is_some_and(|s| fence::is_idle_abort(s) || super::failure::is_connection_lost(s))
    }

    /// 40001 serialization_failure, 40P01 deadlock_detected.
    fn is_retryable(&self, e: &FaucetError) -> bool {
        sqlx_error(e)
            .and_then(super::failure::db_error)
            .is_some_and(|d| matches!(d.code(), "40001" | "40P01"))
    }

    async fn write_rows(
        &self,
        conn: &mut PgConnection,
        table: &TargetTable,
        page: &Page,
        scratch: &mut Scratch,
    ) -> Result<(), FaucetError> {
        let target = Target {
            name: &self.table,
            table,
            key: self.upsert_key(),
            record_key: &self.config.key,
            nul: self.config.nul_bytes,
            stage: &self.stage,
            second: &self.second,
        };
        let written = match self.config.write_mode {
            WriteMode::Append => write::append(conn, &target, page, &mut scratch.bufs).await,
            WriteMode::Upsert => {
                write::upsert(
                    conn,
                    &target,
                    page,
                    &mut scratch.bufs,
                    &mut scratch.source_table,
                    &mut scratch.snapshot,
                )
                .await
            }
        };
        if self.stage != table::STAGE {
            // A routed target: its COPY buffers go, so memory stays one page's however many
            // targets the writer has met.
            scratch.bufs = Buffers::default();
        }
        written
    }

    fn schema_apply(&self) -> SchemaApply {
        SchemaApply::by_mode(
            self.config.write_mode,
            self.config.schema_changes,
            self.config.dropped_columns,
        )
    }

    fn schema_key(&self) -> &[String] {
        self.upsert_key()
    }

    fn columns_of(&self, table: &TargetTable) -> Vec<TargetColumn> {
        table
            .columns
            .iter()
            .zip(&table.types)
            .zip(&table.not_null)
            .map(|((name, ty), not_null)| TargetColumn {
                name: name.clone(),
                sql_type: ty.clone(),
                not_null: *not_null,
            })
            .collect()
    }

    fn column_name_problem(&self, name: &str) -> Option<String> {
        table::column_name_problem(name)
    }

    fn new_column_type(&self, data_type: &faucet_core::DataType, source_type: &str) -> String {
        alter::new_type(data_type, source_type)
    }

    fn widen(
        &self,
        target_type: &str,
        data_type: &faucet_core::DataType,
        source_type: &str,
    ) -> Widening {
        alter::widen(target_type, data_type, source_type)
    }

    fn alter_sql(&self, step: &Alter<'_>) -> Option<String> {
        Some(alter::sql(&self.table, step))
    }

    async fn execute_ddl(&self, conn: &mut PgConnection, sql: &str) -> Result<(), FaucetError> {
        conn.execute(sql)
            .await
            .map_err(|e| write::classify(e, "ALTER TABLE", &self.table, None))?;
        Ok(())
    }

    /// Reloads the table and makes the staging table again (its columns are the target's),
    /// inside the page's transaction: a rollback undoes both.
    async fn reload_target(
        &self,
        conn: &mut PgConnection,
        scratch: &mut Scratch,
    ) -> Result<TargetTable, FaucetError> {
        let table = table::load(conn, &self.table)
            .await?
            .ok_or_else(|| missing_table(&self.table))?;
        if scratch.stage_ready {
            table::create_stage(conn, &self.stage, &self.table).await?;
        }
        Ok(table)
    }

    async fn holds_data(&self, conn: &mut PgConnection) -> Result<bool, FaucetError> {
        table::holds_data(conn, &self.table).await
    }

    async fn ensure_tokens(&self, conn: &mut PgConnection) -> Result<(), FaucetError> {
        token::ensure(conn, &self.tokens).await
    }

    async fn advance_token(
        &self,
        conn: &mut PgConnection,
        scope: &str,
        token: &CommitToken,
    ) -> Result<(), FaucetError> {
        token::advance(conn, &self.tokens, scope, token).await
    }

    async fn last_token(
        &self,
        conn: &mut PgConnection,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        token::last(conn, &self.tokens, scope).await
    }

    async fn forget_token(&self, conn: &mut PgConnection, scope: &str) -> Result<(), FaucetError> {
        token::forget(conn, &self.tokens, scope).await
    }

    async fn ensure_fences(&self, conn: &mut PgConnection) -> Result<(), FaucetError> {
        fence::ensure(conn, &self.fences).await
    }

    async fn check_fence(
        &self,
        conn: &mut PgConnection,
        writer: &WriterFence,
    ) -> Result<(), FaucetError> {
        self.second.set_fence(writer);
        fence::check(conn, &self.fences, &self.table, writer).await
    }

    async fn set_fence(
        &self,
        conn: &mut PgConnection,
        writer: &WriterFence,
    ) -> Result<(), FaucetError> {
        fence::set(conn, &self.fences, writer).await
    }

    async fn abort_stalled_pages_after(
        &self,
        conn: &mut PgConnection,
        ttl: std::time::Duration,
    ) -> Result<(), FaucetError> {
        self.second.set_ttl(ttl);
        fence::abort_stalled_pages_after(conn, ttl).await
    }

    /// A page the server rolled back by ending its idle session:
    /// [`LeaseError::Fenced`](faucet_core::state::LeaseError::Fenced) when a newer writer has
    /// written since.
    async fn explain(&self, error: FaucetError, writer: Option<&WriterFence>) -> FaucetError {
        match writer {
            Some(w) if sqlx_error(&error).is_some_and(fence::is_idle_abort) => {
                fence::explain_idle_abort(&self.connection, &self.fences, &self.table, w, error)
                    .await
            }
            _ => error,
        }
    }
}
