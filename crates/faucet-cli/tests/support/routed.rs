//! The database of the routed-replication tests (issue 23), the same on PostgreSQL and on
//! the MariaDB with a binlog: twelve keyed tables, two of each key kind (single `bigint`,
//! single `integer`, composite `(text, integer)`, composite `(smallint, bigint, text)`,
//! text, UUID — MariaDB `CHAR(36)`), their first rows, and the concurrent writer. Every
//! statement is one SQL text both servers run (literals only, `CONCAT`), each its own
//! transaction, through the server's own client (`psql` / `mariadb`) fed on stdin; rows are
//! read back as text by the same clients, so a source and a target on different servers
//! compare value by value.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Which server a schema (PostgreSQL) or database (MariaDB) is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Db {
    /// PostgreSQL, `FAUCET_TEST_PG_URL`.
    Pg,
    /// The MariaDB with a binlog, `FAUCET_TEST_MYSQL_URL` ([`super::mariadb`]).
    My,
}

/// A key kind: the compared columns (the key first), the key, and the column definitions
/// on each server.
struct Kind {
    name: &'static str,
    columns: &'static str,
    key: &'static str,
    pg: &'static str,
    my: &'static str,
}

/// The key kinds, each made twice ([`tables`]).
const KINDS: [Kind; 6] = [
    Kind {
        name: "single",
        columns: "id, v, note",
        key: "id",
        pg: "id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL",
        my: "id BIGINT PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(400) NOT NULL",
    },
    Kind {
        name: "small",
        columns: "id, v",
        key: "id",
        pg: "id integer PRIMARY KEY, v bigint NOT NULL",
        my: "id INT PRIMARY KEY, v BIGINT NOT NULL",
    },
    Kind {
        name: "composite",
        columns: "region, n, v",
        key: "region, n",
        pg: "region text, n integer, v bigint NOT NULL, PRIMARY KEY (region, n)",
        my: "region VARCHAR(8), n INT, v BIGINT NOT NULL, PRIMARY KEY (region, n)",
    },
    Kind {
        name: "triple",
        columns: "a, b, c, v",
        key: "a, b, c",
        pg: "a smallint, b bigint, c text, v bigint NOT NULL, PRIMARY KEY (a, b, c)",
        my: "a SMALLINT, b BIGINT, c VARCHAR(40), v BIGINT NOT NULL, PRIMARY KEY (a, b, c)",
    },
    Kind {
        name: "texty",
        columns: "code, v",
        key: "code",
        pg: "code text PRIMARY KEY, v bigint NOT NULL",
        my: "code VARCHAR(40) PRIMARY KEY, v BIGINT NOT NULL",
    },
    Kind {
        name: "uuidy",
        columns: "id, v",
        key: "id",
        pg: "id uuid PRIMARY KEY, v bigint NOT NULL",
        my: "id CHAR(36) PRIMARY KEY, v BIGINT NOT NULL",
    },
];

/// One keyed table of the database.
pub(crate) struct Table {
    /// Its name in the schema / database.
    pub(crate) name: String,
    kind: &'static Kind,
}

/// The UUID of key number `k` (lower case, as both servers print it).
fn uuid(k: i64) -> String {
    format!("{:08x}-0000-4000-8000-{k:012x}", k % 0xffff_ffff)
}

/// The region of key number `k` of a `composite` table.
fn region(k: i64) -> &'static str {
    ["eu", "us", "ap"][(k % 3) as usize]
}

