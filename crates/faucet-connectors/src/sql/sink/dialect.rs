//! [`SinkDialect`]: what one SQL database does for the sink engine ([`super::SqlSinkWriter`]),
//! and nothing the engine decides. A dialect owns its client (the session type), the
//! statement text (transactions, rows, the commit token and fence tables), its catalog (what
//! an existing target table is) and the classification of its errors; the engine owns the
//! order of things: DDL before the page's transaction, the fence check first in it, the rows,
//! the token, the `before_commit` fault point, `COMMIT`, and what a failure leaves behind.

use std::time::Duration;

use async_trait::async_trait;

use faucet_core::{CommitToken, DataType, FaucetError, Page};

use super::fence::WriterFence;
use super::route::{Route, RouteTarget};
use super::schema::{Alter, SchemaApply, TargetColumn, Widening};

/// Why a page's transaction did not get past its start ([`SinkDialect::begin_page`]).
#[derive(Debug)]
pub(crate) enum BeginFailed {
    /// `BEGIN` failed: no transaction is open.
    Begin(FaucetError),
    /// What came after `BEGIN` failed (the fence check), or both went at once: a
    /// transaction may be open, and the engine rolls it back.
    Begun(FaucetError),
}

/// One SQL database's side of a sink (implemented by each system's sink: it holds the
/// config, the target's name and the connection settings). Every method that takes a
/// session runs one or a few statements on it; none opens a transaction of its own except
/// [`SinkDialect::begin`] and [`SinkDialect::begin_page`] (which runs or sends `begin`).
#[async_trait]
pub(crate) trait SinkDialect: Send + Sync {
    /// A session with the server (sqlx's `PgConnection`, mysql_async's `Conn`).
    type Conn: Send;
    /// What the catalog says about an existing target table (its columns, their types and
    /// exactness rules, its unique keys).
    type Table: Send + Sync;
    /// What a writer keeps from page to page for this system (buffers, the server's
    /// settings, the `table` of the change records written so far).
    type Scratch: Send;

    /// The connector's name (`postgres`, `mysql`), for messages.
    fn connector(&self) -> &'static str;

    /// The target table's name as messages show it (`shop.orders`).
    fn target_name(&self) -> String;

    /// Why nothing may be written at all, in the words of what was asked
    /// (`effectively_once`: the commit token was asked for), or `None`: MySQL's
    /// non-transactional engines. Checked before every page and token.
    fn refusal(&self, _scratch: &Self::Scratch, _effectively_once: bool) -> Option<FaucetError> {
        None
    }

    /// The route of this sink when it writes each source table into its own target (its
    /// `table` has a placeholder, or `tables:` is set: [`super::route`]); `None` (the
    /// default) for a sink of one table. The dialect of a routed sink names, in
    /// [`SinkDialect::target_name`], the route ([`Route::describe`]), and keeps the commit
    /// token and fence tables where [`Route::home`] says.
    fn route(&self) -> Option<&Route> {
        None
    }

    /// This dialect for one routed target: the same connection settings, commit token and
    /// fence tables, with `target`'s table name, key and write mode (its `ordinal` names
    /// per-target session objects). The default refuses: a dialect that does not route.
    ///
    /// # Errors
    /// [`FaucetError::Data`] when the rendered name is not a valid table name for this
    /// system; [`FaucetError::Config`] from the default.
    fn for_target(&self, target: &RouteTarget) -> Result<Self, FaucetError>
    where
        Self: Sized,
    {
        Err(FaucetError::config(
            "table",
            format!(
                "the {} sink does not route records by source table (`{}`); use one fixed \
                 table name",
                self.connector(),
                target.source_table
            ),
        ))
    }

    /// Opens a target of [`SinkDialect::for_target`] on the writer's session, outside any
    /// transaction, as the sink's `open` opens its one table: the table when it exists
    /// (checked against the config: the key fits it, its engine can roll back) and the
    /// scratch its writes keep, made from `base`, the session's. The default refuses (see
    /// [`SinkDialect::for_target`]).
    ///
    /// # Errors
    /// [`FaucetError::Write`] when the table is missing and `create_table` is off, or the
    /// catalog cannot be read; [`FaucetError::Config`] when the key does not fit.
    async fn open_target(
        &self,
        _conn: &mut Self::Conn,
        _base: &Self::Scratch,
    ) -> Result<(Option<Self::Table>, Self::Scratch), FaucetError> {
        Err(FaucetError::write(
            self.connector(),
            "this sink does not route records by source table",
            None,
        ))
    }

    /// Creates the target from `page` (`create_table: true`, the table missing, `page` not
    /// empty), outside any transaction: the table, and whether this call created it
    /// (`false`: another writer did first). `Ok(None)` when `create_table` is off or the
    /// page gives no columns to create from.
    ///
    /// # Errors
    /// [`FaucetError::Write`] when the DDL fails.
    async fn create_target(
        &self,
        conn: &mut Self::Conn,
        page: &Page,
        scratch: &mut Self::Scratch,
    ) -> Result<Option<(Self::Table, bool)>, FaucetError>;

