//! The slot's retained WAL and retention horizon (`Source::retention_monitor` of
//! `postgres-cdc`), against a private server (wal_level=logical) with
//! `max_slot_wal_keep_size` set, and one without (unlimited): the retained bytes equal what
//! the server reports for the slot, the limit is the setting, the rate follows the WAL the
//! test writes, and the horizon is the server's `safe_wal_size` over that rate.

use std::time::{Duration, Instant};

use faucet_connectors::postgres::cdc::{PostgresCdcConfig, PostgresCdcSource};
use faucet_core::{Retention, RetentionMonitor, Source};
use faucet_test_support::private_pg::PrivatePostgres;

async fn conn(url: &str) -> sqlx::PgConnection {
    <sqlx::PgConnection as sqlx::Connection>::connect(url)
        .await
        .expect("private server")
}

async fn exec(url: &str, sql: &str) {
    sqlx::raw_sql(sql)
        .execute(&mut conn(url).await)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `(pg_current_wal_lsn() - restart_lsn, safe_wal_size)` of `slot`, as the server says.
async fn server_view(url: &str, slot: &str) -> (i64, Option<i64>) {
    sqlx::query_as(
        "SELECT (pg_current_wal_lsn() - restart_lsn)::bigint, safe_wal_size \
         FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(slot)
    .fetch_one(&mut conn(url).await)
    .await
    .expect("the slot")
}

/// A sample taken while nothing else writes WAL, bracketed by the server's own figures:
/// retried until the server's figure is the same before and after (then the sample must
/// equal it exactly).
async fn exact_sample(
    monitor: &mut Box<dyn RetentionMonitor>,
    url: &str,
    slot: &str,
) -> (Retention, Option<i64>) {
    for _ in 0..20 {
        let before = server_view(url, slot).await;
        let r = monitor.sample(None).await.expect("sample");
        let after = server_view(url, slot).await;
        if before == after {
            assert_eq!(
                r.retained_bytes.map(|b| b as i64),
                Some(before.0),
                "retained bytes differ from pg_replication_slots"
            );
            return (r, before.1);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server kept writing WAL between samples");
}

fn source(url: &str, slot: &str) -> PostgresCdcSource {
    PostgresCdcSource::new(PostgresCdcConfig::new(url, slot, "p", ["public.t"])).expect("config")
}

#[tokio::test]
async fn retained_wal_limit_rate_and_horizon_are_the_server_s() {
    let server = tokio::task::spawn_blocking(|| {
        PrivatePostgres::start(
            None,
            &[
                "fsync=off",
                "wal_level=logical",
                "max_slot_wal_keep_size=256MB",
                "max_wal_size=1GB",
            ],
        )
    })
    .await
    .expect("private server");
    let url = server.url();
    exec(&url, "CREATE TABLE public.t (id int PRIMARY KEY, pad text)").await;
    exec(
        &url,
        "SELECT pg_create_logical_replication_slot('retained', 'pgoutput')",
    )
    .await;
    let mut monitor = source(&url, "retained")
        .retention_monitor()
        .expect("postgres-cdc has a retention monitor");

    let (first, _) = exact_sample(&mut monitor, &url, "retained").await;
    assert_eq!(first.limit_bytes, Some(256 * 1024 * 1024));
    assert_eq!(first.rate_bytes_per_second, None, "one sample: no rate yet");
    assert_eq!(first.horizon_seconds, None);
    let started = Instant::now();

    // About 20 MB of WAL over ~2 s while nobody reads the slot.
    let lsn = |url: String| async move {
        let v: i64 = sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0')::bigint")
            .fetch_one(&mut conn(&url).await)
            .await
            .expect("lsn");
        v
    };
    let lsn_before = lsn(url.clone()).await;
    for round in 0..4 {
        exec(
            &url,
            &format!(
                "INSERT INTO public.t SELECT g, repeat('x', 500) FROM \
                 generate_series({}, {}) g",
                round * 10_000,
                round * 10_000 + 9_999
            ),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let written = lsn(url.clone()).await - lsn_before;
    assert!(
        written > 10_000_000,
        "the test wrote {written} bytes of WAL"
    );
    let (second, safe) = exact_sample(&mut monitor, &url, "retained").await;
    let span = started.elapsed().as_secs_f64();
    assert!(
        second.retained_bytes.unwrap_or(0)
            >= first.retained_bytes.unwrap_or(u64::MAX / 2) + written as u64,
        "the retained WAL grew by what was written: {:?} -> {:?} (+{written})",
        first.retained_bytes,
        second.retained_bytes
    );
    let rate = second
        .rate_bytes_per_second
        .expect("a rate after two samples");
    // The rate covers at least the WAL written, over at most the span between the samples.
    assert!(
        rate >= written as f64 / (span + 1.0) && rate <= 2.0 * written as f64 / 1.0,
        "rate {rate} B/s for {written} B over about {span:.1} s"
    );
    let safe = safe.expect("safe_wal_size with a limit");
    assert_eq!(second.remaining_bytes, Some(safe as u64));
    let horizon = second.horizon_seconds.expect("a horizon");
    assert!(
        (horizon - safe as f64 / rate).abs() < 1e-6 * horizon.max(1.0),
        "horizon {horizon} = safe_wal_size {safe} / rate {rate}"
    );
    assert!(horizon > 0.0 && horizon < 3600.0, "horizon {horizon} s");

    // Unlimited (-1, the default): retained bytes, but no limit and no horizon.
    let server = tokio::task::spawn_blocking(move || {
        server.restart(&["fsync=off", "wal_level=logical"]);
        server
    })
    .await
    .expect("restart");
    let url = server.url();
    let mut monitor = source(&url, "retained")
        .retention_monitor()
        .expect("monitor");
    let (r, safe) = exact_sample(&mut monitor, &url, "retained").await;
    assert_eq!(safe, None);
    assert_eq!((r.limit_bytes, r.remaining_bytes), (None, None));
    exec(
        &url,
        "INSERT INTO public.t SELECT g, 'y' FROM generate_series(100000, 100999) g",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (r, _) = exact_sample(&mut monitor, &url, "retained").await;
    assert!(r.rate_bytes_per_second.is_some_and(|v| v > 0.0));
    assert_eq!(r.horizon_seconds, None, "no horizon without a limit");

    // A dropped slot is an error naming it.
    exec(&url, "SELECT pg_drop_replication_slot('retained')").await;
    let e = monitor.sample(None).await.expect_err("no slot");
    assert!(e.to_string().contains("`retained` does not exist"), "{e}");
}
