//! Leases: one holder per key, named when busy; expiry and takeover with a larger fence;
//! a stale holder's renewals and fenced writes refused with `LeaseError::Lost` and the
//! bookmark left alone; release frees the key at once.

use std::sync::Arc;
use std::time::Duration;

use faucet_core::FaucetError;
use faucet_core::state::{LeaseError, LeaseHolder, LeaseOutcome, LeaseRequest, StateStore};
use faucet_core::testing::conformance;

use crate::support::{drop_tables, fresh_store};

const LONG: Duration = Duration::from_secs(30);

/// The shared lease edge cases (faucet_core::testing::conformance::lease_lapse_and_race): an
/// expired lease nobody took is still lost (renewal refused saying it expired, fenced write
/// refused, nothing written); 8 concurrent acquisitions have exactly one winner, with fence 1,
/// and every loser is told the winner.
#[tokio::test]
async fn a_lapsed_lease_is_lost_and_concurrent_acquisitions_have_one_winner() {
    let (store, pool) = fresh_store("fst_lease_edges").await;
    let result =
        conformance::lease_lapse_and_race(Arc::new(store), "p::", Duration::from_millis(300)).await;
    drop_tables(&pool, "fst_lease_edges").await;
    result.expect("lease edge cases");
}

#[tokio::test]
async fn a_deleted_lease_row_is_a_lost_lease() {
    let (store, pool) = fresh_store("fst_lease_gone").await;
    let outcome = store
        .acquire_lease(&LeaseRequest::new(
            "p::k",
            &LeaseHolder::this_process(),
            LONG,
        ))
        .await
        .expect("acquire");
    let LeaseOutcome::Acquired(la) = outcome else {
        panic!("expected the lease, got {outcome:?}");
    };
    sqlx::query("DELETE FROM \"fst_lease_gone_lease\"")
        .execute(&pool)
        .await
        .expect("delete");
    match store.renew_lease(&la, LONG).await.expect_err("gone") {
        FaucetError::Lease(LeaseError::Lost { reason, .. }) => {
            assert!(reason.contains("gone"), "{reason}");
        }
        other => panic!("expected LeaseError::Lost, got {other:?}"),
    }
    drop_tables(&pool, "fst_lease_gone").await;
}

/// The shared lease contract (conformance::lease_contract): one holder
/// named when busy, release frees at once, renewal keeps it, expiry and takeover with a larger
/// fence, a stale holder's writes and renewals refused with the bookmark unchanged.
#[tokio::test]
async fn the_lease_contract_holds() {
    let (store, pool) = fresh_store("fst_lease_contract").await;
    conformance::lease_contract(&store, "p::", Duration::from_millis(600))
        .await
        .expect("lease contract");
    drop_tables(&pool, "fst_lease_contract").await;
}

/// A lease whose holder is known to be gone is taken over at once, from that holder only,
/// with a larger fence (conformance::lease_takeover_contract).
#[tokio::test]
async fn a_gone_holder_s_lease_is_taken_over_from_it_only() {
    let (store, pool) = fresh_store("fst_lease_takeover").await;
    conformance::lease_takeover_contract(&store, "p::")
        .await
        .expect("take-over contract");
    drop_tables(&pool, "fst_lease_takeover").await;
}
