//! Leases: one holder per key, named when busy; expiry and takeover with a larger fence;
//! a stale holder's renewals and fenced writes refused with `LeaseError::Lost` and the
//! bookmark left alone; release frees the key at once.

use std::sync::Arc;
use std::time::Duration;

use faucet_core::serde_json::json;
use faucet_core::state::{LeaseHolder, LeaseOutcome, LeaseRequest, StateStore};
use faucet_core::testing::conformance;

use crate::support::{clear, fresh_store};

const LONG: Duration = Duration::from_secs(30);

/// The shared lease edge cases (faucet_core::testing::conformance::lease_lapse_and_race): an
/// expired lease nobody took is still lost (renewal refused saying it expired, fenced write
/// refused, nothing written); 8 concurrent acquisitions have exactly one winner, with fence 1,
/// and every loser is told the winner.
#[tokio::test]
async fn a_lapsed_lease_is_lost_and_concurrent_acquisitions_have_one_winner() {
    let prefix = "fst:lease-edges:";
    let (store, mut conn) = fresh_store(prefix).await;
    let result =
        conformance::lease_lapse_and_race(Arc::new(store), "p::", Duration::from_millis(200)).await;
    clear(&mut conn, prefix).await;
    result.expect("lease edge cases");
}

#[tokio::test]
async fn a_state_key_named_like_a_lease_cannot_collide_with_one() {
    let prefix = "fst:lease-collide:";
    let (store, mut conn) = fresh_store(prefix).await;
    let outcome = store
        .acquire_lease(&LeaseRequest::new("k", &LeaseHolder::this_process(), LONG))
        .await
        .expect("acquire");
    let LeaseOutcome::Acquired(la) = outcome else {
        panic!("expected the lease, got {outcome:?}");
    };
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

/// A lease whose holder is known to be gone is taken over at once, from that holder only,
/// with a larger fence (conformance::lease_takeover_contract).
#[tokio::test]
async fn a_gone_holder_s_lease_is_taken_over_from_it_only() {
    let prefix = "fst:lease-takeover:";
    let (store, mut conn) = fresh_store(prefix).await;
    conformance::lease_takeover_contract(&store, "p::")
        .await
        .expect("take-over contract");
    clear(&mut conn, prefix).await;
}

/// The shared lease contract (conformance::lease_contract): one holder
/// named when busy, release frees at once, renewal keeps it, expiry and takeover with a larger
/// fence, a stale holder's writes and renewals refused with the bookmark unchanged.
#[tokio::test]
async fn the_lease_contract_holds() {
    let prefix = "fst:lease-contract:";
    let (store, mut conn) = fresh_store(prefix).await;
    conformance::lease_contract(&store, "p::", Duration::from_millis(600))
        .await
        .expect("lease contract");
    clear(&mut conn, prefix).await;
}
