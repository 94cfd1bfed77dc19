//! Every conformance check passes on a correct double and fails on a broken one.

use std::sync::Arc;

use faucet_core::FaucetError;
use std::time::Duration;

use faucet_core::state::{Lease, LeaseOutcome, LeaseRequest, MemoryStateStore, StateStore};
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
}

#[tokio::test]
async fn lease_contract_checks() {
    use faucet_core::testing::conformance::lease_contract;
    let ttl = std::time::Duration::from_millis(300);
    lease_contract(&MemoryStateStore::new(), "mem-", ttl)
        .await
        .expect("memory leases");
    lease_contract(&Faulty::new(Fault::Unfenced), "unfenced-", ttl)
        .await
        .expect_err("a stale holder's write must be refused");
}

/// The take-over check fails on a store that cannot take a lease from a gone holder (the
/// memory store's leases die with their process, so it keeps the default).
#[tokio::test]
async fn lease_takeover_contract_can_fail() {
    use faucet_core::testing::conformance::lease_takeover_contract;
    lease_takeover_contract(&MemoryStateStore::new(), "mem-")
        .await
        .expect_err("the memory store does not take leases over");
}

#[tokio::test]
async fn run_loop_check_passes_on_memory_and_fails_when_a_restart_forgets() {
    use faucet_core::testing::conformance::state_store_under_run_loop;
    let store = Arc::new(MemoryStateStore::new());
    let same = store.clone();
    state_store_under_run_loop(
        store,
        || async move { Ok(same as Arc<dyn StateStore>) },
        "p::",
        false,
    )
    .await
    .expect("memory store, reopened as itself");

    // The in-memory store forgets a released key's fence: it cannot claim to count them.
    let store = Arc::new(MemoryStateStore::new());
    let same = store.clone();
    let err = state_store_under_run_loop(
        store,
        || async move { Ok(same as Arc<dyn StateStore>) },
        "p::",
        true,
    )
    .await
    .expect_err("fences restart after a release");
    assert!(
        err.message.contains("fence 1 after two runs, want 3"),
        "{err}"
    );

    // A "restart" that comes back empty: the resumed run would start over.
    let err = state_store_under_run_loop(
        Arc::new(MemoryStateStore::new()),
        || async { Ok(Arc::new(MemoryStateStore::new()) as Arc<dyn StateStore>) },
        "p::",
        false,
    )
    .await
    .expect_err("a store that forgets across a restart");
    assert!(err.message.contains("reopened store reads None"), "{err}");

    // A store without leases cannot keep a second runner out.
    let shared = Arc::new(Faulty::new(Fault::Unleased));
    let again = shared.clone();
    let err = state_store_under_run_loop(
        shared,
        || async move { Ok(again as Arc<dyn StateStore>) },
        "p::",
        false,
    )
    .await
    .expect_err("no leases, no single runner");
    assert!(err.message.contains("acquiring gave Unsupported"), "{err}");
}

#[tokio::test]
async fn lease_lapse_and_race_check_can_fail() {
    use faucet_core::testing::conformance::lease_lapse_and_race;
    let ttl = std::time::Duration::from_millis(200);
    lease_lapse_and_race(Arc::new(MemoryStateStore::new()), "p::", ttl)
        .await
        .expect("memory leases");
    // UnfencedStore's put_fenced writes under a lapsed lease.
    let err = lease_lapse_and_race(Arc::new(Faulty::new(Fault::Unfenced)), "p::", ttl)
        .await
        .expect_err("a lapsed holder's write must be refused");
    assert!(
        err.message.contains("put_fenced under a lapsed lease"),
        "{err}"
    );
    let err = lease_lapse_and_race(Arc::new(Faulty::new(Fault::Unleased)), "p::", ttl)
        .await
        .expect_err("no leases");
    assert!(err.message.contains("a-id expected the lease"), "{err}");
}

