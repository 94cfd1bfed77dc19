//! `faucet` with the `mysql` source (feature `mysql`) against the private MariaDB with a
//! binlog (`FAUCET_TEST_MYSQL_URL`, default `mysql://root@127.0.0.1:3307/test`; started by
//! `scripts/services.sh`): mysql → jsonl incrementally with a file state store, run again
//! (nothing new), resumed after new rows; `validate` redacts the password; `doctor` passes
//! on a healthy setup and fails the source's probe with its hint on an unreachable server.
//! Tables are made with the `mariadb` client.

use crate::support::Dir;

use faucet_test_support::mysql_url;

/// Runs `sql` with the `mariadb` client on the test server ([`mysql_url`]); fails the test
/// naming the server and the statement when it cannot.
fn mariadb(sql: &str) {
    crate::support::mysql::mariadb_at(&mysql_url(), sql);
}

/// The test server's URL with database `db`.
fn url_for(db: &str) -> String {
    let url = mysql_url();
    match url.rfind('/') {
        Some(i) if i > "mysql://".len() => format!("{}/{db}", &url[..i]),
        _ => format!("{url}/{db}"),
    }
}

#[test]
fn mysql_into_jsonl_incrementally_resumes_and_doctor_checks_it() {
    let db = format!("faucet_cli_mysql_{}", std::process::id());
    mariadb(&format!(
        "DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}; \
         CREATE TABLE {db}.orders (id INT PRIMARY KEY, updated_at DATETIME(3) NOT NULL, \
           name VARCHAR(20) CHARACTER SET latin1, amount DECIMAL(10,2), \
           big BIGINT UNSIGNED, paid_at TIMESTAMP(6) NULL); \
         SET time_zone = '+02:00'; \
         INSERT INTO {db}.orders VALUES \
           (1, '2024-01-01 10:00:00.000', 'café', 1.10, 18446744073709551615, '2024-01-01 12:00:00.000001'), \
           (2, '2024-01-01 10:00:00.000', 'b', -0.01, 0, NULL), \
           (3, '2024-01-02 00:00:00.500', 'c', 3.00, 3, NULL)"
    ));
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        "version: 1\nname: orders\npipeline:\n  \
         source: { type: mysql, config: { connection_url: \"${env:FAUCET_CLI_MYSQL_URL}\", \
           table: orders, replication_method: incremental, replication_key: [updated_at, id] } }\n  \
         sink: { type: jsonl, config: { path: ./out/orders.jsonl } }\n  \
         state: { type: file, config: { path: ./state } }\n  \
         batch_size: 2\n",
    );
    let url = url_for(&db);
    let env = [("FAUCET_CLI_MYSQL_URL", url.as_str())];

    let fake = [(
        "FAUCET_CLI_MYSQL_URL",
        "mysql://u:cli-secret-pw@db.invalid/x",
    )];
    let run = dir.faucet_env(&["validate", "p.yaml"], &fake);
    run.expect_code(0)
        .stdout_has(&["mysql://u:***@db.invalid/x table orders"]);
    assert!(!run.stdout.contains("cli-secret-pw"), "{}", run.stdout);

    let run = dir.faucet_env(&["doctor", "p.yaml"], &env);
    run.expect_code(0);
    assert!(run.stdout.contains("✓ source mysql"), "{}", run.stdout);

    dir.faucet_env(&["run", "p.yaml"], &env).expect_code(0);
    assert_eq!(
        dir.lines("out/orders.jsonl"),
        [
            r#"{"id":1,"updated_at":"2024-01-01T10:00:00.000","name":"café","amount":1.10,"big":18446744073709551615,"paid_at":"2024-01-01T10:00:00.000001Z"}"#,
            r#"{"id":2,"updated_at":"2024-01-01T10:00:00.000","name":"b","amount":-0.01,"big":0,"paid_at":null}"#,
            r#"{"id":3,"updated_at":"2024-01-02T00:00:00.500","name":"c","amount":3.00,"big":3,"paid_at":null}"#,
        ]
    );
    // Nothing new: nothing moves. New rows (one tying the last key's time): only they.
    dir.faucet_env(&["run", "p.yaml"], &env).expect_code(0);
    assert_eq!(dir.lines("out/orders.jsonl").len(), 3);
    mariadb(&format!(
        "INSERT INTO {db}.orders VALUES (4, '2024-01-02 00:00:00.500', 'd', 4, 4, NULL), \
           (5, '2024-02-01 00:00:00', 'e', 5, 5, NULL)"
    ));
    dir.faucet_env(&["run", "p.yaml"], &env).expect_code(0);
    let lines = dir.lines("out/orders.jsonl");
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(lines[3].starts_with(r#"{"id":4,"#) && lines[4].starts_with(r#"{"id":5,"#));

    // An unreachable server: the source's probe fails with the MySQL hint.
    let down = [("FAUCET_CLI_MYSQL_URL", "mysql://root@127.0.0.1:1/x")];
    let run = dir.faucet_env(&["doctor", "p.yaml"], &down);
    run.expect_code(1)
        .stdout_has(&["✗ source mysql", "is MySQL/MariaDB running"]);
    mariadb(&format!("DROP DATABASE IF EXISTS {db}"));
}
