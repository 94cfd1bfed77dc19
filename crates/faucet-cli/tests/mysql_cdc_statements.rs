//! Data changes logged as SQL statements (a session's `binlog_format=STATEMENT`), through
//! the binary, on a private MariaDB (a statement-logged change in the shared server's binlog
//! would stop every other test's reader that reads past it): one that may have changed a listed table stops the run
//! naming why, though its text does not spell the table's name (an UPDATE of a view over
//! it, an INSERT into a table whose trigger updates it); one proven unrelated (a base table
//! of another database without triggers) is skipped, though its text contains the listed
//! table's bare name — the substring match did the opposite in both cases.

use faucet_test_support::private_mariadb::PrivateMariadb;

use crate::support::Dir;
use crate::support::mariadb::unique_server_id;

/// A pipeline reading `tables` (of database `db` on `server`) into `out.jsonl`.
fn pipeline(server: &PrivateMariadb, db: &str, tables: &str) -> Dir {
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: stmt\npipeline:\n  source: {{ type: mysql-cdc, config: {{ \
             connection_url: \"{}\", server_id: {}, tables: [{tables}] }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n",
            server.url(db),
            unique_server_id()
        ),
    );
    dir
}

fn statement(change: &str) -> String {
    format!("SET SESSION binlog_format = 'STATEMENT'; {change}")
}

#[test]
fn a_statement_logged_change_stops_the_run_unless_proven_unrelated() {
    let server = PrivateMariadb::start_with(1, &[]);
    let sql = |text: &str| {
        server.sql(text);
    };
    let pid = std::process::id();
    let (db, other) = (format!("cli_stmt_{pid}"), format!("cli_stmt_other_{pid}"));
    sql(&format!(
        "DROP DATABASE IF EXISTS {db}; DROP DATABASE IF EXISTS {other}; \
         CREATE DATABASE {db}; CREATE DATABASE {other}; \
         CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT); \
         CREATE TABLE {db}.orders (id INT PRIMARY KEY, v INT); \
         INSERT INTO {db}.orders VALUES (1, 0); \
         CREATE VIEW {db}.open_view AS SELECT id, v FROM {db}.orders; \
         CREATE TABLE {db}.audit (id INT PRIMARY KEY); \
         CREATE TRIGGER {db}.audit_bump AFTER INSERT ON {db}.audit FOR EACH ROW \
           UPDATE {db}.orders SET v = v + 1 WHERE id = 1; \
         CREATE TABLE {other}.t (id INT PRIMARY KEY)"
    ));

    // Listed `t`: an INSERT into another database's `t`, a base table without triggers, is
    // unrelated; the run goes on and delivers the row change after it.
    let t = pipeline(&server, &db, &format!("{db}.t"));
    t.faucet(&["run"]).expect_code(0);
    sql(&statement(&format!("INSERT INTO {other}.t VALUES (1)")));
    sql(&format!("INSERT INTO {db}.t VALUES (7, 7)"));
    let run = t.faucet(&["run"]);
    run.expect_code(0);
    let got = t.jsonl("out.jsonl");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["after"]["id"], 7);

    // Listed `orders`: an UPDATE through a view over it, and an INSERT into a table whose
    // trigger updates it, each stop the run naming why; nothing is delivered past them.
    for (change, why) in [
        (
            format!("UPDATE {db}.open_view SET v = 42 WHERE id = 1"),
            "is a view",
        ),
        (
            format!("INSERT INTO {db}.audit VALUES (1)"),
            "has trigger `audit_bump`",
        ),
    ] {
        let orders = pipeline(&server, &db, &format!("{db}.orders"));
        orders.faucet(&["run"]).expect_code(0);
        sql(&statement(&change));
        sql(&format!("UPDATE {db}.orders SET v = 100 WHERE id = 1"));
        let run = orders.faucet(&["run"]);
        assert_ne!(run.code, 0, "{change}: {}", run.stderr);
        run.stderr_has(&["logged as an SQL statement", why, "binlog_format = 'ROW'"]);
        assert!(orders.lines("out.jsonl").is_empty(), "{change}");
    }
    sql(&format!("DROP DATABASE {db}; DROP DATABASE {other}"));
}
