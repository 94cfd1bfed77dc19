//! The seed-shaped proof for `mysql-cdc` (issue 12, "Proof"): nycflights13 `flights` loaded
//! into the test MariaDB (the private one with a binlog, scripts/services.sh) with a primary
//! key and a column of every type of the MySQL value table of docs/values.md; the pipeline
//! `mysql-cdc` → `jsonl` with its state in PostgreSQL, run through the binary while a
//! scripted workload runs: single-row inserts of every value case, single-row updates and
//! deletes, a TRUNCATE and reload, a 200,000-row UPDATE in one transaction, deletes, ADD
//! COLUMN mid-stream, and binlog rotations (`FLUSH BINARY LOGS`) while a run reads. The
//! records replayed in order onto the starting snapshot must equal the table as read at the
//! end, value by value. Both sides are read through faucet's one MySQL value mapping (the
//! snapshot and the end state by the `mysql` query source, a full read): what is compared is
//! that the binlog path gives the SELECT path's values; the value cases are also checked
//! against their literal JSON (the text `mysql_values` asserts for the query source).
//!
//! By default the first 200,000 flights are loaded and the big transaction updates 200,000
//! rows; `FAUCET_SOAK=1` loads all 336,776. Needs `xz` (the repository's excerpt of the data,
//! `crates/faucet-cli/tests/data/nycflights13`; the whole set for `FAUCET_SOAK=1` from
//! `FAUCET_TEST_DATA_DIR` with `unzip`, see `support::flights`) and the `mariadb` client.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use faucet_test_support::mysql_value_table;
use serde_json::{Map, Value as Json};

use crate::support::flights::{
    ADDED_COLUMN, Table, assert_second_part, flights_csv, read_records, replay,
};
use crate::support::mariadb::{mariadb, mysql_url_for, unique_server_id};
use crate::support::pg_url;
use crate::support::{Dir, assert_succeeded, faucet_unarmed, output_of_success};

/// The flights columns of the CSV, in its order.
const CSV_COLUMNS: [&str; 19] = [
    "year",
    "month",
    "day",
    "dep_time",
    "sched_dep_time",
    "dep_delay",
    "arr_time",
    "sched_arr_time",
    "arr_delay",
    "carrier",
    "flight",
    "tailnum",
    "origin",
    "dest",
    "air_time",
    "distance",
    "hour",
    "minute",
    "time_hour",
];

/// The flights table, with a column of every type of the MySQL value table of docs/values.md.
const CREATE_FLIGHTS: &str = concat!(
    "CREATE TABLE flights (
    id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
    year SMALLINT, month TINYINT, day TINYINT, dep_time INT, sched_dep_time INT,
    dep_delay INT, arr_time INT, sched_arr_time INT, arr_delay INT,
    carrier CHAR(2) CHARACTER SET latin1, flight INT, tailnum VARCHAR(8), origin CHAR(3),
    dest CHAR(3), air_time INT, distance INT, hour TINYINT, minute TINYINT,
    time_hour TIMESTAMP NULL,
    ",
    mysql_value_table!(columns_ddl),
    "\n) DEFAULT CHARSET = utf8mb4"
);

/// The value columns, in the order of [`VALUE_CASES`].
const VALUE_COLUMNS: &str = mysql_value_table!(columns);

/// The value table's rows, each inserted alone under a +05:30 session zone and a permissive
/// sql_mode (zero dates), with the JSON every value must have (the MySQL table of docs/values.md; zero
/// dates NULL by the module's policy).
const VALUE_CASES: [(&str, &str); 3] = [
    (
        mysql_value_table!(row 0),
        concat!("{", mysql_value_table!(json 0), "}"),
    ),
    (
        mysql_value_table!(row 1),
        concat!("{", mysql_value_table!(json 1), "}"),
    ),
    (
        mysql_value_table!(row 2),
        concat!("{", mysql_value_table!(json 2), "}"),
    ),
];

/// The id of the first value case (after every loaded flight).
const FIRST_VALUE_ID: i64 = 1_000_001;

