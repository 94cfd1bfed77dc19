//! `type: mongodb-cdc` through the binary, against SecantusDB (`FAUCET_TEST_MONGODB_URL`):
//! `doctor` passes, a first run starts at the end of the stream and stores a position, the
//! next run writes exactly the changes made since, a third nothing; `doctor` then says where
//! the stored resume token resumes.

use std::path::Path;
use std::process::{Command, Stdio};

use faucet_test_support::{mongodb_url, unique_suffix};

use crate::support::mongo::mongo;

fn faucet(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_faucet"))
        .current_dir(dir)
        .args(args)
        .env_remove("FAUCET_FAULT")
        .stdin(Stdio::null())
        .output()
        .expect("faucet runs")
}

fn lines(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("out.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[test]
fn mongodb_cdc_runs_through_the_binary() {
    let url = mongodb_url();
    let db = format!("cli_{}", unique_suffix());
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("faucet.yaml"),
        format!(
            "version: 1\nname: mcdc\npipeline:\n  source: {{ type: mongodb-cdc, config: {{ \
             connection_url: \"{url}\", collections: [{db}.orders] }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n"
        ),
    )
    .expect("config");
    let doctor = faucet(dir.path(), &["doctor"]);
    assert!(
        doctor.status.success(),
        "doctor: {}",
        String::from_utf8_lossy(&doctor.stderr)
    );
    mongo(&url, &format!("c['{db}'].orders.insert_one({{'_id': 0}})"));
    let first = faucet(dir.path(), &["run"]);
    assert!(
        first.status.success(),
        "first run: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        lines(dir.path()).is_empty(),
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
    let second = faucet(dir.path(), &["run"]);
    assert!(
        second.status.success(),
        "second run: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    let got = lines(dir.path());
    let ops: Vec<&str> = got.iter().map(|r| r["op"].as_str().unwrap_or("")).collect();
    assert_eq!(ops, ["c", "u", "d"], "{got:#?}");
    assert_eq!(
        got[0]["after"],
        serde_json::json!({"_id": 1, "n": 1, "d": 1.10})
    );
    assert_eq!(got[0]["table"], format!("{db}.orders"));
    assert_eq!(got[1]["update_description"]["updatedFields"]["n"], 2);
    let third = faucet(dir.path(), &["run"]);
    assert!(
        third.status.success(),
        "third run: {}",
        String::from_utf8_lossy(&third.stderr)
    );
    assert_eq!(lines(dir.path()).len(), 3, "nothing new, nothing again");
    let doctor = faucet(dir.path(), &["doctor"]);
    let text = String::from_utf8_lossy(&doctor.stdout).into_owned()
        + &String::from_utf8_lossy(&doctor.stderr);
    assert!(doctor.status.success(), "doctor: {text}");
    assert!(text.contains("resumes after resume token"), "{text}");
    mongo(&url, &format!("c.drop_database('{db}')"));
}
