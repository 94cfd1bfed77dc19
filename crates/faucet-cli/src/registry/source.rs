//! [`SourceConfig`]: the sources a pipeline file can name.
//!
//! | type | connector | feature |
//! |---|---|---|
//! | `csv` | `faucet_connectors::files::CsvSource` | `files` (default) |
//! | `jsonl` | `faucet_connectors::files::JsonlSource` | `files` (default) |
//! | `postgres` | `faucet_connectors::postgres::PostgresQuerySource` | `postgres` |
//! | `postgres-cdc` | `faucet_connectors::postgres::cdc::PostgresCdcSource` | `postgres` |
//! | `mysql` | `faucet_connectors::mysql::MysqlQuerySource` | `mysql` |
//! | `mysql-cdc` | `faucet_connectors::mysql::cdc::MysqlCdcSource` | `mysql` |
//! | `mongodb-cdc` | `faucet_connectors::mongodb::cdc::MongodbCdcSource` | `mongodb` |
//!
//! A source is one line in [`registry!`] below and one `impl` [`SourceEntry`] on its config
//! type (under its feature).

use std::path::Path;

use faucet_core::change::NewFields;
use faucet_core::{FaucetError, Source};

use super::{Hints, at_field};

registry! {
    /// `pipeline.source`: `{type: <name>, config: {...}}`; the config is the connector's own
    /// (its fields are documented with the connector's config struct).
    enum SourceConfig, kinds SourceType, what "source", at "pipeline.source",
    about dyn SourceEntry, compiled dyn SourceEntry {
        /// `type: csv`.
        Csv = "csv" => faucet_connectors::files::CsvSourceConfig, if "files";
        /// `type: jsonl`.
        Jsonl = "jsonl" => faucet_connectors::files::JsonlSourceConfig, if "files";
        /// `type: postgres`: a query or a table.
        Postgres = "postgres" => faucet_connectors::postgres::PostgresQueryConfig, if "postgres";
        /// `type: postgres-cdc`: logical replication.
        PostgresCdc = "postgres-cdc" => faucet_connectors::postgres::cdc::PostgresCdcConfig, if "postgres";
        /// `type: mysql`: a query or a table of MySQL / MariaDB.
        Mysql = "mysql" => faucet_connectors::mysql::MysqlQueryConfig, if "mysql";
        /// `type: mysql-cdc`: the MySQL/MariaDB binlog, read as a replica.
        MysqlCdc = "mysql-cdc" => faucet_connectors::mysql::cdc::MysqlCdcConfig, if "mysql";
        /// `type: mongodb-cdc`: MongoDB change streams.
        MongodbCdc = "mongodb-cdc" => faucet_connectors::mongodb::cdc::MongodbCdcConfig, if "mongodb";
    }
}

/// What the CLI needs of one source: the `impl` on the connector's config type is the
/// source's whole entry in the registry. Nothing here does I/O.
pub(crate) trait SourceEntry: std::fmt::Debug {
    /// What the source reads, for people: a file path, or a URL with its password redacted.
    fn target(&self) -> String;

    /// Warnings a user should see without connecting (`faucet validate` prints them).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Resolves relative file paths against `base`, the config file's directory.
    fn resolve_paths(&mut self, base: &Path) {
        let _ = base;
    }

    /// Whether the source follows its stream until cancelled instead of ending when it has
    /// read what is there now.
    fn is_continuous(&self) -> bool {
        false
    }

    /// What `faucet doctor` suggests when the probe fails.
    fn hints(&self) -> Hints;

    /// Validates the config and builds the source.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming fields relative to the connector's own config (`path`,
    /// `replication_key[1]`); the registry places them in the file.
    fn build(&self) -> Result<Box<dyn Source>, FaucetError>;

    /// `faucet replicate`'s source for this config (a consistent snapshot, then the
    /// changes), or `None` when the source does not take part in `faucet replicate`. A source
    /// returning `Some` belongs in [`SourceType::REPLICATES`] too.
    ///
    /// # Errors
    /// As [`SourceEntry::build`].
    fn replicate(&self) -> Option<Result<Box<dyn Source>, FaucetError>> {
        None
    }

