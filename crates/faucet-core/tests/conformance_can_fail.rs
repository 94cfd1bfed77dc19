//! Every conformance check passes on a correct double and fails on a broken one.

use std::sync::Arc;

use faucet_core::FaucetError;
use faucet_core::state::{MemoryStateStore, StateStore};
use faucet_core::testing::conformance::{
    cancellation_flushes, config_is_strict, errors_not_panics, sink_flush_is_durable,
    sink_guarantee_is_truthful, source_bookmarks_round_trip, source_pages_are_bounded,
    state_store_contract,
};
use faucet_core::testing::{MemorySink, VecSource};
use serde_json::{Value, json};

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Strict {
    path: String,
}

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Lax {
    path: String,
}

#[test]
fn config_strictness() {
    let valid = json!({"path": "x"});
    config_is_strict::<Strict>(&valid).expect("strict passes");
    config_is_strict::<Lax>(&valid).expect_err("lax fails");
}

#[tokio::test]
async fn source_checks() {
    let good = VecSource::sequence(23);
    source_pages_are_bounded(&good, 5, 23)
        .await
        .expect("bounded");
    source_bookmarks_round_trip(&good, 5)
        .await
        .expect("round trip");

    let mut greedy = VecSource::sequence(23);
    greedy.ignore_batch_size = true;
    source_pages_are_bounded(&greedy, 5, 23)
        .await
        .expect_err("a page over batch_size");

    let mut off = VecSource::sequence(23);
    off.off_by_one = true;
    source_bookmarks_round_trip(&off, 5)
        .await
        .expect_err("off-by-one bookmarks repeat a record");
}

#[tokio::test]
async fn sink_checks() {
    for good in [
        MemorySink::new(),
        MemorySink::keyed("id"),
        MemorySink::atomic(),
    ] {
        sink_guarantee_is_truthful(&good, || async { good.rows() })
            .await
            .expect("truthful");
        sink_flush_is_durable(&good, || async { good.rows() })
            .await
            .expect("durable");
    }
    let mut liar = MemorySink::keyed("id");
    liar.lie_about_key = true;
    sink_guarantee_is_truthful(&liar, || async { liar.rows() })
        .await
        .expect_err("a lying keyed sink");

    let mut stale = MemorySink::atomic();
    stale.accept_stale_tokens = true;
    sink_guarantee_is_truthful(&stale, || async { stale.rows() })
        .await
        .expect_err("a sink accepting stale tokens");

    let mut lossy = MemorySink::new();
    lossy.drop_on_flush = true;
    sink_flush_is_durable(&lossy, || async { lossy.rows() })
        .await
        .expect_err("a sink losing flushed rows");
}

#[tokio::test]
async fn errors_not_panics_catches_both() {
    errors_not_panics("an error", async {
        Err::<(), _>(FaucetError::config("x", "bad"))
    })
    .await
    .expect("an error is fine");
    errors_not_panics("a panic", async {
        if true {
            panic!("boom");
        }
        Ok::<(), FaucetError>(())
    })
    .await
    .expect_err("a panic is caught and reported");
    errors_not_panics("a success", async { Ok::<(), FaucetError>(()) })
        .await
        .expect_err("success where an error was due");
}

#[tokio::test]
async fn cancellation_check_fails_for_a_sink_that_loses_flushed_rows() {
    let source = VecSource::sequence(50);
    let mut lossy = MemorySink::new();
    lossy.drop_on_flush = true;
    cancellation_flushes(&source, &lossy, 10, || async { lossy.rows() })
        .await
        .expect_err("rows missing after a cancelled run");
}

/// A store that reports a torn entry as "no bookmark" and accepts any key.
#[derive(Default)]
struct SloppyStore(MemoryStateStore);

#[async_trait::async_trait]
impl StateStore for SloppyStore {
    fn name(&self) -> &str {
        "sloppy"
    }
    async fn get(&self, key: &str) -> Result<Option<Value>, FaucetError> {
        Ok(self.0.get(key).await.ok().flatten())
    }
    async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError> {
        let _ = self.0.put(key, value).await;
        Ok(())
    }
    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        self.0.delete(key).await
    }
}

#[tokio::test]
async fn state_store_contract_checks() {
    state_store_contract(&MemoryStateStore::new(), "mem-")
        .await
        .expect("memory store");
    let dir = tempfile::tempdir().expect("tempdir");
    state_store_contract(
        &faucet_core::state::FileStateStore::new(dir.path()),
        "file-",
    )
    .await
    .expect("file store");
    state_store_contract(&SloppyStore::default(), "sloppy-")
        .await
        .expect_err("accepting invalid keys");
    let _ = Arc::new(());
}

/// A store whose leases never expire and whose fenced writes never check the fence.
#[derive(Default)]
struct UnfencedStore(MemoryStateStore);

#[async_trait::async_trait]
impl StateStore for UnfencedStore {
    fn name(&self) -> &str {
        "unfenced"
    }
    async fn get(&self, key: &str) -> Result<Option<Value>, FaucetError> {
        self.0.get(key).await
    }
    async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError> {
        self.0.put(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        self.0.delete(key).await
    }
    async fn acquire_lease(
        &self,
        key: &str,
        holder: &faucet_core::state::LeaseHolder,
        ttl: std::time::Duration,
    ) -> Result<faucet_core::state::LeaseOutcome, FaucetError> {
        self.0.acquire_lease(key, holder, ttl).await
    }
    async fn renew_lease(
        &self,
        lease: &faucet_core::state::Lease,
        ttl: std::time::Duration,
    ) -> Result<(), FaucetError> {
        self.0.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: &faucet_core::state::Lease) -> Result<(), FaucetError> {
        self.0.release_lease(lease).await
    }
    // put_fenced: the trait's default, a plain put — the bug.
}

#[tokio::test]
async fn lease_contract_checks() {
    use faucet_core::testing::conformance::lease_contract;
    let ttl = std::time::Duration::from_millis(300);
    lease_contract(&MemoryStateStore::new(), "mem-", ttl)
        .await
        .expect("memory leases");
    lease_contract(&UnfencedStore::default(), "unfenced-", ttl)
        .await
        .expect_err("a stale holder's write must be refused");
}
