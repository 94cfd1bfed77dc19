//! `mysql-cdc` into the bus sinks through the real `faucet` binary (issue 26: "postgres-cdc
//! and mysql-cdc (many tables, routed per table) … into each sink"): the binlog of two tables
//! of one database, routed per table (`….cdc.{schema}.{table}`: `{schema}` is the MySQL
//! database), into NATS JetStream and into Redis streams with `delivery: effectively_once`
//! and into Kafka (tansu) at-least-once, aborted at every fault point and SIGKILLed between
//! new changes, rerun to completion; then the independent consumer
//! (`scripts/bus_consumer.py`) reads everything back.
//!
//! The oracle is the workload itself: the test applies every statement to a model of the
//! tables as well, so it knows, per key, the exact changes the binlog holds (every insert and
//! update takes a fresh `v`, so no update is a no-op). Each subject / stream must hold, per
//! key, exactly those changes, once each and in commit order, and nothing else. Each Kafka
//! topic must hold every one of them at least once, duplicates only of pages in flight at a
//! crash ([`at_least_once`]: one `faucet-id` on every copy, at most a page per crash), and
//! each key's first copies in commit order.
//!
//! The binlog server is `FAUCET_TEST_MYSQL_URL` (the private MariaDB `scripts/services.sh`
//! starts), nats-server `FAUCET_TEST_NATS_URL`, Redis `FAUCET_TEST_REDIS_URL`, tansu
//! `FAUCET_TEST_KAFKA_BROKERS`; each test uses its own database, stream, keys and topics,
//! removed at the end (tansu's topics are left behind: small and uniquely named).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::Dir;
use crate::support::bus::{
    Bus, abort_at_every_point_with, at_least_once, change_of, expect_kafka_up, faucet_for_buses,
    final_run, killed_between_rounds,
};
use crate::support::mariadb::{mariadb, mysql_url_for, unique_server_id};
use crate::support::mysql::database;
use crate::support::output_of_success;
use crate::support::pg::Change;

/// The two source tables of the database.
const TABLES: [&str; 2] = ["a", "b"];

/// The source database and the model of its tables: the current `v` of every key, and every
/// change each key has had, in commit order.
struct Source {
    db: String,
    next_v: i64,
    rows: BTreeMap<(&'static str, i64), i64>,
    changes: BTreeMap<(&'static str, i64), Vec<Change>>,
}

impl Source {
    fn new(tag: &str) -> Self {
        let db = database(&format!("mybus_{tag}"));
        mariadb(&format!(
            "CREATE DATABASE `{db}`; \
             CREATE TABLE `{db}`.a (id int PRIMARY KEY, v bigint NOT NULL); \
             CREATE TABLE `{db}`.b (id int PRIMARY KEY, v bigint NOT NULL)"
        ));
        Self {
            db,
            next_v: 1,
            rows: BTreeMap::new(),
            changes: BTreeMap::new(),
        }
    }

    fn fresh_v(&mut self) -> i64 {
        self.next_v += 1;
        self.next_v
    }

    fn record(&mut self, table: &'static str, id: i64, op: &str, v: Option<i64>) {
        match v {
            Some(v) => self.rows.insert((table, id), v),
            None => self.rows.remove(&(table, id)),
        };
        self.changes
            .entry((table, id))
            .or_default()
            .push((op.to_owned(), id, v));
    }

    /// The ids of `table` with `id % m = r` now.
    fn matching(&self, table: &'static str, m: i64, r: i64) -> Vec<i64> {
        self.rows
            .keys()
            .filter(|(t, id)| *t == table && id % m == r)
            .map(|(_, id)| *id)
            .collect()
    }

    /// One round: inserts into both tables (one multi-row statement each), one transaction
    /// updating both and deleting from `a`, then a delete from `b` on its own.
    fn workload(&mut self, round: i64) {
        let db = self.db.clone();
        let mut script = String::new();
        for table in TABLES {
            let mut values = Vec::new();
            for id in round * 300 + 1..=round * 300 + 250 {
                let v = self.fresh_v();
                values.push(format!("({id}, {v})"));
                self.record(table, id, "c", Some(v));
            }
            script.push_str(&format!(
                "INSERT INTO `{db}`.{table} VALUES {};\n",
                values.join(", ")
            ));
        }
        let r = round % 3;
        let n = self.fresh_v();
        for (table, m) in [("a", 3), ("b", 4)] {
            for id in self.matching(table, m, r) {
                self.record(table, id, "u", Some(n));
            }
        }
        for id in self.matching("a", 11, r) {
            self.record("a", id, "d", None);
        }
        script.push_str(&format!(
            "BEGIN; UPDATE `{db}`.a SET v = {n} WHERE id % 3 = {r}; \
             UPDATE `{db}`.b SET v = {n} WHERE id % 4 = {r}; \
             DELETE FROM `{db}`.a WHERE id % 11 = {r}; COMMIT;\n"
        ));
        let r5 = round % 5;
        for id in self.matching("b", 13, r5) {
            self.record("b", id, "d", None);
        }
        script.push_str(&format!("DELETE FROM `{db}`.b WHERE id % 13 = {r5};\n"));
        mariadb(&script);
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            mariadb(&format!("DROP DATABASE IF EXISTS `{}`", self.db));
        });
    }
}

