//! `state: {type: postgres}` (feature `state-postgres`) against the real PostgreSQL
//! (`FAUCET_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`; start it with
//! `scripts/services.sh`). Each test uses its own table.

use std::time::Duration;

use faucet_core::state::{LeaseHolder, LeaseOutcome, LeaseRequest, StateStore as _};
use faucet_state_postgres::PostgresStateStore;
use sqlx::PgPool;

use crate::support::{Dir, bookmark_of, csv_pipeline, ids, numbered_csv};
use crate::support::{pg_pool, pg_url, runtime};

/// A pool on the test server, after dropping `table` and its lease table.
async fn fresh(table: &str) -> PgPool {
    let pool = pg_pool().await;
    drop_tables(&pool, table).await;
    pool
}

async fn drop_tables(pool: &PgPool, table: &str) {
    for t in [table.to_owned(), format!("{table}_lease")] {
        sqlx::query(&format!("DROP TABLE IF EXISTS \"{t}\""))
            .execute(pool)
            .await
            .expect("drop table");
    }
}

fn pipeline(name: &str, table: &str) -> String {
    csv_pipeline(
        name,
        &format!(
            "  state: {{ type: postgres, config: {{ url: \"${{env:FAUCET_CLI_STATE_PG_URL}}\", table: {table}, ensure_table: \"true\" }} }}\n  batch_size: 2\n"
        ),
    )
}

#[test]
fn postgres_state_resumes_across_runs_and_doctor_checks_it() {
    let table = "faucet_cli_state_resume";
    let rt = runtime();
    let pool = rt.block_on(fresh(table));
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 5, true));
    dir.write("p.yaml", pipeline("pgstate", table));
    let env = [("FAUCET_CLI_STATE_PG_URL", pg_url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();

    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["5 records in 3 pages", "state key pgstate"]);
    let stored: serde_json::Value = rt
        .block_on(
            sqlx::query_scalar(&format!(
                "SELECT value FROM \"{table}\" WHERE key = 'pgstate'"
            ))
            .fetch_one(&pool),
        )
        .expect("bookmark row");
    assert!(
        stored["sink"]
            .as_str()
            .is_some_and(|s| s.ends_with("out/data.jsonl")),
        "the sink is stored beside the bookmark: {stored}"
    );
    assert_eq!(bookmark_of(stored.clone())["records"], 5, "{stored}");
    assert!(!dir.join(".faucet").exists(), "no file state");

    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["0 records in 0 pages"]);
    dir.append("data.csv", &numbered_csv(6, 3, false));
    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["3 records in 2 pages"]);
    assert_eq!(
        ids(&dir.jsonl("out/data.jsonl")),
        (1..=8).collect::<Vec<_>>()
    );

    let run = dir.faucet_env(&["doctor", "p.yaml"], &env);
    run.expect_code(0)
        .stdout_has(&["✓ state postgres ", table, "all 4 checks passed"]);
    let left: i64 = rt
        .block_on(
            sqlx::query_scalar(&format!(
                "SELECT count(*) FROM \"{table}\" WHERE key = '__faucet_doctor__'"
            ))
            .fetch_one(&pool),
        )
        .expect("count");
    assert_eq!(left, 0, "doctor left its probe behind");
    rt.block_on(drop_tables(&pool, table));
}

#[test]
fn a_held_postgres_lease_exits_4_until_it_is_released() {
    let table = "faucet_cli_state_lease";
    let rt = runtime();
    let pool = rt.block_on(fresh(table));
    let store = rt
        .block_on(async {
            let s = PostgresStateStore::connect_with(&pg_url(), 2, table).await?;
            s.ensure_table().await?;
            Ok::<_, faucet_core::FaucetError>(s)
        })
        .expect("store");
    let outcome = rt
        .block_on(store.acquire_lease(&LeaseRequest::new(
            "pglease",
            &LeaseHolder::this_process(),
            Duration::from_secs(60),
        )))
        .expect("acquire");
    let LeaseOutcome::Acquired(lease) = outcome else {
        panic!("lease not acquired: {outcome:?}");
    };
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 3, true));
    dir.write("p.yaml", pipeline("pglease", table));
    let url = pg_url();
    let env = [("FAUCET_CLI_STATE_PG_URL", url.as_str())];
    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(4)
        .stderr_has(&["`pglease` is in use by another run"]);
    assert!(!dir.join("out").exists());
    rt.block_on(store.release_lease(&lease)).expect("release");
    dir.faucet_env(&["run", "p.yaml"], &env).expect_code(0);
    assert_eq!(ids(&dir.jsonl("out/data.jsonl")), vec![1, 2, 3]);
    rt.block_on(drop_tables(&pool, table));
}

