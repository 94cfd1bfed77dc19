//! The `kafka` sink through the real `faucet` binary against tansu (a Kafka-compatible
//! broker, `scripts/services.sh` starts it), read back by an independent consumer
//! (`scripts/bus_consumer.py`, confluent-kafka). At-least-once is what is proven:
//!
//! * csv → kafka, aborted at every fault point and SIGKILLed at random instants, rerun to
//!   completion: every row at least once, and every duplicate a replay of a page in flight
//!   at the crash — its copies carry one `faucet-id` (so they were produced from the same
//!   durable bookmark), and no more rows are doubled than one page per crash;
//! * postgres-cdc of two tables routed per table (`….cdc.{schema}.{table}`), SIGKILLed
//!   between new changes: each topic holds every change an independent `test_decoding` slot
//!   saw for its table, each key's changes in commit order, duplicates as above;
//! * `delivery: effectively_once` is refused by `faucet validate` and `faucet run`, naming
//!   the sink and why; `faucet doctor` passes against the broker and names an unreachable one.
//!
//! Crash rounds: `FAUCET_SOAK=1` runs more. Every test uses topics, schemas and slots of its
//! own (tansu's topics are left behind: they are small and uniquely named).

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::bus::{
    CSV_ROWS, TwoTables, at_least_once, csv_config, csv_row_id, expect_kafka_up, faucet_for_buses,
    final_run, kafka_messages, killed_between_rounds, kills_in, regex_quote, write_csv,
};
use crate::support::crash::{CrashScenario, abort_at_every_point, killed_at_random_instants};
use crate::support::pg::unique_suffix;
use crate::support::{Dir, faucet_unarmed};

/// csv → kafka: a topic of its own per `prepare`, `<prefix>-<n>.events`.
struct CsvIntoKafka {
    prefix: String,
    batch: usize,
    round: Cell<usize>,
    dir: RefCell<Option<PathBuf>>,
}

impl CsvIntoKafka {
    fn new(tag: &str, batch: usize) -> Self {
        Self {
            prefix: format!("faucet-test-kafkacli-{tag}-{}", unique_suffix()),
            batch,
            round: Cell::new(0),
            dir: RefCell::new(None),
        }
    }

    fn topic(&self) -> String {
        format!("{}-{}.events", self.prefix, self.round.get())
    }
}

impl CrashScenario for CsvIntoKafka {
    fn prepare(&self, dir: &Path) {
        expect_kafka_up();
        self.round.set(self.round.get() + 1);
        *self.dir.borrow_mut() = Some(dir.to_owned());
        write_csv(dir);
        let sink = format!(
            "{{ type: kafka, config: {{ brokers: \"${{env:FAUCET_CRASH_KAFKA}}\", \
             topic: \"{}\", key: [id], compression: lz4 }} }}",
            self.topic()
        );
        let tail = format!("  batch_size: {}\n", self.batch);
        std::fs::write(
            dir.join("faucet.yaml"),
            csv_config("kafkacsv", &sink, &tail),
        )
        .expect("config");
    }

    /// Every row at least once with its exact values; duplicates only of pages in flight.
    /// The fault-point driver crashes each run once; the kill driver as `kill.err` says.
    fn check(&self, what: &str) {
        let got = kafka_messages(&regex_quote(&self.topic()));
        let dir = self.dir.borrow().clone().expect("prepared");
        let crashes = kills_in(&dir).max(1);
        let (unique, doubled) = at_least_once(&got, crashes, self.batch, what);
        let mut ids: Vec<i64> = unique.iter().map(|m| csv_row_id(m, what)).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..CSV_ROWS as i64).collect::<Vec<_>>(),
            "{what}: rows lost"
        );
        eprintln!(
            "csv → kafka, {what}: {} messages, {doubled} rows doubled",
            got.len()
        );
    }

    fn drop(&self) {}

    fn faucet(&self) -> Command {
        let mut c = faucet_unarmed();
        c.env("FAUCET_CRASH_KAFKA", faucet_test_support::kafka_brokers());
        c
    }

    /// A kafka page passes no `before_commit`.
    fn points(&self) -> Vec<&'static str> {
        faucet_core::fault::ALL.to_vec()
    }
}

