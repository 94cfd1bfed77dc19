//! The `mongodb` sink through the real `faucet` binary, against SecantusDB
//! (`FAUCET_TEST_MONGODB_URL`) and PostgreSQL (`FAUCET_TEST_PG_URL`, wal_level=logical):
//! postgres-cdc of two differently keyed tables (one by `id`, one by `(order_id, line_no)`)
//! upserted into two collections routed by `collection: "<db>.{table}"`, with
//! `delivery: effectively_once`, while a concurrent writer inserts, updates, deletes and
//! changes keys; the binary is SIGKILLed at pseudo-random instants several times, then run
//! to completion, and each collection (read with pymongo) equals its source table value by
//! value. `doctor` passes first. `FAUCET_SOAK=1` runs more kills.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use faucet_test_support::{mongodb_url, unique_suffix};
use serde_json::{Value as Json, json};

use crate::support::crash::{CrashScenario, abort_at_every_point, kill_after, kill_seeds};
use crate::support::mongo::mongo;
use crate::support::pg::{drop_cdc_objects, faucet_with_pg_url, query, sql};

/// Records per page: small, so a run is many transactions and a kill lands inside one.
const BATCH: usize = 25;

/// The source's objects and the target database, dropped at the end (also on failure).
struct Names {
    schema: String,
    publication: String,
    slot: String,
    db: String,
}

impl Drop for Names {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            drop_cdc_objects(&self.slot, &self.publication, &self.schema);
        });
        let _ = std::panic::catch_unwind(|| {
            mongo(&mongodb_url(), &format!("c.drop_database('{}')", self.db));
        });
    }
}

fn faucet() -> Command {
    faucet_with_pg_url("FAUCET_MONGO_SINK_PG_URL")
}

/// One round of the concurrent writer (`n` from 1): inserts, updates, deletes and key
/// changes in both tables, each statement its own transaction.
fn write_round(s: &str, n: u64) {
    let mut stmts = vec![
        format!(
            "INSERT INTO {s}.orders VALUES ({id}, nextval('{s}.seq'), 'w{n}', {n} / 4.0, now(), \
             jsonb_build_object('k', {n}, 's', 'x{n}', 'f', 0.5))",
            id = 1000 + n
        ),
        format!(
            "UPDATE {s}.orders SET v = nextval('{s}.seq'), at = now() WHERE id = {}",
            (n * 7) % 300 + 1
        ),
        format!("INSERT INTO {s}.lines VALUES ({}, 'L{n}', {n})", n % 50),
        format!(
            "UPDATE {s}.lines SET qty = qty + 1 WHERE order_id = {}",
            n % 50
        ),
    ];
    if n.is_multiple_of(5) {
        stmts.push(format!(
            "DELETE FROM {s}.orders WHERE id = {}",
            (n * 13) % 300 + 1
        ));
    }
    if n.is_multiple_of(7) {
        stmts.push(format!(
            "UPDATE {s}.orders SET id = id + 100000 WHERE id = {}",
            (n * 11) % 300 + 1
        ));
    }
    if n.is_multiple_of(3) && n > 2 {
        stmts.push(format!(
            "DELETE FROM {s}.lines WHERE line_no = 'L{}'",
            n - 2
        ));
    }
    sql(&stmts.join("; "));
}