/// The pages of a run.
const BATCH: usize = 40;

/// Runs the scenario into `bus` and checks what the consumer reads back.
fn mysql_cdc_into(bus: Bus, tag: &str) {
    if !bus.effectively_once() {
        expect_kafka_up();
    }
    let mut source = Source::new(tag);
    let db = source.db.clone();
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: mybus\npipeline:\n  \
             source: {{ type: mysql-cdc, config: {{ connection_url: \"${{env:SOURCE_MYSQL_URL}}\", \
             server_id: {}, tables: [{db}.a, {db}.b] }} }}\n  \
             sink: {}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             {}batch_size: {BATCH}\n",
            unique_server_id(),
            bus.sink("cdc.{schema}.{table}", ", format: debezium"),
            if bus.effectively_once() {
                "delivery: effectively_once\n  "
            } else {
                ""
            }
        ),
    );
    let url = mysql_url_for(&db, None);
    let faucet = || {
        let mut c = faucet_for_buses();
        c.env("SOURCE_MYSQL_URL", &url);
        c
    };
    // The first run starts at the binlog's end: run it once on an empty database, so the
    // workload after it is all in the stream.
    output_of_success(faucet().arg("run").current_dir(dir.path()), "the first run");
    source.workload(0);
    let aborted =
        abort_at_every_point_with(faucet, dir.path(), bus.points(), || source.workload(5));
    let killed = killed_between_rounds(
        faucet,
        dir.path(),
        1..5,
        |round| source.workload(round as i64),
        |round| Duration::from_millis(40 + (round * 53) % 200),
    );
    let delivery = if bus.effectively_once() {
        "effectively-once (atomic watermark)"
    } else {
        "at-least-once"
    };
    final_run(&mut faucet(), dir.path(), delivery);

    let mut consumed = bus.consume("cdc.*");
    let mut doubled = 0;
    if !bus.effectively_once() {
        // At-least-once: only pages in flight at a crash come twice; their first copies
        // must then be exactly the changes.
        let what = format!("mysql-cdc → {tag}");
        (consumed, doubled) = at_least_once(&consumed, aborted + killed, BATCH, &what);
    }
    let route = |table: &str| bus.route(&format!("cdc.{db}.{table}"));
    let routes: BTreeSet<String> = TABLES.iter().map(|t| route(t)).collect();
    let strays: Vec<&str> = consumed
        .iter()
        .map(|m| m.stream.as_str())
        .filter(|s| !routes.contains(*s))
        .collect();
    assert!(
        strays.is_empty(),
        "messages on no table's route: {strays:?}"
    );
    for table in TABLES {
        let route = route(table);
        let mut got: BTreeMap<i64, Vec<Change>> = BTreeMap::new();
        for m in consumed.iter().filter(|m| m.stream == route) {
            let change = change_of(m, "binlog_file");
            got.entry(change.1).or_default().push(change);
        }
        let want: BTreeMap<i64, Vec<Change>> = source
            .changes
            .iter()
            .filter(|((t, _), _)| *t == table)
            .map(|((_, id), c)| (*id, c.clone()))
            .collect();
        let (have_n, want_n) = (
            got.values().map(Vec::len).sum::<usize>(),
            want.values().map(Vec::len).sum::<usize>(),
        );
        assert!(want_n > 1_000, "{table}: a workload of {want_n} changes");
        let differing: Vec<i64> = want
            .keys()
            .chain(got.keys())
            .filter(|id| got.get(id) != want.get(id))
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert!(
            differing.is_empty(),
            "{table}: {have_n} messages for {want_n} changes; {} keys differ from their \
             changes in commit order, e.g. id {}: got {:?}, want {:?}",
            differing.len(),
            differing[0],
            got.get(&differing[0]),
            want.get(&differing[0])
        );
    }
    eprintln!("mysql-cdc → {tag}: {killed} runs SIGKILLed mid-run, {doubled} changes doubled");
}

#[test]
fn mysql_cdc_of_two_tables_routed_into_nats_is_exactly_once_in_order_per_key() {
    mysql_cdc_into(Bus::nats("mybus"), "nats");
}

#[test]
fn mysql_cdc_of_two_tables_routed_into_redis_streams_is_exactly_once_in_order_per_key() {
    mysql_cdc_into(Bus::streams("mybus"), "streams");
}

#[cfg(feature = "kafka")]
#[test]
fn mysql_cdc_of_two_tables_routed_into_kafka_is_at_least_once_in_order_per_key() {
    mysql_cdc_into(Bus::kafka("mybus"), "kafka");
}
