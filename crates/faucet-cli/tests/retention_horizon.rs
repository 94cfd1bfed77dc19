//! The retention horizon through the binary: a continuous `postgres-cdc` run with
//! `--metrics-listen`, on a private server with `max_slot_wal_keep_size = 256MB`, while the
//! test writes WAL fast (into a table outside the publication): the second sample measures
//! the rate, `faucet_slot_retention_horizon_seconds` shows a finite horizon under an hour that
//! agrees with the retained bytes and the limit, `/metrics` passes `promtool`, and the log
//! warns that the slot would be invalidated if the pipeline stayed stopped.

use std::time::{Duration, Instant};

use faucet_test_support::private_pg::PrivatePostgres;

use crate::lease_e2e::Spawned;
use crate::postgres_connectors::cdc_pipeline;
use crate::support::{Dir, faucet_unarmed, runtime};
use crate::zombie_fence::{http_get, metrics_addr};

fn series(text: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{pipeline=\"cdc\",row=\"\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn a_short_horizon_is_measured_exposed_and_warned_of() {
    let server = PrivatePostgres::start(
        None,
        &[
            "fsync=off",
            "wal_level=logical",
            "max_slot_wal_keep_size=256MB",
            "max_wal_size=1GB",
        ],
    );
    let url = server.url();
    let rt = runtime();
    let exec = |sql: &str| {
        rt.block_on(async {
            let mut c = crate::support::pg_connect(&url).await;
            sqlx::raw_sql(sql)
                .execute(&mut c)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        });
    };
    exec(
        "CREATE TABLE public.orders (id int PRIMARY KEY, status text NOT NULL); \
         CREATE TABLE public.filler (id bigint, pad text)",
    );
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        cdc_pipeline("public", "horizon_slot", "horizon_pub", true),
    );
    let mut run = Spawned::spawn(
        &dir,
        "run",
        faucet_unarmed()
            .current_dir(dir.path())
            .args(["run", "p.yaml", "--metrics-listen", "127.0.0.1:0"])
            .env("FAUCET_CLI_PG_URL", &url),
    );
    run.wait_until("the metrics listener", |r| {
        metrics_addr(&r.stderr()).is_some()
    });
    let addr = metrics_addr(&run.stderr()).expect("address");
    run.wait_until("the first sample", |_| {
        series(
            &http_get(&addr, "/metrics"),
            "faucet_slot_retained_wal_bytes",
        )
        .is_some()
    });

    // About 3 MB of WAL every 0.3 s until the rate is known and the warning is out.
    let started = Instant::now();
    let mut n = 0_i64;
    let text = loop {
        exec(&format!(
            "INSERT INTO public.filler SELECT g, repeat('w', 500) FROM generate_series({}, {}) g",
            n,
            n + 4_999
        ));
        n += 5_000;
        let text = http_get(&addr, "/metrics");
        let warned = run.stderr().contains("its replication slot would be");
        if warned
            && series(&text, "faucet_slot_retention_horizon_seconds").is_some_and(f64::is_finite)
        {
            break text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no horizon or no warning within 60 s:\n{text}\n{}",
            run.stderr()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    crate::serve::promtool_check(&text);
    let horizon = series(&text, "faucet_slot_retention_horizon_seconds").expect("horizon");
    let retained = series(&text, "faucet_slot_retained_wal_bytes").expect("retained");
    assert!(
        horizon > 0.0 && horizon < 3600.0,
        "the horizon at ~10 MB/s against 256 MB: {horizon} s"
    );
    assert!(
        (0.0..256.0 * 1024.0 * 1024.0).contains(&retained),
        "retained {retained} B"
    );
    let stderr = run.stderr();
    assert!(
        stderr
            .contains("if this pipeline stayed stopped, its replication slot would be invalidated"),
        "{stderr}"
    );
    run.signal("-TERM");
    run.wait(Duration::from_secs(60)).expect_code(0);
    drop(server);
}
