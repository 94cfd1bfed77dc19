//! This member's loop ([`PgCluster`]): join the members table, then every ttl/3 heartbeat,
//! read every member, place every row by [`super::placement`] over the alive, settled,
//! undrained members, and start or stop each row here accordingly.
//!
//! A member that has not heartbeated successfully for a whole ttl places nothing on itself
//! (its rows stop, pages finished and bookmarks persisted where the state store still
//! answers) until the cluster database answers again: the others will have counted it dead
//! by then. When no member is settled (a cluster starting cold) the unsettled ones are
//! placed on, so a fresh cluster does not wait out the settle.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use faucet_connectors::postgres::{PostgresUrl, TableName};
use faucet_core::FaucetError;
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::membership::{Member, Members};
use super::owners::{self, Owners};
use super::{Coordinator, placement};
use crate::secret::SecretUrl;
use crate::serve::control;
use crate::serve::pipeline::Slot;

/// Connections to the cluster database: the loop, the API and the runs' owner records.
const POOL_SIZE: u32 = 3;
/// How long one statement to the cluster database may run before the server cancels it (a
/// stuck statement must not hold the loop for long).
const STATEMENT_TIMEOUT: &str = "SET statement_timeout = '5s'";
/// How often recording a row's new owner is tried.
const TAKE_ATTEMPTS: u32 = 3;
/// How long getting a connection may take (a busy host, a restarting server).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// What the last rounds saw.
#[derive(Default)]
struct Seen {
    /// The members table at the last successful read.
    members: Vec<Member>,
    /// When a heartbeat last succeeded.
    ok_at: Option<Instant>,
    /// The owner of each row by the last placement.
    owners: BTreeMap<String, Option<String>>,
    /// Why the last round failed, while it does.
    error: Option<String>,
    /// Whether this member's name is held by another process.
    usurped: bool,
}

/// A member of a cluster coordinated in PostgreSQL.
pub(crate) struct PgCluster {
    pool: PgPool,
    members: Members,
    owners: Owners,
    me: String,
    incarnation: String,
    ttl: Duration,
    settle: Duration,
    slots: Vec<Arc<Slot>>,
    seen: Mutex<Seen>,
    /// Wakes the loop for a round now (a drain through the API).
    wake: Notify,
}

