//! `faucet replicate` from MongoDB through the real binary, against a private SecantusDB
//! (`--sync-on-commit`), while a writer updates (`$set`, `$inc`), replaces, inserts and
//! deletes documents of the copied collection:
//!
//! * into a **jsonl (append)** file, aborted twice mid-copy after a bookmark is stored
//!   (`after_state_put`: the file holds exactly the bookmarked pages), then resumed: every
//!   `_id`'s `op: r` at most once, no insert of a document already present (a change the
//!   copy holds is never delivered again), and the records replayed in order equal `find()`;
//! * into a **postgres upsert** target (deletes and updates on different `_id`s, so that
//!   `update_lookup` always finds the document), aborted between a page's write and its
//!   bookmark (`after_flush`) and SIGKILLed at random instants, then resumed: the target
//!   equals `find()` value by value.
//!
//! The method under test is `faucet_connectors::mongodb::replicate`'s: the change stream
//! anchored first, the documents changed after the anchor left out of the copy.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use faucet_test_support::private_mongo::PrivateMongo;
use faucet_test_support::{mongodb_url, unique_suffix};
use serde_json::Value as Json;

use crate::support::mongo::mongo;
use crate::support::pg::{exec, faucet_with_pg_url};
use crate::support::replicate::{aborted_mid_snapshot, killed_after, stored};
use crate::support::{output_of_success, pg_pool, runtime};

/// Documents in the collection before the copy starts.
const DOCS: i64 = 2000;
/// Documents per page.
const BATCH: u64 = 100;

/// The writer: until `stop` exists, `$set` / `$inc` updates, replaces, inserts of new `_id`s
/// and deletes on `db.items`, every document `{_id, v, note}`; prints how many it wrote.
/// `apart`: deletes take odd `_id`s and updates even ones, so no update's lookup finds its
/// document deleted (an update without a document is refused by a keyed sink; SecantusDB's
/// `full_document: required` misses post-images under this writer).
fn writer(url: &str, db: &str, stop: &Path, apart: bool) -> Child {
    let program = format!(
        "import os, random, time, pymongo\n\
         c = pymongo.MongoClient({url:?})\n\
         items = c[{db:?}]['items']\n\
         r = random.Random(11)\n\
         i = 0\n\
         while not os.path.exists({stop:?}):\n\
         \x20   i += 1\n\
         \x20   k = r.randrange({DOCS} * 2)\n\
         \x20   op = i % 6\n\
         \x20   if {apart}: k = (k | 1) if op == 4 else (k & ~1)\n\
         \x20   if op in (0, 1): items.update_one({{'_id': k}}, {{'$set': {{'v': 1000000 + i, 'note': 'set%d' % i}}}})\n\
         \x20   elif op == 2: items.update_one({{'_id': k}}, {{'$inc': {{'v': 1}}}})\n\
         \x20   elif op == 3: items.replace_one({{'_id': k}}, {{'_id': k, 'v': 2000000 + i, 'note': 'rep%d' % i}}, upsert=True)\n\
         \x20   elif op == 4: items.delete_one({{'_id': k}})\n\
         \x20   else: items.insert_one({{'_id': {DOCS} * 2 + i, 'v': i, 'note': 'new'}})\n\
         \x20   time.sleep(0.002)\n\
         print(i)\n",
        stop = stop.to_string_lossy(),
        apart = if apart { "True" } else { "False" },
    );
    Command::new("python3")
        .args(["-c", &program])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs")
}

/// `DOCS` documents in `db.items`.
fn seed(url: &str, db: &str) {
    mongo(
        url,
        &format!(
            "d = c[{db:?}]\nd.create_collection('items')\n\
             d['items'].insert_many([{{'_id': i, 'v': i, 'note': 'n%d' % i}} for i in range({DOCS})])"
        ),
    );
}

/// `find()` of `db.items`: `_id` → `{"_id", "v", "note"}`.
fn source_docs(url: &str, db: &str) -> BTreeMap<i64, Json> {
    let out = mongo(
        url,
        &format!("import json\nprint(json.dumps(list(c[{db:?}]['items'].find())))"),
    );
    let docs: Vec<Json> = serde_json::from_str(out.trim()).expect("find json");
    docs.into_iter()
        .map(|d| (d["_id"].as_i64().expect("_id"), d))
        .collect()
}

fn config(dir: &Path, url: &str, db: &str, sink: &str) {
    std::fs::write(
        dir.join("faucet.yaml"),
        format!(
            "version: 1\nname: mrepl\npipeline:\n  \
             source: {{ type: mongodb-cdc, config: {{ connection_url: \"{url}\", \
             collections: [{db}.items] }} }}\n  \
             sink: {sink}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: {BATCH}\n"
        ),
    )
    .expect("config");
}

