//! The `nats` sink through the real `faucet` binary, read back by an independent consumer
//! (`scripts/bus_consumer.py`, nats-py):
//!
//! * csv → nats with `delivery: effectively_once` (the exact re-anchor), aborted at every
//!   fault point (`mid_page` and `before_commit` leave a page stored in part) and SIGKILLed
//!   at random instants, rerun to completion: every row exactly once, in the file's order;
//! * postgres-cdc of two tables routed per table (`….cdc.{schema}.{table}`), aborted at every
//!   fault point and SIGKILLed between new changes: each subject holds exactly the changes an
//!   independent `test_decoding` slot saw for its table, once each and in commit order;
//! * `faucet doctor` passes against the server and names an unreachable one; on a private
//!   nats-server with users, it fails naming the subject for a user whose permissions do not
//!   allow publishing there, and passes for one whose do (and stores nothing).
//!
//! nats-server from `FAUCET_TEST_NATS_URL`, PostgreSQL from `FAUCET_TEST_PG_URL`
//! (`scripts/services.sh` starts both and installs nats-py); every test uses its own stream,
//! subjects, schemas and slots, removed at the end.

use crate::support::Dir;
use crate::support::bus::{Bus, CsvIntoBus, delete_nats_stream, postgres_cdc_into};
use crate::support::crash::{abort_at_every_point, killed_at_random_instants};
use crate::support::pg::unique_suffix;

#[test]
fn csv_into_nats_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&CsvIntoBus {
        bus: Bus::nats("natscli-points"),
        batch: 250,
    });
}

#[test]
fn csv_into_nats_is_exactly_once_across_sigkills() {
    killed_at_random_instants(&CsvIntoBus {
        bus: Bus::nats("natscli-kills"),
        batch: 20,
    });
}

#[test]
fn postgres_cdc_of_two_tables_routed_into_nats_is_exactly_once_in_order() {
    postgres_cdc_into(&Bus::nats("natscdc"), "natscdc");
}

#[test]
fn doctor_checks_the_server() {
    let suffix = unique_suffix();
    let stream = format!("FAUCET_TEST_NATSDOC_{suffix}");
    let dir = Dir::new();
    dir.write("in.csv", "id\n1\n");
    let config = |url: &str, create: bool| {
        format!(
            "version: 1\nname: natsdoc\npipeline:\n  \
             source: {{ type: csv, config: {{ path: ./in.csv }} }}\n  \
             sink: {{ type: nats, config: {{ url: \"{url}\", subject: \"faucet-test.doc.{suffix}\", \
             stream: {stream}, create_stream: {create} }} }}\n"
        )
    };
    dir.write("ok.yaml", config(&faucet_test_support::nats_url(), true));
    dir.write(
        "missing.yaml",
        config(&faucet_test_support::nats_url(), false),
    );
    dir.write("down.yaml", config("nats://u:hunter2@127.0.0.1:1", true));
    dir.faucet(&["doctor", "ok.yaml"]).expect_code(0);
    let missing = dir.faucet(&["doctor", "missing.yaml"]);
    assert_ne!(missing.code, 0);
    missing.stdout_has(&["does not exist"]);
    let down = dir.faucet(&["doctor", "down.yaml"]);
    assert_ne!(down.code, 0);
    down.stdout_has(&["cannot reach nats://127.0.0.1:1"]);
    assert!(!format!("{}{}", down.stdout, down.stderr).contains("hunter2"));
    delete_nats_stream(&stream);
}

/// A client of `server` logged in as its `writer`.
async fn writer(server: &faucet_test_support::private_nats::PrivateNats) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password("writer".into(), "writer-pw".into())
        .connect(server.addr())
        .await
        .expect("connect as writer")
}

#[test]
fn doctor_names_a_subject_the_user_may_not_publish_to() {
    // `writer` may publish anywhere; `reader` only to the JetStream API (and receive its
    // answers), not to the stream's subjects.
    let server = faucet_test_support::private_nats::PrivateNats::start(
        "users: [\n\
         { user: writer, password: \"writer-pw\" }\n\
         { user: reader, password: \"reader-pw\", permissions: { \
           publish: { allow: [\"$JS.API.>\"] }, subscribe: { allow: [\"_INBOX.>\"] } } }\n\
         ]",
    );
    let stream = "FAUCET_TEST_NATSPERM";
    let subject = "faucet-test.perm.events";
    crate::support::runtime().block_on(async {
        let client = writer(&server).await;
        async_nats::jetstream::new(client)
            .create_stream(async_nats::jetstream::stream::Config {
                name: stream.to_owned(),
                subjects: vec!["faucet-test.perm.>".to_owned()],
                ..Default::default()
            })
            .await
            .expect("create the stream");
    });
    let dir = Dir::new();
    dir.write("in.csv", "id\n1\n");
    let config = |user: &str| {
        format!(
            "version: 1\nname: natsperm\npipeline:\n  \
             source: {{ type: csv, config: {{ path: ./in.csv }} }}\n  \
             sink: {{ type: nats, config: {{ url: \"{}\", subject: \"{subject}\", \
             stream: {stream} }} }}\n",
            server.url(user, &format!("{user}-pw"))
        )
    };
    dir.write("writer.yaml", config("writer"));
    dir.write("reader.yaml", config("reader"));
    let ok = dir.faucet(&["doctor", "writer.yaml"]);
    assert_eq!(ok.code, 0, "{}\n{}", ok.stdout, server.log());
    let refused = dir.faucet(&["doctor", "reader.yaml"]);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    refused.stdout_has(&[
        &format!("may not publish to `{subject}`"),
        "Permissions Violation",
    ]);
    assert!(!refused.stdout.contains("reader-pw"), "{}", refused.stdout);
    // The probes stored nothing.
    let stored = crate::support::runtime().block_on(async {
        let client = writer(&server).await;
        let mut s = async_nats::jetstream::new(client)
            .get_stream(stream)
            .await
            .expect("the stream");
        s.info().await.expect("stream info").state.messages
    });
    assert_eq!(stored, 0, "the doctor's probes stored messages");
}
