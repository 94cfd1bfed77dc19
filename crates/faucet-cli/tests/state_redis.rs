//! `state: {type: redis}` (feature `state-redis`) against the real Redis
//! (`FAUCET_TEST_REDIS_URL`, default `redis://127.0.0.1:6379/`; start it with
//! `scripts/services.sh`). The test uses its own key prefix.

use redis::aio::MultiplexedConnection;

use crate::support::{
    Dir, bookmark_of, csv_pipeline, ids, numbered_csv, redis_connect, redis_url, runtime,
};

async fn raw() -> MultiplexedConnection {
    redis_connect(&redis_url()).await
}

async fn clear(conn: &mut MultiplexedConnection, prefix: &str) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(conn)
        .await
        .expect("KEYS");
    for key in keys {
        redis::cmd("DEL")
            .arg(&key)
            .query_async::<()>(conn)
            .await
            .expect("DEL");
    }
}

#[test]
fn redis_state_resumes_across_runs_and_doctor_checks_it() {
    let prefix = "faucet-cli-test:resume:";
    let rt = runtime();
    let mut conn = rt.block_on(raw());
    rt.block_on(clear(&mut conn, prefix));

    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 4, true));
    dir.write(
        "p.yaml",
        csv_pipeline(
            "rs",
            &format!(
                "  state: {{ type: redis, config: {{ url: \"${{env:FAUCET_CLI_STATE_REDIS_URL}}\", prefix: \"{prefix}\" }} }}\n"
            ),
        ),
    );
    let url = redis_url();
    let env = [("FAUCET_CLI_STATE_REDIS_URL", url.as_str())];
    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["4 records in 1 page,"]);
    let stored: String = rt
        .block_on(
            redis::cmd("GET")
                .arg(format!("{prefix}rs"))
                .query_async(&mut conn),
        )
        .expect("bookmark key");
    let stored: serde_json::Value = serde_json::from_str(&stored).expect("json bookmark");
    assert!(
        stored["sink"]
            .as_str()
            .is_some_and(|s| s.starts_with("jsonl /")),
        "the sink is stored beside the bookmark: {stored}"
    );
    assert_eq!(bookmark_of(stored.clone())["records"], 4, "{stored}");

    dir.append("data.csv", &numbered_csv(5, 2, false));
    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["2 records in 1 page,"]);
    assert_eq!(
        ids(&dir.jsonl("out/data.jsonl")),
        (1..=6).collect::<Vec<_>>()
    );

    dir.faucet_env(&["doctor", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["✓ state redis ", prefix]);
    rt.block_on(clear(&mut conn, prefix));
}
