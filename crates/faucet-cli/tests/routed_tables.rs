//! A whole database through one change stream into per-table targets, through the real
//! binary (issue 23): one `postgres-cdc` slot or one `mysql-cdc` binlog reader, a SQL sink
//! whose `table` is a template (`<target>.{table}`), twelve tables with their own keys —
//! single `bigint` and `integer`, composite `(text, integer)` and `(smallint, bigint, text)`,
//! text, UUID (MariaDB `CHAR(36)`) — the same on both servers (`support::routed`).
//!
//! * `faucet replicate` PostgreSQL → PostgreSQL, PostgreSQL → MySQL, MySQL → PostgreSQL and
//!   MySQL → MySQL (the MariaDB with a binlog, `FAUCET_TEST_MYSQL_URL`), `write_mode: upsert`
//!   with no `key:` (each target is created and upserted by its source table's key), under a
//!   concurrent writer (inserts, updates, key changes, deletes, and once the copy is done a
//!   `TRUNCATE` of one table), SIGKILLed at instants spread over the snapshot and the
//!   stream, then rerun to completion: every target equals its source value by value. One
//!   reader: while a run streams, the server shows exactly one reader of the pipeline —
//!   PostgreSQL one active slot of its name (and after the last run exactly one slot),
//!   MariaDB one `Binlog Dump` connection from the run's own sockets (its client ports read
//!   from `/proc`, so other tests' readers do not count). The TRUNCATE comes after the copy
//!   because one committed between two points of an interrupted copy of its table is
//!   refused by design (`postgres::snapshot`).
//! * A table without a primary key, as documented (README, "An upsert's key must be a key
//!   of the source table" and `faucet replicate`): into upsert targets `faucet replicate`
//!   refuses it (exit 3) before any target is made, from PostgreSQL even under `REPLICA
//!   IDENTITY FULL`, naming the fix `write_mode: append`; from MySQL into append targets
//!   too, at `tables` (a MySQL copy reads in primary-key order). From PostgreSQL it is
//!   proven in the audit run below.
//! * `faucet run` of `postgres-cdc` with `delivery: effectively_once` into append (audit)
//!   targets of the twelve tables and a keyless `REPLICA IDENTITY FULL` one, SIGKILLed
//!   while the writer runs (a TRUNCATE among its changes): each audit log, replayed over
//!   the rows the slot started from, is its source table — nothing lost, no change twice.
//! * `faucet validate` refuses, before anything connects, several tables upserted into one
//!   table, a route that sends two listed tables to one target, and a listed table routed
//!   nowhere.
//!
//! `FAUCET_SOAK=1` kills more often.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::support::pg::{Names, cleanup, faucet_with_pg_url};
use crate::support::replicate::{killed_after, stored};
use crate::support::routed::{self, Db, tables};
use crate::support::{Dir, output_of_success, pg_pool, runtime};

/// Rows of each source table before the pipeline starts.
const ROWS: i64 = 300;
/// Records per page: small, so the copy spans many pages and kills land inside it.
const BATCH: u64 = 50;
/// The variable the configs read the PostgreSQL URL from.
const PG_VAR: &str = "FAUCET_ROUTE_PG_URL";
/// The variable the configs read the MariaDB URL from.
const MY_VAR: &str = "FAUCET_ROUTE_MYSQL_URL";

/// The MariaDB URL (the server with a binlog) with database `db`, and a fresh `server_id`
/// for a reader of it.
#[cfg(feature = "mysql")]
fn mariadb_url(db: &str) -> (String, u32) {
    use crate::support::mariadb::{mysql_url_for, unique_server_id};
    (mysql_url_for(db, None), unique_server_id())
}

/// Without the `mysql` feature no test reaches MariaDB.
#[cfg(not(feature = "mysql"))]
fn mariadb_url(db: &str) -> (String, u32) {
    unreachable!("MariaDB is tested with the mysql feature ({db})")
}

