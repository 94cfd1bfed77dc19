//! The `sqlite` sink: writes pages into one table of a SQLite database file, each page in
//! one transaction — the third dialect of the SQL sink engine (`sql::sink`), which owns the
//! page transaction, the commit token (`faucet_commit_tokens`, in the same file), the writer
//! fence (`faucet_fences`) and what a failure leaves behind. This module is only what SQLite
//! does differently: the file and its session settings (here), the statements
//! ([`dialect`](self) and `write`), the catalog (`table`), the value mapping ([`value`]'s
//! table) and the errors (`failure`).
//!
//! * The file runs in WAL journal mode with `synchronous = FULL` (a committed page is on
//!   disk before the run loop stores its bookmark) and a busy timeout (`busy_timeout_ms`).
//!   Each page's transaction is `BEGIN IMMEDIATE`: it takes the file's write lock first, so
//!   two writers queue instead of failing half-way.
//! * `append`: multi-row `INSERT`s (up to 2,000 rows per statement, prepared once per shape).
//!   Change records are appended as rows of a change table (an audit log).
//! * `upsert` by `key`: change records are applied (`d` deletes, `c`/`u`/`r` upsert, `t`
//!   empties the table) after [`faucet_core::change::collapse`]; plain rows upsert
//!   themselves; `INSERT … ON CONFLICT (key) DO UPDATE`.
//! * A locked file (another connection holds the lock past the busy timeout) fails the page
//!   naming the file, and the engine runs the page's transaction again a few times; a
//!   read-only file, a directory or a file that is no database fail naming the path.
//! * A writer stalled inside a page keeps the file's write lock: SQLite has no server to end
//!   its session, so a newer run waits up to the busy timeout and fails naming the file.
//!
//! Capabilities: `atomic_watermark` always; `keyed_upsert` with `write_mode: upsert`.

mod config;
mod dialect;
mod failure;
mod table;
pub mod value;
mod write;

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::ConnectOptions as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};

use faucet_core::{FaucetError, Sink, SinkCapabilities, SinkWriter};

use crate::sql::sink::route::UpsertKeys;

pub use config::{SqliteSinkConfig, WriteMode};

pub(crate) use config::CONNECTOR;
use failure::classify;
use table::TargetTable;

/// The `sqlite` sink. Built from a validated [`SqliteSinkConfig`] without I/O;
/// [`Sink::open`] and [`Sink::check`] open the file.
#[derive(Debug)]
pub struct SqliteSink {
    config: SqliteSinkConfig,
}

/// What the statements of one sink need to know: the table, the file, the keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    /// The table name, unquoted.
    pub(crate) name: &'a str,
    /// The database file, for messages.
    pub(crate) path: &'a Path,
    /// The key of an upsert (empty for append).
    pub(crate) upsert_key: &'a [String],
    /// The configured key (a created table's primary key).
    pub(crate) record_key: &'a [String],
    /// The busy timeout, for messages.
    pub(crate) busy_timeout_ms: u64,
}

/// `name` quoted as a SQLite identifier (double quotes, `"` doubled: SQLite's keywords
/// page), by [`crate::sql::ident::quote_ident`].
pub(crate) fn quoted(name: &str) -> String {
    crate::sql::ident::quote_ident(name)
}

impl SqliteSink {
    /// The one rule of the SQL sinks for what this sink upserts by (it does not route).
    fn upsert_keys(&self) -> UpsertKeys<'_> {
        UpsertKeys {
            route: None,
            write_mode: self.config.write_mode,
            key: &self.config.key,
        }
    }

    /// A sink for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`SqliteSinkConfig::validate`].
    pub fn new(config: SqliteSinkConfig) -> Result<Self, FaucetError> {
        config.validate()?;
        Ok(Self { config })
    }

    /// The configuration.
    pub fn config(&self) -> &SqliteSinkConfig {
        &self.config
    }

    pub(crate) fn at(&self) -> Target<'_> {
        Target {
            name: &self.config.table,
            path: &self.config.path,
            upsert_key: self.config.write_mode.upsert_key(&self.config.key),
            record_key: &self.config.key,
            busy_timeout_ms: self.config.busy_timeout_ms,
        }
    }

    /// Opens the file (creating it when missing) with the session settings of the module,
    /// and takes its write lock once (released at once).
    ///
    /// # Errors
    /// [`FaucetError::Write`] naming the path: a directory, a missing directory, a
    /// read-only or locked file, a file that is no database.
    async fn session(&self) -> Result<SqliteConnection, FaucetError> {
        let at = self.at();
        let mut conn = SqliteConnectOptions::new()
            .filename(&self.config.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_millis(self.config.busy_timeout_ms))
            .disable_statement_logging()
            .connect()
            .await
            .map_err(|e| classify(e, "opening the database file", &at))?;
        // SQLite opens a file it may not write read-only, without a word: take the write
        // lock once, so such a file fails here, naming itself, not at the first page.
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut conn)
            .await
            .map_err(|e| classify(e, "taking the write lock", &at))?;
        sqlx::query("ROLLBACK")
            .execute(&mut conn)
            .await
            .map_err(|e| classify(e, "ROLLBACK", &at))?;
        Ok(conn)
    }

    /// Checks an existing table against the config: the key columns exist and, for upsert,
    /// the primary key or a unique index is exactly them.
    fn verify(&self, table: &TargetTable) -> Result<(), FaucetError> {
        let key = &self.config.key;
        crate::sql::sink::keys::key_columns_exist(key, table.names(), &self.config.table)?;
        if self.config.write_mode == WriteMode::Upsert
            && !crate::sql::sink::keys::is_unique_key(&table.unique_sets, key)
        {
            let cols: Vec<String> = key.iter().map(|k| quoted(k)).collect();
            return Err(FaucetError::config(
                "key",
                format!(
                    "upsert by ({}) needs a primary key or unique index on exactly these columns \
                     of {}; add one (`CREATE UNIQUE INDEX {} ON {} ({})`) or change `key`",
                    key.join(", "),
                    self.config.table,
                    quoted(&format!("{}_key", self.config.table)),
                    quoted(&self.config.table),
                    cols.join(", ")
                ),
            ));
        }
        Ok(())
    }

    fn missing_table(&self) -> FaucetError {
        FaucetError::write(
            CONNECTOR,
            format!(
                "table {} does not exist in {}; create it, or set `create_table: true` to \
                 create it from the records",
                self.config.table,
                self.config.path.display()
            ),
            None,
        )
    }
}

