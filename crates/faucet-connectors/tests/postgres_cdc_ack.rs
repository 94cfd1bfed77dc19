//! postgres-cdc acknowledgement (docs/run-loop.md, invariant 2, case 03): the slot's
//! `confirmed_flush_lsn` moves to a page's bookmark once the run loop reports it durable —
//! during a continuous stream — and never past the last durable bookmark, however far the
//! server's WAL moves; keepalives are answered while the consumer is busy.

use std::time::{Duration, Instant};

use faucet_connectors::postgres::cdc::{PostgresCdcConfig, PostgresCdcSource};
use faucet_core::Source;

use crate::postgres_cdc::{Fixture, admin, pg_url, prime_continuous, read_options, records};

fn lsn_value(text: &str) -> u64 {
    let (hi, lo) = text.split_once('/').expect("X/X");
    (u64::from_str_radix(hi, 16).expect("hex") << 32) | u64::from_str_radix(lo, 16).expect("hex")
}

async fn current_wal() -> u64 {
    let text: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&mut admin().await)
        .await
        .expect("wal lsn");
    lsn_value(&text)
}

fn ids(page: &faucet_core::Page) -> Vec<i64> {
    records(std::slice::from_ref(page))
        .iter()
        .map(|r| r["after"]["id"].as_i64().expect("id"))
        .collect()
}

/// Payments 1 and 2 in one transaction, the `poison` payment 3, payment 4, then unrelated
/// WAL (a `noise` table of 1000 rows) that keeps the server's WAL end moving.
async fn payments_with_a_poison_one(fx: &Fixture) {
    fx.sql("INSERT INTO {s}.payment VALUES (1, 10.00, 'ok'), (2, 20.00, 'ok')")
        .await;
    fx.sql("INSERT INTO {s}.payment VALUES (3, 30.00, 'poison')")
        .await;
    fx.sql("INSERT INTO {s}.payment VALUES (4, 40.00, 'ok')")
        .await;
    fx.sql("CREATE TABLE {s}.noise (id serial PRIMARY KEY, pad text)")
        .await;
    fx.sql("INSERT INTO {s}.noise (pad) SELECT repeat('n', 100) FROM generate_series(1, 1000)")
        .await;
}

#[tokio::test]
async fn case_03_the_slot_moves_only_to_durable_bookmarks() {
    let fx = Fixture::new("ack").await;
    fx.sql("CREATE TABLE {s}.payment (id integer PRIMARY KEY, amount numeric(12,2) NOT NULL, memo text NOT NULL)")
        .await;
    let mut config = fx.config(&["payment"]);
    config.create_publication = true;
    config.continuous = true;
    let source = PostgresCdcSource::new(config).expect("config");
    prime_continuous(&fx, &source).await;
    let initial = lsn_value(&fx.confirmed_flush().await.expect("slot"));

    payments_with_a_poison_one(&fx).await;

    let mut stream = source.open(None, read_options(2)).await.expect("open");
    let p1 = stream.next_page().await.expect("page").expect("page 1");
    assert_eq!(ids(&p1), vec![1, 2]);
    let b1 = p1.bookmark().expect("bookmark").clone();

    // Not durable yet: the server hears nothing new, for well over two status intervals.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        lsn_value(&fx.confirmed_flush().await.expect("slot")),
        initial
    );

    let p2 = stream.next_page().await.expect("page").expect("page 2");
    assert_eq!(ids(&p2), vec![3, 4]);
    let b2 = p2.bookmark().expect("bookmark").clone();
    let b2_lsn = lsn_value(b2["lsn"].as_str().expect("lsn"));
    assert!(b2_lsn > initial, "{b2}");

    // Page 1 durable: its bookmark is inside the first transaction, so the position it
    // covers is still the start.
    stream.bookmark_durable(&b1).await.expect("ack");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        lsn_value(&fx.confirmed_flush().await.expect("slot")),
        lsn_value(b1["lsn"].as_str().expect("lsn"))
    );

    // Page 2 durable: the slot moves to its bookmark, while the stream is still open.
    stream.bookmark_durable(&b2).await.expect("ack");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut confirmed = 0;
    while Instant::now() < deadline {
        confirmed = lsn_value(&fx.confirmed_flush().await.expect("slot"));
        if confirmed == b2_lsn {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        confirmed, b2_lsn,
        "confirmed_flush_lsn follows the durable bookmark"
    );

    // The stream keeps running (keepalives flow, the noise moved the WAL end well past the
    // bookmark), but nothing more is durable: the slot stays at the bookmark.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(current_wal().await > b2_lsn);
    assert_eq!(
        lsn_value(&fx.confirmed_flush().await.expect("slot")),
        b2_lsn
    );
    drop(stream);

    // Bookmark lost, slot kept (case 03 variant B): a run without a bookmark starts at the
    // slot's position — id 4's transaction comes again (delivered but not durable), nothing
    // is skipped.
    fx.wait_slot_released().await;
    assert_eq!(
        lsn_value(&fx.confirmed_flush().await.expect("slot")),
        b2_lsn
    );
    let options = read_options(100);
    let cancel = options.cancel.clone();
    let mut again = source.open(None, options).await.expect("open");
    let page = again.next_page().await.expect("page").expect("page");
    cancel.cancel();
    assert_eq!(ids(&page), vec![4]);
    drop(again);
    fx.wait_slot_released().await;
}