/// The source block of a pipeline reading `tables` of `names.schema` on `db`: `postgres-cdc`
/// (its slot and publication, created by the run) or `mysql-cdc` (a fresh `server_id`).
fn source(db: Db, names: &Names, tables: &[String]) -> String {
    let listed: Vec<String> = tables
        .iter()
        .map(|t| format!("{}.{t}", names.schema))
        .collect();
    let listed = listed.join(", ");
    match db {
        Db::Pg => format!(
            "{{ type: postgres-cdc, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
             slot_name: {}, publication: {}, tables: [{listed}], create_publication: true }} }}",
            names.slot, names.publication
        ),
        Db::My => {
            let (url, id) = mariadb_url(&names.schema);
            format!(
                "{{ type: mysql-cdc, config: {{ connection_url: \"{url}\", server_id: {id}, \
                 tables: [{listed}] }} }}"
            )
        }
    }
}

/// The upsert sink into `<target>.{table}` on `db`, each target created from its records.
fn upsert_sink(db: Db, target: &str) -> String {
    let (kind, var) = match db {
        Db::Pg => ("postgres", PG_VAR),
        Db::My => ("mysql", MY_VAR),
    };
    format!(
        "{{ type: {kind}, config: {{ connection_url: \"${{env:{var}}}\", \
         table: \"{target}.{{table}}\", write_mode: upsert, create_table: true }} }}"
    )
}

/// Writes the pipeline file `dir/faucet.yaml` of `source` into `sink`.
fn config(dir: &Path, source: &str, sink: &str, extra: &str) {
    std::fs::write(
        dir.join("faucet.yaml"),
        format!(
            "version: 1\nname: routed\npipeline:\n  source: {source}\n  sink: {sink}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {BATCH}\n{extra}"
        ),
    )
    .expect("config");
}

