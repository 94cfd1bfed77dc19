//! [`PostgresStateStore`]: construction, `ensure_table`, and the bookmark operations
//! (`get`, `put`, `delete`, `check`) of seed 004. Leases are in [`crate::lease`].

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use faucet_connectors::postgres::connection::{PostgresUrl, describe};
use faucet_core::FaucetError;
use faucet_core::serde_json::Value;
use faucet_core::state::{
    Lease, LeaseOutcome, LeaseRequest, StateStore, check_round_trip, validate_state_key,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::types::Json;
use sqlx::{ConnectOptions as _, Connection as _};

use crate::error::{Context, STORE, connect_timeout};
use crate::table::Statements;

/// The table name when none is given: `faucet_state` (seed 004).
pub const DEFAULT_TABLE: &str = "faucet_state";
/// The pool size of [`PostgresStateStore::connect`] (and of the CLI): 5 connections (seed 004).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 5;
/// How long the first connection attempt of `connect` / `check` may take: 15 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Run on every connection of a pool the store builds: a bookmark must be durable when
/// `put` returns, so a session whose `synchronous_commit` is `off` (set for the server, the
/// database or the role) is switched to `on`; every other level already waits for the local
/// WAL flush and is left as it is (PostgreSQL manual, "synchronous_commit").
const DURABLE_COMMITS: &str = "SELECT set_config('synchronous_commit', 'on', false) \
                               WHERE current_setting('synchronous_commit') = 'off'";

/// A [`StateStore`] keeping each bookmark as one row of a PostgreSQL table
/// (`key TEXT PRIMARY KEY, value JSONB NOT NULL, updated_at TIMESTAMPTZ NOT NULL DEFAULT
/// NOW()`), with leases in the companion table `<table>_lease` (see the crate README).
///
/// Cloning is cheap and shares the connection pool. `Debug` shows the server as
/// `postgres://user@host:port/db`, never the password.
#[derive(Clone)]
pub struct PostgresStateStore {
    pub(crate) pool: PgPool,
    pub(crate) sql: Statements,
    pub(crate) target: String,
}

impl fmt::Debug for PostgresStateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStateStore")
            .field("target", &self.target)
            .field("table", &self.sql.table)
            .field("lease_table", &self.sql.lease_table)
            .field(
                "max_connections",
                &self.pool.options().get_max_connections(),
            )
            .finish()
    }
}

impl PostgresStateStore {
    /// Connects with the defaults of seed 004: a pool of [`DEFAULT_MAX_CONNECTIONS`] (5) and
    /// the table [`DEFAULT_TABLE`] (`faucet_state`).
    ///
    /// `url` is a libpq-style URL, `postgres://user:password@host:port/database?sslmode=...`.
    ///
    /// # Errors
    /// As [`PostgresStateStore::connect_with`].
    pub async fn connect(url: &str) -> Result<Self, FaucetError> {
        Self::connect_with(url, DEFAULT_MAX_CONNECTIONS, DEFAULT_TABLE).await
    }

    /// Connects with a pool of `max_connections` and the state table `table`.
    ///
    /// The table name and pool size are checked first, before anything is sent. One
    /// connection is then opened directly and closed, so an unreachable server, a bad
    /// login or a missing database is reported at once with its cause (a pool would retry
    /// a refused connection until its timeout and only say "timed out"); the pool opens its
    /// connections on demand afterwards. Does not create the table: see
    /// [`PostgresStateStore::ensure_table`].
    ///
    /// # Errors
    /// [`FaucetError::Config`] for an invalid table name (empty, longer than 63 characters,
    /// anything but `[A-Za-z0-9_]`), `max_connections` of 0 or an unparseable `url`;
    /// [`FaucetError::Connect`] when the server cannot be reached (refused, timeout);
    /// [`FaucetError::State`] when it rejects the login (SQLSTATE 28P01 / 28000) or the
    /// database does not exist (3D000). No message contains the password.
    pub async fn connect_with(
        url: &str,
        max_connections: u32,
        table: &str,
    ) -> Result<Self, FaucetError> {
        let sql = Statements::new(table)?;
        if max_connections == 0 {
            return Err(FaucetError::config(
                "max_connections",
                "must be at least 1 (the default is 5)",
            ));
        }
        // Parsed as every PostgreSQL URL of faucet is (the password kept as a secret, sqlx's
        // statement logs off: the store reports its failures itself).
        let url = PostgresUrl::parse_str(url, "url")?;
        let options = url.options();
        let target = url.describe();
        probe_connection(&options, &target, table).await?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .after_connect(|conn, _| {
                Box::pin(async move { sqlx::query(DURABLE_COMMITS).execute(conn).await.map(drop) })
            })
            .connect_lazy_with(options);
        Ok(Self { pool, sql, target })
    }

