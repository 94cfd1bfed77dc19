//! The conformance battery. A connector's tests call the checks that apply to it:
//!
//! | check | for |
//! |---|---|
//! | [`config_is_strict`] | every connector config: an unknown field is rejected |
//! | [`source_pages_are_bounded`] | sources: no page over `batch_size` (memory bounded by the page) |
//! | [`source_bookmarks_round_trip`] | sources: reopening from any page's bookmark yields exactly the rest |
//! | [`sink_guarantee_is_truthful`] | sinks: a claimed keyed upsert or atomic watermark really absorbs a replay |
//! | [`sink_flush_is_durable`] | sinks: what `flush` confirmed is there when the sink is read back |
//! | [`errors_not_panics`] | anything: a failing operation returns an error instead of panicking |
//! | [`cancellation_flushes`] | source + sink: a cancelled run returns its summary and the sink holds exactly the delivered records |
//! | [`state_store_contract`] | state stores: get/put/delete, missing delete, key validation, `check` leaves nothing |
//! | [`lease_contract`] | state stores with leases: one holder, expiry, fencing of a stale holder |
//! | [`lease_takeover_contract`] | stores whose leases outlive their process: a take-over from a gone holder, and only from it |
//! | [`lease_lapse_and_race`] | state stores with leases: a lapsed lease is lost, concurrent acquisitions have one winner |
//! | [`state_store_under_run_loop`] | state stores: resume across a restart, a busy key refused naming its holder |
//! | [`bad_keys_fail_before_io`] | state stores: invalid keys are config errors before anything is sent |
//! | [`concurrent_writers_of_one_key`] | state stores: concurrent puts all succeed, one whole value wins |
//!
//! Sinks are read back through a closure the connector's test supplies (the rows as JSON
//! objects), because only it knows how to read its target.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Value as Json, json};

use crate::error::FaucetError;
use crate::page::{Bookmark, Page, PageBuilder};
use crate::pipeline::{Pipeline, RunStreamOptions};
use crate::sink::{CommitToken, Sink};
use crate::source::Source;
use crate::state::{DOCTOR_KEY, Lease, LeaseError, LeaseHolder, LeaseOutcome, StateStore};
use crate::value::{DataType, Field, Schema, Value};

/// A failed conformance check: which check and what broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("conformance check `{check}` failed: {message}")]
pub struct ConformanceError {
    /// The check's name.
    pub check: &'static str,
    /// What broke.
    pub message: String,
}

fn fail<T>(check: &'static str, message: impl Into<String>) -> Result<T, ConformanceError> {
    Err(ConformanceError {
        check,
        message: message.into(),
    })
}

fn io<T>(check: &'static str, r: Result<T, FaucetError>) -> Result<T, ConformanceError> {
    r.or_else(|e| fail(check, format!("unexpected error: {e}")))
}

/// A holder of the lease checks: `id`, on host `host-<name>` as process `pid`.
fn test_holder(id: String, name: &str, pid: u32) -> LeaseHolder {
    LeaseHolder {
        id,
        host: format!("host-{name}"),
        pid,
        since: "2026-11-30T06:00:00Z".to_owned(),
        process: None,
    }
}

/// The holder `name` of a contract run on keys under `prefix`: id `{prefix}{name}`, on host
/// `host-<name>` as process 4242.
fn prefixed_holder(prefix: &str, name: &str) -> LeaseHolder {
    test_holder(format!("{prefix}{name}"), name, 4242)
}

/// Fails `check` unless the lease `after` (taken from, or after, `before`) has a larger
/// fence.
fn fence_grew(check: &'static str, before: &Lease, after: &Lease) -> Result<(), ConformanceError> {
    if after.fence <= before.fence {
        return fail(
            check,
            format!("fence did not grow: {} after {}", after.fence, before.fence),
        );
    }
    Ok(())
}

/// The lease `holder` acquires on `key` for `ttl`; fails `check` unless it was granted.
async fn acquired(
    check: &'static str,
    store: &dyn StateStore,
    key: &str,
    holder: &LeaseHolder,
    ttl: std::time::Duration,
) -> Result<Lease, ConformanceError> {
    match io(check, store.acquire_lease(key, holder, ttl).await)? {
        LeaseOutcome::Acquired(l) => Ok(l),
        other => fail(
            check,
            format!("{} expected the lease, got {other:?}", holder.id),
        ),
    }
}

