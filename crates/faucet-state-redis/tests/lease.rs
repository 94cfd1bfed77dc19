//! Leases: one holder per key, named when busy; expiry and takeover with a larger fence;
//! a stale holder's renewals and fenced writes refused with `LeaseError::Lost` and the
//! bookmark left alone; release frees the key at once.

use std::sync::Arc;
use std::time::Duration;

use faucet_core::FaucetError;
use faucet_core::serde_json::json;
use faucet_core::state::{Lease, LeaseError, LeaseHolder, LeaseOutcome, StateStore};
use faucet_state_redis::RedisStateStore;

use crate::support::{clear, fresh_store};

const LONG: Duration = Duration::from_secs(30);

fn holder(name: &str) -> LeaseHolder {
    LeaseHolder {
        id: format!("{name}-id"),
        host: format!("host-{name}"),
        pid: 4000 + name.len() as u32,
        since: "2026-11-30T06:00:00Z".to_owned(),
    }
}

async fn acquired(store: &RedisStateStore, key: &str, h: &LeaseHolder, ttl: Duration) -> Lease {
    match store.acquire_lease(key, h, ttl).await.expect("acquire") {
        LeaseOutcome::Acquired(lease) => lease,
        other => panic!("{} expected the lease, got {other:?}", h.id),
    }
}

fn lost_reason(err: FaucetError) -> String {
    match err {
        FaucetError::Lease(LeaseError::Lost { reason, .. }) => reason,
        other => panic!("expected LeaseError::Lost, got {other:?}"),
    }
}

#[tokio::test]
async fn an_expired_lease_nobody_took_is_still_lost() {
    let prefix = "fst:lease-lapsed:";
    let (store, mut conn) = fresh_store(prefix).await;
    let la = acquired(&store, "p::k", &holder("a"), Duration::from_millis(200)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reason = lost_reason(store.renew_lease(&la, LONG).await.expect_err("expired"));
    assert!(reason.contains("expired"), "{reason}");
    lost_reason(
        store
            .put_fenced("p::k", &json!(1), &la)
            .await
            .expect_err("expired"),
    );
    assert_eq!(
        store.get("p::k").await.expect("get"),
        None,
        "nothing written"
    );
    clear(&mut conn, prefix).await;
}

#[tokio::test]
async fn concurrent_acquisitions_have_exactly_one_winner() {
    let prefix = "fst:lease-race:";
    let (store, mut conn) = fresh_store(prefix).await;
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .acquire_lease("p::k", &holder(&format!("r{i}")), LONG)
                .await
        }));
    }
    let mut winners = Vec::new();
    let mut named = Vec::new();
    for t in tasks {
        match t.await.expect("join").expect("acquire") {
            LeaseOutcome::Acquired(l) => winners.push(l),
            LeaseOutcome::HeldBy(h) => named.push(h),
            LeaseOutcome::Unsupported => panic!("redis supports leases"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(winners[0].fence, 1, "losers do not burn fences");
    assert!(named.iter().all(|h| *h == winners[0].holder), "{named:?}");
    clear(&mut conn, prefix).await;
}

#[tokio::test]
async fn a_state_key_named_like_a_lease_cannot_collide_with_one() {
    let prefix = "fst:lease-collide:";
    let (store, mut conn) = fresh_store(prefix).await;
    let la = acquired(&store, "k", &holder("a"), LONG).await;
    // `lease:k` and `fence:k` are valid state keys; they must not touch k's lease.
    store.put("lease:k", &json!("bookmark")).await.expect("put");
    store.put("fence:k", &json!("bookmark")).await.expect("put");
    store.renew_lease(&la, LONG).await.expect("lease intact");
    store
        .put_fenced("k", &json!(1), &la)
        .await
        .expect("lease intact");
    assert_eq!(
        store.get("lease:k").await.expect("get"),
        Some(json!("bookmark"))
    );
    clear(&mut conn, prefix).await;
}

/// The shared lease contract (faucet_core::testing::conformance::lease_contract): one holder
/// named when busy, release frees at once, renewal keeps it, expiry and takeover with a larger
/// fence, a stale holder's writes and renewals refused with the bookmark unchanged.
#[tokio::test]
async fn the_lease_contract_holds() {
    let prefix = "fst:lease-contract:";
    let (store, mut conn) = fresh_store(prefix).await;
    faucet_core::testing::conformance::lease_contract(&store, "p::", Duration::from_millis(600))
        .await
        .expect("lease contract");
    clear(&mut conn, prefix).await;
}
