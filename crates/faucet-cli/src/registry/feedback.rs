//! The CDC → same-table feedback loop, refused before any data moves: a change source
//! (`mysql-cdc`, `postgres-cdc`) whose sink writes into one of the source's own tables on the
//! same server reads every row it writes back as a new change — the loop never ends, and
//! with change records nested into `after` the rows grow until the server refuses them
//! (`max_allowed_packet`).
//!
//! The rule is here, once: a source says what it reads changes of
//! ([`super::source::SourceEntry::change_feed`]), a sink what it writes
//! ([`super::sink::SinkEntry::written_table`]), and [`check`] compares them where the
//! configs alone show it: the same system, the same server (host and port, `localhost`,
//! `127.0.0.1`, `::1` and a Unix socket being one host; URLs read by the connectors' own
//! parsers), the same
//! database, and the sink's table among the source's tables (qualified: a MySQL sink's
//! unqualified table is in its URL's database, a PostgreSQL one in `public`).

// Without a database connector compiled in, no source has a change feed and nothing here
// is constructed; the rule stays one piece of code either way.
#![cfg_attr(not(any(feature = "mysql", feature = "postgres")), allow(dead_code))]

use faucet_core::FaucetError;

use super::{SinkConfig, SourceConfig};

/// Which server family an endpoint is of: names only compare within one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum System {
    /// MySQL / MariaDB: a table is `database.table`, the server one host:port.
    Mysql,
    /// PostgreSQL: a table is `schema.table` in the URL's database.
    Postgres,
}

/// One database of one server, from a connection URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The server family.
    pub(crate) system: System,
    /// The host, lower case; `localhost` for every name of the local host.
    pub(crate) host: String,
    /// The TCP port (the family's default when the URL has none).
    pub(crate) port: u16,
    /// The URL's database (empty when it names none).
    pub(crate) database: String,
}

impl Endpoint {
    /// The endpoint of a parsed connection URL's parts (the connectors' own parsers:
    /// `MysqlConnection::parse`, `PostgresUrl::parse`); `host` is `None` for a Unix socket.
    /// Every name of the local host (`localhost`, `127.0.0.1`, `::1`, a socket) is
    /// `localhost`; host names compare case-insensitively.
    pub(crate) fn new(system: System, host: Option<&str>, port: u16, database: &str) -> Self {
        let host = host
            .map(|h| {
                h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_ascii_lowercase()
            })
            .filter(|h| !matches!(h.as_str(), "" | "localhost" | "127.0.0.1" | "::1"))
            .unwrap_or_else(|| "localhost".to_owned());
        Self {
            system,
            host,
            port,
            database: database.to_owned(),
        }
    }

    /// The endpoint of a `mysql://` / `mariadb://` URL; `None` when it does not parse (the
    /// connector reports that itself).
    #[cfg(feature = "mysql")]
    pub(crate) fn mysql(url: &secrecy::SecretString) -> Option<Self> {
        let c = faucet_connectors::mysql::MysqlConnection::parse(url, "connection_url", "mysql")
            .ok()?;
        let opts = c.opts();
        Some(Self::new(
            System::Mysql,
            Some(opts.ip_or_hostname()),
            opts.tcp_port(),
            c.database(),
        ))
    }

    /// The endpoint of a `postgres://` URL; `None` when it does not parse.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(url: &secrecy::SecretString) -> Option<Self> {
        let u = faucet_connectors::postgres::PostgresUrl::parse(url, "connection_url").ok()?;
        let host = if u.socket_dir().is_some() {
            None
        } else {
            Some(u.host())
        };
        Some(Self::new(System::Postgres, host, u.port(), u.database()))
    }

    /// `host:port`, for messages.
    fn server(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// `table` qualified: in the URL's database (MySQL) or `public` (PostgreSQL).
    fn qualify(&self, table: &str) -> String {
        if table.contains('.') {
            table.to_owned()
        } else {
            match self.system {
                System::Mysql => format!("{}.{table}", self.database),
                System::Postgres => format!("public.{table}"),
            }
        }
    }

    /// Whether `self` and `other` are the same database of the same server (MySQL: the
    /// same server; its tables name their database).
    fn same_database(&self, other: &Self) -> bool {
        self.system == other.system
            && self.host == other.host
            && self.port == other.port
            && (self.system == System::Mysql || self.database == other.database)
    }
}