    /// Uses a pool the caller built and manages, with the state table `table`. Sends
    /// nothing; the first operation opens a connection. The pool's sessions are used as
    /// they are: if they run with `synchronous_commit = off`, a committed bookmark can be
    /// lost in a server crash (`check()` warns about it).
    ///
    /// # Errors
    /// [`FaucetError::Config`] for an invalid table name.
    pub fn from_pool(pool: PgPool, table: &str) -> Result<Self, FaucetError> {
        let sql = Statements::new(table)?;
        let target = describe(&pool.connect_options());
        Ok(Self { pool, sql, target })
    }

    /// Creates the state table and its lease table if they do not exist
    /// (`CREATE TABLE IF NOT EXISTS`, names double-quoted). Skip it when you manage the
    /// schema yourself; the statements are in the crate README.
    ///
    /// # Errors
    /// [`FaucetError::State`] / [`FaucetError::Connect`] naming the cause (no permission to
    /// create tables: SQLSTATE 42501).
    pub async fn ensure_table(&self) -> Result<(), FaucetError> {
        for (ddl, table) in [
            (&self.sql.create_state, &self.sql.table),
            (&self.sql.create_lease, &self.sql.lease_table),
        ] {
            let mut attempt = 0;
            loop {
                attempt += 1;
                match self.create_serialized(ddl, table).await {
                    Ok(()) => break,
                    // A runner of an older faucet (without the advisory lock) creating the
                    // same table at once: one of them loses the race on a catalog unique
                    // index (pg_class: 42P07, pg_type: 23505 or 42710); the table exists
                    // now, so try again.
                    Err(sqlx::Error::Database(db))
                        if attempt < 5
                            && matches!(
                                db.code().as_deref(),
                                Some("23505" | "42P07" | "42710")
                            ) => {}
                    Err(e) => return Err(self.context("ensure_table", table).classify(e)),
                }
            }
        }
        Ok(())
    }

    /// Runs one `CREATE TABLE IF NOT EXISTS` inside a transaction holding a transaction-level
    /// advisory lock keyed by the table's name, so that runners starting at once create the
    /// table one after another: `IF NOT EXISTS` alone is not safe against a concurrent
    /// creation (the loser fails on the catalog's unique index instead of seeing the table).
    async fn create_serialized(&self, ddl: &str, table: &str) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!("faucet state table {table}"))
            .execute(&mut *tx)
            .await?;
        sqlx::query(ddl).execute(&mut *tx).await?;
        tx.commit().await
    }

    /// The state table's name.
    pub fn table(&self) -> &str {
        &self.sql.table
    }

    /// The lease table's name: `<table>_lease` (shortened with a hash when that would exceed
    /// 63 characters).
    pub fn lease_table(&self) -> &str {
        &self.sql.lease_table
    }

    /// The pool, to share with other code.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) fn context<'a>(&'a self, op: &'a str, table: &'a str) -> Context<'a> {
        Context {
            op,
            target: &self.target,
            table,
        }
    }

    fn state_context<'a>(&'a self, op: &'a str) -> Context<'a> {
        self.context(op, &self.sql.table)
    }

    /// Logs a warning when the pool's sessions commit without waiting for the WAL flush.
    async fn warn_unless_durable(&self) {
        let level: Result<String, _> = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&self.pool)
            .await;
        if level.is_ok_and(|l| l == "off") {
            tracing::warn!(
                target = %self.target,
                "the state store's sessions run with synchronous_commit = off: a bookmark \
                 acknowledged just before a server crash can be lost; turn it on for the \
                 state url's role or database"
            );
        }
    }
}