/// A test's own database, state table and replica id.
struct Names {
    db: String,
    state_table: String,
    server_id: u32,
}

impl Names {
    fn new() -> Self {
        let suffix = faucet_test_support::unique_suffix();
        Self {
            db: format!("cdc_flights_{suffix}"),
            state_table: format!("faucet_state_myflights_{suffix}"),
            server_id: unique_server_id(),
        }
    }

    fn table(&self) -> String {
        format!("{}.flights", self.db)
    }
}

/// The seed's pipeline shape on this test's table: mysql-cdc → jsonl, bookmarks in a
/// PostgreSQL state table of its own.
fn cdc_pipeline(names: &Names) -> String {
    format!(
        "version: 1\nname: myflights\npipeline:\n  source:\n    type: mysql-cdc\n    config:\n      \
         connection_url: ${{env:SOURCE_MYSQL_URL}}\n      server_id: {server_id}\n      \
         tables: [{table}]\n  sink:\n    type: jsonl\n    config:\n      path: ./flights.jsonl\n  \
         state:\n    type: postgres\n    config:\n      url: ${{env:STATE_PG_URL}}\n      \
         table: {state}\n      ensure_table: true\n  batch_size: 5000\n",
        server_id = names.server_id,
        table = names.table(),
        state = names.state_table,
    )
}

fn faucet_run(dir: &Path, names: &Names) -> Command {
    let mut c = faucet_unarmed();
    c.env("SOURCE_MYSQL_URL", mysql_url_for(&names.db, None))
        .env("STATE_PG_URL", pg_url())
        .args(["run", "--quiet", "faucet.yaml"])
        .current_dir(dir);
    c
}

/// The table as `id → row`, read by the `mysql` query source (a full read through the
/// binary into a JSONL file of a fresh directory): the SELECT side of the comparison.
fn select_table(names: &Names) -> Table {
    let dir = Dir::new();
    dir.write(
        "select.yaml",
        "version: 1\nname: myflights_select\npipeline:\n  source: { type: mysql, config: { \
         connection_url: \"${env:SOURCE_MYSQL_URL}\", table: flights } }\n  \
         sink: { type: jsonl, config: { path: ./select.jsonl } }\n  \
         state: { type: file, config: { path: ./state } }\n  batch_size: 10000\n",
    );
    let mut c = faucet_unarmed();
    c.env("SOURCE_MYSQL_URL", mysql_url_for(&names.db, None))
        .args(["run", "--quiet", "select.yaml"])
        .current_dir(dir.path());
    output_of_success(&mut c, "the SELECT of the table (mysql source)");
    read_records(dir.path(), "select.jsonl")
        .into_iter()
        .map(|r| {
            let Json::Object(row) = r else {
                panic!("a row that is not an object: {r}")
            };
            (row["id"].as_i64().expect("id"), row)
        })
        .collect()
}

/// Both sides go through the same mapping: nothing to normalise.
fn same_mapping(_: &mut Map<String, Json>) {}

/// Loads the first `rows` flights (`LOAD DATA LOCAL INFILE`, `NA` as NULL, `time_hour` as a
/// UTC TIMESTAMP), then fills value columns of every tenth row.
fn load(names: &Names, dir: &Dir, rows: usize) {
    let csv = dir.write("flights.csv", flights_csv(rows));
    let vars: Vec<String> = CSV_COLUMNS.iter().map(|c| format!("@{c}")).collect();
    let sets: Vec<String> = CSV_COLUMNS
        .iter()
        .map(|c| {
            if *c == "time_hour" {
                format!("{c} = STR_TO_DATE(NULLIF(@{c}, 'NA'), '%Y-%m-%dT%H:%i:%sZ')")
            } else {
                format!("{c} = NULLIF(@{c}, 'NA')")
            }
        })
        .collect();
    mariadb(&format!(
        "CREATE DATABASE {db} CHARACTER SET utf8mb4; USE {db}; {CREATE_FLIGHTS};
         SET time_zone = '+00:00';
         LOAD DATA LOCAL INFILE '{csv}' INTO TABLE flights CHARACTER SET utf8mb4
           FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\n'
           IGNORE 1 LINES ({vars}) SET {sets};
         UPDATE flights SET d = distance / 7, bu = 18446744073709551615 - id, f = air_time / 3,
           db = air_time / 7, j = JSON_OBJECT('tail', tailnum, 'n', id), ts = time_hour,
           dtm = time_hour + INTERVAL id MICROSECOND, tm = SEC_TO_TIME(COALESCE(dep_delay, 0) * 60),
           bn = UNHEX(LPAD(HEX(id * 256), 8, '0')), vc = CONCAT(tailnum, '✈'), u = UUID(),
           i6 = '2001:db8::1', s = 'a,b', e = 'large', y = year, dt = DATE(time_hour), b64 = id,
           bl = UNHEX(MD5(id)), tx = 'Grüße', c = 'Ærø'
         WHERE id % 10 = 0;",
        db = names.db,
        csv = csv.display(),
        vars = vars.join(", "),
        sets = sets.join(", "),
    ));
    let loaded = mariadb(&format!("SELECT COUNT(*) FROM {}", names.table()));
    assert_eq!(loaded.trim(), rows.to_string(), "flights loaded");
}

