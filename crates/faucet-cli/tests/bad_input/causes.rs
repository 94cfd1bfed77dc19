//! An error prints its message once and its cause once: a chained cause (a missing file, a
//! torn state file, a driver's connect error, a server's login refusal) is not pasted into
//! the message again.

use super::setup;
use crate::support::csv_pipeline;

/// How often `needle` occurs in `text`.
fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// An error prints its message once and its cause once, after it: messages do not paste
/// their chained cause (a missing file, a torn state file).
#[test]
fn an_error_shows_its_cause_once() {
    let dir = setup(&csv_pipeline("p", "").replace("./data.csv", "./nope.csv"));
    let run = dir.faucet(&["run", "p.yaml"]);
    run.expect_code(1).stderr_has(&[
        "error: csv: read failed: cannot open ",
        "nope.csv: No such file or directory",
    ]);
    assert_eq!(
        count(&run.stderr, "No such file or directory"),
        1,
        "{}",
        run.stderr
    );
    assert_eq!(count(&run.stderr, "nope.csv"), 1, "{}", run.stderr);

    let dir = setup(&csv_pipeline("p", ""));
    dir.write(".faucet/state/p.json", "{\"bookmark\": ");
    let doc = dir.faucet(&["run", "p.yaml", "--output", "json"]).json();
    let message = doc["runs"][0]["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.starts_with("state store file: state file ")
            && message.contains("is not valid JSON; restore it"),
        "{doc}"
    );
    assert_eq!(count(&message, "EOF while parsing"), 1, "{doc}");
}

/// An unreachable PostgreSQL (a source, a sink, the state store) is one `cannot connect`
/// naming the server, then the driver's cause once.
#[cfg(all(feature = "postgres", feature = "state-postgres"))]
#[test]
fn an_unreachable_postgres_is_named_once_with_its_cause_once() {
    const URL: &str = "postgres://u@127.0.0.1:1/db";
    let pg_source =
        format!("{{ type: postgres, config: {{ connection_url: '{URL}', table: t }} }}");
    let pg_cdc = format!(
        "{{ type: postgres-cdc, config: {{ connection_url: '{URL}', slot_name: s, publication: p, tables: [public.t] }} }}"
    );
    let pg_sink = format!("{{ type: postgres, config: {{ connection_url: '{URL}', table: t }} }}");
    let csv = "{ type: csv, config: { path: ./data.csv } }".to_owned();
    let jsonl = "{ type: jsonl, config: { path: ./out/data.jsonl } }".to_owned();
    let memory = "{ type: memory }".to_owned();
    let pg_state = format!("{{ type: postgres, config: {{ url: '{URL}' }} }}");
    for (source, sink, state, says) in [
        (
            &pg_source,
            &jsonl,
            &memory,
            "error: postgres: cannot connect: PostgreSQL at postgres://u@127.0.0.1:1/db: ",
        ),
        (
            &pg_cdc,
            &jsonl,
            &memory,
            "error: postgres-cdc: cannot connect: PostgreSQL at postgres://u@127.0.0.1:1/db: ",
        ),
        (
            &csv,
            &pg_sink,
            &memory,
            "error: postgres: cannot connect: PostgreSQL at postgres://u@127.0.0.1:1/db: ",
        ),
        (
            &csv,
            &jsonl,
            &pg_state,
            "error: state store postgres: cannot connect: connection refused by ",
        ),
    ] {
        let dir = setup(&format!(
            "version: 1\nname: p\npipeline:\n  source: {source}\n  sink: {sink}\n  state: {state}\n"
        ));
        let run = dir.faucet(&["run", "p.yaml"]);
        run.expect_code(1).stderr_has(&[says, "Connection refused"]);
        assert_eq!(count(&run.stderr, "cannot connect"), 1, "{}", run.stderr);
        assert_eq!(
            count(&run.stderr, "Connection refused"),
            1,
            "{}",
            run.stderr
        );
    }
}

/// A login the PostgreSQL state store's server refuses: the server's reason once.
#[cfg(feature = "state-postgres")]
#[test]
fn a_refused_state_login_shows_the_servers_reason_once() {
    let url = crate::support::pg_url().replacen("postgres@", "faucet_no_such_role@", 1);
    let dir = setup(&csv_pipeline(
        "p",
        &format!("  state: {{ type: postgres, config: {{ url: '{url}' }} }}\n"),
    ));
    let run = dir.faucet(&["run", "p.yaml"]);
    run.expect_code(1).stderr_has(&[
        "rejected the login (SQLSTATE 28000); hint:",
        "role \"faucet_no_such_role\" does not exist",
    ]);
    assert_eq!(count(&run.stderr, "does not exist"), 1, "{}", run.stderr);
}