impl PgCluster {
    /// Connects to the cluster database at `url`, creates the members table `table` (and
    /// its owners table) when absent, and joins as `me`, with `slots` as the rows to place.
    ///
    /// # Errors
    /// [`FaucetError::Config`] for a bad URL or table name; [`FaucetError::State`] when the
    /// database cannot be reached or written.
    pub(crate) async fn join(
        url: &SecretUrl,
        table: &str,
        me: String,
        ttl: Duration,
        settle: Duration,
        slots: Vec<Arc<Slot>>,
    ) -> Result<Arc<Self>, FaucetError> {
        let url = PostgresUrl::parse_str(url.expose(), "--cluster")?;
        let members_table = TableName::parse(table, "--cluster-table")?;
        let owners_table = owners::table_for(&members_table);
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(CONNECT_TIMEOUT)
            .after_connect(|conn, _| {
                Box::pin(
                    async move { sqlx::query(STATEMENT_TIMEOUT).execute(conn).await.map(drop) },
                )
            })
            .connect_lazy_with(url.options());
        let members = Members::new(&members_table);
        let owners = Owners::new(&owners_table);
        create_tables(&pool, &members, &owners).await?;
        let incarnation = faucet_core::state::LeaseHolder::this_process().id;
        let (restarts, settle) = members.join(&pool, &me, &incarnation, settle).await?;
        tracing::info!(
            member = me,
            table = members.table(),
            restarts,
            settle_secs = settle.as_secs_f64(),
            "joined the cluster"
        );
        if restarts > 0 {
            tracing::warn!(
                member = me,
                restarts,
                "this member started again {restarts} time(s) within a minute; it waits {} \
                 before it takes work",
                humantime::format_duration(settle)
            );
        }
        Ok(Arc::new(Self {
            pool,
            members,
            owners,
            me,
            incarnation,
            ttl,
            settle,
            slots,
            seen: Mutex::new(Seen::default()),
            wake: Notify::new(),
        }))
    }

    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs rounds every ttl/3 until `shutdown`, then marks this member as leaving (so the
    /// others take its rows at their next round) and places nothing on it.
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let period = self.ttl / 3;
        loop {
            self.round().await;
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                () = self.wake.notified() => {}
                () = shutdown.cancelled() => break,
            }
        }
        for slot in &self.slots {
            slot.set_placed(false);
        }
        match self
            .members
            .leave(&self.pool, &self.me, &self.incarnation)
            .await
        {
            Ok(()) => tracing::info!(member = self.me, "left the cluster; the others take over"),
            Err(e) => tracing::warn!(
                error = %crate::output::error_chain(&e),
                "cannot mark this member as leaving; the others take over once its heartbeat is a ttl old"
            ),
        }
    }

    /// One round: heartbeat, read the members, place; then read the operator's wishes
    /// (pause, stop, resume made through another member's API).
    async fn round(&self) {
        self.placement_round().await;
        self.refresh_wishes().await;
        self.record_runners().await;
    }

    /// Corrects the owners table for rows running here that it names another member for (a
    /// run attempt of another member, refused by the lease, may have recorded itself after
    /// this member's run started).
    async fn record_runners(&self) {
        let here: Vec<&Arc<Slot>> = self
            .slots
            .iter()
            .filter(|s| s.placed() && s.is_running())
            .collect();
        if here.is_empty() {
            return;
        }
        let keys: Vec<String> = here.iter().map(|s| s.key().to_owned()).collect();
        let Ok(recorded) = self.owners.recorded(&self.pool, &keys).await else {
            return;
        };
        let recorded: BTreeMap<String, String> = recorded.into_iter().collect();
        for slot in here {
            if recorded.get(slot.key()).is_some_and(|m| *m != self.me) {
                self.starting(slot).await;
            }
        }
    }

    /// Applies the wishes stored in each row's state store, where they changed.
    async fn refresh_wishes(&self) {
        for slot in &self.slots {
            let Some(store) = slot.store.get() else {
                continue;
            };
            match control::load(store, &slot.control_key).await {
                Ok(desired) if desired != slot.desired() => {
                    tracing::info!(key = slot.key(), wish = ?desired, "pipeline changed by another member");
                    slot.set_desired(desired);
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(
                    key = slot.key(),
                    error = %crate::output::error_chain(&e),
                    "cannot read the pipeline's control entry"
                ),
            }
        }
    }

    async fn placement_round(&self) {
        // A server gone silent must not hold the round past the heartbeat period: a round
        // that takes longer counts as failed.
        let limit = (self.ttl / 2).max(Duration::from_secs(1));
        let result = match tokio::time::timeout(limit, self.heartbeat_and_list()).await {
            Ok(r) => r,
            Err(_) => Err(FaucetError::state(
                "cluster",
                format!(
                    "cluster database: no answer within {}",
                    humantime::format_duration(limit)
                ),
            )),
        };
        match result {
            Ok(members) => {
                let mut seen = self.seen();
                if seen.error.take().is_some() {
                    tracing::warn!("the cluster database answers again");
                }
                seen.ok_at = Some(Instant::now());
                seen.members = members;
                self.place(&mut seen);
            }
            Err(e) => {
                let message = crate::output::error_chain(&e);
                let mut seen = self.seen();
                if seen.error.is_none() {
                    tracing::error!(error = %message, "cannot heartbeat in the cluster database");
                }
                seen.error = Some(message);
                let stale = seen.ok_at.is_none_or(|at| at.elapsed() >= self.ttl);
                if stale {
                    if seen
                        .owners
                        .values()
                        .any(|o| o.as_deref() == Some(&*self.me))
                    {
                        tracing::error!(
                            "no heartbeat for a whole ttl: the others count this member dead; \
                             stopping its pipelines until the cluster database answers"
                        );
                    }
                    seen.owners.values_mut().for_each(|o| *o = None);
                    for slot in &self.slots {
                        slot.set_placed(false);
                    }
                }
            }
        }
    }

    async fn heartbeat_and_list(&self) -> Result<Vec<Member>, FaucetError> {
        let ours = self
            .members
            .heartbeat(&self.pool, &self.me, &self.incarnation)
            .await?;
        let mut members = self.members.list(&self.pool).await?;
        let usurped = !ours && members.iter().any(|m| m.name == self.me);
        if !ours && !usurped {
            // Our row was deleted (by hand): join again.
            self.members
                .join(&self.pool, &self.me, &self.incarnation, self.settle)
                .await?;
            members = self.members.list(&self.pool).await?;
        }
        let mut seen = self.seen();
        if usurped && !seen.usurped {
            tracing::error!(
                member = self.me,
                "another process runs as member {:?}; this one runs nothing (give each \
                 member its own --member name)",
                self.me
            );
        }
        seen.usurped = usurped;
        Ok(members)
    }

    /// The members rows are placed on: alive, undrained and settled — or, when none is
    /// settled, the alive undrained ones.
    fn eligible(&self, members: &[Member]) -> Vec<String> {
        let up: Vec<&Member> = members
            .iter()
            .filter(|m| m.alive(self.ttl) && !m.draining)
            .collect();
        let settled: Vec<&Member> = up.iter().copied().filter(|m| m.settled()).collect();
        let chosen = if settled.is_empty() { up } else { settled };
        chosen.into_iter().map(|m| m.name.clone()).collect()
    }

    fn place(&self, seen: &mut Seen) {
        let eligible = self.eligible(&seen.members);
        for slot in &self.slots {
            let owner = if seen.usurped {
                None
            } else {
                placement::owner(slot.key(), eligible.iter().map(String::as_str)).map(str::to_owned)
            };
            let here = owner.as_deref() == Some(&*self.me);
            let before = seen.owners.insert(slot.key().to_owned(), owner.clone());
            if before.as_ref() != Some(&owner) {
                tracing::info!(
                    key = slot.key(),
                    owner = owner.as_deref().unwrap_or("(none)"),
                    "pipeline placed"
                );
            }
            slot.set_placed(here);
        }
    }
}

