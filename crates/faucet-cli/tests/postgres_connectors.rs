//! `faucet run` with the `postgres` source and sink (feature `postgres`) against the real
//! PostgreSQL (`FAUCET_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`; start
//! it with `scripts/services.sh`). Each test works in its own schema.

use sqlx::PgPool;

use crate::support::{Dir, ids, numbered_csv};

fn pg_url() -> String {
    std::env::var("FAUCET_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A pool on the test server with `schema` dropped and created again.
async fn fresh_schema(schema: &str) -> PgPool {
    let pool = match sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&pg_url())
        .await
    {
        Ok(p) => p,
        Err(e) => panic!(
            "PostgreSQL at FAUCET_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test) \
             is unreachable: {e}; start it with scripts/services.sh"
        ),
    };
    for sql in [
        format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
        format!("CREATE SCHEMA {schema}"),
    ] {
        sqlx::query(&sql).execute(&pool).await.expect("schema");
    }
    pool
}

async fn drop_schema(pool: &PgPool, schema: &str) {
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
