//! Helpers for pipelines into the `mysql` sink (feature `mysql`): statements and queries
//! through the `mariadb` client, and crash [`Scenario`]s for the drivers of
//! [`super::crash`]. The server is `FAUCET_TEST_MYSQL_SINK_URL` (default the system MariaDB
//! `mysql://root@127.0.0.1:3306/test`: the sink needs no binlog); each scenario in its own
//! database.

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
enum Pair {
    /// csv → mysql append, atomic watermark; the target has no key.
    CsvAppend,
    /// Incremental mysql query → mysql upsert by `id` (keyed upsert).
    QueryUpsert,
}

/// A scenario: a config and how to (re)create its source and target, and check the target.
pub(crate) struct Scenario {
    /// The scenario's own database.
    pub(crate) db: String,
    yaml: String,
    pair: Pair,
}

impl Scenario {
    fn new(pair: Pair, tag: &str, batch: usize) -> Self {
        let (prefix, name) = match pair {
            Pair::CsvAppend => ("cli_mcrash_csv", "mcrashcsv"),
            Pair::QueryUpsert => ("cli_mcrash_my", "mcrashmy"),
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
        };
        let mode = match pair {
            Pair::CsvAppend => String::new(),
            Pair::QueryUpsert => ", write_mode: upsert, key: [id]".to_owned(),
        };
        let sink = format!(
            "{{ type: mysql, config: {{ connection_url: {url}, table: {db}.target{mode} }} }}"
        );
        let yaml = format!(
            "version: 1\nname: {name}\npipeline:\n  source: {source}\n  sink: {sink}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             delivery: effectively_once\n  batch_size: {batch}\n"
        );
        Self { db, yaml, pair }
    }

    /// csv → mysql append (no key) with the atomic watermark.
    pub(crate) fn csv_to_append(tag: &str, batch: usize) -> Self {
        Self::new(Pair::CsvAppend, tag, batch)
    }

    /// Incremental mysql query → mysql upsert by `id`.
    pub(crate) fn query_to_upsert(tag: &str, batch: usize) -> Self {
        Self::new(Pair::QueryUpsert, tag, batch)
    }
}

impl CrashScenario for Scenario {
    fn prepare(&self, dir: &Path) {
        let d = &self.db;
        mariadb(&format!(
            "DROP DATABASE IF EXISTS `{d}`; CREATE DATABASE `{d}` CHARACTER SET utf8mb4"
        ));
        match self.pair {
            Pair::CsvAppend => {
                let mut text = String::from("id,v\n");
                for i in 0..ROWS {
                    text.push_str(&format!("{i},{}\n", i * 3));
                }
                std::fs::write(dir.join("in.csv"), text).expect("csv");
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
        }
        std::fs::write(dir.join("faucet.yaml"), &self.yaml).expect("config");
    }

    fn check(&self, what: &str) {
        check_exactly_once(&format!("`{}`.target", self.db), ROWS, what);
    }

    fn drop(&self) {
        mariadb(&format!("DROP DATABASE IF EXISTS `{}`", self.db));
    }

    fn faucet(&self) -> Command {
        let mut c = faucet_unarmed();
        c.env("FAUCET_CRASH_MYSQL_URL", url_for(&self.db));
        c
    }
}
