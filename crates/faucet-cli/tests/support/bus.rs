//! What the bus-sink tests share: the independent consumer (`scripts/bus_consumer.py`, a
//! Python script with the bus's own client library) that reads back everything a sink wrote,
//! the cleanup of the streams and keys a test made, the buses of the CDC tests ([`Bus`]) with
//! the at-least-once check of what a Kafka consumer read ([`at_least_once`]),
//! the csv → bus scenario ([`CsvIntoBus`]), the postgres-cdc source of two tables with its
//! oracle slot ([`TwoTables`], [`postgres_cdc_into`]) and the abort and kill rounds of the
//! CDC → bus tests.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value as Json, json};

use super::crash::{CrashScenario, kill_after};
use super::pg::{CdcObjectsGuard, Change, query, sql, test_decoding_changes, unique_suffix};
use super::{expect_aborted, faucet_unarmed, output_of_success};

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

/// A bus sink of a test (effectively-once but for Kafka), with the names of its objects (removed when it is
/// dropped). A route is a subject or stream name below the bus's prefix (`events`,
/// `cdc.{schema}.{table}`).
pub(crate) enum Bus {
    /// Subjects `<prefix>.<route>` of the JetStream `stream` (created by the sink).
    Nats { prefix: String, stream: String },
    /// Streams `<prefix>:<route>` (the commit-token keys under `<prefix>:`).
    Streams { prefix: String },
    /// Topics `<prefix>.<route>` (tansu), at-least-once; left behind (small, uniquely named).
    Kafka { prefix: String },
}

impl Bus {
    /// A NATS bus with a unique prefix and stream named after `tag`.
    pub(crate) fn nats(tag: &str) -> Self {
        let suffix = unique_suffix();
        Bus::Nats {
            prefix: format!("faucet-test-{tag}-{suffix}"),
            stream: format!(
                "FAUCET_TEST_{}_{suffix}",
                tag.to_uppercase().replace('-', "_")
            ),
        }
    }

    /// A Redis-streams bus with a unique prefix named after `tag`.
    pub(crate) fn streams(tag: &str) -> Self {
        Bus::Streams {
            prefix: format!("faucet-test-{tag}-{}", unique_suffix()),
        }
    }

    /// A Kafka bus with a unique prefix named after `tag`.
    pub(crate) fn kafka(tag: &str) -> Self {
        Bus::Kafka {
            prefix: format!("faucet-test-{tag}-{}", unique_suffix()),
        }
    }

    /// Whether the bus takes `delivery: effectively_once` (Kafka does not: at-least-once).
    pub(crate) fn effectively_once(&self) -> bool {
        !matches!(self, Bus::Kafka { .. })
    }

