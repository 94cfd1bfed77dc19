//! The `mongodb-cdc` source against SecantusDB (FAUCET_TEST_MONGODB_URL, started by
//! scripts/services.sh; a private server for the history-lost test): every value type through
//! the change stream, the ops, drops and renames, bookmarks, idle positions, the conformance
//! battery, and error 286.

use faucet_connectors::mongodb::cdc::{Before, MongodbCdcConfig, MongodbCdcSource, StartPosition};
use faucet_core::testing::conformance;
use faucet_core::{FaucetError, Page, ReadOptions, Source};
use faucet_test_support::private_mongo::PrivateMongo;
use faucet_test_support::{Service, mongodb_url, unique_suffix};
use mongodb::bson::{self, Bson, Document, doc};
use serde_json::{Value as Json, json};

use crate::support::read_pages;

async fn client(url: &str) -> mongodb::Client {
    let client = Service::Mongodb.expect_up(mongodb::Client::with_uri_str(url).await);
    Service::Mongodb.expect_up(client.database("admin").run_command(doc! {"ping": 1}).await);
    client
}

/// A database of the test's own.
fn db_name() -> String {
    format!("faucet_{}", unique_suffix())
}

/// The server's operation time now, as a `start`.
async fn now(client: &mongodb::Client) -> StartPosition {
    let reply = client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .expect("ping");
    let ts = reply.get_timestamp("operationTime").expect("operationTime");
    StartPosition::AtOperationTime {
        t: ts.time,
        i: ts.increment + 1,
    }
}

fn records(pages: &[Page]) -> Vec<Json> {
    pages
        .iter()
        .flat_map(|p| p.rows().map(|r| r.to_json()).collect::<Vec<_>>())
        .collect()
}

fn source(url: &str, collections: &[String], start: StartPosition) -> MongodbCdcSource {
    let mut config = MongodbCdcConfig::new(url, collections.to_vec());
    config.start = start;
    MongodbCdcSource::new(config).expect("valid")
}

/// A document with every BSON type of the value table.
fn every_type(id: i32) -> Document {
    use bson::spec::BinarySubtype;
    doc! {
        "_id": id,
        "oid": bson::oid::ObjectId::parse_str("65f1c0ffee00000000000001").expect("oid"),
        "i32": i32::MIN,
        "i64": 9_007_199_254_740_993_i64,
        "dbl": 0.1,
        "nan": f64::NAN,
        "inf": f64::NEG_INFINITY,
        "dec": "12345678901234567890.1234567890123".parse::<bson::Decimal128>().expect("dec"),
        "date_old": bson::DateTime::from_millis(-14_182_940_000),
        // SecantusDB refuses dates past 9999 (a Python datetime); the unit tests cover them.
        "ts": bson::Timestamp { time: 1_700_000_000, increment: 7 },
        "bin": bson::Binary { subtype: BinarySubtype::Generic, bytes: vec![0, 1, 255] },
        "md5": bson::Binary { subtype: BinarySubtype::Md5, bytes: vec![0, 1, 255] },
        "uuid": bson::Binary { subtype: BinarySubtype::Uuid, bytes: vec![0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28, 0x95, 0x0e] },
        "re": bson::Regex { pattern: "^a.*".into(), options: "i".into() },
        "code": Bson::JavaScriptCode("function(){}".into()),
        "min": Bson::MinKey,
        "max": Bson::MaxKey,
        "nested": {"a": [1_i32, "x", {"b": true}], "n": Bson::Null},
        "null": Bson::Null,
        "text": "é\"",
    }
}

fn every_type_json(id: i32) -> Json {
    json!({
        "_id": id,
        "oid": "65f1c0ffee00000000000001",
        "i32": -2_147_483_648_i64,
        "i64": 9_007_199_254_740_993_i64,
        "dbl": 0.1,
        "nan": "NaN",
        "inf": "-Infinity",
        "dec": serde_json::Number::from_string_unchecked("12345678901234567890.1234567890123".into()),
        "date_old": "1969-07-20T20:17:40.000Z",
        "ts": {"$timestamp": {"t": 1_700_000_000, "i": 7}},
        "bin": "AAH/",
        "md5": {"$binary": {"base64": "AAH/", "subType": "05"}},
        "uuid": "0f8fad5b-d9cb-469f-a165-70867728950e",
        "re": {"$regularExpression": {"pattern": "^a.*", "options": "i"}},
        "code": {"$code": "function(){}"},
        "min": {"$minKey": 1},
        "max": {"$maxKey": 1},
        "nested": {"a": [1, "x", {"b": true}], "n": null},
        "null": null,
        "text": "é\"",
    })
}

