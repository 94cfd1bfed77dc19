//! `faucet run` with the `postgres` source and sink (feature `postgres`) against the real
//! PostgreSQL (`FAUCET_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`; start
//! it with `scripts/services.sh`). Each test works in its own schema.

use sqlx::PgPool;

use crate::support::pg::{CdcObjectsGuard, drop_cdc_test_objects, unique_suffix};
use crate::support::{Dir, ids, numbered_csv};
use crate::support::{pg_pool, pg_url, runtime};

/// A pool on the test server with `schema` dropped and created again.
pub(crate) async fn fresh_schema(schema: &str) -> PgPool {
    let pool = pg_pool().await;
    for sql in [
        format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
        format!("CREATE SCHEMA {schema}"),
    ] {
        sqlx::query(&sql).execute(&pool).await.expect("schema");
    }
    pool
}

pub(crate) async fn drop_schema(pool: &PgPool, schema: &str) {
    sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(pool)
        .await
        .expect("drop schema");
}

async fn rows(pool: &PgPool, sql: &str) -> Vec<(i64, String)> {
    sqlx::query_as(sql).fetch_all(pool).await.expect("select")
}

#[test]
fn csv_into_a_postgres_upsert_sink_is_effectively_once_and_says_how() {
    let schema = "faucet_cli_pg_sink";
    let rt = runtime();
    let pool = rt.block_on(fresh_schema(schema));
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 5, true));
    dir.write(
        "p.yaml",
        format!(
            "version: 1\nname: pgsink\npipeline:\n  \
             source: {{ type: csv, config: {{ path: ./data.csv, columns: {{ id: int }} }} }}\n  \
             sink: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CLI_PG_URL}}\", table: {schema}.orders, create_table: true, write_mode: upsert, key: [id] }} }}\n  \
             delivery: effectively_once\n  batch_size: 2\n\
             matrix:\n  \
             - {{ id: atomic }}\n  \
             - {{ id: keyed, state: {{ type: memory }}, sink: {{ config: {{ table: {schema}.orders_keyed }} }} }}\n"
        ),
    );
    let url = pg_url();
    let env = [("FAUCET_CLI_PG_URL", url.as_str())];

    // validate is offline: any URL will do, and its password is never printed.
    let fake = [(
        "FAUCET_CLI_PG_URL",
        "postgres://u:cli-secret-pw@db.invalid/x",
    )];
    let run = dir.faucet_env(&["validate", "p.yaml"], &fake);
    run.expect_code(0).stdout_has(&[
        "sink        postgres postgres://u:***@db.invalid/x table faucet_cli_pg_sink.orders (upsert by id)",
        "delivery    effectively-once (atomic watermark)",
        "delivery    effectively-once (keyed upsert)",
    ]);
    assert!(!run.stdout.contains("cli-secret-pw"), "{}", run.stdout);

    let run = dir.faucet_env(&["run", "p.yaml", "--output", "json"], &env);
    run.expect_code(0);
    let doc = run.json();
    assert_eq!(
        doc["runs"][0]["guarantee"],
        serde_json::json!({"effectively_once": "atomic_watermark"}),
        "{doc}"
    );
    assert_eq!(
        doc["runs"][1]["guarantee"],
        serde_json::json!({"effectively_once": "keyed_upsert"}),
        "{doc}"
    );
    let want: Vec<(i64, String)> = (1..=5).map(|i| (i, format!("name-{i}"))).collect();
    let select = |t: &str| format!("SELECT id, name FROM {schema}.{t} ORDER BY id");
    assert_eq!(rt.block_on(rows(&pool, &select("orders"))), want);
    assert_eq!(rt.block_on(rows(&pool, &select("orders_keyed"))), want);

    // Runs again: memory state replays every row into the keyed sink; no duplicates.
    dir.append("data.csv", &numbered_csv(6, 1, false));
    dir.faucet_env(&["run", "p.yaml"], &env).expect_code(0);
    let want: Vec<(i64, String)> = (1..=6).map(|i| (i, format!("name-{i}"))).collect();
    assert_eq!(rt.block_on(rows(&pool, &select("orders"))), want);
    assert_eq!(rt.block_on(rows(&pool, &select("orders_keyed"))), want);
    rt.block_on(drop_schema(&pool, schema));
}

