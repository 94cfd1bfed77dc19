//! The `sqlite` sink through the real `faucet` binary when the process dies: csv → sqlite
//! append with `delivery: effectively_once` (the atomic watermark: rows and commit token in
//! one SQLite transaction) and postgres-cdc → sqlite upsert, each aborted at every fault
//! point and SIGKILLed at pseudo-random instants, restarted to completion, and the database
//! file read with Debian's `sqlite3` command-line tool: every row once, values exact.
//! `FAUCET_SOAK=1` runs more kills. The CDC half needs PostgreSQL with wal_level=logical
//! (`FAUCET_TEST_PG_URL`; `scripts/services.sh` starts it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use faucet_test_support::unique_suffix;
use serde_json::{Value as Json, json};

use crate::support::crash::{CrashScenario, abort_at_every_point, killed_at_random_instants};
use crate::support::pg::{drop_cdc_objects, faucet_with_pg_url, query, sql};

/// Rows of the CSV.
const ROWS: usize = 3_000;
/// Records per page: small, so a run is many transactions and a kill lands inside one.
const BATCH: usize = 20;

/// `sqlite3 -json db sql`: the rows as JSON objects.
fn sqlite3(db: &Path, sql: &str) -> Vec<Json> {
    serde_json::from_str(&faucet_test_support::sqlite3_json(db, sql)).expect("sqlite3 -json output")
}

/// Asserts `got` equals `want` (both ordered by id): lost, doubled and wrong rows counted.
#[track_caller]
fn assert_rows(got: &[Json], want: &[Json], what: &str) {
    let ids = |rows: &[Json]| -> Vec<i64> {
        rows.iter().map(|r| r["id"].as_i64().expect("id")).collect()
    };
    let (got_ids, want_ids) = (ids(got), ids(want));
    let lost = want_ids.iter().filter(|i| !got_ids.contains(i)).count();
    let mut seen = std::collections::BTreeSet::new();
    let doubled = got_ids.iter().filter(|i| !seen.insert(**i)).count();
    assert_eq!(
        (lost, doubled),
        (0, 0),
        "{what}: lost {lost}, doubled {doubled}"
    );
    let wrong: Vec<_> = got.iter().zip(want).filter(|(g, w)| g != w).collect();
    assert!(
        wrong.is_empty() && got.len() == want.len(),
        "{what}: {} rows differ (target, source), first {:?}",
        wrong.len(),
        wrong.first()
    );
}

/// The directory of the current round.
#[derive(Default)]
struct Round(Mutex<Option<PathBuf>>);

impl Round {
    fn set(&self, dir: &Path) {
        *self.0.lock().expect("lock") = Some(dir.to_owned());
    }

    fn db(&self) -> PathBuf {
        self.0
            .lock()
            .expect("lock")
            .clone()
            .expect("prepared")
            .join("out.db")
    }
}

// ---- csv → sqlite append, effectively-once -----------------------------------------------

struct CsvIntoSqlite {
    round: Round,
}

/// The CSV's row `i` as the target must hold it.
fn csv_row(i: usize) -> Json {
    let note = match i % 50 {
        // An empty field is an empty string (the CSV source sets no `null_values`).
        0 => json!(""),
        1 => json!("quote \"q\", comma"),
        _ => json!(format!("n{i}")),
    };
    json!({"id": i, "v": i * 3, "amount": format!("{}.{:02}0", i, i % 100), "note": note})
}

impl CrashScenario for CsvIntoSqlite {
    fn prepare(&self, dir: &Path) {
        let mut csv = String::from("id,v,amount,note\n");
        for i in 0..ROWS {
            let note = match i % 50 {
                0 => String::new(),
                1 => "\"quote \"\"q\"\", comma\"".to_owned(),
                _ => format!("n{i}"),
            };
            csv.push_str(&format!("{i},{},{}.{:02}0,{note}\n", i * 3, i, i % 100));
        }
        std::fs::write(dir.join("in.csv"), csv).expect("csv");
        std::fs::write(
            dir.join("faucet.yaml"),
            format!(
                "version: 1\nname: sqlcsv\npipeline:\n  \
                 source: {{ type: csv, config: {{ path: ./in.csv, columns: {{ id: int, v: int, amount: numeric }} }} }}\n  \
                 sink: {{ type: sqlite, config: {{ path: ./out.db, table: target, create_table: true }} }}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  \
                 delivery: effectively_once\n  batch_size: {BATCH}\n"
            ),
        )
        .expect("config");
        self.round.set(dir);
    }

    fn check(&self, what: &str) {
        let got = sqlite3(
            &self.round.db(),
            "SELECT id, v, amount, note FROM target ORDER BY id, rowid",
        );
        let want: Vec<Json> = (0..ROWS).map(csv_row).collect();
        assert_rows(&got, &want, what);
    }

