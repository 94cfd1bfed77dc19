//! [`KafkaSink`]: each record one produce to the topic its template names; a page is durable
//! when every produce of it is acknowledged.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use faucet_core::delivery::SinkLimit;
use faucet_core::{
    FaucetError, Fence, Page, PublishStats, Sink, SinkCapabilities, SinkWriter, fault,
};
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer as _};

use super::config::{KafkaSinkConfig, ValidatedKafkaConfig, check_topic};
use crate::bus::{Message, MessageEncoder, PageMeter, SourceKeys};

/// The connector's name.
pub const CONNECTOR: &str = "kafka";
/// How long `open` and `faucet doctor` wait for the brokers' metadata.
pub const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Why `delivery: effectively_once` into `kafka` is refused (docs/delivery.md, "kafka").
pub const LIMIT: SinkLimit = SinkLimit {
    reason: "writes at-least-once only: effectively-once through Kafka needs each page and its \
             commit token in one Kafka transaction read back by `read_committed` consumers, and \
             the only Kafka-compatible broker faucet is tested against (tansu) shows aborted \
             transactions to such consumers, so that path cannot be proven and is not built",
    fix: "request `delivery: at_least_once` (a consumer can drop replayed messages by their \
          `faucet-id` header), or use a sink that absorbs a replay (`nats`, `redis-streams`, or \
          `postgres` with `write_mode: upsert`)",
};

/// The `kafka` sink (see the module docs of [`crate::kafka`]). Built without I/O;
/// [`Sink::open`] and [`Sink::check`] connect.
#[derive(Debug)]
pub struct KafkaSink {
    config: KafkaSinkConfig,
    encoder: MessageEncoder,
}

impl KafkaSink {
    /// A sink for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`KafkaSinkConfig::validate`].
    pub fn new(config: KafkaSinkConfig) -> Result<Self, FaucetError> {
        let ValidatedKafkaConfig { config, topic } = config.validate()?;
        let encoder = MessageEncoder::new(CONNECTOR, topic, config.key.clone(), config.format);
        Ok(Self { config, encoder })
    }

    /// The configuration.
    pub fn config(&self) -> &KafkaSinkConfig {
        &self.config
    }

    /// A producer for the configuration (librdkafka connects in the background).
    fn producer(&self) -> Result<FutureProducer, FaucetError> {
        self.config.client_config().create().map_err(|e| {
            FaucetError::config(
                "properties",
                format!(
                    "librdkafka refused the producer configuration (properties {}): {e}",
                    self.config.property_names()
                ),
            )
        })
    }

    /// The cluster's metadata (all topics), within [`METADATA_TIMEOUT`].
    ///
    /// # Errors
    /// [`FaucetError::Connect`] naming the brokers when none answers in time (down, wrong
    /// address, or a TLS / SASL setting the brokers refuse).
    async fn metadata(&self, producer: &FutureProducer) -> Result<Metadata, FaucetError> {
        let producer = producer.clone();
        let answer = tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(None, METADATA_TIMEOUT)
        })
        .await
        .map_err(|e| {
            FaucetError::connect(CONNECTOR, "the metadata request failed", Some(Box::new(e)))
        })?;
        answer.map_err(|e| {
            FaucetError::connect(
                CONNECTOR,
                format!(
                    "no broker of `{}` answered a metadata request within {} s ({e}); is Kafka \
                     running there, and do `properties` (security.protocol, sasl.*, ssl.*) match \
                     its listener?",
                    self.config.brokers,
                    METADATA_TIMEOUT.as_secs()
                ),
                Some(Box::new(e)),
            )
        })
    }

    /// The broker's `auto.create.topics.enable`, when it answers DescribeConfigs.
    async fn auto_create(&self, broker: i32) -> Option<bool> {
        let admin: AdminClient<DefaultClientContext> = self.config.client_config().create().ok()?;
        let options = AdminOptions::new().request_timeout(Some(METADATA_TIMEOUT));
        let results = admin
            .describe_configs(&[ResourceSpecifier::Broker(broker)], &options)
            .await
            .ok()?;
        let resource = results.into_iter().next()?.ok()?;
        let entry = resource.get("auto.create.topics.enable")?;
        entry.value.as_deref().map(|v| v == "true")
    }
}

#[async_trait]
impl Sink for KafkaSink {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// Without `key`, change records are keyed by their source table's key.
    fn keys_by_source(&self) -> bool {
        self.encoder.keys_by_source()
    }

