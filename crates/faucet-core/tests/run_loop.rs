//! The run loop's ordering, delivery resolution, resume, cancellation and error paths.

use std::sync::Arc;

use faucet_core::state::{MemoryStateStore, StateStore};
use faucet_core::testing::{CrashSwitch, CrashingStateStore, MemorySink, PageGate, VecSource};
use faucet_core::{
    DeliveryError, DeliveryGuarantee, DeliveryRequest, EffectivelyOnceMechanism, FaucetError,
    LimitingSide, PageStart, Pipeline, RunStreamOptions,
};
use serde_json::json;

fn opts(batch: usize) -> RunStreamOptions {
    RunStreamOptions {
        batch_size: batch,
        state_key: "t::run".into(),
        ..RunStreamOptions::default()
    }
}

#[tokio::test]
async fn writes_flushes_then_persists_each_page_and_resumes() {
    let source = VecSource::sequence(25);
    let sink = MemorySink::new();
    let state = Arc::new(MemoryStateStore::new());
    let summary = Pipeline::new(&source, &sink)
        .with_state_store(state.clone())
        .with_options(opts(10))
        .run()
        .await
        .expect("run");
    assert_eq!(summary.records_out, 25);
    assert_eq!(summary.pages, 3);
    assert_eq!(summary.guarantee, DeliveryGuarantee::AtLeastOnce);
    assert_eq!(summary.last_bookmark, Some(json!({"offset": 25})));
    assert_eq!(sink.rows(), source.expected());
    // Every page is written then flushed before the next; one final flush on the way out.
    assert_eq!(
        sink.log().calls,
        [
            "write", "flush", "write", "flush", "write", "flush", "flush"
        ]
    );
    // Each page was told where it started: the bookmark before it (none on a first run).
    let start = |offset: Option<u64>| PageStart {
        bookmark: offset.map(|o| json!({ "offset": o })),
        offset: 0,
    };
    assert_eq!(
        sink.log().starts,
        [start(None), start(Some(10)), start(Some(20))]
    );
    // The source heard of each bookmark only after it was stored.
    assert_eq!(
        source.acks(),
        [
            json!({"offset": 10}),
            json!({"offset": 20}),
            json!({"offset": 25})
        ]
    );
    assert_eq!(
        state.get("t::run").await.expect("get"),
        Some(json!({"offset": 25}))
    );

    // A second run resumes at the end: nothing moves, nothing doubles.
    let again = Pipeline::new(&source, &sink)
        .with_state_store(state.clone())
        .with_options(opts(10))
        .run()
        .await
        .expect("rerun");
    assert_eq!(again.records_out, 0);
    assert_eq!(again.resumed_from, Some(json!({"offset": 25})));
    assert_eq!(sink.rows().len(), 25);
}

#[tokio::test]
async fn unmet_delivery_request_fails_before_any_io() {
    let source = VecSource::sequence(5);
    let sink = MemorySink::new();
    for request in [
        DeliveryRequest::EffectivelyOnce,
        DeliveryRequest::ExactlyOnce,
    ] {
        let err = Pipeline::new(&source, &sink)
            .with_options(RunStreamOptions {
                delivery: request,
                ..opts(2)
            })
            .run()
            .await
            .expect_err("must refuse");
        match err {
            FaucetError::Delivery(DeliveryError::Unsatisfiable {
                side,
                connector,
                fix,
                ..
            }) => {
                assert_eq!(side, LimitingSide::Sink);
                assert_eq!(connector, "memory");
                assert!(fix.contains("upsert"), "{fix}");
            }
            other => panic!("expected a delivery error, got {other}"),
        }
        assert!(sink.log().calls.is_empty(), "no data may move");
    }
    // An atomic sink with a non-durable state store: the state store is the limit.
    let atomic = MemorySink::atomic();
    let err = Pipeline::new(&source, &atomic)
        .with_options(RunStreamOptions {
            delivery: DeliveryRequest::EffectivelyOnce,
            ..opts(2)
        })
        .run()
        .await
        .expect_err("memory state is not durable");
    assert!(
        matches!(
            err,
            FaucetError::Delivery(DeliveryError::Unsatisfiable {
                side: LimitingSide::StateStore,
                ..
            })
        ),
        "{err}"
    );
}

