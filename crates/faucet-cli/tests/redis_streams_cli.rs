//! The `redis-streams` sink through the real `faucet` binary, read back by an independent
//! consumer (`scripts/bus_consumer.py`, redis-py):
//!
//! * csv → redis-streams with `delivery: effectively_once` (the atomic watermark), aborted at
//!   every fault point and SIGKILLed at random instants, rerun to completion: every row
//!   exactly once, in the file's order;
//! * postgres-cdc of two tables (`<base>_a.items`, `<base>_b.items`) routed per table
//!   (`…:cdc.{schema}.{table}`), aborted at every fault point and SIGKILLed between new
//!   changes: each stream holds exactly the changes an independent `test_decoding` slot saw
//!   for its table, once each and in commit order (so in source order per key);
//! * `faucet doctor` passes against the server, names an unreachable one, and fails naming
//!   the stream and `XADD` for a user whose ACL does not allow adding entries (an ACL user
//!   made by the test and deleted at its end).
//!
//! Redis from `FAUCET_TEST_REDIS_URL`, PostgreSQL from `FAUCET_TEST_PG_URL`
//! (`scripts/services.sh` starts both and installs redis-py); every test uses its own key
//! prefix, schemas and slots, removed at the end.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::bus::{
    change_of, delete_redis_keys, oracle, redis_streams, two_table_round, two_tables,
};
use crate::support::crash::{
    CrashScenario, abort_at_every_point, kill_after, killed_at_random_instants,
};
use crate::support::pg::{CdcObjectsGuard, Change, unique_suffix};
use crate::support::{Dir, faucet_unarmed, output_of_success};

const ROWS: usize = 3_000;

/// csv → redis-streams (effectively-once) into the stream `<prefix>:events`.
struct CsvIntoStreams {
    prefix: String,
    batch: usize,
}

impl CsvIntoStreams {
    fn new(tag: &str, batch: usize) -> Self {
        Self {
            prefix: format!("faucet-test-rscli-{tag}-{}", unique_suffix()),
            batch,
        }
    }
}

impl CrashScenario for CsvIntoStreams {
    fn prepare(&self, dir: &Path) {
        delete_redis_keys(&format!("{}:*", self.prefix));
        let mut csv = String::from("id,v\n");
        for i in 0..ROWS {
            csv.push_str(&format!("{i},{}\n", i * 3));
        }
        std::fs::write(dir.join("in.csv"), csv).expect("csv");
        std::fs::write(
            dir.join("faucet.yaml"),
            format!(
                "version: 1\nname: rscsv\npipeline:\n  \
                 source: {{ type: csv, config: {{ path: ./in.csv, columns: {{ id: int, v: int }} }} }}\n  \
                 sink: {{ type: redis-streams, config: {{ url: \"${{env:FAUCET_CRASH_REDIS_URL}}\", \
                 stream: \"{p}:events\", prefix: \"{p}:\", key: [id] }} }}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  \
                 delivery: effectively_once\n  batch_size: {b}\n",
                p = self.prefix,
                b = self.batch
            ),
        )
        .expect("config");
    }

    fn check(&self, what: &str) {
        let got = redis_streams(&format!("{}:events", self.prefix));
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
        delete_redis_keys(&format!("{}:*", self.prefix));
    }

    fn faucet(&self) -> Command {
        let mut c = faucet_unarmed();
        c.env("FAUCET_CRASH_REDIS_URL", faucet_test_support::redis_url());
        c
    }
}

#[test]
fn csv_into_redis_streams_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&CsvIntoStreams::new("points", 250));
}

#[test]
fn csv_into_redis_streams_is_exactly_once_across_sigkills() {
    killed_at_random_instants(&CsvIntoStreams::new("kills", 20));
}

