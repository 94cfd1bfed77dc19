//! postgres-cdc: shared fixtures, and the bounded/continuous run behaviour.
//!
//! Every test gets its own schema, slot and publication (unique suffix); the [`Fixture`]'s
//! `Drop` drops the slot (so no WAL stays pinned), the publication and the schema, also when
//! the test fails. A PostgreSQL that cannot be reached fails the test with a message naming
//! the service and `scripts/services.sh`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use faucet_connectors::postgres::cdc::{PostgresCdcConfig, PostgresCdcSource};
use faucet_core::serde_json::{self, Value as Json};
use faucet_core::testing::MemorySink;
use faucet_core::{Bookmark, Page, PageStream, Pipeline, ReadOptions, RunStreamOptions, Source};
use sqlx::{Connection, PgConnection};
use tokio_util::sync::CancellationToken;

use faucet_test_support::Service;
pub(crate) use faucet_test_support::{pg_url, unique_suffix};

/// A plain connection to the test server, or a panic naming the service and the script.
pub(crate) async fn admin() -> PgConnection {
    Service::Postgres.expect_up(PgConnection::connect(&pg_url()).await)
}

/// One test's schema, slot and publication.
pub(crate) struct Fixture {
    pub(crate) schema: String,
    pub(crate) slot: String,
    pub(crate) publication: String,
    /// Extra roles to drop at the end.
    pub(crate) roles: Vec<String>,
}

impl Fixture {
    /// Creates the schema `cdc_<tag>_<suffix>`.
    pub(crate) async fn new(tag: &str) -> Self {
        let suffix = unique_suffix();
        let fx = Self {
            schema: format!("cdc_{tag}_{suffix}"),
            slot: format!("faucet_t_{tag}_{suffix}"),
            publication: format!("pub_{tag}_{suffix}"),
            roles: Vec::new(),
        };
        fx.sql("CREATE SCHEMA {s}").await;
        fx
    }

    /// `sql` with `{s}` replaced by the schema and `{p}` by the publication.
    pub(crate) fn expand(&self, sql: &str) -> String {
        sql.replace("{s}", &self.schema)
            .replace("{p}", &self.publication)
            .replace("{slot}", &self.slot)
    }

