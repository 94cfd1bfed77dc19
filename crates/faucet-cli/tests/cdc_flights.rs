//! The main job's end-to-end proof on real data: the seed's pipeline (`postgres-cdc` → jsonl)
//! over the nycflights13 `flights` table while a scripted workload runs, replayed in order
//! onto the table as it was when the slot was created, must give back the source table value
//! by value. And `faucet doctor` on the seed's own file: healthy on the test server, a failed
//! source probe naming `wal_level` on a private server with `wal_level = replica`.
//!
//! By default the first 100,000 flights are loaded and the big transaction updates all of
//! them (one transaction); `FAUCET_SOAK=1` loads all 336,776 and updates 200,000 rows in one
//! transaction. Needs PostgreSQL with wal_level=logical (`FAUCET_TEST_PG_URL`;
//! `scripts/services.sh` starts it) and `xz` for the repository's excerpt of the data
//! (`crates/faucet-cli/tests/data/nycflights13`); `FAUCET_SOAK=1` needs the whole data set
//! (`FAUCET_TEST_DATA_DIR`, see `support::flights`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Map, Value as Json};
use sqlx::PgPool;

#[cfg(all(feature = "state-postgres", feature = "state-redis"))]
use crate::support::Run;
use crate::support::flights::{
    ADDED_COLUMN, Table, assert_same, assert_second_part, flights_csv, read_records, replay,
};
use crate::support::pg::{exec, faucet_with_pg_url, unique_suffix};
use crate::support::{Dir, assert_succeeded, output_of_success, pg_pool};
use crate::support::{pg_url, runtime};

/// The flights columns of the CSV, in its order.
const CSV_COLUMNS: &str = "year, month, day, dep_time, sched_dep_time, dep_delay, arr_time, \
     sched_arr_time, arr_delay, carrier, flight, tailnum, origin, dest, air_time, distance, \
     hour, minute, time_hour";

/// Columns whose JSON differs between `row_to_json` and docs/values.md.
const TIMESTAMPTZ_COLUMNS: [&str; 2] = ["time_hour", "seen_at"];
const BYTEA_COLUMN: &str = "payload";
const FLOAT_COLUMN: &str = "ratio";

struct Names {
    schema: String,
    slot: String,
    publication: String,
}

impl Names {
    fn new() -> Self {
        let suffix = unique_suffix();
        Self {
            schema: format!("cdc_flights_{suffix}"),
            slot: format!("faucet_flights_{suffix}"),
            publication: format!("pub_flights_{suffix}"),
        }
    }

    fn table(&self) -> String {
        format!("{}.flights", self.schema)
    }

    /// The state table (unqualified: seed 004 names a table, not a schema).
    fn state_table(&self) -> String {
        format!("faucet_state_{}", self.slot)
    }
}

/// Drops the slot (once no session holds it: a run spawned before a failed assertion may
/// still be catching up, so this waits up to 60 s), the publication, the schema and the
/// state tables.
async fn cleanup(pool: &PgPool, names: &Names) {
    crate::support::pg::drop_slot(pool, &names.slot, Duration::from_secs(60)).await;
    let _ = sqlx::raw_sql(&format!(
        "DROP PUBLICATION IF EXISTS {}; DROP SCHEMA IF EXISTS {} CASCADE; \
         DROP TABLE IF EXISTS {state}, {state}_lease",
        names.publication,
        names.schema,
        state = names.state_table()
    ))
    .execute(pool)
    .await;
}

/// The seed's pipeline (examples/postgres-cdc/faucet.yaml) on this test's table: bookmarks
/// in a PostgreSQL state table of its own when the binary has `state-postgres`, else in a
/// file.
fn pipeline(names: &Names) -> String {
    let state = if cfg!(feature = "state-postgres") {
        format!(
            "type: postgres\n    config:\n      url: ${{env:STATE_PG_URL}}\n      table: {}\n      \
             ensure_table: true",
            names.state_table()
        )
    } else {
        "type: file\n    config:\n      path: ./state".to_owned()
    };
    format!(
        "version: 1\nname: flights\npipeline:\n  source:\n    type: postgres-cdc\n    config:\n      \
         connection_url: ${{env:SOURCE_PG_URL}}\n      slot_name: {slot}\n      publication: {publication}\n      \
         tables: [{table}]\n  sink:\n    type: jsonl\n    config:\n      path: ./flights.jsonl\n  \
         state:\n    {state}\n  batch_size: 5000\n",
        slot = names.slot,
        publication = names.publication,
        table = names.table(),
    )
}

