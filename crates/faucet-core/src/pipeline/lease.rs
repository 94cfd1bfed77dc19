//! Holding the run's lease on its state key: acquire (or wait), renew in the background,
//! write bookmarks fenced by it, release at the end.
//!
//! **When the lease counts as lost.** The renewer renews every third of the ttl. The lease
//! is *known good* until the instant its last successful acquisition or renewal was *sent*
//! plus the ttl: the store judges expiry from a moment no earlier than that (its own clock,
//! when the request arrived), so by this process's monotonic clock the lease cannot have
//! expired before then. It is declared lost, and the run stopped, when
//!
//! * the store answers that it is no longer this run's ([`LeaseError::Lost`]: expired, taken
//!   by a newer run, its row deleted) — at once, without retrying; or
//! * it could not be renewed before that deadline: a failure that is not the store's "not
//!   yours" (the store unreachable or restarting, a timeout, any other error) is retried
//!   every tenth of the ttl (at least 50 ms, at most 1 s) while the deadline
//!   is ahead — each attempt bounded by the time left — so a store that is briefly
//!   unreachable costs nothing, and one that stays away for the ttl stops the run at the
//!   deadline (the lease may be someone else's by then); or
//! * the deadline passed while the process did not run at all (SIGSTOP, a long stall): the
//!   run loop's [`LeaseGuard::check`] compares the deadline with the clock before each write
//!   and bookmark, so a process that wakes past it stops before touching the sink, without a
//!   round trip.
//!
//! A store whose leases cannot expire (the file store's OS locks, `StateStore::leases_expire`)
//! has no deadline: only its own "not yours" ends the lease.
//!
//! The loss is published on a watch channel; [`LeaseGuard::lost`] resolves with it, for the
//! run loop to race against reading a page and waiting between retries.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::FaucetError;
use crate::state::{Lease, LeaseError, LeaseHolder, LeaseOutcome, LeaseRequest, StateStore};

/// How many times one acquisition takes over from a holder that is gone (a store that
/// kept answering with a dead holder would otherwise loop).
const MAX_TAKEOVERS: u32 = 3;

