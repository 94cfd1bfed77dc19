//! `type: mongodb-cdc` through the binary, against SecantusDB (`FAUCET_TEST_MONGODB_URL`):
//! `doctor` passes, a first run starts at the end of the stream and stores a position, the
//! next run writes exactly the changes made since, a third nothing; `doctor` then says where
//! the stored resume token resumes.

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
