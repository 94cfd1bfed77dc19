//! The sink refuses a zombie (issue 14, "Proof"), through the real `faucet` binary and the
//! real PostgreSQL: a `faucet run` (state in PostgreSQL, `--lease-ttl 2s`) is stopped by
//! SIGSTOP (`FAUCET_FAULT=<point>:3:stop`) at each point of its third page's cycle —
//! `before_write` (read, lease checked, nothing written), `before_commit` (rows written
//! inside the page's transaction, no `COMMIT` yet) and `after_flush` (committed, bookmark
//! not persisted); a second `faucet run` of the same row takes the lease after the ttl and
//! completes; then the first gets SIGCONT:
//!
//! * `before_write`, `before_commit`: its page is refused by the sink
//!   ("the sink refused a page …", `LeaseError::Fenced`; at `before_commit` the server ended
//!   the stalled transaction after the ttl and the fence explains it), the process exits
//!   non-zero, and `faucet_fence_refused_writes_total` of its `--metrics-listen` counts 1;
//! * `after_flush`: its page was committed while its lease was good; it then finds its
//!   lease lost before writing the bookmark ("lost the lease …") and exits non-zero;
//! * in every case the stored bookmark is the second run's, and the target equals the
//!   source: for a query → postgres **upsert** pipeline whose source rows all changed while
//!   the first run was stopped (so a stale page would overwrite newer values), and for a csv →
//!   postgres append with the **atomic watermark** (every row exactly once), and the same csv
//!   into the bus sinks with their atomic watermark — Redis streams (the fence checked in each
//!   page's atomic step) and NATS JetStream (each page's publishes chained to the stream sequence
//!   it expects, the last message's fence read first): every row once, in order.
//!
//! The control (`FAUCET_TEST_DISABLE_FENCE=1`, read only by debug builds): the same zombie at
//! `before_write` without its fence overwrites exactly its page's rows with stale values —
//! the corruption the fence prevents, so this proof can fail.
//!
//! The stopped run is spawned with `lease_e2e`'s `Spawned`. The pipeline file has a second matrix row (`b`) whose lease the test holds: after its
//! row `a` fails the zombie waits for `b`, so its metrics can be read before it exits.

use std::time::Duration;

use faucet_core::state::{LeaseHolder, LeaseOutcome, LeaseRequest, StateStore};
use faucet_state_postgres::PostgresStateStore;

use crate::lease_e2e::Spawned;
use crate::support::pg::{check_exactly_once, faucet, query, sql, unique_suffix};
use crate::support::{Dir, pg_url, runtime};

const ROWS: usize = 3_000;
const BATCH: i64 = 100;
const TTL: &str = "2s";
const NAME: &str = "zombie";

/// Which target the pipeline writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Incremental postgres query → postgres upsert by `id` (keyed upsert).
    Upsert,
    /// csv → postgres append, atomic watermark.
    Atomic,
    /// csv → redis-streams, atomic watermark (the fence checked in each page's atomic step).
    #[cfg(feature = "redis-streams")]
    Streams,
    /// csv → NATS JetStream, atomic watermark (each publish chained to the stream sequence the
    /// page expects, the last message's fence read before a page).
    #[cfg(feature = "nats")]
    Nats,
}

/// One zombie scenario's schema, state table and pipeline directory.
struct Case {
    kind: Kind,
    schema: String,
    state: String,
    dir: Dir,
}