    /// Runs `sql` (several statements allowed) on a fresh connection.
    pub(crate) async fn sql(&self, sql: &str) {
        let mut c = admin().await;
        sqlx::raw_sql(&self.expand(sql))
            .execute(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// `schema.table`.
    pub(crate) fn table(&self, name: &str) -> String {
        format!("{}.{name}", self.schema)
    }

    /// A bounded config over `tables` (unqualified names in this fixture's schema).
    pub(crate) fn config(&self, tables: &[&str]) -> PostgresCdcConfig {
        PostgresCdcConfig::new(
            pg_url(),
            self.slot.clone(),
            self.publication.clone(),
            tables.iter().map(|t| self.table(t)),
        )
    }

    /// A source over `tables`, creating the publication for them.
    pub(crate) fn source(&self, tables: &[&str]) -> PostgresCdcSource {
        let mut config = self.config(tables);
        config.create_publication = true;
        PostgresCdcSource::new(config).expect("valid config")
    }

    /// The slot's `confirmed_flush_lsn`, as text.
    pub(crate) async fn confirmed_flush(&self) -> Option<String> {
        let mut c = admin().await;
        sqlx::query_scalar(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(&self.slot)
        .fetch_optional(&mut c)
        .await
        .expect("pg_replication_slots")
        .flatten()
    }

    /// Waits until no process holds the slot (a closed session takes a moment to release).
    pub(crate) async fn wait_slot_released(&self) {
        let mut c = admin().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let active: Option<bool> =
                sqlx::query_scalar("SELECT active FROM pg_replication_slots WHERE slot_name = $1")
                    .bind(&self.slot)
                    .fetch_optional(&mut c)
                    .await
                    .expect("pg_replication_slots");
            if active != Some(true) || Instant::now() > deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let (slot, schema, publication, roles) = (
            self.slot.clone(),
            self.schema.clone(),
            self.publication.clone(),
            self.roles.clone(),
        );
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let Ok(mut c) = PgConnection::connect(&pg_url()).await else {
                    return;
                };
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    let row: Option<(bool, Option<i32>)> = sqlx::query_as(
                        "SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1",
                    )
                    .bind(&slot)
                    .fetch_optional(&mut c)
                    .await
                    .unwrap_or(None);
                    match row {
                        None => break,
                        Some((false, _)) => {
                            let _ = sqlx::query("SELECT pg_drop_replication_slot($1)")
                                .bind(&slot)
                                .execute(&mut c)
                                .await;
                        }
                        Some((true, Some(pid))) if Instant::now() > deadline => {
                            let _ = sqlx::query("SELECT pg_terminate_backend($1)")
                                .bind(pid)
                                .execute(&mut c)
                                .await;
                        }
                        Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                    if Instant::now() > deadline + Duration::from_secs(10) {
                        break;
                    }
                }
                let _ = sqlx::raw_sql(&format!(
                    "DROP PUBLICATION IF EXISTS \"{publication}\"; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                ))
                .execute(&mut c)
                .await;
                for role in roles {
                    let _ = sqlx::raw_sql(&format!("DROP ROLE IF EXISTS \"{role}\""))
                        .execute(&mut c)
                        .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// Read options with `batch_size`, a fresh cancellation token, and a page delay of an hour:
/// these tests check paging by `batch_size` and resumption, which must not depend on how
/// fast a debug build decodes; the delay's own bound is tested in `postgres_cdc_latency`.
pub(crate) fn read_options(batch_size: usize) -> ReadOptions {
    ReadOptions {
        batch_size,
        max_page_delay: std::time::Duration::from_secs(3600),
        cancel: CancellationToken::new(),
    }
}

/// Opens `source` from `from` and reads to the end like the run loop does (each page's
/// bookmark reported durable after the page), returning the pages.
pub(crate) async fn read_all(
    source: &dyn Source,
    from: Option<Bookmark>,
    batch_size: usize,
) -> Vec<Page> {
    let mut stream = source
        .open(from, read_options(batch_size))
        .await
        .expect("open");
    let pages = drain(stream.as_mut()).await;
    drop(stream);
    pages
}

/// Reads a stream to its end, acknowledging every page.
pub(crate) async fn drain(stream: &mut (dyn PageStream + '_)) -> Vec<Page> {
    let mut pages = Vec::new();
    while let Some(page) = tokio::time::timeout(Duration::from_secs(60), stream.next_page())
        .await
        .expect("a bounded stream must end by itself")
        .expect("next_page")
    {
        if let Some(b) = page.bookmark() {
            stream.bookmark_durable(b).await.expect("bookmark_durable");
        }
        pages.push(page);
    }
    pages
}

/// Creates the slot (and publication) by opening the source once with nothing to read; the
/// changes made afterwards are what the next read sees.
pub(crate) async fn prime(fx: &Fixture, source: &dyn Source) {
    let pages = read_all(source, None, 100).await;
    assert!(
        pages.iter().all(Page::is_empty),
        "a fresh slot has no changes"
    );
    fx.wait_slot_released().await;
}

/// The records of `pages` as JSON objects.
pub(crate) fn records(pages: &[Page]) -> Vec<Json> {
    pages
        .iter()
        .flat_map(|p| p.rows().map(|r| r.to_json()))
        .collect()
}

/// A record without its `lsn` and `commit_ts`, as compact JSON text (numbers keep their exact
/// digits), for comparing with an expected line.
pub(crate) fn shape(record: &Json) -> String {
    let kept: serde_json::Map<String, Json> = record
        .as_object()
        .expect("a record is an object")
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "lsn" | "commit_ts"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::to_string(&kept).expect("json")
}

#[tokio::test]
async fn bounded_run_stops_by_itself_with_every_change() {
    let fx = Fixture::new("bounded").await;
    fx.sql("CREATE TABLE {s}.t (id int PRIMARY KEY, v text)")
        .await;
    let source = fx.source(&["t"]);
    prime(&fx, &source).await;
    fx.sql("INSERT INTO {s}.t SELECT g, 'v' || g FROM generate_series(1, 25) g")
        .await;

    let sink = MemorySink::new();
    let started = Instant::now();
    let summary = tokio::time::timeout(
        Duration::from_secs(60),
        Pipeline::new(&source, &sink)
            .with_options(RunStreamOptions {
                batch_size: 10,
                state_key: "cdc_bounded".into(),
                ..Default::default()
            })
            .run(),
    )
    .await
    .expect("a bounded run ends by itself")
    .expect("run");
    assert_eq!(summary.records_out, 25);
    assert!(summary.pages >= 3, "pages of at most 10: {summary:?}");
    let rows = sink.rows();
    let ids: Vec<i64> = rows
        .iter()
        .map(|r| r["after"]["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, (1..=25).collect::<Vec<_>>());
    assert!(rows.iter().all(|r| r["op"] == "c"));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );

    // Nothing new: the next bounded run returns at once, with nothing.
    fx.wait_slot_released().await;
    let again = Pipeline::new(&source, &sink)
        .with_options(RunStreamOptions {
            batch_size: 10,
            state_key: "cdc_bounded_again".into(),
            ..Default::default()
        })
        .run();
    let summary = tokio::time::timeout(Duration::from_secs(30), again)
        .await
        .expect("ends")
        .expect("run");
    assert_eq!(summary.records_out, 0, "{summary:?}");
}

#[tokio::test]
async fn a_bounded_run_reports_the_wal_distance_to_its_end() {
    use faucet_core::ExtentUnit;
    use faucet_core::pipeline::Progress;
    use std::sync::Mutex;

    let fx = Fixture::new("extent").await;
    fx.sql("CREATE TABLE {s}.t (id int PRIMARY KEY, v text)")
        .await;
    let source = fx.source(&["t"]);
    prime(&fx, &source).await;
    fx.sql("INSERT INTO {s}.t SELECT g, repeat('v', 200) FROM generate_series(1, 45) g")
        .await;
    let seen: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let on_progress = {
        let seen = seen.clone();
        Arc::new(move |p: &Progress| seen.lock().expect("lock").push(p.clone()))
    };
    let sink = MemorySink::new();
    let summary = tokio::time::timeout(
        Duration::from_secs(60),
        Pipeline::new(&source, &sink)
            .with_options(RunStreamOptions {
                batch_size: 10,
                state_key: "cdc_extent".into(),
                on_progress: Some(on_progress),
                ..Default::default()
            })
            .run(),
    )
    .await
    .expect("a bounded run ends by itself")
    .expect("run");
    assert_eq!(summary.records_out, 45);
    let seen = seen.lock().expect("lock").clone();
    assert!(seen.len() >= 5, "pages of at most 10: {}", seen.len());
    let extents: Vec<_> = seen
        .iter()
        .map(|p| {
            p.extent
                .clone()
                .expect("every page of a bounded run has an extent")
        })
        .collect();
    let total = extents[0].total;
    // 45 rows of 200 bytes are more than 9 kB of WAL.
    assert!(total > 9_000, "total {total}");
    let mut before = 0;
    for e in &extents {
        assert_eq!(e.unit, ExtentUnit::WalBytes);
        assert!(!e.estimate);
        assert_eq!(e.total, total, "one end for the whole run");
        assert!(e.done >= before, "the position only grows: {extents:?}");
        before = e.done;
    }
    assert!(
        extents[0].done < total,
        "the first page is short of the end: {extents:?}"
    );
    let last = extents.last().expect("last");
    assert_eq!(last.done, total, "the run reaches its end: {extents:?}");
    assert_eq!(last.percent(), 100.0);
    assert_eq!(summary.extent.as_ref(), Some(last));
}

#[tokio::test]
async fn continuous_run_stops_on_cancel_with_the_page_in_hand() {
    let fx = Fixture::new("cancel").await;
    fx.sql("CREATE TABLE {s}.t (id int PRIMARY KEY)").await;
    let mut config = fx.config(&["t"]);
    config.create_publication = true;
    config.continuous = true;
    let source = PostgresCdcSource::new(config).expect("config");
    prime_continuous(&fx, &source).await;
    fx.sql("INSERT INTO {s}.t SELECT generate_series(1, 5)")
        .await;

    // A page of up to 1000 holds the 5 changes. The stream hands it over as soon as it is
    // caught up, or at the cancel if that comes first; either way the changes come out, then
    // the stream ends once cancelled.
    let options = read_options(1000);
    let cancel = options.cancel.clone();
    let mut stream = source.open(None, options).await.expect("open");
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        cancel.cancel();
    });
    let page = tokio::time::timeout(Duration::from_secs(20), stream.next_page())
        .await
        .expect("cancel ends the wait")
        .expect("page")
        .expect("the page in hand");
    let ids: Vec<i64> = records(std::slice::from_ref(&page))
        .iter()
        .map(|r| r["after"]["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        page.extent(),
        None,
        "a continuous run has no end to measure"
    );
    stream
        .bookmark_durable(page.bookmark().expect("bookmark"))
        .await
        .expect("ack");
    // When the changes came out before the cancel, a keepalive may have moved the position
    // since: the cancel then hands that over as one last page without records. Nothing else.
    let mut last_pages = 0;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), stream.next_page())
            .await
            .expect("the cancelled stream ends")
            .expect("ok");
        let Some(page) = next else { break };
        assert_eq!(page.len(), 0, "no change after the cancel: {page:?}");
        last_pages += 1;
        assert!(last_pages <= 1, "the stream ends after the cancelled page");
        stream
            .bookmark_durable(page.bookmark().expect("bookmark"))
            .await
            .expect("ack");
    }
    drop(stream);

    // Through the run loop: a continuous run follows new changes until cancelled.
    fx.wait_slot_released().await;
    let sink = MemorySink::new();
    let cancel = CancellationToken::new();
    let options = RunStreamOptions {
        batch_size: 100,
        state_key: "cdc_cancel".into(),
        cancel: cancel.clone(),
        ..Default::default()
    };
    let run = {
        let sink = sink.clone();
        let source = Arc::new(source);
        tokio::spawn(async move {
            Pipeline::new(source.as_ref(), &sink)
                .with_options(options)
                .run()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    fx.sql("INSERT INTO {s}.t SELECT generate_series(6, 8)")
        .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while sink.rows().len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    let summary = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("cancel ends the run")
        .expect("task")
        .expect("run");
    assert!(summary.cancelled, "{summary:?}");
    assert_eq!(summary.extent, None);
    let ids: Vec<i64> = sink
        .rows()
        .iter()
        .map(|r| r["after"]["id"].as_i64().expect("id"))
        .collect();
    // No state store entry: the run starts at the slot's position, which the acknowledged
    // page of 1-5 moved past (case 03 variant B: never from the current WAL position).
    assert_eq!(ids, vec![6, 7, 8]);
}

/// As [`prime`], for a continuous source: open, cancel at once, drain.
pub(crate) async fn prime_continuous(fx: &Fixture, source: &dyn Source) {
    let options = read_options(100);
    options.cancel.cancel();
    let mut stream = source.open(None, options).await.expect("open");
    let pages = drain(stream.as_mut()).await;
    assert!(pages.iter().all(Page::is_empty));
    drop(stream);
    fx.wait_slot_released().await;
}

#[tokio::test]
async fn passes_the_source_conformance_battery() {
    use faucet_core::testing::conformance;

    conformance::config_is_strict::<PostgresCdcConfig>(&serde_json::json!({
        "connection_url": "postgres://u:p@localhost/db",
        "slot_name": "s",
        "publication": "p",
        "tables": ["public.t"],
        "create_publication": true,
        "continuous": false
    }))
    .expect("config_is_strict");

    let fx = Fixture::new("conf").await;
    fx.sql("CREATE TABLE {s}.t (id int PRIMARY KEY, v text)")
        .await;
    let source = fx.source(&["t"]);
    prime(&fx, &source).await;
    // Several transactions, one larger than a page, an update and a delete.
    fx.sql("INSERT INTO {s}.t SELECT g, 'a' FROM generate_series(1, 12) g")
        .await;
    fx.sql("UPDATE {s}.t SET v = 'b' WHERE id <= 3").await;
    fx.sql("DELETE FROM {s}.t WHERE id = 12").await;
    fx.sql("INSERT INTO {s}.t VALUES (13, 'c')").await;
    fx.wait_slot_released().await;

    // The conformance reads never acknowledge, so every bookmark stays resumable.
    conformance::source_pages_are_bounded(&source, 5, 17)
        .await
        .expect("source_pages_are_bounded");
    conformance::source_bookmarks_round_trip(&source, 5)
        .await
        .expect("source_bookmarks_round_trip");

    let foreign = PostgresCdcSource::new(fx.config(&["t"])).expect("config");
    conformance::errors_not_panics("open from a bookmark of another source", async move {
        foreign
            .open(Some(serde_json::json!({"offset": 3})), read_options(5))
            .await
            .map(|_| ())
    })
    .await
    .expect("errors_not_panics");
    let unreachable = PostgresCdcSource::new(PostgresCdcConfig::new(
        "postgres://nobody@127.0.0.1:1/none",
        "s",
        "p",
        ["public.t"],
    ))
    .expect("config");
    conformance::errors_not_panics("check an unreachable server", async move {
        unreachable.check().await
    })
    .await
    .expect("errors_not_panics");
}
