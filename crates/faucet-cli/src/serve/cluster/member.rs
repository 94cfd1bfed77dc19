//! This member's loop ([`PgCluster`]): join the members table, then every ttl/3 heartbeat,
//! read every member, place every row by [`super::placement`] over the alive, settled,
//! undrained members, and start or stop each row here accordingly.
//!
//! A member that has not heartbeated successfully for a whole ttl places nothing on itself
//! (its rows stop, pages finished and bookmarks persisted where the state store still
//! answers) until the cluster database answers again: the others will have counted it dead
//! by then. When no member is settled (a cluster starting cold) the unsettled ones are
//! placed on, so a fresh cluster does not wait out the settle.

use std::collections::{BTreeMap, BTreeSet};
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
use super::reports::{self, Reports};
use super::{Coordinator, placement};
use crate::secret::SecretUrl;
use crate::serve::control;
use crate::serve::pipeline::Slot;
use crate::serve::report::Report;

/// Connections to the cluster database: the loop, the API and the runs' owner records.
const POOL_SIZE: u32 = 3;
/// How long one statement to the cluster database may run before the server cancels it (a
/// stuck statement must not hold the loop for long).
const STATEMENT_TIMEOUT: &str = "SET statement_timeout = '5s'";
/// How often recording a row's new owner is tried.
const TAKE_ATTEMPTS: u32 = 3;
/// How long getting a connection may take (a busy host, a restarting server).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one connection attempt at start may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause between connection attempts at start: doubled from the first to the last.
const RETRY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(15));

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
    /// The alive members whose loaded rows differ from this member's: (rows of this member
    /// they lack, rows only they have), as last logged.
    row_sets: BTreeMap<String, (usize, usize)>,
}