/// `faucet <command> --quiet` in `dir`, stderr piped, the servers' URLs in the environment.
fn faucet(dir: &Path, command: &str) -> Command {
    let mut c = faucet_with_pg_url(PG_VAR);
    #[cfg(feature = "mysql")]
    c.env(MY_VAR, mariadb_url("test").0);
    c.args([command, "--quiet"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Where the SIGKILLs of [`kill_repeatedly`] landed: runs killed with a snapshot bookmark
/// stored (mid-copy), with a stream bookmark, and runs that ended before their kill.
#[derive(Debug, Default)]
struct Kills {
    in_copy: usize,
    in_stream: usize,
    finished: usize,
}

/// Writes `dir/continuous.yaml`: the pipeline of `dir/faucet.yaml` with its source made
/// continuous (it follows the stream instead of ending when caught up; the same state).
fn continuous_config(dir: &Path) {
    let yaml = std::fs::read_to_string(dir.join("faucet.yaml")).expect("config");
    // The source's block comes first.
    let yaml = yaml.replacen("config: { ", "config: { continuous: true, ", 1);
    std::fs::write(dir.join("continuous.yaml"), yaml).expect("continuous config");
}

/// SIGKILLs `command` runs after `step_ms`, 2 × `step_ms`, … (a fixed sequence, so failures
/// reproduce), five rounds (`FAUCET_SOAK=1`: fifteen); then, while no kill has landed in
/// the stream yet, up to ten runs of the pipeline made continuous ([`continuous_config`])
/// killed after 0.6 s, 1.2 s, …: once one finishes the copy, its kill lands in the stream.
fn kill_repeatedly(dir: &Path, command: &str, step_ms: u64) -> Kills {
    continuous_config(dir);
    let rounds = if std::env::var("FAUCET_SOAK").is_ok() {
        15
    } else {
        5
    };
    let mut kills = Kills::default();
    for round in 0..rounds {
        let after = Duration::from_millis(step_ms * (1 + round % 5));
        if !killed_after(faucet(dir, command), after) {
            kills.finished += 1;
        } else if stored(dir).is_some_and(|b| b.get("snapshot").is_some()) {
            kills.in_copy += 1;
        } else {
            kills.in_stream += 1;
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    for round in 0..10 {
        if kills.in_stream > 0 {
            break;
        }
        let after = Duration::from_millis(600 * (1 + round as u64));
        let copying = stored(dir).is_some_and(|b| b.get("snapshot").is_some());
        let mut run = faucet(dir, command);
        run.arg("continuous.yaml");
        if !killed_after(run, after) {
            kills.finished += 1;
        } else if copying && stored(dir).is_some_and(|b| b.get("snapshot").is_some()) {
            kills.in_copy += 1;
        } else {
            kills.in_stream += 1;
        }
    }
    eprintln!("SIGKILLs: {kills:?}");
    kills
}

/// The local TCP ports of process `pid`'s sockets (its `/proc` file descriptors matched with
/// the kernel's TCP tables).
fn local_ports(pid: u32) -> HashSet<u16> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut ports = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(inode)) = (fields.get(1), fields.get(9)) else {
                continue;
            };
            let port = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if let (true, Some(port)) = (inodes.contains(*inode), port) {
                ports.insert(port);
            }
        }
    }
    ports
}

/// The readers of the pipeline on its source server `db` now: PostgreSQL, the active
/// replication slots whose name starts with `names.slot` (the pipeline's, and a temporary
/// one of a resumed copy); MariaDB, the connections in `Binlog Dump` from one of `ports`
/// (the client ports of the run's sockets, [`local_ports`]).
fn readers(db: Db, names: &Names, ports: &HashSet<u16>) -> usize {
    match db {
        Db::Pg => routed::query(
            db,
            &format!(
                "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE '{}%' \
                 AND active",
                names.slot
            ),
        )
        .len(),
        Db::My => {
            let hosts = routed::query(
                db,
                "SELECT HOST FROM information_schema.PROCESSLIST \
                 WHERE COMMAND LIKE 'Binlog Dump%'",
            );
            hosts
                .iter()
                .filter_map(|h| h.rsplit_once(':')?.1.parse::<u16>().ok())
                .filter(|p| ports.contains(p))
                .count()
        }
    }
}

/// Waits (up to 10 s) until no slot of the pipeline is active (PostgreSQL lets go of a
/// killed run's slot when its walsender notices), then runs `command` of the pipeline made
/// continuous ([`continuous_config`]) for `run_ms` (longer, up to 30 s more, until its reader
/// has been seen) while the writer writes, sampling [`readers`], and kills it: asserts the run read through exactly one reader the whole
/// time it had one; then waits until the server let go of it.
fn one_reader(db: Db, names: &Names, dir: &Path, command: &str, run_ms: u64) {
    continuous_config(dir);
    let deadline = Instant::now() + Duration::from_secs(10);
    while readers(db, names, &HashSet::new()) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        readers(db, names, &HashSet::new()),
        0,
        "a killed run's reader is still there"
    );
    if matches!(db, Db::My) {
        await_server_id_free(dir);
    }
    let mut child = faucet(dir, command)
        .arg("continuous.yaml")
        .spawn()
        .expect("spawn faucet");
    let end = Instant::now() + Duration::from_millis(run_ms);
    // Under load the copy may outlast `run_ms`: sampling goes on (30 s at most) until the
    // run's reader has been seen, so the kill lands while the run reads.
    let latest = end + Duration::from_secs(30);
    let mut seen = Vec::new();
    let mut ports = HashSet::new();
    while Instant::now() < end || (!seen.contains(&1) && Instant::now() < latest) {
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
            }
            panic!("the sampled run ended by itself ({status}); readers seen {seen:?}: {stderr}");
        }
        ports.extend(local_ports(child.id()));
        seen.push(readers(db, names, &ports));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    // MariaDB ends a killed reader's dump when a write to it fails (a heartbeat at the
    // latest); until then a run with the same `server_id` is refused.
    let killed = Instant::now();
    while readers(db, names, &ports) > 0 {
        assert!(
            killed.elapsed() < Duration::from_secs(70),
            "the killed run's reader outlived it by 70 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("the killed run's reader went after {:?}", killed.elapsed());
    assert!(
        seen.contains(&1) && seen.iter().all(|&n| n <= 1),
        "readers of the pipeline sampled during a run: {seen:?}"
    );
}

/// Waits (up to 70 s) until MariaDB no longer lists the pipeline's `server_id` (from the
/// `continuous.yaml` in `dir`) among its replicas (`SHOW SLAVE HOSTS`): a SIGKILLed reader
/// stays registered until the server drops it (`slave_net_timeout`, a heartbeat at the
/// latest), and mysql-cdc refuses a run whose `server_id` is in use until then — a sampled
/// run started too soon ended at once, and a fresh-clone CI run saw only zeros.
fn await_server_id_free(dir: &Path) {
    let config = std::fs::read_to_string(dir.join("continuous.yaml")).expect("continuous.yaml");
    let id: String = config
        .split("server_id: ")
        .nth(1)
        .expect("a mysql-cdc source names its server_id")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(70);
    while routed::query(Db::My, "SHOW SLAVE HOSTS")
        .iter()
        .any(|row| row.split('\t').next() == Some(id.as_str()))
    {
        assert!(
            Instant::now() < deadline,
            "server_id {id} is still registered 70 s on"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The replication slots on the server whose name starts with `slot` (the pipeline's, and
/// any temporary one a resumed copy left).
fn slots_of(slot: &str) -> Vec<String> {
    routed::query(
        Db::Pg,
        &format!("SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE '{slot}%'"),
    )
}

/// Asserts `have` (a target's rows) equals `want` (its source's), naming the first
/// difference.
#[track_caller]
fn same_rows(what: &str, have: &[String], want: &[String]) {
    let missing: Vec<&String> = want.iter().filter(|r| !have.contains(r)).take(5).collect();
    let extra: Vec<&String> = have.iter().filter(|r| !want.contains(r)).take(5).collect();
    assert!(
        have == want,
        "{what}: {} rows, the source has {}; missing {missing:?}, extra {extra:?}",
        have.len(),
        want.len()
    );
}

/// `faucet replicate` of the twelve tables of a fresh source schema / database on `from`
/// into per-table upsert targets in a fresh one on `to`, under the writer: a first run
/// aborted mid-copy, SIGKILLs over the copy and the stream, the TRUNCATE once the copy is
/// done, a sampled run with [`one_reader`], then a run to completion after the writer
/// stopped; asserts the stream's bookmark, one slot (PostgreSQL), and every target equal to
/// its source value by value. Cleans up whatever happens.
fn replicate(tag: &str, from: Db, to: Db) {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let names = Names::new(tag);
    let target = format!("{}_t", names.schema);
    routed::create(from, &names.schema, ROWS);
    match to {
        Db::Pg => routed::run(to, &format!("CREATE SCHEMA {target}")),
        Db::My => routed::run(
            to,
            &format!("CREATE DATABASE {target} CHARACTER SET utf8mb4"),
        ),
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let all: Vec<String> = tables().into_iter().map(|t| t.name).collect();
    config(
        dir.path(),
        &source(from, &names, &all),
        &upsert_sink(to, &target),
        "",
    );
    let stop = Arc::new(AtomicBool::new(false));
    let truncate = Arc::new(AtomicBool::new(false));
    let writes = routed::writer(
        from,
        names.schema.clone(),
        ROWS,
        Arc::clone(&truncate),
        Arc::clone(&stop),
    );
    crate::support::with_cleanup(
        || {
            std::thread::sleep(Duration::from_millis(100));
            // A first run that stores its first position (the slot exists from then on).
            crate::support::replicate::aborted_mid_snapshot(
                faucet(dir.path(), "replicate"),
                dir.path(),
                "after_state_put",
                2,
            );
            let kills = kill_repeatedly(dir.path(), "replicate", 120);
            assert!(kills.in_copy > 0, "no kill landed in the copy: {kills:?}");
            assert!(
                kills.in_stream > 0,
                "no kill landed in the stream: {kills:?}"
            );
            // The copy is done: the TRUNCATE is a change of the stream.
            truncate.store(true, Ordering::SeqCst);
            one_reader(from, &names, dir.path(), "replicate", 4000);
            stop.store(true, Ordering::SeqCst);
            let writes = writes.join().expect("writer");
            assert!(
                writes.statements > 100 && writes.truncated,
                "the writer: {writes:?}"
            );
            output_of_success(&mut faucet(dir.path(), "replicate"), "the last run");
            let b = stored(dir.path()).expect("bookmark");
            let position = match from {
                Db::Pg => "lsn",
                Db::My => "binlog_file",
            };
            assert!(
                b.get(position).is_some() && b.get("snapshot").is_none(),
                "caught up to the stream: {b}"
            );
            if from == Db::Pg {
                assert_eq!(
                    slots_of(&names.slot),
                    std::slice::from_ref(&names.slot),
                    "one slot for the whole schema"
                );
            }
            for (n, t) in tables().iter().enumerate() {
                let want = routed::rows(from, &format!("{}.{}", names.schema, t.name), t.columns());
                let have = routed::rows(to, &format!("{target}.{}", t.name), t.columns());
                if n == 0 {
                    assert!((want.len() as i64) < ROWS / 2, "{}: not truncated", t.name);
                } else {
                    assert!(
                        want.len() as i64 > ROWS / 2,
                        "{}: {} rows",
                        t.name,
                        want.len()
                    );
                }
                same_rows(&t.name, &have, &want);
            }
        },
        || {
            stop.store(true, Ordering::SeqCst);
            match from {
                Db::Pg => rt.block_on(cleanup(&pool, &names)),
                Db::My => routed::run(from, &format!("DROP DATABASE IF EXISTS {}", names.schema)),
            }
            match to {
                Db::Pg => routed::run(to, &format!("DROP SCHEMA IF EXISTS {target} CASCADE")),
                Db::My => routed::run(to, &format!("DROP DATABASE IF EXISTS {target}")),
            }
        },
    );
}

#[test]
fn replicate_postgres_into_postgres_per_table_targets_sigkilled_equals_the_source() {
    replicate("pgpg", Db::Pg, Db::Pg);
}

#[cfg(feature = "mysql")]
#[test]
fn replicate_postgres_into_mysql_per_table_targets_sigkilled_equals_the_source() {
    replicate("pgmy", Db::Pg, Db::My);
}

#[cfg(feature = "mysql")]
#[test]
fn replicate_mysql_into_postgres_per_table_targets_sigkilled_equals_the_source() {
    replicate("mypg", Db::My, Db::Pg);
}

#[cfg(feature = "mysql")]
#[test]
fn replicate_mysql_into_mysql_per_table_targets_sigkilled_equals_the_source() {
    replicate("mymy", Db::My, Db::My);
}

/// `faucet replicate` of a keyless table `nokey` (PostgreSQL: `REPLICA IDENTITY FULL`) and a
/// keyed one of a fresh schema / database on `from` into targets on the same server,
/// upserted (`upsert`) or appended: the run's outcome, and whether any target table was
/// made.
fn replicate_keyless(tag: &str, from: Db, upsert: bool) -> (crate::support::Run, bool) {
    let names = Names::new(tag);
    let s = &names.schema;
    let target = format!("{s}_t");
    let (create, full) = match from {
        Db::Pg => (
            format!("CREATE SCHEMA {s}; CREATE SCHEMA {target};"),
            format!("ALTER TABLE {s}.nokey REPLICA IDENTITY FULL;"),
        ),
        Db::My => (
            format!("CREATE DATABASE {s}; CREATE DATABASE {target};"),
            String::new(),
        ),
    };
    routed::run(
        from,
        &format!(
            "{create} CREATE TABLE {s}.nokey (a bigint, b varchar(20)); {full} \
             INSERT INTO {s}.nokey VALUES (1, 'x'), (1, 'x'), (2, 'y'); \
             CREATE TABLE {s}.keyed (id bigint PRIMARY KEY, v bigint); \
             INSERT INTO {s}.keyed VALUES (1, 1);"
        ),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    config(
        dir.path(),
        &source(from, &names, &["nokey".to_owned(), "keyed".to_owned()]),
        &if upsert {
            upsert_sink(from, &target)
        } else {
            upsert_sink(from, &target).replace("write_mode: upsert", "write_mode: append")
        },
        "",
    );
    let run =
        crate::support::Run::from_output(faucet(dir.path(), "replicate").output().expect("faucet"));
    let made = match from {
        Db::Pg => format!("SELECT tablename FROM pg_tables WHERE schemaname = '{target}'"),
        Db::My => format!(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{target}'"
        ),
    };
    let made: Vec<String> = routed::query(from, &made)
        .into_iter()
        .filter(|t| t == "keyed" || t == "nokey")
        .collect();
    match from {
        Db::Pg => {
            runtime().block_on(async {
                cleanup(&pg_pool().await, &names).await;
            });
            routed::run(from, &format!("DROP SCHEMA {target} CASCADE"));
        }
        Db::My => routed::run(from, &format!("DROP DATABASE {s}; DROP DATABASE {target}")),
    }
    (run, !made.is_empty())
}

#[test]
fn replicate_refuses_a_keyless_postgres_table_into_upsert_targets_naming_the_fix() {
    let (run, made) = replicate_keyless("nokeypg", Db::Pg, true);
    run.expect_code(3)
        .stderr_has(&["nokey", "no primary key", "write_mode: append"]);
    assert!(!made, "a target was made before the refusal");
}

#[cfg(feature = "mysql")]
#[test]
fn replicate_refuses_a_keyless_mysql_table_into_upsert_targets_and_at_tables() {
    let (run, made) = replicate_keyless("nokeymy", Db::My, true);
    run.expect_code(3)
        .stderr_has(&["nokey", "no primary key", "write_mode: append"]);
    assert!(!made, "a target was made before the refusal");
    let (run, made) = replicate_keyless("nokeymya", Db::My, false);
    run.expect_code(2)
        .stderr_has(&["tables", "nokey", "primary key"]);
    assert!(!made, "a target was made before the refusal");
}

/// The audit rows of `table` (`op`, `before`, `after` as JSON) in LSN order.
async fn audit(pool: &PgPool, table: &str) -> Vec<(String, serde_json::Value, serde_json::Value)> {
    let rows: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(&format!(
        "SELECT op, before::text, after::text FROM {table} ORDER BY lsn::pg_lsn"
    ))
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("SELECT from {table}: {e}"));
    let json = |t: Option<String>| {
        t.map(|t| serde_json::from_str(&t).expect("json"))
            .unwrap_or(serde_json::Value::Null)
    };
    rows.into_iter()
        .map(|(op, b, a)| (op, json(b), json(a)))
        .collect()
}

/// `row`'s `columns` as text joined by `|`, as [`routed::rows`] prints them.
fn joined(row: &serde_json::Value, columns: &str) -> String {
    columns
        .split(", ")
        .map(|c| match &row[c] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join("|")
}

/// Replays an audit log strictly over `base` (the table's rows when the log starts, as
/// [`routed::rows`] prints them): an insert of a row already there, or an update or delete
/// of a row not there, is a change delivered twice or lost; a `t` empties the table. A
/// keyed table's rows are found by `key` (an update without a `before` — the key did not
/// change — by its `after`'s); a keyless one's (`REPLICA IDENTITY FULL`: `before` is the
/// whole row) are a multiset.
fn replay(
    what: &str,
    base: &[String],
    log: &[(String, serde_json::Value, serde_json::Value)],
    columns: &str,
    key: Option<&str>,
) -> Vec<String> {
    let key_columns = key.unwrap_or(columns);
    let key_len = key_columns.split(", ").count();
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in base {
        let k: Vec<&str> = row.split('|').take(key_len).collect();
        rows.entry(k.join("|")).or_default().push(row.clone());
    }
    let id = |row: &serde_json::Value| joined(row, key_columns);
    for (op, before, after) in log {
        if op == "t" {
            rows.clear();
        }
        if op == "u" || op == "d" {
            let old = if before.is_null() {
                id(after)
            } else {
                id(before)
            };
            let held = rows.get_mut(&old).filter(|r| !r.is_empty());
            let held = held.unwrap_or_else(|| panic!("{what}: `{op}` of a row not there: {old}"));
            held.pop();
        }
        if op == "c" || op == "u" {
            let held = rows.entry(id(after)).or_default();
            assert!(
                key.is_none() || held.is_empty(),
                "{what}: `{op}` of a row already there (a change twice): {after}"
            );
            held.push(joined(after, columns));
        }
    }
    let mut out: Vec<String> = rows.into_values().flatten().collect();
    out.sort();
    out
}

/// Inserts, updates and deletes on the keyless `s.nokey` (`a bigint, b text`, rows found
/// by `ctid`), one statement a time through one `psql` session, until `stop`.
fn nokey_writer(s: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<i64> {
    std::thread::spawn(move || {
        let mut session = routed::Session::open(Db::Pg);
        let mut i: i64 = 0;
        while !stop.load(Ordering::SeqCst) {
            i += 1;
            let a = i % 7;
            let one = format!("(SELECT ctid FROM {s}.nokey WHERE a = {a} LIMIT 1)");
            session.send(&match i % 4 {
                0 | 1 => format!("INSERT INTO {s}.nokey VALUES ({a}, 'x{i}');"),
                2 => format!("UPDATE {s}.nokey SET b = b || '+' WHERE ctid = {one};"),
                _ => format!("DELETE FROM {s}.nokey WHERE ctid = {one};"),
            });
            std::thread::sleep(Duration::from_millis(10));
        }
        session.close();
        i
    })
}

#[test]
fn run_effectively_once_into_append_audit_targets_sigkilled_has_every_change_once() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let names = Names::new("audit");
    let s = names.schema.clone();
    routed::create(Db::Pg, &s, ROWS);
    routed::run(
        Db::Pg,
        &format!(
            "CREATE TABLE {s}.nokey (a bigint, b text); ALTER TABLE {s}.nokey REPLICA IDENTITY FULL;
             INSERT INTO {s}.nokey SELECT g % 7, 'b' || g FROM generate_series(1, 30) g"
        ),
    );
    // Each table, its compared columns and its key (none: the keyless one).
    let mut all: Vec<(String, &str, Option<&str>)> = tables()
        .into_iter()
        .map(|t| (t.name.clone(), t.columns(), Some(t.key())))
        .collect();
    all.push(("nokey".to_owned(), "a, b", None));
    let listed: Vec<String> = all.iter().map(|(t, _, _)| t.clone()).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    config(
        dir.path(),
        &source(Db::Pg, &names, &listed),
        &format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", \
             table: \"{s}.audit_{{table}}\", create_table: true }} }}"
        ),
        "  delivery: effectively_once\n",
    );
    let stop = Arc::new(AtomicBool::new(false));
    let truncate = Arc::new(AtomicBool::new(false));
    crate::support::with_cleanup(
        || {
            // The first run creates the slot; the logs start from the rows there are then.
            output_of_success(&mut faucet(dir.path(), "run"), "the first run");
            let base: Vec<Vec<String>> = all
                .iter()
                .map(|(t, columns, _)| routed::rows(Db::Pg, &format!("{s}.{t}"), columns))
                .collect();
            let writes = routed::writer(
                Db::Pg,
                s.clone(),
                ROWS,
                Arc::clone(&truncate),
                Arc::clone(&stop),
            );
            let nokey = nokey_writer(s.clone(), Arc::clone(&stop));
            std::thread::sleep(Duration::from_millis(1500));
            truncate.store(true, Ordering::SeqCst);
            // Aborted between a page's commit (rows and token) and its bookmark: the rerun
            // re-anchors at the token, so no target gets that page twice.
            crate::support::expect_aborted(&mut faucet(dir.path(), "run"), "after_flush:1");
            std::thread::sleep(Duration::from_millis(200));
            let kills = kill_repeatedly(dir.path(), "run", 25);
            assert!(kills.in_stream > 0, "no kill landed in a run: {kills:?}");
            stop.store(true, Ordering::SeqCst);
            let writes = writes.join().expect("writer");
            let nokey = nokey.join().expect("nokey writer");
            assert!(
                writes.statements > 100 && writes.truncated && nokey > 50,
                "the writers: {writes:?}, {nokey} keyless"
            );
            output_of_success(&mut faucet(dir.path(), "run"), "the last run");
            assert_eq!(
                slots_of(&names.slot),
                std::slice::from_ref(&names.slot),
                "one slot for the whole schema"
            );
            for ((table, columns, key), base) in all.iter().zip(&base) {
                let log = rt.block_on(audit(&pool, &format!("{s}.audit_{table}")));
                let want = routed::rows(Db::Pg, &format!("{s}.{table}"), columns);
                assert!(!log.is_empty(), "{table}: no change audited");
                same_rows(table, &replay(table, base, &log, columns, *key), &want);
            }
        },
        || {
            stop.store(true, Ordering::SeqCst);
            rt.block_on(cleanup(&pool, &names));
        },
    );
}

/// `faucet validate` of a `postgres-cdc` source of `tables` (in schema `s`) into `sink`;
/// nothing is connected (the URLs point nowhere).
fn validate(tables: &[&str], sink: &str) -> crate::support::Run {
    let dir = Dir::new();
    let listed: Vec<String> = tables.iter().map(|t| format!("s.{t}")).collect();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: v\npipeline:\n  \
             source: {{ type: postgres-cdc, config: {{ connection_url: \"postgres://u@127.0.0.1:1/db\", \
             slot_name: s1, publication: p1, tables: [{}] }} }}\n  \
             sink: {{ type: postgres, config: {{ connection_url: \"postgres://u@127.0.0.1:1/db2\", {sink} }} }}\n",
            listed.join(", ")
        ),
    );
    dir.faucet(&["validate", "faucet.yaml"])
}

#[test]
fn validate_refuses_what_routing_would_fail_on_before_anything_connects() {
    validate(&["a", "b"], "table: t.all, write_mode: upsert, key: [id]")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.table", "s.a, s.b", "{table}"]);
    // Appending both into one audit table is fine.
    validate(&["a", "b"], "table: t.all").expect_code(0);
    validate(&["a", "b"], "table: \"t.{table}\", write_mode: upsert")
        .expect_code(0)
        .stdout_has(&["upsert by the source's key", "effectively-once"]);
    validate(&["a", "b"], "table: \"t.{schema}\"")
        .expect_code(2)
        .stderr_has(&["s.a and s.b", "t.s"]);
    validate(&["a", "b"], "tables: {s.a: t.a}")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.tables", "s.b"]);
    validate(&["a", "b"], "tables: {s.a: t.x, s.b: t.x}")
        .expect_code(2)
        .stderr_has(&["tables.s.b", "t.x"]);
    validate(&["a"], "table: \"t.{tabel}\"")
        .expect_code(2)
        .stderr_has(&["pipeline.sink.config.table", "{tabel}"]);
}
