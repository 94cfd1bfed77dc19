//! What the bus-sink tests share: the independent consumer (`scripts/bus_consumer.py`, a
//! Python script with the bus's own client library) that reads back everything a sink wrote,
//! the Redis keys a test made, the CDC workload of two tables, and the at-least-once check
//! of what a Kafka consumer read ([`at_least_once`]).

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value as Json, json};

use super::pg::{Change, query, sql, test_decoding_changes};

/// One message as the consumer read it: its stream and fields (`value`, `key`,
/// `faucet-position` parsed as JSON; the other fields as text).
#[derive(Debug, Clone)]
pub(crate) struct Consumed {
    pub(crate) stream: String,
    pub(crate) fields: serde_json::Map<String, Json>,
}

/// Every entry of the Redis streams whose key matches `pattern` (`SCAN MATCH`), read by the
/// independent consumer, stream by stream (sorted by key), each in its order.
pub(crate) fn redis_streams(pattern: &str) -> Vec<Consumed> {
    consume(&["redis-streams", &faucet_test_support::redis_url(), pattern])
}

/// Every message of the JetStream `stream` on subjects matching `filter`, read by the
/// independent consumer (nats-py) in stream order; `Consumed::stream` is the subject.
pub(crate) fn nats_messages(stream: &str, filter: &str) -> Vec<Consumed> {
    consume(&["nats", &faucet_test_support::nats_url(), stream, filter])
}

/// Every message of the Kafka topics whose name matches `regex` (whole name), read by the
/// independent consumer (confluent-kafka) from the beginning of every partition until none
/// came for a while; topic by topic, partition by partition, in offset order;
/// `Consumed::stream` is the topic.
pub(crate) fn kafka_messages(regex: &str) -> Vec<Consumed> {
    consume(&["kafka", &faucet_test_support::kafka_brokers(), regex])
}

/// Panics with the "unreachable; start it with scripts/services.sh" message unless the first
/// test Kafka broker accepts a TCP connection: a pipeline's own failure would not say how to
/// start tansu.
pub(crate) fn expect_kafka_up() {
    let brokers = faucet_test_support::kafka_brokers();
    let first = brokers
        .split(',')
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    let connected = std::net::ToSocketAddrs::to_socket_addrs(&first)
        .map_err(|e| e.to_string())
        .and_then(|mut a| a.next().ok_or_else(|| "no address".to_owned()))
        .and_then(|a| {
            std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(5))
                .map_err(|e| e.to_string())
        });
    faucet_test_support::Service::Kafka.expect_up(connected);
}

/// Runs `scripts/bus_consumer.py` with `args` and parses its lines.
fn consume(args: &[&str]) -> Vec<Consumed> {
    let script = super::repo_root().join("scripts/bus_consumer.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("run scripts/bus_consumer.py (python3)");
    assert!(
        out.status.success(),
        "the consumer failed (are redis-py, nats-py and confluent-kafka installed, and is tansu \
         up? scripts/services.sh installs and starts them): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let mut v: Json = serde_json::from_str(line).expect("a consumer line");
            let fields = match v["fields"].take() {
                Json::Object(m) => m,
                other => panic!("fields: {other}"),
            };
            Consumed {
                stream: v["stream"].as_str().unwrap_or_default().to_owned(),
                fields,
            }
        })
        .collect()
}

/// Deletes the JetStream `stream`, best effort.
pub(crate) fn delete_nats_stream(stream: &str) {
    super::runtime().block_on(async {
        if let Ok(client) = async_nats::connect(faucet_test_support::nats_url()).await {
            let _ = async_nats::jetstream::new(client)
                .delete_stream(stream)
                .await;
        }
    });
}

/// Deletes every Redis key matching `pattern`, best effort.
pub(crate) fn delete_redis_keys(pattern: &str) {
    super::runtime().block_on(async {
        let Ok(client) = redis::Client::open(faucet_test_support::redis_url()) else {
            return;
        };
        let Ok(mut c) = client.get_multiplexed_async_connection().await else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        for k in keys {
            let _ = redis::cmd("DEL").arg(k).query_async::<()>(&mut c).await;
        }
    });
}

/// The changes of `<base>_<t>.items` the oracle slot saw, per table suffix, in commit order.
pub(crate) fn oracle(slot: &str, schemas: &[String]) -> Vec<Vec<Change>> {
    let rows: Vec<(String,)> = query(&format!(
        "SELECT data FROM pg_logical_slot_get_changes('{slot}', NULL, NULL)"
    ));
    schemas
        .iter()
        .map(|s| test_decoding_changes(rows.iter().map(|(l,)| l.as_str()), s))
        .collect()
}

