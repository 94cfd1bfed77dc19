//! The `mysql-cdc` source's configuration (the `source.config` block), and its pure
//! validation.

use secrecy::SecretString;
use serde::Deserialize;

use faucet_core::FaucetError;

use super::CONNECTOR;
use crate::mysql::connection::MysqlConnection;
use crate::mysql::table::TableName;
use crate::sql::table_pattern::split_tables;

/// Configuration of a [`super::MysqlCdcSource`].
///
/// ```yaml
/// source:
///   type: mysql-cdc
///   config:
///     connection_url: ${env:SOURCE_MYSQL_URL}
///     server_id: 4101
///     tables: [shop.orders, shop.customers]
///     # continuous: false
///     # start: end        # or `beginning`, or {at: {binlog_file: mariadb-bin.000003, binlog_pos: 4}}
/// ```
///
/// The page size and the longest a change waits in a page come from the run
/// ([`faucet_core::ReadOptions`]: `batch_size`, `max_page_delay`), as for `postgres-cdc`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlCdcConfig {
    /// The source server, `mysql://user:password@host:port/database` (the database part is
    /// optional). A secret: never printed; `Debug` shows `[redacted]`. The user needs
    /// REPLICATION SLAVE, and BINLOG MONITOR on MariaDB / REPLICATION CLIENT on MySQL.
    pub connection_url: SecretString,
    /// The replica id this reader registers with (`COM_REGISTER_SLAVE`), 1 to 4294967295.
    /// It must differ from the server's own `server_id` and from every other replica's:
    /// the server disconnects an older replica that registers the same id.
    pub server_id: u32,
    /// The tables whose row changes are emitted, `database.table` (`shop.orders`), matched
    /// exactly (case-sensitively) against the binlog's table maps. An entry with a `*` is a
    /// pattern ([`crate::sql::table_pattern`]): `shop.*` (every table of the database) or
    /// `shop.order_*`; it matches the base tables (not views) that exist at start, and a
    /// table created later when the binlog first maps it.
    pub tables: Vec<String>,
    /// `false` (the default): a run catches up to the end of the binlog as it was at start
    /// (`SHOW MASTER STATUS`) and ends, also on an idle server. `true`: follow the binlog until
    /// the run is cancelled (SIGINT/SIGTERM), then finish the page in hand and end.
    #[serde(default)]
    pub continuous: bool,
    /// Where a first run (one without a bookmark) starts: `end` (the default: the current end
    /// of the binlog; only changes made after the start are read), `beginning` (the oldest
    /// binlog file the server still has), or `{at: {binlog_file, binlog_pos}}`. Ignored once
    /// a bookmark exists.
    #[serde(default)]
    pub start: StartPosition,
}

/// Where a first run starts reading the binlog.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum StartPosition {
    /// The end of the binlog when the run starts (`SHOW MASTER STATUS`).
    #[default]
    End,
    /// The start of the oldest binlog file the server still has (`SHOW BINARY LOGS`).
    Beginning,
    /// An explicit position; it must be an event boundary (a transaction's start).
    At {
        /// The binlog file, as `SHOW BINARY LOGS` names it.
        binlog_file: String,
        /// The byte offset of an event in it (4 is the first event of any file).
        binlog_pos: u64,
    },
}

impl std::fmt::Debug for MysqlCdcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlCdcConfig")
            .field("connection_url", &"[redacted]")
            .field("server_id", &self.server_id)
            .field("tables", &self.tables)
            .field("continuous", &self.continuous)
            .field("start", &self.start)
            .finish()
    }
}

/// A [`MysqlCdcConfig`] that passed [`MysqlCdcConfig::validate`], with what validation parsed.
pub type ValidatedMysqlCdcConfig =
    crate::sql::validated::ValidatedCdcConfig<MysqlCdcConfig, MysqlConnection, TableName>;

