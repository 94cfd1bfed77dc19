//! `mongodb-cdc` → jsonl through the binary, state in PostgreSQL, against SecantusDB
//! (`FAUCET_TEST_MONGODB_URL`) when the process dies: aborted at every fault point this
//! pipeline passes and SIGKILLed at random instants while it reads a workload of inserts,
//! `$set` / `$unset` / `$inc` updates, upserts, replaces, deletes and a collection dropped and
//! recreated. The records replayed in order (`c`/`u` set the document, `d` removes it, `t`
//! empties the collection) equal `find()` of every collection: nothing lost; a repeat (the
//! page in flight at a crash) replays to the same state.
//!
//! And when the server dies: a private SecantusDB (`--sync-on-commit`) SIGKILLed and restarted
//! while a run is stopped mid-read (SIGSTOP at a fault point, its change stream open). The run
//! carries on from its resume token or fails; either way the next run reads on from the
//! stored token and the replay equals `find()`. With an oplog too small to keep the token
//! across the restart, the run and every later run fail with the history-lost error (286,
//! "re-snapshot with faucet replicate") and write nothing: nothing is skipped silently.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use faucet_core::fault;
use faucet_test_support::private_mongo::PrivateMongo;
use faucet_test_support::{mongodb_url, pg_url, unique_suffix};
use serde_json::Value as Json;

use crate::lease_e2e::Spawned;
use crate::support::crash::{CrashScenario, abort_at_every_point, killed_at_random_instants};
use crate::support::mongo::mongo;
use crate::support::pg::sql;
use crate::support::{Dir, Run, faucet_unarmed};
use crate::zombie_fence::proc_state;

/// Operations of the workload (each run of `prepare` writes them again in a new database).
const OPS: usize = 600;

/// One round: the database, the directory of the pipeline, the state table.
#[derive(Default)]
struct Round {
    db: String,
    dir: String,
    state_table: String,
}

struct Scenario {
    url: String,
    /// The current round (the previous one is dropped when the next is prepared).
    current: Mutex<Round>,
}

impl Scenario {
    /// On the shared test server.
    fn new() -> Self {
        Self::on(mongodb_url())
    }

    /// On the server at `url`.
    fn on(url: String) -> Self {
        Self {
            url,
            current: Mutex::new(Round::default()),
        }
    }

    fn db(&self) -> String {
        self.current.lock().expect("lock").db.clone()
    }

    fn dir(&self) -> std::path::PathBuf {
        std::path::PathBuf::from(self.current.lock().expect("lock").dir.clone())
    }

    /// `faucet run --quiet` of the pipeline in `dir`, to its end.
    fn rerun(&self, dir: &Dir) -> Run {
        Run::from_output(
            self.faucet()
                .args(["run", "--quiet"])
                .current_dir(dir.path())
                .output()
                .expect("run faucet"),
        )
    }

    /// Drops the current round's database and state table.
    fn drop_round(&self) {
        let round = std::mem::take(&mut *self.current.lock().expect("lock"));
        if !round.db.is_empty() {
            mongo(&self.url, &format!("c.drop_database('{}')", round.db));
        }
        if !round.state_table.is_empty() {
            sql(&format!("DROP TABLE IF EXISTS {}", round.state_table));
        }
    }
}

/// Python that writes `ops` operations of a fixed random sequence (`seed`) into database
/// `db`; with `drop_b`, collection `b` is dropped halfway (and recreated by the writes after).
fn workload(db: &str, seed: u64, ops: usize, drop_b: bool) -> String {
    format!(
        "import random\nr = random.Random({seed})\nd = c['{db}']\n\
         for i in range({ops}):\n\
         \x20   coll = d['a'] if i % 3 else d['b']\n\
         \x20   k = r.randrange(40)\n\
         \x20   op = r.randrange(7)\n\
         \x20   if op == 0: coll.replace_one({{'_id': k}}, {{'_id': k, 'v': i, 's': 'r%d' % i, 'arr': [i, {{'x': i}}]}}, upsert=True)\n\
         \x20   elif op == 1: coll.update_one({{'_id': k}}, {{'$set': {{'s': 's%d' % i, 'n': {{'deep': i}}}}}}, upsert=True)\n\
         \x20   elif op == 2: coll.update_one({{'_id': k}}, {{'$unset': {{'s': ''}}}})\n\
         \x20   elif op == 3: coll.update_one({{'_id': k}}, {{'$inc': {{'v': 1}}}}, upsert=True)\n\
         \x20   elif op == 4: coll.delete_one({{'_id': k}})\n\
         \x20   else: coll.insert_one({{'_id': {seed} * 100000 + i, 'v': i, 'b': True, 'z': None, 't': 'é'}})\n\
         \x20   if {drop} and i == {half}: d['b'].drop()\n",
        drop = if drop_b { "True" } else { "False" },
        half = ops / 2
    )
}

