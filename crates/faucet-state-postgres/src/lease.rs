//! Leases in the companion table `<table>_lease`: one row per state key with the holder
//! (`holder_id`, `holder` JSON), a fencing number and `expires_at`, all judged by the
//! server's clock (`now()`), so runners on different hosts never compare their own clocks.
//!
//! * acquire: one `INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE expires_at < now() OR
//!   holder_id = mine RETURNING fence` — a new key gets fence 1, a takeover fence + 1; no
//!   row back means a live holder, which is then read and named.
//! * renew: `UPDATE ... SET expires_at = now() + ttl` where the row is still ours and live.
//! * put_fenced: one statement that locks our live lease row (`FOR UPDATE`) in a CTE and
//!   upserts the bookmark from it; no row affected means the lease is lost.
//! * release: marks the row expired (`-infinity`) rather than deleting it, so the fence keeps
//!   growing across acquisitions.

use std::time::Duration;

use faucet_core::FaucetError;
use faucet_core::serde_json::{self, Value};
use faucet_core::state::validate_state_key;
use faucet_core::state::{DOCTOR_KEY, Lease, LeaseError, LeaseHolder, LeaseOutcome, LeaseRequest};
use sqlx::types::Json;

use crate::error::STORE;
use crate::store::PostgresStateStore;

/// The longest lease accepted, so `now() + ttl` stays a valid timestamp: ten years.
const MAX_TTL_SECS: f64 = 315_360_000.0;
/// How often an acquisition retries when the live holder it lost to vanished before it could
/// be named (released in between).
const ACQUIRE_ATTEMPTS: usize = 5;

fn ttl_secs(ttl: Duration) -> f64 {
    ttl.as_secs_f64().min(MAX_TTL_SECS)
}

/// A fence as PostgreSQL's BIGINT; one beyond it can never match a row.
fn fence_param(lease: &Lease) -> i64 {
    i64::try_from(lease.fence).unwrap_or(-1)
}

fn holder_json(holder: &LeaseHolder) -> Result<Value, FaucetError> {
    serde_json::to_value(holder)
        .map_err(|e| FaucetError::state_io(STORE, "cannot encode the lease holder", e))
}

fn parse_holder(key: &str, raw: Value) -> Result<LeaseHolder, FaucetError> {
    serde_json::from_value(raw).map_err(|e| {
        FaucetError::state_io(
            STORE,
            format!("the lease row of state key `{key}` names an unreadable holder"),
            e,
        )
    })
}

fn lost(lease: &Lease, reason: String) -> FaucetError {
    LeaseError::Lost {
        key: lease.key.clone(),
        reason,
    }
    .into()
}

impl PostgresStateStore {
    fn lease_context<'a>(&'a self, op: &'a str) -> crate::error::Context<'a> {
        self.context(op, &self.sql.lease_table)
    }