#[test]
fn a_postgres_table_into_jsonl_resumes_incrementally() {
    let schema = "faucet_cli_pg_source";
    let rt = runtime();
    let pool = rt.block_on(fresh_schema(schema));
    rt.block_on(async {
        for sql in [
            format!("CREATE TABLE {schema}.items (id bigint PRIMARY KEY, name text NOT NULL)"),
            format!(
                "INSERT INTO {schema}.items SELECT g, 'item-' || g FROM generate_series(1, 25) g"
            ),
        ] {
            sqlx::query(&sql).execute(&pool).await.expect("setup");
        }
    });
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        format!(
            "version: 1\nname: pgsrc\npipeline:\n  \
             source: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CLI_PG_URL}}\", table: {schema}.items, replication_method: incremental, replication_key: [id] }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out/items.jsonl }} }}\n  \
             batch_size: 10\n"
        ),
    );
    let url = pg_url();
    let env = [("FAUCET_CLI_PG_URL", url.as_str())];
    dir.faucet_env(&["doctor", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["✓ source postgres ", "table faucet_cli_pg_source.items"]);
    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["25 records in 3 pages"]);
    let records = dir.jsonl("out/items.jsonl");
    assert_eq!(ids(&records), (1..=25).collect::<Vec<_>>());
    assert_eq!(records[6], serde_json::json!({"id": 7, "name": "item-7"}));

    rt.block_on(async {
        sqlx::query(&format!(
            "INSERT INTO {schema}.items SELECT g, 'item-' || g FROM generate_series(26, 28) g"
        ))
        .execute(&pool)
        .await
        .expect("insert");
    });
    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["3 records in 1 page,"]);
    assert_eq!(
        ids(&dir.jsonl("out/items.jsonl")),
        (1..=28).collect::<Vec<_>>()
    );
    rt.block_on(drop_schema(&pool, schema));
}

/// A `postgres-cdc` → jsonl (`out/changes.jsonl`) pipeline named `cdc` on `schema.orders`,
/// 50 records per page, the URL from `FAUCET_CLI_PG_URL`.
pub(crate) fn cdc_pipeline(
    schema: &str,
    slot: &str,
    publication: &str,
    continuous: bool,
) -> String {
    format!(
        "version: 1\nname: cdc\npipeline:\n  \
         source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_CLI_PG_URL}}\", slot_name: {slot}, publication: {publication}, tables: [{schema}.orders], create_publication: true, continuous: {continuous} }} }}\n  \
         sink: {{ type: jsonl, config: {{ path: ./out/changes.jsonl }} }}\n  \
         batch_size: 50\n"
    )
}

/// A fresh `schema` holding an empty `orders (id, status)`, with no slot `slot` or
/// publication `publication` left from an earlier run; the pool it was made with.
pub(crate) async fn cdc_fixture(schema: &str, slot: &str, publication: &str) -> PgPool {
    let pool = fresh_schema(schema).await;
    drop_cdc_test_objects(&pool, slot, publication, &format!("{schema}_unused")).await;
    sqlx::query(&format!(
        "CREATE TABLE {schema}.orders (id int PRIMARY KEY, status text NOT NULL)"
    ))
    .execute(&pool)
    .await
    .expect("create table");
    pool
}

/// A [`cdc_fixture`] of a test's own, made on `rt` with unique names:
/// `(schema, slot, publication, pool, guard)`, the schema and the slot named
/// `faucet_<tag>_<suffix>`, the publication `faucet_<tag>_pub_<suffix>`; all three dropped
/// when `guard` is.
pub(crate) fn own_cdc_fixture(
    rt: &tokio::runtime::Runtime,
    tag: &str,
) -> (String, String, String, PgPool, CdcObjectsGuard) {
    let suffix = unique_suffix();
    let schema = format!("faucet_{tag}_{suffix}");
    let publication = format!("faucet_{tag}_pub_{suffix}");
    let pool = rt.block_on(cdc_fixture(&schema, &schema, &publication));
    let guard = CdcObjectsGuard {
        slot: schema.clone(),
        publication: publication.clone(),
        schema: schema.clone(),
    };
    (schema.clone(), schema, publication, pool, guard)
}

