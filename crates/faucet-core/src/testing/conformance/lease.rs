//! The lease checks of the state stores that lease keys: one holder, expiry and fencing,
//! take-over from a gone holder, a lapsed lease, concurrent acquisitions.

use std::sync::Arc;

use serde_json::json;

use crate::error::FaucetError;
use crate::state::{Lease, LeaseError, LeaseHolder, LeaseOutcome, LeaseRequest, StateStore};

use super::{ConformanceError, fail, io};

/// A holder of the lease checks: `id`, on host `host-<name>` as process `pid`.
fn test_holder(id: String, name: &str, pid: u32) -> LeaseHolder {
    LeaseHolder {
        id,
        host: format!("host-{name}"),
        pid,
        since: "2026-11-30T06:00:00Z".to_owned(),
        process: None,
    }
}

/// The holder `name` of a contract run on keys under `prefix`: id `{prefix}{name}`, on host
/// `host-<name>` as process 4242.
fn prefixed_holder(prefix: &str, name: &str) -> LeaseHolder {
    test_holder(format!("{prefix}{name}"), name, 4242)
}

/// Fails `check` unless the lease `after` (taken from, or after, `before`) has a larger
/// fence.
fn fence_grew(check: &'static str, before: &Lease, after: &Lease) -> Result<(), ConformanceError> {
    if after.fence <= before.fence {
        return fail(
            check,
            format!("fence did not grow: {} after {}", after.fence, before.fence),
        );
    }
    Ok(())
}

/// The lease `holder` acquires on `key` for `ttl`; fails `check` unless it was granted.
async fn acquired(
    check: &'static str,
    store: &dyn StateStore,
    key: &str,
    holder: &LeaseHolder,
    ttl: std::time::Duration,
) -> Result<Lease, ConformanceError> {
    match io(
        check,
        store
            .acquire_lease(&LeaseRequest::new(key, holder, ttl))
            .await,
    )? {
        LeaseOutcome::Acquired(l) => Ok(l),
        other => fail(
            check,
            format!("{} expected the lease, got {other:?}", holder.id),
        ),
    }
}

/// `Ok` when `r` is [`LeaseError::Lost`]; fails `check` saying `what` otherwise.
fn expect_lost(
    check: &'static str,
    r: Result<(), FaucetError>,
    what: &str,
) -> Result<(), ConformanceError> {
    match r {
        Err(FaucetError::Lease(LeaseError::Lost { .. })) => Ok(()),
        other => fail(
            check,
            format!("{what}: expected LeaseError::Lost, got {other:?}"),
        ),
    }
}

/// The take-over part of the lease contract, for stores whose leases outlive their holder's
/// process (PostgreSQL, Redis): [`StateStore::acquire_lease`] with [`LeaseRequest::gone`] takes a lease from the
/// holder it names, with a larger fence, and from no one else.
///
/// # Errors
/// When any part of the contract does not hold.
pub async fn lease_takeover_contract(
    store: &dyn StateStore,
    prefix: &str,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "lease_takeover_contract";
    let holder = |name: &str| prefixed_holder(prefix, name);
    let (a, b, c) = (holder("a"), holder("b"), holder("c"));
    let key = format!("{prefix}takeover");
    let long = std::time::Duration::from_secs(60);
    let la = acquired(CHECK, store, &key, &a, long).await?;
    match io(
        CHECK,
        store
            .acquire_lease(&LeaseRequest::new(&key, &c, long).taking_over(&b))
            .await,
    )? {
        LeaseOutcome::HeldBy(h) if h == a => {}
        other => {
            return fail(
                CHECK,
                format!("a take-over from b, who does not hold the lease, got {other:?}"),
            );
        }
    }
    let lc = match io(
        CHECK,
        store
            .acquire_lease(&LeaseRequest::new(&key, &c, long).taking_over(&a))
            .await,
    )? {
        LeaseOutcome::Acquired(l) => l,
        other => return fail(CHECK, format!("a take-over from a got {other:?}")),
    };
    fence_grew(CHECK, &la, &lc)?;
    expect_lost(
        CHECK,
        store.put_fenced(&key, &json!({"offset": 1}), &la).await,
        "the taken-over holder's put_fenced",
    )?;
    io(CHECK, store.release_lease(&lc).await)?;
    io(CHECK, store.delete(&key).await)?;
    Ok(())
}

