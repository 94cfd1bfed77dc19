//! Leases: one holder per key, named when busy; expiry and takeover with a larger fence;
//! a stale holder's renewals and fenced writes refused with `LeaseError::Lost` and the
//! bookmark left alone; release frees the key at once.

use std::sync::Arc;
use std::time::Duration;

use faucet_core::FaucetError;
use faucet_core::serde_json::json;
use faucet_core::state::{Lease, LeaseError, LeaseHolder, LeaseOutcome, StateStore};
use faucet_state_redis::RedisStateStore;

use crate::support::{clear, fresh_store, keys_under};

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

async fn held_by(store: &RedisStateStore, key: &str, h: &LeaseHolder) -> LeaseHolder {
    match store.acquire_lease(key, h, LONG).await.expect("acquire") {
        LeaseOutcome::HeldBy(other) => other,
        other => panic!("{} expected HeldBy, got {other:?}", h.id),
    }
}

fn lost_reason(err: FaucetError) -> String {
    match err {
        FaucetError::Lease(LeaseError::Lost { reason, .. }) => reason,
        other => panic!("expected LeaseError::Lost, got {other:?}"),
    }
}

#[tokio::test]
async fn a_second_holder_is_told_who_holds_the_key_and_release_frees_it_at_once() {
    let prefix = "fst:lease-held:";
    let (store, mut conn) = fresh_store(prefix).await;
    let (a, b) = (holder("a"), holder("b"));
    let la = acquired(&store, "p::k", &a, LONG).await;
    assert_eq!(la.fence, 1);
    assert_eq!(
        held_by(&store, "p::k", &b).await,
        a,
        "names host, pid and since"
    );
    acquired(&store, "p::other", &b, LONG).await;
    assert_eq!(
        keys_under(&mut conn, prefix).await,
        [
            "fst:lease-held:fence/p::k",
            "fst:lease-held:fence/p::other",
            "fst:lease-held:lease/p::k",
            "fst:lease-held:lease/p::other",
        ]
    );

    store
        .put_fenced("p::k", &json!({"lsn": "0/1"}), &la)
        .await
        .expect("fenced put");
    store.renew_lease(&la, LONG).await.expect("renew");
    store.release_lease(&la).await.expect("release");
    store
        .release_lease(&la)
        .await
        .expect("releasing twice is fine");

    let lb = acquired(&store, "p::k", &b, LONG).await;
    assert_eq!(lb.fence, 2, "the fence grows across holders");
    let reason = lost_reason(
        store
            .put_fenced("p::k", &json!({"lsn": "0/0"}), &la)
            .await
            .expect_err("released lease cannot write"),
    );
    assert!(reason.contains("host-b"), "{reason}");
    lost_reason(store.renew_lease(&la, LONG).await.expect_err("nor renew"));
    assert_eq!(
        store.get("p::k").await.expect("get"),
        Some(json!({"lsn": "0/1"}))
    );
    let lb2 = acquired(&store, "p::k", &b, LONG).await;
    assert_eq!(lb2.fence, 3, "the same holder again: a new fence");
    clear(&mut conn, prefix).await;
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_stale_holder_is_fenced_off() {
    let prefix = "fst:lease-expiry:";
    let (store, mut conn) = fresh_store(prefix).await;
    let (a, b) = (holder("a"), holder("b"));
    let la = acquired(&store, "p::k", &a, Duration::from_millis(1500)).await;
    store
        .put_fenced("p::k", &json!({"offset": 10}), &la)
        .await
        .expect("a writes");
    assert_eq!(held_by(&store, "p::k", &b).await, a, "still live");

    tokio::time::sleep(Duration::from_millis(2000)).await; // a stalls past its ttl
    let lb = acquired(&store, "p::k", &b, LONG).await;
    assert!(lb.fence > la.fence, "{} > {}", lb.fence, la.fence);

    let reason = lost_reason(
        store
            .put_fenced("p::k", &json!({"offset": 5}), &la)
            .await
            .expect_err("stale write refused"),
    );
    assert!(
        reason.contains("another run took it") && reason.contains("host-b"),
        "{reason}"
    );
    lost_reason(
        store
            .renew_lease(&la, LONG)
            .await
            .expect_err("stale renew refused"),
    );
    assert_eq!(
        store.get("p::k").await.expect("get"),
        Some(json!({"offset": 10})),
        "the bookmark is unchanged"
    );
    store.release_lease(&la).await.expect("release stale");
    assert_eq!(
        held_by(&store, "p::k", &a).await,
        b,
        "a's release left b's lease"
    );
    store
        .put_fenced("p::k", &json!({"offset": 20}), &lb)
        .await
        .expect("b writes");
    assert_eq!(
        store.get("p::k").await.expect("get"),
        Some(json!({"offset": 20}))
    );
    clear(&mut conn, prefix).await;
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
async fn renewal_keeps_a_lease_alive_past_its_ttl() {
    let prefix = "fst:lease-renew:";
    let (store, mut conn) = fresh_store(prefix).await;
    let ttl = Duration::from_millis(1500);
    let la = acquired(&store, "p::k", &holder("a"), ttl).await;
    for _ in 0..4 {
        tokio::time::sleep(ttl / 3).await;
        store.renew_lease(&la, ttl).await.expect("renew");
    }
    assert_eq!(held_by(&store, "p::k", &holder("b")).await, holder("a"));
    store
        .put_fenced("p::k", &json!(1), &la)
        .await
        .expect("still ours");
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
