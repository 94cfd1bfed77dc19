//! Effectively-once into PostgreSQL, proven by killing the real `faucet` binary (issue 5,
//! "Effectively-once, proven by killing processes"; docs/run-loop.md, invariant 4). Each pair runs
//! with `delivery: effectively_once`, is aborted at every fault point (`FAUCET_FAULT`) and
//! SIGKILLed at pseudo-random instants, restarted until done, and the target compared with
//! the source: lost = 0, duplicates = 0, values exact.
//!
//! * csv → postgres **upsert** by `id`: the target equals the CSV (last occurrence per key).
//! * The state entry deleted between crash and restart, for csv → postgres append (atomic
//!   watermark), csv → postgres upsert, query → postgres upsert and postgres-cdc → postgres:
//!   the sink's commit token re-anchors the source (atomic watermark), or the upsert absorbs
//!   the replay (keyed upsert; the query source restarts from the beginning). The run loop's
//!   lost-bookmark guard (a first run into an append target that holds data is refused)
//!   applies only to at-least-once runs, so these restarts succeed.
//! * postgres-cdc → postgres **append** (no key; each change record becomes a row, so a
//!   replayed change shows as a duplicate) and **upsert** (changes applied by key), against a
//!   workload of inserts, updates and deletes: the appended rows equal the changes an
//!   independent `test_decoding` slot saw, once each and in commit order; the upserted
//!   table equals the source table.
//!
//! PostgreSQL with wal_level=logical from `FAUCET_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`; `scripts/services.sh` starts it); each test in
//! its own schema, slots and publication, dropped at the end. `FAUCET_SOAK=1` runs more
//! kills and fault hits.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use crate::support::bookmark_of;
use crate::support::pg::{
    BATCH, Change, KILL_BATCH, Pair, Scenario, abort_at_every_point, kill_after,
    killed_at_random_instants, lsn_value, query, run_aborted_at, run_to_completion, sql,
    state_lost_at_every_point, table_exists, test_decoding_changes, unique_suffix,
};

/// What the restart after a deleted state entry tells the user when the sink's commit token
/// re-anchors the source.
const RE_ANCHORED: &str = "the sink's commit token is ahead of the state store";

fn soak() -> bool {
    std::env::var("FAUCET_SOAK").is_ok()
}

// ---- csv → postgres upsert -------------------------------------------------------------

#[test]
fn csv_into_upsert_is_exactly_once_across_aborts_at_every_fault_point() {
    abort_at_every_point(&Scenario::new(Pair::CsvUpsert, "points", BATCH));
}

#[test]
fn csv_into_upsert_survives_sigkill() {
    killed_at_random_instants(&Scenario::new(Pair::CsvUpsert, "kill", KILL_BATCH));
}

// ---- state entry deleted between crash and restart ---------------------------------------

#[test]
fn csv_into_append_with_its_state_deleted_resumes_from_the_commit_token() {
    let told = state_lost_at_every_point(&Scenario::new(Pair::CsvAppend, "lost", BATCH));
    for (i, stderr) in told.iter().enumerate() {
        assert!(
            stderr.contains(RE_ANCHORED),
            "restart {i} did not say it resumed from the sink's token: {stderr}"
        );
    }
}

#[test]
fn csv_into_upsert_with_its_state_deleted_is_still_exact() {
    let told = state_lost_at_every_point(&Scenario::new(Pair::CsvUpsert, "lost", BATCH));
    // csv is deterministic and the file store durable: the atomic watermark is derived here
    // too, so the token re-anchors the source before the upsert would have to absorb anything.
    for (i, stderr) in told.iter().enumerate() {
        assert!(
            stderr.contains(RE_ANCHORED),
            "restart {i} did not say it resumed from the sink's token: {stderr}"
        );
    }
}

#[test]
fn query_into_upsert_with_its_state_deleted_is_still_exact() {
    // Keyed upsert: the query source has no token to resume from and reads from the start;
    // the upsert absorbs the replay (checked value by value).
    state_lost_at_every_point(&Scenario::new(Pair::QueryUpsert, "lost", BATCH));
}