#[tokio::test]
async fn keepalives_are_answered_while_the_consumer_is_busy() {
    let mut fx = Fixture::new("busy").await;
    // A role whose walsender gives up after 2 s without a reply (the default is 60 s).
    let role = format!("{}_busy", fx.slot);
    fx.roles.push(role.clone());
    fx.sql(&format!(
        "CREATE TABLE {{s}}.t (id int PRIMARY KEY);
         CREATE ROLE \"{role}\" LOGIN REPLICATION;
         ALTER ROLE \"{role}\" SET wal_sender_timeout = '2s';
         CREATE PUBLICATION {{p}} FOR TABLE {{s}}.t;"
    ))
    .await;
    let mut url = url::Url::parse(&pg_url()).expect("url");
    url.set_username(&role).expect("user");
    url.set_password(None).expect("password");
    let mut config = PostgresCdcConfig::new(
        url.as_str(),
        fx.slot.clone(),
        fx.publication.clone(),
        [fx.table("t")],
    );
    config.continuous = true;
    let source = PostgresCdcSource::new(config).expect("config");
    prime_continuous(&fx, &source).await;

    fx.sql("INSERT INTO {s}.t SELECT generate_series(1, 3)")
        .await;
    let options = read_options(1);
    let cancel = options.cancel.clone();
    let mut stream = source.open(None, options).await.expect("open");
    let first = stream.next_page().await.expect("page").expect("page");
    assert_eq!(ids(&first), vec![1]);
    // A slow sink: the page takes 6 s, three times the walsender's timeout.
    tokio::time::sleep(Duration::from_secs(6)).await;
    fx.sql("INSERT INTO {s}.t VALUES (4)").await;
    let mut rest = Vec::new();
    while rest.len() < 3 {
        let page = tokio::time::timeout(Duration::from_secs(10), stream.next_page())
            .await
            .expect("the stream is alive")
            .expect("the session survived the slow consumer")
            .expect("page");
        rest.extend(ids(&page));
    }
    cancel.cancel();
    assert_eq!(rest, vec![2, 3, 4]);
    while let Some(page) = stream.next_page().await.expect("page") {
        if let Some(b) = page.bookmark() {
            stream.bookmark_durable(b).await.expect("ack");
        }
    }
    drop(stream);
    fx.wait_slot_released().await;
}

#[tokio::test]
async fn a_slot_held_by_another_stream_is_reported_with_its_fix() {
    let fx = Fixture::new("busyslot").await;
    fx.sql("CREATE TABLE {s}.t (id int PRIMARY KEY)").await;
    let mut config = fx.config(&["t"]);
    config.create_publication = true;
    config.continuous = true;
    let source = PostgresCdcSource::new(config).expect("config");
    let holder = source.open(None, read_options(10)).await.expect("open");

    let second = PostgresCdcSource::new({
        let mut c = fx.config(&["t"]);
        c.continuous = true;
        c
    })
    .expect("config");
    let started = Instant::now();
    let err = match second.open(None, read_options(10)).await {
        Ok(_) => panic!("a second reader of an active slot must fail"),
        Err(e) => e,
    };
    let message = err.to_string();
    assert!(
        message.contains("is active in another process"),
        "{message}"
    );
    assert!(message.contains("slot_name"), "the fix: {message}");
    assert!(err.is_retryable(), "the holder may go away: {err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let checked = second.check().await.expect_err("check sees it too");
    assert!(
        checked.to_string().contains("is active in another process"),
        "{checked}"
    );
    drop(holder);
    fx.wait_slot_released().await;
}

/// A sink that, while `reject` is set, fails any page holding a row whose `after.memo` is
/// `poison` (case 03's trigger), and keeps what it accepted.
#[derive(Clone, Default)]
struct PoisonSink {
    reject: bool,
    rows: std::sync::Arc<std::sync::Mutex<Vec<faucet_core::serde_json::Value>>>,
}

impl PoisonSink {
    fn rows(&self) -> Vec<faucet_core::serde_json::Value> {
        self.rows.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

struct PoisonWriter<'a>(&'a PoisonSink);

#[async_trait::async_trait]
impl faucet_core::Sink for PoisonSink {
    fn connector(&self) -> &str {
        "poison"
    }
    fn capabilities(&self) -> faucet_core::SinkCapabilities {
        faucet_core::SinkCapabilities::default()
    }
    async fn open(
        &self,
    ) -> Result<Box<dyn faucet_core::SinkWriter + '_>, faucet_core::FaucetError> {
        Ok(Box::new(PoisonWriter(self)))
    }
    async fn check(&self) -> Result<(), faucet_core::FaucetError> {
        Ok(())
    }
}

#[async_trait::async_trait]
impl faucet_core::SinkWriter for PoisonWriter<'_> {
    async fn write(&mut self, page: &faucet_core::Page) -> Result<(), faucet_core::FaucetError> {
        let rows = records(std::slice::from_ref(page));
        if self.0.reject && rows.iter().any(|r| r["after"]["memo"] == "poison") {
            return Err(faucet_core::FaucetError::write(
                "poison",
                "sink rejects row 3",
                None,
            ));
        }
        self.0.rows.lock().expect("rows").extend(rows);
        Ok(())
    }
    async fn flush(&mut self) -> Result<(), faucet_core::FaucetError> {
        Ok(())
    }
}

