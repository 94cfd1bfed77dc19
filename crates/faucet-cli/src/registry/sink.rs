//! [`SinkConfig`]: the sinks a pipeline file can name.
//!
//! | type | connector | feature |
//! |---|---|---|
//! | `jsonl` | `faucet_connectors::files::JsonlSink` | `files` (default) |
//! | `postgres` | `faucet_connectors::postgres::PostgresSink` (append or keyed upsert) | `postgres` |
//! | `mysql` | `faucet_connectors::mysql::MysqlSink` (append or keyed upsert; MySQL / MariaDB) | `mysql` |
//! | `redis-streams` | `faucet_connectors::redis::RedisStreamsSink` (Redis Streams, atomic watermark) | `redis-streams` |
//! | `nats` | `faucet_connectors::nats::NatsSink` (NATS JetStream, atomic watermark by an exact re-anchor) | `nats` |
//! | `kafka` | `faucet_connectors::kafka::KafkaSink` (Kafka topics, at-least-once) | `kafka` |
//! | `sqlite` | `faucet_connectors::sqlite::SqliteSink` (append or keyed upsert; a database file) | `sqlite` |
//! | `mongodb` | `faucet_connectors::mongodb::sink::MongodbSink` (append or keyed upsert; a page is one transaction) | `mongodb` |
//!
//! A sink is one line in [`registry!`] below and one `impl` [`SinkEntry`] on its config type
//! (under its feature).

use std::path::Path;

use faucet_core::{FaucetError, Sink};

use super::{Hints, at_field};

registry! {
    /// `pipeline.sink`: `{type: <name>, config: {...}}`; the config is the connector's own.
    enum SinkConfig, kinds SinkType, what "sink", at "pipeline.sink",
    about dyn SinkEntry, compiled dyn SinkEntry {
        /// `type: jsonl`.
        Jsonl = "jsonl" => faucet_connectors::files::JsonlSinkConfig, if "files";
        /// `type: postgres`.
        Postgres = "postgres" => faucet_connectors::postgres::PostgresSinkConfig, if "postgres";
        /// `type: mysql`: a MySQL or MariaDB table.
        Mysql = "mysql" => faucet_connectors::mysql::MysqlSinkConfig, if "mysql";
        /// `type: redis-streams`: entries of Redis streams.
        RedisStreams = "redis-streams" => faucet_connectors::redis::RedisStreamsSinkConfig, if "redis-streams";
        /// `type: nats`: messages of a NATS JetStream stream.
        Nats = "nats" => faucet_connectors::nats::NatsSinkConfig, if "nats";
        /// `type: kafka`: messages of Kafka topics.
        Kafka = "kafka" => faucet_connectors::kafka::KafkaSinkConfig, if "kafka";
        /// `type: sqlite`: a table of a SQLite database file.
        Sqlite = "sqlite" => faucet_connectors::sqlite::SqliteSinkConfig, if "sqlite";
        /// `type: mongodb`: documents of MongoDB collections.
        Mongodb = "mongodb" => faucet_connectors::mongodb::sink::MongodbSinkConfig, if "mongodb";
    }
}

/// What the CLI needs of one sink: the `impl` on the connector's config type is the sink's
/// whole entry in the registry. Nothing here does I/O.
pub(crate) trait SinkEntry: std::fmt::Debug {
    /// What the sink writes, for people: a file path, or a URL with its password redacted.
    fn target(&self) -> String;

    /// Resolves relative file paths against `base`, the config file's directory.
    fn resolve_paths(&mut self, base: &Path) {
        let _ = base;
    }

    /// Whether the sink writes to standard output: then faucet's own reports go to stderr.
    fn writes_stdout(&self) -> bool {
        false
    }

    /// What `faucet doctor` suggests when the probe fails.
    fn hints(&self) -> Hints;