/// Creates both tables when absent, one member at a time: concurrent `CREATE TABLE IF NOT
/// EXISTS` of one name can fail on PostgreSQL's catalog, so members starting together take a
/// transaction-scoped advisory lock first.
async fn create_tables(
    pool: &PgPool,
    members: &Members,
    owners: &Owners,
) -> Result<(), FaucetError> {
    let ctx = |e| {
        FaucetError::state_io(
            "cluster",
            "cluster database: cannot create the members table",
            e,
        )
    };
    let mut tx = pool.begin().await.map_err(ctx)?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(members.table())
        .execute(&mut *tx)
        .await
        .map_err(ctx)?;
    members.create(&mut tx).await?;
    owners.create(&mut tx).await?;
    tx.commit().await.map_err(ctx)
}

#[async_trait]
impl Coordinator for PgCluster {
    fn not_ready(&self) -> Option<String> {
        let seen = self.seen();
        if seen.ok_at.is_none_or(|at| at.elapsed() >= self.ttl) {
            return Some(format!(
                "cannot reach the cluster database: {}",
                seen.error.as_deref().unwrap_or("no heartbeat yet")
            ));
        }
        if seen.usurped {
            return Some(format!("another process runs as member {:?}", self.me));
        }
        if seen.members.iter().any(|m| m.name == self.me && m.draining) {
            return Some("drained: this member owns no pipeline".to_owned());
        }
        None
    }

    fn owner_of(&self, key: &str) -> Option<String> {
        self.seen().owners.get(key).cloned().flatten()
    }

    async fn members(&self) -> Result<serde_json::Value, FaucetError> {
        let members = self.members.list(&self.pool).await?;
        let eligible = self.eligible(&members);
        let mut owned: BTreeMap<&str, u64> = BTreeMap::new();
        for slot in &self.slots {
            if let Some(o) = placement::owner(slot.key(), eligible.iter().map(String::as_str)) {
                *owned.entry(o).or_default() += 1;
            }
        }
        let rows: Vec<_> = members
            .iter()
            .map(|m| {
                json!({
                    "name": m.name,
                    "alive": m.alive(self.ttl),
                    "settled": m.settled(),
                    "draining": m.draining,
                    "leaving": m.leaving,
                    "heartbeat_age_seconds": m.heartbeat_age,
                    "settle_seconds": m.settle,
                    "pipelines": owned.get(m.name.as_str()).copied().unwrap_or(0),
                    "this": m.name == self.me,
                })
            })
            .collect();
        Ok(json!({ "member": self.me, "members": rows }))
    }

    async fn drain(&self, name: &str, on: bool) -> Result<bool, FaucetError> {
        let found = self.members.drain(&self.pool, name, on).await?;
        if found {
            self.wake.notify_one();
        }
        Ok(found)
    }

    async fn claim_tick(&self, key: &str, tick: DateTime<Utc>) -> bool {
        match self
            .owners
            .claim_tick(&self.pool, key, &self.me, tick)
            .await
        {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::warn!(
                    key,
                    error = %crate::output::error_chain(&e),
                    "cannot claim the schedule tick; skipping it rather than risk running it twice"
                );
                false
            }
        }
    }

    async fn starting(&self, slot: &Slot) {
        let mut taken = self.owners.take(&self.pool, slot.key(), &self.me).await;
        // A busy database may fail one attempt; the record is what counts the move.
        for _ in 1..TAKE_ATTEMPTS {
            if taken.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            taken = self.owners.take(&self.pool, slot.key(), &self.me).await;
        }
        match taken {
            Ok(true) => {
                slot.metrics.moved();
                tracing::info!(key = slot.key(), member = self.me, "pipeline moved here");
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(
                key = slot.key(),
                error = %crate::output::error_chain(&e),
                "cannot record this member as the pipeline's owner"
            ),
        }
    }
}
