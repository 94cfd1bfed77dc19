//! The `mysql` sink (MySQL / MariaDB): writes pages into one InnoDB table, each page in one
//! transaction.
//!
//! * `append`: multi-row prepared `INSERT`s (at most 2,000 rows, 65,535 placeholders or about
//!   4 MiB of parameters per statement, and always under the session's `max_allowed_packet`,
//!   read when the session opens: a row that alone does not fit is a data error naming row,
//!   column, size and setting, sent nowhere) — as fast as `LOAD DATA LOCAL` was measured, which
//!   turns a duplicate key into a skipped row and `'abc'` into 0 with only warnings. Change
//!   records are appended as rows of a change table (an audit log).
//! * `upsert` by `key`: change records are applied through the shared contract
//!   ([`faucet_core::change::collapse`]: `d` deletes by key, `c`/`u`/`r` upsert, `t` deletes
//!   every row, the last change of a key in a page wins, a key-changing update leaves no old
//!   row, a column named in `unchanged_toast` keeps its stored value, a row with only some
//!   columns updates only those) with `INSERT … ON DUPLICATE KEY UPDATE c = VALUES(c)` on
//!   MariaDB (which has no row alias) and `… AS faucet_new … c = faucet_new.c` on MySQL
//!   8.0.19+ (where `VALUES()` is deprecated; untested here). Not `REPLACE`: it deletes and
//!   inserts, firing DELETE triggers, cascading foreign keys and resetting omitted columns.
//! * Nothing is coerced silently: every session runs with a strict `sql_mode`
//!   ([`SINK_SQL_MODE`]), and a statement that leaves any warning (a DECIMAL rounded, a note)
//!   fails the page; what MariaDB converts in a bound parameter without a warning is refused
//!   by `encode` (per-column rules worked out when the table is opened). A value the column
//!   cannot hold is a [`FaucetError::Data`] naming table, column and page row; nothing of the
//!   page is committed.
//! * Atomic watermark ([`SinkWriter::write_committed`]): the page's rows and the commit token
//!   (`faucet_commit_tokens` in the target's database) commit in one transaction; the
//!   stored sequence only moves forward. The writer fence (`faucet_fences`) is checked first
//!   in every page's transaction. DDL (creating the target, the token and fence tables) runs
//!   before the page's transaction, never inside it (it would commit half a page).
//! * A target whose engine is not transactional (MyISAM, Aria, MEMORY …) is refused before
//!   any data moves, naming the engine: such a table keeps the rows of a rolled-back page.
//!   `open` does not know the delivery, so the refusal waits for the first call that tells:
//!   the commit token (the run uses the atomic watermark, asked or derived: the delivery
//!   error) or a plain write (at-least-once: a config error); no fence table is made for it.
//!   A run that asked `at_least_once` and derived the atomic watermark (a deterministic
//!   source) gets the delivery error from the commit token too; the run loop then keeps to
//!   the at-least-once asked for (plain writes), so such a run ends in the config error,
//!   without a word of effectively-once.
//!
//! * Routing (`table: "replica.{table}"`, `tables:`): each source table's change records
//!   into its own target, every target of a page in one transaction with one commit token
//!   (`sql::sink::route`); each target's engine is checked when the records first name it.
//!
//! Capabilities: `atomic_watermark` always; `keyed_upsert` with `write_mode: upsert` (a
//! routed sink: when every target upserts).

mod alter;
mod changes;
mod config;
mod encode;
mod engine;
mod fence;
mod statement;
mod table;
mod token;
mod write;

use async_trait::async_trait;
use mysql_async::Conn;
use mysql_async::prelude::Queryable as _;

use faucet_core::{CommitToken, FaucetError, Page, Sink, SinkCapabilities, SinkWriter};

pub use config::{MysqlSinkConfig, ValidatedMysqlSinkConfig, WriteMode};

use crate::mysql::connection::MysqlConnection;
use crate::mysql::table::TableName;
use crate::sql::sink::fence::WriterFence;
use crate::sql::sink::route::{Route, RouteTarget, UpsertKeys};
use crate::sql::sink::schema::{Alter, SchemaApply, TargetColumn, Widening};
use crate::sql::sink::{SinkDialect, SqlSinkWriter};
use config::CONNECTOR;
use engine::NotTransactional;
use statement::{classify, is_lost};
use table::TargetTable;
use write::{Server, Target, UpsertSyntax};

