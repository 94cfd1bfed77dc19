//! The test SecantusDB (`FAUCET_TEST_MONGODB_URL`, default
//! `mongodb://127.0.0.1:27117/?directConnection=true`, started by scripts/services.sh),
//! driven with pymongo (installed with SecantusDB): a script run with `c` the client.

use std::process::Command;

/// Runs Python `script` with `import pymongo, bson` and `c = pymongo.MongoClient(url)`;
/// returns what it printed.
///
/// # Panics
/// When the script fails (its stderr in the message): the server is down or the test is wrong.
pub(crate) fn mongo(url: &str, script: &str) -> String {
    let program = format!("import pymongo, bson\nc = pymongo.MongoClient({url:?})\n{script}\n");
    let out = Command::new("python3")
        .args(["-c", &program])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        faucet_test_support::Service::Mongodb.unreachable(&String::from_utf8_lossy(&out.stderr))
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