/// The contrast: query → postgres **append** is at-least-once (the query does not replay, and
/// there is no key), so no token can re-anchor it. With its state entry deleted after a
/// finished run, the next run must be refused by the lost-bookmark guard instead of appending
/// the whole source a second time.
#[test]
fn query_into_append_at_least_once_with_its_state_deleted_is_refused_not_doubled() {
    let s = format!("eo_lost_append_{}", std::process::id());
    sql(&format!(
        "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}; \
         CREATE TABLE {s}.src (id int PRIMARY KEY, v int NOT NULL); \
         INSERT INTO {s}.src SELECT g, g * 3 FROM generate_series(0, 499) g; \
         CREATE TABLE {s}.target (id int, v int)"
    ));
    crate::support::with_cleanup(
        || {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::write(
                dir.path().join("faucet.yaml"),
                format!(
                    "version: 1\nname: lostappend\npipeline:\n  \
                     source: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
                     table: {s}.src, replication_method: incremental, replication_key: [id] }} }}\n  \
                     sink: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
                     table: {s}.target }} }}\n  \
                     state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: 100\n"
                ),
            )
            .expect("config");
            let out = run_to_completion(dir.path());
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("at-least-once"),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
            check_exactly_once_500(&s);
            std::fs::remove_file(dir.path().join("state/lostappend.json"))
                .expect("delete the state");
            let again = crate::support::pg::faucet()
                .args(["run", "--quiet"])
                .current_dir(dir.path())
                .output()
                .expect("spawn faucet");
            let err = String::from_utf8_lossy(&again.stderr);
            assert!(!again.status.success(), "must not succeed: {err}");
            assert!(
                err.contains("no bookmark under state key `lostappend`")
                    && err.contains("the `postgres` sink already holds data"),
                "the refusal names the state key and the sink: {err}"
            );
            check_exactly_once_500(&s);
        },
        || {
            sql(&format!("DROP SCHEMA IF EXISTS {s} CASCADE"));
        },
    );
}

fn check_exactly_once_500(schema: &str) {
    crate::support::pg::check_exactly_once(&format!("{schema}.target"), 500, "query → append");
}

// ---- postgres-cdc → postgres -----------------------------------------------------------

/// Change records per page in the CDC tests: smaller with `FAUCET_SOAK`, whose more fault
/// hits need more pages of the same workload (every crash moves a pipeline on by a few
/// pages, and the last point's last hit still needs that many pages left to reach).
fn cdc_batch() -> usize {
    crate::support::soak_or(20, 50)
}

/// When a pipeline's state entry is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoseState {
    /// Never: the state store and the token disagree only by the page in flight.
    Never,
    /// After every crash.
    Always,
    /// After every other crash.
    EveryOther,
}

/// One `faucet` pipeline reading the shared slot-per-pipeline change stream.
struct CdcPipeline {
    dir: tempfile::TempDir,
    /// The pipeline name = the state key = the token scope.
    name: String,
    slot: String,
    lose_state: LoseState,
}

impl CdcPipeline {
    fn state_file(&self) -> PathBuf {
        self.dir
            .path()
            .join("state")
            .join(format!("{}.json", self.name))
    }

    /// Deletes the state entry, as `lose_state` says for the `crash`-th crash (1-based).
    fn maybe_lose_state(&self, crash: u64) {
        let lose = match self.lose_state {
            LoseState::Never => false,
            LoseState::Always => true,
            LoseState::EveryOther => crash % 2 == 1,
        };
        if lose {
            match std::fs::remove_file(self.state_file()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("deleting {}: {e}", self.state_file().display()),
            }
        }
    }

    /// The LSN of the persisted bookmark, if a page's bookmark was persisted.
    fn persisted_lsn(&self) -> Option<u64> {
        let text = std::fs::read(self.state_file()).ok()?;
        let v = bookmark_of(serde_json::from_slice(&text).expect("a whole state file"));
        v["lsn"].as_str().map(lsn_value)
    }
}

/// A source table with a publication, its change stream read by several pipelines (a slot
/// each) and, for the append test, by an oracle `test_decoding` slot.
struct CdcWorld {
    schema: String,
    publication: String,
    oracle: Option<String>,
    pipelines: Vec<CdcPipeline>,
}

fn confirmed_flush(slot: &str) -> u64 {
    let rows: Vec<(String,)> = query(&format!(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '{slot}'"
    ));
    lsn_value(&rows.first().expect("the slot exists").0)
}

impl CdcWorld {
    /// A schema with the table `items` and a publication of it.
    fn new(tag: &str) -> Self {
        let suffix = format!("{tag}_{}", unique_suffix());
        let schema = format!("eo_cdc_{suffix}");
        let publication = format!("eo_pub_{suffix}");
        let s = &schema;
        sql(&format!(
            "CREATE SCHEMA {s}; CREATE SEQUENCE {s}.seq; \
             CREATE TABLE {s}.items (id int PRIMARY KEY, v bigint NOT NULL, note text NOT NULL); \
             CREATE PUBLICATION {publication} FOR TABLE {s}.items"
        ));
        Self {
            schema,
            publication,
            oracle: None,
            pipelines: Vec::new(),
        }
    }

