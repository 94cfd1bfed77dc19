//! The store under the real run loop: resume across restarts, and one runner per key.

use std::sync::Arc;

use faucet_core::state::StateStore;
use faucet_core::testing::conformance;
use faucet_state_redis::RedisStateStore;

use crate::support::{clear, fresh_store, redis_url};

/// The shared run-loop check (faucet_core::testing::conformance::state_store_under_run_loop):
/// a restarted run resumes from the bookmark a new store on the same prefix reads, moving only
/// the new records (nothing lost, nothing doubled); each run releases its lease (the next
/// acquisition gets fence 3); a second run of a busy key fails naming the holder and moves
/// nothing.
#[tokio::test]
async fn resumes_across_a_restart_and_refuses_a_busy_key() {
    let prefix = "fst:pipe-run-loop:";
    let (store, mut conn) = fresh_store(prefix).await;
    let reopen = || async {
        // A new process: a new store on the same prefix.
        let store = RedisStateStore::connect(&redis_url(), prefix).await?;
        Ok(Arc::new(store) as Arc<dyn StateStore>)
    };
    let result =
        conformance::state_store_under_run_loop(Arc::new(store), reopen, "orders::", true).await;
    clear(&mut conn, prefix).await;
    result.expect("the store under the run loop");
}
