//! The `nats` sink against the nats-server of `FAUCET_TEST_NATS_URL` (JetStream on): the
//! conformance battery, routing by table, the exact re-anchor after a page stored in part,
//! and a zombie's chained publish refused. Every test uses its own stream, deleted at the end.

use std::time::Duration;

use async_nats::jetstream;
use faucet_connectors::nats::{NatsSink, NatsSinkConfig};
use faucet_core::testing::conformance;
use faucet_core::{Commit, CommitToken, Fence, Sink};
use faucet_test_support::{Service, nats_url, unique_suffix};
use serde_json::{Value as Json, json};

async fn js() -> jetstream::Context {
    let client = Service::Nats.expect_up(async_nats::connect(nats_url()).await);
    jetstream::new(client)
}

/// Deletes the stream when dropped.
struct Stream(String);

impl Drop for Stream {
    fn drop(&mut self) {
        let name = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async { js().await.delete_stream(&name).await.ok() });
        })
        .join();
    }
}

fn names(tag: &str) -> (String, String) {
    let s = unique_suffix();
    (
        format!("FAUCET_TEST_{tag}_{s}"),
        format!("faucet-test.{tag}.{s}"),
    )
}

/// Every message of `stream` in order: `(subject, headers as a map, payload as JSON)`.
async fn messages(stream: &str) -> Vec<(String, serde_json::Map<String, Json>, Json)> {
    let ctx = js().await;
    let Ok(mut s) = ctx.get_stream(stream).await else {
        return Vec::new();
    };
    let last = s.info().await.expect("info").state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        let Ok(m) = s.get_raw_message(seq).await else {
            continue;
        };
        let headers = m
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    Json::String(v.first().map(|v| v.as_str().to_owned()).unwrap_or_default()),
                )
            })
            .collect();
        let payload = serde_json::from_slice(&m.payload).unwrap_or(Json::Null);
        out.push((m.subject.to_string(), headers, payload));
    }
    out
}

fn values_of(stream: String) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = Vec<Json>>>> {
    move || {
        let stream = stream.clone();
        Box::pin(async move {
            messages(&stream)
                .await
                .into_iter()
                .filter(|(s, ..)| !s.starts_with("_faucet."))
                .map(|(.., v)| v)
                .collect()
        })
    }
}

fn config(stream: &str, subject: &str) -> NatsSinkConfig {
    let mut c = NatsSinkConfig::new(nats_url(), subject, stream);
    c.create_stream = true;
    c
}