/// `Ok` when `r` is [`LeaseError::Lost`]; fails `check` saying `what` otherwise.
fn expect_lost(
    check: &'static str,
    r: Result<(), FaucetError>,
    what: &str,
) -> Result<(), ConformanceError> {
    match r {
        Err(FaucetError::Lease(LeaseError::Lost { .. })) => Ok(()),
        other => fail(
            check,
            format!("{what}: expected LeaseError::Lost, got {other:?}"),
        ),
    }
}

/// Reads a whole source in pages of `batch_size`, returning the pages.
async fn read_all(
    check: &'static str,
    source: &dyn Source,
    from: Option<Bookmark>,
    batch_size: usize,
) -> Result<Vec<Page>, ConformanceError> {
    io(check, super::read_pages(source, from, batch_size).await)
}

fn rows_of(pages: &[Page]) -> Vec<Json> {
    pages
        .iter()
        .flat_map(|p| p.rows().map(|r| r.to_json()).collect::<Vec<_>>())
        .collect()
}

/// `valid` (a JSON object that deserializes into `C`) with an extra field must be rejected.
///
/// # Errors
/// When `valid` is rejected, or the unknown field is accepted.
pub fn config_is_strict<C: DeserializeOwned>(valid: &Json) -> Result<(), ConformanceError> {
    const CHECK: &str = "config_is_strict";
    if let Err(e) = serde_json::from_value::<C>(valid.clone()) {
        return fail(CHECK, format!("the valid config was rejected: {e}"));
    }
    let mut bad = valid.clone();
    match bad.as_object_mut() {
        Some(map) => {
            map.insert("surely_not_a_field".into(), json!(1));
        }
        None => return fail(CHECK, "the valid config must be a JSON object"),
    }
    match serde_json::from_value::<C>(bad) {
        Ok(_) => fail(CHECK, "an unknown field `surely_not_a_field` was accepted"),
        Err(e) if e.to_string().contains("surely_not_a_field") => Ok(()),
        Err(e) => fail(
            CHECK,
            format!("rejected, but without naming the field: {e}"),
        ),
    }
}

/// No page holds more than `batch_size` records, and the source yields `expected` records.
///
/// # Errors
/// A page over the limit, or a different record count.
pub async fn source_pages_are_bounded(
    source: &dyn Source,
    batch_size: usize,
    expected: usize,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "source_pages_are_bounded";
    let pages = read_all(CHECK, source, None, batch_size).await?;
    if let Some((i, p)) = pages.iter().enumerate().find(|(_, p)| p.len() > batch_size) {
        return fail(
            CHECK,
            format!(
                "page {i} has {} records; batch_size is {batch_size}",
                p.len()
            ),
        );
    }
    let total: usize = pages.iter().map(Page::len).sum();
    if total != expected {
        return fail(CHECK, format!("{total} records read, {expected} expected"));
    }
    Ok(())
}

/// Reading from the start gives records R in pages; reopening from page i's bookmark gives
/// exactly the records after page i, for every i. Every page must carry a bookmark.
///
/// # Errors
/// A page without a bookmark, or a resume that loses or repeats records.
pub async fn source_bookmarks_round_trip(
    source: &dyn Source,
    batch_size: usize,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "source_bookmarks_round_trip";
    let pages = read_all(CHECK, source, None, batch_size).await?;
    let all = rows_of(&pages);
    let mut seen = 0;
    for (i, page) in pages.iter().enumerate() {
        seen += page.len();
        let Some(bookmark) = page.bookmark() else {
            return fail(CHECK, format!("page {i} has no bookmark"));
        };
        let rest = rows_of(&read_all(CHECK, source, Some(bookmark.clone()), batch_size).await?);
        if rest != all[seen..] {
            return fail(
                CHECK,
                format!(
                    "resuming after page {i} (bookmark {bookmark}) gave {} records, {} expected \
                     (first: {:?}, expected first: {:?})",
                    rest.len(),
                    all.len() - seen,
                    rest.first(),
                    all.get(seen)
                ),
            );
        }
    }
    Ok(())
}