fn faucet_run(dir: &Path) -> Command {
    let mut c = faucet_with_pg_url("SOURCE_PG_URL");
    c.env("STATE_PG_URL", pg_url())
        .args(["run", "--quiet", "faucet.yaml"])
        .current_dir(dir);
    c
}

/// One row as PostgreSQL prints it (`row_to_json`, session TimeZone UTC), mapped to
/// the JSON form of docs/values.md where the two differ — and only there:
/// * timestamptz: `…+00:00` → `…Z`;
/// * bytea: `\x` hex → base64;
/// * float8: both sides compared as the `f64` they denote (`1e+300` vs `1e300`), NaN and
///   infinities stay the strings both spell the same way.
fn normalise_pg(mut row: Map<String, Json>) -> Map<String, Json> {
    for col in TIMESTAMPTZ_COLUMNS {
        if let Some(Json::String(s)) = row.get_mut(col)
            && let Some(stem) = s.strip_suffix("+00:00")
        {
            *s = format!("{stem}Z");
        }
    }
    if let Some(Json::String(s)) = row.get_mut(BYTEA_COLUMN) {
        let hex = s.strip_prefix("\\x").expect("bytea in hex");
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digit"))
            .collect();
        *s = base64::engine::general_purpose::STANDARD.encode(bytes);
    }
    canonical_float(&mut row);
    row
}

/// The float column as the `f64` it denotes (Debug form), on either side.
fn canonical_float(row: &mut Map<String, Json>) {
    if let Some(v @ Json::Number(_)) = row.get_mut(FLOAT_COLUMN) {
        let f: f64 = v.to_string().parse().expect("a float");
        *v = Json::String(format!("{f:?}"));
    }
}

/// The table as `id → row` in the JSON form of docs/values.md.
async fn select_table(pool: &PgPool, table: &str) -> Table {
    let mut conn = pool.acquire().await.expect("connection");
    exec_conn(&mut conn, "SET TimeZone = 'UTC'").await;
    let rows: Vec<String> =
        sqlx::query_scalar(&format!("SELECT row_to_json(t)::text FROM {table} t"))
            .fetch_all(&mut *conn)
            .await
            .expect("select the table");
    exec_conn(&mut conn, "RESET TimeZone").await;
    rows.iter()
        .map(|text| {
            let row: Map<String, Json> = serde_json::from_str(text).expect("row_to_json");
            let id = row["id"].as_i64().expect("id");
            (id, normalise_pg(row))
        })
        .collect()
}