#[tokio::test]
async fn keyed_and_atomic_sinks_give_effectively_once() {
    let source = VecSource::sequence(7);
    let keyed = MemorySink::keyed("id");
    let s = Pipeline::new(&source, &keyed)
        .with_options(RunStreamOptions {
            delivery: DeliveryRequest::ExactlyOnce,
            ..opts(3)
        })
        .run()
        .await
        .expect("keyed");
    assert_eq!(
        s.guarantee,
        DeliveryGuarantee::EffectivelyOnce(EffectivelyOnceMechanism::KeyedUpsert)
    );
    let atomic = MemorySink::atomic();
    let state = Arc::new(CrashingStateStore::new(CrashSwitch::never()));
    let s = Pipeline::new(&source, &atomic)
        .with_state_store(state)
        .with_options(RunStreamOptions {
            delivery: DeliveryRequest::EffectivelyOnce,
            ..opts(3)
        })
        .run()
        .await
        .expect("atomic");
    assert_eq!(
        s.guarantee,
        DeliveryGuarantee::EffectivelyOnce(EffectivelyOnceMechanism::AtomicWatermark)
    );
    assert_eq!(atomic.rows(), source.expected());
    assert_eq!(atomic.log().tokens["t::run"].sequence, 3);
}

#[tokio::test]
async fn atomic_sink_re_anchors_when_state_is_behind_or_lost() {
    let source = VecSource::sequence(9);
    let sink = MemorySink::atomic();
    let state = Arc::new(CrashingStateStore::new(CrashSwitch::never()));
    Pipeline::new(&source, &sink)
        .with_state_store(state.clone())
        .with_options(opts(4))
        .run()
        .await
        .expect("first run");
    // The state entry is lost; the sink's token still knows where the run stopped.
    state.delete("t::run").await.expect("delete");
    let s = Pipeline::new(&source, &sink)
        .with_state_store(state.clone())
        .with_options(opts(4))
        .run()
        .await
        .expect("second run");
    assert!(s.re_anchored);
    assert_eq!(s.records_out, 0);
    assert_eq!(sink.rows(), source.expected(), "nothing doubled");
}

#[tokio::test]
async fn a_failing_source_flushes_what_was_written_and_keeps_the_bookmark_behind() {
    // Read in turns and read ahead: the failed read of the third page is the run's error
    // either way, after the second page is written and its bookmark stored.
    for reads_ahead in [false, true] {
        let mut source = VecSource::sequence(10);
        source.fail_at_offset = Some(6);
        source.reads_ahead = reads_ahead;
        let sink = MemorySink::new();
        let state = Arc::new(MemoryStateStore::new());
        let err = Pipeline::new(&source, &sink)
            .with_state_store(state.clone())
            .with_options(opts(3))
            .run()
            .await
            .expect_err("the source fails at offset 6");
        assert!(matches!(err, FaucetError::Read { .. }), "{err}");
        assert_eq!(sink.rows().len(), 6, "reads_ahead: {reads_ahead}");
        assert_eq!(
            state.get("t::run").await.expect("get"),
            Some(json!({"offset": 6})),
            "reads_ahead: {reads_ahead}"
        );
    }
}