impl Table {
    /// The columns a comparison reads, in order, the key first.
    pub(crate) fn columns(&self) -> &'static str {
        self.kind.columns
    }

    /// The key columns (the first of [`Table::columns`]).
    pub(crate) fn key(&self) -> &'static str {
        self.kind.key
    }

    /// The row of key number `k` with value `v`, as a `VALUES` tuple.
    fn row(&self, k: i64, v: i64) -> String {
        match self.kind.name {
            "single" => format!("({k}, {v}, 'n{k}')"),
            "composite" => format!("('{}', {k}, {v})", region(k)),
            "triple" => format!("({}, {k}, 't{k}', {v})", k % 10),
            "texty" => format!("('c{k}', {v})"),
            "uuidy" => format!("('{}', {v})", uuid(k)),
            _ => format!("({k}, {v})"),
        }
    }

    /// The condition selecting the row of key number `k`.
    fn at(&self, k: i64) -> String {
        match self.kind.name {
            "composite" => format!("region = '{}' AND n = {k}", region(k)),
            "triple" => format!("a = {} AND b = {k} AND c = 't{k}'", k % 10),
            "texty" => format!("code = 'c{k}'"),
            "uuidy" => format!("id = '{}'", uuid(k)),
            _ => format!("id = {k}"),
        }
    }

    /// The assignment that moves a row to the fresh key number `fresh` (a key change).
    fn rekey(&self, fresh: i64) -> String {
        match self.kind.name {
            "composite" => format!("n = {fresh}"),
            "triple" => format!("c = 't{fresh}'"),
            "texty" => format!("code = 'c{fresh}'"),
            "uuidy" => format!("id = '{}'", uuid(fresh)),
            _ => format!("id = {fresh}"),
        }
    }

    /// The assignment of an update that keeps the key.
    fn set(&self, v: i64) -> String {
        match self.kind.name {
            "single" => format!("v = {v}, note = CONCAT(note, '+')"),
            _ => format!("v = {v}"),
        }
    }
}

/// The twelve tables: `<kind>_1` and `<kind>_2` of every key kind.
pub(crate) fn tables() -> Vec<Table> {
    (1..=2)
        .flat_map(|n| {
            KINDS.iter().map(move |kind| Table {
                name: format!("{}_{n}", kind.name),
                kind,
            })
        })
        .collect()
}

/// Creates schema / database `s` on `db` with the [`tables`], `rows` rows each (keys
/// `1..=rows`, `v` the key number; none when `rows` is 0).
pub(crate) fn create(db: Db, s: &str, rows: i64) {
    let mut sql = match db {
        Db::Pg => format!("CREATE SCHEMA {s};"),
        Db::My => format!("CREATE DATABASE {s} CHARACTER SET utf8mb4;"),
    };
    for t in tables() {
        let (columns, engine) = match db {
            Db::Pg => (t.kind.pg, ""),
            Db::My => (t.kind.my, " ENGINE=InnoDB"),
        };
        sql.push_str(&format!("CREATE TABLE {s}.{} ({columns}){engine};", t.name));
        if rows > 0 {
            let values: Vec<String> = (1..=rows).map(|k| t.row(k, k)).collect();
            sql.push_str(&format!(
                "INSERT INTO {s}.{} VALUES {};",
                t.name,
                values.join(", ")
            ));
        }
    }
    run(db, &sql);
}

/// The `i`-th statement of the writer on `s` (keys `1..=rows` to start with): an insert,
/// an update, a key change or a delete of one of the tables, in turn.
fn change(tables: &[Table], s: &str, i: i64, rows: i64) -> String {
    let n = tables.len() as i64;
    let t = &tables[(i % n) as usize];
    let k = (i * 7919) % rows + 1;
    let fresh = rows * 10 + i;
    let v = rows * 100 + i;
    let name = &t.name;
    match (i / n) % 4 {
        0 => format!("INSERT INTO {s}.{name} VALUES {};", t.row(fresh, v)),
        1 => format!("UPDATE {s}.{name} SET {} WHERE {};", t.set(v), t.at(k)),
        2 => format!(
            "UPDATE {s}.{name} SET {} WHERE {};",
            t.rekey(fresh),
            t.at(k)
        ),
        _ => format!("DELETE FROM {s}.{name} WHERE {};", t.at(k)),
    }
}

/// The server's client for `db` (`psql` quiet, stopping at the first error; `mariadb`).
fn client(db: Db) -> Command {
    match db {
        Db::Pg => {
            let mut c = Command::new("psql");
            c.args([
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                &faucet_test_support::pg_url(),
            ]);
            c
        }
        Db::My => mariadb_client(),
    }
}

