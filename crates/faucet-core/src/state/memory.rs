//! [`MemoryStateStore`]: a map in the process. Forgets everything on exit; not durable.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;

use super::lease::{Lease, LeaseError, LeaseHolder, LeaseOutcome, LeaseRequest};
use super::{StateStore, validate_state_key};
use crate::error::FaucetError;

/// An in-process state store with in-process leases.
#[derive(Debug, Default)]
pub struct MemoryStateStore {
    entries: Mutex<HashMap<String, Value>>,
    leases: Mutex<HashMap<String, (LeaseHolder, u64, Instant)>>,
}

impl MemoryStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Value>> {
        // A poisoned map is still a consistent map: every critical section is one call.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn leases(&self) -> std::sync::MutexGuard<'_, HashMap<String, (LeaseHolder, u64, Instant)>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn holds(&self, lease: &Lease) -> Result<(), FaucetError> {
        match self.leases().get(&lease.key) {
            Some((h, fence, until)) if h.id == lease.holder.id && *fence == lease.fence => {
                if *until >= Instant::now() {
                    Ok(())
                } else {
                    Err(lost(lease, "it expired"))
                }
            }
            _ => Err(lost(lease, "another run took it")),
        }
    }
}

fn lost(lease: &Lease, reason: &str) -> FaucetError {
    LeaseError::Lost {
        key: lease.key.clone(),
        reason: reason.to_owned(),
    }
    .into()
}

#[async_trait]
impl StateStore for MemoryStateStore {
    fn name(&self) -> &str {
        "memory"
    }

    fn is_durable(&self) -> bool {
        false
    }

    async fn get(&self, key: &str) -> Result<Option<Value>, FaucetError> {
        validate_state_key(key)?;
        Ok(self.entries().get(key).cloned())
    }

    async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError> {
        validate_state_key(key)?;
        self.entries().insert(key.to_owned(), value.clone());
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        validate_state_key(key)?;
        self.entries().remove(key);
        Ok(())
    }

    async fn acquire_lease(&self, request: &LeaseRequest) -> Result<LeaseOutcome, FaucetError> {
        let (key, holder, ttl) = (request.key.as_str(), &request.holder, request.ttl);
        validate_state_key(key)?;
        let mut leases = self.leases();
        let now = Instant::now();
        let next_fence = match leases.get(key) {
            Some((other, _, until)) if *until >= now && other.id != holder.id => {
                return Ok(LeaseOutcome::HeldBy(other.clone()));
            }
            Some((_, fence, _)) => fence + 1,
            None => 1,
        };
        leases.insert(key.to_owned(), (holder.clone(), next_fence, now + ttl));
        Ok(LeaseOutcome::Acquired(Lease {
            key: key.to_owned(),
            holder: holder.clone(),
            fence: next_fence,
        }))
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<(), FaucetError> {
        self.holds(lease)?;
        if let Some(entry) = self.leases().get_mut(&lease.key) {
            entry.2 = Instant::now() + ttl;
        }
        Ok(())
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), FaucetError> {
        let mut leases = self.leases();
        if leases
            .get(&lease.key)
            .is_some_and(|(h, f, _)| h.id == lease.holder.id && *f == lease.fence)
        {
            leases.remove(&lease.key);
        }
        Ok(())
    }

    async fn put_fenced(&self, key: &str, value: &Value, lease: &Lease) -> Result<(), FaucetError> {
        validate_state_key(key)?;
        self.holds(lease)?;
        self.put(key, value).await
    }
}
