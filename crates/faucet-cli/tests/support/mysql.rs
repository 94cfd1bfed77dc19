//! Helpers for pipelines into the `mysql` sink (feature `mysql`): statements and queries
//! through the `mariadb` client, and crash [`Scenario`]s for the drivers of
//! [`super::crash`]. The server is `FAUCET_TEST_MYSQL_SINK_URL` (default the system MariaDB
//! `mysql://root@127.0.0.1:3306/test`: the sink needs no binlog); each scenario in its own
//! database. A `mysql-cdc` scenario's source is a database of the same name on the binlog
//! server (`FAUCET_TEST_MYSQL_URL`, [`super::mariadb`]).

use std::path::Path;
use std::process::Command;

use super::crash::CrashScenario;
use super::faucet_unarmed;

/// Rows of every scenario's source.
pub(crate) const ROWS: usize = 3_000;
/// Records per page for the fault-point tests.
pub(crate) const BATCH: usize = 250;
/// Small pages for the SIGKILL tests, so a run lasts long enough to be killed mid-way.
pub(crate) const KILL_BATCH: usize = 20;

/// The sink tests' server.
pub(crate) fn server_url() -> String {
    std::env::var("FAUCET_TEST_MYSQL_SINK_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// The server's URL with database `db`.
pub(crate) fn url_for(db: &str) -> String {
    let url = server_url();
    let base = url.rsplit_once('/').map_or(url.as_str(), |(b, _)| b);
    format!("{base}/{db}")
}

/// The rows `sql` prints on the server of `url`, tab-separated fields (`NULL` for null);
/// panics naming the server and the statement when it fails.
#[track_caller]
pub(crate) fn mariadb_at(url: &str, sql: &str) -> Vec<Vec<String>> {
    super::mariadb::rows(&super::mariadb::mariadb_at(url, sql))
}

/// [`mariadb_at`] on the sink tests' server.
pub(crate) fn mariadb(sql: &str) -> Vec<Vec<String>> {
    mariadb_at(&server_url(), sql)
}

/// A test's own database name, `<prefix>_<suffix>`.
pub(crate) fn database(prefix: &str) -> String {
    format!("{prefix}_{}", faucet_test_support::unique_suffix())
}

/// Asserts every id 0..n is in `table` (`db.table`) exactly once with `v = id * 3`.
#[track_caller]
pub(crate) fn check_exactly_once(table: &str, n: usize, what: &str) {
    let rows = mariadb(&format!(
        "SELECT id, COUNT(*), SUM(v <> id * 3) FROM {table} GROUP BY id ORDER BY id"
    ));
    let lost = n.saturating_sub(rows.len());
    let count = |r: &Vec<String>| r[1].parse::<i64>().expect("count");
    let dups: i64 = rows.iter().map(|r| count(r) - 1).sum();
    assert_eq!(
        (lost, dups),
        (0, 0),
        "{what}: lost {lost}, duplicated {dups}"
    );
    let ids: Vec<i64> = rows.iter().map(|r| r[0].parse().expect("id")).collect();
    assert_eq!(ids, (0..n as i64).collect::<Vec<_>>(), "{what}");
    let wrong: Vec<&Vec<String>> = rows.iter().filter(|r| r[2] != "0").collect();
    assert!(wrong.is_empty(), "{what}: wrong values {wrong:?}");
}

/// Which pipeline a [`Scenario`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pair {
    /// csv → mysql append, atomic watermark; the target has no key.
    CsvAppend,
    /// Incremental mysql query → mysql upsert by `id` (keyed upsert).
    QueryUpsert,
    /// `mysql-cdc` (binlog server) → mysql append, atomic watermark: every change record
    /// one row of an audit table the sink creates.
    CdcAppend,
}

/// A scenario: a config and how to (re)create its source and target, and check the target.
pub(crate) struct Scenario {
    /// The scenario's own database.
    pub(crate) db: String,
    yaml: String,
    pair: Pair,
}

/// The `mysql-cdc` scenario's workload, written to the binlog before the first run, in the
/// order the changes are logged: [`CDC_BIG`] rows inserted in one transaction (several pages,
/// so the second page's fault lands inside it), then rows up to [`CDC_ROWS`] in transactions
/// of 50, one `UPDATE` of every row (`v = id * 3 + 1`, one transaction of [`CDC_ROWS`]
/// changes), then deletes of every 10th row, 20 per transaction.
const CDC_BIG: usize = 1_000;
/// Rows the `mysql-cdc` workload inserts (ids `0..CDC_ROWS`, `v = id * 3`).
const CDC_ROWS: usize = 1_500;

/// The workload's statements on database `d` of the binlog server.
fn cdc_workload(d: &str) -> String {
    let mut sql = format!(
        "INSERT INTO `{d}`.src SELECT seq, seq * 3 FROM `{d}`.seq_0_to_{};",
        CDC_BIG - 1
    );
    for start in (CDC_BIG..CDC_ROWS).step_by(50) {
        sql.push_str(&format!(
            "INSERT INTO `{d}`.src SELECT seq, seq * 3 FROM `{d}`.seq_{start}_to_{};",
            (start + 49).min(CDC_ROWS - 1)
        ));
    }
    sql.push_str(&format!("UPDATE `{d}`.src SET v = id * 3 + 1;"));
    for start in (0..CDC_ROWS).step_by(200) {
        sql.push_str(&format!(
            "DELETE FROM `{d}`.src WHERE id % 10 = 0 AND id >= {start} AND id < {};",
            start + 200
        ));
    }
    sql
}

/// Every change of [`cdc_workload`] as `(op, id, v)` (the after image's; a delete's before
/// image), sorted: each is unique.
fn cdc_changes() -> Vec<(String, i64, i64)> {
    let n = CDC_ROWS as i64;
    let mut all: Vec<(String, i64, i64)> = (0..n)
        .map(|i| ("c".to_owned(), i, i * 3))
        .chain((0..n).map(|i| ("u".to_owned(), i, i * 3 + 1)))
        .chain((0..n).step_by(10).map(|i| ("d".to_owned(), i, i * 3 + 1)))
        .collect();
    all.sort();
    all
}

/// Asserts `table` (`db.table`, the audit rows of [`Pair::CdcAppend`]) holds every change
/// of [`cdc_workload`] exactly once, of the source table, and nothing else.
#[track_caller]
fn check_changes_exactly_once(table: &str, source: &str, what: &str) {
    let rows = mariadb(&format!(
        "SELECT op, JSON_VALUE(IF(op = 'd', `before`, `after`), '$.id'), \
         JSON_VALUE(IF(op = 'd', `before`, `after`), '$.v'), COUNT(*), \
         SUM(`table` <> '{source}' OR binlog_pos IS NULL) FROM {table} GROUP BY 1, 2, 3"
    ));
    let got: std::collections::BTreeMap<(String, i64, i64), i64> = rows
        .iter()
        .map(|r| {
            let n = |s: &str| s.parse::<i64>().unwrap_or_else(|_| panic!("{what}: {r:?}"));
            assert_eq!(r[4], "0", "{what}: wrong table or no position: {r:?}");
            ((r[0].clone(), n(&r[1]), n(&r[2])), n(&r[3]))
        })
        .collect();
    let want = cdc_changes();
    let lost: Vec<&(String, i64, i64)> = want.iter().filter(|k| !got.contains_key(*k)).collect();
    let dups: i64 = got.values().map(|c| c - 1).sum();
    assert_eq!(
        (lost.len(), dups),
        (0, 0),
        "{what}: lost {} (first {:?}), duplicated {dups}",
        lost.len(),
        lost.first()
    );
    assert_eq!(got.len(), want.len(), "{what}: changes never made");
}

impl Scenario {
    /// The scenario `pair`, its objects named after `tag`, in pages of `batch` records.
    pub(crate) fn new(pair: Pair, tag: &str, batch: usize) -> Self {
        let (prefix, name) = match pair {
            Pair::CsvAppend => ("cli_mcrash_csv", "mcrashcsv"),
            Pair::QueryUpsert => ("cli_mcrash_my", "mcrashmy"),
            Pair::CdcAppend => ("cli_mcrash_cdc", "mcrashcdc"),
        };
        let db = database(&format!("{prefix}_{tag}"));
        let url = "\"${env:FAUCET_CRASH_MYSQL_URL}\"";
        let source = match pair {
            Pair::CsvAppend => {
                "{ type: csv, config: { path: ./in.csv, columns: { id: int, v: int } } }".to_owned()
            }
            Pair::QueryUpsert => format!(
                "{{ type: mysql, config: {{ connection_url: {url}, table: {db}.src, \
                 replication_method: incremental, replication_key: [updated_at, id] }} }}"
            ),
            // `server_id` and `start` are filled in by `prepare`, at the binlog's end then.
            Pair::CdcAppend => format!(
                "{{ type: mysql-cdc, config: {{ connection_url: \"${{env:FAUCET_CRASH_CDC_URL}}\", \
                 tables: [{db}.src], server_id: {CDC_SERVER_ID}, start: {CDC_START} }} }}"
            ),
        };
        let mode = match pair {
            Pair::CsvAppend => String::new(),
            Pair::CdcAppend => ", create_table: true".to_owned(),
            Pair::QueryUpsert => ", write_mode: upsert, key: [id]".to_owned(),
        };
        let sink = format!(
            "{{ type: mysql, config: {{ connection_url: {url}, table: {db}.target{mode} }} }}"
        );
        let yaml = super::crash::scenario_yaml(name, &source, &sink, batch);
        Self { db, yaml, pair }
    }
}

/// Placeholder of the `mysql-cdc` config's `server_id`, replaced by [`Scenario::prepare`]
/// with a fresh one ([`super::mariadb::unique_server_id`]).
const CDC_SERVER_ID: &str = "__SERVER_ID__";
/// Placeholder of the `mysql-cdc` config's `start`, replaced by [`Scenario::prepare`] with
/// the binlog position before the workload.
const CDC_START: &str = "__START__";

impl CrashScenario for Scenario {
    fn prepare(&self, dir: &Path) {
        let d = &self.db;
        mariadb(&format!(
            "DROP DATABASE IF EXISTS `{d}`; CREATE DATABASE `{d}` CHARACTER SET utf8mb4"
        ));
        match self.pair {
            Pair::CsvAppend => {
                std::fs::write(dir.join("in.csv"), super::crash::id_v_csv(ROWS)).expect("csv");
                mariadb(&format!(
                    "CREATE TABLE `{d}`.target (id BIGINT, v BIGINT) ENGINE=InnoDB"
                ));
            }
            Pair::QueryUpsert => {
                mariadb(&format!(
                    "CREATE TABLE `{d}`.src (id INT PRIMARY KEY, v INT NOT NULL, \
                     updated_at DATETIME(6) NOT NULL) ENGINE=InnoDB; \
                     INSERT INTO `{d}`.src SELECT seq, seq * 3, \
                     TIMESTAMP '2026-01-01 00:00:00' + INTERVAL (seq DIV 7) SECOND \
                     FROM `{d}`.seq_0_to_{}; \
                     CREATE TABLE `{d}`.target (id INT PRIMARY KEY, v INT NOT NULL, \
                     updated_at DATETIME(6) NOT NULL) ENGINE=InnoDB",
                    ROWS - 1
                ));
            }
            Pair::CdcAppend => {
                // The source on the binlog server, its changes logged before the first run,
                // which starts where they begin (a transaction boundary: the log's end).
                use super::mariadb::{mariadb as binlog, rows, unique_server_id};
                binlog(&format!(
                    "DROP DATABASE IF EXISTS `{d}`; CREATE DATABASE `{d}`; \
                     CREATE TABLE `{d}`.src (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"
                ));
                let status = rows(&binlog("SHOW MASTER STATUS"));
                let (file, pos) = (&status[0][0], &status[0][1]);
                binlog(&cdc_workload(d));
                let yaml = self
                    .yaml
                    .replace(CDC_SERVER_ID, &unique_server_id().to_string())
                    .replace(
                        CDC_START,
                        &format!("{{ at: {{ binlog_file: {file}, binlog_pos: {pos} }} }}"),
                    );
                std::fs::write(dir.join("faucet.yaml"), yaml).expect("config");
                return;
            }
        }
        std::fs::write(dir.join("faucet.yaml"), &self.yaml).expect("config");
    }

    fn check(&self, what: &str) {
        let target = format!("`{}`.target", self.db);
        match self.pair {
            Pair::CdcAppend => {
                check_changes_exactly_once(&target, &format!("{}.src", self.db), what);
            }
            Pair::CsvAppend | Pair::QueryUpsert => check_exactly_once(&target, ROWS, what),
        }
    }

    fn drop(&self) {
        mariadb(&format!("DROP DATABASE IF EXISTS `{}`", self.db));
        if self.pair == Pair::CdcAppend {
            super::mariadb::mariadb(&format!("DROP DATABASE IF EXISTS `{}`", self.db));
        }
    }

    fn faucet(&self) -> Command {
        let mut c = faucet_unarmed();
        c.env("FAUCET_CRASH_MYSQL_URL", url_for(&self.db));
        if self.pair == Pair::CdcAppend {
            c.env(
                "FAUCET_CRASH_CDC_URL",
                super::mariadb::mysql_url_for(&self.db, None),
            );
        }
        c
    }
}