    /// A slot name unique to this world.
    fn slot_name(&self, name: &str) -> String {
        format!("{name}_{}", self.schema)
    }

    /// Adds a pipeline `name` into `sink` (a YAML flow mapping) with a slot of its own,
    /// created now (so, before the workload, it sees all of it).
    fn add_pipeline(&mut self, name: &str, sink: &str, lose_state: LoseState) {
        let slot = self.slot_name(name);
        // Each on its own: a slot cannot be created in a transaction that wrote.
        sql(&format!(
            "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
        ));
        // Registered before anything else can fail, so the cleanup drops it.
        let dir = tempfile::tempdir().expect("tempdir");
        self.pipelines.push(CdcPipeline {
            dir,
            name: name.to_owned(),
            slot: slot.clone(),
            lose_state,
        });
        let dir = self.pipelines.last().map(|p| p.dir.path()).expect("pushed");
        std::fs::write(
            dir.join("faucet.yaml"),
            format!(
                "version: 1\nname: {name}\npipeline:\n  \
                 source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
                 slot_name: {slot}, publication: {publication}, tables: [{s}.items] }} }}\n  \
                 sink: {sink}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  \
                 delivery: effectively_once\n  batch_size: {batch}\n",
                publication = self.publication,
                s = self.schema,
                batch = cdc_batch(),
            ),
        )
        .expect("config");
    }

    /// Adds the oracle: a `test_decoding` slot that records every change independently.
    fn add_oracle(&mut self) {
        let slot = self.slot_name("oracle");
        sql(&format!(
            "SELECT pg_create_logical_replication_slot('{slot}', 'test_decoding')"
        ));
        self.oracle = Some(slot);
    }

    /// The workload: separate transactions of inserts, updates and deletes, and one
    /// transaction of 830 changes (so pages end inside it). Every insert and update takes a
    /// fresh `v`, so `(op, id, v)` names one change.
    fn workload(&self) {
        let s = &self.schema;
        sql(&format!(
            "INSERT INTO {s}.items SELECT g, nextval('{s}.seq'), 'n' || g FROM generate_series(1, 800) g"
        ));
        for k in 0..10 {
            sql(&format!(
                "UPDATE {s}.items SET v = nextval('{s}.seq') WHERE id % 10 = {k}"
            ));
        }
        sql(&format!(
            "BEGIN;
             UPDATE {s}.items SET v = nextval('{s}.seq'), note = note || '+';
             DELETE FROM {s}.items WHERE id > 790;
             INSERT INTO {s}.items SELECT g, nextval('{s}.seq'), 'big' || g FROM generate_series(801, 820) g;
             COMMIT;"
        ));
        sql(&format!("DELETE FROM {s}.items WHERE id % 7 = 0"));
        sql(&format!(
            "INSERT INTO {s}.items SELECT g, nextval('{s}.seq'), 'late, \"q\" ' || g FROM generate_series(900, 950) g"
        ));
    }

    /// Crashes every pipeline at every fault point (hits 1 and 3; more with FAUCET_SOAK) and
    /// with SIGKILLs between new updates, deleting state entries as each pipeline says; then
    /// runs each to completion. Checks after every crash that a slot whose state is kept
    /// was never acknowledged past the durable bookmark: the later of the state store's and
    /// the commit token's (docs/run-loop.md, invariant 2).
    fn crash_and_finish(&self) {
        let hits: &[u32] = if soak() { &[1, 2, 3, 5] } else { &[1, 3] };
        let initial: Vec<u64> = self
            .pipelines
            .iter()
            .map(|p| confirmed_flush(&p.slot))
            .collect();
        // With the atomic watermark the durable bookmark is the later of the state store's
        // and the sink's token: a run re-anchored at the token starts its session there.
        let check_ack = |p: &CdcPipeline, initial: u64, what: &str| {
            if p.lose_state == LoseState::Never {
                let confirmed = confirmed_flush(&p.slot);
                let persisted = p
                    .persisted_lsn()
                    .unwrap_or(initial)
                    .max(self.token_lsn(&p.name).unwrap_or(initial));
                assert!(
                    confirmed <= persisted,
                    "{}: after {what}, confirmed_flush_lsn {confirmed:X} passed the durable \
                     bookmark {persisted:X} (state store or commit token)",
                    p.name
                );
            }
        };
        let mut crashes = 0u64;
        for point in faucet_core::fault::ALL {
            for &hit in hits {
                crashes += 1;
                for (p, &init) in self.pipelines.iter().zip(&initial) {
                    run_aborted_at(p.dir.path(), &format!("{point}:{hit}"));
                    check_ack(p, init, &format!("{point}:{hit}"));
                    p.maybe_lose_state(crashes);
                }
            }
        }
        let s = &self.schema;
        let rounds = if soak() { 12 } else { 4 };
        let mut killed = 0;
        for round in 0..rounds {
            sql(&format!(
                "UPDATE {s}.items SET v = nextval('{s}.seq') WHERE id % 2 = {}",
                round % 2
            ));
            crashes += 1;
            for (p, &init) in self.pipelines.iter().zip(&initial) {
                let delay = Duration::from_millis(20 + (round * 37 % 160) as u64);
                if kill_after(p.dir.path(), delay) {
                    killed += 1;
                }
                check_ack(p, init, "SIGKILL");
                p.maybe_lose_state(crashes);
            }
        }
        assert!(
            killed > 0,
            "no run was killed mid-way: the SIGKILL rounds proved nothing"
        );
        for (p, &init) in self.pipelines.iter().zip(&initial) {
            let out = run_to_completion(p.dir.path());
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains("effectively-once (atomic watermark)"),
                "{}: the run reports another guarantee: {stdout}",
                p.name
            );
            check_ack(p, init, "the final run");
        }
        eprintln!(
            "postgres-cdc → postgres: {crashes} crash rounds × {} pipelines, {killed} SIGKILLed mid-run",
            self.pipelines.len()
        );
    }

    /// The LSN of the commit token the sink stored for state key `scope` (its token scope is
    /// `<state key> -> <table>`), if any.
    fn token_lsn(&self, scope: &str) -> Option<u64> {
        let tokens = format!("{}.faucet_commit_tokens", self.schema);
        if !table_exists(&tokens) {
            return None;
        }
        let rows: Vec<(Option<String>,)> = query(&format!(
            "SELECT bookmark->>'lsn' FROM {tokens} WHERE split_part(scope, ' -> ', 1) = '{scope}'"
        ));
        rows.into_iter().next()?.0.as_deref().map(lsn_value)
    }

    /// The changes to `items` the oracle slot saw, in commit order: `(op, id, v)`.
    fn oracle_changes(&self) -> Vec<Change> {
        let oracle = self.oracle.as_deref().expect("an oracle slot");
        let rows: Vec<(String,)> = query(&format!(
            "SELECT data FROM pg_logical_slot_get_changes('{oracle}', NULL, NULL)"
        ));
        test_decoding_changes(rows.iter().map(|(line,)| line.as_str()), &self.schema)
    }

    /// `items`, ordered by id: `(id, v, note)`.
    fn source_rows(&self) -> Vec<(i64, i64, String)> {
        query(&format!(
            "SELECT id::bigint, v, note FROM {}.items ORDER BY id",
            self.schema
        ))
    }

    /// Drops the slots (waiting for a still-running pipeline to let go), the publication and
    /// the schema; best effort, so it can run after a failure.
    fn cleanup(&self) {
        let slots = self
            .pipelines
            .iter()
            .map(|p| p.slot.clone())
            .chain(self.oracle.clone());
        crate::support::runtime().block_on(async {
            let mut c = crate::support::pg::connect().await;
            for slot in slots {
                for _ in 0..100 {
                    let active: Option<(bool,)> = sqlx::query_as(
                        "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                    )
                    .bind(&slot)
                    .fetch_optional(&mut c)
                    .await
                    .unwrap_or(None);
                    match active {
                        Some((true,)) => tokio::time::sleep(Duration::from_millis(100)).await,
                        Some((false,)) => {
                            let _ = sqlx::query("SELECT pg_drop_replication_slot($1)")
                                .bind(&slot)
                                .execute(&mut c)
                                .await;
                            break;
                        }
                        None => break,
                    }
                }
            }
            let _ = sqlx::raw_sql(&format!(
                "DROP PUBLICATION IF EXISTS {}; DROP SCHEMA IF EXISTS {} CASCADE",
                self.publication, self.schema
            ))
            .execute(&mut c)
            .await;
        });
    }

    /// Runs `body`, then cleans up whatever happened.
    fn run(mut self, body: impl FnOnce(&mut Self)) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut self)));
        self.cleanup();
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }
}

