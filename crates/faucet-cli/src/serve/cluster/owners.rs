//! The owners table, beside the members table (`<members>_owners`): per pipeline row (state
//! key) the member that last started it, how often it moved between members, and the last
//! schedule tick claimed — the one place a tick is claimed, so a tick runs once across
//! members even while two of them briefly disagree on the placement.
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS <members>_owners (key text PRIMARY KEY, member text NOT NULL,
//!   since timestamptz NOT NULL, moves bigint NOT NULL DEFAULT 0, last_tick timestamptz)
//! ```

use chrono::{DateTime, Utc};
use faucet_connectors::postgres::TableName;
use faucet_core::FaucetError;
use sqlx::PgPool;

/// The statements of the owners table.
#[derive(Debug, Clone)]
pub(crate) struct Owners {
    table: String,
    create: String,
    current: String,
    recorded: String,
    take: String,
    claim: String,
}

use super::membership::{create_table, db};

/// The owners table's name beside `members`.
pub(crate) fn table_for(members: &TableName) -> TableName {
    super::membership::beside(members, "owners")
}

impl Owners {
    /// The statements for `table`.
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        Self {
            table: table.qualified(),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (key text PRIMARY KEY, member text NOT NULL, \
                 since timestamptz NOT NULL, moves bigint NOT NULL DEFAULT 0, \
                 last_tick timestamptz)"
            ),
            current: format!("SELECT member FROM {t} WHERE key = $1 FOR UPDATE"),
            recorded: format!("SELECT key, member FROM {t} WHERE key = ANY($1)"),
            take: format!(
                "INSERT INTO {t} AS o (key, member, since) VALUES ($1, $2, now()) \
                 ON CONFLICT (key) DO UPDATE SET member = $2, since = now(), \
                 moves = o.moves + $3"
            ),
            claim: format!(
                "INSERT INTO {t} AS o (key, member, since, last_tick) VALUES ($1, $2, now(), $3) \
                 ON CONFLICT (key) DO UPDATE SET last_tick = $3 \
                 WHERE o.last_tick IS NULL OR o.last_tick < $3"
            ),
        }
    }

    /// Creates the table when absent.
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn create(&self, conn: &mut sqlx::PgConnection) -> Result<(), FaucetError> {
        create_table(conn, &self.create, &self.table).await
    }

    /// Records that `member` starts the row `key`; `true` when it moved here from another
    /// member (counted in the table's `moves`).
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn take(
        &self,
        pool: &PgPool,
        key: &str,
        member: &str,
    ) -> Result<bool, FaucetError> {
        let ctx = |e| db(&format!("cannot record the owner in {}", self.table), e);
        let mut tx = pool.begin().await.map_err(ctx)?;
        let before: Option<String> = sqlx::query_scalar(&self.current)
            .bind(key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(ctx)?;
        let moved = before.is_some_and(|b| b != member);
        sqlx::query(&self.take)
            .bind(key)
            .bind(member)
            .bind(i64::from(moved))
            .execute(&mut *tx)
            .await
            .map_err(ctx)?;
        tx.commit().await.map_err(ctx)?;
        Ok(moved)
    }

    /// The member recorded for each of `keys` (keys never started are left out).
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn recorded(
        &self,
        pool: &PgPool,
        keys: &[String],
    ) -> Result<Vec<(String, String)>, FaucetError> {
        sqlx::query_as(&self.recorded)
            .bind(keys)
            .fetch_all(pool)
            .await
            .map_err(|e| db(&format!("cannot read {}", self.table), e))
    }

    /// Claims the schedule tick `tick` of `key` for `member`; `false` when it was claimed
    /// already (by any member).
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn claim_tick(
        &self,
        pool: &PgPool,
        key: &str,
        member: &str,
        tick: DateTime<Utc>,
    ) -> Result<bool, FaucetError> {
        let done = sqlx::query(&self.claim)
            .bind(key)
            .bind(member)
            .bind(tick)
            .execute(pool)
            .await
            .map_err(|e| db(&format!("cannot claim a tick in {}", self.table), e))?;
        Ok(done.rows_affected() == 1)
    }
}
