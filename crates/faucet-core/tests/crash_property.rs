//! A property test of the run loop: arbitrary records, page sizes, sinks and crash points.
//! After every simulated crash the bookmark is never ahead of what the sink holds; after the
//! final restart nothing is lost; duplicates are at most one page per crash (none with a
//! keyed or atomic sink); bookmarks only move forward.

use std::sync::Arc;

use faucet_core::state::StateStore;
use faucet_core::testing::{CrashSwitch, CrashingStateStore, MemorySink, VecSource};
use faucet_core::{Pipeline, RunStreamOptions};
use proptest::prelude::*;
use serde_json::Value;

#[derive(Debug, Clone, Copy)]
enum Mode {
    Append,
    Keyed,
    Atomic,
}

fn offset(v: &Option<Value>) -> u64 {
    v.as_ref().and_then(|b| b["offset"].as_u64()).unwrap_or(0)
}

async fn scenario(
    n: usize,
    batch: usize,
    mode: Mode,
    crashes: Vec<usize>,
    lose_state: bool,
    reads_ahead: bool,
) {
    let mut source = VecSource::sequence(n);
    source.reads_ahead = reads_ahead;
    let sink = match mode {
        Mode::Append => MemorySink::new(),
        Mode::Keyed => MemorySink::keyed("id"),
        Mode::Atomic => MemorySink::atomic(),
    };
    let state = CrashingStateStore::new(CrashSwitch::never());
    let key = "prop::run";
    let mut crashed = 0u64;
    for at in crashes.into_iter().chain(std::iter::once(0)) {
        let switch = CrashSwitch::at(at);
        let run_sink = sink.clone().with_crash_switch(switch.clone());
        let run_source = source.clone().with_crash_switch(switch.clone());
        let run_state = state.restarted(switch.clone());
        let result = Pipeline::new(&run_source, &run_sink)
            .with_state_store(Arc::new(run_state))
            .with_options(RunStreamOptions {
                batch_size: batch,
                state_key: key.into(),
                ..RunStreamOptions::default()
            })
            .run()
            .await;
        if !switch.tripped() {
            result.expect("an uncrashed run succeeds");
            break;
        }
        crashed += 1;
        sink.restart();
        // Invariant: the persisted bookmark never covers a record the sink does not hold.
        let stored = offset(&state.get(key).await.expect("get"));
        let held: std::collections::BTreeSet<i64> = sink
            .rows()
            .iter()
            .filter_map(|r| r["id"].as_i64())
            .collect();
        for id in 0..stored as i64 {
            assert!(
                held.contains(&id),
                "bookmark {stored} is ahead of the sink (missing {id})"
            );
        }
        if lose_state && !matches!(mode, Mode::Append) {
            state.delete(key).await.expect("delete");
        }
    }
    // No loss, bounded duplicates.
    let rows = sink.rows();
    let mut counts = std::collections::BTreeMap::new();
    for r in &rows {
        *counts.entry(r["id"].as_i64().expect("id")).or_insert(0u64) += 1;
    }
    for id in 0..n as i64 {
        assert!(counts.contains_key(&id), "record {id} lost");
    }
    let dups: u64 = counts.values().map(|c| c - 1).sum();
    match mode {
        Mode::Append => assert!(
            dups <= crashed * batch as u64,
            "{dups} duplicates after {crashed} crashes of pages of {batch}"
        ),
        Mode::Keyed | Mode::Atomic => assert_eq!(dups, 0, "effectively-once broke"),
    }
    // Bookmarks only move forward (when the state was never deleted).
    if !lose_state {
        let puts: Vec<u64> = state
            .puts()
            .iter()
            .map(|b| b["offset"].as_u64().unwrap_or(0))
            .collect();
        assert!(
            puts.windows(2).all(|w| w[0] <= w[1]),
            "bookmarks went back: {puts:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("FAUCET_PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]
    #[test]
    fn no_loss_bounded_duplicates_bookmark_never_ahead(
        n in 0usize..60,
        batch in 1usize..9,
        mode in prop_oneof![Just(Mode::Append), Just(Mode::Keyed), Just(Mode::Atomic)],
        crashes in proptest::collection::vec(1usize..40, 0..6),
        lose_state in any::<bool>(),
        reads_ahead in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(scenario(n, batch, mode, crashes, lose_state, reads_ahead));
    }
}
