//! Holding the run's lease on its state key: acquire (or wait), renew in the background,
//! write bookmarks fenced by it, release at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::error::FaucetError;
use crate::state::{Lease, LeaseError, LeaseHolder, LeaseOutcome, StateStore};

/// How many times one acquisition takes over from a holder that is gone (a store that
/// kept answering with a dead holder would otherwise loop).
const MAX_TAKEOVERS: u32 = 3;

/// The run's hold on its state key. Without leasing support in the store it is empty and
/// bookmark writes are plain `put`s.
pub(super) struct LeaseGuard {
    store: Arc<dyn StateStore>,
    lease: Option<Lease>,
    lost: Arc<AtomicBool>,
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
        let lease = loop {
            let outcome = match gone.take() {
                Some(g) => {
                    let outcome = store.take_over_lease(key, &holder, ttl, &g).await?;
                    if matches!(outcome, LeaseOutcome::Acquired(_)) {
                        tracing::warn!(
                            key,
                            previous = %g,
                            "the previous run of this key on this host is gone (killed?); took \
                             over its lease at once; what it had not made durable is read again"
                        );
                    }
                    outcome
                }
                None => store.acquire_lease(key, &holder, ttl).await?,
            };
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
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = lease
            .clone()
            .map(|l| tokio::spawn(renew(store.clone(), l, ttl, lost.clone())));
        Ok(Self {
            store,
            lease,
            lost,
            renewer,
        })
    }

    /// The fencing number of the held lease, if the store has leases.
    pub(super) fn fence(&self) -> Option<u64> {
        self.lease.as_ref().map(|l| l.fence)
    }

    /// Persists a bookmark, fenced by the lease.
    pub(super) async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError> {
        match &self.lease {
            Some(lease) => {
                if self.lost.load(Ordering::SeqCst) {
                    return Err(LeaseError::Lost {
                        key: key.to_owned(),
                        reason: "it could not be renewed in time".to_owned(),
                    }
                    .into());
                }
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

async fn renew(store: Arc<dyn StateStore>, lease: Lease, ttl: Duration, lost: Arc<AtomicBool>) {
    let period = ttl / 3;
    loop {
        tokio::time::sleep(period).await;
        if let Err(e) = store.renew_lease(&lease, ttl).await {
            tracing::error!(key = %lease.key, error = %e, "lease renewal failed");
            if matches!(e, FaucetError::Lease(_)) {
                lost.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}