    /// Validates the config and builds the sink (files are created in `open`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming fields relative to the connector's own config (`path`,
    /// `key`); the registry places them in the file.
    fn build(&self) -> Result<Box<dyn Sink>, FaucetError>;

    /// For a database sink: the server and the table it writes, for the feedback-loop rule
    /// ([`super::feedback::check`]); `None` for a file sink.
    fn written_table(&self) -> Option<super::feedback::WrittenTable> {
        None
    }

    /// Whether the sink alters its tables for a schema change (the SQL sinks): then a source
    /// of plain rows delivers its new fields as added columns
    /// (`faucet_core::change::NewFields`). `false` for files and buses, which take the
    /// rows as they come.
    fn applies_schema_changes(&self) -> bool {
        false
    }

    /// For a file sink whose path is a template over the source table (`jsonl`'s
    /// `out/{table}.jsonl`): the template ([`super::routing::check_files`]); `None` for a
    /// fixed path, another sink, or a config that does not validate.
    fn file_route(&self) -> Option<faucet_core::route::TableTemplate> {
        None
    }

    /// For a SQL sink that writes each source table into its own target: its route
    /// ([`super::routing::check`]); `None` for a sink of one table, or a config that does
    /// not validate (its build reports that).
    #[cfg(feature = "sql")]
    fn route(&self) -> Option<faucet_connectors::sql::Route> {
        None
    }
}

/// `, tables: a -> x, b -> y` for a SQL sink's `tables:` map (nothing without one).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn mapped(
    tables: &std::collections::BTreeMap<String, faucet_connectors::sql::TargetEntry>,
) -> String {
    use faucet_connectors::sql::TargetEntry;
    if tables.is_empty() {
        return String::new();
    }
    let entries: Vec<String> = tables
        .iter()
        .map(|(from, to)| match to {
            TargetEntry::Name(n) => format!("{from} -> {n}"),
            TargetEntry::Spec(s) => {
                let mode = s
                    .write_mode
                    .map(|m| m.describe(s.key.as_deref().unwrap_or(&[])));
                format!("{from} -> {}{}", s.table, mode.unwrap_or_default())
            }
        })
        .collect();
    format!(", tables: {}", entries.join(", "))
}

#[cfg(feature = "files")]
impl SinkEntry for faucet_connectors::files::JsonlSinkConfig {
    fn target(&self) -> String {
        self.path.display().to_string()
    }

    fn resolve_paths(&mut self, base: &Path) {
        if !self.writes_stdout() {
            self.path = super::resolve_path(base, &self.path);
        }
    }

    fn writes_stdout(&self) -> bool {
        faucet_connectors::files::JsonlSinkConfig::writes_stdout(self)
    }

    fn file_route(&self) -> Option<faucet_core::route::TableTemplate> {
        self.route().ok().flatten()
    }

    fn hints(&self) -> Hints {
        Hints::file("does the directory exist, and can this user write to it?")
    }

    fn build(&self) -> Result<Box<dyn Sink>, FaucetError> {
        Ok(Box::new(faucet_connectors::files::JsonlSink::new(
            self.clone(),
        )?))
    }
}

/// The entry of a SQL server's sink (`postgres`, `mysql`): the same fields and behaviour,
/// its own config and sink types, connect hint and feedback endpoint.
macro_rules! sql_sink_entry {
    ($feature:literal, $config:ty, $sink:ty, $hint:expr, $endpoint:path) => {
        #[cfg(feature = $feature)]
        impl SinkEntry for $config {
            fn target(&self) -> String {
                let mode = self.write_mode.describe(&self.key);
                format!(
                    "{} table {}{mode}{}",
                    super::redacted_secret(&self.connection_url),
                    self.table,
                    mapped(&self.tables),
                )
            }

            fn route(&self) -> Option<faucet_connectors::sql::Route> {
                self.validate().ok()?.route().cloned()
            }

            fn hints(&self) -> Hints {
                Hints {
                    connect: Some($hint),
                    other: None,
                }
            }

            fn build(&self) -> Result<Box<dyn Sink>, FaucetError> {
                Ok(Box::new(<$sink>::new(self.clone())?))
            }

            fn applies_schema_changes(&self) -> bool {
                true
            }

            fn written_table(&self) -> Option<super::feedback::WrittenTable> {
                let (endpoint, identity) = $endpoint(&self.connection_url)?;
                Some(super::feedback::WrittenTable {
                    endpoint,
                    identity,
                    table: self.table.clone(),
                })
            }
        }
    };
}