#[test]
fn doctor_gives_up_on_a_silent_server_after_its_timeout() {
    // A socket that accepts connections (the kernel completes the handshake) and never
    // answers: the probe must stop at --timeout-secs, say so, and not print the password.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 1, true));
    dir.write(
        "p.yaml",
        csv_pipeline(
            "silent",
            &format!(
                "  state: {{ type: postgres, config: {{ url: \"postgres://u:silent-secret@127.0.0.1:{port}/x\" }} }}\n"
            ),
        ),
    );
    let started = std::time::Instant::now();
    let run = dir.faucet(&["doctor", "p.yaml", "--timeout-secs", "1"]);
    run.expect_code(1).stdout_has(&[
        "✗ state postgres",
        "no answer within 1 s",
        "1 of 4 checks failed",
    ]);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(!run.stdout.contains("silent-secret") && !run.stderr.contains("silent-secret"));
    drop(silent);
}

/// A second SIGTERM exits at once with 130, even while the run is stuck (here: its state
/// store is locked by another session), having written nothing; the first one alone waits
/// for the page in hand. Its lease stays until it expires; the next run waits for that and
/// completes exactly.
#[test]
fn a_second_signal_exits_130_at_once_and_loses_nothing() {
    let table = "faucet_cli_state_second_signal";
    let rt = runtime();
    let pool = rt.block_on(fresh(table));
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 5, true));
    dir.write("p.yaml", pipeline("pgsignal", table));
    let env = [("FAUCET_CLI_STATE_PG_URL", pg_url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    dir.faucet_env(&["run", "p.yaml"], &env).expect_code(0);
    dir.append("data.csv", &numbered_csv(6, 3, false));

    // Another session holds the state table: the run blocks reading its bookmark.
    let mut locker = rt.block_on(pool.begin()).expect("begin");
    rt.block_on(
        sqlx::query(&format!("LOCK TABLE \"{table}\" IN ACCESS EXCLUSIVE MODE"))
            .execute(&mut *locker),
    )
    .expect("lock");
    let child = crate::support::faucet_command()
        .current_dir(dir.path())
        .envs(env.iter().copied())
        .args(["run", "p.yaml", "--lease-ttl", "3s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn faucet");
    let pid = child.id().to_string();
    let term = || {
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(ok.success());
    };
    std::thread::sleep(Duration::from_millis(700));
    term();
    std::thread::sleep(Duration::from_millis(500));
    term();
    let started = std::time::Instant::now();
    let run = crate::support::Run::from_output(child.wait_with_output().expect("wait"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the second signal did not exit at once"
    );
    run.expect_code(130)
        .stderr_has(&["SIGTERM again: exiting at once"]);
    rt.block_on(locker.rollback()).expect("unlock");
    assert_eq!(
        ids(&dir.jsonl("out/data.jsonl")),
        (1..=5).collect::<Vec<_>>(),
        "nothing written by the interrupted run"
    );

    // The exited run could not release its lease: the next run waits for it to expire.
    dir.faucet_env(&["run", "p.yaml", "--wait-for-lease", "20s"], &env)
        .expect_code(0)
        .stdout_has(&["3 records"]);
    assert_eq!(
        ids(&dir.jsonl("out/data.jsonl")),
        (1..=8).collect::<Vec<_>>()
    );
    rt.block_on(drop_tables(&pool, table));
}

#[test]
fn eight_first_runs_at_once_create_one_fresh_state_table_without_a_catalog_race() {
    // Concurrent `CREATE TABLE IF NOT EXISTS` of one name can fail on PostgreSQL's catalog
    // ("duplicate key value violates unique constraint pg_type_typname_nsp_index"): every
    // first run must still succeed.
    let rt = runtime();
    let url = pg_url();
    for round in 0..3 {
        let table = format!("faucet_cli_state_race{round}_{}", std::process::id());
        let pool = rt.block_on(fresh(&table));
        let dirs: Vec<Dir> = (0..8)
            .map(|i| {
                let dir = Dir::new();
                dir.write("data.csv", numbered_csv(1, 3, true));
                dir.write("p.yaml", pipeline(&format!("race{i}"), &table));
                dir
            })
            .collect();
        let children: Vec<_> = dirs
            .iter()
            .map(|dir| {
                crate::support::faucet_command()
                    .current_dir(dir.path())
                    .args(["run", "p.yaml"])
                    .env("FAUCET_CLI_STATE_PG_URL", &url)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn faucet run")
            })
            .collect();
        for (i, child) in children.into_iter().enumerate() {
            let out = child.wait_with_output().expect("wait");
            assert!(
                out.status.success(),
                "round {round}, run {i}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for dir in &dirs {
            assert_eq!(ids(&dir.jsonl("out/data.jsonl")), [1, 2, 3]);
        }
        rt.block_on(drop_tables(&pool, &table));
    }
}