    /// The fault points a page into the bus passes (a Kafka page has no `before_commit`).
    pub(crate) fn points(&self) -> &'static [&'static str] {
        if self.effectively_once() {
            &faucet_core::fault::SQL_SINK
        } else {
            &faucet_core::fault::ALL
        }
    }

    /// The pipeline's sink (YAML flow mapping) writing `route` (placeholders allowed), keyed
    /// by `id`, with the sink options `extra` (`""` or `, format: debezium`) after. A fixed
    /// route (csv rows) names `key: [id]`; a template (a change stream routed per table)
    /// names no key, so its change records are keyed by their table's source key — `id`, the
    /// primary key of every table these tests stream (checked by [`change_of`]).
    pub(crate) fn sink(&self, route: &str, extra: &str) -> String {
        let key = if route.contains('{') {
            ""
        } else {
            ", key: [id]"
        };
        match self {
            Bus::Nats { prefix, stream } => format!(
                "{{ type: nats, config: {{ url: \"${{env:FAUCET_CRASH_NATS_URL}}\", \
                 subject: \"{prefix}.{route}\", stream: {stream}, create_stream: true\
                 {key}{extra} }} }}"
            ),
            Bus::Streams { prefix } => format!(
                "{{ type: redis-streams, config: {{ url: \"${{env:FAUCET_CRASH_REDIS_URL}}\", \
                 stream: \"{prefix}:{route}\", prefix: \"{prefix}:\"{key}{extra} }} }}"
            ),
            Bus::Kafka { prefix } => format!(
                "{{ type: kafka, config: {{ brokers: \"${{env:FAUCET_CRASH_KAFKA}}\", \
                 topic: \"{prefix}.{route}\"{key}{extra} }} }}"
            ),
        }
    }

    /// The subject or stream name of `route`.
    pub(crate) fn route(&self, route: &str) -> String {
        match self {
            Bus::Nats { prefix, .. } => format!("{prefix}.{route}"),
            Bus::Streams { prefix } => format!("{prefix}:{route}"),
            Bus::Kafka { prefix } => format!("{prefix}.{route}"),
        }
    }

    /// Everything the independent consumer reads back from the routes matching `route`, where
    /// a final `*` matches any rest (`cdc.*`).
    pub(crate) fn consume(&self, route: &str) -> Vec<Consumed> {
        match self {
            Bus::Nats { prefix, stream } => {
                let filter = match route.strip_suffix('*') {
                    Some(head) => format!("{prefix}.{head}>"),
                    None => format!("{prefix}.{route}"),
                };
                nats_messages(stream, &filter)
            }
            Bus::Streams { prefix } => redis_streams(&format!("{prefix}:{route}")),
            Bus::Kafka { prefix } => {
                let regex = match route.strip_suffix('*') {
                    Some(head) => format!("{}.*", regex_quote(&format!("{prefix}.{head}"))),
                    None => regex_quote(&format!("{prefix}.{route}")),
                };
                kafka_messages(&regex)
            }
        }
    }

    /// Removes what the bus's tests wrote (the stream or the keys), best effort.
    pub(crate) fn clear(&self) {
        match self {
            Bus::Nats { stream, .. } => delete_nats_stream(stream),
            Bus::Streams { prefix } => delete_redis_keys(&format!("{prefix}:*")),
            Bus::Kafka { .. } => {}
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        self.clear();
    }
}

/// [`faucet_unarmed`] with the bus URLs the [`Bus::sink`] configs name
/// (`FAUCET_CRASH_NATS_URL`, `FAUCET_CRASH_REDIS_URL`, `FAUCET_CRASH_KAFKA`) and
/// `FAUCET_CRASH_PG_URL`.
pub(crate) fn faucet_for_buses() -> Command {
    let mut c = faucet_unarmed();
    c.env("FAUCET_CRASH_NATS_URL", faucet_test_support::nats_url())
        .env("FAUCET_CRASH_REDIS_URL", faucet_test_support::redis_url())
        .env("FAUCET_CRASH_KAFKA", faucet_test_support::kafka_brokers())
        .env("FAUCET_CRASH_PG_URL", faucet_test_support::pg_url());
    c
}

/// How many rows the csv → bus scenarios write.
pub(crate) const CSV_ROWS: usize = 3_000;

/// A pipeline config named `name`: `./in.csv` (columns `id`, `v`, both `int`, as
/// [`write_csv`] writes it) into `sink`, with the file state store in `./state`, then the
/// pipeline lines `tail` (each `  key: value\n`).
pub(crate) fn csv_config(name: &str, sink: &str, tail: &str) -> String {
    let source = "{ type: csv, config: { path: ./in.csv, columns: { id: int, v: int } } }";
    super::pipeline_yaml(name, source, sink, tail)
}

/// Writes `dir/in.csv`: rows `id,v` with ids `0..CSV_ROWS` and `v = 3 × id`.
pub(crate) fn write_csv(dir: &Path) {
    std::fs::write(dir.join("in.csv"), super::crash::id_v_csv(CSV_ROWS)).expect("csv");
}

/// The id of a message the csv pipeline wrote; panics unless its `v` is `3 × id` and its
/// `key` is `{"id": id}`.
pub(crate) fn csv_row_id(m: &Consumed, what: &str) -> i64 {
    let id = m.fields["value"]["id"].as_i64().expect("id");
    assert_eq!(m.fields["value"]["v"], json!(id * 3), "{what}: {m:?}");
    assert_eq!(m.fields["key"], json!({ "id": id }), "{what}: {m:?}");
    id
}

/// csv → a [`Bus`] with `delivery: effectively_once` in pages of `batch`: every row exactly
/// once, in the file's order.
pub(crate) struct CsvIntoBus {
    pub(crate) bus: Bus,
    pub(crate) batch: usize,
}

