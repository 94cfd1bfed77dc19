//! The state store checks: the get/put/delete contract, the store under the run loop, bad
//! keys refused before any I/O, concurrent writers of one key.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use crate::error::FaucetError;
use crate::pipeline::{Pipeline, RunStreamOptions};
use crate::state::{
    DOCTOR_KEY, Lease, LeaseError, LeaseHolder, LeaseOutcome, LeaseRequest, StateStore,
};

use super::{ConformanceError, fail, io};

/// The [`StateStore`] contract: missing key → `None`; put/get round trip of nested JSON with
/// an exact big integer; overwrite; delete, and delete of a missing key, succeed; invalid keys
/// are rejected; `check` passes and leaves no [`DOCTOR_KEY`] behind. Uses keys under
/// `prefix` (a valid key prefix unique to the test).
///
/// # Errors
/// When any part of the contract does not hold.
pub async fn state_store_contract(
    store: &dyn StateStore,
    prefix: &str,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "state_store_contract";
    let key = format!("{prefix}conformance");
    let _ = store.delete(&key).await;
    if io(CHECK, store.get(&key).await)?.is_some() {
        return fail(CHECK, "a missing key read as Some");
    }
    let big: Json = serde_json::from_str(
        r#"{"lsn":"0/16B3748","nested":{"ids":[1,2,3],"n":12345678901234567890}}"#,
    )
    .unwrap_or_default();
    io(CHECK, store.put(&key, &big).await)?;
    let back = io(CHECK, store.get(&key).await)?;
    if back.as_ref() != Some(&big) {
        return fail(CHECK, format!("put {big} but read back {back:?}"));
    }
    io(CHECK, store.put(&key, &json!({"v": 2})).await)?;
    if io(CHECK, store.get(&key).await)? != Some(json!({"v": 2})) {
        return fail(CHECK, "an overwrite did not take");
    }
    io(CHECK, store.delete(&key).await)?;
    io(CHECK, store.delete(&key).await)?;
    if io(CHECK, store.get(&key).await)?.is_some() {
        return fail(CHECK, "a deleted key still reads as Some");
    }
    for bad in ["", "a/b", "a b", ".hidden"] {
        if store.put(bad, &json!(1)).await.is_ok() {
            return fail(CHECK, format!("invalid key {bad:?} was accepted"));
        }
    }
    io(CHECK, store.check().await)?;
    match io(CHECK, store.get(DOCTOR_KEY).await)? {
        Some(_) => fail(CHECK, "check() left its sentinel key behind"),
        None => Ok(()),
    }
}

