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

use crate::support::Dir;
use crate::support::bus::{Bus, CsvIntoBus, delete_redis_keys, postgres_cdc_into, redis_streams};
use crate::support::crash::{abort_at_every_point, killed_at_random_instants};
use crate::support::pg::unique_suffix;

#[test]
fn csv_into_redis_streams_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&CsvIntoBus {
        bus: Bus::streams("rscli-points"),
        batch: 250,
    });
}

#[test]
fn csv_into_redis_streams_is_exactly_once_across_sigkills() {
    killed_at_random_instants(&CsvIntoBus {
        bus: Bus::streams("rscli-kills"),
        batch: 20,
    });
}

#[test]
fn postgres_cdc_of_two_tables_routed_into_redis_streams_is_exactly_once_in_order() {
    postgres_cdc_into(&Bus::streams("rscdc"), "rscdc");
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