sql_sink_entry!(
    "postgres",
    faucet_connectors::postgres::PostgresSinkConfig,
    faucet_connectors::postgres::PostgresSink,
    super::POSTGRES_CONNECT_HINT,
    super::feedback::Endpoint::postgres
);
sql_sink_entry!(
    "mysql",
    faucet_connectors::mysql::MysqlSinkConfig,
    faucet_connectors::mysql::MysqlSink,
    super::MYSQL_CONNECT_HINT,
    super::feedback::Endpoint::mysql
);

#[cfg(feature = "redis-streams")]
impl SinkEntry for faucet_connectors::redis::RedisStreamsSinkConfig {
    fn target(&self) -> String {
        format!(
            "{} stream {}",
            super::redacted_secret(&self.url),
            self.stream
        )
    }

    fn hints(&self) -> Hints {
        Hints {
            connect: Some(
                "is Redis running at `url`, and does it accept the user and password there?",
            ),
            other: None,
        }
    }

    fn build(&self) -> Result<Box<dyn Sink>, FaucetError> {
        Ok(Box::new(faucet_connectors::redis::RedisStreamsSink::new(
            self.clone(),
        )?))
    }
}

#[cfg(feature = "nats")]
impl SinkEntry for faucet_connectors::nats::NatsSinkConfig {
    fn target(&self) -> String {
        format!(
            "{} stream {} subject {}",
            super::redacted_secret(&self.url),
            self.stream,
            self.subject
        )
    }

    fn hints(&self) -> Hints {
        Hints {
            connect: Some(
                "is nats-server (with JetStream, `-js`) running at `url`, and does it accept the \
                 user and password there?",
            ),
            other: None,
        }
    }

    fn build(&self) -> Result<Box<dyn Sink>, FaucetError> {
        Ok(Box::new(faucet_connectors::nats::NatsSink::new(
            self.clone(),
        )?))
    }
}

#[cfg(feature = "kafka")]
impl SinkEntry for faucet_connectors::kafka::KafkaSinkConfig {
    /// `<brokers> topic <template>`, and the names (never the values) of `properties`.
    fn target(&self) -> String {
        let properties = if self.properties.is_empty() {
            String::new()
        } else {
            format!(", properties {}", self.property_names())
        };
        format!("{} topic {}{properties}", self.brokers, self.topic)
    }

    fn hints(&self) -> Hints {
        Hints {
            connect: Some(
                "is a Kafka broker listening at `brokers`, and do `properties` \
                 (security.protocol, sasl.*, ssl.*) match its listener?",
            ),
            other: None,
        }
    }

    fn build(&self) -> Result<Box<dyn Sink>, FaucetError> {
        Ok(Box::new(faucet_connectors::kafka::KafkaSink::new(
            self.clone(),
        )?))
    }
}

#[cfg(feature = "sqlite")]
impl SinkEntry for faucet_connectors::sqlite::SqliteSinkConfig {
    fn target(&self) -> String {
        let mode = self.write_mode.describe(&self.key);
        format!("{} table {}{mode}", self.path.display(), self.table)
    }

    fn resolve_paths(&mut self, base: &Path) {
        self.path = super::resolve_path(base, &self.path);
    }

    fn hints(&self) -> Hints {
        Hints::file(
            "does the file's directory exist, can this user write the file and its \
                 directory (WAL keeps `-wal` and `-shm` files beside it), and is no other \
                 writer holding it?",
        )
    }