/// Before the truncate: single-row inserts of every value case and of plain flights,
/// single-row updates and deletes.
fn workload_a(t: &str) {
    for (k, (values, _)) in VALUE_CASES.iter().enumerate() {
        mariadb(&format!(
            "SET SESSION time_zone = '+05:30', SESSION sql_mode = '';
             INSERT INTO {t} (id, year, month, day, carrier, origin, dest, {VALUE_COLUMNS})
             VALUES ({}, 2024, 2, 29, 'ZZ', 'JFK', 'LAX', {values})",
            FIRST_VALUE_ID + k as i64
        ));
    }
    for k in 0..40 {
        mariadb(&format!(
            "INSERT INTO {t} (year, month, day, carrier, flight, tailnum, origin, dest, time_hour, d, f)
             VALUES (2014, 1, {}, 'AA', {k}, 'N{k}', 'EWR', 'ORD', NOW(), {k}.5, {k}.25)",
            k % 28 + 1
        ));
    }
    mariadb(&format!(
        "UPDATE {t} SET dep_delay = 999, j = '{{\"updated\": true}}' WHERE id = 3;
         UPDATE {t} SET carrier = 'Q9', f = 2.5, vb = x'00' WHERE id = 2000;
         UPDATE {t} SET tm = '-00:00:00.000001', ts = '1970-01-01 00:00:01' WHERE id = 1000;
         DELETE FROM {t} WHERE id = 5;
         DELETE FROM {t} WHERE id BETWEEN 100 AND 149;"
    ));
}

/// After the big update: deletes, updates, a rotation, a column added mid-stream and rows
/// using it.
fn workload_c(t: &str) {
    mariadb(&format!(
        "DELETE FROM {t} WHERE id % 97 = 0;
         DELETE FROM {t} WHERE id = 7;
         UPDATE {t} SET carrier = 'XX', bi = -id, f = NULL WHERE id % 3000 = 1;
         FLUSH BINARY LOGS;
         ALTER TABLE {t} ADD COLUMN {ADDED_COLUMN} VARCHAR(8);
         INSERT INTO {t} (year, month, day, carrier, origin, dest, {ADDED_COLUMN}, vc)
           VALUES (2025, 12, 31, 'NW', 'LGA', 'BOS', 'B12', 'é');
         UPDATE {t} SET {ADDED_COLUMN} = CONCAT('A', id % 30) WHERE id % 1000 = 1;
         DELETE FROM {t} WHERE {ADDED_COLUMN} = 'A11';"
    ));
}