/// A page of `(id Int, v Text)` rows, for sink checks.
pub fn sample_page(ids: &[i64], tag: &str, bookmark: Json) -> Page {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int),
        Field::new("v", DataType::Text),
    ]));
    let mut b = PageBuilder::new(schema, ids.len());
    for id in ids {
        b.push_row([Value::Int(*id), Value::Text(format!("{tag}{id}").into())]);
    }
    b.finish(Some(bookmark))
}

/// What the sink claims must hold: with keyed upsert (key `id`), writing the same page twice
/// leaves each id once with the last value; with atomic watermark, a token only moves
/// forward — a stale sequence is refused *and its rows are not committed* — and
/// `last_committed_token` returns the stored one. A sink claiming neither passes trivially.
/// `read_back` returns the rows now in the target.
///
/// # Errors
/// When a claim does not hold.
pub async fn sink_guarantee_is_truthful(
    sink: &dyn Sink,
    read_back: impl AsyncFn() -> Vec<Json>,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "sink_guarantee_is_truthful";
    let caps = sink.capabilities();
    if caps.keyed_upsert {
        let mut w = io(CHECK, sink.open().await)?;
        io(
            CHECK,
            w.write(&sample_page(&[1, 2, 3], "a", json!(1))).await,
        )?;
        io(CHECK, w.flush().await)?;
        io(
            CHECK,
            w.write(&sample_page(&[2, 3, 4], "b", json!(2))).await,
        )?;
        io(CHECK, w.flush().await)?;
        let rows = read_back().await;
        let ids: Vec<_> = rows.iter().map(|r| r["id"].clone()).collect();
        let mut unique = ids.clone();
        unique.sort_by_key(|v| v.to_string());
        unique.dedup();
        if unique.len() != ids.len() || ids.len() != 4 {
            return fail(
                CHECK,
                format!(
                    "claims keyed upsert, but a replay left ids {ids:?} (want 1..=4 once each)"
                ),
            );
        }
        let two = rows.iter().find(|r| r["id"] == json!(2));
        if two.map(|r| &r["v"]) != Some(&json!("b2")) {
            return fail(
                CHECK,
                format!("the replayed row was not overwritten: {two:?}"),
            );
        }
    }
    if caps.atomic_watermark {
        let scope = "conformance-atomic";
        let mut w = io(CHECK, sink.open().await)?;
        let before = read_back().await.len();
        let t2 = CommitToken {
            sequence: 2,
            bookmark: json!({"offset": 2}),
        };
        io(
            CHECK,
            w.write_committed(&sample_page(&[100], "t", json!(2)), scope, &t2)
                .await,
        )?;
        let stale = CommitToken {
            sequence: 1,
            bookmark: json!({"offset": 1}),
        };
        if w.write_committed(&sample_page(&[101], "t", json!(1)), scope, &stale)
            .await
            .is_ok()
        {
            return fail(
                CHECK,
                "a stale commit token (sequence 1 after 2) was accepted",
            );
        }
        let after = read_back().await;
        if after.len() != before + 1 || after.iter().any(|r| r["id"] == json!(101)) {
            return fail(
                CHECK,
                "the rows of a refused (stale) commit reached the target, or the accepted ones \
                 did not",
            );
        }
        let token = io(CHECK, w.last_committed_token(scope).await)?;
        if token.as_ref() != Some(&t2) {
            return fail(
                CHECK,
                format!("last_committed_token gave {token:?}, want {t2:?}"),
            );
        }
    }
    Ok(())
}

/// After `write` + `flush` of a page, `read_back` shows its rows, exactly.
///
/// # Errors
/// When flushed rows are missing or different.
pub async fn sink_flush_is_durable(
    sink: &dyn Sink,
    read_back: impl AsyncFn() -> Vec<Json>,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "sink_flush_is_durable";
    let page = sample_page(&[7, 8, 9], "d", json!({"offset": 3}));
    let before = read_back().await.len();
    let mut w = io(CHECK, sink.open().await)?;
    io(CHECK, w.write(&page).await)?;
    io(CHECK, w.flush().await)?;
    drop(w);
    let rows = read_back().await;
    let want = rows_of(std::slice::from_ref(&page));
    if rows.len() != before + want.len() || rows[before..] != want[..] {
        return fail(
            CHECK,
            format!(
                "after flush the target shows {:?}, want {want:?} appended",
                &rows[before.min(rows.len())..]
            ),
        );
    }
    Ok(())
}