    /// Neither: a page's messages and its commit token cannot be one step (see [`LIMIT`]).
    fn capabilities(&self) -> SinkCapabilities {
        SinkCapabilities {
            atomic_watermark: false,
            keyed_upsert: false,
        }
    }

    /// [`LIMIT`]: why an effectively-once request is refused.
    fn delivery_limit(&self) -> Option<SinkLimit> {
        Some(LIMIT)
    }

    /// `kafka <brokers> topic <template>`: no credentials (those are in `properties`).
    fn target(&self) -> Option<String> {
        Some(format!(
            "{CONNECTOR} {} topic {}",
            self.config.brokers,
            self.encoder.route()
        ))
    }

    /// Creates the producer and waits for the brokers' metadata.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when no broker answers; [`FaucetError::Config`] when
    /// librdkafka refuses the configuration.
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        let producer = self.producer()?;
        self.metadata(&producer).await?;
        Ok(Box::new(KafkaWriter {
            sink: self,
            producer,
            scope: String::new(),
            written: Vec::new(),
            published: None,
            keys: SourceKeys::default(),
        }))
    }

    /// The brokers answer a metadata request within [`METADATA_TIMEOUT`] (reachable, TLS and
    /// SASL accepted); a fixed `topic` exists, or the broker creates topics on first write
    /// (`auto.create.topics.enable`; when the broker does not say, a warning). With a
    /// template, a warning when the broker says it does not create topics: every routed
    /// topic must then exist. Writes nothing and creates nothing.
    ///
    /// The right to publish is not probed: Kafka has no produce that writes nothing, and
    /// reading the ACLs (`DescribeAcls`) needs the cluster's `Describe` right, which a
    /// producer's user seldom has. A user without `Describe` on the topic does not see it in
    /// the metadata (Kafka leaves it out), so the missing-topic message names that right; a
    /// missing `Write` (or `IdempotentWrite`) right fails the first page's produce with
    /// librdkafka's authorization error and the ACL to grant.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when no broker answers; [`FaucetError::Write`] when the
    /// topic is missing and the broker will not create it.
    async fn check(&self) -> Result<(), FaucetError> {
        let producer = self.producer()?;
        let metadata = self.metadata(&producer).await?;
        let broker = metadata.brokers().first().map(|b| b.id());
        let fixed = self.encoder.route().fixed();
        let exists = fixed.map(|t| {
            metadata
                .topics()
                .iter()
                .any(|m| m.name() == t && m.error().is_none())
        });
        if exists == Some(true) {
            return Ok(());
        }
        let auto = match broker {
            Some(id) => self.auto_create(id).await,
            None => None,
        };
        match (fixed, auto) {
            (Some(topic), Some(false)) => Err(FaucetError::write(
                CONNECTOR,
                format!(
                    "the topic `{topic}` does not exist at `{}` (or the user may not see it: \
                     it needs the Describe and Write ACLs on it) and the broker does not create \
                     topics (auto.create.topics.enable=false): create it (kafka-topics.sh \
                     --create --topic {topic})",
                    self.config.brokers
                ),
                None,
            )),
            (Some(topic), Some(true)) => {
                tracing::info!(topic, brokers = %self.config.brokers, "the topic does not exist yet; the broker creates it on the first write (auto.create.topics.enable=true), with its default partitions and replication");
                Ok(())
            }
            (Some(topic), None) => {
                tracing::warn!(topic, brokers = %self.config.brokers, "the topic does not exist, and the broker did not say whether it creates topics (auto.create.topics.enable): unless it does, create the topic before the first run");
                Ok(())
            }
            (None, Some(false)) => {
                tracing::warn!(topic = %self.encoder.route(), brokers = %self.config.brokers, "the broker does not create topics (auto.create.topics.enable=false): every topic the template names must exist before its first record");
                Ok(())
            }
            (None, _) => Ok(()),
        }
    }
}

/// An open [`KafkaSink`]: one idempotent producer; each page produced and acknowledged.
struct KafkaWriter<'a> {
    sink: &'a KafkaSink,
    producer: FutureProducer,
    /// The state key last told; part of every message id.
    scope: String,
    /// The last page's messages per topic ([`SinkWriter::written_targets`]).
    written: Vec<(String, u64)>,
    /// What the last page published ([`SinkWriter::published`]).
    published: Option<PublishStats>,
    /// The source's keys of its tables, when told ([`SinkWriter::source_keys`]).
    keys: SourceKeys,
}