async fn exec_conn(conn: &mut sqlx::PgConnection, sql: &str) {
    sqlx::raw_sql(sql)
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A random, incompressible-enough text of about `kb` kB (md5 hex), stored out of line.
fn toast_text(kb: usize, salt: &str) -> String {
    format!(
        "(SELECT string_agg(md5(random()::text || g::text || {salt}), '') FROM generate_series(1, {}) g)",
        kb * 32
    )
}

/// The scripted workload before the truncate: single-row inserts of every value case,
/// single-row updates and deletes, TOASTed updates.
async fn workload_a(pool: &PgPool, t: &str) {
    let values = [
        "12345678901234567890.0123456789, 9007199254740993, '2024-02-29 13:45:00.123456+01', \
         '{\"a\": [1, 2.50, {\"b\": null}], \"é\": \"x\\\"y\"}', '\\x00ff10'::bytea, '{1,NULL,-3}', 'NaN'",
        "'NaN', -9223372036854775808, 'infinity', '[]', '\\x'::bytea, '{}', 'Infinity'",
        "-0.0000000001, 9223372036854775807, '-infinity', 'null', NULL, NULL, '-Infinity'",
        "0, -9007199254740993, '1970-01-01 00:00:00+00', '\"just a string\"', '\\x5c22'::bytea, '{2147483647}', 1e300",
        "-99999999999999999999.9999999999, 1, '2013-01-01 05:00:00.5-05', '{\"n\": 1e400}', '\\xdeadbeef'::bytea, '{0,-2147483648}', 0.1",
    ];
    for (k, v) in values.iter().enumerate() {
        exec(
            pool,
            &format!(
                "INSERT INTO {t} (year, month, day, carrier, origin, dest, amount, big, seen_at, doc, payload, tags, ratio, notes) \
                 VALUES (2024, 2, 29, 'ZZ', 'JFK', 'LAX', {v}, {})",
                toast_text(10, &format!("'{k}'"))
            ),
        )
        .await;
    }
    for k in 0..40 {
        exec(
            pool,
            &format!(
                "INSERT INTO {t} (year, month, day, carrier, flight, tailnum, origin, dest, time_hour, amount, ratio) \
                 VALUES (2014, 1, {}, 'AA', {k}, 'N{k}', 'EWR', 'ORD', now(), {k}.5, {k}.25)",
                k % 28 + 1
            ),
        )
        .await;
    }
    for sql in [
        format!("UPDATE {t} SET dep_delay = 999, doc = '{{\"updated\": true}}' WHERE id = 3"),
        format!(
            "UPDATE {t} SET notes = {} WHERE id = 1000",
            toast_text(12, "'u1000'")
        ),
        format!("UPDATE {t} SET carrier = 'Q9', ratio = 2.5 WHERE id = 2000"),
        format!("DELETE FROM {t} WHERE id = 5"),
        format!("DELETE FROM {t} WHERE id BETWEEN 100 AND 149"),
    ] {
        exec(pool, &sql).await;
    }
}

/// The TRUNCATE (and the same rows back, from an unpublished copy), in one transaction.
async fn truncate_and_reload(pool: &PgPool, schema: &str) {
    exec(
        pool,
        &format!(
            "BEGIN;
             CREATE TABLE {schema}.flights_copy AS SELECT * FROM {schema}.flights;
             TRUNCATE {schema}.flights;
             INSERT INTO {schema}.flights SELECT * FROM {schema}.flights_copy;
             COMMIT;"
        ),
    )
    .await;
}

/// After the big update: deletes, TOAST updates and updates beside them, a column added
/// mid-stream and rows using it.
async fn workload_c(pool: &PgPool, t: &str) {
    for sql in [
        format!("DELETE FROM {t} WHERE id % 97 = 0"),
        format!("DELETE FROM {t} WHERE id = 7"),
        format!(
            "UPDATE {t} SET notes = {} WHERE id % 2000 = 0",
            toast_text(10, "id::text")
        ),
        format!(
            "UPDATE {t} SET carrier = 'XX', big = big + 1, ratio = 'NaN' WHERE notes IS NOT NULL AND id % 3 = 0"
        ),
        format!("UPDATE {t} SET notes = NULL WHERE id = 3000"),
        format!("ALTER TABLE {t} ADD COLUMN {ADDED_COLUMN} text"),
        format!(
            "INSERT INTO {t} (year, month, day, carrier, origin, dest, {ADDED_COLUMN}, notes) VALUES (2025, 12, 31, 'NW', 'LGA', 'BOS', 'B12', {})",
            toast_text(10, "'gate'")
        ),
        format!("UPDATE {t} SET {ADDED_COLUMN} = 'A' || (id % 30) WHERE id % 1000 = 1"),
        format!("UPDATE {t} SET {ADDED_COLUMN} = 'C7' WHERE notes IS NOT NULL AND id % 2 = 1"),
        format!("DELETE FROM {t} WHERE {ADDED_COLUMN} = 'A11'"),
    ] {
        exec(pool, &sql).await;
    }
}

#[test]
fn flights_cdc_replay_reconstructs_the_table_value_by_value() {
    let names = Names::new();
    let table = names.table();
    let (rows, updated, started, dir) = crate::support::flights::start(100_000, pipeline(&names));
    let rt = runtime();
    let pool = rt.block_on(pg_pool());

    crate::support::with_cleanup(
        || {
            let csv = flights_csv(rows);
            rt.block_on(async {
                exec(
                    &pool,
                    &format!(
                        "CREATE SCHEMA {s};
                         CREATE TABLE {table} (
                             id bigserial PRIMARY KEY,
                             year int, month int, day int, dep_time int, sched_dep_time int,
                             dep_delay int, arr_time int, sched_arr_time int, arr_delay int,
                             carrier text, flight int, tailnum text, origin text, dest text,
                             air_time int, distance int, hour int, minute int, time_hour timestamptz,
                             amount numeric(30,10), big bigint, seen_at timestamptz, doc jsonb,
                             payload bytea, tags int[], ratio float8, notes text);
                         CREATE PUBLICATION {p} FOR TABLE {table};",
                        s = names.schema,
                        p = names.publication
                    ),
                )
                .await;
                let mut conn = pool.acquire().await.expect("connection");
                let mut copy = conn
                    .copy_in_raw(&format!(
                        "COPY {table} ({CSV_COLUMNS}) FROM STDIN (FORMAT csv, HEADER, NULL 'NA')"
                    ))
                    .await
                    .expect("COPY");
                copy.send(csv.as_slice()).await.expect("COPY data");
                let loaded = copy.finish().await.expect("COPY done");
                assert_eq!(loaded, rows as u64, "flights loaded");
                // Value cases on loaded rows, and TOASTed notes on some (the snapshot holds them).
                exec(
                    &pool,
                    &format!(
                        "UPDATE {table} SET amount = (distance::numeric / 7)::numeric(30,10), \
                         big = 9007199254740993 + id, ratio = air_time::float8 / 3, \
                         tags = ARRAY[flight, hour], doc = jsonb_build_object('tail', tailnum, 'n', id) \
                         WHERE id % 10 = 0;
                         UPDATE {table} SET notes = {} WHERE id % 500 = 0;",
                        toast_text(10, "id::text")
                    ),
                )
                .await;
            });
            let load_secs = started.elapsed().as_secs_f64();

            // The first run creates the slot: the changes from here on are all captured, and the
            // table as it is now is the replay's starting state.
            output_of_success(&mut faucet_run(dir.path()), "the first run");
            assert!(
                read_records(dir.path(), "flights.jsonl").is_empty(),
                "changes before the slot existed"
            );
            let mut replica = rt.block_on(select_table(&pool, &table));
            assert_eq!(replica.len(), rows);

            rt.block_on(workload_a(&pool, &table));
            output_of_success(&mut faucet_run(dir.path()), "the second run");
            let records = read_records(dir.path(), "flights.jsonl");
            let seen = records.len();
            let first = replay(&mut replica, records, &table, &canonical_float);
            rt.block_on(async {
                assert_same(
                    &replica,
                    &select_table(&pool, &table).await,
                    None,
                    "after the second run",
                );
            });
            assert!(
                first.unchanged_toast > 0,
                "no unchanged TOAST value was exercised: {first:?}"
            );
            let before_truncate = replica.len() as u64;

            // The truncate, then a run started while the big transaction is written.
            rt.block_on(truncate_and_reload(&pool, &names.schema));
            let during = faucet_run(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn faucet");
            let update_started = Instant::now();
            rt.block_on(exec(
                &pool,
                &format!(
                    "UPDATE {table} SET dep_delay = coalesce(dep_delay, 0) + 1, \
                     amount = coalesce(amount, 0) + 0.0000000001, \
                     seen_at = coalesce(time_hour, now()) + interval '1 microsecond' \
                     WHERE id IN (SELECT id FROM {table} ORDER BY id LIMIT {updated})"
                ),
            ));
            let update_secs = update_started.elapsed().as_secs_f64();
            assert_succeeded(
                during.wait_with_output().expect("wait"),
                "the run during the workload",
            );
            rt.block_on(workload_c(&pool, &table));
            let catch_up = Instant::now();
            // Bounded runs: the one above caught up to where it started; these read the rest.
            for k in 0..2 {
                output_of_success(&mut faucet_run(dir.path()), &format!("run {}", k + 4));
            }

            let catch_up_secs = catch_up.elapsed().as_secs_f64();
            let verify = Instant::now();
            let mut records = read_records(dir.path(), "flights.jsonl");
            let total = records.len();
            let second = replay(
                &mut replica,
                records.split_off(seen),
                &table,
                &canonical_float,
            );
            let source = rt.block_on(select_table(&pool, &table));
            assert_second_part(&replica, &source, &second, updated, before_truncate);
            // The column added mid-stream: one schema-change record before its first change.
            assert_eq!(second.schema_changes, 1, "{second:?}");
            assert!(second.unchanged_toast > 0, "{second:?}");
            let verify_secs = verify.elapsed().as_secs_f64();
            eprintln!(
                "cdc_flights: {rows} flights loaded in {load_secs:.1} s; {} change records \
                 (first {first:?}, then {second:?}); the {updated}-row update took {update_secs:.1} s; \
                 the last two runs {catch_up_secs:.1} s; {} rows equal value by value (read, replay \
                 and compare {verify_secs:.1} s); {:.1} s in all",
                total,
                source.len(),
                started.elapsed().as_secs_f64()
            );
        },
        || {
            rt.block_on(cleanup(&pool, &names));
        },
    );
}

/// The source probe's checklist line.
#[cfg(all(feature = "state-postgres", feature = "state-redis"))]
#[track_caller]
fn probe_line(run: &Run, probe: &str) -> String {
    run.stdout
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(&format!("✓ {probe} ")) || l.starts_with(&format!("✗ {probe} ")))
        .unwrap_or_else(|| panic!("no {probe} probe\n{}\n{}", run.stdout, run.stderr))
        .to_owned()
}

/// `faucet doctor` on examples/postgres-cdc/faucet.yaml as shipped (copied into a temp dir,
/// so its `./orders.jsonl` lands there), against a database of its own on the test server
/// holding `public.orders` and `faucet_pub`; then against a private `wal_level = replica`
/// server, where exactly the source probe fails and says how to fix it.
#[cfg(all(feature = "state-postgres", feature = "state-redis"))]
#[test]
fn doctor_on_the_seed_pipeline_passes_then_names_wal_level() {
    use crate::state_pg_restart::PrivateServer;

    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let database = format!("faucet_e2e_seed_{}", std::process::id());
    let base = pg_url();
    let (prefix, _) = base
        .rsplit_once('/')
        .expect("a database in FAUCET_TEST_PG_URL");
    let source_url = format!("{prefix}/{database}");
    rt.block_on(exec(&pool, &format!("CREATE DATABASE {database}")));
    let dir = Dir::new();
    std::fs::copy(
        crate::support::repo_root().join("examples/postgres-cdc/faucet.yaml"),
        dir.join("faucet.yaml"),
    )
    .expect("copy the seed's pipeline");

    crate::support::with_cleanup(
        || {
            rt.block_on(async {
                let db = sqlx::PgPool::connect(&source_url)
                    .await
                    .expect("the seed database");
                exec(
                    &db,
                    "CREATE TABLE public.orders (id bigint PRIMARY KEY, status text);
                     CREATE PUBLICATION faucet_pub FOR TABLE public.orders;",
                )
                .await;
                db.close().await;
            });
            let run = dir.faucet_env(
                &["doctor", "faucet.yaml"],
                &[("SOURCE_PG_URL", &source_url), ("STATE_PG_URL", &base)],
            );
            run.expect_code(0).stdout_has(&["all 4 checks passed"]);
            assert!(
                probe_line(&run, "source").starts_with("✓ source postgres-cdc"),
                "{}",
                run.stdout
            );
            assert!(
                probe_line(&run, "sink").starts_with("✓ sink jsonl"),
                "{}",
                run.stdout
            );
            assert!(
                probe_line(&run, "state").starts_with("✓ state postgres"),
                "{}",
                run.stdout
            );
            assert!(dir.read("orders.jsonl").is_none(), "doctor wrote the sink");

            let replica = PrivateServer::start(None, &[]);
            let run = dir.faucet_env(
                &["doctor", "faucet.yaml"],
                &[("SOURCE_PG_URL", &replica.url()), ("STATE_PG_URL", &base)],
            );
            let failed = run
                .stdout
                .lines()
                .filter(|l| l.trim_start().starts_with('✗'))
                .count();
            assert_eq!(failed, 1, "{}", run.stdout);
            run.expect_code(1).stdout_has(&["1 of 4 checks failed"]);
            let source = probe_line(&run, "source");
            assert!(source.starts_with("✗ source postgres-cdc"), "{source}");
            assert!(source.contains("wal_level is `replica`"), "{source}");
            assert!(
                source.contains("ALTER SYSTEM SET wal_level = logical"),
                "{source}"
            );
            assert!(source.contains("restart PostgreSQL"), "{source}");
            assert!(
                probe_line(&run, "sink").starts_with("✓ sink"),
                "{}",
                run.stdout
            );
            assert!(
                probe_line(&run, "state").starts_with("✓ state"),
                "{}",
                run.stdout
            );
            replica.stop("fast");
        },
        || {
            rt.block_on(async {
                let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
                    .execute(&pool)
                    .await;
            });
        },
    );
}