#[async_trait]
impl Sink for SqliteSink {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// `key:` with `write_mode: upsert`.
    fn upserts_by(&self) -> Option<Vec<String>> {
        self.upsert_keys().upserts_by()
    }

    fn capabilities(&self) -> SinkCapabilities {
        self.upsert_keys().capabilities()
    }

    /// `sqlite /abs/path/file.db table t`.
    fn target(&self) -> Option<String> {
        let path =
            std::path::absolute(&self.config.path).unwrap_or_else(|_| self.config.path.clone());
        Some(format!(
            "{CONNECTOR} {} table {}",
            path.display(),
            self.config.table
        ))
    }

    /// Opens the file, and checks the table (see [`SqliteSinkConfig`]); a missing table is
    /// created with the first page when `create_table` is set.
    ///
    /// # Errors
    /// [`FaucetError::Write`] naming the path when the file cannot be opened or written, or
    /// the table is missing and `create_table` is off; [`FaucetError::Config`] when the key
    /// does not fit the table.
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        let mut conn = self.session().await?;
        let table = table::load(&mut conn, &self.at()).await?;
        match &table {
            Some(t) => self.verify(t)?,
            None if !self.config.create_table => return Err(self.missing_table()),
            None => {}
        }
        Ok(Box::new(crate::sql::sink::SqlSinkWriter::new(
            self,
            conn,
            table,
            write::Scratch::default(),
        )))
    }

    /// Opens the file (which takes its write lock once: a read-only or locked file fails
    /// here); checks that the table exists (or may be created) and fits the key.
    ///
    /// # Errors
    /// The first failing prerequisite, with its fix.
    async fn check(&self) -> Result<(), FaucetError> {
        let mut conn = self.session().await?;
        match table::load(&mut conn, &self.at()).await? {
            Some(t) => self.verify(&t),
            None if !self.config.create_table => Err(self.missing_table()),
            None => Ok(()),
        }
    }

    /// The drift of the table from the source table's `columns`, as every SQL sink tells it
    /// (`sql::sink::drift`); `None` while the table does not exist.
    async fn check_drift(
        &self,
        _source_table: &str,
        columns: &[faucet_core::change::schema::ColumnShape],
        pending: Option<&faucet_core::change::schema::SchemaChange>,
    ) -> Result<Option<faucet_core::change::Drift>, FaucetError> {
        let mut conn = self.session().await?;
        let Some(t) = table::load(&mut conn, &self.at()).await? else {
            return Ok(None);
        };
        Ok(Some(crate::sql::sink::drift::drift(
            self, &t, columns, pending,
        )))
    }

    /// Checks that an existing table has a column for every field of `schema` (what
    /// `append` writes, and `upsert` of plain rows); change records applied by `upsert`
    /// pass (only the data tells their columns); a missing table is [`Sink::check`]'s.
    ///
    /// # Errors
    /// [`FaucetError::Write`] naming the missing columns and the `ALTER TABLE` that adds
    /// them.
    async fn check_schema(&self, schema: &faucet_core::Schema) -> Result<(), FaucetError> {
        if !crate::sql::write::checks_columns(self.config.write_mode, schema) {
            return Ok(());
        }
        let mut conn = self.session().await?;
        let Some(t) = table::load(&mut conn, &self.at()).await? else {
            return Ok(());
        };
        match crate::sql::write::missing_columns(
            CONNECTOR,
            schema,
            |name| t.affinity(name).is_some(),
            (&self.config.table, &quoted(&self.config.table)),
            |f| format!("{} {}", quoted(&f.name), value::column_type(&f.data_type)),
        ) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
