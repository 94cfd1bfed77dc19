//! The sink checks: truthful guarantees, durable flushes, and a cancelled run that flushes
//! what it delivered.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use crate::page::{Page, PageBuilder};
use crate::pipeline::{Pipeline, RunStreamOptions};
use crate::sink::{Commit, CommitToken, Sink};
use crate::source::Source;
use crate::state::StateStore;
use crate::value::{DataType, Field, Schema, Value};

use super::{ConformanceError, fail, io, rows_of};

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

/// How the sink checks read a target back: any closure returning a future of the rows now in
/// the target, as JSON objects (only the connector's test knows how to read its target).
pub trait ReadBack {
    /// The rows now in the target.
    fn read(&self) -> impl Future<Output = Vec<Json>>;
}

impl<F, Fut> ReadBack for F
where
    F: Fn() -> Fut,
    Fut: Future<Output = Vec<Json>>,
{
    fn read(&self) -> impl Future<Output = Vec<Json>> {
        self()
    }
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
    read_back: impl ReadBack,
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
        let rows = read_back.read().await;
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
        let before = read_back.read().await.len();
        let t2 = CommitToken {
            sequence: 2,
            bookmark: json!({"offset": 2}),
        };
        io(
            CHECK,
            w.write_committed(
                &sample_page(&[100], "t", json!(2)),
                &Commit::new(scope, &t2),
            )
            .await,
        )?;
        let stale = CommitToken {
            sequence: 1,
            bookmark: json!({"offset": 1}),
        };
        if w.write_committed(
            &sample_page(&[101], "t", json!(1)),
            &Commit::new(scope, &stale),
        )
        .await
        .is_ok()
        {
            return fail(
                CHECK,
                "a stale commit token (sequence 1 after 2) was accepted",
            );
        }
        let after = read_back.read().await;
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
    read_back: impl ReadBack,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "sink_flush_is_durable";
    let page = sample_page(&[7, 8, 9], "d", json!({"offset": 3}));
    let before = read_back.read().await.len();
    let mut w = io(CHECK, sink.open().await)?;
    io(CHECK, w.write(&page).await)?;
    io(CHECK, w.flush().await)?;
    drop(w);
    let rows = read_back.read().await;
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

/// A run cancelled after its first page returns `Ok` with `cancelled: true`, the sink holds
/// exactly the records the summary counts (as `read_back` shows them), and the state store
/// holds the summary's last bookmark. The source must yield more than one page at
/// `batch_size`.
///
/// # Errors
/// When the run fails, is not marked cancelled, or the sink and state disagree with it.
pub async fn cancellation_flushes(
    source: &dyn Source,
    sink: &dyn Sink,
    batch_size: usize,
    read_back: impl ReadBack,
) -> Result<(), ConformanceError> {
    const CHECK: &str = "cancellation_flushes";
    let before = read_back.read().await.len();
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
    let written = read_back.read().await.len() - before;
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