#[tokio::test]
async fn every_value_type_and_op_arrives_as_a_change_record() {
    let url = mongodb_url();
    let client = client(&url).await;
    let db = db_name();
    let start = now(&client).await;
    let coll = client.database(&db).collection::<Document>("c");
    coll.insert_one(every_type(1)).await.expect("insert");
    coll.update_one(
        doc! {"_id": 1},
        doc! {"$set": {"text": "b"}, "$unset": {"null": ""}, "$inc": {"i32": 1}},
    )
    .await
    .expect("update");
    coll.replace_one(doc! {"_id": 1}, doc! {"_id": 1, "only": 2_i64})
        .await
        .expect("replace");
    coll.delete_one(doc! {"_id": 1}).await.expect("delete");
    // Another collection of the database is not read.
    client
        .database(&db)
        .collection::<Document>("other")
        .insert_one(doc! {"_id": 1})
        .await
        .expect("other");

    let src = source(&url, &[format!("{db}.c")], start);
    let got = records(&read_pages(&src, None, 100).await.expect("read"));
    let table = format!("{db}.c");
    let ops: Vec<(&str, &str)> = got
        .iter()
        .map(|r| {
            (
                r["op"].as_str().unwrap_or(""),
                r["table"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            ("c", &*table),
            ("u", &*table),
            ("u", &*table),
            ("d", &*table)
        ],
        "{got:#?}"
    );
    assert_eq!(got[0]["after"], every_type_json(1));
    assert_eq!(got[0]["before"], Json::Null);
    // update_lookup: the document as it is when read (deleted since: null), with what changed.
    assert_eq!(got[1]["before"], json!({"_id": 1}));
    assert_eq!(got[1]["after"], Json::Null);
    let desc = &got[1]["update_description"];
    assert_eq!(desc["updatedFields"]["text"], "b");
    assert_eq!(desc["updatedFields"]["i32"], json!(-2_147_483_647_i64));
    assert_eq!(desc["removedFields"], json!(["null"]));
    // A replace is a `u` with the whole new document.
    assert_eq!(got[2]["after"], json!({"_id": 1, "only": 2}));
    assert_eq!(got[2]["update_description"], Json::Null);
    assert_eq!(got[3]["before"], json!({"_id": 1}));
    assert_eq!(got[3]["after"], Json::Null);
    for r in &got {
        assert!(
            r["resume_token"].as_str().is_some_and(|t| !t.is_empty()),
            "{r}"
        );
        assert!(
            r["cluster_time"]["$timestamp"]["t"].as_u64().is_some(),
            "{r}"
        );
        assert!(
            r["commit_ts"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{r}"
        );
    }
    client.database(&db).drop().await.expect("drop db");
}

#[tokio::test]
async fn pre_and_post_images_fill_before_and_after() {
    let url = mongodb_url();
    let client = client(&url).await;
    let db = db_name();
    let database = client.database(&db);
    database.create_collection("c").await.expect("create");
    database
        .run_command(doc! {"collMod": "c", "changeStreamPreAndPostImages": {"enabled": true}})
        .await
        .expect("collMod");
    let start = now(&client).await;
    let coll = database.collection::<Document>("c");
    coll.insert_one(doc! {"_id": "k", "n": 1})
        .await
        .expect("insert");
    coll.update_one(doc! {"_id": "k"}, doc! {"$inc": {"n": 1}})
        .await
        .expect("update");
    coll.delete_one(doc! {"_id": "k"}).await.expect("delete");
    // SecantusDB keeps pre-images but no post-images: `full_document` stays `update_lookup`.
    let mut config = MongodbCdcConfig::new(&url, [format!("{db}.c")]);
    config.start = start;
    config.before = Before::Required;
    let src = MongodbCdcSource::new(config).expect("valid");
    src.check().await.expect("doctor: images enabled");
    let got = records(&read_pages(&src, None, 100).await.expect("read"));
    assert_eq!(got.len(), 3, "{got:#?}");
    assert_eq!(got[1]["before"], json!({"_id": "k", "n": 1}));
    assert_eq!(got[1]["after"], Json::Null, "looked up after the delete");
    assert_eq!(got[2]["before"], json!({"_id": "k", "n": 2}));
    // Without images on a collection, `required` is refused by doctor, naming the fix.
    database.create_collection("plain").await.expect("create");
    let mut config = MongodbCdcConfig::new(&url, [format!("{db}.plain")]);
    config.before = Before::Required;
    let e = MongodbCdcSource::new(config)
        .expect("valid")
        .check()
        .await
        .expect_err("no images");
    assert!(
        e.to_string().contains("changeStreamPreAndPostImages"),
        "{e}"
    );
    database.drop().await.expect("drop db");
}

#[tokio::test]
async fn a_drop_is_a_truncate_and_a_rename_into_a_listed_collection_stops_the_run() {
    let url = mongodb_url();
    let client = client(&url).await;
    let db = db_name();
    let database = client.database(&db);
    let start = now(&client).await;
    database
        .collection::<Document>("a")
        .insert_one(doc! {"_id": 1})
        .await
        .expect("insert");
    database
        .collection::<Document>("a")
        .drop()
        .await
        .expect("drop");
    database
        .collection::<Document>("a")
        .insert_one(doc! {"_id": 2})
        .await
        .expect("recreate");
    let src = source(&url, &[format!("{db}.*")], start);
    let got = records(&read_pages(&src, None, 100).await.expect("read"));
    let ops: Vec<&str> = got.iter().map(|r| r["op"].as_str().unwrap_or("")).collect();
    assert_eq!(ops, ["c", "t", "c"], "{got:#?}");
    assert_eq!(got[2]["after"], json!({"_id": 2}));

    let start = now(&client).await;
    database
        .collection::<Document>("x")
        .insert_one(doc! {"_id": 1})
        .await
        .expect("insert");
    client
        .database("admin")
        .run_command(doc! {"renameCollection": format!("{db}.x"), "to": format!("{db}.a"), "dropTarget": true})
        .await
        .expect("rename");
    let src = source(&url, &[format!("{db}.a")], start);
    let e = read_pages(&src, None, 100)
        .await
        .expect_err("rename into a listed collection");
    let m = e.to_string();
    assert!(
        m.contains(&format!("`{db}.x` was renamed to `{db}.a`")) && m.contains("faucet replicate"),
        "{m}"
    );
    database.drop().await.expect("drop db");
}

#[tokio::test]
async fn bookmarks_resume_exactly_and_an_idle_stream_moves_its_position() {
    let url = mongodb_url();
    let client = client(&url).await;
    let db = db_name();
    let start = now(&client).await;
    let coll = client.database(&db).collection::<Document>("c");
    for i in 0..23_i32 {
        coll.insert_one(doc! {"_id": i, "v": format!("v{i}")})
            .await
            .expect("insert");
    }
    let src = source(&url, &[format!("{db}.c")], start);
    conformance::source_pages_are_bounded(&src, 5, 23)
        .await
        .expect("bounded");
    conformance::source_bookmarks_round_trip(&src, 5)
        .await
        .expect("round trip");
    conformance::config_is_strict::<MongodbCdcConfig>(&json!({
        "connection_url": url, "collections": ["a.b"]
    }))
    .expect("strict");

    // An idle run (start: end, nothing written) still hands over a position, and the next
    // run from it reads exactly what was written after.
    let idle = source(&url, &[format!("{db}.c")], StartPosition::End);
    let pages = read_pages(&idle, None, 10).await.expect("idle read");
    assert!(pages.iter().all(Page::is_empty), "{pages:?}");
    let b = pages
        .last()
        .and_then(|p| p.bookmark().cloned())
        .expect("an idle bookmark");
    client
        .database(&db)
        .collection::<Document>("other")
        .insert_one(doc! {"_id": 0})
        .await
        .expect("other");
    let pages = read_pages(&idle, Some(b.clone()), 10)
        .await
        .expect("idle again");
    let moved = pages
        .last()
        .and_then(|p| p.bookmark().cloned())
        .expect("a bookmark");
    assert_ne!(
        moved, b,
        "the position moved past the other collection's write"
    );
    // Its cluster time is the time it was read up to, not that of a last event (none).
    let time = |b: &serde_json::Value| {
        let t = &b["cluster_time"];
        (t["t"].as_u64(), t["i"].as_u64())
    };
    assert!(
        time(&b).0.is_some(),
        "an idle bookmark has a cluster time: {b}"
    );
    assert!(time(&moved) > time(&b), "{b} then {moved}");
    coll.insert_one(doc! {"_id": 100}).await.expect("insert");
    let got = records(&read_pages(&idle, Some(moved), 10).await.expect("after"));
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["after"], json!({"_id": 100}));
    client.database(&db).drop().await.expect("drop db");
}

/// A bounded run says how far along it is in oplog seconds: from its start's cluster time to
/// the server's time at open, each page at its last event's, the last page all of it.
#[tokio::test]
async fn a_bounded_run_measures_its_progress_in_oplog_seconds() {
    let url = mongodb_url();
    let client = client(&url).await;
    let db = db_name();
    let start = now(&client).await;
    let coll = client.database(&db).collection::<Document>("c");
    for i in 0..4_i32 {
        coll.insert_one(doc! {"_id": i}).await.expect("insert");
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    }
    let src = source(&url, &[format!("{db}.c")], start);
    let pages = read_pages(&src, None, 1).await.expect("read");
    assert_eq!(records(&pages).len(), 4);
    let extents: Vec<_> = pages
        .iter()
        .map(|p| {
            p.extent()
                .cloned()
                .expect("a bounded run's page has an extent")
        })
        .collect();
    let total = extents[0].total;
    assert!(
        total >= 2,
        "the writes span 2.8 s of cluster time: {extents:?}"
    );
    for e in &extents {
        assert_eq!(e.unit, faucet_core::ExtentUnit::OplogSeconds);
        assert!(!e.estimate, "exact in its unit");
        assert_eq!(e.total, total, "one span");
    }
    assert!(
        extents.windows(2).all(|w| w[0].done <= w[1].done),
        "{extents:?}"
    );
    let last = extents.last().map_or(0, |e| e.done);
    // The first write is at the start, the last 2.1 s later, the end after it.
    assert!(
        extents[0].done <= 1,
        "the first event is at the start: {extents:?}"
    );
    assert!(
        last >= 2 && last <= total,
        "the last event 2.1 s in: {extents:?}"
    );
    // A continuous run has no end: no extent.
    let mut config = MongodbCdcConfig::new(&url, vec![format!("{db}.c")]);
    config.start = now(&client).await;
    config.continuous = true;
    let src = MongodbCdcSource::new(config).expect("valid");
    let mut stream = src
        .open(
            None,
            ReadOptions {
                batch_size: 1,
                ..ReadOptions::default()
            },
        )
        .await
        .expect("open");
    coll.insert_one(doc! {"_id": 100}).await.expect("insert");
    let page = loop {
        let page = stream.next_page().await.expect("read").expect("a page");
        if !page.is_empty() {
            break page;
        }
    };
    assert_eq!(page.extent(), None, "a continuous run's end is not known");
    drop(stream);
    client.database(&db).drop().await.expect("drop db");
}

#[tokio::test]
async fn errors_are_typed_not_panics() {
    let src = source(
        "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500",
        &["a.b".into()],
        StartPosition::End,
    );
    let src = std::sync::Arc::new(src);
    let s = std::sync::Arc::clone(&src);
    conformance::errors_not_panics("unreachable server", async move {
        s.open(None, ReadOptions::default()).await.map(|_| ())
    })
    .await
    .expect("an error");
    let e = match src.open(None, ReadOptions::default()).await {
        Err(e) => e,
        Ok(_) => panic!("opened an unreachable server"),
    };
    assert!(matches!(e, FaucetError::Connect { .. }), "{e}");
    let e = read_pages(
        &source(&mongodb_url(), &["a.b".into()], StartPosition::End),
        Some(json!({"lsn": "0/1"})),
        10,
    )
    .await
    .expect_err("another source's bookmark");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
}

#[tokio::test]
async fn a_token_out_of_the_oplog_is_the_history_lost_error() {
    let server = PrivateMongo::start(&["--oplog-max-entries", "5"]);
    let url = server.url();
    let client = client(&url).await;
    let start = now(&client).await;
    let coll = client.database("h").collection::<Document>("c");
    coll.insert_one(doc! {"_id": -1}).await.expect("insert");
    let src = source(&url, &["h.c".into()], start);
    let pages = read_pages(&src, None, 10).await.expect("read");
    let b = pages
        .last()
        .and_then(|p| p.bookmark().cloned())
        .expect("bookmark");
    // SecantusDB prunes the oplog every 1,000 writes.
    let docs: Vec<Document> = (0..1200).map(|i| doc! {"_id": i}).collect();
    for chunk in docs.chunks(1) {
        coll.insert_many(chunk.to_vec()).await.expect("insert");
    }
    let e = read_pages(&src, Some(b.clone()), 10)
        .await
        .expect_err("history lost");
    assert!(matches!(e, FaucetError::Bookmark { .. }), "{e}");
    let m = e.to_string();
    assert!(m.contains("286") && m.contains("faucet replicate"), "{m}");
    let e = src.check_resume(&b).await.expect_err("doctor sees it too");
    assert!(e.to_string().contains("286"), "{e}");
}

#[tokio::test]
async fn after_the_server_is_killed_and_restarted_a_run_resumes_from_its_token() {
    let mut server = PrivateMongo::start(&[]);
    let url = server.url();
    let c = client(&url).await;
    let start = now(&c).await;
    let coll = c.database("k").collection::<Document>("c");
    for i in 0..10_i32 {
        coll.insert_one(doc! {"_id": i}).await.expect("insert");
    }
    let src = source(&url, &["k.c".into()], start);
    let pages = read_pages(&src, None, 4).await.expect("read");
    let b = pages[0].bookmark().cloned().expect("bookmark");
    let all = records(&pages);
    assert_eq!(all.len(), 10);
    drop(c);
    server.kill();
    server.start_again();
    let c = client(&url).await;
    let coll = c.database("k").collection::<Document>("c");
    for i in 10..13_i32 {
        coll.insert_one(doc! {"_id": i})
            .await
            .expect("insert after restart");
    }
    let rest = records(
        &read_pages(&src, Some(b), 4)
            .await
            .expect("resume after kill -9"),
    );
    let ids: Vec<i64> = rest
        .iter()
        .map(|r| r["after"]["_id"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(
        ids,
        (4..13).collect::<Vec<i64>>(),
        "exactly the changes after the first page"
    );
}

#[tokio::test]
async fn a_continuous_stream_hands_a_page_over_once_caught_up_not_at_max_page_delay() {
    let url = mongodb_url();
    let client = client(&url).await;
    let db = db_name();
    let mut config = MongodbCdcConfig::new(&url, [format!("{db}.c")]);
    config.continuous = true;
    let src = MongodbCdcSource::new(config).expect("valid");
    let delay = std::time::Duration::from_secs(4);
    let options = ReadOptions {
        batch_size: 100,
        max_page_delay: delay,
        ..ReadOptions::default()
    };
    let mut stream = src.open(None, options).await.expect("open");
    let coll = client.database(&db).collection::<Document>("c");
    for i in 0..3_i32 {
        coll.insert_one(doc! {"_id": i}).await.expect("insert");
    }
    let written = std::time::Instant::now();
    let page = loop {
        let page = stream.next_page().await.expect("read").expect("a page");
        if !page.is_empty() {
            break page;
        }
    };
    let waited = written.elapsed();
    assert_eq!(page.len(), 3, "the three inserts in one page");
    // `getMore` waits at most 1 s for events (`maxAwaitTimeMS`), then the stream is caught
    // up: the page goes then, not `max_page_delay` after its first record.
    assert!(
        waited < std::time::Duration::from_millis(2_500),
        "the page waited {waited:?} (max_page_delay {delay:?})"
    );
    let _ = client.database(&db).drop().await;
}