impl Case {
    fn new(kind: Kind, tag: &str) -> Self {
        let suffix = unique_suffix();
        let schema = format!("zf_{tag}_{suffix}");
        let state = format!("zf_state_{tag}_{suffix}");
        let s = &schema;
        let dir = Dir::new();
        let (source, sink) = match kind {
            Kind::Upsert => {
                sql(&format!(
                    "CREATE SCHEMA {s}; \
                     CREATE TABLE {s}.src (id integer PRIMARY KEY, v bigint NOT NULL, \
                       updated_at timestamp NOT NULL); \
                     INSERT INTO {s}.src SELECT g, g * 3, \
                       '2026-01-01'::timestamp + g * interval '1 s' FROM generate_series(0, {}) g; \
                     CREATE TABLE {s}.target (LIKE {s}.src INCLUDING ALL); \
                     CREATE TABLE {s}.target_b (LIKE {s}.src INCLUDING ALL)",
                    ROWS - 1
                ));
                (
                    format!(
                        "{{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
                         table: {s}.src, replication_method: incremental, \
                         replication_key: [updated_at, id] }} }}"
                    ),
                    ", write_mode: upsert, key: [id]",
                )
            }
            // csv → an append target: the postgres table, or Redis streams (no table).
            _ => {
                dir.write("in.csv", crate::support::crash::id_v_csv(ROWS));
                sql(&format!("CREATE SCHEMA {s}"));
                if kind == Kind::Atomic {
                    sql(&format!(
                        "CREATE TABLE {s}.target (id bigint, v bigint); \
                         CREATE TABLE {s}.target_b (id bigint, v bigint)"
                    ));
                }
                (
                    "{ type: csv, config: { path: ./in.csv, columns: { id: int, v: int } } }"
                        .to_owned(),
                    "",
                )
            }
        };
        let (sink, sink_b) = bus_sinks(kind, s).unwrap_or_else(|| pg_sinks(s, sink));
        dir.write(
            "p.yaml",
            format!(
                "version: 1\nname: {NAME}\npipeline:\n  source: {source}\n  \
                 sink: {sink}\n  \
                 state: {{ type: postgres, config: {{ url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
                 table: {state}, ensure_table: true }} }}\n  \
                 delivery: effectively_once\n  batch_size: {BATCH}\n\
                 matrix:\n  - {{ id: a }}\n  - {{ id: b, sink: {sink_b} }}\n"
            ),
        );
        Self {
            kind,
            schema,
            state,
            dir,
        }
    }

    /// The stored entry of row `a`, as text.
    fn entry(&self) -> Option<String> {
        let rows: Vec<(String,)> = query(&format!(
            "SELECT value::text FROM \"{}\" WHERE key = '{NAME}::a'",
            self.state
        ));
        rows.into_iter().next().map(|(v,)| v)
    }

    /// Rows of the upsert target that differ from the source (or are missing on one side).
    fn upsert_mismatches(&self) -> i64 {
        let s = &self.schema;
        let rows: Vec<(i64,)> = query(&format!(
            "SELECT count(*) FROM {s}.src s FULL JOIN {s}.target t USING (id) \
             WHERE s.v IS DISTINCT FROM t.v OR s.updated_at IS DISTINCT FROM t.updated_at"
        ));
        rows[0].0
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            sql(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
            crate::support::drop_state_tables(&self.state);
            #[cfg(feature = "redis-streams")]
            crate::support::bus::delete_redis_keys(&format!("{}:*", self.schema));
            #[cfg(feature = "nats")]
            if self.kind == Kind::Nats {
                for stream in nats_streams(&self.schema) {
                    crate::support::bus::delete_nats_stream(&stream);
                }
            }
        });
    }
}

/// The bus sink of the pipeline and row `b`'s override, for the bus kinds (`s`: the case's
/// schema name, which also names its streams); `None` for the postgres kinds.
#[allow(unused_variables)]
fn bus_sinks(kind: Kind, s: &str) -> Option<(String, String)> {
    match kind {
        #[cfg(feature = "redis-streams")]
        Kind::Streams => Some((
            format!(
                "{{ type: redis-streams, config: {{ url: \"${{env:FAUCET_CRASH_REDIS_URL}}\", \
                 stream: \"{s}:events\", prefix: \"{s}:\" }} }}"
            ),
            format!("{{ config: {{ stream: \"{s}:events_b\" }} }}"),
        )),
        #[cfg(feature = "nats")]
        Kind::Nats => {
            let [a, b] = nats_streams(s);
            for stream in [&a, &b] {
                crate::support::bus::delete_nats_stream(stream);
            }
            Some((
                format!(
                    "{{ type: nats, config: {{ url: \"${{env:FAUCET_CRASH_NATS_URL}}\", \
                     subject: \"{s}.events\", stream: {a}, create_stream: true }} }}"
                ),
                format!("{{ config: {{ subject: \"{s}.events_b\", stream: {b} }} }}"),
            ))
        }
        _ => None,
    }
}

/// The JetStream streams of a [`Kind::Nats`] case: row `a`'s and row `b`'s.
#[cfg(feature = "nats")]
fn nats_streams(schema: &str) -> [String; 2] {
    [format!("{schema}_a"), format!("{schema}_b")].map(|s| s.to_uppercase())
}

/// The postgres sink of the pipeline (`mode`: its write mode and key) and row `b`'s
/// override.
fn pg_sinks(s: &str, mode: &str) -> (String, String) {
    (
        format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
             table: {s}.target{mode} }} }}"
        ),
        format!("{{ config: {{ table: {s}.target_b }} }}"),
    )
}