/// The checks every sink's tests run on a sink: [`sink_flush_is_durable`], then
/// [`sink_guarantee_is_truthful`], both reading the target with `read_back`.
///
/// # Errors
/// The first check that fails.
pub async fn sink_battery(
    sink: &dyn Sink,
    read_back: impl AsyncFn() -> Vec<Json>,
) -> Result<(), ConformanceError> {
    sink_flush_is_durable(sink, &read_back).await?;
    sink_guarantee_is_truthful(sink, read_back).await
}

/// `op` returns an error rather than panicking (it runs in a task, so a panic is caught).
///
/// # Errors
/// When the operation panics, or succeeds although it should fail.
pub async fn errors_not_panics<F, T>(what: &str, op: F) -> Result<(), ConformanceError>
where
    F: Future<Output = Result<T, FaucetError>> + Send + 'static,
    T: Send + 'static,
{
    const CHECK: &str = "errors_not_panics";
    match tokio::spawn(op).await {
        Err(join) if join.is_panic() => fail(CHECK, format!("{what}: panicked")),
        Err(join) => fail(CHECK, format!("{what}: task failed: {join}")),
        Ok(Ok(_)) => fail(CHECK, format!("{what}: succeeded, an error was expected")),
        Ok(Err(_)) => Ok(()),
    }
}

/// A run cancelled after its first page returns `Ok` with `cancelled: true`, the sink holds
/// exactly the records the summary counts (as `read_back` shows them), and the state store
/// holds the summary's last bookmark. The source must yield more than one page at
/// `batch_size`.
///
/// # Errors
/// When the run fails, is not marked cancelled, or the sink and state disagree with it.
pub async fn cancellation_flushes<F, Fut>(
    source: &dyn Source,
    sink: &dyn Sink,
    batch_size: usize,
    read_back: F,
) -> Result<(), ConformanceError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Vec<Json>>,
{
    const CHECK: &str = "cancellation_flushes";
    let before = read_back().await.len();
    let state = Arc::new(crate::state::MemoryStateStore::new());
    // The target may already hold other checks' rows: mark the key as a run that started
    // (no bookmark yet), so the lost-bookmark guard does not refuse the append.
    io(CHECK, state.put("conformance-cancel", &Json::Null).await)?;
    let options = RunStreamOptions {
        batch_size,
        state_key: "conformance-cancel".into(),
        ..RunStreamOptions::default()
    };
    let cancel = options.cancel.clone();
    let options = RunStreamOptions {
        on_progress: Some(Arc::new(move |_| cancel.cancel())),
        ..options
    };
    let summary = io(
        CHECK,
        Pipeline::from_dyn(source, sink)
            .with_state_store(state.clone())
            .with_options(options)
            .run()
            .await,
    )?;
    if !summary.cancelled {
        return fail(CHECK, "the summary does not say the run was cancelled");
    }
    let written = read_back().await.len() - before;
    if written as u64 != summary.records_out {
        return fail(
            CHECK,
            format!(
                "the sink holds {written} new records, the summary says {}",
                summary.records_out
            ),
        );
    }
    let entry = io(CHECK, state.get("conformance-cancel").await)?
        .map(crate::pipeline::entry::Entry::decode);
    if let (Some(e), Some(target)) = (&entry, sink.target())
        && e.sink.as_deref() != Some(target.as_str())
    {
        return fail(
            CHECK,
            format!(
                "the stored entry names the sink {:?}, not {target:?}",
                e.sink
            ),
        );
    }
    let stored = entry.map(|e| e.bookmark);
    if stored != summary.last_bookmark {
        return fail(
            CHECK,
            format!(
                "state holds {stored:?}, summary says {:?}",
                summary.last_bookmark
            ),
        );
    }
    Ok(())
}

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

