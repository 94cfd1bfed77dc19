//! Leases: one holder per key, named when busy; expiry and takeover with a larger fence;
//! a stale holder's renewals and fenced writes refused with `LeaseError::Lost` and the
//! bookmark left alone; release frees the key at once.

use std::sync::Arc;
use std::time::Duration;

use faucet_core::FaucetError;
use faucet_core::serde_json::json;
use faucet_core::state::{Lease, LeaseError, LeaseHolder, LeaseOutcome, StateStore};
use faucet_state_postgres::PostgresStateStore;

use crate::support::{drop_tables, fresh_store};

const LONG: Duration = Duration::from_secs(30);

fn holder(name: &str) -> LeaseHolder {
    LeaseHolder {
        id: format!("{name}-id"),
        host: format!("host-{name}"),
        pid: 4000 + name.len() as u32,
        since: "2026-11-30T06:00:00Z".to_owned(),
    }
}

async fn acquired(store: &PostgresStateStore, key: &str, h: &LeaseHolder, ttl: Duration) -> Lease {
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
    let (store, pool) = fresh_store("fst_lease_lapsed").await;
    let la = acquired(&store, "p::k", &holder("a"), Duration::from_millis(300)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
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
    drop_tables(&pool, "fst_lease_lapsed").await;
}

#[tokio::test]
async fn concurrent_acquisitions_have_exactly_one_winner() {
    let (store, pool) = fresh_store("fst_lease_race").await;
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
            LeaseOutcome::Unsupported => panic!("postgres supports leases"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(winners[0].fence, 1);
    assert!(named.iter().all(|h| *h == winners[0].holder), "{named:?}");
    drop_tables(&pool, "fst_lease_race").await;
}

#[tokio::test]
async fn a_deleted_lease_row_is_a_lost_lease() {
    let (store, pool) = fresh_store("fst_lease_gone").await;
    let la = acquired(&store, "p::k", &holder("a"), LONG).await;
    sqlx::query("DELETE FROM \"fst_lease_gone_lease\"")
        .execute(&pool)
        .await
        .expect("delete");
    let reason = lost_reason(store.renew_lease(&la, LONG).await.expect_err("gone"));
    assert!(reason.contains("gone"), "{reason}");
    drop_tables(&pool, "fst_lease_gone").await;
}

/// The shared lease contract (faucet_core::testing::conformance::lease_contract): one holder
/// named when busy, release frees at once, renewal keeps it, expiry and takeover with a larger
/// fence, a stale holder's writes and renewals refused with the bookmark unchanged.
#[tokio::test]
async fn the_lease_contract_holds() {
    let (store, pool) = fresh_store("fst_lease_contract").await;
    faucet_core::testing::conformance::lease_contract(&store, "p::", Duration::from_millis(600))
        .await
        .expect("lease contract");
    drop_tables(&pool, "fst_lease_contract").await;
}