#[tokio::test]
async fn conformance_battery() {
    let (stream, subject) = names("conf");
    let _guard = Stream(stream.clone());
    let sink = NatsSink::new(config(&stream, &subject)).expect("sink");
    conformance::sink_flush_is_durable(&sink, values_of(stream.clone()))
        .await
        .expect("flush is durable");
    conformance::sink_guarantee_is_truthful(&sink, values_of(stream.clone()))
        .await
        .expect("guarantee is truthful");
    conformance::config_is_strict::<NatsSinkConfig>(
        &json!({"url": nats_url(), "subject": "s", "stream": "S"}),
    )
    .expect("strict config");
    let down = NatsSink::new(NatsSinkConfig::new("nats://127.0.0.1:1", "s", "S")).expect("sink");
    conformance::errors_not_panics("open an unreachable server", async move {
        down.open().await.map(|_| ())
    })
    .await
    .expect("error, not panic");
    sink.check().await.expect("doctor's check passes");
    // A missing stream without `create_stream` is an error naming it.
    let mut c = config(&format!("{stream}_MISSING"), &format!("{subject}-missing"));
    c.create_stream = false;
    let err = NatsSink::new(c)
        .expect("sink")
        .open()
        .await
        .err()
        .expect("missing stream");
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test]
async fn a_page_stored_in_part_is_re_anchored_exactly() {
    let (stream, subject) = names("anchor");
    let _guard = Stream(stream.clone());
    let sink = NatsSink::new(config(&stream, &subject)).expect("sink");
    let scope = "anchor-key";
    let page = |ids: &[i64], at: i64| conformance::sample_page(ids, "p", json!({"offset": at}));
    let t = |sequence, at: i64| CommitToken {
        sequence,
        bookmark: json!({"offset": at}),
    };
    let mut w = sink.open().await.expect("open");
    assert_eq!(w.last_committed_token(scope).await.expect("token"), None);
    w.write_committed(&page(&[1, 2, 3], 3), &Commit::new(scope, &t(1, 3)))
        .await
        .expect("page 1");
    drop(w);
    // A crash in page 2 after two of its four records: publish them by hand, as the writer
    // does (the same headers, without the commit).
    let ctx = js().await;
    for (i, id) in [4, 5].iter().enumerate() {
        let mut h = async_nats::HeaderMap::new();
        let page = json!({"scope": scope, "sequence": 2, "start": {"offset": 3}});
        h.insert("faucet-page", page.to_string().as_str());
        h.insert("faucet-page-index", i.to_string().as_str());
        ctx.publish_with_headers(
            subject.clone(),
            h,
            format!("{{\"id\":{id},\"v\":\"p{id}\"}}").into(),
        )
        .await
        .expect("publish")
        .await
        .expect("ack");
    }
    let mut w = sink.open().await.expect("reopen");
    assert_eq!(
        w.last_committed_token(scope).await.expect("token"),
        Some(t(1, 3)),
        "the page stored in part is not committed: its start is the anchor"
    );
    // The replay of page 2 in two smaller pages (other boundaries): the first wholly stored
    // (a commit marker only), the second publishing what was not.
    w.write_committed(&page(&[4], 4), &Commit::new(scope, &t(2, 4)))
        .await
        .expect("replayed page, all stored");
    w.write_committed(&page(&[5, 6, 7], 7), &Commit::new(scope, &t(3, 7)))
        .await
        .expect("replayed page, stored in part");
    assert_eq!(
        w.last_committed_token(scope).await.expect("token"),
        Some(t(3, 7))
    );
    let ids: Vec<Json> = values_of(stream.clone())()
        .await
        .into_iter()
        .map(|v| v["id"].clone())
        .collect();
    assert_eq!(ids, (1..=7).map(|i| json!(i)).collect::<Vec<_>>());
    // A stale writer (opened before the last page) is refused by the chain: its next page
    // expects a stream sequence that has moved on.
    let mut stale = sink.open().await.expect("open");
    stale
        .fence(&Fence::new(scope, 1, Duration::from_secs(5)))
        .await
        .expect("fence");
    let mut newer = sink.open().await.expect("open");
    newer
        .fence(&Fence::new(scope, 2, Duration::from_secs(5)))
        .await
        .expect("fence");
    newer
        .write_committed(&page(&[8], 8), &Commit::new(scope, &t(4, 8)))
        .await
        .expect("newer run's page");
    let err = stale
        .write_committed(&page(&[8], 8), &Commit::new(scope, &t(4, 8)))
        .await
        .expect_err("zombie refused");
    assert!(err.to_string().contains("fence"), "{err}");
    assert_eq!(
        values_of(stream.clone())().await.len(),
        8,
        "nothing of the zombie's page"
    );
}

/// A source table whose name holds a line break (PostgreSQL and MySQL allow one in a quoted
/// identifier) cannot be a NATS header: the page is a data error naming the header, before
/// anything of it is published — not a panic inside the client.
#[tokio::test]
async fn a_table_name_with_a_line_break_is_a_data_error_before_anything_is_sent() {
    let (stream, subject) = names("newline");
    let _guard = Stream(stream.clone());
    let sink = NatsSink::new(config(&stream, &subject)).expect("sink");
    let mut w = sink.open().await.expect("open");
    let page = faucet_core::testing::keyed_change_page(
        &[("c", "public.orders", 1, "a"), ("c", "public.a\nb", 2, "b")],
        json!({"lsn": "0/2"}),
    );
    let err = w.write(&page).await.expect_err("a line break in a header");
    assert!(
        matches!(err, faucet_core::FaucetError::Data { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("faucet-table"), "{err}");
    assert!(err.to_string().contains("record 2"), "{err}");
    assert_eq!(values_of(stream.clone())().await, Vec::<Json>::new());
}