fn faucet(dir: &Path) -> Command {
    let mut c = faucet_with_pg_url("FAUCET_MREPL_PG_URL");
    c.args(["replicate", "--quiet"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Seeds a private server, starts the writer, runs `scenario`, stops the writer, runs a
/// catching-up replicate and hands over to `check` with the source's documents.
fn with_writer(
    sink: &str,
    apart: bool,
    scenario: impl FnOnce(&Path),
    check: impl FnOnce(&Path, BTreeMap<i64, Json>),
) {
    let server = PrivateMongo::start(&[]);
    let url = server.url();
    let db = format!("mrepl_{}", unique_suffix());
    seed(&url, &db);
    let dir = tempfile::tempdir().expect("tempdir");
    config(dir.path(), &url, &db, sink);
    let stop = dir.path().join("stop-writer");
    let writes = writer(&url, &db, &stop, apart);
    crate::support::with_cleanup(
        || {
            std::thread::sleep(Duration::from_millis(300));
            scenario(dir.path());
            std::fs::write(&stop, "").expect("stop the writer");
            let out = writes.wait_with_output().expect("writer");
            assert!(out.status.success(), "the writer failed");
            let n: u64 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("count");
            assert!(n > 100, "the writer wrote only {n} times");
            output_of_success(&mut faucet(dir.path()), "the catching-up run");
            let b = stored(dir.path()).expect("bookmark");
            assert!(
                b.get("resume_token").is_some() && b.get("snapshot").is_none(),
                "caught up, the bookmark is mongodb-cdc's: {b}"
            );
            check(dir.path(), source_docs(&url, &db));
        },
        || {
            let _ = std::fs::write(&stop, "");
            drop(server);
        },
    );
}

#[test]
fn mongodb_replicate_into_jsonl_aborted_twice_mid_copy_equals_find() {
    with_writer(
        "{ type: jsonl, config: { path: ./out/changes.jsonl } }",
        false,
        |dir| {
            let first = aborted_mid_snapshot(faucet(dir), dir, "after_state_put", 6);
            std::thread::sleep(Duration::from_millis(200));
            let second = aborted_mid_snapshot(faucet(dir), dir, "after_state_put", 5);
            assert_eq!(
                first["snapshot"]["start"], second["snapshot"]["start"],
                "a resumed copy keeps its anchor"
            );
            std::thread::sleep(Duration::from_millis(200));
            output_of_success(&mut faucet(dir), "the resumed run");
        },
        |dir, want| {
            let text = std::fs::read_to_string(dir.join("out/changes.jsonl")).expect("output");
            let records: Vec<Json> = text
                .lines()
                .map(|l| serde_json::from_str(l).expect("json line"))
                .collect();
            let copied = records.iter().filter(|r| r["op"] == "r").count();
            assert!(copied as i64 > DOCS / 2, "only {copied} documents copied");
            let mut docs: BTreeMap<i64, Json> = BTreeMap::new();
            let mut read = std::collections::HashSet::new();
            let id = |v: &Json| v["_id"].as_i64().expect("_id");
            for r in &records {
                match r["op"].as_str().expect("op") {
                    "r" => {
                        let k = id(&r["after"]);
                        assert!(read.insert(k), "`_id` {k} copied twice");
                        docs.insert(k, r["after"].clone());
                    }
                    "c" => {
                        let k = id(&r["after"]);
                        assert!(
                            docs.insert(k, r["after"].clone()).is_none(),
                            "an insert of `_id` {k}, which the copy already holds: {r}"
                        );
                    }
                    "u" if !r["after"].is_null() => {
                        docs.insert(id(&r["after"]), r["after"].clone());
                    }
                    // Looked up after its document was deleted: the delete follows.
                    "u" => {}
                    "d" => {
                        docs.remove(&id(&r["before"]));
                    }
                    other => panic!("unexpected op {other}: {r}"),
                }
            }
            assert_eq!(docs.len(), want.len(), "document count");
            for (k, doc) in &want {
                assert_eq!(docs.get(k), Some(doc), "`_id` {k}");
            }
        },
    );
}

#[test]
fn mongodb_replicate_into_postgres_upsert_aborted_and_killed_equals_find() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let schema = format!("mrepl_{}", unique_suffix());
    rt.block_on(exec(
        &pool,
        &format!(
            "CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.target (_id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL);"
        ),
    ));
    let sink = format!(
        "{{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_MREPL_PG_URL}}\", \
         table: {schema}.target, write_mode: upsert, key: [_id] }} }}"
    );
    let rounds = crate::support::soak_or(8, 3);
    crate::support::with_cleanup(
        || {
            with_writer(
                &sink,
                true,
                |dir| {
                    let b = aborted_mid_snapshot(faucet(dir), dir, "after_flush", 6);
                    assert!(b.to_string().contains("dirty"), "{b}");
                    for round in 0..rounds {
                        let after = Duration::from_millis(300 + 97 * (round % 5));
                        killed_after(faucet(dir), after);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    output_of_success(&mut faucet(dir), "the resumed run");
                },
                |_, want| {
                    let rows: Vec<(i64, i64, String)> = rt.block_on(async {
                        sqlx::query_as(&format!("SELECT _id, v, note FROM {schema}.target"))
                            .fetch_all(&pool)
                            .await
                            .expect("select")
                    });
                    let have: BTreeMap<i64, Json> = rows
                        .into_iter()
                        .map(|(id, v, note)| {
                            (id, serde_json::json!({"_id": id, "v": v, "note": note}))
                        })
                        .collect();
                    assert_eq!(have.len(), want.len(), "row count");
                    for (k, doc) in &want {
                        assert_eq!(have.get(k), Some(doc), "`_id` {k}");
                    }
                },
            );
        },
        || {
            rt.block_on(exec(
                &pool,
                &format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
            ));
        },
    );
}

#[test]
fn a_collection_listed_later_is_copied_and_the_others_stream_on() {
    let url = mongodb_url();
    let db = format!("mrepl_late_{}", unique_suffix());
    mongo(
        &url,
        &format!(
            "d = c[{db:?}]\nd['a'].insert_many([{{'_id': i, 'v': i}} for i in range(30)])\n\
             d['b'].insert_many([{{'_id': 'k%d' % i, 'v': i}} for i in range(20)])"
        ),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let write_config = |collections: &str| {
        std::fs::write(
            dir.path().join("faucet.yaml"),
            format!(
                "version: 1\nname: mlate\npipeline:\n  \
                 source: {{ type: mongodb-cdc, config: {{ connection_url: \"{url}\", \
                 collections: [{collections}] }} }}\n  \
                 sink: {{ type: jsonl, config: {{ path: ./out/changes.jsonl }} }}\n  \
                 state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: 7\n"
            ),
        )
        .expect("config");
    };
    crate::support::with_cleanup(
        || {
            write_config(&format!("{db}.a"));
            output_of_success(&mut faucet(dir.path()), "the first replicate");
            let first = stored(dir.path()).expect("bookmark");
            assert_eq!(
                first["copied"],
                serde_json::json!([format!("{db}.a")]),
                "{first}"
            );
            // Written after the copy: `a`'s change streams on; `b` is not listed yet.
            mongo(
                &url,
                &format!(
                    "d = c[{db:?}]\nd['a'].update_one({{'_id': 3}}, {{'$set': {{'v': 300}}}})\n\
                     d['b'].update_one({{'_id': 'k4'}}, {{'$set': {{'v': 400}}}})\n\
                     d['b'].delete_one({{'_id': 'k5'}})"
                ),
            );
            write_config(&format!("{db}.a, {db}.b"));
            output_of_success(&mut faucet(dir.path()), "the replicate with b listed");
            let text = std::fs::read_to_string(dir.path().join("out/changes.jsonl")).expect("out");
            let records: Vec<Json> = text
                .lines()
                .map(|l| serde_json::from_str(l).expect("json line"))
                .collect();
            let count = |table: &str, op: &str| {
                records
                    .iter()
                    .filter(|r| r["table"] == format!("{db}.{table}") && r["op"] == op)
                    .count()
            };
            assert_eq!(count("a", "r"), 30, "a copied once");
            assert_eq!(count("a", "u"), 1, "a's update streamed on");
            // The late copy's anchor is the stored bookmark: `b`'s documents changed after it
            // are left out of the copy and arrive as their changes.
            assert_eq!(count("b", "r"), 18, "b copied late, without k4 and k5");
            assert_eq!(
                (count("b", "u"), count("b", "d")),
                (1, 1),
                "k4, k5 as changes"
            );
            assert!(
                !records.iter().any(|r| r["op"] == "r"
                    && ["k4", "k5"].contains(&r["after"]["_id"].as_str().unwrap_or(""))),
                "a document changed after the anchor was copied too"
            );
            let k4 = records
                .iter()
                .find(|r| r["op"] == "u" && r["after"]["_id"] == "k4")
                .expect("k4's update");
            assert_eq!(k4["after"]["v"], 400);
            let last = stored(dir.path()).expect("bookmark");
            assert_eq!(
                last["copied"],
                serde_json::json!([format!("{db}.a"), format!("{db}.b")]),
                "{last}"
            );
        },
        || {
            mongo(&url, &format!("c.drop_database({db:?})"));
        },
    );
}