/// The change records a postgres append target holds, in the order they were committed
/// (`seq`), each with the row it leaves (`after`; `None` for a delete).
fn appended_changes(schema: &str, table: &str) -> Vec<(Change, Option<String>)> {
    /// op, table, before.id, after.id, after.v, after.note
    type Row = (
        String,
        String,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<String>,
    );
    let rows: Vec<Row> = query(&format!(
        "SELECT op, \"table\", (before->>'id')::bigint, (after->>'id')::bigint, \
             (after->>'v')::bigint, after->>'note' FROM {schema}.{table} ORDER BY seq"
    ));
    rows.into_iter()
        .map(|(op, from, before_id, after_id, v, note)| {
            assert_eq!(from, format!("{schema}.items"), "the record's table");
            let id = if op == "d" { before_id } else { after_id };
            ((op, id.expect("an id"), v), note)
        })
        .collect()
}

#[test]
fn cdc_into_append_is_exactly_once_across_crashes_and_lost_state() {
    let tables = [
        ("cdcplain", "log_plain", LoseState::Never),
        ("cdclost", "log_lost", LoseState::Always),
    ];
    CdcWorld::new("app").run(|w| {
        let url = "\"${env:FAUCET_CRASH_PG_URL}\"";
        for (name, table, lose) in tables {
            // A `seq` column records the commit order of the appended rows (the sink writes
            // only the records' fields).
            sql(&format!(
                "CREATE TABLE {}.{table} (seq bigserial, op text, \"table\" text, lsn text, \
                 commit_ts timestamptz, before jsonb, after jsonb, unchanged_toast text[])",
                w.schema
            ));
            let sink = format!(
                "{{ type: postgres, config: {{ connection_url: {url}, table: {}.{table} }} }}",
                w.schema
            );
            w.add_pipeline(name, &sink, lose);
        }
        w.add_oracle();
        w.workload();
        w.crash_and_finish();
        let expected = w.oracle_changes();
        assert!(
            expected.len() > 2_000,
            "a workload of {} changes",
            expected.len()
        );
        let source = w.source_rows();
        for (_, table, _) in tables {
            let got = appended_changes(&w.schema, table);
            let mut counts: HashMap<&Change, u64> = HashMap::new();
            for (c, _) in &got {
                *counts.entry(c).or_default() += 1;
            }
            let lost = expected.iter().filter(|c| !counts.contains_key(c)).count();
            let duplicates: u64 = counts.values().map(|n| n - 1).sum();
            assert_eq!(
                (lost, duplicates),
                (0, 0),
                "{table}: lost {lost}, duplicated {duplicates} of {} changes",
                expected.len()
            );
            let changes: Vec<&Change> = got.iter().map(|(c, _)| c).collect();
            assert!(
                changes == expected.iter().collect::<Vec<_>>(),
                "{table}: the changes are not those of the source, in commit order"
            );
            // Replaying the appended changes gives the source table, value by value.
            let mut replica: BTreeMap<i64, (i64, String)> = BTreeMap::new();
            for ((op, id, v), note) in got {
                match op.as_str() {
                    "d" => {
                        replica.remove(&id);
                    }
                    _ => {
                        replica.insert(id, (v.expect("v"), note.expect("note")));
                    }
                }
            }
            let replica: Vec<(i64, i64, String)> = replica
                .into_iter()
                .map(|(id, (v, note))| (id, v, note))
                .collect();
            assert!(
                replica == source,
                "{table}: replaying the appended changes does not give the source table"
            );
            eprintln!(
                "postgres-cdc → postgres append ({table}): {} changes, 0 lost, 0 duplicated",
                expected.len()
            );
        }
    });
}

