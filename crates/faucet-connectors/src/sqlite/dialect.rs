//! SQLite for the SQL sink engine ([`SqlSinkWriter`](crate::sql::sink::SqlSinkWriter)):
//! `BEGIN IMMEDIATE` / `COMMIT`, the rows (`write`), and the commit token and fence tables
//! in the same file:
//!
//! ```sql
//! CREATE TABLE faucet_commit_tokens (scope TEXT PRIMARY KEY, sequence INTEGER NOT NULL,
//!   bookmark TEXT NOT NULL, committed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ')));
//! CREATE TABLE faucet_fences (scope TEXT PRIMARY KEY, fence INTEGER NOT NULL,
//!   fenced_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ')));
//! ```

use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::SqliteConnection;

use faucet_core::{CommitToken, FaucetError, Page};

use super::failure::{self, classify};
use super::table::{self, TargetTable};
use super::value::{Affinity, column_type};
use super::write::{self, Scratch};
use super::{CONNECTOR, SqliteSink, WriteMode, quoted};
use crate::sql::sink::SinkDialect;
use crate::sql::sink::fence::{FENCES, WriterFence, fenced};
use crate::sql::sink::schema::{Alter, SchemaApply, TargetColumn, Widening};
use crate::sql::sink::token::{self as shared, TOKENS};

/// The time of a token or fence, as text (UTC, milliseconds).
const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ')";

/// A sequence or fence as SQLite's INTEGER.
fn integer(value: u64, what: &str) -> Result<i64, FaucetError> {
    i64::try_from(value).map_err(|_| {
        FaucetError::write(
            CONNECTOR,
            format!("{what} {value} exceeds SQLite's INTEGER"),
            None,
        )
    })
}

impl SqliteSink {
    /// Runs one statement outside the page's statements' error rules.
    async fn exec(
        &self,
        conn: &mut SqliteConnection,
        sql: &str,
        what: &str,
    ) -> Result<u64, FaucetError> {
        sqlx::query(sql)
            .execute(&mut *conn)
            .await
            .map(|d| d.rows_affected())
            .map_err(|e| classify(e, what, &self.at()))
    }
}

impl SqliteSink {
    /// Stores `writer`'s fence for its scope — with `only_raise`, unless a larger one is
    /// stored — and says whether it did.
    async fn store_fence(
        &self,
        conn: &mut SqliteConnection,
        writer: &WriterFence,
        only_raise: bool,
    ) -> Result<bool, FaucetError> {
        let fence = integer(writer.fence, "lease fence")?;
        let sql = format!(
            "INSERT INTO {0} (scope, fence) VALUES (?, ?) ON CONFLICT (scope) DO UPDATE \
             SET fence = excluded.fence, fenced_at = {NOW}{1}",
            quoted(FENCES),
            if only_raise {
                format!(" WHERE {}.fence <= excluded.fence", quoted(FENCES))
            } else {
                String::new()
            }
        );
        let done = sqlx::query(&sql)
            .bind(&writer.scope)
            .bind(fence)
            .execute(&mut *conn)
            .await
            .map_err(|e| classify(e, "storing the writer fence", &self.at()))?;
        Ok(done.rows_affected() > 0)
    }
}

#[async_trait]
impl SinkDialect for SqliteSink {
    type Conn = SqliteConnection;
    type Table = TargetTable;
    type Scratch = Scratch;