/// The take-over part of the lease contract, for stores whose leases outlive their holder's
/// process (PostgreSQL, Redis): [`StateStore::take_over_lease`] takes a lease from the
/// holder it names, with a larger fence, and from no one else.
///
/// # Errors
/// When any part of the contract does not hold.
pub async fn lease_takeover_contract(
    store: &dyn StateStore,
    prefix: &str,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "lease_takeover_contract";
    let holder = |name: &str| prefixed_holder(prefix, name);
    let (a, b, c) = (holder("a"), holder("b"), holder("c"));
    let key = format!("{prefix}takeover");
    let long = std::time::Duration::from_secs(60);
    let la = acquired(CHECK, store, &key, &a, long).await?;
    match io(CHECK, store.take_over_lease(&key, &c, long, &b).await)? {
        LeaseOutcome::HeldBy(h) if h == a => {}
        other => {
            return fail(
                CHECK,
                format!("a take-over from b, who does not hold the lease, got {other:?}"),
            );
        }
    }
    let lc = match io(CHECK, store.take_over_lease(&key, &c, long, &a).await)? {
        LeaseOutcome::Acquired(l) => l,
        other => return fail(CHECK, format!("a take-over from a got {other:?}")),
    };
    fence_grew(CHECK, &la, &lc)?;
    expect_lost(
        CHECK,
        store.put_fenced(&key, &json!({"offset": 1}), &la).await,
        "the taken-over holder's put_fenced",
    )?;
    io(CHECK, store.release_lease(&lc).await)?;
    io(CHECK, store.delete(&key).await)?;
    Ok(())
}