/// The documents of every collection of `db`, `db.coll` → `_id` (as JSON text) → document.
fn find_all(url: &str, db: &str) -> BTreeMap<String, BTreeMap<String, Json>> {
    let out = mongo(
        url,
        &format!(
            "import json\nd = c['{db}']\n\
             print(json.dumps({{'{db}.' + n: list(d[n].find()) for n in d.list_collection_names()}}))"
        ),
    );
    let all: BTreeMap<String, Vec<Json>> = serde_json::from_str(out.trim()).expect("find json");
    all.into_iter()
        .map(|(coll, docs)| {
            let docs = docs
                .into_iter()
                .map(|d| (d["_id"].to_string(), d))
                .collect();
            (coll, docs)
        })
        .filter(|(_, docs): &(String, BTreeMap<String, Json>)| !docs.is_empty())
        .collect()
}

/// The change records of `out.jsonl` replayed in order.
fn replay(path: &Path) -> BTreeMap<String, BTreeMap<String, Json>> {
    let mut state: BTreeMap<String, BTreeMap<String, Json>> = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let r: Json = serde_json::from_str(line).expect("a json line");
        let table = r["table"].as_str().expect("table").to_owned();
        let docs = state.entry(table).or_default();
        match r["op"].as_str().expect("op") {
            "c" | "u" if !r["after"].is_null() => {
                docs.insert(r["after"]["_id"].to_string(), r["after"].clone());
            }
            // An update looked up after its document was deleted: the delete follows.
            "u" => {}
            "d" => {
                docs.remove(&r["before"]["_id"].to_string());
            }
            "t" => docs.clear(),
            other => panic!("unexpected op {other}: {r}"),
        }
    }
    state.retain(|_, docs| !docs.is_empty());
    state
}

impl CrashScenario for Scenario {
    fn prepare(&self, dir: &Path) {
        self.drop_round();
        let db = format!("crash_{}", unique_suffix());
        let start = mongo(
            &self.url,
            "r = c.admin.command('ping')['operationTime']\nprint(r.time, r.inc)",
        );
        let (t, i) = start.trim().split_once(' ').expect("t i");
        mongo(&self.url, &workload(&db, 7, OPS, true));
        let state_table = format!("mcrash_{}", unique_suffix());
        std::fs::write(
            dir.join("faucet.yaml"),
            format!(
                "version: 1\nname: mcrash\npipeline:\n  source: {{ type: mongodb-cdc, config: {{ \
                 connection_url: \"${{env:SOURCE_MONGODB_URL}}\", collections: [\"{db}.*\"], \
                 start: {{ at_operation_time: {{ t: {t}, i: {i} }} }} }} }}\n  \
                 sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n  \
                 state: {{ type: postgres, config: {{ url: \"${{env:STATE_PG_URL}}\", table: \
                 {state_table}, ensure_table: true }} }}\n  batch_size: 40\n"
            ),
        )
        .expect("config");
        *self.current.lock().expect("lock") = Round {
            db,
            dir: dir.to_string_lossy().into_owned(),
            state_table,
        };
    }

    fn check(&self, what: &str) {
        let want = find_all(&self.url, &self.db());
        let got = replay(&self.dir().join("out.jsonl"));
        assert!(!want.is_empty(), "the workload wrote documents");
        assert_eq!(got, want, "{what}: the replayed records differ from find()");
    }