#[test]
fn postgres_cdc_into_jsonl_bounded_runs_deliver_each_change_once() {
    let (schema, slot, publication) = (
        "faucet_cli_cdc",
        "faucet_cli_cdc_slot",
        "faucet_cli_cdc_pub",
    );
    let rt = runtime();
    let pool = rt.block_on(cdc_fixture(schema, slot, publication));
    let dir = Dir::new();
    dir.write("p.yaml", cdc_pipeline(schema, slot, publication, false));
    let url = pg_url();
    let env = [("FAUCET_CLI_PG_URL", url.as_str())];

    // The first run creates the publication and the slot; nothing has changed yet.
    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["cdc: 0 records"]);
    rt.block_on(async {
        for sql in [
            format!("INSERT INTO {schema}.orders SELECT g, 'new' FROM generate_series(1, 120) g"),
            format!("UPDATE {schema}.orders SET status = 'paid' WHERE id = 7"),
            format!("DELETE FROM {schema}.orders WHERE id = 8"),
        ] {
            sqlx::query(&sql).execute(&pool).await.expect("change");
        }
    });
    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["cdc: 122 records in 3 pages"]);
    dir.faucet_env(&["run", "p.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["cdc: 0 records"]);
    let changes = dir.jsonl("out/changes.jsonl");
    assert_eq!(changes.len(), 122);
    let ops: String = changes
        .iter()
        .map(|c| c["op"].as_str().expect("op"))
        .collect();
    assert_eq!(ops, format!("{}ud", "c".repeat(120)));
    assert_eq!(
        changes[0]["after"],
        serde_json::json!({"id": 1, "status": "new"})
    );
    assert_eq!(
        changes[120]["after"],
        serde_json::json!({"id": 7, "status": "paid"})
    );
    assert_eq!(changes[121]["before"], serde_json::json!({"id": 8}));
    rt.block_on(drop_cdc_test_objects(&pool, slot, publication, schema));
}

#[test]
fn postgres_cdc_continuous_stops_on_sigterm_and_resumes_without_loss() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let (schema, slot, publication) = (
        "faucet_cli_cdcc",
        "faucet_cli_cdcc_slot",
        "faucet_cli_cdcc_pub",
    );
    let rt = runtime();
    let pool = rt.block_on(cdc_fixture(schema, slot, publication));
    let dir = Dir::new();
    // Two files for one state key `bounded`: a bounded run and a continuous one.
    let bounded =
        cdc_pipeline(schema, slot, publication, false).replace("name: cdc", "name: bounded");
    dir.write("bounded.yaml", &bounded);
    dir.write(
        "p.yaml",
        bounded.replace("continuous: false", "continuous: true"),
    );
    let url = pg_url();
    let env = [("FAUCET_CLI_PG_URL", url.as_str())];
    dir.faucet_env(&["run", "bounded.yaml"], &env)
        .expect_code(0);

    let child = crate::support::faucet_command()
        .current_dir(dir.path())
        .args(["run", "p.yaml"])
        .env("FAUCET_CLI_PG_URL", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn faucet");
    rt.block_on(async {
        sqlx::query(&format!(
            "INSERT INTO {schema}.orders SELECT g, 'new' FROM generate_series(1, 30) g"
        ))
        .execute(&pool)
        .await
        .expect("insert");
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while dir.written_lines("out/changes.jsonl").len() < 30 {
        assert!(
            Instant::now() < deadline,
            "the continuous run delivered nothing in 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let run = crate::support::Run::from_output(child.wait_with_output().expect("wait"));
    run.expect_code(0).stdout_has(&["30 records", "cancelled"]);

    // More changes after the stop: a bounded run picks up exactly those.
    rt.block_on(async {
        sqlx::query(&format!(
            "INSERT INTO {schema}.orders SELECT g, 'late' FROM generate_series(31, 35) g"
        ))
        .execute(&pool)
        .await
        .expect("insert");
    });
    dir.faucet_env(&["run", "bounded.yaml"], &env)
        .expect_code(0)
        .stdout_has(&["bounded: 5 records"]);
    let ids: Vec<i64> = dir
        .jsonl("out/changes.jsonl")
        .iter()
        .map(|c| c["after"]["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(
        ids,
        (1..=35).collect::<Vec<_>>(),
        "no change lost or doubled"
    );
    rt.block_on(drop_cdc_test_objects(&pool, slot, publication, schema));
}