/// A consumed change entry as `(op, id, v)`, checked against its headers; `position`: a field
/// every change's `faucet-position` has (`lsn` for postgres-cdc, `binlog_file` for mysql-cdc).
pub(crate) fn change_of(m: &Consumed, position: &str) -> Change {
    let value = &m.fields["value"];
    let op = value["op"].as_str().expect("op").to_owned();
    assert_eq!(m.fields["faucet-op"], json!(op), "{m:?}");
    let row = if op == "d" {
        &value["before"]
    } else {
        &value["after"]
    };
    let id = row["id"].as_i64().expect("id");
    assert_eq!(m.fields["key"], json!({"id": id}), "{m:?}");
    assert!(m.fields["faucet-position"][position].is_string(), "{m:?}");
    (op, id, row["v"].as_i64().filter(|_| value["op"] != "d"))
}

/// The source of the bus-sink CDC tests: schemas `a` and `b` with an `items (id int PRIMARY
/// KEY, v bigint NOT NULL)` each, the sequence `a.seq`, `publication` on both tables, the
/// `pgoutput` slot `slot` the pipeline reads and the `test_decoding` slot `oracle_slot` the
/// check reads ([`oracle`]).
pub(crate) fn two_tables(a: &str, b: &str, publication: &str, slot: &str, oracle_slot: &str) {
    sql(&format!(
        "CREATE SCHEMA {a}; CREATE SCHEMA {b}; CREATE SEQUENCE {a}.seq; \
         CREATE TABLE {a}.items (id int PRIMARY KEY, v bigint NOT NULL); \
         CREATE TABLE {b}.items (id int PRIMARY KEY, v bigint NOT NULL); \
         CREATE PUBLICATION {publication} FOR TABLE {a}.items, {b}.items"
    ));
    sql(&format!(
        "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
    ));
    sql(&format!(
        "SELECT pg_create_logical_replication_slot('{oracle_slot}', 'test_decoding')"
    ));
}

/// Round `round` of the workload on [`two_tables`]: inserts, updates and deletes in both
/// tables, some transactions touching both and one large enough that pages end inside it;
/// every insert and update takes a fresh `v` from `a.seq`.
pub(crate) fn two_table_round(a: &str, b: &str, round: usize) {
    let next = || format!("nextval('{a}.seq')");
    for s in [a, b] {
        sql(&format!(
            "INSERT INTO {s}.items SELECT g, {} FROM generate_series({}, {}) g",
            next(),
            round * 300 + 1,
            round * 300 + 250
        ));
    }
    sql(&format!(
        "BEGIN; UPDATE {a}.items SET v = {n} WHERE id % 3 = {r}; \
         UPDATE {b}.items SET v = {n} WHERE id % 4 = {r}; \
         DELETE FROM {a}.items WHERE id % 11 = {r}; COMMIT;",
        n = next(),
        r = round % 3
    ));
    sql(&format!(
        "DELETE FROM {b}.items WHERE id % 13 = {}",
        round % 5
    ));
}

/// How the copies of each distinct message (by topic and value) fell: panics unless every
/// message with more than one copy has one `faucet-id` on all of them (a replay from the
/// same durable bookmark: the page in flight at a crash), and unless at most
/// `crashes × batch` messages are doubled. Returns the messages, first copies only, in the
/// consumer's order, and how many were doubled.
pub(crate) fn at_least_once(
    got: &[Consumed],
    crashes: usize,
    batch: usize,
    what: &str,
) -> (Vec<Consumed>, usize) {
    let mut first: HashMap<(String, String), (usize, String)> = HashMap::new();
    let mut doubled = 0;
    let mut out = Vec::new();
    for m in got {
        let id = m.fields["faucet-id"]
            .as_str()
            .expect("faucet-id")
            .to_owned();
        let content = (m.stream.clone(), m.fields["value"].to_string());
        match first.get_mut(&content) {
            None => {
                first.insert(content, (1, id));
                out.push(m.clone());
            }
            Some((copies, first_id)) => {
                assert_eq!(
                    *first_id, id,
                    "{what}: a record delivered again under another id, so not from the \
                     bookmark its first copy's page started at (not a page in flight): {m:?}"
                );
                if *copies == 1 {
                    doubled += 1;
                }
                *copies += 1;
            }
        }
    }
    assert!(
        doubled <= crashes * batch,
        "{what}: {doubled} records doubled by {crashes} crashes of pages of {batch}"
    );
    (out, doubled)
}

/// How many runs `dir/kill.err` says were SIGKILLed mid-run.
pub(crate) fn kills_in(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("kill.err"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("-- kill after") && l.ends_with("Ok(None)"))
        .count()
}

/// `s` as a regular expression matching itself.
pub(crate) fn regex_quote(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}