/// What a change source reads: its server and its tables, as configured.
#[derive(Debug, Clone)]
pub(crate) struct ChangeFeed {
    /// Where.
    pub(crate) endpoint: Endpoint,
    /// The tables (`pipeline.source.config.tables`), as written.
    pub(crate) tables: Vec<String>,
}

/// What a sink writes: its server and its table, as configured.
#[derive(Debug, Clone)]
pub(crate) struct WrittenTable {
    /// Where.
    pub(crate) endpoint: Endpoint,
    /// The table (`pipeline.sink.config.table`), as written.
    pub(crate) table: String,
}

/// Refuses a sink that writes into a table the change source reads, on the same server and
/// database as the configs show them.
///
/// # Errors
/// [`FaucetError::Config`] at `pipeline.sink.config.table`, naming the source's table (and
/// its place in `tables`), the sink's table, the server, and the fix.
pub(crate) fn check(source: &SourceConfig, sink: &SinkConfig) -> Result<(), FaucetError> {
    let (Some(feed), Some(written)) = (source.change_feed(), sink.written_table()) else {
        return Ok(());
    };
    if !feed.endpoint.same_database(&written.endpoint) {
        return Ok(());
    }
    let target = written.endpoint.qualify(&written.table);
    let Some((i, listed)) = feed
        .tables
        .iter()
        .enumerate()
        .find(|(_, t)| feed.endpoint.qualify(t) == target)
    else {
        return Ok(());
    };
    Err(FaucetError::config(
        "pipeline.sink.config.table",
        format!(
            "the sink writes `{}` ({target}), which the `{}` source reads changes of \
             (pipeline.source.config.tables[{i}]: `{listed}`) on the same server ({}{}): every \
             row written would be read back as a new change, without end. Write into another \
             table, database or server, or take the table out of the source's `tables`",
            written.table,
            source.type_name(),
            written.endpoint.server(),
            match written.endpoint.system {
                System::Mysql => String::new(),
                System::Postgres => format!(", database {}", written.endpoint.database),
            }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_of_the_local_host_is_one_host() {
        let local = Endpoint::new(System::Mysql, Some("127.0.0.1"), 3307, "shop");
        for host in [
            Some("localhost"),
            Some("LOCALHOST"),
            Some("::1"),
            Some("[::1]"),
            None,
        ] {
            assert_eq!(
                Endpoint::new(System::Mysql, host, 3307, "shop"),
                local,
                "{host:?}"
            );
        }
        assert_eq!(
            Endpoint::new(System::Mysql, Some("DB.example"), 3306, "x").host,
            "db.example"
        );
    }

    #[cfg(all(feature = "mysql", feature = "postgres"))]
    #[test]
    fn urls_are_read_by_the_connectors_parsers() {
        let secret = |s: &str| secrecy::SecretString::from(s.to_owned());
        let my = Endpoint::mysql(&secret("mariadb://u:p@127.0.0.1:3307/shop")).expect("url");
        assert_eq!(my, Endpoint::new(System::Mysql, None, 3307, "shop"));
        assert_eq!(
            Endpoint::mysql(&secret("mysql://u@db.example/shop")).map(|e| e.port),
            Some(3306)
        );
        let pg = Endpoint::postgres(&secret(
            "postgres://postgres@db.example/test?host=/run/postgresql&port=5433",
        ))
        .expect("url");
        assert_eq!(pg, Endpoint::new(System::Postgres, None, 5433, "test"));
        assert!(Endpoint::mysql(&secret("http://x")).is_none());
    }

    #[test]
    fn names_qualify_within_their_system() {
        let my = Endpoint::new(System::Mysql, Some("h"), 3306, "shop");
        assert_eq!(my.qualify("t"), "shop.t");
        assert_eq!(my.qualify("other.t"), "other.t");
        let pg = Endpoint::new(System::Postgres, Some("h"), 5432, "test");
        assert_eq!(pg.qualify("t"), "public.t");
        let other_db = Endpoint::new(System::Postgres, Some("h"), 5432, "prod");
        assert!(!pg.same_database(&other_db));
        let my_other_db = Endpoint::new(System::Mysql, Some("h"), 3306, "prod");
        assert!(
            my.same_database(&my_other_db),
            "a MySQL server's tables name their database"
        );
        let other_port = Endpoint::new(System::Mysql, Some("h"), 3307, "shop");
        assert!(!my.same_database(&other_port));
    }
}