/// A stream that reads ahead has its next page read while the last one is delivered: the
/// page is written and its bookmark stored while the read of the next one waits (here, at
/// a gate, as an idle change stream waits), and the source hears of it once that read is in.
/// What reaches the sink, the state store and the source is the same as read in turns.
#[tokio::test]
async fn reading_ahead_delivers_the_page_in_hand_while_the_next_is_read() {
    let gate = PageGate::new();
    let mut source = VecSource::sequence(10).held_at(3, gate.clone());
    source.reads_ahead = true;
    let sink = MemorySink::new();
    let state = Arc::new(MemoryStateStore::new());
    let run = Pipeline::new(&source, &sink)
        .with_state_store(state.clone())
        .with_options(opts(3))
        .run();
    let watch = async {
        gate.reached().await;
        for _ in 0..500 {
            if state.get("t::run").await.expect("get") == Some(json!({"offset": 3})) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(
            state.get("t::run").await.expect("get"),
            Some(json!({"offset": 3})),
            "the first page's bookmark is stored while the read of the next one waits"
        );
        assert_eq!(
            sink.rows(),
            source.expected()[..3],
            "the first page is written"
        );
        assert!(source.acks().is_empty(), "told only after the next read");
        gate.open();
    };
    let (summary, ()) = tokio::join!(run, watch);
    let summary = summary.expect("run");
    assert_eq!(summary.records_out, 10);
    assert_eq!(sink.rows(), source.expected());
    let offsets = |o: &[u64]| o.iter().map(|o| json!({ "offset": o })).collect::<Vec<_>>();
    assert_eq!(source.acks(), offsets(&[3, 6, 9, 10]));
    assert_eq!(
        sink.log().calls,
        [
            "write", "flush", "write", "flush", "write", "flush", "write", "flush", "flush"
        ]
    );
}

/// A page the sink refuses while the next one is read ahead ends the run at once: the read
/// (a source that waits for ever, as an idle change stream may) is dropped, not awaited,
/// and nothing is stored.
#[tokio::test]
async fn a_failed_write_while_reading_ahead_does_not_wait_for_the_read() {
    let gate = PageGate::new();
    let mut source = VecSource::sequence(10).held_at(3, gate.clone());
    source.reads_ahead = true;
    let switch = CrashSwitch::at(1);
    let sink = MemorySink::new().with_crash_switch(switch.clone());
    let state = Arc::new(MemoryStateStore::new());
    let run = Pipeline::new(&source, &sink)
        .with_state_store(state.clone())
        .with_options(opts(3))
        .run();
    let err = tokio::time::timeout(std::time::Duration::from_secs(20), run)
        .await
        .expect("the run ends without waiting for the held read")
        .expect_err("the sink refused the first page");
    assert!(matches!(err, FaucetError::Write { .. }), "{err}");
    assert!(switch.tripped());
    assert!(sink.rows().is_empty());
    assert_eq!(
        state.get("t::run").await.expect("get"),
        Some(serde_json::Value::Null),
        "no bookmark stored: only the run's start (no position yet)"
    );
    assert!(source.acks().is_empty());
}

#[tokio::test]
async fn cancellation_finishes_the_page_in_hand() {
    let source = VecSource::sequence(100);
    let sink = MemorySink::new();
    faucet_core::testing::conformance::cancellation_flushes(&source, &sink, 10, || async {
        sink.rows()
    })
    .await
    .expect("cancellation");
    assert_eq!(sink.rows().len(), 10);
}

#[tokio::test]
async fn a_second_runner_of_the_same_key_is_refused_with_the_holder_named() {
    use faucet_core::state::{LeaseHolder, LeaseOutcome, LeaseRequest};
    let state = Arc::new(MemoryStateStore::new());
    let other = LeaseHolder {
        id: "other".into(),
        host: "elsewhere".into(),
        pid: 4242,
        since: "2026-11-30T06:00:00Z".into(),
        process: None,
    };
    let lease = match state
        .acquire_lease(&LeaseRequest::new(
            "t::run",
            &other,
            std::time::Duration::from_secs(60),
        ))
        .await
        .expect("acquire")
    {
        LeaseOutcome::Acquired(l) => l,
        o => panic!("{o:?}"),
    };
    let source = VecSource::sequence(3);
    let sink = MemorySink::new();
    let err = Pipeline::new(&source, &sink)
        .with_state_store(state.clone())
        .with_options(opts(2))
        .run()
        .await
        .expect_err("held");
    let msg = err.to_string();
    assert!(msg.contains("4242") && msg.contains("elsewhere"), "{msg}");
    assert!(sink.rows().is_empty());
    // Waiting works once the holder lets go.
    let waiting = {
        let state = state.clone();
        tokio::spawn(async move {
            let source = VecSource::sequence(3);
            let sink = MemorySink::new();
            Pipeline::new(&source, &sink)
                .with_state_store(state)
                .with_options(RunStreamOptions {
                    wait_for_lease: Some(std::time::Duration::from_secs(10)),
                    ..opts(2)
                })
                .run()
                .await
                .map(|s| s.records_out)
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    state.release_lease(&lease).await.expect("release");
    assert_eq!(waiting.await.expect("join").expect("run"), 3);
}

#[tokio::test]
async fn a_lost_bookmark_over_an_append_target_is_refused_but_a_keyed_one_absorbs_it() {
    let source = VecSource::sequence(6);
    for (sink, refused) in [(MemorySink::new(), true), (MemorySink::keyed("id"), false)] {
        Pipeline::new(&source, &sink)
            .with_options(opts(4))
            .run()
            .await
            .expect("first run");
        // A fresh memory store: the bookmark is gone, the target still holds the rows.
        let second = Pipeline::new(&source, &sink)
            .with_options(opts(4))
            .run()
            .await;
        match (refused, second) {
            (true, Err(FaucetError::State { message, .. })) => {
                assert!(
                    message.contains("no bookmark under state key `t::run`"),
                    "{message}"
                );
                assert_eq!(sink.rows().len(), 6, "nothing appended");
            }
            (false, Ok(summary)) => {
                assert_eq!(summary.records_out, 6);
                assert_eq!(
                    sink.rows(),
                    source.expected(),
                    "the replay overwrote itself"
                );
            }
            (_, other) => panic!("unexpected outcome: {other:?}"),
        }
    }
}

/// A store whose first `fail` puts fail with a retryable connection error.
struct FlakyStore {
    inner: MemoryStateStore,
    fail: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl StateStore for FlakyStore {
    fn name(&self) -> &str {
        "flaky"
    }
    async fn get(&self, key: &str) -> Result<Option<serde_json::Value>, FaucetError> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &str, value: &serde_json::Value) -> Result<(), FaucetError> {
        let left = self.fail.load(std::sync::atomic::Ordering::SeqCst);
        if left > 0 && !value.is_null() {
            self.fail
                .store(left - 1, std::sync::atomic::Ordering::SeqCst);
            return Err(FaucetError::connect("flaky", "connection reset", None));
        }
        self.inner.put(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        self.inner.delete(key).await
    }
}

#[tokio::test]
async fn a_restarting_state_store_is_retried_and_the_run_completes() {
    let source = VecSource::sequence(9);
    let sink = MemorySink::new();
    let state = Arc::new(FlakyStore {
        inner: MemoryStateStore::new(),
        fail: 3.into(),
    });
    let summary = Pipeline::new(&source, &sink)
        .with_state_store(state.clone())
        .with_options(opts(4))
        .run()
        .await
        .expect("retried through three failures");
    assert_eq!(summary.records_out, 9);
    assert_eq!(sink.rows(), source.expected());
    assert_eq!(
        state.get("t::run").await.expect("get"),
        Some(json!({"offset": 9}))
    );
}

/// A durable store whose put of the bookmark `{"offset": held}` waits until the test opens
/// it (as a file store's fsync or a database's commit takes its time).
struct HeldStore {
    inner: MemoryStateStore,
    held: u64,
    reached: tokio::sync::Notify,
    open: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl StateStore for HeldStore {
    fn name(&self) -> &str {
        "held"
    }
    fn is_durable(&self) -> bool {
        true
    }
    async fn get(&self, key: &str) -> Result<Option<serde_json::Value>, FaucetError> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &str, value: &serde_json::Value) -> Result<(), FaucetError> {
        if value
            .to_string()
            .contains(&format!("\"offset\":{}", self.held))
        {
            self.reached.notify_one();
            self.open.notified().await;
        }
        self.inner.put(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        self.inner.delete(key).await
    }
}

/// An atomic-watermark run persists a page's bookmark while the next page is written (the
/// sink's commit token covers the page already); the source still hears of a bookmark only
/// once the store has it, and in order. A run without the atomic watermark writes the next
/// page only after the bookmark is stored: the store is its only record.
#[tokio::test]
async fn an_atomic_run_writes_the_next_page_while_the_last_bookmark_is_persisted() {
    for atomic in [true, false] {
        let source = VecSource::sequence(10);
        let sink = if atomic {
            MemorySink::atomic()
        } else {
            MemorySink::new()
        };
        let state = Arc::new(HeldStore {
            inner: MemoryStateStore::new(),
            held: 3,
            reached: tokio::sync::Notify::new(),
            open: tokio::sync::Notify::new(),
        });
        let run = Pipeline::new(&source, &sink)
            .with_state_store(state.clone())
            .with_options(opts(3))
            .run();
        let watch = async {
            state.reached.notified().await;
            let written = if atomic { 6 } else { 3 };
            for _ in 0..50 {
                if sink.rows().len() > written {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert_eq!(
                sink.rows(),
                source.expected()[..written],
                "atomic: {atomic}: written while the first page's bookmark is persisted"
            );
            assert!(
                source.acks().is_empty(),
                "atomic: {atomic}: the source heard of a bookmark not yet stored"
            );
            state.open.notify_one();
        };
        let (summary, ()) = tokio::join!(run, watch);
        let summary = summary.expect("run");
        assert_eq!(
            summary.guarantee == DeliveryGuarantee::AtLeastOnce,
            !atomic,
            "{:?}",
            summary.guarantee
        );
        assert_eq!(sink.rows(), source.expected());
        let offsets = |o: &[u64]| o.iter().map(|o| json!({ "offset": o })).collect::<Vec<_>>();
        assert_eq!(source.acks(), offsets(&[3, 6, 9, 10]), "atomic: {atomic}");
        assert!(
            state
                .get("t::run")
                .await
                .expect("get")
                .is_some_and(|v| v.to_string().contains("\"offset\":10")),
            "atomic: {atomic}: the last bookmark is stored"
        );
    }
}