/// The store under the real run loop ([`Pipeline`]), on keys `{prefix}resume` and
/// `{prefix}busy`, which must never have been used (the fence numbers are checked exactly):
///
/// * resume: a run of 25 records through `store` (then dropped) stores `{"offset": 25}`; a
///   second store from `reopen` (a new process on the same backing table / prefix) reads it,
///   and a run of 35 records through it moves only the 10 new ones, so the sink holds each
///   record once; both runs released their lease, so acquiring it now succeeds — with fence 3
///   (two runs, then us) when `fence_counts_acquisitions` (the store keeps a per-key fence
///   counter across releases, as the PostgreSQL and Redis stores do; the in-memory one
///   forgets a released key's fence);
/// * busy: while another holder (`pid 4711 on host etl-2`) holds the key, a run fails with
///   [`LeaseError::Held`] naming that holder, writes nothing to
///   the sink and stores no bookmark.
///
/// Leaves both keys deleted and their leases released.
///
/// # Errors
/// When a run fails or succeeds unexpectedly, records are lost or doubled, a bookmark is
/// missing or wrong, or a lease is not released / not enforced.
pub async fn state_store_under_run_loop<F, Fut>(
    store: Arc<dyn StateStore>,
    reopen: F,
    prefix: &str,
    fence_counts_acquisitions: bool,
) -> Result<(), ConformanceError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Arc<dyn StateStore>, FaucetError>>,
{
    use crate::testing::{MemorySink, VecSource};
    const CHECK: &str = "state_store_under_run_loop";
    let opts = |key: &str| RunStreamOptions {
        batch_size: 10,
        state_key: key.into(),
        ..RunStreamOptions::default()
    };

    // Resume across a restart.
    let key = format!("{prefix}resume");
    let sink = MemorySink::new();
    let summary = io(
        CHECK,
        Pipeline::new(&VecSource::sequence(25), &sink)
            .with_state_store(store.clone())
            .with_options(opts(&key))
            .run()
            .await,
    )?;
    if summary.records_out != 25 {
        return fail(
            CHECK,
            format!("run 1 moved {} records, 25 expected", summary.records_out),
        );
    }
    drop(store);
    let store = io(CHECK, reopen().await)?;
    let stored = io(CHECK, store.get(&key).await)?;
    if stored != Some(json!({"offset": 25})) {
        return fail(
            CHECK,
            format!("a reopened store reads {stored:?}, want {{\"offset\":25}}"),
        );
    }
    let source = VecSource::sequence(35);
    let summary = io(
        CHECK,
        Pipeline::new(&source, &sink)
            .with_state_store(store.clone())
            .with_options(opts(&key))
            .run()
            .await,
    )?;
    if summary.records_out != 10 {
        return fail(
            CHECK,
            format!(
                "the resumed run moved {} records, only the 10 new ones expected",
                summary.records_out
            ),
        );
    }
    if sink.rows() != source.expected() {
        return fail(
            CHECK,
            format!(
                "after two runs the sink holds {} records, want 0..35 once each (lost or doubled)",
                sink.rows().len()
            ),
        );
    }
    // Each run released its lease: the key is free at once.
    match io(
        CHECK,
        store
            .acquire_lease(&LeaseRequest::new(
                &key,
                &LeaseHolder::this_process(),
                std::time::Duration::from_secs(5),
            ))
            .await,
    )? {
        LeaseOutcome::Acquired(lease) if lease.fence == 3 || !fence_counts_acquisitions => {
            io(CHECK, store.release_lease(&lease).await)?;
        }
        LeaseOutcome::Acquired(lease) => {
            return fail(
                CHECK,
                format!(
                    "fence {} after two runs, want 3 (two runs, then us)",
                    lease.fence
                ),
            );
        }
        other => {
            return fail(
                CHECK,
                format!("each run releases its lease, but acquiring gave {other:?}"),
            );
        }
    }
    io(CHECK, store.delete(&key).await)?;

    // A second runner of a busy key.
    let key = format!("{prefix}busy");
    let other = LeaseHolder {
        id: "cron-tick-1".into(),
        host: "etl-2".into(),
        pid: 4711,
        since: "2026-11-30T06:00:00Z".into(),
        process: None,
    };
    let held = match io(
        CHECK,
        store
            .acquire_lease(&LeaseRequest::new(
                &key,
                &other,
                std::time::Duration::from_secs(30),
            ))
            .await,
    )? {
        LeaseOutcome::Acquired(lease) => lease,
        got => return fail(CHECK, format!("a free key's lease: got {got:?}")),
    };
    let sink = MemorySink::new();
    let result = Pipeline::new(&VecSource::sequence(5), &sink)
        .with_state_store(store.clone())
        .with_options(opts(&key))
        .run()
        .await;
    io(CHECK, store.release_lease(&held).await)?;
    let err = match result {
        Ok(summary) => {
            return fail(
                CHECK,
                format!(
                    "a run of a key another holder leases succeeded, moving {} records",
                    summary.records_out
                ),
            );
        }
        Err(e) => e,
    };
    match &err {
        FaucetError::Lease(LeaseError::Held { holder, .. }) if *holder == other => {}
        e => {
            return fail(
                CHECK,
                format!("expected LeaseError::Held naming {other:?}, got {e:?}"),
            );
        }
    }
    if !err.to_string().contains("pid 4711 on host etl-2") {
        return fail(CHECK, format!("the error does not name the holder: {err}"));
    }
    if !sink.rows().is_empty() {
        return fail(CHECK, "a refused run wrote records to the sink");
    }
    let stored = io(CHECK, store.get(&key).await)?;
    if stored.is_some() {
        return fail(
            CHECK,
            format!("a refused run stored a bookmark: {stored:?}"),
        );
    }
    io(CHECK, store.delete(&key).await)?;
    Ok(())
}