#[tokio::test]
async fn case_03_a_failing_sink_leaves_the_slot_before_the_failed_page() {
    use std::sync::Arc;

    use faucet_core::state::{MemoryStateStore, StateStore};
    use faucet_core::{Pipeline, RunStreamOptions};

    let fx = Fixture::new("poison").await;
    fx.sql("CREATE TABLE {s}.payment (id integer PRIMARY KEY, amount numeric(12,2) NOT NULL, memo text NOT NULL)")
        .await;
    let source = fx.source(&["payment"]);
    crate::postgres_cdc::prime(&fx, &source).await;
    payments_with_a_poison_one(&fx).await;

    let state: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let options = || RunStreamOptions {
        batch_size: 1,
        state_key: "case03".into(),
        ..Default::default()
    };
    let rejecting = PoisonSink {
        reject: true,
        ..Default::default()
    };
    let failed = Pipeline::new(&source, &rejecting)
        .with_state_store(state.clone())
        .with_options(options())
        .run()
        .await;
    let e = failed.expect_err("the run fails on the poison row; it does not skip it");
    assert!(e.to_string().contains("sink rejects row 3"), "{e}");
    assert_eq!(
        rejecting
            .rows()
            .iter()
            .map(|r| r["after"]["id"].clone())
            .collect::<Vec<_>>(),
        vec![1, 2]
    );
    fx.wait_slot_released().await;
    tokio::time::sleep(Duration::from_millis(1000)).await; // > 2 status intervals
    let bookmark = state
        .get("case03")
        .await
        .expect("state")
        .expect("a bookmark");
    let bookmark_lsn = lsn_value(bookmark["lsn"].as_str().expect("lsn"));
    let confirmed = lsn_value(&fx.confirmed_flush().await.expect("slot"));
    assert!(
        confirmed <= bookmark_lsn,
        "confirmed {confirmed:X} > bookmark {bookmark}"
    );
    assert!(
        current_wal().await > confirmed,
        "not moved to the server's WAL end"
    );

    // The sink is fixed: the next run delivers 3 and 4, from the bookmark.
    let fixed = PoisonSink::default();
    let summary = Pipeline::new(&source, &fixed)
        .with_state_store(state.clone())
        .with_options(options())
        .run()
        .await
        .expect("run");
    let delivered = fixed.rows();
    assert_eq!(summary.records_out, 2, "{summary:?}");
    let poison_lsn = lsn_value(delivered[0]["lsn"].as_str().expect("lsn"));
    assert!(
        bookmark_lsn <= poison_lsn,
        "the bookmark did not cover id 3's transaction"
    );
    let all: Vec<String> = rejecting
        .rows()
        .iter()
        .chain(&delivered)
        .map(|r| faucet_core::serde_json::to_string(&r["after"]).expect("json"))
        .collect();
    assert_eq!(
        all,
        vec![
            r#"{"id":1,"amount":10.00,"memo":"ok"}"#,
            r#"{"id":2,"amount":20.00,"memo":"ok"}"#,
            r#"{"id":3,"amount":30.00,"memo":"poison"}"#,
            r#"{"id":4,"amount":40.00,"memo":"ok"}"#,
        ]
    );
}