    /// Takes the lease on `request.key` when it is free, expired, already the request's
    /// holder's, or held by the holder `request.gone` (a take-over from a process known to have exited).
    pub(crate) async fn acquire(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseOutcome, FaucetError> {
        let (key, holder) = (request.key.as_str(), &request.holder);
        validate_state_key(key)?;
        let holder_value = holder_json(holder)?;
        for _ in 0..ACQUIRE_ATTEMPTS {
            let fence: Option<i64> = sqlx::query_scalar(&self.sql.acquire)
                .bind(key)
                .bind(&holder.id)
                .bind(Json(&holder_value))
                .bind(ttl_secs(request.ttl))
                .bind(request.gone_id())
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.lease_context("acquire lease").classify(e))?;
            if let Some(fence) = fence {
                return Ok(LeaseOutcome::Acquired(Lease {
                    key: key.to_owned(),
                    holder: holder.clone(),
                    fence: u64::try_from(fence).unwrap_or_default(),
                }));
            }
            let live: Option<Json<Value>> = sqlx::query_scalar(&self.sql.live_holder)
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.lease_context("read lease holder").classify(e))?;
            if let Some(Json(other)) = live {
                return Ok(LeaseOutcome::HeldBy(parse_holder(key, other)?));
            }
            // The holder released (or its lease lapsed) between the two statements: try again.
        }
        Err(FaucetError::state(
            STORE,
            format!(
                "acquire lease: the lease on state key `{key}` in table {:?} changed hands \
                 {ACQUIRE_ATTEMPTS} times while it was being taken; retry",
                self.sql.lease_table
            ),
        ))
    }

    /// Why `lease` is no longer held, read from its row.
    async fn lost_reason(&self, lease: &Lease) -> Result<FaucetError, FaucetError> {
        let row: Option<(String, i64, Json<Value>, bool)> = sqlx::query_as(&self.sql.lease_row)
            .bind(&lease.key)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.lease_context("read lease").classify(e))?;
        let reason = match row {
            None => format!(
                "its row in table {:?} is gone (deleted by hand?)",
                self.sql.lease_table
            ),
            Some((id, fence, _, _)) if id == lease.holder.id && fence == fence_param(lease) => {
                "it expired before it was renewed (the process stalled, or the database was \
                 unreachable, for longer than the lease's ttl)"
                    .to_owned()
            }
            Some((_, fence, Json(other), live)) => {
                let other = parse_holder(&lease.key, other)
                    .map(|h| h.to_string())
                    .unwrap_or_else(|_| "an unreadable holder".to_owned());
                let state = if live { "holds" } else { "held" };
                format!("it expired and another run took it: {other} {state} it with fence {fence}")
            }
        };
        Ok(lost(lease, reason))
    }

    pub(crate) async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<(), FaucetError> {
        let done = sqlx::query(&self.sql.renew)
            .bind(&lease.key)
            .bind(&lease.holder.id)
            .bind(fence_param(lease))
            .bind(ttl_secs(ttl))
            .execute(&self.pool)
            .await
            .map_err(|e| self.lease_context("renew lease").classify(e))?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(self.lost_reason(lease).await?)
        }
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), FaucetError> {
        sqlx::query(&self.sql.release)
            .bind(&lease.key)
            .bind(&lease.holder.id)
            .bind(fence_param(lease))
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| self.lease_context("release lease").classify(e))
    }

    pub(crate) async fn write_fenced(
        &self,
        key: &str,
        value: &Value,
        lease: &Lease,
    ) -> Result<(), FaucetError> {
        validate_state_key(key)?;
        let done = sqlx::query(&self.sql.put_fenced)
            .bind(key)
            .bind(Json(value))
            .bind(&lease.holder.id)
            .bind(fence_param(lease))
            .bind(&lease.key)
            .execute(&self.pool)
            .await
            .map_err(|e| {
                // The statement touches both tables; name the one the server complained of.
                let table = match &e {
                    sqlx::Error::Database(db)
                        if db.message().contains(self.sql.lease_table.as_str()) =>
                    {
                        &self.sql.lease_table
                    }
                    _ => &self.sql.table,
                };
                self.context("put (fenced)", table).classify(e)
            })?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(self.lost_reason(lease).await?)
        }
    }

    /// Runs the acquisition statement on [`DOCTOR_KEY`] in a transaction that is rolled
    /// back: proves the lease table exists and is writable, and leaves nothing behind.
    pub(crate) async fn check_lease_table(&self) -> Result<(), FaucetError> {
        let ctx = self.lease_context("lease table probe");
        let holder = holder_json(&LeaseHolder::this_process())?;
        let mut tx = self.pool.begin().await.map_err(|e| ctx.classify(e))?;
        sqlx::query(&self.sql.acquire)
            .bind(DOCTOR_KEY)
            .bind("faucet-doctor")
            .bind(Json(&holder))
            .bind(1.0_f64)
            // No gone holder to take over from ($5).
            .bind(None::<&str>)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| ctx.classify(e))?;
        tx.rollback().await.map_err(|e| ctx.classify(e))
    }
}