impl CrashScenario for CsvIntoBus {
    fn prepare(&self, dir: &Path) {
        self.bus.clear();
        write_csv(dir);
        let tail = format!(
            "  delivery: effectively_once\n  batch_size: {}\n",
            self.batch
        );
        let config = csv_config("buscsv", &self.bus.sink("events", ""), &tail);
        std::fs::write(dir.join("faucet.yaml"), config).expect("config");
    }

    fn check(&self, what: &str) {
        let got = self.bus.consume("events");
        let ids: Vec<i64> = got.iter().map(|m| csv_row_id(m, what)).collect();
        let want: Vec<i64> = (0..CSV_ROWS as i64).collect();
        if ids != want {
            let mut seen = std::collections::HashMap::new();
            for id in &ids {
                *seen.entry(*id).or_insert(0) += 1;
            }
            let dups = seen.values().filter(|&&n| n > 1).count();
            let lost = want.iter().filter(|id| !seen.contains_key(id)).count();
            panic!(
                "{what}: {} entries, {lost} ids lost, {dups} doubled, or out of order",
                ids.len()
            );
        }
    }

    fn drop(&self) {
        self.bus.clear();
    }

    fn faucet(&self) -> Command {
        faucet_for_buses()
    }
}

/// Runs `faucet` (`run --quiet` in `dir`) aborted at each of `points` (the fault points the
/// sink's page passes: [`Bus::points`]), at its first and third hit, calling `more` once
/// after the third point so every run has pages to do; panics unless each run failed.
/// Returns how many runs were aborted.
pub(crate) fn abort_at_every_point_with(
    faucet: impl Fn() -> Command,
    dir: &Path,
    points: &[&str],
    mut more: impl FnMut(),
) -> usize {
    let mut aborted = 0;
    for (n, point) in points.iter().enumerate() {
        if n == 3 {
            more();
        }
        for hit in [1, 3] {
            expect_aborted(
                faucet().args(["run", "--quiet"]).current_dir(dir),
                &format!("{point}:{hit}"),
            );
            aborted += 1;
        }
    }
    aborted
}

/// For each round of `rounds`: `workload(round)`, then a run SIGKILLed after `delay(round)`.
/// Returns how many runs were still running when killed.
pub(crate) fn killed_between_rounds(
    faucet: impl Fn() -> Command,
    dir: &Path,
    rounds: std::ops::Range<usize>,
    mut workload: impl FnMut(usize),
    delay: impl Fn(u64) -> Duration,
) -> usize {
    let mut killed = 0;
    for round in rounds {
        workload(round);
        if kill_after(faucet(), dir, delay(round as u64)) {
            killed += 1;
        }
    }
    killed
}

