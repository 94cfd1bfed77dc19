//! The `kafka` sink's configuration.

use std::collections::BTreeMap;

use faucet_core::FaucetError;
use faucet_core::route::TableTemplate;
use secrecy::{ExposeSecret as _, SecretString};
use serde::{Deserialize, Serialize};

use crate::bus::MessageFormat;

/// The librdkafka properties the sink sets itself, with the field that sets them; a
/// `properties:` entry for one of them is refused (it would weaken the durability rule or
/// bypass the field).
pub const OWN_PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers", "brokers"),
    ("metadata.broker.list", "brokers"),
    ("acks", "(always `all`)"),
    ("request.required.acks", "(always `all`)"),
    ("enable.idempotence", "(always `true`)"),
    ("compression.type", "compression"),
    ("compression.codec", "compression"),
    (
        "transactional.id",
        "(the sink is at-least-once; it uses no transactions)",
    ),
];

/// How each Kafka message batch is compressed (`compression`; librdkafka's
/// `compression.type`). Every codec is compiled in: gzip (zlib), snappy and lz4 (librdkafka's
/// own), zstd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// No compression (the default).
    #[default]
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// librdkafka's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

/// Configuration of the `kafka` sink (`type: kafka`).
/// ```yaml
/// sink:
///   type: kafka
///   config:
///     brokers: kafka-1:9092,kafka-2:9092
///     topic: "cdc.{schema}.{table}"
///     key: [id]
///     compression: zstd
///     properties:                        # passed to librdkafka as they are
///       security.protocol: SASL_SSL
///       sasl.mechanisms: SCRAM-SHA-512
///       sasl.username: faucet
///       sasl.password: ${env:KAFKA_PASSWORD}
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    /// The bootstrap brokers, `host:port[,host:port…]` (librdkafka's `bootstrap.servers`).
    /// Holds no credentials: those go in `properties`.
    pub brokers: String,
    /// The topic each record is produced to: a template over the source table
    /// (`cdc.{schema}.{table}`; placeholders `{schema}` / `{database}`, `{table}`,
    /// `{source_table}`), or a fixed topic (`events`) for rows that are not change records.
    pub topic: String,
    /// The record fields whose values make the message key (`{"id": 7}`), from a change
    /// record's `after` (its `before` for a delete). The partition is chosen by the key
    /// (librdkafka's `murmur2_random`, the Java client's partitioner: one key, one partition,
    /// so a key's records stay in order). Without `key`, a change record is keyed by its source
    /// table's key ([`crate::bus::SourceKeys`]); other rows have no key and are spread.
    #[serde(default)]
    pub key: Vec<String>,
    /// The message value: `faucet` (the record as faucet's JSON) or `debezium` (the envelope
    /// `{"before","after","source","op","ts_ms"}`).
    #[serde(default)]
    pub format: MessageFormat,
    /// `none` (the default), `gzip`, `snappy`, `lz4` or `zstd`.
    #[serde(default)]
    pub compression: Compression,
    /// librdkafka producer properties, passed through as they are
    /// (<https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md>): TLS
    /// (`security.protocol: SSL`, `ssl.ca.location`, …), SASL (`sasl.mechanisms: PLAIN` /
    /// `SCRAM-SHA-256` / `SCRAM-SHA-512` / `OAUTHBEARER`, `sasl.username`, `sasl.password`),
    /// batching (`linger.ms`, `batch.size`), `message.timeout.ms` (default here 60000: how
    /// long a page may wait for its acknowledgements before it fails). Values are secrets:
    /// never printed, only the names. The ones the sink sets itself ([`OWN_PROPERTIES`]) are
    /// refused. Kerberos (`GSSAPI`) and OIDC token fetching are not compiled in.
    #[serde(default)]
    pub properties: BTreeMap<String, SecretString>,
}

/// A config that [`KafkaSinkConfig::validate`] accepted, with its parts parsed.
#[derive(Debug, Clone)]
pub struct ValidatedKafkaConfig {
    /// The configuration.
    pub config: KafkaSinkConfig,
    /// `topic`, parsed.
    pub topic: TableTemplate,
}

/// The default `message.timeout.ms`: a page whose messages are not all acknowledged within a
/// minute fails (librdkafka's own default is five minutes).
pub const DEFAULT_MESSAGE_TIMEOUT_MS: &str = "60000";

impl KafkaSinkConfig {
    /// A configuration producing to `brokers`, topics named by `topic`.
    pub fn new(brokers: impl Into<String>, topic: impl Into<String>) -> Self {
        Self {
            brokers: brokers.into(),
            topic: topic.into(),
            key: Vec::new(),
            format: MessageFormat::default(),
            compression: Compression::default(),
            properties: BTreeMap::new(),
        }
    }

