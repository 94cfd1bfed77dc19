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
//! `127.0.0.1` and `::1` being one host, a socket directory being `localhost`), the same
//! database, and the sink's table among the source's tables (qualified: a MySQL sink's
//! unqualified table is in its URL's database, a PostgreSQL one in `public`).

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
    /// The endpoint of `url` (`scheme://[user[:password]@]host[:port][/database][?…]`;
    /// PostgreSQL's `?host=` and `?port=` override the authority's). `None` when the URL does
    /// not parse: the connector reports that itself.
    pub(crate) fn of_url(system: System, url: &str) -> Option<Self> {
        let (_, rest) = url.split_once("://")?;
        let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = main.split_once('/').unwrap_or((main, ""));
        let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let (mut host, mut port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']')?;
            (h.to_owned(), after.strip_prefix(':').map(str::to_owned))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p.to_owned())),
                None => (hostport.to_owned(), None),
            }
        };
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("host", h)) if system == System::Postgres => host = h.to_owned(),
                Some(("port", p)) if system == System::Postgres => port = Some(p.to_owned()),
                _ => {}
            }
        }
        let default_port = match system {
            System::Mysql => 3306,
            System::Postgres => 5432,
        };
        let port = match port.filter(|p| !p.is_empty()) {
            Some(p) => p.parse().ok()?,
            None => default_port,
        };
        let host = host.to_ascii_lowercase();
        let local = host.is_empty()
            || host.starts_with('/')
            || host.starts_with("%2f")
            || matches!(host.as_str(), "localhost" | "127.0.0.1" | "::1" | "0.0.0.0");
        Some(Self {
            system,
            host: if local { "localhost".to_owned() } else { host },
            port,
            database: path.split('/').next().unwrap_or("").to_owned(),
        })
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
    fn urls_name_their_server_and_database() {
        let e = |s, u| Endpoint::of_url(s, u).expect("parses");
        let local = e(System::Mysql, "mysql://root@127.0.0.1:3307/shop");
        assert_eq!(
            (local.host.as_str(), local.port, local.database.as_str()),
            ("localhost", 3307, "shop")
        );
        assert_eq!(
            e(System::Mysql, "mariadb://u:p@LOCALHOST:3307"),
            Endpoint {
                database: String::new(),
                ..local.clone()
            }
        );
        assert_eq!(e(System::Mysql, "mysql://[::1]/x").port, 3306);
        assert_eq!(e(System::Mysql, "mysql://[::1]/x").host, "localhost");
        assert_eq!(
            e(System::Mysql, "mysql://db.example:3306/x").host,
            "db.example"
        );
        let pg = e(
            System::Postgres,
            "postgres://postgres@/test?host=/run/postgresql&port=5433",
        );
        assert_eq!(
            (pg.host.as_str(), pg.port, pg.database.as_str()),
            ("localhost", 5433, "test")
        );
        assert!(Endpoint::of_url(System::Mysql, "mysql://h:notaport/x").is_none());
    }

    #[test]
    fn names_qualify_within_their_system() {
        let my = Endpoint::of_url(System::Mysql, "mysql://h/shop").expect("url");
        assert_eq!(my.qualify("t"), "shop.t");
        assert_eq!(my.qualify("other.t"), "other.t");
        let pg = Endpoint::of_url(System::Postgres, "postgres://h/test").expect("url");
        assert_eq!(pg.qualify("t"), "public.t");
        let other_db = Endpoint::of_url(System::Postgres, "postgres://h/prod").expect("url");
        assert!(!pg.same_database(&other_db));
        let my_other_db = Endpoint::of_url(System::Mysql, "mysql://h/prod").expect("url");
        assert!(
            my.same_database(&my_other_db),
            "a MySQL server's tables name their database"
        );
        let other_port = Endpoint::of_url(System::Mysql, "mysql://h:3307/shop").expect("url");
        assert!(!my.same_database(&other_port));
    }
}
