//! The members table: one row per member name — its current incarnation (a process), when it
//! joined and last heartbeated, its settle, its flap history, and the operator's drain — all
//! times by the database server's clock (`now()`), never a member's.
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS <members> (
//!   name text PRIMARY KEY, incarnation text NOT NULL,
//!   joined_at timestamptz NOT NULL, heartbeat_at timestamptz NOT NULL,
//!   settle_seconds float8 NOT NULL, restarts int NOT NULL, window_start timestamptz NOT NULL,
//!   draining boolean NOT NULL DEFAULT false, leaving boolean NOT NULL DEFAULT false,
//!   rows text[])
//! ```
//!
//! `rows` holds the state keys of the pipeline rows the member loaded from its files: a row
//! is placed only on members that loaded it, so a member started with fewer files (a
//! ConfigMap rollout in progress) is never given a row it cannot run. A table made by an
//! older faucet gets the column at the next join (`ADD COLUMN IF NOT EXISTS`); a member
//! whose `rows` is NULL (an older faucet) counts as having loaded every row.

use std::collections::BTreeSet;
use std::time::Duration;

use faucet_connectors::postgres::TableName;
use faucet_core::FaucetError;
use sqlx::PgPool;

use super::settle;

/// A member as the table shows it, ages measured by the server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Member {
    /// Its name (`--member`).
    pub(crate) name: String,
    /// The process holding the name now.
    pub(crate) incarnation: String,
    /// Seconds since its last heartbeat.
    pub(crate) heartbeat_age: f64,
    /// Seconds since it (its incarnation) joined.
    pub(crate) up: f64,
    /// Its settle, seconds.
    pub(crate) settle: f64,
    /// Drained by the operator.
    pub(crate) draining: bool,
    /// Left (SIGTERM) and not started again.
    pub(crate) leaving: bool,
    /// The state keys of the rows it loaded (`None`: not recorded, by an older faucet).
    pub(crate) rows: Option<BTreeSet<String>>,
}

impl Member {
    /// Alive: a heartbeat younger than `ttl`, and not left.
    pub(crate) fn alive(&self, ttl: Duration) -> bool {
        !self.leaving && self.heartbeat_age < ttl.as_secs_f64()
    }

    /// Settled: up for at least its settle.
    pub(crate) fn settled(&self) -> bool {
        self.up >= self.settle
    }

    /// Whether it loaded the row `key` (and so can run it).
    pub(crate) fn has(&self, key: &str) -> bool {
        self.rows.as_ref().is_none_or(|r| r.contains(key))
    }
}

/// The statements of the members table, names quoted in.
#[derive(Debug, Clone)]
pub(crate) struct Members {
    table: String,
    create: String,
    add_rows: String,
    previous: String,
    join: String,
    heartbeat: String,
    list: String,
    leave: String,
    drain: String,
}

/// The table named `<members>_<suffix>` beside the members table `members` (its owners and
/// status tables).
pub(super) fn beside(members: &TableName, suffix: &str) -> TableName {
    members.sibling(&format!("{}_{suffix}", members.name()))
}

/// An error of the cluster database: `what` failed, caused by `e`.
pub(super) fn db(what: &str, e: sqlx::Error) -> FaucetError {
    FaucetError::state_io("cluster", format!("cluster database: {what}"), e)
}

/// Runs the `CREATE TABLE IF NOT EXISTS` statement `create` of `table` on `conn`.
///
/// # Errors
/// [`FaucetError::State`] from the server.
pub(super) async fn create_table(
    conn: &mut sqlx::PgConnection,
    create: &str,
    table: &str,
) -> Result<(), FaucetError> {
    sqlx::query(create)
        .execute(conn)
        .await
        .map(drop)
        .map_err(|e| db(&format!("cannot create {table}"), e))
}