/// A member of a cluster coordinated in PostgreSQL.
pub(crate) struct PgCluster {
    pool: PgPool,
    /// The cluster database as messages name it (`postgres://user@host:port/db`).
    server: String,
    members: Members,
    owners: Owners,
    reports: Reports,
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
    /// Connects to the cluster database at `url` (retrying until it answers: see
    /// [`wait_for_database`]), creates the members table `table` (and its owners table)
    /// when absent, and joins as `me`, with `slots` as the rows to place.
    ///
    /// # Errors
    /// [`FaucetError::Config`] for a bad URL or table name; [`FaucetError::State`] when the
    /// database cannot be written, or `shutdown` came before it answered.
    pub(crate) async fn join(
        url: &SecretUrl,
        table: &str,
        me: String,
        ttl: Duration,
        settle: Duration,
        slots: Vec<Arc<Slot>>,
        shutdown: &CancellationToken,
    ) -> Result<Arc<Self>, FaucetError> {
        let url = PostgresUrl::parse_str(url.expose(), "--cluster")?;
        let members_table = TableName::parse(table, "--cluster-table")?;
        wait_for_database(&url, shutdown).await?;
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
        let reports = Reports::new(&reports::table_for(&members_table), &members_table);
        create_tables(&pool, &members, &owners, &reports).await?;
        let incarnation = faucet_core::state::LeaseHolder::this_process().id;
        let rows: Vec<String> = slots.iter().map(|s| s.key().to_owned()).collect();
        let (restarts, settle) = members
            .join(&pool, &me, &incarnation, settle, &rows)
            .await?;
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
            server: url.describe(),
            members,
            owners,
            reports,
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
    /// (pause, stop, resume made through another member's API) and the durable bookmarks of
    /// the rows placed elsewhere, and report the rows placed here.
    async fn round(&self) {
        self.placement_round().await;
        self.refresh_from_stores().await;
        self.record_runners().await;
        self.report().await;
    }

    /// Writes this member's report of every row placed here into the status table.
    async fn report(&self) {
        if self.seen().error.is_some() {
            return;
        }
        let reports: Vec<(String, Report)> = self
            .slots
            .iter()
            .filter(|s| s.placed())
            .map(|s| (s.key().to_owned(), s.report(&self.me)))
            .collect();
        if let Err(e) = self
            .reports
            .write(&self.pool, &self.incarnation, &reports)
            .await
        {
            tracing::warn!(
                error = %crate::output::error_chain(&e),
                "cannot report this member's pipelines in the cluster database"
            );
        }
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

    /// Applies the wishes stored in each row's state store, where they changed; reads the
    /// durable bookmark (and its time, where the store keeps it) of each row not run here.
    async fn refresh_from_stores(&self) {
        for slot in &self.slots {
            let Some(store) = slot.store.get() else {
                continue;
            };
            if !slot.placed() && !slot.is_running() {
                match store.get_with_time(slot.key()).await {
                    Ok(Some((entry, at))) => slot.set_stored_bookmark(
                        Some(faucet_core::pipeline::stored_bookmark(entry)),
                        at,
                    ),
                    Ok(None) => slot.set_stored_bookmark(None, None),
                    Err(e) => tracing::debug!(
                        key = slot.key(),
                        error = %crate::output::error_chain(&e),
                        "cannot read the pipeline's bookmark"
                    ),
                }
            }
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
                let message = format!("{}: {}", self.server, crate::output::error_chain(&e));
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
            let rows: Vec<String> = self.slots.iter().map(|s| s.key().to_owned()).collect();
            self.members
                .join(&self.pool, &self.me, &self.incarnation, self.settle, &rows)
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

    /// The member `key` is placed on: of the alive, undrained members that loaded the row,
    /// the settled ones — or, when none of them is settled, all of them — by rendezvous
    /// weight. A member that did not load a row is never its candidate, so no row is placed
    /// where nobody runs it.
    fn owner_among<'m>(&self, members: &'m [Member], key: &str) -> Option<&'m str> {
        let up: Vec<&Member> = members
            .iter()
            .filter(|m| m.alive(self.ttl) && !m.draining && m.has(key))
            .collect();
        let settled = up.iter().filter(|m| m.settled()).map(|m| m.name.as_str());
        placement::owner(key, settled)
            .or_else(|| placement::owner(key, up.iter().map(|m| m.name.as_str())))
    }

    /// Logs, when it changes, which alive members loaded another set of rows than this one
    /// (a rollout of new pipeline files in progress): each row is placed only on the
    /// members that loaded it.
    fn note_row_sets(&self, seen: &mut Seen) {
        let mine: BTreeSet<&str> = self.slots.iter().map(|s| s.key()).collect();
        let mut differ = BTreeMap::new();
        for m in seen
            .members
            .iter()
            .filter(|m| m.alive(self.ttl) && m.name != self.me)
        {
            let Some(theirs) = &m.rows else { continue };
            let lacks: Vec<&str> = mine
                .iter()
                .copied()
                .filter(|k| !theirs.contains(*k))
                .collect();
            let extra = theirs.iter().filter(|k| !mine.contains(k.as_str())).count();
            if !lacks.is_empty() || extra > 0 {
                differ.insert(m.name.clone(), (lacks.len(), extra));
                if seen.row_sets.get(&m.name) != Some(&(lacks.len(), extra)) {
                    tracing::warn!(
                        member = m.name,
                        lacks = lacks.len(),
                        lacking = %lacks.iter().take(5).copied().collect::<Vec<_>>().join(", "),
                        only_there = extra,
                        "this member and {} loaded different pipeline rows (are their files the \
                         same?): each row is placed only on members that loaded it",
                        m.name
                    );
                }
            }
        }
        seen.row_sets = differ;
    }

    fn place(&self, seen: &mut Seen) {
        self.note_row_sets(seen);
        for slot in &self.slots {
            let owner = if seen.usurped {
                None
            } else {
                self.owner_among(&seen.members, slot.key())
                    .map(str::to_owned)
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

/// Opens one connection to the cluster database and closes it, retrying (every 1 s, doubled
/// up to 15 s) until it succeeds or `shutdown`: each failure whose cause differs from the
/// last is logged at once, naming the server (`postgres://user@host:port/db`) and the cause
/// (connection refused, password authentication failed, an unknown host), as a pipeline's
/// connect error does — a pool would only say "pool timed out" after its whole timeout.
///
/// # Errors
/// [`FaucetError::State`] when `shutdown` comes first.
async fn wait_for_database(
    url: &PostgresUrl,
    shutdown: &CancellationToken,
) -> Result<(), FaucetError> {
    let mut pause = RETRY.0;
    let mut last: Option<String> = None;
    loop {
        let cause = match tokio::time::timeout(PROBE_TIMEOUT, url.open_session("cluster")).await {
            Ok(Ok(conn)) => {
                use sqlx::Connection as _;
                let _ = conn.close().await;
                if last.is_some() {
                    tracing::warn!(server = url.describe(), "the cluster database answers");
                }
                return Ok(());
            }
            Ok(Err(e)) => crate::output::error_chain(&e),
            Err(_) => format!(
                "PostgreSQL at {}: no answer within {}",
                url.describe(),
                humantime::format_duration(PROBE_TIMEOUT)
            ),
        };
        if last.as_deref() != Some(&cause) {
            tracing::error!(
                "cannot reach the cluster database (--cluster): {cause}; retrying every {} \
                 at most",
                humantime::format_duration(RETRY.1)
            );
            last = Some(cause);
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = shutdown.cancelled() => {
                return Err(FaucetError::state(
                    "cluster",
                    format!(
                        "stopped before the cluster database answered: {}",
                        last.unwrap_or_default()
                    ),
                ));
            }
        }
        pause = (pause * 2).min(RETRY.1);
    }
}

/// Creates both tables when absent, one member at a time: concurrent `CREATE TABLE IF NOT
/// EXISTS` of one name can fail on PostgreSQL's catalog, so members starting together take a
/// transaction-scoped advisory lock first.
async fn create_tables(
    pool: &PgPool,
    members: &Members,
    owners: &Owners,
    reports: &Reports,
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
    reports.create(&mut tx).await?;
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

    async fn reports(&self) -> BTreeMap<String, Report> {
        match self.reports.read(&self.pool, self.ttl).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    error = %crate::output::error_chain(&e),
                    "cannot read the other members' reports"
                );
                BTreeMap::new()
            }
        }
    }

    async fn members(&self) -> Result<serde_json::Value, FaucetError> {
        let members = self.members.list(&self.pool).await?;
        let mut owned: BTreeMap<&str, u64> = BTreeMap::new();
        for slot in &self.slots {
            if let Some(o) = self.owner_among(&members, slot.key()) {
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
                    "rows_loaded": m.rows.as_ref().map(BTreeSet::len),
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