    /// Checks the configuration without I/O: librdkafka parses every property (name and
    /// value) here, before anything connects.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field: `brokers` empty or not `host:port` entries,
    /// `topic` not a template or not a legal Kafka topic name, `key` with an empty or
    /// repeated name, `properties.<name>` unknown to librdkafka, with a value it refuses, or
    /// one the sink sets itself.
    pub fn validate(&self) -> Result<ValidatedKafkaConfig, FaucetError> {
        if self.brokers.trim().is_empty() {
            return Err(FaucetError::config(
                "brokers",
                "must name at least one broker (host:port[,host:port…])",
            ));
        }
        for b in self.brokers.split(',') {
            let b = b.trim();
            let port = b.rsplit_once(':').map(|(_, p)| p);
            if b.is_empty() || b.contains('@') || port.is_none_or(|p| p.parse::<u16>().is_err()) {
                return Err(FaucetError::config(
                    "brokers",
                    format!(
                        "`{}` is not host:port; list brokers as host:port[,host:port…] \
                         (credentials go in `properties`: sasl.username, sasl.password)",
                        if b.contains('@') { "…@…" } else { b }
                    ),
                ));
            }
        }
        let topic = TableTemplate::parse(&self.topic, "topic")?;
        if let Some(fixed) = topic.fixed() {
            check_topic(fixed).map_err(|m| FaucetError::config("topic", m))?;
        }
        crate::bus::validate_key(&self.key)?;
        for (name, value) in &self.properties {
            let field = format!("properties.{name}");
            if let Some((_, instead)) = OWN_PROPERTIES.iter().find(|(p, _)| p == name) {
                let instead = if instead.starts_with('(') {
                    format!("the sink sets it itself {instead}")
                } else {
                    format!("set `{instead}` instead")
                };
                return Err(FaucetError::config(field, instead));
            }
            let mut one = rdkafka::ClientConfig::new();
            one.set(name, value.expose_secret());
            if let Err(e) = one.create_native_config() {
                // librdkafka quotes the value it refused: never show a secret-looking one.
                let detail = if is_secret_name(name) {
                    "librdkafka refused this value".to_owned()
                } else {
                    e.to_string()
                };
                return Err(FaucetError::config(field, detail));
            }
        }
        Ok(ValidatedKafkaConfig {
            config: self.clone(),
            topic,
        })
    }

    /// The librdkafka configuration of the producer: `properties`, then what the sink sets
    /// itself (`bootstrap.servers`, `acks=all`, `enable.idempotence=true`,
    /// `compression.type`), and `partitioner=murmur2_random` / `message.timeout.ms=60000`
    /// unless `properties` sets them.
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        let mut c = rdkafka::ClientConfig::new();
        c.set("partitioner", "murmur2_random");
        c.set("message.timeout.ms", DEFAULT_MESSAGE_TIMEOUT_MS);
        for (name, value) in &self.properties {
            c.set(name, value.expose_secret());
        }
        c.set("bootstrap.servers", &self.brokers);
        c.set("acks", "all");
        c.set("enable.idempotence", "true");
        c.set("compression.type", self.compression.as_str());
        c
    }

    /// `properties` by name, values hidden: `{security.protocol, sasl.password}`.
    pub fn property_names(&self) -> String {
        let names: Vec<&str> = self.properties.keys().map(String::as_str).collect();
        format!("{{{}}}", names.join(", "))
    }
}

/// Whether a librdkafka property's value is a secret by its name (passwords, keys, tokens,
/// JAAS or OAUTHBEARER configs).
fn is_secret_name(name: &str) -> bool {
    [
        "password",
        "secret",
        "key",
        "token",
        "jaas",
        "oauthbearer.config",
    ]
    .iter()
    .any(|s| name.contains(s))
}

/// Checks a rendered topic name by Kafka's rule: 1–249 characters of `[A-Za-z0-9._-]`, not
/// `.` or `..`.
///
/// # Errors
/// The reason, for a [`FaucetError::Config`] or [`FaucetError::Data`] message.
pub fn check_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() || topic.len() > 249 || topic == "." || topic == ".." {
        return Err(format!(
            "`{topic}` is not a Kafka topic name (1 to 249 characters, not `.` or `..`)"
        ));
    }
    if let Some(c) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "`{topic}` is not a Kafka topic name: {c:?} is not allowed (only A-Z a-z 0-9 . _ -)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_field(c: &KafkaSinkConfig) -> String {
        match c.validate().expect_err("invalid") {
            FaucetError::Config { field, .. } => field,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn validation_names_the_field() {
        let ok = KafkaSinkConfig::new("127.0.0.1:9092, b:9093", "cdc.{schema}.{table}");
        ok.validate().expect("valid");
        assert_eq!(err_field(&KafkaSinkConfig::new("", "t")), "brokers");
        assert_eq!(err_field(&KafkaSinkConfig::new("host", "t")), "brokers");
        let e = KafkaSinkConfig::new("u:pw@host:9092", "t")
            .validate()
            .expect_err("credentials")
            .to_string();
        assert!(!e.contains("pw"), "{e}");
        assert_eq!(err_field(&KafkaSinkConfig::new("h:1", "a b")), "topic");
        let mut c = KafkaSinkConfig::new("h:1", "t");
        c.properties
            .insert("acks".into(), SecretString::from("1".to_owned()));
        assert_eq!(err_field(&c), "properties.acks");
        let mut c = KafkaSinkConfig::new("h:1", "t");
        c.properties
            .insert("no.such.thing".into(), SecretString::from("1".to_owned()));
        assert_eq!(err_field(&c), "properties.no.such.thing");
        let mut c = KafkaSinkConfig::new("h:1", "t");
        c.properties.insert(
            "sasl.password".into(),
            SecretString::from("hunter2".to_owned()),
        );
        c.properties.insert(
            "linger.ms".into(),
            SecretString::from("not-a-number".to_owned()),
        );
        assert_eq!(err_field(&c), "properties.linger.ms");
        assert_eq!(c.property_names(), "{linger.ms, sasl.password}");
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn topic_names() {
        assert!(check_topic("cdc.public.orders").is_ok());
        assert!(check_topic("..").is_err());
        assert!(check_topic("a/b").is_err());
        assert!(check_topic(&"x".repeat(250)).is_err());
    }
}