#[test]
fn mysql_cdc_flights_replay_reconstructs_the_table_value_by_value() {
    let names = Names::new();
    let table = names.table();
    let (rows, updated, started, dir) =
        crate::support::flights::start(200_000, cdc_pipeline(&names));

    crate::support::with_cleanup(
        || {
            load(&names, &dir, rows);
            let load_secs = started.elapsed().as_secs_f64();

            // The first run starts at the end of the log: the changes from here on are all
            // captured, and the table as it is now is the replay's starting state.
            output_of_success(&mut faucet_run(dir.path(), &names), "the first run");
            assert!(
                read_records(dir.path(), "flights.jsonl").is_empty(),
                "changes before the first run"
            );
            let mut replica = select_table(&names);
            assert_eq!(replica.len(), rows);

            workload_a(&table);
            output_of_success(&mut faucet_run(dir.path(), &names), "the second run");
            let records = read_records(dir.path(), "flights.jsonl");
            let seen = records.len();
            let first = replay(&mut replica, records, &table, &same_mapping);
            // The binlog's values are the value table's, literally.
            for (k, (_, want)) in VALUE_CASES.iter().enumerate() {
                let want: Map<String, Json> = serde_json::from_str(want).expect("expected JSON");
                let got = &replica[&(FIRST_VALUE_ID + k as i64)];
                for (col, w) in &want {
                    assert_eq!(&got[col], w, "value case {k}, column {col}");
                }
            }
            let before_truncate = replica.len() as u64;

            // The truncate and reload; a run reads it while the big transaction is written, and
            // the binlog rotates as it reads.
            mariadb(&format!(
                "USE {db}; CREATE TABLE flights_copy AS SELECT * FROM flights; TRUNCATE flights;
                 INSERT INTO flights SELECT * FROM flights_copy; DROP TABLE flights_copy;",
                db = names.db
            ));
            let during = faucet_run(dir.path(), &names)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn faucet");
            let update_started = Instant::now();
            mariadb(&format!(
                "SET SESSION time_zone = '+00:00', SESSION sql_mode = '';
                 UPDATE {table} SET dep_delay = COALESCE(dep_delay, 0) + 1,
                   d = IF(d > 0, d - 0.0001, COALESCE(d, 0) + 0.0001),
                   dtm = COALESCE(dtm, '2000-01-01') - INTERVAL 1 MICROSECOND
                 ORDER BY id LIMIT {updated};
                 FLUSH BINARY LOGS;"
            ));
            let update_secs = update_started.elapsed().as_secs_f64();
            assert_succeeded(
                during.wait_with_output().expect("wait"),
                "the run during the truncate and the big update",
            );
            // A run reading the big transaction while deletes, a rotation and ADD COLUMN happen.
            let reading = faucet_run(dir.path(), &names)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn faucet");
            workload_c(&table);
            assert_succeeded(
                reading.wait_with_output().expect("wait"),
                "the run during the big transaction",
            );
            let catch_up = Instant::now();
            // Bounded runs: each read to the end of the log it saw at start; these read the rest.
            for k in 0..2 {
                output_of_success(
                    &mut faucet_run(dir.path(), &names),
                    &format!("run {}", k + 5),
                );
            }
            let catch_up_secs = catch_up.elapsed().as_secs_f64();

            let verify = Instant::now();
            let mut records = read_records(dir.path(), "flights.jsonl");
            let total = records.len();
            let files: Vec<String> = records
                .iter()
                .filter_map(|r| r["binlog_file"].as_str().map(str::to_owned))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let second = replay(&mut replica, records.split_off(seen), &table, &same_mapping);
            let source = select_table(&names);
            assert_second_part(&replica, &source, &second, updated, before_truncate);
            assert!(
                files.len() >= 3,
                "the changes span fewer than 3 binlog files: {files:?}"
            );
            eprintln!(
                "mysql_cdc_flights: {rows} flights loaded in {load_secs:.1} s; {} change records \
                 (first {first:?}, then {second:?}) in {files:?}; the {updated}-row update took \
                 {update_secs:.1} s; the last two runs {catch_up_secs:.1} s; {} rows equal value by \
                 value (read, replay and compare {:.1} s); {:.1} s in all",
                total,
                source.len(),
                verify.elapsed().as_secs_f64(),
                started.elapsed().as_secs_f64()
            );
        },
        || {
            mariadb(&format!("DROP DATABASE IF EXISTS {}", names.db));
            crate::support::drop_state_tables(&names.state_table);
        },
    );
}
