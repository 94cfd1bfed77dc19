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
//! unqualified table is in its URL's database, a PostgreSQL one in `public`), or surely
//! matched by one of its `tables` patterns (`shop.*` and a sink `table: "shop.copy_{table}"`:
//! each target written would be a new table of the stream).

// Without a database connector compiled in, no source has a change feed and nothing here
// is constructed; the rule stays one piece of code either way.
#![cfg_attr(
    not(feature = "sql"),
    allow(dead_code, unused_variables, unreachable_code)
)]

use faucet_core::FaucetError;

use super::{SinkConfig, SourceConfig};

/// Which server family an endpoint is of: names only compare within one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum System {
    /// MySQL / MariaDB: a table is `database.table`, the server one host:port.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    Mysql,
    /// PostgreSQL: a table is `schema.table` in the URL's database.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
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
    pub(crate) fn mysql(url: &secrecy::SecretString) -> Option<(Self, Identity)> {
        let c = faucet_connectors::mysql::MysqlConnection::parse(url, "connection_url", "mysql")
            .ok()?;
        let opts = c.opts();
        let endpoint = Self::new(
            System::Mysql,
            Some(opts.ip_or_hostname()),
            opts.tcp_port(),
            c.database(),
        );
        Some((endpoint, Identity::Mysql(Box::new(c))))
    }

    /// The endpoint of a `postgres://` URL; `None` when it does not parse.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(url: &secrecy::SecretString) -> Option<(Self, Identity)> {
        let u = faucet_connectors::postgres::PostgresUrl::parse(url, "connection_url").ok()?;
        let host = if u.socket_dir().is_some() {
            None
        } else {
            Some(u.host())
        };
        let endpoint = Self::new(System::Postgres, host, u.port(), u.database());
        Some((endpoint, Identity::Postgres(Box::new(u))))
    }

    /// `host:port`, for messages.
    fn server(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// `table` qualified: in the URL's database (MySQL) or `public` (PostgreSQL).
    pub(crate) fn qualify(&self, table: &str) -> String {
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

/// How to ask a server who it is ([`check_servers`]); holds the parsed URL, a secret.
#[derive(Clone)]
pub(crate) enum Identity {
    /// `MysqlConnection::server_identity`.
    #[cfg(feature = "mysql")]
    Mysql(Box<faucet_connectors::mysql::MysqlConnection>),
    /// `PostgresUrl::server_identity`.
    #[cfg(feature = "postgres")]
    Postgres(Box<faucet_connectors::postgres::PostgresUrl>),
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Identity")
    }
}

impl Identity {
    async fn ask(&self) -> Result<String, FaucetError> {
        // `*self`: without a database connector the enum is empty and so is the match.
        match *self {
            #[cfg(feature = "mysql")]
            Self::Mysql(ref c) => c.server_identity().await,
            #[cfg(feature = "postgres")]
            Self::Postgres(ref u) => u.server_identity("postgres").await,
        }
    }
}

/// What a change source reads: its server and its tables, as configured.
#[derive(Debug, Clone)]
pub(crate) struct ChangeFeed {
    /// Where.
    pub(crate) endpoint: Endpoint,
    /// How to ask the server who it is.
    pub(crate) identity: Identity,
    /// The tables (`pipeline.source.config.tables`), as written.
    pub(crate) tables: Vec<String>,
}

impl ChangeFeed {
    /// The feed of `tables` at a server found by an `Endpoint` constructor (`None` when its
    /// URL did not parse).
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn of(server: Option<(Endpoint, Identity)>, tables: &[String]) -> Option<Self> {
        let (endpoint, identity) = server?;
        Some(Self {
            endpoint,
            identity,
            tables: tables.to_vec(),
        })
    }
}

/// What a sink writes: its server and its table, as configured.
#[derive(Debug, Clone)]
pub(crate) struct WrittenTable {
    /// Where.
    pub(crate) endpoint: Endpoint,
    /// How to ask the server who it is.
    pub(crate) identity: Identity,
    /// The table (`pipeline.sink.config.table`), as written.
    pub(crate) table: String,
}

/// A change source and a sink whose tables match by name on servers the configs do not show
/// to be one (another host name, address or port): [`check_servers`] asks the servers.
#[derive(Debug, Clone)]
pub(crate) struct Suspect {
    source_type: &'static str,
    feed: ChangeFeed,
    written: WrittenTable,
    /// The sink's table, qualified.
    target: String,
    /// The index in `tables` of the source's table of that name.
    index: usize,
}

/// The source's table the sink's table is, by name: its index in `tables` and the sink's
/// table qualified.
fn same_table(feed: &ChangeFeed, written: &WrittenTable) -> Option<(usize, String)> {
    if feed.endpoint.system != written.endpoint.system {
        return None;
    }
    let target = written.endpoint.qualify(&written.table);
    feed.tables
        .iter()
        .position(|t| {
            if t.contains('*') {
                pattern_takes(t, &target)
            } else {
                feed.endpoint.qualify(t) == target
            }
        })
        .map(|i| (i, target))
}

/// Whether the `tables` pattern `pattern` (`container.prefix*`, the grammar of
/// `faucet_connectors::sql::table_pattern`) surely matches what the sink writes, `target`
/// (qualified; a route template such as `shop.copy_{table}`): the same container, written
/// out, and a table name whose fixed start (before any placeholder) begins with the prefix.
fn pattern_takes(pattern: &str, target: &str) -> bool {
    let (Some((container, table)), Some((target_container, target_table))) =
        (pattern.split_once('.'), target.split_once('.'))
    else {
        return false;
    };
    let prefix = table.trim_end_matches('*');
    let fixed = target_table.split('{').next().unwrap_or_default();
    !target_container.contains('{') && target_container == container && fixed.starts_with(prefix)
}

/// The config error of a feedback loop; `server` says how the servers were found one.
fn refusal(
    source_type: &str,
    feed: &ChangeFeed,
    written: &WrittenTable,
    (index, target): (usize, &str),
    server: &str,
) -> FaucetError {
    FaucetError::config(
        "pipeline.sink.config.table",
        format!(
            "the sink writes `{}` ({target}), which the `{source_type}` source reads changes \
             of (pipeline.source.config.tables[{index}]: `{}`) on the same server ({server}): \
             every row written would be read back as a new change, without end. Write into \
             another table, database or server, or take the table out of the source's \
             `tables`",
            written.table, feed.tables[index],
        ),
    )
}

/// Refuses a sink that writes into a table the change source reads, on the same server and
/// database as the configs show them; returns the pair to ask the servers about
/// ([`check_servers`]) when the tables match by name but the configs name different servers.
///
/// # Errors
/// [`FaucetError::Config`] at `pipeline.sink.config.table`, naming the source's table (and
/// its place in `tables`), the sink's table, the server, and the fix.
pub(crate) fn check(
    source: &SourceConfig,
    sink: &SinkConfig,
) -> Result<Option<Suspect>, FaucetError> {
    let (Some(feed), Some(written)) = (source.change_feed(), sink.written_table()) else {
        return Ok(None);
    };
    let Some((index, target)) = same_table(&feed, &written) else {
        return Ok(None);
    };
    if feed.endpoint.same_database(&written.endpoint) {
        let e = &written.endpoint;
        let server = match e.system {
            System::Mysql => e.server(),
            System::Postgres => format!("{}, database {}", e.server(), e.database),
        };
        return Err(refusal(
            source.type_name(),
            &feed,
            &written,
            (index, &target),
            &server,
        ));
    }
    Ok(Some(Suspect {
        source_type: source.type_name(),
        feed,
        written,
        target,
        index,
    }))
}

/// At the start of a run, before any data moves: asks both servers of a [`Suspect`] who
/// they are (MySQL: `@@server_id`, `@@hostname`, `@@port`, `@@datadir`; PostgreSQL: the
/// cluster's `system_identifier` and the database), and refuses the pair when they are one.
/// A server that cannot say (no privilege for `pg_control_system()`) is taken as another
/// one, with a warning; one that cannot be reached fails the run as its connector would.
///
/// # Errors
/// The same [`FaucetError::Config`] as [`check`]; the connectors' connect errors.
pub(crate) async fn check_servers(suspect: &Suspect) -> Result<(), FaucetError> {
    let Suspect {
        source_type,
        feed,
        written,
        target,
        index,
    } = suspect;
    let ask = |identity: &Identity, what: &'static str| {
        let identity = identity.clone();
        async move {
            match identity.ask().await {
                Ok(id) => Ok(Some(id)),
                Err(e @ FaucetError::Connect { .. }) => Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, "the {what}'s server did not say who it is: the feedback-loop check cannot tell whether source and sink are one server");
                    Ok(None)
                }
            }
        }
    };
    let source_id = ask(&feed.identity, "source").await?;
    let sink_id = ask(&written.identity, "sink").await?;
    match (source_id, sink_id) {
        (Some(a), Some(b)) if a == b => Err(refusal(
            source_type,
            feed,
            written,
            (*index, target),
            &format!(
                "{} and {} are one server, {a}",
                feed.endpoint.server(),
                written.endpoint.server()
            ),
        )),
        _ => Ok(()),
    }
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
        let my = Endpoint::mysql(&secret("mariadb://u:p@127.0.0.1:3307/shop"))
            .expect("url")
            .0;
        assert_eq!(my, Endpoint::new(System::Mysql, None, 3307, "shop"));
        assert_eq!(
            Endpoint::mysql(&secret("mysql://u@db.example/shop")).map(|e| e.0.port),
            Some(3306)
        );
        let pg = Endpoint::postgres(&secret(
            "postgres://postgres@db.example/test?host=/run/postgresql&port=5433",
        ))
        .expect("url")
        .0;
        assert_eq!(pg, Endpoint::new(System::Postgres, None, 5433, "test"));
        assert!(Endpoint::mysql(&secret("http://x")).is_none());
    }

    #[test]
    fn a_pattern_takes_the_targets_it_surely_matches() {
        assert!(pattern_takes("shop.*", "shop.copy_{table}"));
        assert!(pattern_takes("shop.*", "shop.audit"));
        assert!(pattern_takes("shop.copy_*", "shop.copy_{table}"));
        assert!(!pattern_takes("shop.copy_*", "shop.{table}"), "not surely");
        assert!(!pattern_takes("shop.*", "replica.{table}"));
        assert!(!pattern_takes("shop.*", "{schema}_r.{table}"));
        assert!(!pattern_takes("shop.o_*", "shop.audit"));
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