/// Opens one connection outside any pool and closes it: the real cause of a failure, at once.
async fn probe_connection(
    options: &PgConnectOptions,
    target: &str,
    table: &str,
) -> Result<(), FaucetError> {
    let ctx = Context {
        op: "connect",
        target,
        table,
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            // Closing politely is best effort; the connection is dropped either way.
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(ctx.classify(e)),
        Err(_) => Err(connect_timeout(
            "connect",
            target,
            CONNECT_TIMEOUT.as_secs(),
        )),
    }
}

#[async_trait]
impl StateStore for PostgresStateStore {
    fn name(&self) -> &str {
        STORE
    }

    /// `SELECT value FROM <table> WHERE key = $1`.
    async fn get(&self, key: &str) -> Result<Option<Value>, FaucetError> {
        validate_state_key(key)?;
        sqlx::query_scalar::<_, Json<Value>>(&self.sql.get)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map(|row| row.map(|Json(v)| v))
            .map_err(|e| self.state_context("get").classify(e))
    }

    /// `SELECT value, updated_at FROM <table> WHERE key = $1`: the time is the server's
    /// `now()` of the write that stored the entry.
    async fn get_with_time(
        &self,
        key: &str,
    ) -> Result<Option<(Value, Option<SystemTime>)>, FaucetError> {
        validate_state_key(key)?;
        sqlx::query_as::<_, (Json<Value>, f64)>(&self.sql.get_with_time)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map(|row| {
                row.map(|(Json(v), at)| {
                    let at = Duration::try_from_secs_f64(at)
                        .ok()
                        .and_then(|d| SystemTime::UNIX_EPOCH.checked_add(d));
                    (v, at)
                })
            })
            .map_err(|e| self.state_context("get").classify(e))
    }

    /// One round trip: `INSERT ... ON CONFLICT (key) DO UPDATE`; durable when the server
    /// commits it (with the server's default `synchronous_commit = on`).
    async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError> {
        validate_state_key(key)?;
        sqlx::query(&self.sql.put)
            .bind(key)
            .bind(Json(value))
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| self.state_context("put").classify(e))
    }

    /// `DELETE FROM <table> WHERE key = $1`; a missing key is fine.
    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        validate_state_key(key)?;
        sqlx::query(&self.sql.delete)
            .bind(key)
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| self.state_context("delete").classify(e))
    }

    /// One direct connection (naming an unreachable server, a rejected login or a missing
    /// database at once), then the shared round trip of
    /// [`check_round_trip`] (upsert → select → delete of the doctor key in the state
    /// table), then the lease statement on the lease table inside a transaction that is
    /// rolled back. Leaves no row behind. Each failure says which step, which table and
    /// what to do.
    async fn check(&self) -> Result<(), FaucetError> {
        probe_connection(&self.pool.connect_options(), &self.target, &self.sql.table)
            .await
            .map_err(|e| e.with_context("check"))?;
        check_round_trip(self, &format!(" in table {:?}", self.sql.table)).await?;
        self.warn_unless_durable().await;
        self.check_lease_table()
            .await
            .map_err(|e| e.with_context("check"))
    }

    async fn acquire_lease(&self, request: &LeaseRequest) -> Result<LeaseOutcome, FaucetError> {
        self.acquire(request).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<(), FaucetError> {
        self.renew(lease, ttl).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), FaucetError> {
        self.release(lease).await
    }

    async fn put_fenced(&self, key: &str, value: &Value, lease: &Lease) -> Result<(), FaucetError> {
        self.write_fenced(key, value, lease).await
    }
}
