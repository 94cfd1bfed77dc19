//! The `kafka` sink against the broker of `FAUCET_TEST_KAFKA_BROKERS` (tansu, started by
//! `scripts/services.sh`): the conformance battery, routing of change records by table with
//! key, headers and partitioning by key, doctor's probe, and an unreachable broker. Every
//! test uses topics of its own. Records are read back from the beginning of every partition
//! until none came for a while: tansu's end offsets are wrong, so none is asked for.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use faucet_connectors::bus::MessageFormat;
use faucet_connectors::kafka::{KafkaSink, KafkaSinkConfig};
use faucet_core::testing::conformance;
use faucet_core::{FaucetError, Sink};
use faucet_test_support::{Service, kafka_brokers, unique_suffix};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Headers as _;
use rdkafka::{ClientConfig, Message as _, Offset, TopicPartitionList};
use serde_json::{Value as Json, json};

use faucet_core::testing::keyed_change_page as change_page;

/// One message read back.
#[derive(Debug, Clone)]
struct Consumed {
    topic: String,
    partition: i32,
    key: Option<Json>,
    headers: BTreeMap<String, String>,
    value: Json,
}

fn prefix() -> String {
    format!("faucet-test-kafka-{}", unique_suffix())
}

/// Every message of the topics whose name starts with `prefix`, topic by topic, partition by
/// partition, in offset order: read from the beginning until nothing came for two seconds.
async fn consume(prefix: &str) -> Vec<Consumed> {
    let prefix = prefix.to_owned();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", kafka_brokers())
            .set("group.id", format!("{prefix}-reader"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_uncommitted")
            .create()
            .expect("consumer");
        let metadata =
            Service::Kafka.expect_up(consumer.fetch_metadata(None, Duration::from_secs(10)));
        let mut list = TopicPartitionList::new();
        for t in metadata.topics() {
            if t.name().starts_with(&prefix) {
                for p in t.partitions() {
                    list.add_partition_offset(t.name(), p.id(), Offset::Beginning)
                        .expect("partition");
                }
            }
        }
        if list.count() == 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        consumer.assign(&list).expect("assign");
        let mut last = Instant::now();
        while last.elapsed() < Duration::from_secs(2) {
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(e)) => panic!("consume: {e}"),
                Some(Ok(m)) => {
                    last = Instant::now();
                    let headers = m
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| {
                                    let v = h.value.map(String::from_utf8_lossy);
                                    (h.key.to_owned(), v.unwrap_or_default().into_owned())
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    out.push((
                        m.offset(),
                        Consumed {
                            topic: m.topic().to_owned(),
                            partition: m.partition(),
                            key: m
                                .key()
                                .map(|k| serde_json::from_slice(k).expect("key json")),
                            headers,
                            value: serde_json::from_slice(m.payload().unwrap_or(b"null"))
                                .expect("value json"),
                        },
                    ));
                }
            }
        }
        out.sort_by(|(a, x), (b, y)| (&x.topic, x.partition, a).cmp(&(&y.topic, y.partition, b)));
        out.into_iter().map(|(_, m)| m).collect()
    })
    .await
    .expect("consumer task")
}

/// Creates `topic` with `partitions` partitions.
async fn create_topic(topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("admin");
    let results = Service::Kafka.expect_up(
        admin
            .create_topics(
                &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
            )
            .await,
    );
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
    }
}

fn values_of(prefix: String) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = Vec<Json>>>> {
    move || {
        let prefix = prefix.clone();
        Box::pin(async move {
            consume(&prefix)
                .await
                .into_iter()
                .map(|m| m.value)
                .collect()
        })
    }
}

#[tokio::test]
async fn conformance_battery() {
    let p = prefix();
    let topic = format!("{p}.events");
    // One partition: the battery compares the values in the order they were written.
    create_topic(&topic, 1).await;
    let sink = KafkaSink::new(KafkaSinkConfig::new(kafka_brokers(), &topic)).expect("sink");
    conformance::sink_flush_is_durable(&sink, values_of(p.clone()))
        .await
        .expect("flush is durable");
    conformance::sink_guarantee_is_truthful(&sink, values_of(p.clone()))
        .await
        .expect("guarantee is truthful");
    conformance::config_is_strict::<KafkaSinkConfig>(&json!({"brokers": "h:9092", "topic": "t"}))
        .expect("strict config");
    let down = KafkaSink::new(KafkaSinkConfig::new("127.0.0.1:1", "t")).expect("sink");
    conformance::errors_not_panics("open an unreachable broker", async move {
        down.open().await.map(|_| ())
    })
    .await
    .expect("error, not panic");
    sink.check().await.expect("doctor's check passes");
}