    /// For a source of plain rows (a file, a query): the name the schema-change records of
    /// its new fields carry ([`NewFields`]: the path, the query's `table` or `query`);
    /// `None` for a change source, which delivers its own.
    fn shape_table(&self) -> Option<String> {
        None
    }

    /// For a change source: the server and the tables it reads changes of, for the
    /// feedback-loop rule ([`super::feedback::check`]); `None` for every other source.
    fn change_feed(&self) -> Option<super::feedback::ChangeFeed> {
        None
    }
}

/// The `doctor` hint of the file sources.
#[cfg(feature = "files")]
const FILE_HINTS: Hints = Hints::file("does the file exist, and can this user read it?");

/// The entry of a file source: `$config` read by `$source`; every file format alike.
macro_rules! file_source_entry {
    ($config:ident, $source:ident) => {
        #[cfg(feature = "files")]
        impl SourceEntry for faucet_connectors::files::$config {
            fn target(&self) -> String {
                self.path.display().to_string()
            }

            fn resolve_paths(&mut self, base: &Path) {
                self.path = super::resolve_path(base, &self.path);
            }

            fn hints(&self) -> Hints {
                FILE_HINTS
            }

            fn build(&self) -> Result<Box<dyn Source>, FaucetError> {
                Ok(Box::new(faucet_connectors::files::$source::new(
                    self.clone(),
                )?))
            }

            fn shape_table(&self) -> Option<String> {
                Some(self.path.display().to_string())
            }
        }
    };
}

file_source_entry!(CsvSourceConfig, CsvSource);
file_source_entry!(JsonlSourceConfig, JsonlSource);

/// A built source, boxed.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn boxed<S: Source + 'static>(
    source: Result<S, FaucetError>,
) -> Result<Box<dyn Source>, FaucetError> {
    source.map(|s| Box::new(s) as Box<dyn Source>)
}

/// The `doctor` hint of the PostgreSQL sources.
#[cfg(feature = "postgres")]
const POSTGRES_HINTS: Hints = Hints {
    connect: Some(super::POSTGRES_CONNECT_HINT),
    other: None,
};

/// The connect hint of a SQL source's `connector` (`postgres`, `mysql`).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn sql_connect_hint(connector: &str) -> &'static str {
    #[cfg(feature = "mysql")]
    if connector == "mysql" {
        return super::MYSQL_CONNECT_HINT;
    }
    let _ = connector;
    super::POSTGRES_CONNECT_HINT
}

/// The SQL query sources (`postgres`, `mysql`): one entry over their dialect.
#[cfg(any(feature = "postgres", feature = "mysql"))]
impl<D: faucet_connectors::sql::query::QueryDialect> SourceEntry
    for faucet_connectors::sql::query::QueryConfig<D>
{
    fn target(&self) -> String {
        format!(
            "{} {}",
            super::redacted_secret(&self.connection_url),
            self.what()
        )
    }

    fn warnings(&self) -> Vec<String> {
        faucet_connectors::sql::query::QueryConfig::warnings(self)
    }

    fn hints(&self) -> Hints {
        Hints {
            connect: Some(sql_connect_hint(D::CONNECTOR)),
            other: None,
        }
    }

    fn build(&self) -> Result<Box<dyn Source>, FaucetError> {
        Ok(Box::new(faucet_connectors::sql::query::QuerySource::new(
            self.clone(),
        )?))
    }

    fn shape_table(&self) -> Option<String> {
        Some(self.table.clone().unwrap_or_else(|| "query".to_owned()))
    }
}