#[test]
fn cdc_into_upsert_equals_the_source_across_crashes_and_lost_state() {
    CdcWorld::new("ups").run(|w| {
        sql(&format!(
            "CREATE TABLE {}.replica (id int PRIMARY KEY, v bigint NOT NULL, note text NOT NULL)",
            w.schema
        ));
        let sink = format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CRASH_PG_URL}}\", \
             table: {}.replica, write_mode: upsert, key: [id] }} }}",
            w.schema
        );
        w.add_pipeline("cdcupsert", &sink, LoseState::EveryOther);
        w.workload();
        w.crash_and_finish();
        let got: Vec<(i64, i64, String)> = query(&format!(
            "SELECT id::bigint, v, note FROM {}.replica ORDER BY id",
            w.schema
        ));
        let source = w.source_rows();
        assert!(source.len() > 600, "{} source rows", source.len());
        let lost = source
            .iter()
            .filter(|r| !got.iter().any(|g| g.0 == r.0))
            .count();
        let extra = got
            .iter()
            .filter(|g| !source.iter().any(|r| r.0 == g.0))
            .count();
        assert_eq!((lost, extra), (0, 0), "replica: lost {lost}, extra {extra}");
        assert!(
            got == source,
            "the replica differs from the source in values"
        );
    });
}