impl KafkaWriter<'_> {
    /// Produces `messages` and waits until the broker acknowledged every one (`acks=all`);
    /// returns what that published.
    async fn produce(&self, messages: &[Message]) -> Result<PublishStats, FaucetError> {
        let mut pending: VecDeque<DeliveryFuture> = VecDeque::with_capacity(messages.len());
        let mut meter = PageMeter::start();
        for (i, m) in messages.iter().enumerate() {
            if i == messages.len() / 2 && i > 0 {
                // Half the page is handed to librdkafka; it may have sent some of it.
                fault::point(fault::MID_PAGE);
            }
            check_topic(&m.route).map_err(|e| {
                FaucetError::data(CONNECTOR, format!("record {} of the page", i + 1), e)
            })?;
            let mut headers = OwnedHeaders::new_with_capacity(4);
            for (key, value) in m.headers() {
                headers = headers.insert(Header {
                    key,
                    value: Some(value),
                });
            }
            let mut record = FutureRecord::to(&m.route)
                .payload(m.value.as_slice())
                .headers(headers);
            if let Some(key) = &m.key {
                record = record.key(key.as_slice());
            }
            loop {
                match self.producer.send_result(record) {
                    Ok(delivery) => {
                        pending.push_back(delivery);
                        meter.pending(pending.len());
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        // librdkafka's queue is full: wait for the oldest to be acknowledged.
                        record = back;
                        match pending.pop_front() {
                            Some(oldest) => self.acknowledged(oldest).await?,
                            None => tokio::time::sleep(Duration::from_millis(10)).await,
                        }
                    }
                    Err((e, _)) => return Err(self.failed(&m.route, e)),
                }
            }
        }
        for delivery in pending {
            self.acknowledged(delivery).await?;
        }
        Ok(meter.finish(messages))
    }

    /// Waits for one produce's acknowledgement.
    async fn acknowledged(&self, delivery: DeliveryFuture) -> Result<(), FaucetError> {
        match delivery.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((e, message))) => {
                use rdkafka::Message as _;
                Err(self.failed(message.topic(), e))
            }
            Err(_) => Err(FaucetError::write(
                CONNECTOR,
                "the producer was closed before the page was acknowledged",
                None,
            )),
        }
    }

    /// A failed produce as a [`FaucetError::Write`], with a hint for the usual causes.
    fn failed(&self, topic: &str, e: KafkaError) -> FaucetError {
        let hint = match e.rdkafka_error_code() {
            Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
                "; the topic does not exist and the broker does not create it: create it"
            }
            Some(RDKafkaErrorCode::TopicAuthorizationFailed) => {
                "; the user may not write this topic (a Write ACL on it is needed)"
            }
            Some(RDKafkaErrorCode::ClusterAuthorizationFailed) => {
                "; the idempotent producer needs the IdempotentWrite ACL on the cluster"
            }
            Some(RDKafkaErrorCode::MessageTimedOut) => {
                "; no acknowledgement within message.timeout.ms: is the broker up?"
            }
            Some(RDKafkaErrorCode::MessageSizeTooLarge) => {
                "; raise the topic's max.message.bytes (and `properties: message.max.bytes`)"
            }
            _ => "",
        };
        FaucetError::write(
            CONNECTOR,
            format!(
                "producing to `{topic}` at `{}` failed: {e}{hint}; the page is not acknowledged \
                 and is delivered again from the last bookmark",
                self.sink.config.brokers
            ),
            Some(Box::new(e)),
        )
    }
}

#[async_trait]
impl SinkWriter for KafkaWriter<'_> {
    /// Produces the page's records and waits for every acknowledgement: durable on return.
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        self.written.clear();
        self.published = None;
        if page.is_empty() {
            return Ok(());
        }
        let messages = self.sink.encoder.encode(page, &self.scope, &self.keys)?;
        self.published = Some(self.produce(&messages).await?);
        self.written = crate::bus::per_route(&messages);
        Ok(())
    }

    /// Keeps `scope` for the message ids; a Kafka topic holds no fence: `Ok(false)`.
    async fn fence(&mut self, order: &Fence) -> Result<bool, FaucetError> {
        order.scope.clone_into(&mut self.scope);
        Ok(false)
    }

    /// Keeps the source's keys: change records are keyed by them when the sink has no `key`.
    fn source_keys(&mut self, keys: &[faucet_core::keys::TableKeys]) {
        self.keys = SourceKeys::new(keys);
    }

    /// The topics the last page's messages went to, with how many each.
    fn written_targets(&self) -> &[(String, u64)] {
        &self.written
    }

    /// What the last page produced.
    fn published(&self) -> Option<PublishStats> {
        self.published
    }
}