    /// Checks a table [`SinkDialect::create_target`] gave against the config (the key fits
    /// it) and readies what the writes need beside it (PostgreSQL's staging table). A
    /// failure drops a table this writer created, if still empty.
    ///
    /// # Errors
    /// [`FaucetError::Config`] when the key does not fit; [`FaucetError::Write`].
    async fn ready_target(
        &self,
        conn: &mut Self::Conn,
        table: &Self::Table,
        scratch: &mut Self::Scratch,
    ) -> Result<(), FaucetError>;

    /// Drops the target if it holds no row (a table this writer created for a page that
    /// failed), best effort: a failure is logged.
    async fn drop_if_empty(&self, conn: &mut Self::Conn, scratch: &mut Self::Scratch);

    /// Starts the page's transaction.
    ///
    /// # Errors
    /// [`FaucetError::Write`], lost or not ([`SinkDialect::is_lost`]).
    async fn begin(&self, conn: &mut Self::Conn) -> Result<(), FaucetError>;

    /// Starts a page's transaction ([`SinkDialect::begin`]) and, for a fenced writer, checks
    /// its fence first thing in it ([`SinkDialect::check_fence`]). A dialect whose client
    /// can send both at once does so (PostgreSQL: one round trip).
    ///
    /// # Errors
    /// As [`SinkDialect::begin`] and [`SinkDialect::check_fence`], told apart by whether
    /// the transaction may have begun ([`BeginFailed`]).
    async fn begin_page(
        &self,
        conn: &mut Self::Conn,
        fence: Option<&WriterFence>,
    ) -> Result<(), BeginFailed> {
        self.begin(conn).await.map_err(BeginFailed::Begin)?;
        match fence {
            Some(writer) => self
                .check_fence(conn, writer)
                .await
                .map_err(BeginFailed::Begun),
            None => Ok(()),
        }
    }

    /// Commits the page's transaction.
    ///
    /// # Errors
    /// [`FaucetError::Write`]; lost ([`SinkDialect::is_lost`]) when the outcome is unknown.
    async fn commit(&self, conn: &mut Self::Conn) -> Result<(), FaucetError>;

    /// Rolls a refused page back, now: its locks (the fence row among them) must not stay
    /// while the writer is open.
    ///
    /// # Errors
    /// Any failure: the engine then drops the session (kept, its next page could commit the
    /// refused one's statements).
    async fn rollback(&self, conn: &mut Self::Conn) -> Result<(), FaucetError>;

    /// Whether `e`, from a statement of this dialect, says the session is gone (the outcome
    /// of a statement in flight, `COMMIT` among them, is unknown). The engine then drops the
    /// session and never retries the page.
    fn is_lost(&self, e: &FaucetError) -> bool;

    /// Whether `e` says the server rolled the whole transaction back for a reason another
    /// attempt may not meet (a deadlock, a serialization failure): nothing of the page
    /// committed, so the engine runs its transaction again.
    fn is_retryable(&self, e: &FaucetError) -> bool;

    /// Writes the page's rows into `table` inside the open transaction: append or upsert
    /// (change records applied), with the values checked before they are sent.
    ///
    /// # Errors
    /// [`FaucetError::Data`] naming table, column and page row for a value the column
    /// cannot hold; [`FaucetError::Write`] for the rest.
    async fn write_rows(
        &self,
        conn: &mut Self::Conn,
        table: &Self::Table,
        page: &Page,
        scratch: &mut Self::Scratch,
    ) -> Result<(), FaucetError>;

    /// Whether the target holds a row.
    ///
    /// # Errors
    /// [`FaucetError::Write`].
    async fn holds_data(&self, conn: &mut Self::Conn) -> Result<bool, FaucetError>;

    /// Creates the commit token table when missing, outside any transaction (runs creating
    /// it at once all succeed), and checks it can commit with the rows.
    ///
    /// # Errors
    /// [`FaucetError::Write`]; [`FaucetError::Delivery`] when it cannot hold a token
    /// atomically with the rows.
    async fn ensure_tokens(&self, conn: &mut Self::Conn) -> Result<(), FaucetError>;

    /// Stores `token` under `scope` inside the page's transaction if its sequence is above
    /// the stored one.
    ///
    /// # Errors
    /// [`FaucetError::Write`] when the stored sequence is the same or higher (a stale or
    /// concurrent writer: [`super::token::refused`]) or the statement fails.
    async fn advance_token(
        &self,
        conn: &mut Self::Conn,
        scope: &str,
        token: &CommitToken,
    ) -> Result<(), FaucetError>;