/// Keys the seed rejects (`a/b`, `a b`, `.hidden`, 257 characters) make `get`, `put`,
/// `delete`, `acquire_lease` and `put_fenced` fail with
/// [`FaucetError::Config`] on field `state key`, each key's five calls within 1 s together.
/// Point `store` at a server that is gone (or never listens): then a call that tried to reach
/// it would fail differently, or slowly, and the check would say so; the connector's test can
/// add its own proof that the store fails otherwise on a valid key.
///
/// # Errors
/// When a bad key is accepted, fails with another error, or takes a second or more.
pub async fn bad_keys_fail_before_io(store: &dyn StateStore) -> Result<(), ConformanceError> {
    const CHECK: &str = "bad_keys_fail_before_io";
    let holder = LeaseHolder::this_process();
    let lease = Lease {
        key: "ok".into(),
        holder: holder.clone(),
        fence: 1,
    };
    let config = |what: &str, key: &str, r: Result<(), FaucetError>| match r {
        Err(FaucetError::Config { field, .. }) if field == "state key" => Ok(()),
        other => fail(
            CHECK,
            format!("{what}({key:?}): expected a Config error about `state key`, got {other:?}"),
        ),
    };
    for key in [
        "a/b".to_owned(),
        "a b".into(),
        ".hidden".into(),
        "k".repeat(257),
    ] {
        let started = std::time::Instant::now();
        config("get", &key, store.get(&key).await.map(|_| ()))?;
        config("put", &key, store.put(&key, &json!(1)).await)?;
        config("delete", &key, store.delete(&key).await)?;
        config(
            "acquire_lease",
            &key,
            store
                .acquire_lease(&LeaseRequest::new(
                    &key,
                    &holder,
                    std::time::Duration::from_secs(1),
                ))
                .await
                .map(|_| ()),
        )?;
        config(
            "put_fenced",
            &key,
            store.put_fenced(&key, &json!(1), &lease).await,
        )?;
        if started.elapsed() >= std::time::Duration::from_secs(1) {
            return fail(
                CHECK,
                format!("key {key:?}: something tried to reach the server"),
            );
        }
    }
    Ok(())
}

/// 16 tasks spawned at once `put` key `key` (each `{"writer": i, "pad": 512 × "x"}`): every
/// put succeeds, and the value read back is one writer's whole value (`writer` in 0..16 and
/// the pad intact). The connector's test adds what its backend must show (one row, one key).
/// Leaves the key in place for that.
///
/// # Errors
/// When a put fails, or the value read back is missing, torn or foreign.
pub async fn concurrent_writers_of_one_key(
    store: Arc<dyn StateStore>,
    key: &str,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "concurrent_writers_of_one_key";
    let pad = "x".repeat(512);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (store, key, pad) = (store.clone(), key.to_owned(), pad.clone());
        tasks.push(tokio::spawn(async move {
            store.put(&key, &json!({ "writer": i, "pad": pad })).await
        }));
    }
    for t in tasks {
        match t.await {
            Ok(r) => io(CHECK, r)?,
            Err(e) => return fail(CHECK, format!("a writing task failed: {e}")),
        }
    }
    let Some(v) = io(CHECK, store.get(key).await)? else {
        return fail(CHECK, "after 16 puts the key reads as None");
    };
    if v["writer"].as_u64().is_none_or(|w| w >= 16) || v["pad"] != json!(pad) {
        return fail(
            CHECK,
            format!("the value read back is not one writer's whole value: {v}"),
        );
    }
    Ok(())
}