/// The lease contract of a [`StateStore`] that implements leasing (see
/// [`crate::state::lease`]), on key `{prefix}lease`:
/// a second holder is told who holds the key; a released key is free at once; renewal keeps a
/// lease past its ttl; after a lease lapses another holder takes it with a larger fence; the
/// stale holder's `put_fenced` and `renew_lease` are refused with [`LeaseError::Lost`] and
/// the bookmark is unchanged; the stale holder's late release does not free the new lease.
/// Takes about `3 × ttl`; `ttl` must be long enough for a few round trips (≥ 300 ms).
///
/// # Errors
/// When any part of the contract does not hold.
pub async fn lease_contract(
    store: &dyn StateStore,
    prefix: &str,
    ttl: std::time::Duration,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "lease_contract";
    let key = format!("{prefix}lease");
    let long = std::time::Duration::from_secs(60);
    let (a, b) = (prefixed_holder(prefix, "a"), prefixed_holder(prefix, "b"));
    let acquire = |h: LeaseHolder, ttl| {
        let key = key.clone();
        async move { acquired(CHECK, store, &key, &h, ttl).await }
    };
    let held_by = |h: LeaseHolder| {
        let key = key.clone();
        async move {
            match io(
                CHECK,
                store
                    .acquire_lease(&LeaseRequest::new(&key, &h, long))
                    .await,
            )? {
                LeaseOutcome::HeldBy(other) => Ok(other),
                other => fail(CHECK, format!("{} expected HeldBy, got {other:?}", h.id)),
            }
        }
    };
    let lost = |r: Result<(), FaucetError>, what: &str| expect_lost(CHECK, r, what);

    let la = acquire(a.clone(), long).await?;
    if held_by(b.clone()).await? != a {
        return fail(CHECK, "HeldBy does not name the holder");
    }
    io(CHECK, store.release_lease(&la).await)?;
    let lb = acquire(b.clone(), long).await?;
    io(CHECK, store.release_lease(&lb).await)?;

    let la = acquire(a.clone(), ttl).await?;
    for _ in 0..4 {
        tokio::time::sleep(ttl / 3).await;
        io(CHECK, store.renew_lease(&la, ttl).await)?;
    }
    if held_by(b.clone()).await? != a {
        return fail(CHECK, "a renewed lease was lost or taken");
    }
    io(
        CHECK,
        store.put_fenced(&key, &json!({"offset": 10}), &la).await,
    )?;

    tokio::time::sleep(ttl * 2).await; // a stalls past its ttl
    let lb = acquire(b.clone(), long).await?;
    fence_grew(CHECK, &la, &lb)?;
    lost(
        store.put_fenced(&key, &json!({"offset": 5}), &la).await,
        "stale put_fenced",
    )?;
    lost(store.renew_lease(&la, long).await, "stale renew")?;
    if io(CHECK, store.get(&key).await)? != Some(json!({"offset": 10})) {
        return fail(CHECK, "a stale holder moved the bookmark");
    }
    io(CHECK, store.release_lease(&la).await)?;
    if held_by(a.clone()).await? != b {
        return fail(
            CHECK,
            "a stale holder's release freed the new holder's lease",
        );
    }
    io(
        CHECK,
        store.put_fenced(&key, &json!({"offset": 20}), &lb).await,
    )?;
    io(CHECK, store.release_lease(&lb).await)?;
    io(CHECK, store.delete(&key).await)?;
    Ok(())
}

/// Lease edge cases every leasing store must get right, on keys `{prefix}lapsed` and
/// `{prefix}race`, which must never have been used:
///
/// * a lease of `ttl` that lapsed with nobody taking over is still lost: after `2.5 × ttl` its
///   renewal is refused with [`LeaseError::Lost`] whose reason
///   says it `expired`, its `put_fenced` is refused with `Lost` and nothing is written;
/// * 8 concurrent acquisitions (tasks spawned on the runtime) of a free key have exactly one
///   winner, with fence 1 (losers do not burn fences), and every loser is told the winner.
///
/// Leaves the keys' leases released and the keys deleted.
///
/// # Errors
/// When any of that does not hold, or the store does not support leases.
pub async fn lease_lapse_and_race(
    store: Arc<dyn StateStore>,
    prefix: &str,
    ttl: std::time::Duration,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "lease_lapse_and_race";
    let long = std::time::Duration::from_secs(30);
    let holder = |name: &str| {
        test_holder(
            format!("{name}-id"),
            name,
            4000 + u32::try_from(name.len()).unwrap_or(0),
        )
    };

    // An expired lease nobody took is still lost.
    let key = format!("{prefix}lapsed");
    let la = acquired(CHECK, &*store, &key, &holder("a"), ttl).await?;
    tokio::time::sleep(ttl * 5 / 2).await;
    match store.renew_lease(&la, long).await {
        Err(FaucetError::Lease(LeaseError::Lost { reason, .. })) if reason.contains("expired") => {}
        other => {
            return fail(
                CHECK,
                format!(
                    "renewing a lapsed lease: expected LeaseError::Lost saying it expired, got \
                     {other:?}"
                ),
            );
        }
    }
    expect_lost(
        CHECK,
        store.put_fenced(&key, &json!(1), &la).await,
        "put_fenced under a lapsed lease",
    )?;
    let stored = io(CHECK, store.get(&key).await)?;
    if stored.is_some() {
        return fail(
            CHECK,
            format!("a lapsed lease's put_fenced wrote {stored:?}"),
        );
    }
    io(CHECK, store.delete(&key).await)?;

    // Concurrent acquisitions: exactly one winner.
    let key = format!("{prefix}race");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (store, key, h) = (store.clone(), key.clone(), holder(&format!("r{i}")));
        tasks.push(tokio::spawn(async move {
            store
                .acquire_lease(&LeaseRequest::new(&key, &h, long))
                .await
        }));
    }
    let mut winners = Vec::new();
    let mut named = Vec::new();
    for t in tasks {
        let outcome = match t.await {
            Ok(r) => io(CHECK, r)?,
            Err(e) => return fail(CHECK, format!("an acquiring task failed: {e}")),
        };
        match outcome {
            LeaseOutcome::Acquired(l) => winners.push(l),
            LeaseOutcome::HeldBy(h) => named.push(h),
            LeaseOutcome::Unsupported => return fail(CHECK, "the store does not support leases"),
        }
    }
    for lease in &winners {
        io(CHECK, store.release_lease(lease).await)?;
    }
    io(CHECK, store.delete(&key).await)?;
    let [winner] = winners.as_slice() else {
        return fail(
            CHECK,
            format!(
                "{} of 8 concurrent acquisitions won: {winners:?}",
                winners.len()
            ),
        );
    };
    if winner.fence != 1 {
        return fail(
            CHECK,
            format!(
                "the winner's fence is {}, want 1 (losers do not burn fences)",
                winner.fence
            ),
        );
    }
    if let Some(h) = named.iter().find(|h| **h != winner.holder) {
        return fail(
            CHECK,
            format!(
                "a loser was told {h:?} holds the key, the winner is {:?}",
                winner.holder
            ),
        );
    }
    Ok(())
}
