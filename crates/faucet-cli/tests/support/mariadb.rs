//! The test MariaDB (`FAUCET_TEST_MYSQL_URL`, default `mysql://root@127.0.0.1:3307/test`: the
//! private server with a binlog that scripts/services.sh starts), driven with the `mariadb`
//! client: statements, queries read back as text, and URLs of a test's own database.

use std::process::Command;

use faucet_test_support::mysql_url;

/// User, password, host and port of a `mysql://` (or `mariadb://`) URL.
fn endpoint(url: &str) -> (String, Option<String>, String, String) {
    let rest = url
        .trim_start_matches("mysql://")
        .trim_start_matches("mariadb://");
    let (auth, host) = rest.split_once('@').unwrap_or(("root", rest));
    let host = host.split(['/', '?']).next().unwrap_or("127.0.0.1:3307");
    let (host, port) = host.split_once(':').unwrap_or((host, "3306"));
    let (user, pass) = auth
        .split_once(':')
        .map_or((auth, None), |(u, p)| (u, Some(p.to_owned())));
    (user.to_owned(), pass, host.to_owned(), port.to_owned())
}

/// The `mariadb` client connected to the server of `url` as its user (no database chosen;
/// UTF-8; `LOAD DATA LOCAL INFILE` allowed), for a test to add arguments to — a session fed
/// on stdin, say.
pub(crate) fn client_at(url: &str) -> Command {
    let (user, pass, host, port) = endpoint(url);
    let mut cmd = Command::new("mariadb");
    cmd.args([
        "--no-defaults",
        "--local-infile=1",
        "--default-character-set=utf8mb4",
        "-u",
        &user,
        "-h",
        &host,
        "-P",
        &port,
    ]);
    if let Some(p) = pass {
        cmd.arg(format!("-p{p}"));
    }
    cmd
}

/// [`client_at`] the test server ([`mysql_url`]).
pub(crate) fn client() -> Command {
    client_at(&mysql_url())
}

/// Runs `sql` (several statements allowed; `LOAD DATA LOCAL INFILE` allowed) with the
/// `mariadb` client on the server of `url`, and returns what it printed (`--batch
/// --skip-column-names`: one line per row, tab-separated, NULL as `NULL`). Fails the test
/// naming the server and the script that starts it when the server refuses.
#[track_caller]
pub(crate) fn mariadb_at(url: &str, sql: &str) -> String {
    let out = client_at(url)
        .args(["--batch", "--skip-column-names", "-e", sql])
        .output()
        .unwrap_or_else(|e| {
            panic!("the mariadb client cannot be run ({e}); install it with scripts/services.sh")
        });
    assert!(
        out.status.success(),
        "MariaDB at {url} refused `{}`: {} (start it with scripts/services.sh)",
        sql.chars().take(300).collect::<String>(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the mariadb client prints UTF-8")
}

/// [`mariadb_at`] the test server ([`mysql_url`]: `FAUCET_TEST_MYSQL_URL`).
#[track_caller]
pub(crate) fn mariadb(sql: &str) -> String {
    mariadb_at(&mysql_url(), sql)
}

/// A fresh database `<tag>_<process id>` on the binlog server (dropped first when a run left
/// it) holding what `tables` (statements run inside it) makes; its name.
pub(crate) fn fresh_database(tag: &str, tables: &str) -> String {
    let db = format!("{tag}_{}", std::process::id());
    mariadb(&format!(
        "DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; USE {db}; {tables}"
    ));
    db
}

/// The rows of the table `table` on the binlog server, each its `columns` (`a, b`) joined
/// by `|`, sorted (as the PostgreSQL tests print theirs, `concat_ws('|', …)`).
pub(crate) fn joined_rows(table: &str, columns: &str) -> Vec<String> {
    let out = mariadb(&format!("SELECT CONCAT_WS('|', {columns}) FROM {table}"));
    let mut rows: Vec<String> = out.lines().map(str::to_owned).collect();
    rows.sort();
    rows
}

/// The rows [`mariadb_at`] printed, split into tab-separated fields.
pub(crate) fn rows(printed: &str) -> Vec<Vec<String>> {
    printed
        .lines()
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

/// The test server's URL with database `db` (and `user:password` instead of the URL's own
/// credentials when `auth` is given).
pub(crate) fn mysql_url_for(db: &str, auth: Option<(&str, &str)>) -> String {
    let (user, pass, host, port) = endpoint(&mysql_url());
    let auth = match auth {
        Some((u, p)) => format!("{u}:{p}"),
        None => match pass {
            Some(p) => format!("{user}:{p}"),
            None => user,
        },
    };
    format!("mysql://{auth}@{host}:{port}/{db}")
}

/// A `server_id` for one pipeline of this test process, distinct from other processes'
/// (derived from [`faucet_test_support::unique_suffix`]) and from the server's own (1).
pub(crate) fn unique_server_id() -> u32 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    faucet_test_support::unique_suffix().hash(&mut h);
    100_000 + (h.finish() % 4_000_000_000) as u32
}

/// The check of `probe` (`"resume"`, `"source"` …) in a `faucet doctor --json` report;
/// panics with the report when there is none.
#[track_caller]
pub(crate) fn doctor_check(report: &serde_json::Value, probe: &str) -> serde_json::Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["probe"] == probe)
        .cloned()
        .unwrap_or_else(|| panic!("no {probe} check: {report}"))
}
