//! `type: mongodb-cdc` through the binary, against SecantusDB (`FAUCET_TEST_MONGODB_URL`):
//! `doctor` passes, a first run starts at the end of the stream and stores a position, the
//! next run writes exactly the changes made since, a third nothing; `doctor` then says where
//! the stored resume token resumes. `faucet serve` shows the oplog window and warns when a
//! stopped row's bookmark nears its end.

use faucet_test_support::{mongodb_url, unique_suffix};

use crate::support::Dir;
use crate::support::mongo::mongo;

#[test]
fn mongodb_cdc_runs_through_the_binary() {
    let url = mongodb_url();
    let db = format!("cli_{}", unique_suffix());
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: mcdc\npipeline:\n  source: {{ type: mongodb-cdc, config: {{ \
             connection_url: \"{url}\", collections: [{db}.orders] }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n"
        ),
    );
    dir.faucet(&["doctor"]).expect_code(0);
    mongo(&url, &format!("c['{db}'].orders.insert_one({{'_id': 0}})"));
    dir.faucet(&["run"]).expect_code(0);
    assert!(
        dir.jsonl("out.jsonl").is_empty(),
        "a first run starts at the end"
    );
    mongo(
        &url,
        &format!(
            "o = c['{db}'].orders\n\
             o.insert_one({{'_id': 1, 'n': 1, 'd': bson.Decimal128('1.10')}})\n\
             o.update_one({{'_id': 1}}, {{'$inc': {{'n': 1}}}})\n\
             o.delete_one({{'_id': 0}})"
        ),
    );
    dir.faucet(&["run"]).expect_code(0);
    let got = dir.jsonl("out.jsonl");
    let ops: Vec<&str> = got.iter().map(|r| r["op"].as_str().unwrap_or("")).collect();
    assert_eq!(ops, ["c", "u", "d"], "{got:#?}");
    assert_eq!(got[0]["table"], format!("{db}.orders"));
    assert_eq!(
        got[0]["after"]["d"].to_string(),
        "1.10",
        "Decimal128 keeps its digits"
    );
    assert_eq!(got[1]["update_description"]["updatedFields"]["n"], 2);
    dir.faucet(&["run"]).expect_code(0);
    assert_eq!(
        dir.jsonl("out.jsonl").len(),
        3,
        "nothing new, nothing again"
    );
    let doctor = dir.faucet(&["doctor"]);
    doctor.expect_code(0);
    let text = format!("{}{}", doctor.stdout, doctor.stderr);
    assert!(text.contains("resumes after resume token"), "{text}");
    mongo(&url, &format!("c.drop_database('{db}')"));
}

/// The pipeline `w` on `url` (`w.c`, jsonl and state beside the file's directory) from the
/// cluster time `t i`, with `extra` appended (a schedule).
fn window_pipeline(url: &str, t_i: (&str, &str), extra: &str) -> String {
    format!(
        "version: 1\nname: w\npipeline:\n  source: {{ type: mongodb-cdc, config: {{ \
         connection_url: \"{url}\", collections: [w.c], \
         start: {{ at_operation_time: {{ t: {}, i: {} }} }} }} }}\n  \
         sink: {{ type: jsonl, config: {{ path: ../out.jsonl }} }}\n  \
         state: {{ type: file, config: {{ path: ../state }} }}\n{extra}",
        t_i.0, t_i.1
    )
}

/// `faucet serve` on a row whose stored bookmark stays put (its schedule does not come due)
/// while the server's oplog grows past it, on a private SecantusDB: the status and
/// `/metrics` give the oplog window (`faucet_oplog_window_seconds`), the status the
/// bookmark's age in it, and once the age reaches 80 % of the window the log warns that the
/// position is near the oplog's end.
#[test]
fn serve_shows_the_oplog_window_and_warns_as_a_stopped_rows_bookmark_nears_its_end() {
    let server = faucet_test_support::private_mongo::PrivateMongo::start(&[]);
    let url = server.url();
    let start = mongo(
        &url,
        "r = c.admin.command('ping')['operationTime']\nprint(r.time, r.inc)",
    );
    let t_i = start.trim().split_once(' ').expect("t i");
    mongo(&url, "c.w.c.insert_one({'_id': 1})");
    let dir = Dir::new();
    // A first run stores a bookmark at the insert's cluster time.
    dir.write("once/w.yaml", window_pipeline(&url, t_i, ""));
    dir.faucet(&["run", "once/w.yaml"]).expect_code(0);
    assert_eq!(dir.jsonl("out.jsonl").len(), 1);
    // The served row is due on 1 January only: it keeps that bookmark.
    dir.write(
        "pipelines/w.yaml",
        window_pipeline(
            &url,
            t_i,
            "  schedule: { cron: \"0 0 0 1 1 *\", timezone: UTC }\n",
        ),
    );
    let serve = crate::support::server::Server::start(&dir, &["pipelines"], None);
    let first = serve.wait_for("w", "an oplog sample", |d| {
        d["oplog_window_seconds"].is_number()
    });
    assert!(first["retained_wal_bytes"].is_null(), "{first}");
    let warning = "behind the newest oplog entry and the oplog holds";
    let near = |d: &serde_json::Value| {
        let age = d["retention"]["bookmark_age_seconds"]
            .as_f64()
            .unwrap_or(0.0);
        let window = d["oplog_window_seconds"].as_f64().unwrap_or(f64::MAX);
        age >= 0.8 * window
    };
    if !near(&first) {
        assert!(!serve.stderr().contains(warning), "{}", serve.stderr());
    }
    // Writes to another collection move the oplog's newest entry, not the row's bookmark.
    let started = std::time::Instant::now();
    let doc = loop {
        mongo(&url, "c.w.other.insert_one({})");
        let doc = serve.status("w");
        if near(&doc) && doc["oplog_window_seconds"].as_f64() >= Some(4.0) {
            break doc;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the bookmark's age never neared the window: {doc}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    let window = doc["oplog_window_seconds"].as_f64().expect("window");
    let age = doc["retention"]["bookmark_age_seconds"]
        .as_f64()
        .expect("age");
    let horizon = doc["retention_horizon_seconds"].as_f64().expect("horizon");
    assert!(
        (window - age - horizon).abs() < 1.0,
        "the horizon is the window minus the age: {doc}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !serve.stderr().contains(warning) {
        assert!(
            std::time::Instant::now() < deadline,
            "no warning: {}",
            serve.stderr()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (code, text) = serve.request("GET", "/metrics", None);
    assert_eq!(code, 200, "{text}");
    crate::serve::promtool_check(&text);
    let metric = text
        .lines()
        .find_map(|l| l.strip_prefix("faucet_oplog_window_seconds{pipeline=\"w\",row=\"\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no faucet_oplog_window_seconds: {text}"));
    assert!(metric >= 4.0, "{metric}");
    assert!(
        !text.contains("faucet_slot_retained_wal_bytes{pipeline=\"w\""),
        "an oplog has no slot figures: {text}"
    );
    let (code, stderr) = serve.terminate();
    assert_eq!(code, 0, "{stderr}");
    drop(server);
}