/// `(id, v, note, amount, at, tags)` of an `orders` row, as text where not a number.
type OrderRow = (
    i32,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The source tables as the collections must hold them: `_id` included.
fn source_rows(s: &str) -> (Vec<Json>, Vec<Json>) {
    let orders: Vec<OrderRow> = query(&format!(
        "SELECT id, v, note, amount::text, \
             to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), tags::text \
             FROM {s}.orders ORDER BY id"
    ));
    let orders = orders
        .into_iter()
        .map(|(id, v, note, amount, at, tags)| {
            json!({
                "_id": id, "id": id, "v": v, "note": note, "amount": amount, "at": at,
                "tags": tags.map(|t| serde_json::from_str::<Json>(&t).expect("jsonb")),
            })
        })
        .collect();
    let lines: Vec<(i32, String, i32)> = query(&format!(
        "SELECT order_id, line_no, qty FROM {s}.lines ORDER BY order_id, line_no COLLATE \"C\""
    ));
    let lines = lines
        .into_iter()
        .map(|(o, l, q)| {
            json!({"_id": {"order_id": o, "line_no": l}, "order_id": o, "line_no": l, "qty": q})
        })
        .collect();
    (orders, lines)
}

/// The collections read with pymongo, in the same shape: Decimal128 as its text, dates as
/// ISO 8601 in UTC with milliseconds, tags as JSON.
fn target_rows(db: &str) -> (Vec<Json>, Vec<Json>) {
    let out = mongo(
        &mongodb_url(),
        &format!(
            "import json, datetime\n\
             def norm(v):\n    \
                 if isinstance(v, bson.decimal128.Decimal128): return str(v)\n    \
                 if isinstance(v, datetime.datetime): return v.strftime('%Y-%m-%dT%H:%M:%S.') + '%03dZ' % (v.microsecond // 1000)\n    \
                 if isinstance(v, dict): return {{k: norm(x) for k, x in v.items()}}\n    \
                 if isinstance(v, list): return [norm(x) for x in v]\n    \
                 return v\n\
             d = c['{db}']\n\
             print(json.dumps([norm(x) for x in d.orders.find().sort('id', 1)]))\n\
             print(json.dumps([norm(x) for x in d.lines.find().sort([('order_id', 1), ('line_no', 1)])]))"
        ),
    );
    let mut lines = out.lines();
    let mut next = || -> Vec<Json> {
        serde_json::from_str(lines.next().expect("a line of documents")).expect("json")
    };
    (next(), next())
}

#[track_caller]
fn assert_same(got: &[Json], want: &[Json], what: &str) {
    let wrong: Vec<_> = got.iter().zip(want).filter(|(g, w)| g != w).collect();
    assert!(
        got.len() == want.len() && wrong.is_empty(),
        "{what}: {} documents for {} rows, {} differ; first (target, source): {:?}",
        got.len(),
        want.len(),
        wrong.len(),
        wrong.first()
    );
}

fn prepare(dir: &Path) -> Names {
    let suffix = unique_suffix();
    let names = Names {
        schema: format!("msink_{suffix}"),
        publication: format!("msink_pub_{suffix}"),
        slot: format!("msink_slot_{suffix}"),
        db: format!("msink_{suffix}"),
    };
    let (s, p, slot, db) = (&names.schema, &names.publication, &names.slot, &names.db);
    sql(&format!(
        "CREATE SCHEMA {s}; CREATE SEQUENCE {s}.seq; \
         CREATE TABLE {s}.orders (id int PRIMARY KEY, v bigint NOT NULL, note text, \
           amount numeric(12,2), at timestamptz(3), tags jsonb); \
         CREATE TABLE {s}.lines (order_id int, line_no text, qty int NOT NULL, \
           PRIMARY KEY (order_id, line_no)); \
         CREATE PUBLICATION {p} FOR TABLE {s}.orders, {s}.lines"
    ));
    sql(&format!(
        "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
    ));
    // A workload logged before the first run: a bulk insert, updates, a truncate and reload
    // of `lines`, a transaction of many changes with a key change.
    sql(&format!(
        "INSERT INTO {s}.orders SELECT g, nextval('{s}.seq'), 'n' || g, g / 8.0, \
           timestamptz '2024-02-29 12:45:00.123+00' + g * interval '1 day 1 ms', \
           jsonb_build_object('k', g, 'nested', jsonb_build_object('a', g % 3)) \
         FROM generate_series(1, 300) g; \
         INSERT INTO {s}.lines SELECT g % 40, 'l' || g, g FROM generate_series(1, 200) g"
    ));
    sql(&format!(
        "TRUNCATE {s}.lines; \
         INSERT INTO {s}.lines SELECT g % 40, 'm' || g, g FROM generate_series(1, 150) g"
    ));
    sql(&format!(
        "BEGIN; UPDATE {s}.orders SET v = nextval('{s}.seq'), note = note || ' \"q\"'; \
         UPDATE {s}.orders SET id = id + 5000 WHERE id = 9; DELETE FROM {s}.orders WHERE id > 290; \
         COMMIT"
    ));
    let url = mongodb_url();
    std::fs::write(
        dir.join("faucet.yaml"),
        format!(
            "version: 1\nname: msink\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_MONGO_SINK_PG_URL}}\", \
             slot_name: {slot}, publication: {p}, tables: [{s}.orders, {s}.lines] }} }}\n  \
             sink: {{ type: mongodb, config: {{ connection_url: \"{url}\", collection: \"{db}.{{table}}\", \
             write_mode: upsert }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             delivery: effectively_once\n  batch_size: {BATCH}\n"
        ),
    )
    .expect("config");
    names
}

#[test]
fn postgres_cdc_into_mongodb_upsert_survives_sigkill_under_a_concurrent_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let names = prepare(dir.path());
    crate::support::output_of_success(faucet().arg("doctor").current_dir(dir.path()), "doctor");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, s) = (stop.clone(), names.schema.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                write_round(&s, n);
                std::thread::sleep(Duration::from_millis(5));
            }
            n
        })
    };
    let rounds = crate::support::soak_or(20, 6);
    let mut interrupted = 0;
    for seed in kill_seeds(rounds) {
        if kill_after(faucet(), dir.path(), Duration::from_millis(80 + seed % 700)) {
            interrupted += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().expect("the writer");
    assert!(written > 0, "the concurrent writer wrote");
    assert!(
        interrupted > 0,
        "no kill landed mid-run: {}",
        std::fs::read_to_string(dir.path().join("kill.err")).unwrap_or_default()
    );
    crate::support::output_of_success(
        faucet().arg("run").current_dir(dir.path()),
        "the run to completion",
    );
    let (want_orders, want_lines) = source_rows(&names.schema);
    let (got_orders, got_lines) = target_rows(&names.db);
    assert_same(&got_orders, &want_orders, "orders");
    assert_same(&got_lines, &want_lines, "lines");
    // Another run finds nothing new and changes nothing.
    crate::support::output_of_success(faucet().arg("run").current_dir(dir.path()), "a rerun");
    let (got_orders, got_lines) = target_rows(&names.db);
    assert_same(&got_orders, &want_orders, "orders after a rerun");
    assert_same(&got_lines, &want_lines, "lines after a rerun");
    eprintln!(
        "{written} writer rounds, {interrupted} of {rounds} kills mid-run, {} orders, {} lines",
        want_orders.len(),
        want_lines.len()
    );
}

// ---- csv → mongodb append, effectively-once ----------------------------------------------

/// Rows of the CSV.
const CSV_ROWS: usize = 600;

/// A fresh database per round.
#[derive(Default)]
struct CsvIntoMongo {
    db: Mutex<Option<String>>,
}

/// The CSV's row `i` as the collection must hold it (without `_id`).
fn csv_row(i: usize) -> Json {
    json!({"id": i, "v": i * 3, "amount": format!("{}.{:02}0", i, i % 100), "note": format!("n{i}")})
}

impl CrashScenario for CsvIntoMongo {
    fn prepare(&self, dir: &Path) {
        self.drop();
        let db = format!("msink_csv_{}", unique_suffix());
        let mut csv = String::from("id,v,amount,note\n");
        for i in 0..CSV_ROWS {
            csv.push_str(&format!("{i},{},{}.{:02}0,n{i}\n", i * 3, i, i % 100));
        }
        std::fs::write(dir.join("in.csv"), csv).expect("csv");
        let url = mongodb_url();
        std::fs::write(
            dir.join("faucet.yaml"),
            format!(
                "version: 1\nname: mcsv\npipeline:\n  \
                 source: {{ type: csv, config: {{ path: ./in.csv, columns: {{ id: int, v: int, amount: numeric }} }} }}\n  \
                 sink: {{ type: mongodb, config: {{ connection_url: \"{url}\", collection: {db}.rows }} }}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  \
                 delivery: effectively_once\n  batch_size: 20\n"
            ),
        )
        .expect("config");
        *self.db.lock().expect("lock") = Some(db);
    }

    fn check(&self, what: &str) {
        let db = self.db.lock().expect("lock").clone().expect("prepared");
        let out = mongo(
            &mongodb_url(),
            &format!(
                "import json\n\
                 rows = [dict(x, amount=str(x['amount'])) for x in c['{db}'].rows.find({{}}, {{'_id': 0}}).sort('id', 1)]\n\
                 print(json.dumps(rows))"
            ),
        );
        let got: Vec<Json> = serde_json::from_str(out.trim()).expect("json");
        let ids: Vec<u64> = got.iter().filter_map(|r| r["id"].as_u64()).collect();
        let mut seen = std::collections::BTreeSet::new();
        let doubled = ids.iter().filter(|i| !seen.insert(**i)).count();
        let lost = (0..CSV_ROWS as u64).filter(|i| !seen.contains(i)).count();
        assert_eq!(
            (lost, doubled),
            (0, 0),
            "{what}: lost {lost}, doubled {doubled}"
        );
        let want: Vec<Json> = (0..CSV_ROWS).map(csv_row).collect();
        assert_same(&got, &want, what);
    }

    fn drop(&self) {
        if let Some(db) = self.db.lock().expect("lock").take() {
            mongo(&mongodb_url(), &format!("c.drop_database('{db}')"));
        }
    }

    fn faucet(&self) -> Command {
        crate::support::faucet_unarmed()
    }
}

#[test]
fn csv_into_mongodb_append_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&CsvIntoMongo::default());
}
