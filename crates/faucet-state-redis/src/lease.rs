//! Leases in Redis: the string key `{prefix}lease/{state key}` holds
//! `{"fence":N,"holder":{...}}` with a millisecond expiry (`PX`), and the counter
//! `{prefix}fence/{state key}` (`INCR`) gives every acquisition a larger fence.
//!
//! Each operation is one Lua script, run atomically by the server:
//! * acquire: if the lease key is absent (or already this holder's, or, for a take-over,
//!   still the gone holder's), `INCR` the fence and
//!   `SET` the lease with `PX ttl`; otherwise return the current value, naming the holder;
//! * renew: `PEXPIRE` only if the lease key still holds exactly our value;
//! * put_fenced: `SET` the bookmark only if the lease key still holds exactly our value;
//! * release: `DEL` the lease key only if it still holds exactly our value.
//!
//! The lease and fence keys use `/`, which a state key can never contain, so no state key
//! (for instance one named `lease:x`) can collide with them. Expiry is the Redis server's
//! clock, so hosts never compare their own clocks.

use std::time::Duration;

use crate::error::STORE;
use crate::store::RedisStateStore;
use faucet_core::FaucetError;
use faucet_core::serde_json::{self, Value};
use faucet_core::state::{DOCTOR_KEY, Lease, LeaseError, LeaseHolder, LeaseOutcome, LeaseRequest};

/// The exact text of a lease key's value; the Lua acquisition builds the same bytes.
fn lease_value(holder_json: &str, fence: u64) -> String {
    format!("{{\"fence\":{fence},\"holder\":{holder_json}}}")
}

fn holder_json(holder: &LeaseHolder) -> Result<String, FaucetError> {
    serde_json::to_string(holder)
        .map_err(|e| FaucetError::state_io(STORE, "cannot encode the lease holder", e))
}

/// `(holder, fence)` of a lease key's value.
fn parse_lease(lease_key: &str, raw: &str) -> Result<(LeaseHolder, u64), FaucetError> {
    let parsed: Result<(LeaseHolder, u64), serde_json::Error> = serde_json::from_str::<Value>(raw)
        .and_then(|v| {
            let fence = v["fence"].as_u64().unwrap_or_default();
            serde_json::from_value(v["holder"].clone()).map(|h| (h, fence))
        });
    parsed.map_err(|e| {
        FaucetError::state_io(
            STORE,
            format!(
                "lease key {lease_key:?} holds something that is not a faucet lease; delete \
                 it if no run uses this state key"
            ),
            e,
        )
    })
}

fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisStateStore {
    fn lease_key(&self, key: &str) -> String {
        format!("{}lease/{key}", self.prefix)
    }

    fn fence_key(&self, key: &str) -> String {
        format!("{}fence/{key}", self.prefix)
    }

    fn value_of(lease: &Lease) -> Result<String, FaucetError> {
        Ok(lease_value(&holder_json(&lease.holder)?, lease.fence))
    }

    /// Takes the lease on `request.key` when it is free, already the request's holder's, or
    /// held by the holder `request.gone` (a take-over from a process known to have exited).
    pub(crate) async fn acquire(
        &self,
        request: &LeaseRequest,
    ) -> Result<LeaseOutcome, FaucetError> {
        let (key, holder) = (request.key.as_str(), &request.holder);
        self.redis_key(key)?;
        let lease_key = self.lease_key(key);
        let mut conn = self.conn.clone();
        let reply: redis::Value = self
            .scripts
            .acquire
            .key(&lease_key)
            .key(self.fence_key(key))
            .arg(holder_json(holder)?)
            .arg(&holder.id)
            .arg(ttl_millis(request.ttl))
            .arg(request.gone_id().unwrap_or(""))
            .invoke_async(&mut conn)
            .await
            .map_err(self.fail("acquire lease"))?;
        match reply {
            redis::Value::Int(fence) => Ok(LeaseOutcome::Acquired(Lease {
                key: key.to_owned(),
                holder: holder.clone(),
                fence: u64::try_from(fence).unwrap_or_default(),
            })),
            redis::Value::BulkString(raw) => {
                let raw = String::from_utf8_lossy(&raw);
                Ok(LeaseOutcome::HeldBy(parse_lease(&lease_key, &raw)?.0))
            }
            other => Err(FaucetError::state(
                STORE,
                format!("acquire lease: unexpected reply {other:?} for {lease_key:?}"),
            )),
        }
    }

    /// Why `lease` is no longer held, read from its key.
    async fn lost_reason(&self, lease: &Lease) -> Result<FaucetError, FaucetError> {
        let lease_key = self.lease_key(&lease.key);
        let mut conn = self.conn.clone();
        let current: Option<String> = redis::cmd("GET")
            .arg(&lease_key)
            .query_async(&mut conn)
            .await
            .map_err(self.fail("read lease"))?;
        let reason = match current {
            None => "it expired before it was renewed (the process stalled, or Redis was \
                     unreachable, for longer than the lease's ttl)"
                .to_owned(),
            Some(raw) => match parse_lease(&lease_key, &raw) {
                Ok((other, fence)) => {
                    format!(
                        "it expired and another run took it: {other} holds it with fence {fence}"
                    )
                }
                Err(_) => format!("{lease_key:?} now holds something else"),
            },
        };
        Ok(LeaseError::Lost {
            key: lease.key.clone(),
            reason,
        }
        .into())
    }

    pub(crate) async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<(), FaucetError> {
        let mut conn = self.conn.clone();
        let renewed: i64 = self
            .scripts
            .renew
            .key(self.lease_key(&lease.key))
            .arg(Self::value_of(lease)?)
            .arg(ttl_millis(ttl))
            .invoke_async(&mut conn)
            .await
            .map_err(self.fail("renew lease"))?;
        if renewed == 1 {
            Ok(())
        } else {
            Err(self.lost_reason(lease).await?)
        }
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), FaucetError> {
        let mut conn = self.conn.clone();
        self.scripts
            .release
            .key(self.lease_key(&lease.key))
            .arg(Self::value_of(lease)?)
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(self.fail("release lease"))
    }

    pub(crate) async fn write_fenced(
        &self,
        key: &str,
        value: &Value,
        lease: &Lease,
    ) -> Result<(), FaucetError> {
        let rkey = self.redis_key(key)?;
        let text = serde_json::to_string(value)
            .map_err(|e| FaucetError::state_io(STORE, "cannot encode the bookmark", e))?;
        let mut conn = self.conn.clone();
        let written: i64 = self
            .scripts
            .put_fenced
            .key(self.lease_key(&lease.key))
            .key(&rkey)
            .arg(Self::value_of(lease)?)
            .arg(text)
            .invoke_async(&mut conn)
            .await
            .map_err(self.fail("put (fenced)"))?;
        if written == 1 {
            Ok(())
        } else {
            Err(self.lost_reason(lease).await?)
        }
    }

    /// Runs the renew and release scripts against the lease key of [`DOCTOR_KEY`], which no
    /// run holds: proves the server runs scripts for this user, and changes nothing.
    pub(crate) async fn check_scripts(&self) -> Result<(), FaucetError> {
        let mut conn = self.conn.clone();
        let probe = lease_value("{}", 0);
        for (script, name) in [
            (&self.scripts.renew, "lease script probe (renew)"),
            (&self.scripts.release, "lease script probe (release)"),
        ] {
            script
                .key(self.lease_key(DOCTOR_KEY))
                .arg(&probe)
                .arg(1)
                .invoke_async::<i64>(&mut conn)
                .await
                .map_err(self.fail(name))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_values_round_trip() {
        let holder = LeaseHolder {
            id: "h-1".into(),
            host: "etl-2".into(),
            pid: 4711,
            since: "2026-11-30T06:00:00Z".into(),
            process: None,
        };
        let json = holder_json(&holder).expect("encode");
        let value = lease_value(&json, 42);
        assert_eq!(parse_lease("k", &value).expect("parse"), (holder, 42));
        let err = parse_lease("k", "garbage")
            .expect_err("garbage")
            .to_string();
        assert!(err.contains("not a faucet lease"), "{err}");
    }
}