/// The entry of a SQL server's change source (`postgres-cdc`, `mysql-cdc`): its own
/// `target` and `hints` (given as they are written), then what both share: `continuous`,
/// the source, the replicate source (`faucet replicate`) and the change feed of `tables`.
macro_rules! cdc_entry {
    ($feature:literal, $config:ty, $source:ty, $replicate:ty, $endpoint:path, { $($own:tt)* }) => {
        #[cfg(feature = $feature)]
        impl SourceEntry for $config {
            $($own)*

            fn is_continuous(&self) -> bool {
                self.continuous
            }

            fn build(&self) -> Result<Box<dyn Source>, FaucetError> {
                boxed(<$source>::new(self.clone()))
            }

            fn replicate(&self) -> Option<Result<Box<dyn Source>, FaucetError>> {
                Some(boxed(<$replicate>::new(self.clone())))
            }

            fn change_feed(&self) -> Option<super::feedback::ChangeFeed> {
                super::feedback::ChangeFeed::of($endpoint(&self.connection_url), &self.tables)
            }
        }
    };
}

cdc_entry!(
    "postgres",
    faucet_connectors::postgres::cdc::PostgresCdcConfig,
    faucet_connectors::postgres::cdc::PostgresCdcSource,
    faucet_connectors::postgres::snapshot::PostgresReplicateSource,
    super::feedback::Endpoint::postgres,
    {
        fn target(&self) -> String {
            format!(
                "{} slot {} publication {}",
                super::redacted_secret(&self.connection_url),
                self.slot_name,
                self.publication
            )
        }

        fn hints(&self) -> Hints {
            POSTGRES_HINTS
        }
    }
);

cdc_entry!(
    "mysql",
    faucet_connectors::mysql::cdc::MysqlCdcConfig,
    faucet_connectors::mysql::cdc::MysqlCdcSource,
    faucet_connectors::mysql::snapshot::MysqlReplicateSource,
    super::feedback::Endpoint::mysql,
    {
        fn target(&self) -> String {
            format!(
                "{} as replica {}",
                super::redacted_secret(&self.connection_url),
                self.server_id
            )
        }

        fn hints(&self) -> Hints {
            Hints {
                connect: Some(super::MYSQL_CONNECT_HINT),
                other: Some(
                    "mysql-cdc needs log_bin, binlog_format=ROW, binlog_row_image=FULL, \
                     binlog_row_metadata=FULL, and REPLICATION SLAVE + BINLOG MONITOR \
                     (MariaDB) / REPLICATION CLIENT (MySQL) for the user",
                ),
            }
        }
    }
);

#[cfg(feature = "mongodb")]
impl SourceEntry for faucet_connectors::mongodb::cdc::MongodbCdcConfig {
    fn target(&self) -> String {
        format!(
            "{} collections {}",
            super::redacted_secret(&self.connection_url),
            self.collections.join(", ")
        )
    }

    fn hints(&self) -> Hints {
        Hints {
            connect: Some(
                "is MongoDB running, and are the hosts, user and password in the url right \
                 (add ?directConnection=true for a single node)?",
            ),
            other: Some(
                "mongodb-cdc needs a replica set (change streams), the changeStream and find \
                 actions on the collections, and changeStreamPreAndPostImages where `before` \
                 or `full_document` ask for images",
            ),
        }
    }

    fn is_continuous(&self) -> bool {
        self.continuous
    }

    fn build(&self) -> Result<Box<dyn Source>, FaucetError> {
        Ok(Box::new(
            faucet_connectors::mongodb::cdc::MongodbCdcSource::new(self.clone())?,
        ))
    }

    fn replicate(&self) -> Option<Result<Box<dyn Source>, FaucetError>> {
        Some(
            faucet_connectors::mongodb::replicate::MongodbReplicateSource::new(self.clone())
                .map(|s| Box::new(s) as Box<dyn Source>),
        )
    }
}

impl SourceType {
    /// The sources `faucet replicate` takes (their entry implements
    /// [`SourceEntry::replicate`]), for its message naming them.
    pub(crate) const REPLICATES: &'static [Self] =
        &[Self::PostgresCdc, Self::MysqlCdc, Self::MongodbCdc];
}

const FIELD: &str = "pipeline.source";

