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

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::bus::{
    change_of, delete_nats_stream, nats_messages, oracle, two_table_round, two_tables,
};
use crate::support::crash::{
    CrashScenario, abort_at_every_point, kill_after, killed_at_random_instants,
};
use crate::support::pg::{CdcObjectsGuard, Change, unique_suffix};
use crate::support::{Dir, faucet_unarmed, output_of_success};

const ROWS: usize = 3_000;

/// csv → nats (effectively-once): the subject `<prefix>.events` of the stream `<stream>`.
struct CsvIntoNats {
    prefix: String,
    stream: String,
    batch: usize,
}

impl CsvIntoNats {
    fn new(tag: &str, batch: usize) -> Self {
        let suffix = unique_suffix();
        Self {
            prefix: format!("faucet-test-natscli-{tag}-{suffix}"),
            stream: format!("FAUCET_TEST_NATSCLI_{tag}_{suffix}"),
            batch,
        }
    }
}

impl CrashScenario for CsvIntoNats {
    fn prepare(&self, dir: &Path) {
        delete_nats_stream(&self.stream);
        let mut csv = String::from("id,v\n");
        for i in 0..ROWS {
            csv.push_str(&format!("{i},{}\n", i * 3));
        }
        std::fs::write(dir.join("in.csv"), csv).expect("csv");
        std::fs::write(
            dir.join("faucet.yaml"),
            format!(
                "version: 1\nname: natscsv\npipeline:\n  \
                 source: {{ type: csv, config: {{ path: ./in.csv, columns: {{ id: int, v: int }} }} }}\n  \
                 sink: {{ type: nats, config: {{ url: \"${{env:FAUCET_CRASH_NATS_URL}}\", \
                 subject: \"{p}.events\", stream: {s}, create_stream: true, key: [id] }} }}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  \
                 delivery: effectively_once\n  batch_size: {b}\n",
                p = self.prefix,
                s = self.stream,
                b = self.batch
            ),
        )
        .expect("config");
    }

    fn check(&self, what: &str) {
        let got = nats_messages(&self.stream, &format!("{}.events", self.prefix));
        let ids: Vec<i64> = got
            .iter()
            .map(|m| {
                assert_eq!(
                    m.fields["value"]["v"],
                    json!(m.fields["value"]["id"].as_i64().unwrap_or(-1) * 3),
                    "{what}: {m:?}"
                );
                assert_eq!(
                    m.fields["key"],
                    json!({"id": m.fields["value"]["id"]}),
                    "{what}"
                );
                m.fields["value"]["id"].as_i64().expect("id")
            })
            .collect();
        let want: Vec<i64> = (0..ROWS as i64).collect();
        if ids != want {
            let mut seen = std::collections::HashMap::new();
            for id in &ids {
                *seen.entry(*id).or_insert(0) += 1;
            }
            let dups = seen.values().filter(|&&n| n > 1).count();
            let lost = want.iter().filter(|id| !seen.contains_key(id)).count();
            panic!(
                "{what}: {} entries, {lost} ids lost, {dups} doubled, or out of order",
                ids.len()
            );
        }
    }

    fn drop(&self) {
        delete_nats_stream(&self.stream);
    }

    fn faucet(&self) -> Command {
        let mut c = faucet_unarmed();
        c.env("FAUCET_CRASH_NATS_URL", faucet_test_support::nats_url());
        c
    }
}

#[test]
fn csv_into_nats_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&CsvIntoNats::new("points", 250));
}

#[test]
fn csv_into_nats_is_exactly_once_across_sigkills() {
    killed_at_random_instants(&CsvIntoNats::new("kills", 20));
}

#[test]
fn postgres_cdc_of_two_tables_routed_into_nats_is_exactly_once_in_order() {
    let suffix = unique_suffix();
    let base = format!("nats_cdc_{suffix}");
    let schemas = [format!("{base}_a"), format!("{base}_b")];
    let publication = format!("{base}_pub");
    let slot = format!("{base}_slot");
    let oracle_slot = format!("{base}_oracle");
    let prefix = format!("faucet-test-natscdc-{suffix}");
    let stream = format!("FAUCET_TEST_NATSCDC_{suffix}");
    let _guard = CdcObjectsGuard {
        slot: slot.clone(),
        publication: publication.clone(),
        schema: schemas[0].clone(),
    };
    let _oracle_guard = CdcObjectsGuard {
        slot: oracle_slot.clone(),
        publication: publication.clone(),
        schema: schemas[1].clone(),
    };
    struct Stream(String);
    impl Drop for Stream {
        fn drop(&mut self) {
            delete_nats_stream(&self.0);
        }
    }
    let _stream = Stream(stream.clone());
    let (a, b) = (&schemas[0], &schemas[1]);
    two_tables(a, b, &publication, &slot, &oracle_slot);
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: natscdc\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
             slot_name: {slot}, publication: {publication}, tables: [{a}.items, {b}.items] }} }}\n  \
             sink: {{ type: nats, config: {{ url: \"${{env:FAUCET_CRASH_NATS_URL}}\", \
             subject: \"{prefix}.cdc.{{schema}}.{{table}}\", stream: {stream}, create_stream: true, \
             key: [id], format: debezium }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             delivery: effectively_once\n  batch_size: 40\n"
        ),
    );
    let workload = |round: usize| two_table_round(a, b, round);
    workload(0);
    let faucet = || {
        let mut c = faucet_unarmed();
        c.env("FAUCET_CRASH_NATS_URL", faucet_test_support::nats_url())
            .env("FAUCET_CRASH_PG_URL", faucet_test_support::pg_url());
        c
    };
    // Every point a nats page passes, `before_commit` (all of a page but its last message,
    // the token's, stored) among them; more changes halfway so every run has pages to do.
    for (n, point) in faucet_core::fault::SQL_SINK.into_iter().enumerate() {
        if n == 3 {
            workload(5);
        }
        for hit in [1, 3] {
            crate::support::expect_aborted(
                faucet().args(["run", "--quiet"]).current_dir(dir.path()),
                &format!("{point}:{hit}"),
            );
        }
    }
    let mut killed = 0;
    for round in 1..5 {
        workload(round);
        if kill_after(
            faucet(),
            dir.path(),
            Duration::from_millis(40 + (round as u64 * 53) % 200),
        ) {
            killed += 1;
        }
    }
    let out = output_of_success(faucet().arg("run").current_dir(dir.path()), "the final run");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("effectively-once (atomic watermark)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let want = oracle(&oracle_slot, &schemas);
    let consumed = nats_messages(&stream, &format!("{prefix}.cdc.>"));
    for (s, want) in schemas.iter().zip(&want) {
        let subject = format!("{prefix}.cdc.{s}.items");
        let got: Vec<Change> = consumed
            .iter()
            .filter(|m| m.stream == subject)
            .map(|m| change_of(m, "lsn"))
            .collect();
        assert!(
            want.len() > 500,
            "{s}: a workload of {} changes",
            want.len()
        );
        assert_eq!(
            got.len(),
            want.len(),
            "{s}: {} entries for {} changes",
            got.len(),
            want.len()
        );
        assert!(
            got == *want,
            "{s}: the stream differs from the changes, in order"
        );
    }
    assert_eq!(
        consumed.len(),
        want.iter().map(Vec::len).sum::<usize>(),
        "messages on subjects of no table"
    );
    eprintln!("postgres-cdc → nats: {killed} runs SIGKILLed mid-run");
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