/// The pause between renewal attempts after a failure that is not a lost lease: a tenth of
/// the ttl, from 50 ms to 1 s.
fn retry_pause(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// What the renewer and the run loop share: until when the lease is known good, and the
/// loss once declared.
struct Liveness {
    /// The send time of the last successful acquisition or renewal, plus the ttl; `None`
    /// for a store whose leases do not expire ([`StateStore::leases_expire`]).
    good_until: Mutex<Option<Instant>>,
    /// `Some` once the lease is lost.
    lost: watch::Sender<Option<LeaseError>>,
}

impl Liveness {
    fn good_until(&self) -> Option<Instant> {
        *self
            .good_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn extend(&self, until: Instant) {
        let mut g = self
            .good_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(g) = g.as_mut() {
            *g = (*g).max(until);
        }
    }

    /// Declares the loss (the first declaration wins).
    fn declare(&self, e: LeaseError) {
        self.lost.send_if_modified(|slot| {
            if slot.is_some() {
                return false;
            }
            *slot = Some(e);
            true
        });
    }
}

/// The run's hold on its state key. Without leasing support in the store it is empty and
/// bookmark writes are plain `put`s.
pub(super) struct LeaseGuard {
    store: Arc<dyn StateStore>,
    lease: Option<Lease>,
    live: Arc<Liveness>,
    renewer: Option<JoinHandle<()>>,
}

impl LeaseGuard {
    pub(super) async fn acquire(
        store: Arc<dyn StateStore>,
        key: &str,
        ttl: Duration,
        wait: Option<Duration>,
    ) -> Result<Self, FaucetError> {
        let holder = LeaseHolder::this_process();
        let deadline = wait.map(|w| Instant::now() + w);
        let mut gone: Option<LeaseHolder> = None;
        let mut gone_tries = 0;
        let mut asked;
        let lease = loop {
            asked = Instant::now();
            let request = LeaseRequest {
                gone: gone.take(),
                ..LeaseRequest::new(key, &holder, ttl)
            };
            let outcome = store.acquire_lease(&request).await?;
            if let (Some(g), LeaseOutcome::Acquired(_)) = (&request.gone, &outcome) {
                tracing::warn!(
                    key,
                    previous = %g,
                    "the previous run of this key on this host is gone (killed?); took over its \
                     lease at once; what it had not made durable is read again"
                );
            }
            match outcome {
                LeaseOutcome::Acquired(lease) => break Some(lease),
                LeaseOutcome::Unsupported => {
                    tracing::warn!(
                        store = store.name(),
                        key,
                        "state store has no leases; two runs of this key would not be stopped"
                    );
                    break None;
                }
                LeaseOutcome::HeldBy(other)
                    if other.is_gone_from_this_host()
                        && gone_tries < MAX_TAKEOVERS
                        && other.id != holder.id =>
                {
                    gone_tries += 1;
                    gone = Some(other);
                }
                LeaseOutcome::HeldBy(other) => match deadline {
                    Some(d) if Instant::now() < d => {
                        tracing::info!(key, holder = %other, "waiting for the lease");
                        let nap =
                            (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
                        tokio::time::sleep(nap.min(d.saturating_duration_since(Instant::now())))
                            .await;
                    }
                    _ => {
                        return Err(LeaseError::Held {
                            key: key.to_owned(),
                            holder: other,
                        }
                        .into());
                    }
                },
            }
        };
        let live = Arc::new(Liveness {
            good_until: Mutex::new(store.leases_expire().then_some(asked + ttl)),
            lost: watch::Sender::new(None),
        });
        let renewer = lease
            .clone()
            .map(|l| tokio::spawn(renew(store.clone(), l, ttl, live.clone())));
        Ok(Self {
            store,
            lease,
            live,
            renewer,
        })
    }

    /// Fails with [`LeaseError::Lost`] when the lease was declared lost or its deadline
    /// (module docs) has passed by this process's clock; `Ok` without a lease.
    pub(super) fn check(&self) -> Result<(), FaucetError> {
        let Some(lease) = &self.lease else {
            return Ok(());
        };
        if let Some(e) = self.live.lost.borrow().clone() {
            return Err(e.into());
        }
        if self
            .live
            .good_until()
            .is_some_and(|until| Instant::now() >= until)
        {
            let e = expired(&lease.key);
            self.live.declare(e.clone());
            return Err(e.into());
        }
        Ok(())
    }

    /// Resolves with [`LeaseError::Lost`] once the lease is lost (never without a lease).
    /// Cancel-safe: meant for `select!` against the page being read.
    pub(super) async fn lost(&self) -> FaucetError {
        if self.lease.is_none() {
            return std::future::pending().await;
        }
        let mut rx = self.live.lost.subscribe();
        loop {
            let deadline = self.live.good_until();
            tokio::select! {
                lost = declared(&mut rx) => match lost {
                    Some(e) => return e.into(),
                    // The guard holds the sender, so it cannot be gone while `self` lives.
                    None => return std::future::pending().await,
                },
                () = sleep_until_or_forever(deadline) => {
                    if let Err(e) = self.check() {
                        return e;
                    }
                }
            }
        }
    }

    /// The fencing number of the held lease, if the store has leases.
    pub(super) fn fence(&self) -> Option<u64> {
        self.lease.as_ref().map(|l| l.fence)
    }

    /// Makes sure the lease is still this run's in the store (renewing it for `ttl`).
    ///
    /// # Errors
    /// [`LeaseError::Lost`] when it is not; [`FaucetError::State`] when the store cannot
    /// be reached.
    pub(super) async fn confirm(&self, ttl: Duration) -> Result<(), FaucetError> {
        match &self.lease {
            Some(lease) => self.store.renew_lease(lease, ttl).await,
            None => Ok(()),
        }
    }

    /// Persists a bookmark, fenced by the lease.
    pub(super) async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError> {
        match &self.lease {
            Some(lease) => {
                self.check()?;
                self.store.put_fenced(key, value, lease).await
            }
            None => self.store.put(key, value).await,
        }
    }

    pub(super) async fn release(mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        if let Some(lease) = self.lease.take()
            && let Err(e) = self.store.release_lease(&lease).await
        {
            tracing::warn!(key = %lease.key, error = %e, "could not release the lease");
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
    }
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The loss of a lease whose deadline passed (module docs).
fn expired(key: &str) -> LeaseError {
    LeaseError::Lost {
        key: key.to_owned(),
        reason: "its ttl ran out before it was renewed (the process was stalled or stopped, \
                 or the state store unreachable, for longer than the ttl)"
            .to_owned(),
    }
}

/// The loss once declared (`None` if the sender is gone); owns its value, so the future
/// stays `Send` (a `watch::Ref` is not).
async fn declared(rx: &mut watch::Receiver<Option<LeaseError>>) -> Option<LeaseError> {
    rx.wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|r| r.clone())
}

/// Renews `lease` every third of `ttl` until the task is aborted, or declares it lost
/// (module docs) and ends.
async fn renew(store: Arc<dyn StateStore>, lease: Lease, ttl: Duration, live: Arc<Liveness>) {
    let period = ttl / 3;
    loop {
        tokio::time::sleep(period).await;
        let mut last: Option<FaucetError> = None;
        let mut tried = false;
        let renewed = loop {
            let sent = Instant::now();
            let Some(deadline) = live.good_until() else {
                // A lease that cannot expire: only the store's "not yours" ends it.
                match store.renew_lease(&lease, ttl).await {
                    Err(FaucetError::Lease(e)) => {
                        tracing::error!(key = %lease.key, error = %e, "lease lost; stopping the run");
                        live.declare(e);
                        return;
                    }
                    Err(e) => tracing::warn!(key = %lease.key, error = %e, "lease renewal failed"),
                    Ok(()) => {}
                }
                break true;
            };
            if sent >= deadline {
                break false;
            }
            tried = true;
            match tokio::time::timeout(deadline - sent, store.renew_lease(&lease, ttl)).await {
                Ok(Ok(())) => {
                    live.extend(sent + ttl);
                    break true;
                }
                Ok(Err(FaucetError::Lease(e))) => {
                    tracing::error!(key = %lease.key, error = %e, "lease lost; stopping the run");
                    live.declare(e);
                    return;
                }
                Ok(Err(e)) => {
                    tracing::warn!(
                        key = %lease.key,
                        error = %e,
                        "lease renewal failed; retrying while the lease is still good"
                    );
                    last = Some(e);
                }
                Err(_) => break false,
            }
            let left = live.good_until().map_or(Duration::ZERO, |g| {
                g.saturating_duration_since(Instant::now())
            });
            let pause = retry_pause(ttl).min(left);
            tokio::time::sleep(pause).await;
        };
        if !renewed {
            let e = match (tried, last) {
                // Woken past the deadline without a try: the process itself did not run.
                (false, _) => expired(&lease.key),
                (true, last) => LeaseError::Lost {
                    key: lease.key.clone(),
                    reason: format!(
                        "it could not be renewed within its ttl of {ttl:?} ({})",
                        last.map_or_else(
                            || "the state store did not answer".to_owned(),
                            |e| format!("the last attempt failed: {e}"),
                        )
                    ),
                },
            };
            tracing::error!(key = %lease.key, error = %e, "lease lost; stopping the run");
            live.declare(e);
            return;
        }
    }
}