#[test]
fn postgres_cdc_of_two_tables_routed_into_redis_streams_is_exactly_once_in_order() {
    let suffix = unique_suffix();
    let base = format!("rs_cdc_{suffix}");
    let schemas = [format!("{base}_a"), format!("{base}_b")];
    let publication = format!("{base}_pub");
    let slot = format!("{base}_slot");
    let oracle_slot = format!("{base}_oracle");
    let prefix = format!("faucet-test-rscdc-{suffix}");
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
    struct Keys(String);
    impl Drop for Keys {
        fn drop(&mut self) {
            delete_redis_keys(&format!("{}:*", self.0));
        }
    }
    let _keys = Keys(prefix.clone());
    let (a, b) = (&schemas[0], &schemas[1]);
    two_tables(a, b, &publication, &slot, &oracle_slot);
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: rscdc\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
             slot_name: {slot}, publication: {publication}, tables: [{a}.items, {b}.items] }} }}\n  \
             sink: {{ type: redis-streams, config: {{ url: \"${{env:FAUCET_CRASH_REDIS_URL}}\", \
             stream: \"{prefix}:cdc.{{schema}}.{{table}}\", prefix: \"{prefix}:\", key: [id], \
             format: debezium }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  \
             delivery: effectively_once\n  batch_size: 40\n"
        ),
    );
    let workload = |round: usize| two_table_round(a, b, round);
    workload(0);
    let faucet = || {
        let mut c = faucet_unarmed();
        c.env("FAUCET_CRASH_REDIS_URL", faucet_test_support::redis_url())
            .env("FAUCET_CRASH_PG_URL", faucet_test_support::pg_url());
        c
    };
    for point in faucet_core::fault::ALL {
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
    let consumed = redis_streams(&format!("{prefix}:cdc.*"));
    for (s, want) in schemas.iter().zip(&want) {
        let stream = format!("{prefix}:cdc.{s}.items");
        let got: Vec<Change> = consumed
            .iter()
            .filter(|m| m.stream == stream)
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
        "entries in streams of no table"
    );
    eprintln!("postgres-cdc → redis-streams: {killed} runs SIGKILLed mid-run");
}

#[test]
fn doctor_checks_the_server() {
    let prefix = format!("faucet-test-rsdoc-{}", unique_suffix());
    let dir = Dir::new();
    dir.write("in.csv", "id\n1\n");
    let config = |url: &str| {
        format!(
            "version: 1\nname: rsdoc\npipeline:\n  \
             source: {{ type: csv, config: {{ path: ./in.csv }} }}\n  \
             sink: {{ type: redis-streams, config: {{ url: \"{url}\", stream: \"{prefix}:events\", \
             prefix: \"{prefix}:\" }} }}\n"
        )
    };
    dir.write("ok.yaml", config(&faucet_test_support::redis_url()));
    dir.write("down.yaml", config("redis://u:hunter2@127.0.0.1:1/0"));
    // A user that may do everything but XADD.
    let user = AclUser::new(&format!("faucet_test_rsdoc_{}", unique_suffix()), "-xadd");
    dir.write("noxadd.yaml", config(&user.url()));
    let ok = dir.faucet(&["doctor", "ok.yaml"]);
    ok.expect_code(0);
    let down = dir.faucet(&["doctor", "down.yaml"]);
    assert_ne!(down.code, 0);
    down.stdout_has(&["cannot reach redis://u@127.0.0.1:1/0"]);
    assert!(!format!("{}{}", down.stdout, down.stderr).contains("hunter2"));
    let refused = dir.faucet(&["doctor", "noxadd.yaml"]);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    refused.stdout_has(&[
        &format!("may not add entries to the stream `{prefix}:events`"),
        "'xadd'",
    ]);
    assert!(!refused.stdout.contains(AclUser::PASSWORD));
    // Nothing was written.
    assert!(redis_streams(&format!("{prefix}:*")).is_empty());
    delete_redis_keys(&format!("{prefix}:*"));
}

/// A Redis ACL user of the test (`ACL SETUSER name on >password ~* +@all <rule>`), deleted
/// on drop.
struct AclUser {
    name: String,
}

impl AclUser {
    const PASSWORD: &str = "acl-user-pw-8f3a";

    fn new(name: &str, rule: &str) -> Self {
        Self::acl(&[
            "SETUSER",
            name,
            "on",
            &format!(">{}", Self::PASSWORD),
            "~*",
            "+@all",
            rule,
        ]);
        Self {
            name: name.to_owned(),
        }
    }

    /// The test server's URL with this user's login.
    fn url(&self) -> String {
        faucet_test_support::redis_url().replacen(
            "redis://",
            &format!("redis://{}:{}@", self.name, Self::PASSWORD),
            1,
        )
    }

    fn acl(args: &[&str]) {
        crate::support::runtime().block_on(async {
            let client = redis::Client::open(faucet_test_support::redis_url()).expect("redis url");
            let mut c = client
                .get_multiplexed_async_connection()
                .await
                .expect("redis connection");
            redis::cmd("ACL")
                .arg(args)
                .query_async::<redis::Value>(&mut c)
                .await
                .expect("ACL");
        });
    }
}

impl Drop for AclUser {
    fn drop(&mut self) {
        Self::acl(&["DELUSER", &self.name]);
    }
}