/// The `mariadb` client of the server with a binlog.
#[cfg(feature = "mysql")]
fn mariadb_client() -> Command {
    super::mariadb::client()
}

/// Without the `mysql` feature no test reaches MariaDB.
#[cfg(not(feature = "mysql"))]
fn mariadb_client() -> Command {
    unreachable!("MariaDB is tested with the mysql feature")
}

/// The lines `sql` (several statements allowed) prints on `db`, one per row, fields
/// tab-separated; panics naming the server and the statement on failure.
#[track_caller]
pub(crate) fn query(db: Db, sql: &str) -> Vec<String> {
    let args = match db {
        Db::Pg => ["-A", "-t", "-c"],
        Db::My => ["--batch", "--skip-column-names", "-e"],
    };
    let out = client(db).args(args).arg(sql).output().unwrap_or_else(|e| {
        panic!("the {db:?} client cannot be run ({e}); see scripts/services.sh")
    });
    assert!(
        out.status.success(),
        "{db:?} refused `{}`: {} (start it with scripts/services.sh)",
        sql.chars().take(300).collect::<String>(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("the clients print UTF-8")
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs `sql` on `db` ([`query`], its output dropped).
#[track_caller]
pub(crate) fn run(db: Db, sql: &str) {
    query(db, sql);
}

/// The rows of `table` on `db`, each its `columns` as text joined by `|`, sorted.
pub(crate) fn rows(db: Db, table: &str, columns: &str) -> Vec<String> {
    let sql = match db {
        Db::Pg => {
            let cols: Vec<String> = columns.split(", ").map(|c| format!("{c}::text")).collect();
            format!("SELECT concat_ws('|', {}) FROM {table}", cols.join(", "))
        }
        Db::My => format!("SELECT CONCAT_WS('|', {columns}) FROM {table}"),
    };
    let mut rows = query(db, &sql);
    rows.sort();
    rows
}

/// A client session of `db` fed statements on stdin, each its own transaction, run in
/// order as the client reads them.
pub(crate) struct Session {
    client: std::process::Child,
    input: Option<std::process::ChildStdin>,
}

impl Session {
    /// Starts the client of `db`.
    pub(crate) fn open(db: Db) -> Self {
        let mut client = client(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("the client runs");
        let input = client.stdin.take();
        Self { client, input }
    }

    /// Sends one statement (`;`-terminated).
    pub(crate) fn send(&mut self, statement: &str) {
        let input = self.input.as_mut().expect("an open session");
        writeln!(input, "{statement}").expect("the client takes a statement");
    }

    /// Ends the input and waits until the client ran every statement; panics when one
    /// failed.
    pub(crate) fn close(mut self) {
        drop(self.input.take());
        let status = self.client.wait().expect("client");
        assert!(status.success(), "a statement of the session failed");
    }
}

/// What the writer did: statements run, and whether it truncated the first table.
#[derive(Debug)]
pub(crate) struct Writes {
    /// Statements run (the TRUNCATE not counted).
    pub(crate) statements: i64,
    /// Whether the `TRUNCATE` of the first of [`tables`] ran.
    pub(crate) truncated: bool,
}

/// Runs [`change`] one statement (one transaction) at a time on `s` of `db` until `stop`,
/// through one client session; once `truncate` is set, first a `TRUNCATE` of the first
/// table (once). Panics when the client fails.
pub(crate) fn writer(
    db: Db,
    s: String,
    rows: i64,
    truncate: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Writes> {
    std::thread::spawn(move || {
        let tables = tables();
        let mut session = Session::open(db);
        let mut writes = Writes {
            statements: 0,
            truncated: false,
        };
        while !stop.load(Ordering::SeqCst) {
            if truncate.load(Ordering::SeqCst) && !writes.truncated {
                session.send(&format!("TRUNCATE TABLE {s}.{};", tables[0].name));
                writes.truncated = true;
            }
            writes.statements += 1;
            session.send(&change(&tables, &s, writes.statements, rows));
            std::thread::sleep(Duration::from_millis(2));
        }
        session.close();
        writes
    })
}