    fn drop(&self) {}

    fn faucet(&self) -> Command {
        crate::support::faucet_unarmed()
    }
}

#[test]
fn csv_into_sqlite_append_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&CsvIntoSqlite {
        round: Round::default(),
    });
}

#[test]
fn csv_into_sqlite_append_survives_sigkill() {
    killed_at_random_instants(&CsvIntoSqlite {
        round: Round::default(),
    });
}

// ---- postgres-cdc → sqlite upsert --------------------------------------------------------

/// A source table with a publication and a slot, made anew by every `prepare`.
struct CdcIntoSqlite {
    round: Round,
    /// (schema, publication, slot) of the current round.
    names: Mutex<Option<(String, String, String)>>,
}

impl CdcIntoSqlite {
    fn new() -> Self {
        Self {
            round: Round::default(),
            names: Mutex::new(None),
        }
    }

    fn drop_names(&self) {
        if let Some((schema, publication, slot)) = self.names.lock().expect("lock").take() {
            drop_cdc_objects(&slot, &publication, &schema);
        }
    }
}

impl CrashScenario for CdcIntoSqlite {
    fn prepare(&self, dir: &Path) {
        self.drop_names();
        let suffix = unique_suffix();
        let (s, publication, slot) = (
            format!("sqlite_cdc_{suffix}"),
            format!("sqlite_pub_{suffix}"),
            format!("sqlite_slot_{suffix}"),
        );
        *self.names.lock().expect("lock") = Some((s.clone(), publication.clone(), slot.clone()));
        sql(&format!(
            "CREATE SCHEMA {s}; CREATE SEQUENCE {s}.seq; \
             CREATE TABLE {s}.items (id int PRIMARY KEY, v bigint NOT NULL, note text, amount numeric); \
             CREATE PUBLICATION {publication} FOR TABLE {s}.items"
        ));
        sql(&format!(
            "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
        ));
        // Inserts, updates, deletes, a key change and one transaction of many changes (so
        // pages end inside it); every insert and update takes a fresh `v`.
        sql(&format!(
            "INSERT INTO {s}.items SELECT g, nextval('{s}.seq'), 'n' || g, g / 8.0 FROM generate_series(1, 600) g"
        ));
        for k in 0..5 {
            sql(&format!(
                "UPDATE {s}.items SET v = nextval('{s}.seq'), amount = amount * 2 WHERE id % 5 = {k}"
            ));
        }
        sql(&format!(
            "BEGIN; UPDATE {s}.items SET v = nextval('{s}.seq'), note = note || ', \"q\"'; \
             DELETE FROM {s}.items WHERE id > 590; UPDATE {s}.items SET id = id + 1000 WHERE id = 7; \
             INSERT INTO {s}.items SELECT g, nextval('{s}.seq'), NULL, NULL FROM generate_series(601, 640) g; COMMIT"
        ));
        sql(&format!("DELETE FROM {s}.items WHERE id % 7 = 0"));
        std::fs::write(
            dir.join("faucet.yaml"),
            format!(
                "version: 1\nname: sqlcdc\npipeline:\n  \
                 source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_SQLITE_PG_URL}}\", \
                 slot_name: {slot}, publication: {publication}, tables: [{s}.items] }} }}\n  \
                 sink: {{ type: sqlite, config: {{ path: ./out.db, table: items, write_mode: upsert, key: [id], create_table: true }} }}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  \
                 delivery: effectively_once\n  batch_size: {BATCH}\n"
            ),
        )
        .expect("config");
        self.round.set(dir);
    }

    fn check(&self, what: &str) {
        let schema = self
            .names
            .lock()
            .expect("lock")
            .clone()
            .expect("prepared")
            .0;
        let source: Vec<(i32, i64, Option<String>, Option<String>)> = query(&format!(
            "SELECT id, v, note, amount::text FROM {schema}.items ORDER BY id"
        ));
        assert!(!source.is_empty(), "the workload left rows");
        let want: Vec<Json> = source
            .iter()
            .map(|(id, v, note, amount)| json!({"id": id, "v": v, "note": note, "amount": amount}))
            .collect();
        let got = sqlite3(
            &self.round.db(),
            "SELECT id, v, note, amount FROM items ORDER BY id",
        );
        assert_rows(&got, &want, what);
    }

    fn drop(&self) {
        self.drop_names();
    }

    fn faucet(&self) -> Command {
        faucet_with_pg_url("FAUCET_SQLITE_PG_URL")
    }
}

#[test]
fn postgres_cdc_into_sqlite_upsert_is_exact_across_aborts_at_every_fault_point() {
    abort_at_every_point(&CdcIntoSqlite::new());
}

#[test]
fn postgres_cdc_into_sqlite_upsert_survives_sigkill() {
    killed_at_random_instants(&CdcIntoSqlite::new());
}