impl Members {
    /// The statements for `table`.
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        Self {
            table: table.qualified(),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (name text PRIMARY KEY, incarnation text NOT NULL, \
                 joined_at timestamptz NOT NULL, heartbeat_at timestamptz NOT NULL, \
                 settle_seconds float8 NOT NULL, restarts int NOT NULL, \
                 window_start timestamptz NOT NULL, draining boolean NOT NULL DEFAULT false, \
                 leaving boolean NOT NULL DEFAULT false, rows text[])"
            ),
            add_rows: format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS rows text[]"),
            previous: format!(
                "SELECT restarts, EXTRACT(EPOCH FROM now() - window_start)::float8 FROM {t} \
                 WHERE name = $1 FOR UPDATE"
            ),
            join: format!(
                "INSERT INTO {t} AS m (name, incarnation, joined_at, heartbeat_at, settle_seconds, \
                 restarts, window_start, rows) VALUES ($1, $2, now(), now(), $3, $4, now(), $6) \
                 ON CONFLICT (name) DO UPDATE SET incarnation = $2, joined_at = now(), \
                 heartbeat_at = now(), settle_seconds = $3, restarts = $4, leaving = false, \
                 window_start = CASE WHEN $5 THEN now() ELSE m.window_start END, rows = $6"
            ),
            heartbeat: format!(
                "UPDATE {t} SET heartbeat_at = now() WHERE name = $1 AND incarnation = $2"
            ),
            list: format!(
                "SELECT name, incarnation, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8, \
                 EXTRACT(EPOCH FROM now() - joined_at)::float8, settle_seconds, draining, leaving, \
                 rows FROM {t} ORDER BY name"
            ),
            leave: format!("UPDATE {t} SET leaving = true WHERE name = $1 AND incarnation = $2"),
            drain: format!("UPDATE {t} SET draining = $2 WHERE name = $1"),
        }
    }

    /// The table's name, for messages.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// Creates the table when absent, and adds the `rows` column to one an older faucet made.
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn create(&self, conn: &mut sqlx::PgConnection) -> Result<(), FaucetError> {
        create_table(conn, &self.create, &self.table).await?;
        create_table(conn, &self.add_rows, &self.table).await
    }

    /// Joins as `name` with a new `incarnation` and the state keys of the rows it loaded
    /// (`rows`): counts the restart (see [`settle`]) and returns the settle this start gets.
    /// Keeps the operator's drain.
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn join(
        &self,
        pool: &PgPool,
        name: &str,
        incarnation: &str,
        base_settle: Duration,
        rows: &[String],
    ) -> Result<(u32, Duration), FaucetError> {
        let ctx = |e| db(&format!("cannot join through {}", self.table), e);
        let mut tx = pool.begin().await.map_err(ctx)?;
        let prev: Option<(i32, f64)> = sqlx::query_as(&self.previous)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(ctx)?;
        let prev = prev.map(|(r, age)| {
            (
                u32::try_from(r).unwrap_or_default(),
                Duration::try_from_secs_f64(age.max(0.0)).unwrap_or(Duration::MAX),
            )
        });
        let start = settle::start(prev);
        let settle = settle::settle(base_settle, start.restarts);
        sqlx::query(&self.join)
            .bind(name)
            .bind(incarnation)
            .bind(settle.as_secs_f64())
            .bind(i32::try_from(start.restarts).unwrap_or(i32::MAX))
            .bind(start.new_window)
            .bind(rows)
            .execute(&mut *tx)
            .await
            .map_err(ctx)?;
        tx.commit().await.map_err(ctx)?;
        Ok((start.restarts, settle))
    }

    /// Heartbeats; `false` when the row is no longer this incarnation's (another process
    /// took the name, or the row was deleted).
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn heartbeat(
        &self,
        pool: &PgPool,
        name: &str,
        incarnation: &str,
    ) -> Result<bool, FaucetError> {
        let done = sqlx::query(&self.heartbeat)
            .bind(name)
            .bind(incarnation)
            .execute(pool)
            .await
            .map_err(|e| db("cannot heartbeat", e))?;
        Ok(done.rows_affected() == 1)
    }

    /// Every member row.
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn list(&self, pool: &PgPool) -> Result<Vec<Member>, FaucetError> {
        type Row = (
            String,
            String,
            f64,
            f64,
            f64,
            bool,
            bool,
            Option<Vec<String>>,
        );
        let rows: Vec<Row> = sqlx::query_as(&self.list)
            .fetch_all(pool)
            .await
            .map_err(|e| db(&format!("cannot read {}", self.table), e))?;
        Ok(rows
            .into_iter()
            .map(
                |(name, incarnation, heartbeat_age, up, settle, draining, leaving, rows)| Member {
                    name,
                    incarnation,
                    heartbeat_age,
                    up,
                    settle,
                    draining,
                    leaving,
                    rows: rows.map(|r| r.into_iter().collect()),
                },
            )
            .collect())
    }

    /// Marks this incarnation as leaving (SIGTERM): the others stop placing rows on it at
    /// their next heartbeat.
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn leave(
        &self,
        pool: &PgPool,
        name: &str,
        incarnation: &str,
    ) -> Result<(), FaucetError> {
        sqlx::query(&self.leave)
            .bind(name)
            .bind(incarnation)
            .execute(pool)
            .await
            .map(drop)
            .map_err(|e| db("cannot mark this member as leaving", e))
    }

    /// Sets (or clears) the operator's drain of `name`; `false` when there is no such member.
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn drain(
        &self,
        pool: &PgPool,
        name: &str,
        on: bool,
    ) -> Result<bool, FaucetError> {
        let done = sqlx::query(&self.drain)
            .bind(name)
            .bind(on)
            .execute(pool)
            .await
            .map_err(|e| db("cannot record the drain", e))?;
        Ok(done.rows_affected() == 1)
    }
}