#[tokio::test]
async fn change_records_are_routed_by_table_with_key_headers_and_partition() {
    let p = prefix();
    let orders = format!("{p}.cdc.public.orders");
    create_topic(&orders, 4).await;
    let mut c = KafkaSinkConfig::new(kafka_brokers(), format!("{p}.cdc.{{schema}}.{{table}}"));
    c.key = vec!["id".into()];
    c.format = MessageFormat::Debezium;
    c.compression = faucet_connectors::kafka::Compression::Zstd;
    let sink = KafkaSink::new(c).expect("sink");
    let mut w = sink.open().await.expect("open");
    let mut rows = Vec::new();
    for id in 0..40 {
        rows.push(("c", "public.orders", id, "a"));
    }
    rows.push(("c", "public.items", 9, "x"));
    for id in 0..40 {
        rows.push(("d", "public.orders", id, "a"));
    }
    w.write(&change_page(&rows, json!({"lsn": "0/99"})))
        .await
        .expect("write");
    w.flush().await.expect("flush");
    assert_eq!(
        w.written_targets(),
        [(orders.clone(), 80), (format!("{p}.cdc.public.items"), 1)],
        "the page's messages per topic"
    );
    let got = consume(&p).await;
    let items: Vec<_> = got.iter().filter(|m| m.topic != orders).collect();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].topic, format!("{p}.cdc.public.items"));
    let orders: Vec<_> = got.iter().filter(|m| m.topic == orders).collect();
    assert_eq!(orders.len(), 80);
    // Partitioned by key: a key's insert and delete share a partition, in order; the 40 keys
    // spread over more than one of the four partitions.
    let mut partition_of = BTreeMap::new();
    for m in &orders {
        let id = m.key.as_ref().expect("key")["id"].as_i64().expect("id");
        assert_eq!(m.key, Some(json!({"id": id})));
        let first = *partition_of.entry(id).or_insert(m.partition);
        assert_eq!(first, m.partition, "key {id} in two partitions");
        let op = m.value["op"].as_str().expect("op");
        assert_eq!(m.headers["faucet-op"], op);
        assert_eq!(m.headers["faucet-table"], "public.orders");
        let position: Json = serde_json::from_str(&m.headers["faucet-position"]).expect("json");
        assert!(position["lsn"].is_string(), "{m:?}");
        assert!(
            m.headers["faucet-id"].starts_with('/'),
            "no state key: {m:?}"
        );
    }
    for id in 0..40 {
        let ops: Vec<&str> = orders
            .iter()
            .filter(|m| m.key == Some(json!({"id": id})))
            .map(|m| m.value["op"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(ops, ["c", "d"], "key {id}: its records in order");
    }
    let used: std::collections::BTreeSet<_> = partition_of.values().collect();
    assert!(used.len() > 1, "40 keys in one partition: {used:?}");
    // Every message id is distinct.
    let ids: std::collections::BTreeSet<_> = got.iter().map(|m| &m.headers["faucet-id"]).collect();
    assert_eq!(ids.len(), got.len());
    // A template naming the table and a plain row: a data error, nothing produced.
    let err = w
        .write(&conformance::sample_page(&[1], "a", json!(1)))
        .await
        .expect_err("no table");
    assert!(matches!(err, FaucetError::Data { .. }), "{err}");
}

#[tokio::test]
async fn an_effectively_once_request_is_refused_naming_the_sink() {
    let sink = KafkaSink::new(KafkaSinkConfig::new(kafka_brokers(), "t")).expect("sink");
    let topology = faucet_core::delivery::Topology {
        source: "postgres-cdc",
        replay: faucet_core::ReplayGuarantee::Deterministic,
        sink: sink.connector(),
        sink_caps: sink.capabilities(),
        sink_limit: sink.delivery_limit(),
        state: "file",
        state_durable: true,
    };
    let err = topology
        .resolve(faucet_core::delivery::DeliveryRequest::EffectivelyOnce)
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("sink `kafka` writes at-least-once only") && err.contains("tansu"),
        "{err}"
    );
    assert_eq!(
        topology
            .resolve(faucet_core::delivery::DeliveryRequest::AtLeastOnce)
            .expect("at-least-once"),
        faucet_core::delivery::DeliveryGuarantee::AtLeastOnce
    );
}

#[tokio::test]
async fn an_unreachable_broker_is_a_connect_error_naming_it() {
    let mut c = KafkaSinkConfig::new("127.0.0.1:1", "t");
    c.properties.insert(
        "sasl.password".into(),
        secrecy::SecretString::from("hunter2".to_owned()),
    );
    let sink = KafkaSink::new(c).expect("sink");
    let err = sink.check().await.expect_err("unreachable");
    assert!(matches!(err, FaucetError::Connect { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("127.0.0.1:1"), "{text}");
    assert!(!format!("{text}{sink:?}{:?}", sink.target()).contains("hunter2"));
}
