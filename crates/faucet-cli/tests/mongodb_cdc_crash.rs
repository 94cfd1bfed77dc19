//! `mongodb-cdc` → jsonl through the binary, state in PostgreSQL, against SecantusDB
//! (`FAUCET_TEST_MONGODB_URL`) when the process dies: aborted at every fault point and
//! SIGKILLed at random instants while it reads a workload of inserts, `$set` / `$unset` /
//! `$inc` updates, upserts, replaces, deletes and a collection dropped and recreated. The
//! records replayed in order (`c`/`u` set the document, `d` removes it, `t` empties the
//! collection) equal `find()` of every collection: nothing lost; a repeat (the page in flight
//! at a crash) replays to the same state.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use faucet_test_support::{mongodb_url, pg_url, unique_suffix};
use serde_json::Value as Json;

use crate::support::crash::{CrashScenario, abort_at_every_point, killed_at_random_instants};
use crate::support::faucet_unarmed;
use crate::support::mongo::mongo;

/// Operations of the workload (each run of `prepare` writes them again in a new database).
const OPS: usize = 600;

struct Scenario {
    url: String,
    /// The database and the state table of the current round.
    current: Mutex<(String, String)>,
}

impl Scenario {
    fn new() -> Self {
        Self {
            url: mongodb_url(),
            current: Mutex::new((String::new(), String::new())),
        }
    }

    fn db(&self) -> String {
        self.current.lock().expect("lock").0.clone()
    }

    fn dir(&self) -> std::path::PathBuf {
        std::path::PathBuf::from(self.current.lock().expect("lock").1.clone())
    }
}

/// Python that writes the workload into database `db` (a fixed random sequence).
fn workload(db: &str) -> String {
    format!(
        "import random\nr = random.Random(7)\nd = c['{db}']\n\
         for i in range({OPS}):\n\
         \x20   coll = d['a'] if i % 3 else d['b']\n\
         \x20   k = r.randrange(40)\n\
         \x20   op = r.randrange(7)\n\
         \x20   if op == 0: coll.replace_one({{'_id': k}}, {{'_id': k, 'v': i, 's': 'r%d' % i, 'arr': [i, {{'x': i}}]}}, upsert=True)\n\
         \x20   elif op == 1: coll.update_one({{'_id': k}}, {{'$set': {{'s': 's%d' % i, 'n': {{'deep': i}}}}}}, upsert=True)\n\
         \x20   elif op == 2: coll.update_one({{'_id': k}}, {{'$unset': {{'s': ''}}}})\n\
         \x20   elif op == 3: coll.update_one({{'_id': k}}, {{'$inc': {{'v': 1}}}}, upsert=True)\n\
         \x20   elif op == 4: coll.delete_one({{'_id': k}})\n\
         \x20   else: coll.insert_one({{'_id': 1000 + i, 'v': i, 'b': True, 'z': None, 't': 'é'}})\n\
         \x20   if i == {half}: d['b'].drop()\n",
        half = OPS / 2
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
        let db = format!("crash_{}", unique_suffix());
        let start = mongo(
            &self.url,
            "r = c.admin.command('ping')['operationTime']\nprint(r.time, r.inc)",
        );
        let (t, i) = start.trim().split_once(' ').expect("t i");
        mongo(&self.url, &workload(&db));
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
        *self.current.lock().expect("lock") = (db, dir.to_string_lossy().into_owned());
    }

    fn check(&self, what: &str) {
        let want = find_all(&self.url, &self.db());
        let got = replay(&self.dir().join("out.jsonl"));
        assert!(!want.is_empty(), "the workload wrote documents");
        assert_eq!(got, want, "{what}: the replayed records differ from find()");
    }

    fn drop(&self) {
        let db = self.db();
        if !db.is_empty() {
            mongo(&self.url, &format!("c.drop_database('{db}')"));
        }
    }

    fn faucet(&self) -> Command {
        let mut c = faucet_unarmed();
        c.env("SOURCE_MONGODB_URL", &self.url)
            .env("STATE_PG_URL", pg_url());
        c
    }
}

#[test]
#[ignore = "unfinished: with the postgres state store state_mid_put:2 is never reached; needs the file store or a per-point scenario"]
fn aborted_at_every_fault_point_the_replay_equals_find() {
    abort_at_every_point(&Scenario::new());
}

#[test]
#[ignore = "unfinished: not yet run green; see aborted_at_every_fault_point_the_replay_equals_find"]
fn sigkilled_at_random_instants_the_replay_equals_find() {
    killed_at_random_instants(&Scenario::new());
}