impl SourceConfig {
    /// What the source reads, for people: a file path, or a URL with its password redacted
    /// (empty for a source that is not compiled in).
    pub(crate) fn target(&self) -> String {
        self.about().map(|e| e.target()).unwrap_or_default()
    }

    /// Whether the source follows its stream until cancelled (`postgres-cdc` with
    /// `continuous: true`) rather than stopping at the end of what it can read now; `faucet
    /// serve` runs such a row all the time instead of on a schedule.
    pub(crate) fn is_continuous(&self) -> bool {
        self.about().is_some_and(|e| e.is_continuous())
    }

    /// Warnings a user should see without connecting (`faucet validate` prints them).
    pub(crate) fn warnings(&self) -> Vec<String> {
        self.about().map(|e| e.warnings()).unwrap_or_default()
    }

    /// What a change source reads ([`SourceEntry::change_feed`]).
    pub(crate) fn change_feed(&self) -> Option<super::feedback::ChangeFeed> {
        self.about().and_then(|e| e.change_feed())
    }

    /// What `faucet doctor` suggests when the source's probe fails.
    pub(crate) fn hints(&self) -> Hints {
        self.about().map(|e| e.hints()).unwrap_or_default()
    }

    /// Resolves relative file paths against `base`, the config file's directory.
    pub(crate) fn resolve_paths(&mut self, base: &Path) {
        if let Some(e) = self.about_mut() {
            e.resolve_paths(base);
        }
    }

    /// Validates the config and builds the source; no I/O (that happens in `open`/`check`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `pipeline.source.config.<field>` (also when the source
    /// finds it only once open), or for a type that is not compiled into this binary.
    pub(crate) fn build(&self) -> Result<Box<dyn Source>, FaucetError> {
        let built = self.compiled()?.build();
        Self::fielded(built)
    }

    /// The source of a run into `sink`: [`SourceConfig::build`], its new fields delivered
    /// as added columns ([`NewFields`]) when it reads plain rows
    /// ([`SourceEntry::shape_table`]) and the sink alters its tables for them
    /// ([`super::SinkConfig::applies_schema_changes`]); a file or bus sink takes the rows as
    /// they come.
    ///
    /// # Errors
    /// As [`SourceConfig::build`].
    pub(crate) fn build_for(
        &self,
        sink: &super::SinkConfig,
    ) -> Result<Box<dyn Source>, FaucetError> {
        let source = self.build()?;
        let table = self.about().and_then(|e| e.shape_table());
        Ok(match table {
            Some(table) if sink.applies_schema_changes() => Box::new(NewFields::new(source, table)),
            _ => source,
        })
    }

    /// `faucet replicate`'s source for this config: a consistent snapshot, then the changes.
    ///
    /// # Errors
    /// As [`SourceConfig::build`]; [`FaucetError::Config`] at `pipeline.source.type` for a
    /// source `faucet replicate` does not take.
    pub(crate) fn replicate(&self) -> Result<Box<dyn Source>, FaucetError> {
        let entry = self.compiled()?;
        let Some(built) = entry.replicate() else {
            let names: Vec<String> = SourceType::REPLICATES
                .iter()
                .map(|k| format!("`{}`", k.name()))
                .collect();
            let names = match names.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            };
            return Err(FaucetError::config(
                format!("{FIELD}.type"),
                format!(
                    "`faucet replicate` needs a {names} source, not `{}`",
                    self.type_name()
                ),
            ));
        };
        Self::fielded(built)
    }

    /// `built`, with its configuration errors — now and once open — named by their place in
    /// the file: `pipeline.source.config.<field>`.
    fn fielded(
        built: Result<Box<dyn Source>, FaucetError>,
    ) -> Result<Box<dyn Source>, FaucetError> {
        let config_field = format!("{FIELD}.config");
        let source = built.map_err(|e| at_field(&config_field, e))?;
        Ok(Box::new(super::fielded::FieldedSource::new(
            source,
            config_field,
        )))
    }
}
