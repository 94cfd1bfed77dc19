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
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::bus::{
    at_least_once, change_of, expect_kafka_up, kafka_messages, kills_in, oracle, regex_quote,
    two_table_round, two_tables,
};
use crate::support::crash::{
    CrashScenario, abort_at_every_point, kill_after, killed_at_random_instants,
};
use crate::support::pg::{CdcObjectsGuard, Change, unique_suffix};
use crate::support::{Dir, faucet_unarmed, output_of_success};

const ROWS: usize = 3_000;

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
        let mut csv = String::from("id,v\n");
        for i in 0..ROWS {
            csv.push_str(&format!("{i},{}\n", i * 3));
        }
        std::fs::write(dir.join("in.csv"), csv).expect("csv");
        std::fs::write(
            dir.join("faucet.yaml"),
            format!(
                "version: 1\nname: kafkacsv\npipeline:\n  \
                 source: {{ type: csv, config: {{ path: ./in.csv, columns: {{ id: int, v: int }} }} }}\n  \
                 sink: {{ type: kafka, config: {{ brokers: \"${{env:FAUCET_CRASH_KAFKA}}\", \
                 topic: \"{t}\", key: [id], compression: lz4 }} }}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {b}\n",
                t = self.topic(),
                b = self.batch
            ),
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
        let mut ids: Vec<i64> = unique
            .iter()
            .map(|m| {
                let id = m.fields["value"]["id"].as_i64().expect("id");
                assert_eq!(m.fields["value"]["v"], json!(id * 3), "{what}: {m:?}");
                assert_eq!(m.fields["key"], json!({ "id": id }), "{what}");
                id
            })
            .collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..ROWS as i64).collect::<Vec<_>>(),
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
    let suffix = unique_suffix();
    let base = format!("kafka_cdc_{suffix}");
    let schemas = [format!("{base}_a"), format!("{base}_b")];
    let publication = format!("{base}_pub");
    let slot = format!("{base}_slot");
    let oracle_slot = format!("{base}_oracle");
    let prefix = format!("faucet-test-kafkacdc-{suffix}");
    let _guard = CdcObjectsGuard {
        slot: slot.clone(),
        publication: publication.clone(),
        schema: schemas[0].clone(),
    };
    let _oracle_guard = CdcObjectsGuard {
        slot: oracle_slot.clone(),
        publication: publication.clone(),
        schema: schemas[1].clone(),
    };
    let (a, b) = (&schemas[0], &schemas[1]);
    two_tables(a, b, &publication, &slot, &oracle_slot);
    let batch = 40;
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: kafkacdc\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
             slot_name: {slot}, publication: {publication}, tables: [{a}.items, {b}.items] }} }}\n  \
             sink: {{ type: kafka, config: {{ brokers: \"${{env:FAUCET_CRASH_KAFKA}}\", \
             topic: \"{prefix}.cdc.{{schema}}.{{table}}\", key: [id], format: debezium }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {batch}\n"
        ),
    );
    let workload = |round: usize| two_table_round(a, b, round);
    let faucet = || {
        let mut c = faucet_unarmed();
        c.env("FAUCET_CRASH_KAFKA", faucet_test_support::kafka_brokers())
            .env("FAUCET_CRASH_PG_URL", faucet_test_support::pg_url());
        c
    };
    let rounds = if std::env::var("FAUCET_SOAK").is_ok() {
        12
    } else {
        4
    };
    let mut killed = 0;
    for round in 0..rounds {
        workload(round);
        if kill_after(
            faucet(),
            dir.path(),
            Duration::from_millis(60 + (round as u64 * 97) % 300),
        ) {
            killed += 1;
        }
    }
    let out = output_of_success(faucet().arg("run").current_dir(dir.path()), "the final run");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("at-least-once"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let want = oracle(&oracle_slot, &schemas);
    let consumed = kafka_messages(&format!("{}\\.cdc\\..*", regex_quote(&prefix)));
    let (unique, doubled) = at_least_once(&consumed, killed.max(1), batch, "postgres-cdc → kafka");
    for (s, want) in schemas.iter().zip(&want) {
        let topic = format!("{prefix}.cdc.{s}.items");
        // Kafka orders a partition, and a key stays in one: compare each key's changes.
        let by_key = |changes: Vec<Change>| {
            let mut m: BTreeMap<i64, Vec<Change>> = BTreeMap::new();
            for c in changes {
                m.entry(c.1).or_default().push(c);
            }
            m
        };
        let got: Vec<Change> = unique
            .iter()
            .filter(|m| m.stream == topic)
            .map(|m| change_of(m, "lsn"))
            .collect();
        assert!(
            want.len() > 500,
            "{s}: a workload of {} changes",
            want.len()
        );
        assert_eq!(
            got.len(),
            want.len(),
            "{s}: {} distinct messages for {} changes",
            got.len(),
            want.len()
        );
        assert!(
            by_key(got) == by_key(want.clone()),
            "{s}: a key's messages differ from its changes, in order"
        );
    }
    assert_eq!(
        unique.len(),
        want.iter().map(Vec::len).sum::<usize>(),
        "messages on topics of no table"
    );
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