/// The process state letter of `/proc/PID/stat` (`T` when stopped).
pub(crate) fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// One `GET` on loopback; the body.
pub(crate) fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// The address of `faucet run: metrics on http://ADDR/metrics` in `stderr`.
pub(crate) fn metrics_addr(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .map(|a| a.trim_end_matches("/metrics").to_owned())
}

/// The value of the series `name{pipeline="zombie",row="a"}`, if exposed.
fn series(text: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{pipeline=\"{NAME}\",row=\"a\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// What the zombie did after SIGCONT.
struct Zombie {
    code: i32,
    stderr: String,
    refused: f64,
}

/// Runs one scenario: the zombie stopped at `point` of its third page, a second run to
/// completion, SIGCONT. `disable_fence`: the control.
fn zombie_at(case: &Case, point: &str, disable_fence: bool) -> Zombie {
    // Row `b`'s lease, held by the test, keeps the zombie alive after row `a` ended.
    let rt = runtime();
    let store = rt.block_on(async {
        let store = PostgresStateStore::connect_with(&pg_url(), 1, &case.state)
            .await
            .expect("connect the state store");
        store.ensure_table().await.expect("ensure_table");
        store
    });
    let holder = LeaseHolder::this_process();
    let lease_b = match rt
        .block_on(store.acquire_lease(&LeaseRequest::new(
            &format!("{NAME}::b"),
            &holder,
            Duration::from_secs(600),
        )))
        .expect("acquire row b's lease")
    {
        LeaseOutcome::Acquired(l) => l,
        other => panic!("row b's lease: {other:?}"),
    };

    let mut cmd = faucet();
    cmd.env("FAUCET_CRASH_REDIS_URL", faucet_test_support::redis_url())
        .env("FAUCET_CRASH_NATS_URL", faucet_test_support::nats_url())
        .current_dir(case.dir.path())
        .args([
            "run",
            "p.yaml",
            "--lease-ttl",
            TTL,
            "--wait-for-lease",
            "120s",
            "--metrics-listen",
            "127.0.0.1:0",
            "--log-level",
            "info",
        ])
        .env("FAUCET_FAULT", format!("{point}:3:stop"));
    if disable_fence {
        cmd.env(faucet_core::fault::DISABLE_FENCE_ENV, "1");
    }
    let mut zombie = Spawned::spawn(&case.dir, &format!("zombie-{point}"), &mut cmd);
    zombie.wait_until("the stop at the fault point", |z| {
        proc_state(z.pid) == Some('T') && z.stderr().contains("stopping (SIGSTOP)")
    });
    let addr = metrics_addr(&zombie.stderr()).expect("the metrics address");

    if case.kind == Kind::Upsert {
        // Every source row changes while the zombie holds its page of old values.
        sql(&format!(
            "UPDATE {}.src SET v = v + 1000000, updated_at = updated_at + interval '1 day'",
            case.schema
        ));
    }
    let taker = faucet()
        .env("FAUCET_CRASH_REDIS_URL", faucet_test_support::redis_url())
        .env("FAUCET_CRASH_NATS_URL", faucet_test_support::nats_url())
        .current_dir(case.dir.path())
        .args([
            "run",
            "p.yaml",
            "--row",
            "a",
            "--lease-ttl",
            TTL,
            "--wait-for-lease",
            "60s",
        ])
        .output()
        .expect("run the taker");
    assert!(
        taker.status.success(),
        "the second run: {}",
        String::from_utf8_lossy(&taker.stderr)
    );
    let taken = case.entry();

    zombie.signal("-CONT");
    let failures = "faucet_run_failures_total";
    let mut text = String::new();
    zombie.wait_until("row a's failure counted", |_| {
        text = http_get(&addr, "/metrics");
        series(&text, failures) == Some(1.0)
    });
    let refused = series(&text, "faucet_fence_refused_writes_total")
        .unwrap_or_else(|| panic!("no refused-writes series:\n{text}"));
    rt.block_on(store.release_lease(&lease_b))
        .expect("release row b");
    let ended = zombie.wait(Duration::from_secs(60));
    assert_eq!(
        case.entry(),
        taken,
        "the stopped run moved the bookmark after it woke"
    );
    Zombie {
        code: ended.code,
        stderr: ended.stderr,
        refused,
    }
}

/// The zombie's page is refused at `before_write` and `before_commit`, its bookmark at
/// `after_flush`; the target equals the source each time.
fn refused_at_every_point(kind: Kind, tag: &str) {
    for (i, point) in ["before_write", "before_commit", "after_flush"]
        .into_iter()
        .enumerate()
    {
        let case = Case::new(kind, &format!("{tag}{i}"));
        let z = zombie_at(&case, point, false);
        assert_ne!(z.code, 0, "{point}: the zombie exited 0:\n{}", z.stderr);
        if point == "after_flush" {
            assert!(
                z.stderr
                    .contains(&format!("lost the lease on state key `{NAME}::a`")),
                "{point}:\n{}",
                z.stderr
            );
            assert_eq!(z.refused, 0.0, "{point}: nothing for the sink to refuse");
        } else {
            assert!(
                z.stderr
                    .contains(&format!("the sink refused a page of state key `{NAME}::a`")),
                "{point}:\n{}",
                z.stderr
            );
            assert_eq!(z.refused, 1.0, "{point}: the refusal is counted");
        }
        match kind {
            Kind::Upsert => assert_eq!(
                case.upsert_mismatches(),
                0,
                "{point}: the upsert target differs from the source"
            ),
            Kind::Atomic => {
                check_exactly_once(&format!("{}.target", case.schema), ROWS, point);
            }
            #[cfg(feature = "redis-streams")]
            Kind::Streams => {
                let ids: Vec<i64> =
                    crate::support::bus::redis_streams(&format!("{}:events", case.schema))
                        .iter()
                        .map(|m| m.fields["value"]["id"].as_i64().expect("id"))
                        .collect();
                assert!(
                    ids == (0..ROWS as i64).collect::<Vec<_>>(),
                    "{point}: the stream holds {} entries, not every row once in order",
                    ids.len()
                );
            }
            #[cfg(feature = "nats")]
            Kind::Nats => {
                let [stream, _] = nats_streams(&case.schema);
                let ids: Vec<i64> =
                    crate::support::bus::nats_messages(&stream, &format!("{}.events", case.schema))
                        .iter()
                        .map(|m| m.fields["value"]["id"].as_i64().expect("id"))
                        .collect();
                assert!(
                    ids == (0..ROWS as i64).collect::<Vec<_>>(),
                    "{point}: the stream holds {} messages, not every row once in order",
                    ids.len()
                );
            }
        }
    }
}

#[test]
fn an_upsert_target_refuses_a_zombie_at_every_point_of_the_page_cycle() {
    refused_at_every_point(Kind::Upsert, "up");
}

#[test]
fn an_atomic_watermark_target_refuses_a_zombie_at_every_point_of_the_page_cycle() {
    refused_at_every_point(Kind::Atomic, "aw");
}

/// The same zombie into Redis streams: its page finds the newer fence (or its `EXEC` the
/// fence changed) and writes nothing; the stream holds every row once, in order.
#[cfg(feature = "redis-streams")]
#[test]
fn a_redis_streams_target_refuses_a_zombie_at_every_point_of_the_page_cycle() {
    refused_at_every_point(Kind::Streams, "rs");
}

/// The same zombie into NATS JetStream: its page's first publish expects the stream
/// sequence the newer run has moved past (and the last message carries the newer fence), so
/// the server stores nothing of it; the stream holds every row once, in order.
#[cfg(feature = "nats")]
#[test]
fn a_nats_target_refuses_a_zombie_at_every_point_of_the_page_cycle() {
    refused_at_every_point(Kind::Nats, "nt");
}

/// The control: without its fence, the zombie stopped at `before_write` writes its page of
/// stale values over the newer rows of the run that took over — exactly one page of rows
/// differs from the source afterwards (its bookmark is still refused: the lease is lost).
#[test]
fn control_without_the_fence_a_zombie_overwrites_newer_rows() {
    let case = Case::new(Kind::Upsert, "ctl");
    let z = zombie_at(&case, "before_write", true);
    assert!(
        z.stderr.contains("FAUCET_TEST_DISABLE_FENCE=1"),
        "the switch is logged:\n{}",
        z.stderr
    );
    assert_ne!(z.code, 0, "{}", z.stderr);
    assert_eq!(z.refused, 0.0);
    assert_eq!(
        case.upsert_mismatches(),
        BATCH,
        "the unfenced zombie's page overwrote newer rows"
    );
}
