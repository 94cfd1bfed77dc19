//! A change source whose sink writes into one of the source's own tables on the same server
//! reads its own writes back as new changes, without end (issue 13): `faucet validate` and
//! `faucet run` refuse it as a config error naming both tables, before anything is written —
//! for `mysql-cdc` → `mysql` and `postgres-cdc` → `postgres`, whichever way the URLs spell the
//! local host; and where only the servers can tell (the host under another name), `faucet run`
//! asks them before any data moves.

use crate::support::mariadb::{mariadb as sql, mysql_url_for, rows, unique_server_id};
use crate::support::pg::slot_exists;
use crate::support::{Dir, pg_url};

/// This machine's host name when it resolves to 127.0.0.1 (the test servers listen there
/// only): a name for the same server that the configs cannot tell is the local host.
fn loopback_hostname() -> Option<String> {
    use std::net::ToSocketAddrs as _;
    let out = std::process::Command::new("hostname").output().ok()?;
    let name = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    let loopback = (name.as_str(), 1)
        .to_socket_addrs()
        .ok()?
        .any(|a| a.ip() == std::net::Ipv4Addr::LOCALHOST);
    (loopback && !name.is_empty() && name != "localhost").then_some(name)
}

fn pipeline(source: &str, sink: &str) -> String {
    format!(
        "version: 1\nname: loop\npipeline:\n  source: {source}\n  sink: {sink}\n  \
         state: {{ type: file, config: {{ path: ./state }} }}\n"
    )
}

/// `faucet validate` and `faucet run` in `dir` both refuse the config (exit 2), saying each
/// of `needles`.
fn refused_by_validate_and_run(dir: &Dir, needles: &[&str]) {
    for cmd in ["validate", "run"] {
        dir.faucet(&[cmd]).expect_code(2).stderr_has(needles);
    }
}

#[test]
fn mysql_cdc_into_one_of_its_own_tables_is_refused_before_anything_is_written() {
    let db = format!("cli_loop_{}", faucet_test_support::unique_suffix());
    sql(&format!(
        "CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(10)); \
         CREATE TABLE {db}.copy (id INT PRIMARY KEY, v VARCHAR(10)); \
         INSERT INTO {db}.t VALUES (1, 'one')"
    ));
    let source_url = mysql_url_for(&db, None);
    // The same server, spelled `localhost` instead of `127.0.0.1`.
    let sink_url = source_url.replace("127.0.0.1", "localhost");
    assert_ne!(sink_url, source_url, "the test server is 127.0.0.1");
    let source = format!(
        "{{ type: mysql-cdc, config: {{ connection_url: \"{source_url}\", server_id: {}, \
         tables: [{db}.other, {db}.t] }} }}",
        unique_server_id()
    );
    // Append: the changes of two tables upserted into one table would be refused on
    // their own (crate::registry::routing), before the loop could be.
    let sink = |table: &str| {
        format!(
            "{{ type: mysql, config: {{ connection_url: \"{sink_url}\", table: {table}, \
             write_mode: append }} }}"
        )
    };
    let dir = Dir::new();
    dir.write("faucet.yaml", pipeline(&source, &sink("t")));
    let needles = [
        "pipeline.sink.config.table",
        "the sink writes `t`",
        &format!("({db}.t)"),
        &format!("pipeline.source.config.tables[1]: `{db}.t`"),
        "localhost:",
        "read back as a new change",
    ];
    refused_by_validate_and_run(&dir, &needles);
    // Nothing moved: the table as it was, no commit token table, no state.
    let count = |q: &str| rows(&sql(q));
    let untouched = || {
        assert_eq!(count(&format!("SELECT id, v FROM {db}.t")), [["1", "one"]]);
        assert!(
            count(&format!(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = '{db}' \
                 AND table_name LIKE 'faucet%'"
            ))
            .is_empty(),
            "the sink was not opened"
        );
    };
    untouched();
    assert!(dir.read("state").is_none(), "no state was written");

    // Qualified the same table is the same table; another table of the source's server is not.
    dir.write("faucet.yaml", pipeline(&source, &sink(&format!("{db}.t"))));
    dir.faucet(&["validate"]).expect_code(2);
    dir.write("faucet.yaml", pipeline(&source, &sink("copy")));
    dir.faucet(&["validate"]).expect_code(0);

    // The same server under this machine's name: the configs cannot tell, the servers can.
    let Some(host) = loopback_hostname() else {
        eprintln!(
            "no host name of this machine resolves to 127.0.0.1: the server check is not run"
        );
        sql(&format!("DROP DATABASE {db}"));
        return;
    };
    let renamed = sink("t").replace("localhost", &host);
    dir.write("faucet.yaml", pipeline(&source, &renamed));
    dir.faucet(&["validate"]).expect_code(0);
    dir.faucet(&["run"]).expect_code(2).stderr_has(&[
        "pipeline.sink.config.table",
        &format!("pipeline.source.config.tables[1]: `{db}.t`"),
        &format!(
            "localhost:{} and {host}:",
            source_url
                .rsplit(':')
                .next()
                .unwrap_or("")
                .split('/')
                .next()
                .unwrap_or("")
        ),
        "are one server",
    ]);
    untouched();
    // Another table through that name runs.
    dir.write(
        "faucet.yaml",
        pipeline(&source, &sink("copy").replace("localhost", &host)),
    );
    dir.faucet(&["run"]).expect_code(0);
    sql(&format!("DROP DATABASE {db}"));
}

#[test]
fn postgres_cdc_into_a_table_of_its_publication_is_refused_before_anything_is_written() {
    let suffix = faucet_test_support::unique_suffix();
    let table = format!("loop_{suffix}");
    let slot = format!("loop_slot_{suffix}");
    let url = pg_url();
    let source = format!(
        "{{ type: postgres-cdc, config: {{ connection_url: \"{url}\", slot_name: {slot}, \
         publication: loop_pub_{suffix}, tables: [public.{table}], create_publication: true }} }}"
    );
    let sink_url = url.replace("127.0.0.1", "localhost");
    let sink = format!(
        "{{ type: postgres, config: {{ connection_url: \"{sink_url}\", table: {table}, \
         write_mode: upsert, key: [id] }} }}"
    );
    let dir = Dir::new();
    dir.write("faucet.yaml", pipeline(&source, &sink));
    let needles = [
        "pipeline.sink.config.table",
        &format!("the sink writes `{table}` (public.{table})"),
        "pipeline.source.config.tables[0]",
        "read back as a new change",
    ];
    refused_by_validate_and_run(&dir, &needles);
    // No slot was created: the source never connected.
    assert!(!slot_exists(&slot), "the source was not opened");
    // The same database under this machine's name: `run` asks the servers.
    if let Some(host) = loopback_hostname() {
        let renamed = sink.replace("localhost", &host);
        dir.write("faucet.yaml", pipeline(&source, &renamed));
        dir.faucet(&["validate"]).expect_code(0);
        dir.faucet(&["run"]).expect_code(2).stderr_has(&[
            "pipeline.source.config.tables[0]",
            "are one server",
            " database test",
        ]);
        assert!(!slot_exists(&slot), "the source was not opened");
    }
    // Another database of the same server is another table.
    let other = sink.replace("/test", "/postgres");
    assert_ne!(other, sink);
    dir.write("faucet.yaml", pipeline(&source, &other));
    dir.faucet(&["validate"]).expect_code(0);
}