#[tokio::test]
async fn bad_keys_check_can_fail() {
    use faucet_core::testing::conformance::bad_keys_fail_before_io;
    bad_keys_fail_before_io(&MemoryStateStore::new())
        .await
        .expect("memory store");
    let dir = tempfile::tempdir().expect("tempdir");
    bad_keys_fail_before_io(&faucet_core::state::FileStateStore::new(dir.path()))
        .await
        .expect("file store");
    // SloppyStore hides errors as "no bookmark" and accepts any key.
    let err = bad_keys_fail_before_io(&SloppyStore::default())
        .await
        .expect_err("a bad key accepted");
    assert!(err.message.contains("get(\"a/b\")"), "{err}");
    // A store whose put_fenced checks the lease before the key.
    let err = bad_keys_fail_before_io(&Faulty::new(Fault::LeaseFirst))
        .await
        .expect_err("lease checked before the key");
    assert!(err.message.contains("put_fenced"), "{err}");
}

#[tokio::test]
async fn concurrent_writers_check_can_fail() {
    use faucet_core::testing::conformance::concurrent_writers_of_one_key;
    concurrent_writers_of_one_key(Arc::new(MemoryStateStore::new()), "hot")
        .await
        .expect("memory store");
    let err = concurrent_writers_of_one_key(Arc::new(Faulty::new(Fault::OneAtATime)), "hot")
        .await
        .expect_err("a put refused under contention");
    assert!(err.message.contains("busy"), "{err}");
}

/// How a [`Faulty`] store departs from [`MemoryStateStore`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// No leases at all (the trait's defaults: `Unsupported`).
    Unleased,
    /// `put_fenced` is a plain put: the fence is never checked.
    Unfenced,
    /// `put_fenced` checks the lease before the key, so a bad key under a stale lease reads
    /// as a lost lease instead of a config error.
    LeaseFirst,
    /// A put is refused while another is in flight.
    OneAtATime,
}

/// A [`MemoryStateStore`] with one [`Fault`].
struct Faulty {
    inner: MemoryStateStore,
    fault: Fault,
    busy: std::sync::atomic::AtomicBool,
}

impl Faulty {
    fn new(fault: Fault) -> Self {
        Self {
            inner: MemoryStateStore::new(),
            fault,
            busy: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[async_trait::async_trait]
impl StateStore for Faulty {
    fn name(&self) -> &str {
        "faulty"
    }
    async fn get(&self, key: &str) -> Result<Option<Value>, FaucetError> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &str, value: &Value) -> Result<(), FaucetError> {
        use std::sync::atomic::Ordering;
        if self.fault != Fault::OneAtATime {
            return self.inner.put(key, value).await;
        }
        if self.busy.swap(true, Ordering::SeqCst) {
            return Err(FaucetError::state("one-at-a-time", "busy"));
        }
        tokio::task::yield_now().await;
        let r = self.inner.put(key, value).await;
        self.busy.store(false, Ordering::SeqCst);
        r
    }
    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        self.inner.delete(key).await
    }
    async fn acquire_lease(&self, request: &LeaseRequest) -> Result<LeaseOutcome, FaucetError> {
        match self.fault {
            Fault::Unleased => Ok(LeaseOutcome::Unsupported),
            _ => self.inner.acquire_lease(request).await,
        }
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<(), FaucetError> {
        match self.fault {
            Fault::Unleased => Ok(()),
            _ => self.inner.renew_lease(lease, ttl).await,
        }
    }
    async fn release_lease(&self, lease: &Lease) -> Result<(), FaucetError> {
        match self.fault {
            Fault::Unleased => Ok(()),
            _ => self.inner.release_lease(lease).await,
        }
    }
    async fn put_fenced(&self, key: &str, value: &Value, lease: &Lease) -> Result<(), FaucetError> {
        match self.fault {
            Fault::Unleased | Fault::Unfenced => self.put(key, value).await,
            Fault::LeaseFirst => {
                self.inner
                    .renew_lease(lease, std::time::Duration::from_secs(1))
                    .await?;
                self.inner.put_fenced(key, value, lease).await
            }
            Fault::OneAtATime => self.inner.put_fenced(key, value, lease).await,
        }
    }
}