    /// The token stored under `scope` (`None` also when the token table does not exist).
    ///
    /// # Errors
    /// [`FaucetError::Write`] when it cannot be read or is not a token.
    async fn last_token(
        &self,
        conn: &mut Self::Conn,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError>;

    /// Deletes the token stored under `scope`.
    ///
    /// # Errors
    /// [`FaucetError::Write`].
    async fn forget_token(&self, conn: &mut Self::Conn, scope: &str) -> Result<(), FaucetError>;

    /// Creates the fence table when missing, outside any transaction (runs creating it at
    /// once all succeed).
    ///
    /// # Errors
    /// [`FaucetError::Write`].
    async fn ensure_fences(&self, conn: &mut Self::Conn) -> Result<(), FaucetError>;

    /// Raises the scope's fence to `writer.fence`, or refuses: inside each page's
    /// transaction (the row stays locked until the page commits), and once when the writer
    /// is given its fence.
    ///
    /// # Errors
    /// [`LeaseError::Fenced`](faucet_core::state::LeaseError::Fenced) when a larger fence is
    /// stored ([`super::fence::fenced`]); [`FaucetError::Write`].
    async fn check_fence(
        &self,
        conn: &mut Self::Conn,
        writer: &WriterFence,
    ) -> Result<(), FaucetError>;

    /// Sets the scope's fence to `writer.fence`, whatever it held (a take-over).
    ///
    /// # Errors
    /// [`FaucetError::Write`].
    async fn set_fence(
        &self,
        conn: &mut Self::Conn,
        writer: &WriterFence,
    ) -> Result<(), FaucetError>;

    /// Has the server end a session whose page transaction stays idle for longer than
    /// `ttl` (the lease's), so a writer stalled mid-page releases the fence row; a server
    /// without such a setting skips it.
    ///
    /// # Errors
    /// [`FaucetError::Write`] when the session is lost.
    async fn abort_stalled_pages_after(
        &self,
        conn: &mut Self::Conn,
        ttl: Duration,
    ) -> Result<(), FaucetError>;

    /// The error a failed page reports: `error` as it is, or (PostgreSQL) the fence that
    /// explains why the server ended the session of a writer stalled mid-page.
    async fn explain(&self, error: FaucetError, _writer: Option<&WriterFence>) -> FaucetError {
        error
    }

    /// What this sink does with schema-change records ([`super::schema`]): rows of an
    /// append target, applied to an upsert target by the sink's policy, or (the default)
    /// refused.
    fn schema_apply(&self) -> SchemaApply {
        SchemaApply::Unsupported
    }

    /// Whether a DDL statement can run inside the page's transaction (PostgreSQL, SQLite:
    /// the default). MySQL's commits the transaction implicitly: its schema changes are
    /// applied ahead of the page's transaction ([`super::schema_ahead`]).
    fn transactional_ddl(&self) -> bool {
        true
    }

    /// The columns the sink upserts by (a schema change may not drop or rename them).
    fn schema_key(&self) -> &[String] {
        &[]
    }

    /// The target's columns, from what the catalog said ([`SinkDialect::Table`]).
    fn columns_of(&self, _table: &Self::Table) -> Vec<TargetColumn> {
        Vec::new()
    }

    /// Why `name` cannot be a column of this system's targets, if it cannot (the rule
    /// `create_table` applies to the records' fields): checked before a schema change adds
    /// or renames a column to it, so nothing is altered for a name the system would refuse
    /// or truncate.
    fn column_name_problem(&self, _name: &str) -> Option<String> {
        None
    }

    /// The column type an added column gets: `data_type` mapped as `create_table` maps it
    /// (`source_type`, the source's own spelling, where the dialect can use it as is).
    fn new_column_type(&self, data_type: &DataType, _source_type: &str) -> String {
        let _ = data_type;
        "text".to_owned()
    }

    /// Whether the target column of type `target_type` holds the values of a source column
    /// whose type changed to `data_type` (`source_type` in the source's spelling), or the
    /// widening that would.
    fn widen(&self, _target_type: &str, _data_type: &DataType, _source_type: &str) -> Widening {
        Widening::No
    }

    /// The statement of one schema change step on the target, or `None` when this system
    /// cannot do it in place.
    fn alter_sql(&self, _alter: &Alter<'_>) -> Option<String> {
        None
    }

    /// Runs one schema change statement of [`SinkDialect::alter_sql`] inside the page's
    /// transaction.
    ///
    /// # Errors
    /// [`FaucetError::Write`].
    async fn execute_ddl(&self, _conn: &mut Self::Conn, sql: &str) -> Result<(), FaucetError> {
        Err(FaucetError::write(
            self.connector(),
            format!("this sink does not run schema changes ({sql})"),
            None,
        ))
    }

    /// The target as the catalog has it now, inside the page's transaction after a schema
    /// change, with what the writes need beside it readied again (PostgreSQL's staging
    /// table).
    ///
    /// # Errors
    /// [`FaucetError::Write`].
    async fn reload_target(
        &self,
        _conn: &mut Self::Conn,
        _scratch: &mut Self::Scratch,
    ) -> Result<Self::Table, FaucetError> {
        Err(FaucetError::write(
            self.connector(),
            "this sink does not apply schema changes",
            None,
        ))
    }
}