impl MysqlCdcConfig {
    /// A configuration with the defaults for the optional fields.
    pub fn new(
        connection_url: impl Into<String>,
        server_id: u32,
        tables: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            connection_url: SecretString::from(connection_url.into()),
            server_id,
            tables: tables.into_iter().map(Into::into).collect(),
            continuous: false,
            start: StartPosition::End,
        }
    }

    /// Checks the fields without any I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field (`connection_url`, `server_id`, `tables[i]`,
    /// `start.at.binlog_file`, `start.at.binlog_pos`) and what a valid value looks like.
    pub fn validate(&self) -> Result<ValidatedMysqlCdcConfig, FaucetError> {
        let connection = MysqlConnection::parse(&self.connection_url, "connection_url", CONNECTOR)?;
        if self.server_id == 0 {
            return Err(FaucetError::config(
                "server_id",
                "must be 1 to 4294967295 (0 is refused by the server for replicas); pick an id \
                 no other replica and not the server itself uses",
            ));
        }
        let (tables, patterns) = split_tables(
            &self.tables,
            "database",
            "name at least one table as database.table, e.g. [shop.orders]",
            TableName::parse,
            TableName::parse_qualified,
        )?;
        if let StartPosition::At {
            binlog_file,
            binlog_pos,
        } = &self.start
        {
            if binlog_file.is_empty() || binlog_file.contains(['/', '\0']) {
                return Err(FaucetError::config(
                    "start.at.binlog_file",
                    "name a binlog file as SHOW BINARY LOGS lists it (mariadb-bin.000003)",
                ));
            }
            if *binlog_pos < 4 {
                return Err(FaucetError::config(
                    "start.at.binlog_pos",
                    "a binlog offset is at least 4 (the first event of a file)",
                ));
            }
        }
        Ok(ValidatedMysqlCdcConfig {
            config: self.clone(),
            connection,
            tables,
            patterns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faucet_core::testing::config_field as field_of;

    #[test]
    fn defaults_strictness_and_secrecy() {
        let c: MysqlCdcConfig = serde_json::from_value(serde_json::json!({
            "connection_url": "mysql://u:hunter2@localhost:3306/db",
            "server_id": 7, "tables": ["shop.orders"]
        }))
        .expect("valid");
        assert!(!c.continuous);
        assert_eq!(c.start, StartPosition::End);
        let v = c.validate().expect("valid");
        assert_eq!(v.tables[0].to_string(), "shop.orders");
        assert!(!format!("{c:?}{v:?}").contains("hunter2"));
        let at: MysqlCdcConfig = serde_json::from_value(serde_json::json!({
            "connection_url": "mysql://u@localhost/db", "server_id": 7, "tables": ["a.b"],
            "start": {"at": {"binlog_file": "mariadb-bin.000002", "binlog_pos": 4}}
        }))
        .expect("valid");
        assert_eq!(
            at.start,
            StartPosition::At {
                binlog_file: "mariadb-bin.000002".into(),
                binlog_pos: 4
            }
        );
        for bad in [
            serde_json::json!({"connection_url": "mysql://h/db", "server_id": 7, "tables": ["a.b"], "slot": 1}),
            serde_json::json!({"connection_url": "mysql://h/db", "server_id": 7, "tables": ["a.b"], "start": "now"}),
            serde_json::json!({"connection_url": "mysql://h/db", "server_id": -1, "tables": ["a.b"]}),
        ] {
            assert!(serde_json::from_value::<MysqlCdcConfig>(bad).is_err());
        }
    }

    #[test]
    fn fields_are_checked() {
        let base = MysqlCdcConfig::new("mysql://u@localhost/db", 9, ["a.b"]);
        let mut c = base.clone();
        c.server_id = 0;
        assert_eq!(field_of(c.validate().expect_err("zero")), "server_id");
        let mut c = base.clone();
        c.tables = vec![];
        assert_eq!(field_of(c.validate().expect_err("empty")), "tables");
        let mut c = base.clone();
        c.tables = vec!["a.b".into(), "a.b".into()];
        assert_eq!(field_of(c.validate().expect_err("dup")), "tables[1]");
        let mut c = base.clone();
        c.tables = vec!["shop.*".into(), "*.*".into()];
        assert_eq!(field_of(c.validate().expect_err("*.*")), "tables[1]");
        let mut c = base.clone();
        c.tables = vec!["shop.*".into()];
        assert_eq!(
            c.validate().expect("pattern").patterns[0].to_string(),
            "shop.*"
        );
        let mut c = base.clone();
        c.tables = vec!["nodb".into()];
        assert_eq!(
            field_of(c.validate().expect_err("unqualified")),
            "tables[0]"
        );
        let mut c = base.clone();
        c.start = StartPosition::At {
            binlog_file: "f.000001".into(),
            binlog_pos: 1,
        };
        assert_eq!(
            field_of(c.validate().expect_err("pos")),
            "start.at.binlog_pos"
        );
        let mut c = base;
        c.connection_url = SecretString::from("postgres://localhost/db");
        assert_eq!(
            field_of(c.validate().expect_err("scheme")),
            "connection_url"
        );
    }
}