#[test]
fn csv_into_kafka_is_at_least_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&CsvIntoKafka::new("points", 250));
}

#[test]
fn csv_into_kafka_is_at_least_once_across_sigkills() {
    killed_at_random_instants(&CsvIntoKafka::new("kills", 50));
}

#[test]
fn postgres_cdc_of_two_tables_routed_into_kafka_is_at_least_once_in_key_order() {
    expect_kafka_up();
    let source = TwoTables::new("kafka_cdc");
    let prefix = format!("faucet-test-kafkacdc-{}", unique_suffix());
    let batch = 40;
    let dir = Dir::new();
    let sink = format!(
        "{{ type: kafka, config: {{ brokers: \"${{env:FAUCET_CRASH_KAFKA}}\", \
         topic: \"{prefix}.cdc.{{schema}}.{{table}}\", key: [id], format: debezium }} }}"
    );
    dir.write(
        "faucet.yaml",
        source.config("kafkacdc", &sink, &format!("  batch_size: {batch}\n")),
    );
    let faucet = || {
        let mut c = faucet_for_buses();
        c.env("FAUCET_CRASH_KAFKA", faucet_test_support::kafka_brokers());
        c
    };
    let rounds = crate::support::soak_or(12, 4);
    let killed = killed_between_rounds(
        faucet,
        dir.path(),
        0..rounds,
        |round| source.round(round),
        |round| Duration::from_millis(60 + (round * 97) % 300),
    );
    final_run(&mut faucet(), dir.path(), "at-least-once");
    let consumed = kafka_messages(&format!("{}\\.cdc\\..*", regex_quote(&prefix)));
    let (unique, doubled) = at_least_once(&consumed, killed.max(1), batch, "postgres-cdc → kafka");
    // Kafka orders a partition, and a key stays in one: compare each key's changes.
    source.expect_routed(&unique, |s| format!("{prefix}.cdc.{s}.items"), true);
    eprintln!(
        "postgres-cdc → kafka: {killed} runs SIGKILLed mid-run, {} messages, {doubled} changes doubled",
        consumed.len()
    );
}

#[test]
fn effectively_once_is_refused_naming_the_sink() {
    let dir = Dir::new();
    dir.write("in.csv", "id\n1\n");
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: kafkaeo\npipeline:\n  \
             source: {{ type: csv, config: {{ path: ./in.csv }} }}\n  \
             sink: {{ type: kafka, config: {{ brokers: \"{}\", topic: faucet-test-kafkaeo }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             delivery: effectively_once\n",
            faucet_test_support::kafka_brokers()
        ),
    );
    for cmd in ["validate", "run"] {
        let run = dir.faucet(&[cmd, "faucet.yaml"]);
        assert_ne!(run.code, 0, "{cmd}");
        let text = format!("{}{}", run.stdout, run.stderr);
        assert!(
            text.contains("sink `kafka` writes at-least-once only") && text.contains("tansu"),
            "{cmd}: {text}"
        );
    }
    assert!(dir.read("state").is_none(), "nothing ran");
}

#[test]
fn doctor_checks_the_broker() {
    expect_kafka_up();
    let suffix = unique_suffix();
    let dir = Dir::new();
    dir.write("in.csv", "id\n1\n");
    let config = |brokers: &str| {
        format!(
            "version: 1\nname: kafkadoc\npipeline:\n  \
             source: {{ type: csv, config: {{ path: ./in.csv }} }}\n  \
             sink: {{ type: kafka, config: {{ brokers: \"{brokers}\", \
             topic: \"faucet-test-kafkadoc-{suffix}\", \
             properties: {{ sasl.password: hunter2, linger.ms: \"5\" }} }} }}\n"
        )
    };
    dir.write("ok.yaml", config(&faucet_test_support::kafka_brokers()));
    dir.write("down.yaml", config("127.0.0.1:1"));
    dir.faucet(&["doctor", "ok.yaml"]).expect_code(0);
    let down = dir.faucet(&["doctor", "down.yaml"]);
    assert_ne!(down.code, 0);
    down.stdout_has(&["127.0.0.1:1"]);
    assert!(!format!("{}{}", down.stdout, down.stderr).contains("hunter2"));
}