/// The lease contract of a [`StateStore`] that implements leasing (see
/// [`crate::state::lease`]), on key `{prefix}lease`:
/// a second holder is told who holds the key; a released key is free at once; renewal keeps a
/// lease past its ttl; after a lease lapses another holder takes it with a larger fence; the
/// stale holder's `put_fenced` and `renew_lease` are refused with [`LeaseError::Lost`] and
/// the bookmark is unchanged; the stale holder's late release does not free the new lease.
/// Takes about `3 × ttl`; `ttl` must be long enough for a few round trips (≥ 300 ms).
///
/// # Errors
/// When any part of the contract does not hold.
pub async fn lease_contract(
    store: &dyn StateStore,
    prefix: &str,
    ttl: std::time::Duration,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "lease_contract";
    let key = format!("{prefix}lease");
    let long = std::time::Duration::from_secs(60);
    let (a, b) = (prefixed_holder(prefix, "a"), prefixed_holder(prefix, "b"));
    let acquire = |h: LeaseHolder, ttl| {
        let key = key.clone();
        async move { acquired(CHECK, store, &key, &h, ttl).await }
    };
    let held_by = |h: LeaseHolder| {
        let key = key.clone();
        async move {
            match io(CHECK, store.acquire_lease(&key, &h, long).await)? {
                LeaseOutcome::HeldBy(other) => Ok(other),
                other => fail(CHECK, format!("{} expected HeldBy, got {other:?}", h.id)),
            }
        }
    };
    let lost = |r: Result<(), FaucetError>, what: &str| expect_lost(CHECK, r, what);

    let la = acquire(a.clone(), long).await?;
    if held_by(b.clone()).await? != a {
        return fail(CHECK, "HeldBy does not name the holder");
    }
    io(CHECK, store.release_lease(&la).await)?;
    let lb = acquire(b.clone(), long).await?;
    io(CHECK, store.release_lease(&lb).await)?;

    let la = acquire(a.clone(), ttl).await?;
    for _ in 0..4 {
        tokio::time::sleep(ttl / 3).await;
        io(CHECK, store.renew_lease(&la, ttl).await)?;
    }
    if held_by(b.clone()).await? != a {
        return fail(CHECK, "a renewed lease was lost or taken");
    }
    io(
        CHECK,
        store.put_fenced(&key, &json!({"offset": 10}), &la).await,
    )?;

    tokio::time::sleep(ttl * 2).await; // a stalls past its ttl
    let lb = acquire(b.clone(), long).await?;
    fence_grew(CHECK, &la, &lb)?;
    lost(
        store.put_fenced(&key, &json!({"offset": 5}), &la).await,
        "stale put_fenced",
    )?;
    lost(store.renew_lease(&la, long).await, "stale renew")?;
    if io(CHECK, store.get(&key).await)? != Some(json!({"offset": 10})) {
        return fail(CHECK, "a stale holder moved the bookmark");
    }
    io(CHECK, store.release_lease(&la).await)?;
    if held_by(a.clone()).await? != b {
        return fail(
            CHECK,
            "a stale holder's release freed the new holder's lease",
        );
    }
    io(
        CHECK,
        store.put_fenced(&key, &json!({"offset": 20}), &lb).await,
    )?;
    io(CHECK, store.release_lease(&lb).await)?;
    io(CHECK, store.delete(&key).await)?;
    Ok(())
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
            .acquire_lease(
                &key,
                &LeaseHolder::this_process(),
                std::time::Duration::from_secs(5),
            )
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
            .acquire_lease(&key, &other, std::time::Duration::from_secs(30))
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

/// Lease edge cases every leasing store must get right, on keys `{prefix}lapsed` and
/// `{prefix}race`, which must never have been used:
///
/// * a lease of `ttl` that lapsed with nobody taking over is still lost: after `2.5 × ttl` its
///   renewal is refused with [`LeaseError::Lost`] whose reason
///   says it `expired`, its `put_fenced` is refused with `Lost` and nothing is written;
/// * 8 concurrent acquisitions (tasks spawned on the runtime) of a free key have exactly one
///   winner, with fence 1 (losers do not burn fences), and every loser is told the winner.
///
/// Leaves the keys' leases released and the keys deleted.
///
/// # Errors
/// When any of that does not hold, or the store does not support leases.
pub async fn lease_lapse_and_race(
    store: Arc<dyn StateStore>,
    prefix: &str,
    ttl: std::time::Duration,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "lease_lapse_and_race";
    let long = std::time::Duration::from_secs(30);
    let holder = |name: &str| {
        test_holder(
            format!("{name}-id"),
            name,
            4000 + u32::try_from(name.len()).unwrap_or(0),
        )
    };

    // An expired lease nobody took is still lost.
    let key = format!("{prefix}lapsed");
    let la = acquired(CHECK, &*store, &key, &holder("a"), ttl).await?;
    tokio::time::sleep(ttl * 5 / 2).await;
    match store.renew_lease(&la, long).await {
        Err(FaucetError::Lease(LeaseError::Lost { reason, .. })) if reason.contains("expired") => {}
        other => {
            return fail(
                CHECK,
                format!(
                    "renewing a lapsed lease: expected LeaseError::Lost saying it expired, got \
                     {other:?}"
                ),
            );
        }
    }
    expect_lost(
        CHECK,
        store.put_fenced(&key, &json!(1), &la).await,
        "put_fenced under a lapsed lease",
    )?;
    let stored = io(CHECK, store.get(&key).await)?;
    if stored.is_some() {
        return fail(
            CHECK,
            format!("a lapsed lease's put_fenced wrote {stored:?}"),
        );
    }
    io(CHECK, store.delete(&key).await)?;

    // Concurrent acquisitions: exactly one winner.
    let key = format!("{prefix}race");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (store, key, h) = (store.clone(), key.clone(), holder(&format!("r{i}")));
        tasks.push(tokio::spawn(async move {
            store.acquire_lease(&key, &h, long).await
        }));
    }
    let mut winners = Vec::new();
    let mut named = Vec::new();
    for t in tasks {
        let outcome = match t.await {
            Ok(r) => io(CHECK, r)?,
            Err(e) => return fail(CHECK, format!("an acquiring task failed: {e}")),
        };
        match outcome {
            LeaseOutcome::Acquired(l) => winners.push(l),
            LeaseOutcome::HeldBy(h) => named.push(h),
            LeaseOutcome::Unsupported => return fail(CHECK, "the store does not support leases"),
        }
    }
    for lease in &winners {
        io(CHECK, store.release_lease(lease).await)?;
    }
    io(CHECK, store.delete(&key).await)?;
    let [winner] = winners.as_slice() else {
        return fail(
            CHECK,
            format!(
                "{} of 8 concurrent acquisitions won: {winners:?}",
                winners.len()
            ),
        );
    };
    if winner.fence != 1 {
        return fail(
            CHECK,
            format!(
                "the winner's fence is {}, want 1 (losers do not burn fences)",
                winner.fence
            ),
        );
    }
    if let Some(h) = named.iter().find(|h| **h != winner.holder) {
        return fail(
            CHECK,
            format!(
                "a loser was told {h:?} holds the key, the winner is {:?}",
                winner.holder
            ),
        );
    }
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
                .acquire_lease(&key, &holder, std::time::Duration::from_secs(1))
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