/// The final `faucet run` in `dir`, which must succeed and say `guarantee` in its summary.
pub(crate) fn final_run(faucet: &mut Command, dir: &Path, guarantee: &str) {
    let out = output_of_success(faucet.arg("run").current_dir(dir), "the final run");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(guarantee),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The source of the postgres-cdc bus tests: schemas `<base>_a` and `<base>_b` with an
/// `items (id int PRIMARY KEY, v bigint NOT NULL)` each, the sequence `<base>_a.seq`, a
/// publication on both tables, the `pgoutput` slot the pipeline reads and the `test_decoding`
/// slot [`TwoTables::oracle`] reads; all dropped with it.
pub(crate) struct TwoTables {
    pub(crate) schemas: [String; 2],
    publication: String,
    slot: String,
    oracle_slot: String,
    _guards: [CdcObjectsGuard; 2],
}

impl TwoTables {
    /// Creates the objects, named `<tag>_<unique suffix>_…`.
    pub(crate) fn new(tag: &str) -> Self {
        let base = format!("{tag}_{}", unique_suffix());
        let schemas = [format!("{base}_a"), format!("{base}_b")];
        let publication = format!("{base}_pub");
        let slot = format!("{base}_slot");
        let oracle_slot = format!("{base}_oracle");
        let guard = |slot: &str, schema: &str| CdcObjectsGuard {
            slot: slot.to_owned(),
            publication: publication.clone(),
            schema: schema.to_owned(),
        };
        let _guards = [guard(&slot, &schemas[0]), guard(&oracle_slot, &schemas[1])];
        let [a, b] = &schemas;
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
        Self {
            schemas,
            publication,
            slot,
            oracle_slot,
            _guards,
        }
    }

    /// A pipeline config named `name`: postgres-cdc of both tables (`FAUCET_CRASH_PG_URL`)
    /// into `sink`, file state in `./state`, then the pipeline lines `tail`.
    pub(crate) fn config(&self, name: &str, sink: &str, tail: &str) -> String {
        let [a, b] = &self.schemas;
        let source = format!(
            "{{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
             slot_name: {}, publication: {}, tables: [{a}.items, {b}.items] }} }}",
            self.slot, self.publication
        );
        super::pipeline_yaml(name, &source, sink, tail)
    }

    /// Round `round` of the workload: inserts, updates and deletes in both tables, some
    /// transactions touching both and one large enough that pages end inside it; every
    /// insert and update takes a fresh `v` from `<base>_a.seq`.
    pub(crate) fn round(&self, round: usize) {
        let [a, b] = &self.schemas;
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

    /// The changes of each table the oracle slot saw (per schema, in [`TwoTables::schemas`]
    /// order), in commit order; consumes them from the slot.
    pub(crate) fn oracle(&self) -> Vec<Vec<Change>> {
        let rows: Vec<(String,)> = query(&format!(
            "SELECT data FROM pg_logical_slot_get_changes('{}', NULL, NULL)",
            self.oracle_slot
        ));
        self.schemas
            .iter()
            .map(|s| test_decoding_changes(rows.iter().map(|(l,)| l.as_str()), s))
            .collect()
    }

    /// Panics unless `consumed` (a message once each) holds on route `route(schema)` exactly
    /// the changes the oracle slot saw for that schema's table (more than 500 of them), in
    /// commit order (`per_key`: each key's changes in commit order, as a partitioned bus
    /// keeps them), and nothing on any other route.
    pub(crate) fn expect_routed(
        &self,
        consumed: &[Consumed],
        route: impl Fn(&str) -> String,
        per_key: bool,
    ) {
        fn by_key(changes: &[Change]) -> std::collections::BTreeMap<i64, Vec<&Change>> {
            let mut m: std::collections::BTreeMap<i64, Vec<&Change>> = Default::default();
            for c in changes {
                m.entry(c.1).or_default().push(c);
            }
            m
        }
        let want = self.oracle();
        for (s, want) in self.schemas.iter().zip(&want) {
            let route = route(s);
            let got: Vec<Change> = consumed
                .iter()
                .filter(|m| m.stream == route)
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
            if per_key {
                assert!(
                    by_key(&got) == by_key(want),
                    "{s}: a key's messages differ from its changes, in order"
                );
            } else {
                assert!(
                    got == *want,
                    "{s}: the route differs from the changes, in order"
                );
            }
        }
        assert_eq!(
            consumed.len(),
            want.iter().map(Vec::len).sum::<usize>(),
            "messages on routes of no table"
        );
    }
}

/// postgres-cdc of [`TwoTables`] routed per table (`cdc.{schema}.{table}`) into `bus` with
/// `delivery: effectively_once`, aborted at every fault point and SIGKILLed between new
/// changes, rerun to completion: each route holds exactly the changes the oracle slot saw
/// for its table, once each and in commit order, and no route of no table has any.
pub(crate) fn postgres_cdc_into(bus: &Bus, tag: &str) {
    let source = TwoTables::new(tag);
    let dir = super::Dir::new();
    dir.write(
        "faucet.yaml",
        source.config(
            tag,
            &bus.sink("cdc.{schema}.{table}", ", format: debezium"),
            "  delivery: effectively_once\n  batch_size: 40\n",
        ),
    );
    source.round(0);
    // Every point a bus page passes, `before_commit` (all of a page but its commit token
    // stored) among them; more changes halfway so every run has pages to do.
    abort_at_every_point_with(faucet_for_buses, dir.path(), bus.points(), || {
        source.round(5)
    });
    let killed = killed_between_rounds(
        faucet_for_buses,
        dir.path(),
        1..5,
        |round| source.round(round),
        |round| Duration::from_millis(40 + (round * 53) % 200),
    );
    final_run(
        &mut faucet_for_buses(),
        dir.path(),
        "effectively-once (atomic watermark)",
    );
    source.expect_routed(
        &bus.consume("cdc.*"),
        |s| bus.route(&format!("cdc.{s}.items")),
        false,
    );
    eprintln!("postgres-cdc → {tag}: {killed} runs SIGKILLed mid-run");
}