    fn connector(&self) -> &'static str {
        CONNECTOR
    }

    fn target_name(&self) -> String {
        self.config.table.clone()
    }

    async fn create_target(
        &self,
        conn: &mut SqliteConnection,
        page: &Page,
        _scratch: &mut Scratch,
    ) -> Result<Option<(TargetTable, bool)>, FaucetError> {
        if !self.config.create_table {
            return Ok(None);
        }
        let existed = table::exists(conn, &self.config.table, &self.at()).await?;
        let apply_changes = self.config.write_mode == WriteMode::Upsert;
        let created = table::create(conn, &self.at(), page, apply_changes).await?;
        Ok(created.map(|t| (t, !existed)))
    }

    async fn ready_target(
        &self,
        _conn: &mut SqliteConnection,
        table: &TargetTable,
        _scratch: &mut Scratch,
    ) -> Result<(), FaucetError> {
        self.verify(table)
    }

    async fn drop_if_empty(&self, conn: &mut SqliteConnection, _scratch: &mut Scratch) {
        if let Err(e) = table::drop_if_empty(conn, &self.at()).await {
            tracing::warn!(table = %self.config.table, error = %e, "could not drop the table created for a page that failed");
        }
    }

    async fn begin(&self, conn: &mut SqliteConnection) -> Result<(), FaucetError> {
        self.exec(conn, "BEGIN IMMEDIATE", "BEGIN").await.map(drop)
    }

    async fn commit(&self, conn: &mut SqliteConnection) -> Result<(), FaucetError> {
        self.exec(conn, "COMMIT", "COMMIT").await.map(drop)
    }

    async fn rollback(&self, conn: &mut SqliteConnection) -> Result<(), FaucetError> {
        self.exec(conn, "ROLLBACK", "ROLLBACK").await.map(drop)
    }

    /// Lost: the connection's worker is gone, or the file failed under SQLite (I/O error,
    /// disk full, corruption): the outcome of `COMMIT` is unknown.
    fn is_lost(&self, e: &FaucetError) -> bool {
        failure::is_lost(e)
    }

    /// SQLITE_BUSY / SQLITE_LOCKED after the busy timeout: nothing committed.
    fn is_retryable(&self, e: &FaucetError) -> bool {
        failure::is_locked(e)
    }

    async fn write_rows(
        &self,
        conn: &mut SqliteConnection,
        table: &TargetTable,
        page: &Page,
        scratch: &mut Scratch,
    ) -> Result<(), FaucetError> {
        match self.config.write_mode {
            WriteMode::Append => write::append(conn, &self.at(), table, page, scratch).await,
            WriteMode::Upsert => write::upsert(conn, &self.at(), table, page, scratch).await,
        }
    }

    fn schema_apply(&self) -> SchemaApply {
        SchemaApply::by_mode(
            self.config.write_mode,
            self.config.schema_changes,
            self.config.dropped_columns,
        )
    }

    fn schema_key(&self) -> &[String] {
        self.at().upsert_key
    }

    /// The columns with their affinity as their type (SQLite types are affinities).
    fn columns_of(&self, table: &TargetTable) -> Vec<TargetColumn> {
        table
            .columns
            .iter()
            .map(|(name, affinity)| TargetColumn {
                name: name.clone(),
                sql_type: format!("{affinity:?}"),
                not_null: table.required.contains(name),
            })
            .collect()
    }

    fn column_name_problem(&self, name: &str) -> Option<String> {
        super::config::column_name_problem(name)
    }

    fn new_column_type(&self, data_type: &faucet_core::DataType, _source_type: &str) -> String {
        column_type(data_type).to_owned()
    }

    /// Nothing to do when the new type's column would have the target column's affinity
    /// (or the column takes values as given, BLOB); SQLite cannot alter a column's type,
    /// so anything else is refused.
    fn widen(
        &self,
        target_type: &str,
        data_type: &faucet_core::DataType,
        _source_type: &str,
    ) -> Widening {
        let target = Affinity::of(target_type);
        if target == Affinity::Blob || target == Affinity::of(column_type(data_type)) {
            Widening::Holds
        } else {
            Widening::No
        }
    }

    fn alter_sql(&self, step: &Alter<'_>) -> Option<String> {
        let t = quoted(&self.config.table);
        match *step {
            Alter::Add(c, ty) => Some(format!("ALTER TABLE {t} ADD COLUMN {} {ty}", quoted(c))),
            Alter::Rename(from, to) => Some(format!(
                "ALTER TABLE {t} RENAME COLUMN {} TO {}",
                quoted(from),
                quoted(to)
            )),
            Alter::Drop(c) => Some(format!("ALTER TABLE {t} DROP COLUMN {}", quoted(c))),
            Alter::Type(..) | Alter::DropNotNull(..) => None,
        }
    }

    async fn execute_ddl(&self, conn: &mut SqliteConnection, sql: &str) -> Result<(), FaucetError> {
        self.exec(conn, sql, "ALTER TABLE").await.map(|_| ())
    }

    async fn reload_target(
        &self,
        conn: &mut SqliteConnection,
        _scratch: &mut Scratch,
    ) -> Result<TargetTable, FaucetError> {
        table::load(conn, &self.at())
            .await?
            .ok_or_else(|| self.missing_table())
    }

    async fn holds_data(&self, conn: &mut SqliteConnection) -> Result<bool, FaucetError> {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {})",
            quoted(&self.config.table)
        );
        sqlx::query_scalar(&sql)
            .fetch_one(conn)
            .await
            .map_err(|e| classify(e, "reading whether the table holds data", &self.at()))
    }

    async fn ensure_tokens(&self, conn: &mut SqliteConnection) -> Result<(), FaucetError> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (scope TEXT PRIMARY KEY, sequence INTEGER NOT NULL, \
             bookmark TEXT NOT NULL, committed_at TEXT NOT NULL DEFAULT ({NOW}))",
            quoted(TOKENS)
        );
        self.exec(conn, &sql, "creating the commit token table")
            .await
            .map(drop)
    }

    async fn advance_token(
        &self,
        conn: &mut SqliteConnection,
        scope: &str,
        token: &CommitToken,
    ) -> Result<(), FaucetError> {
        let sequence = integer(token.sequence, "commit token sequence")?;
        let bookmark = shared::stored_bookmark(CONNECTOR, &token.bookmark)?;
        let sql = format!(
            "INSERT INTO {0} (scope, sequence, bookmark) VALUES (?, ?, ?) \
             ON CONFLICT (scope) DO UPDATE SET sequence = excluded.sequence, \
             bookmark = excluded.bookmark, committed_at = {NOW} \
             WHERE {0}.sequence < excluded.sequence",
            quoted(TOKENS)
        );
        let done = sqlx::query(&sql)
            .bind(scope)
            .bind(sequence)
            .bind(bookmark)
            .execute(&mut *conn)
            .await
            .map_err(|e| classify(e, "storing the commit token", &self.at()))?;
        if done.rows_affected() == 0 {
            return Err(shared::refused(
                CONNECTOR,
                (&TOKENS, scope),
                token.sequence,
                None,
            ));
        }
        Ok(())
    }

    async fn last_token(
        &self,
        conn: &mut SqliteConnection,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        if !table::exists(conn, TOKENS, &self.at()).await? {
            return Ok(None);
        }
        let sql = format!(
            "SELECT sequence, bookmark FROM {} WHERE scope = ?",
            quoted(TOKENS)
        );
        let row: Option<(i64, String)> = sqlx::query_as(&sql)
            .bind(scope)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| classify(e, "reading the commit token", &self.at()))?;
        let Some((sequence, bookmark)) = row else {
            return Ok(None);
        };
        let sequence = shared::stored_sequence(CONNECTOR, (&TOKENS, scope), sequence)?;
        shared::read_back(CONNECTOR, (&TOKENS, scope), sequence, &bookmark).map(Some)
    }

    async fn forget_token(
        &self,
        conn: &mut SqliteConnection,
        scope: &str,
    ) -> Result<(), FaucetError> {
        let sql = format!("DELETE FROM {} WHERE scope = ?", quoted(TOKENS));
        sqlx::query(&sql)
            .bind(scope)
            .execute(&mut *conn)
            .await
            .map_err(|e| classify(e, "deleting the stale commit token", &self.at()))?;
        Ok(())
    }

    async fn ensure_fences(&self, conn: &mut SqliteConnection) -> Result<(), FaucetError> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (scope TEXT PRIMARY KEY, fence INTEGER NOT NULL, \
             fenced_at TEXT NOT NULL DEFAULT ({NOW}))",
            quoted(FENCES)
        );
        self.exec(conn, &sql, "creating the fence table")
            .await
            .map(drop)
    }

    async fn check_fence(
        &self,
        conn: &mut SqliteConnection,
        writer: &WriterFence,
    ) -> Result<(), FaucetError> {
        let err = |e| classify(e, "checking the writer fence", &self.at());
        if self.store_fence(conn, writer, true).await? {
            return Ok(());
        }
        let sql = format!("SELECT fence FROM {} WHERE scope = ?", quoted(FENCES));
        let newer: i64 = sqlx::query_scalar(&sql)
            .bind(&writer.scope)
            .fetch_one(&mut *conn)
            .await
            .map_err(err)?;
        Err(fenced(
            writer,
            u64::try_from(newer).unwrap_or_default(),
            CONNECTOR,
            &self.config.table,
        ))
    }

    async fn set_fence(
        &self,
        conn: &mut SqliteConnection,
        writer: &WriterFence,
    ) -> Result<(), FaucetError> {
        self.store_fence(conn, writer, false).await.map(drop)
    }

    /// SQLite has no server to end a stalled writer's session: nothing to set (see the
    /// module: a newer run waits up to the busy timeout for the lock).
    async fn abort_stalled_pages_after(
        &self,
        _conn: &mut SqliteConnection,
        _ttl: Duration,
    ) -> Result<(), FaucetError> {
        Ok(())
    }
}