    fn drop(&self) {
        self.drop_round();
    }

    fn faucet(&self) -> Command {
        let mut c = faucet_unarmed();
        c.env("SOURCE_MONGODB_URL", &self.url)
            .env("STATE_PG_URL", pg_url());
        c
    }

    /// A jsonl sink (`mid_page`, no `before_commit`) and the PostgreSQL state store (no
    /// `state_mid_put`, which only the file store passes).
    fn points(&self) -> Vec<&'static str> {
        vec![
            fault::MID_PAGE,
            fault::AFTER_WRITE,
            fault::AFTER_FLUSH,
            fault::AFTER_STATE_PUT,
        ]
    }
}

#[test]
fn aborted_at_every_fault_point_the_replay_equals_find() {
    abort_at_every_point(&Scenario::new());
}

#[test]
fn sigkilled_at_random_instants_the_replay_equals_find() {
    killed_at_random_instants(&Scenario::new());
}

/// A run of scenario `s` (on the private `server`) stopped (SIGSTOP) after its third
/// bookmark, its change stream open; the server SIGKILLed and started again, then
/// `after_restart` (writes) before the run gets SIGCONT. Returns the directory and how the
/// stopped run ended.
fn server_killed_under_a_stopped_run(
    s: &Scenario,
    server: &mut PrivateMongo,
    after_restart: impl FnOnce(&Scenario),
) -> (Dir, Run) {
    let dir = Dir::new();
    s.prepare(dir.path());
    let mut cmd = s.faucet();
    cmd.args(["run", "--quiet"])
        .current_dir(dir.path())
        .env(fault::ENV, format!("{}:3:stop", fault::AFTER_STATE_PUT));
    let mut run = Spawned::spawn(&dir, "stopped", &mut cmd);
    run.wait_until("the stop after the third bookmark", |z| {
        proc_state(z.pid) == Some('T') && z.stderr().contains("stopping (SIGSTOP)")
    });
    server.kill();
    server.start_again();
    after_restart(s);
    run.signal("-CONT");
    let ended = run.wait(Duration::from_secs(180));
    (dir, ended)
}

#[test]
fn the_server_sigkilled_mid_run_and_restarted_the_run_resumes_from_its_token() {
    let mut server = PrivateMongo::start(&[]);
    let s = Scenario::on(server.url());
    let _cleanup = crate::support::crash::Cleanup(&s);
    let (dir, ended) = server_killed_under_a_stopped_run(&s, &mut server, |s| {
        // Written after the restart: the next run must read them too.
        mongo(&s.url, &workload(&s.db(), 8, 200, false));
    });
    eprintln!(
        "mongodb_cdc_crash: the run under the server's kill ended {}: {}",
        ended.code,
        ended.stderr.trim()
    );
    s.rerun(&dir).expect_code(0);
    s.check("after the server's kill -9 and restart");
}

#[test]
fn the_server_sigkilled_and_its_oplog_pruned_past_the_token_every_run_fails_history_lost() {
    // SecantusDB prunes its oplog to the newest 5 entries every 1,000 writes.
    let mut server = PrivateMongo::start(&["--oplog-max-entries", "5"]);
    let s = Scenario::on(server.url());
    let _cleanup = crate::support::crash::Cleanup(&s);
    let (dir, ended) = server_killed_under_a_stopped_run(&s, &mut server, |s| {
        mongo(&s.url, &workload(&s.db(), 9, 1_200, false));
    });
    assert_ne!(
        ended.code, 0,
        "the run whose token left the oplog succeeded: {}",
        ended.stderr
    );
    let written = std::fs::read_to_string(dir.join("out.jsonl")).unwrap_or_default();
    for attempt in 0..2 {
        let rerun = s.rerun(&dir);
        assert_ne!(rerun.code, 0, "rerun {attempt} succeeded: {}", rerun.stderr);
        rerun.stderr_has(&["286", "faucet replicate"]);
        assert_eq!(
            std::fs::read_to_string(dir.join("out.jsonl")).unwrap_or_default(),
            written,
            "rerun {attempt} wrote records past a lost history"
        );
    }
}
