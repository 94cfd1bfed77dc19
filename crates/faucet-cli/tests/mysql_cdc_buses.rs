//! `mysql-cdc` into the bus sinks through the real `faucet` binary (issue 26: "postgres-cdc
//! and mysql-cdc (many tables, routed per table) … into each sink"): the binlog of two tables
//! of one database, routed per table (`….cdc.{schema}.{table}`: `{schema}` is the MySQL
//! database), into NATS JetStream and into Redis streams with `delivery: effectively_once`,
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
use std::process::Command;
use std::time::Duration;

use crate::support::bus::{
    Consumed, at_least_once, change_of, delete_nats_stream, delete_redis_keys, expect_kafka_up,
    kafka_messages, nats_messages, redis_streams, regex_quote,
};
use crate::support::crash::kill_after;
use crate::support::mariadb::{mariadb, mysql_url_for, unique_server_id};
use crate::support::mysql::database;
use crate::support::pg::Change;
use crate::support::{Dir, expect_aborted, faucet_unarmed, output_of_success};

/// The two source tables of the database.
const TABLES: [&str; 2] = ["a", "b"];

/// Which bus the pipeline writes, with the names of its test's objects.
enum Bus {
    /// Subjects `<prefix>.cdc.<db>.<table>` of the JetStream `stream`.
    Nats { prefix: String, stream: String },
    /// Streams `<prefix>:cdc.<db>.<table>` (token keys under `<prefix>:`).
    Streams { prefix: String },
    /// Topics `<prefix>.cdc.<db>.<table>`, at-least-once.
    Kafka { prefix: String },
}

impl Bus {
    /// The pipeline's sink.
    fn sink(&self) -> String {
        match self {
            Bus::Nats { prefix, stream } => format!(
                "{{ type: nats, config: {{ url: \"${{env:FAUCET_CRASH_NATS_URL}}\", \
                 subject: \"{prefix}.cdc.{{schema}}.{{table}}\", stream: {stream}, \
                 create_stream: true, key: [id], format: debezium }} }}"
            ),
            Bus::Streams { prefix } => format!(
                "{{ type: redis-streams, config: {{ url: \"${{env:FAUCET_CRASH_REDIS_URL}}\", \
                 stream: \"{prefix}:cdc.{{schema}}.{{table}}\", prefix: \"{prefix}:\", key: [id], \
                 format: debezium }} }}"
            ),
            Bus::Kafka { prefix } => format!(
                "{{ type: kafka, config: {{ brokers: \"${{env:FAUCET_CRASH_KAFKA}}\", \
                 topic: \"{prefix}.cdc.{{schema}}.{{table}}\", key: [id], format: debezium }} }}"
            ),
        }
    }

    /// Whether the bus takes `delivery: effectively_once` (Kafka does not: at-least-once).
    fn effectively_once(&self) -> bool {
        !matches!(self, Bus::Kafka { .. })
    }

    /// The fault points a page into the bus passes (a Kafka page has no `before_commit`).
    fn points(&self) -> Vec<&'static str> {
        if self.effectively_once() {
            faucet_core::fault::SQL_SINK.to_vec()
        } else {
            faucet_core::fault::ALL.to_vec()
        }
    }

    /// The subject or stream name of source table `db.table`.
    fn route(&self, db: &str, table: &str) -> String {
        match self {
            Bus::Nats { prefix, .. } => format!("{prefix}.cdc.{db}.{table}"),
            Bus::Streams { prefix } => format!("{prefix}:cdc.{db}.{table}"),
            Bus::Kafka { prefix } => format!("{prefix}.cdc.{db}.{table}"),
        }
    }

    /// Everything the independent consumer reads back.
    fn consume(&self) -> Vec<Consumed> {
        match self {
            Bus::Nats { prefix, stream } => nats_messages(stream, &format!("{prefix}.cdc.>")),
            Bus::Streams { prefix } => redis_streams(&format!("{prefix}:cdc.*")),
            Bus::Kafka { prefix } => kafka_messages(&format!("{}\\.cdc\\..*", regex_quote(prefix))),
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        match self {
            Bus::Nats { stream, .. } => delete_nats_stream(stream),
            Bus::Streams { prefix } => delete_redis_keys(&format!("{prefix}:*")),
            Bus::Kafka { .. } => {}
        }
    }
}

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
            bus.sink(),
            if bus.effectively_once() {
                "delivery: effectively_once\n  "
            } else {
                ""
            }
        ),
    );
    let url = mysql_url_for(&db, None);
    let faucet = || {
        let mut c: Command = faucet_unarmed();
        c.env("SOURCE_MYSQL_URL", &url)
            .env("FAUCET_CRASH_NATS_URL", faucet_test_support::nats_url())
            .env("FAUCET_CRASH_REDIS_URL", faucet_test_support::redis_url())
            .env("FAUCET_CRASH_KAFKA", faucet_test_support::kafka_brokers());
        c
    };
    // The first run starts at the binlog's end: run it once on an empty database, so the
    // workload after it is all in the stream.
    output_of_success(faucet().arg("run").current_dir(dir.path()), "the first run");
    source.workload(0);
    // Every point a bus page passes, `before_commit` (all of a page but its token stored)
    // among them where there is one; more changes halfway so every run has pages to do.
    let mut aborted = 0;
    for (n, point) in bus.points().into_iter().enumerate() {
        if n == 3 {
            source.workload(5);
        }
        for hit in [1, 3] {
            expect_aborted(
                faucet().args(["run", "--quiet"]).current_dir(dir.path()),
                &format!("{point}:{hit}"),
            );
            aborted += 1;
        }
    }
    let mut killed = 0;
    for round in 1..5 {
        source.workload(round);
        if kill_after(
            faucet(),
            dir.path(),
            Duration::from_millis(40 + (round as u64 * 53) % 200),
        ) {
            killed += 1;
        }
    }
    let out = output_of_success(faucet().arg("run").current_dir(dir.path()), "the final run");
    let delivery = if bus.effectively_once() {
        "effectively-once (atomic watermark)"
    } else {
        "at-least-once"
    };
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(delivery),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let mut consumed = bus.consume();
    let mut doubled = 0;
    if !bus.effectively_once() {
        // At-least-once: only pages in flight at a crash come twice; their first copies
        // must then be exactly the changes.
        let what = format!("mysql-cdc → {tag}");
        (consumed, doubled) = at_least_once(&consumed, aborted + killed, BATCH, &what);
    }
    let routes: BTreeSet<String> = TABLES.iter().map(|t| bus.route(&db, t)).collect();
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
        let route = bus.route(&db, table);
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
    let suffix = faucet_test_support::unique_suffix();
    mysql_cdc_into(
        Bus::Nats {
            prefix: format!("faucet-test-mybus-{suffix}"),
            stream: format!("FAUCET_TEST_MYBUS_{suffix}"),
        },
        "nats",
    );
}

#[test]
fn mysql_cdc_of_two_tables_routed_into_redis_streams_is_exactly_once_in_order_per_key() {
    let suffix = faucet_test_support::unique_suffix();
    mysql_cdc_into(
        Bus::Streams {
            prefix: format!("faucet-test-mybus-{suffix}"),
        },
        "streams",
    );
}

#[cfg(feature = "kafka")]
#[test]
fn mysql_cdc_of_two_tables_routed_into_kafka_is_at_least_once_in_order_per_key() {
    let suffix = faucet_test_support::unique_suffix();
    mysql_cdc_into(
        Bus::Kafka {
            prefix: format!("faucet-test-mybus-{suffix}"),
        },
        "kafka",
    );
}