    fn build(&self) -> Result<Box<dyn Sink>, FaucetError> {
        Ok(Box::new(faucet_connectors::sqlite::SqliteSink::new(
            self.clone(),
        )?))
    }

    fn applies_schema_changes(&self) -> bool {
        true
    }
}

#[cfg(feature = "mongodb")]
impl SinkEntry for faucet_connectors::mongodb::sink::MongodbSinkConfig {
    fn target(&self) -> String {
        let tables = if self.tables.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = self.tables.keys().map(String::as_str).collect();
            format!(", tables: {}", names.join(", "))
        };
        format!(
            "{} collection {}{tables}",
            super::redacted_secret(&self.connection_url),
            self.collection
        )
    }

    fn hints(&self) -> Hints {
        Hints {
            connect: Some(
                "is MongoDB running, and are the hosts, user and password in the url right \
                 (add ?directConnection=true for a single node)?",
            ),
            other: Some(
                "the mongodb sink needs readWrite on the target databases; a page is one \
                 transaction, which needs a replica set (one node is enough)",
            ),
        }
    }

    #[cfg(feature = "sql")]
    fn route(&self) -> Option<faucet_connectors::sql::Route> {
        self.route()
    }

    fn build(&self) -> Result<Box<dyn Sink>, FaucetError> {
        Ok(Box::new(
            faucet_connectors::mongodb::sink::MongodbSink::new(self.clone())?,
        ))
    }
}

const FIELD: &str = "pipeline.sink";

impl SinkConfig {
    /// What the sink writes, for people: a file path, or a URL with its password redacted
    /// (empty for a sink that is not compiled in).
    pub(crate) fn target(&self) -> String {
        self.about().map(|e| e.target()).unwrap_or_default()
    }

    /// Resolves relative file paths against `base`, the config file's directory.
    pub(crate) fn resolve_paths(&mut self, base: &Path) {
        if let Some(e) = self.about_mut() {
            e.resolve_paths(base);
        }
    }

    /// Whether the sink writes to standard output (a jsonl sink with `path: "-"`): then
    /// faucet's own reports go to stderr.
    pub(crate) fn writes_stdout(&self) -> bool {
        self.about().is_some_and(|e| e.writes_stdout())
    }

    /// What a database sink writes ([`SinkEntry::written_table`]).
    pub(crate) fn written_table(&self) -> Option<super::feedback::WrittenTable> {
        self.about().and_then(|e| e.written_table())
    }

    /// Whether the sink alters its tables for a schema change
    /// ([`SinkEntry::applies_schema_changes`]).
    pub(crate) fn applies_schema_changes(&self) -> bool {
        self.about().is_some_and(|e| e.applies_schema_changes())
    }

    /// A file sink's path template ([`SinkEntry::file_route`]).
    pub(crate) fn file_route(&self) -> Option<faucet_core::route::TableTemplate> {
        self.about().and_then(|e| e.file_route())
    }

    /// A routed SQL sink's route ([`SinkEntry::route`]).
    #[cfg(feature = "sql")]
    pub(crate) fn route(&self) -> Option<faucet_connectors::sql::Route> {
        self.about().and_then(|e| e.route())
    }

    /// What `faucet doctor` suggests when the sink's probe fails.
    pub(crate) fn hints(&self) -> Hints {
        self.about().map(|e| e.hints()).unwrap_or_default()
    }

    /// Validates the config and builds the sink; no I/O (files are created in `open`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `pipeline.sink.config.<field>`, or for a type that is not
    /// compiled into this binary.
    pub(crate) fn build(&self) -> Result<Box<dyn Sink>, FaucetError> {
        let config_field = format!("{FIELD}.config");
        let sink = self
            .compiled()?
            .build()
            .map_err(|e| at_field(&config_field, e))?;
        Ok(Box::new(super::fielded::FieldedSink::new(
            sink,
            config_field,
        )))
    }
}