/// The `sql_mode` of every session of the sink: strict for every engine (a value the column
/// cannot hold is an error, not a warning), no zero or half-zero dates, division by zero an
/// error, and no silent engine substitution for `CREATE TABLE … ENGINE=InnoDB`.
pub const SINK_SQL_MODE: &str = "STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,\
                                 ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION";

/// The `mysql` sink. Built from a validated [`MysqlSinkConfig`] without I/O; [`Sink::open`]
/// and [`Sink::check`] connect.
#[derive(Clone)]
pub struct MysqlSink {
    config: MysqlSinkConfig,
    connection: MysqlConnection,
    table: TableName,
    tokens: TableName,
    fences: TableName,
    /// The route, when the sink writes each source table into its own target.
    route: Option<Route>,
}

impl std::fmt::Debug for MysqlSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlSink")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl MysqlSink {
    /// A sink for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`MysqlSinkConfig::validate`].
    pub fn new(config: MysqlSinkConfig) -> Result<Self, FaucetError> {
        Ok(Self::from_validated(config.validate()?))
    }

    /// A sink for a config [`MysqlSinkConfig::validate`] accepted (no I/O).
    pub fn from_validated(validated: ValidatedMysqlSinkConfig) -> Self {
        let ValidatedMysqlSinkConfig {
            config,
            connection,
            table,
            route,
        } = validated;
        Self {
            tokens: token::sibling(&table, crate::sql::sink::token::TOKENS),
            fences: token::sibling(&table, crate::sql::sink::fence::FENCES),
            config,
            connection,
            table,
            route,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MysqlSinkConfig {
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

    /// Opens a session with the sink's settings; returns it, the server's upsert syntax and
    /// its `max_allowed_packet` (the session's value: the bytes one statement may take).
    async fn session(&self) -> Result<(Conn, Server), FaucetError> {
        let mut conn = self.connection.connect().await?;
        let setup = format!("SET SESSION sql_mode = '{SINK_SQL_MODE}', SESSION sql_notes = 1");
        conn.query_drop(setup)
            .await
            .map_err(|e| classify(e, "setting the session's sql_mode", &self.table))?;
        let settings: Option<(String, u64)> = conn
            .query_first("SELECT VERSION(), @@max_allowed_packet")
            .await
            .map_err(|e| classify(e, "reading the server version", &self.table))?;
        let (version, max_packet) = settings.unwrap_or_default();
        Ok((
            conn,
            Server {
                syntax: UpsertSyntax::for_version(&version),
                max_packet: usize::try_from(max_packet).unwrap_or(usize::MAX),
            },
        ))
    }

    /// Refuses `name` when its engine is not transactional (before any data moves), with the
    /// delivery error: used for the tables effectively-once needs (the commit tokens, a
    /// table just created); `Ok(false)` when there is no such table.
    async fn check_engine(&self, conn: &mut Conn, name: &TableName) -> Result<bool, FaucetError> {
        match table::engine(conn, &self.connection, name).await? {
            None => Ok(false),
            Some(engine) if engine.transactional => Ok(true),
            Some(engine) => Err(NotTransactional::new(name, &engine).for_effectively_once()),
        }
    }

    /// Checks an existing table against the config: the key columns exist and, for upsert,
    /// the primary key or a unique index is exactly them; warns of other unique indexes.
    fn verify(&self, table: &TargetTable) -> Result<(), FaucetError> {
        crate::sql::sink::keys::key_columns_exist(&self.config.key, table.names(), &self.table)?;
        if self.config.write_mode != WriteMode::Upsert {
            return Ok(());
        }
        let key = &self.config.key;
        let same = |set: &Vec<String>| {
            crate::sql::sink::keys::is_unique_key(std::slice::from_ref(set), key)
        };
        if !crate::sql::sink::keys::is_unique_key(&table.unique_sets, key) {
            let sets: Vec<String> = table
                .unique_sets
                .iter()
                .map(|s| format!("({})", s.join(", ")))
                .collect();
            let have = if sets.is_empty() {
                "it has no primary key or unique index".to_owned()
            } else {
                format!(
                    "its primary key and unique indexes are on {}",
                    sets.join(", ")
                )
            };
            return Err(FaucetError::config(
                "key",
                format!(
                    "upsert by ({}) needs a primary key or unique index on exactly these columns \
                     of {}, and {have}; add one (`ALTER TABLE {} ADD UNIQUE ({})`) or change \
                     `key`",
                    key.join(", "),
                    self.table,
                    self.table.quoted(),
                    key.iter()
                        .map(|k| crate::mysql::table::quote_ident(k))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let others: Vec<String> = table
            .unique_sets
            .iter()
            .filter(|s| !same(s))
            .map(|s| format!("({})", s.join(", ")))
            .collect();
        if !others.is_empty() {
            tracing::warn!(
                sink = CONNECTOR,
                table = %self.table,
                other_unique = %others.join(", "),
                "the table has unique indexes besides the upsert key: a row whose key is new \
                 but whose value in one of them is taken updates that other row (ON DUPLICATE \
                 KEY UPDATE matches any unique index)"
            );
        }
        Ok(())
    }
}

fn missing_table(name: &TableName) -> FaucetError {
    FaucetError::write(
        CONNECTOR,
        format!(
            "table {name} does not exist; create it (InnoDB), or set `create_table: true` to \
             create it from the records"
        ),
        None,
    )
}

#[async_trait]
impl Sink for MysqlSink {
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
        let opts = self.connection.opts();
        let what = self.upsert_keys().target(&self.table);
        Some(format!(
            "{CONNECTOR} {}:{}/{} {what}",
            opts.ip_or_hostname(),
            opts.tcp_port(),
            self.connection.database(),
        ))
    }

    /// Connects, and checks the table: its engine (transactional), the key; a missing table
    /// is created with the first page when `create_table` is set.
    ///
    /// # Errors
    /// [`FaucetError::Connect`]; [`FaucetError::Write`] when the table is missing and `create_table` is off;
    /// [`FaucetError::Config`] when the key does not fit the table.
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        let (mut conn, server) = self.session().await?;
        let base = Scratch {
            server,
            source_table: None,
            refusal: None,
        };
        if self.route.is_some() {
            return Ok(Box::new(SqlSinkWriter::routed(self, conn, base)));
        }
        let (table, scratch) = self.open_target(&mut conn, &base).await?;
        Ok(Box::new(SqlSinkWriter::new(self, conn, table, scratch)))
    }

    /// Connects; checks that the table exists (or may be created), is transactional, fits
    /// the key, and that the user may write it (INSERT; UPDATE and DELETE for upsert; CREATE
    /// for the token table).
    ///
    /// # Errors
    /// The first failing prerequisite, with its fix.
    async fn check(&self) -> Result<(), FaucetError> {
        let (mut conn, _) = self.session().await?;
        if let Some(route) = &self.route {
            // The listed targets that exist are checked as a sink of each would be; the
            // others are met in the records.
            for target in route.listed() {
                let one = self.for_target(&target)?;
                match table::engine(&mut conn, &self.connection, &one.table).await? {
                    None if !self.config.create_table => return Err(missing_table(&one.table)),
                    None => {}
                    Some(engine) if !engine.transactional => {
                        return Err(NotTransactional::new(&one.table, &engine).for_writes());
                    }
                    Some(_) => {
                        let keyed =
                            !(target.key.is_empty() && target.write_mode == WriteMode::Upsert);
                        if let Some(t) = table::load(&mut conn, &self.connection, &one.table)
                            .await?
                            .filter(|_| keyed)
                        {
                            one.verify(&t)?;
                        }
                    }
                }
            }
            return Ok(());
        }
        let exists = match table::engine(&mut conn, &self.connection, &self.table).await? {
            None => false,
            Some(engine) if engine.transactional => true,
            Some(engine) => return Err(NotTransactional::new(&self.table, &engine).for_writes()),
        };
        if exists {
            let Some(t) = table::load(&mut conn, &self.connection, &self.table).await? else {
                return Err(missing_table(&self.table));
            };
            self.verify(&t)?;
        } else if !self.config.create_table {
            return Err(missing_table(&self.table));
        }
        let mut needed = vec!["INSERT", "CREATE"];
        if self.config.write_mode == WriteMode::Upsert {
            needed.extend(["UPDATE", "DELETE"]);
        }
        let db = self
            .table
            .database
            .as_deref()
            .unwrap_or(self.connection.database());
        // The user's privileges on the table, its database or globally.
        let granted: Vec<String> = conn
            .exec(
                "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES \
                 WHERE GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', \
                 SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') \
                 UNION SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES \
                 WHERE GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', \
                 SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') AND TABLE_SCHEMA = ? \
                 UNION SELECT PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES \
                 WHERE GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', \
                 SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') AND TABLE_SCHEMA = ? \
                 AND TABLE_NAME = ?",
                (db, db, &self.table.table),
            )
            .await
            .map_err(|e| classify(e, "reading the user's privileges", &self.table))?;
        for p in needed {
            if !granted.iter().any(|g| g.eq_ignore_ascii_case(p)) {
                return Err(FaucetError::write(
                    CONNECTOR,
                    format!(
                        "the user has no {p} privilege on {} ({p} on the database is needed \
                         for the commit token and fence tables too); GRANT {p} ON {}.* TO \
                         <user>",
                        self.table,
                        crate::mysql::table::quote_ident(db)
                    ),
                    None,
                ));
            }
        }
        Ok(())
    }

    /// Checks that an existing table has a column for every field of `schema` (what
    /// `append` writes, and `upsert` of plain rows): for change records appended as rows,
    /// the audit columns (`op`, `table`, the position fields, `commit_ts`, `before`,
    /// `after`, …). Change records applied by `upsert` write the source table's columns,
    /// which only the data tells, so they pass; a missing table is [`Sink::check`]'s to
    /// report.
    ///
    /// # Errors
    /// [`FaucetError::Write`] naming the missing columns and the `ALTER TABLE` that adds
    /// them (types as `create_table` would make them, README "mysql sink").
    async fn check_schema(&self, schema: &faucet_core::Schema) -> Result<(), FaucetError> {
        if self.route.is_some()
            || !crate::sql::write::checks_columns(self.config.write_mode, schema)
        {
            return Ok(());
        }
        let (mut conn, _) = self.session().await?;
        let Some(t) = table::load(&mut conn, &self.connection, &self.table).await? else {
            return Ok(());
        };
        match crate::sql::write::missing_columns(
            CONNECTOR,
            schema,
            |name| t.type_of(name).is_some(),
            (&self.table, &self.table.quoted()),
            |f| {
                format!(
                    "{} {}",
                    crate::mysql::table::quote_ident(&f.name),
                    table::column_type(&f.data_type, &[], false)
                )
            },
        ) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The drift of the table from the source table's `columns`, as every SQL sink tells it
    /// (`sql::sink::drift`, types compared as `alter` compares them); `None` for a routed
    /// sink or a table not created yet.
    async fn check_drift(
        &self,
        _source_table: &str,
        columns: &[faucet_core::change::schema::ColumnShape],
        pending: Option<&faucet_core::change::schema::SchemaChange>,
    ) -> Result<Option<faucet_core::change::Drift>, FaucetError> {
        if self.route.is_some() {
            return Ok(None);
        }
        let (mut conn, _) = self.session().await?;
        let t = table::load(&mut conn, &self.connection, &self.table).await?;
        Ok(t.map(|t| crate::sql::sink::drift::drift(self, &t, columns, pending)))
    }
}

/// What a `mysql` writer keeps from page to page.
pub(crate) struct Scratch {
    server: Server,
    /// The `table` of the change records written so far.
    source_table: Option<String>,
    /// Why the target cannot be written (its engine is not transactional): refused at the
    /// first page, or when effectively-once asks for the commit token, before any data moves
    /// — in the words of what was asked, which `open` does not know.
    refusal: Option<NotTransactional>,
}

/// MySQL / MariaDB for the SQL sink engine ([`SqlSinkWriter`]): `START TRANSACTION`,
/// multi-row `INSERT`s, `ON DUPLICATE KEY UPDATE`, InnoDB's engine check,
/// `idle_transaction_timeout`.
#[async_trait]
impl SinkDialect for MysqlSink {
    type Conn = Conn;
    type Table = TargetTable;
    type Scratch = Scratch;

    fn connector(&self) -> &'static str {
        CONNECTOR
    }

    /// Append: a schema-change record is a row; upsert: applied by `schema_changes` /
    /// `dropped_columns`, ahead of the page's transaction ([`alter`]).
    fn schema_apply(&self) -> SchemaApply {
        SchemaApply::by_mode(
            self.config.write_mode,
            self.config.schema_changes,
            self.config.dropped_columns,
        )
    }

    /// `false`: MySQL's DDL commits the open transaction implicitly.
    fn transactional_ddl(&self) -> bool {
        false
    }

    fn schema_key(&self) -> &[String] {
        self.upsert_key()
    }

    fn columns_of(&self, table: &TargetTable) -> Vec<TargetColumn> {
        table.declared.clone()
    }

    fn column_name_problem(&self, name: &str) -> Option<String> {
        table::column_name_problem(name)
    }

    fn new_column_type(&self, data_type: &faucet_core::DataType, source_type: &str) -> String {
        alter::new_type(data_type, source_type)
    }

    fn widen(&self, target: &str, data_type: &faucet_core::DataType, source: &str) -> Widening {
        alter::widen(target, data_type, source)
    }

    fn alter_sql(&self, step: &Alter<'_>) -> Option<String> {
        Some(alter::sql(&self.table, step))
    }

    /// Runs the DDL on its own (it commits implicitly; the engine runs it ahead of the
    /// page's transaction).
    async fn execute_ddl(&self, conn: &mut Conn, sql: &str) -> Result<(), FaucetError> {
        conn.query_drop(sql)
            .await
            .map_err(|e| classify(e, "ALTER TABLE", &self.table))
    }

    async fn reload_target(
        &self,
        conn: &mut Conn,
        _scratch: &mut Scratch,
    ) -> Result<TargetTable, FaucetError> {
        table::load(conn, &self.connection, &self.table)
            .await?
            .ok_or_else(|| missing_table(&self.table))
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

    /// This sink for `target`: its table (in the URL's database when unqualified), key and
    /// write mode.
    fn for_target(&self, target: &RouteTarget) -> Result<Self, FaucetError> {
        let table = target.parsed_name(CONNECTOR, TableName::parse)?;
        let mut one = self.clone();
        one.config.key = target.key.clone();
        one.config.write_mode = target.write_mode;
        one.table = table.qualified_in(self.connection.database());
        one.route = None;
        Ok(one)
    }

    /// Reads the table's engine (a non-transactional one is kept as the refusal) and
    /// columns, and checks it against the config (or that it may be created).
    async fn open_target(
        &self,
        conn: &mut Conn,
        base: &Scratch,
    ) -> Result<(Option<TargetTable>, Scratch), FaucetError> {
        let refusal = match table::engine(conn, &self.connection, &self.table).await? {
            Some(engine) if !engine.transactional => {
                Some(NotTransactional::new(&self.table, &engine))
            }
            _ => None,
        };
        let table = table::load(conn, &self.connection, &self.table).await?;
        match &table {
            Some(t) => self.verify(t)?,
            None if !self.config.create_table => return Err(missing_table(&self.table)),
            None => {}
        }
        let scratch = Scratch {
            server: base.server,
            source_table: None,
            refusal,
        };
        Ok((table, scratch))
    }

    fn refusal(&self, scratch: &Scratch, effectively_once: bool) -> Option<FaucetError> {
        scratch.refusal.as_ref().map(|r| {
            if effectively_once {
                r.for_effectively_once()
            } else {
                r.for_writes()
            }
        })
    }

    async fn create_target(
        &self,
        conn: &mut Conn,
        page: &Page,
        _scratch: &mut Scratch,
    ) -> Result<Option<(TargetTable, bool)>, FaucetError> {
        if !self.config.create_table {
            return Ok(None);
        }
        let apply_changes = self.config.write_mode == WriteMode::Upsert;
        let collation = table::nopad_binary_collation(conn, &self.table).await?;
        let Some(sql) = table::create_statement(
            &self.table,
            page,
            &self.config.key,
            apply_changes,
            collation,
        )?
        else {
            return Ok(None);
        };
        tracing::info!(sink = CONNECTOR, table = %self.table, %sql, "creating the target table");
        let existed = self.check_engine(conn, &self.table).await?;
        conn.query_drop(sql)
            .await
            .map_err(|e| classify(e, "creating the table", &self.table))?;
        self.check_engine(conn, &self.table).await?;
        let created = table::load(conn, &self.connection, &self.table).await?;
        Ok(created.map(|t| (t, !existed)))
    }

    async fn ready_target(
        &self,
        _conn: &mut Conn,
        table: &TargetTable,
        _scratch: &mut Scratch,
    ) -> Result<(), FaucetError> {
        self.verify(table)
    }

    async fn drop_if_empty(&self, conn: &mut Conn, _scratch: &mut Scratch) {
        let quoted = self.table.quoted();
        let empty: Result<Option<u8>, _> = conn
            .query_first(format!("SELECT EXISTS (SELECT 1 FROM {quoted})"))
            .await;
        if let Ok(Some(0)) = empty
            && let Err(e) = conn.query_drop(format!("DROP TABLE {quoted}")).await
        {
            tracing::warn!(table = %self.table, error = %e, "could not drop the table created for a page that failed");
        }
    }

    async fn begin(&self, conn: &mut Conn) -> Result<(), FaucetError> {
        conn.query_drop("START TRANSACTION")
            .await
            .map_err(|e| classify(e, "START TRANSACTION", &self.table))
    }

    async fn commit(&self, conn: &mut Conn) -> Result<(), FaucetError> {
        conn.query_drop("COMMIT")
            .await
            .map_err(|e| classify(e, "COMMIT", &self.table))
    }

    async fn rollback(&self, conn: &mut Conn) -> Result<(), FaucetError> {
        conn.query_drop("ROLLBACK")
            .await
            .map_err(|e| classify(e, "ROLLBACK", &self.table))
    }

    fn is_lost(&self, e: &FaucetError) -> bool {
        is_lost(e)
    }

    /// 1213 ER_LOCK_DEADLOCK (InnoDB rolls the whole transaction back; a lock wait timeout
    /// rolls back only the statement, so it is not retried) — first pages of concurrent
    /// runs into a fresh token table deadlock on its gap locks.
    fn is_retryable(&self, e: &FaucetError) -> bool {
        matches!(e, FaucetError::Write { source: Some(s), .. }
            if matches!(s.downcast_ref::<mysql_async::Error>(),
                Some(mysql_async::Error::Server(s)) if s.code == 1213))
    }

    async fn write_rows(
        &self,
        conn: &mut Conn,
        table: &TargetTable,
        page: &Page,
        scratch: &mut Scratch,
    ) -> Result<(), FaucetError> {
        let target = Target {
            name: &self.table,
            table,
            key: self.upsert_key(),
            syntax: scratch.server.syntax,
            max_packet: scratch.server.max_packet,
        };
        match self.config.write_mode {
            WriteMode::Append => write::append(conn, &target, page).await,
            WriteMode::Upsert => {
                write::upsert(conn, &target, page, &mut scratch.source_table).await
            }
        }
    }

    async fn holds_data(&self, conn: &mut Conn) -> Result<bool, FaucetError> {
        let name = &self.table;
        let any: Option<u8> = conn
            .query_first(format!("SELECT EXISTS (SELECT 1 FROM {})", name.quoted()))
            .await
            .map_err(|e| classify(e, "telling whether it holds data", name))?;
        Ok(any.unwrap_or(0) == 1)
    }

    async fn ensure_tokens(&self, conn: &mut Conn) -> Result<(), FaucetError> {
        token::ensure(conn, &self.tokens).await?;
        self.check_engine(conn, &self.tokens).await?;
        Ok(())
    }

    async fn advance_token(
        &self,
        conn: &mut Conn,
        scope: &str,
        token: &CommitToken,
    ) -> Result<(), FaucetError> {
        token::advance(conn, &self.tokens, scope, token).await
    }

    async fn last_token(
        &self,
        conn: &mut Conn,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        token::last(conn, &self.tokens, self.connection.database(), scope).await
    }

    async fn forget_token(&self, conn: &mut Conn, scope: &str) -> Result<(), FaucetError> {
        token::forget(conn, &self.tokens, scope).await
    }

    async fn ensure_fences(&self, conn: &mut Conn) -> Result<(), FaucetError> {
        fence::ensure(conn, &self.fences).await?;
        self.check_engine(conn, &self.fences).await?;
        Ok(())
    }

    async fn check_fence(&self, conn: &mut Conn, writer: &WriterFence) -> Result<(), FaucetError> {
        fence::check(conn, &self.fences, &self.table, writer).await
    }

    async fn set_fence(&self, conn: &mut Conn, writer: &WriterFence) -> Result<(), FaucetError> {
        fence::set(conn, &self.fences, writer).await
    }

    async fn abort_stalled_pages_after(
        &self,
        conn: &mut Conn,
        ttl: std::time::Duration,
    ) -> Result<(), FaucetError> {
        fence::abort_stalled_pages_after(conn, ttl, &self.table).await
    }
}
