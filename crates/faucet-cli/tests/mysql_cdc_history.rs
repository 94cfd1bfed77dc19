//! `mysql-cdc` bookmarks on a binlog history that is not the one they were read from,
//! through the binary, on private MariaDBs (`RESET MASTER` must not hit the shared server):
//! after `RESET MASTER` the server reuses file names, offsets and GTIDs for other
//! transactions, so a bookmark of it is refused as "history diverged: re-snapshot" — never
//! resumed by position or carried over by a reused GTID (which delivered 20 of 433 new
//! transactions, or none of 100, with exit 0). `faucet doctor` says the same, its failing
//! resume line keeps the elapsed time out of the message, it fails a position past a file's
//! end or inside an event, and with no bookmark stored it says where a run starts.

use faucet_test_support::private_mariadb::PrivateMariadb;

use crate::support::mariadb::doctor_check;
use crate::support::{Dir, Run, bookmark_of};

const NAME: &str = "hist";

/// A pipeline reading `test.t` of `server` into `out.jsonl`, with a file state store.
fn pipeline(server: &PrivateMariadb) -> Dir {
    let dir = Dir::new();
    dir.write(
        "faucet.yaml",
        format!(
            "version: 1\nname: {NAME}\npipeline:\n  source: {{ type: mysql-cdc, config: {{ \
             connection_url: \"{}\", server_id: 4242, tables: [test.t] }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out.jsonl }} }}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n",
            server.url("test")
        ),
    );
    dir
}

/// `n` single-row transactions, ids from `first`.
fn insert_each(server: &PrivateMariadb, first: u32, n: u32) {
    let sql: String = (first..first + n)
        .map(|i| format!("INSERT INTO t VALUES ({i}, 'r{i}');"))
        .collect();
    server.sql(&sql);
}

/// doctor's resume check (`--json`), which must be there.
fn resume_check(run: &Run) -> serde_json::Value {
    doctor_check(&run.json(), "resume")
}

fn state_entry(dir: &Dir) -> serde_json::Value {
    serde_json::from_slice(
        &dir.read(&format!("state/{NAME}.json"))
            .expect("a state entry"),
    )
    .expect("json")
}

/// A bookmark at GTID 0-1-32 in `mariadb-bin.000003`; `RESET MASTER`; first 5 new
/// transactions (GTIDs 0-1-1…: below the bookmark's, where the refusal advised waiting for
/// @@gtid_binlog_pos to reach it), then 40 more (past it, where the bookmark was carried
/// over by GTID and 13 of 45 delivered): both refused as a diverged history, by `run` and
/// by `doctor`, nothing delivered, the state untouched. Before the first run doctor says
/// where a run starts.
#[test]
fn a_bookmark_of_a_reset_binlog_is_refused_not_resumed_by_a_reused_gtid() {
    let server = PrivateMariadb::start_with(1, &[]);
    server.sql("CREATE TABLE t (id INT PRIMARY KEY, v TEXT)");
    let dir = pipeline(&server);
    let doctor = dir.faucet(&["doctor", "--json"]);
    doctor.expect_code(0);
    let check = resume_check(&doctor);
    let start = check["target"].as_str().unwrap_or_default();
    assert!(
        check["ok"] == true
            && start.starts_with(&format!(
                "{NAME}: no bookmark is stored yet: a run starts at `start`: `end`"
            ))
            && start.contains("(now mariadb-bin.000001:"),
        "{check}"
    );
    dir.faucet(&["run"]).expect_code(0);
    server.sql("FLUSH BINARY LOGS; FLUSH BINARY LOGS");
    insert_each(&server, 1, 30);
    dir.faucet(&["run"]).expect_code(0);
    assert_eq!(dir.lines("out.jsonl").len(), 30);
    let entry = state_entry(&dir);
    let bookmark = bookmark_of(entry.clone());
    assert_eq!(bookmark["binlog_file"], "mariadb-bin.000003", "{bookmark}");
    // CREATE DATABASE test and CREATE TABLE t are 0-1-1 and 0-1-2.
    assert_eq!(bookmark["gtid_state"], "0-1-32", "{bookmark}");

    server.sql("RESET MASTER");
    for (first, n) in [(100, 5), (105, 40)] {
        insert_each(&server, first, n);
        let run = dir.faucet(&["run"]);
        assert_ne!(run.code, 0, "refused after {first}+{n}: {}", run.stderr);
        run.stderr_has(&["history diverged: re-snapshot", "RESET MASTER"]);
        assert!(!run.stderr.contains("Wait until"), "{}", run.stderr);
        assert_eq!(dir.lines("out.jsonl").len(), 30, "nothing delivered");
        assert_eq!(state_entry(&dir), entry, "the state is untouched");

        let doctor = dir.faucet(&["doctor", "--json"]);
        doctor.expect_code(1);
        let check = resume_check(&doctor);
        assert_eq!(check["ok"], false, "{check}");
        assert_eq!(check["target"], NAME, "{check}");
        assert!(
            check["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("mysql-cdc: cannot resume: history diverged")),
            "{check}"
        );
    }
    // The checklist: the elapsed time after the key, the refusal after it.
    let doctor = dir.faucet(&["doctor"]);
    let text = format!("{}{}", doctor.stdout, doctor.stderr);
    let line = text
        .lines()
        .find(|l| l.contains("resume mysql-cdc"))
        .unwrap_or_else(|| panic!("no resume line: {text}"));
    let (head, message) = line.split_once(" ms: ").expect("a failed probe's line");
    assert!(
        head.starts_with(&format!("✗ resume mysql-cdc {NAME} ")),
        "{line}"
    );
    assert!(
        message.starts_with("mysql-cdc: cannot resume: history diverged"),
        "{line}"
    );
}

/// A bookmark far into `mariadb-bin.000001`; `RESET MASTER`; 3 new rows: the new
/// `mariadb-bin.000001` is shorter than the bookmark's offset (it was resumed with a warning
/// and delivered none of them). Refused, by `run` and `doctor`; and before the reset a
/// bookmark edited to an offset inside an event fails doctor's resume check (it passed).
#[test]
fn a_bookmark_past_the_end_of_a_reused_file_name_or_inside_an_event_is_refused() {
    let server = PrivateMariadb::start_with(1, &[]);
    server.sql("CREATE TABLE t (id INT PRIMARY KEY, v TEXT)");
    let dir = pipeline(&server);
    dir.faucet(&["run"]).expect_code(0);
    insert_each(&server, 1, 60);
    dir.faucet(&["run"]).expect_code(0);
    assert_eq!(dir.lines("out.jsonl").len(), 60);
    let entry = state_entry(&dir);
    let bookmark = bookmark_of(entry.clone());
    assert_eq!(bookmark["binlog_file"], "mariadb-bin.000001", "{bookmark}");
    let pos = bookmark["binlog_pos"].as_u64().expect("an offset");

    // Inside the last event: doctor fails it (a run would meet the server's refusal).
    let path = dir.join(&format!("state/{NAME}.json"));
    let mut edited = entry.clone();
    let inner = if edited.get("bookmark").is_some() {
        &mut edited["bookmark"]
    } else {
        &mut edited
    };
    inner["binlog_pos"] = (pos - 3).into();
    std::fs::write(&path, edited.to_string()).expect("edit the state");
    let doctor = dir.faucet(&["doctor", "--json"]);
    doctor.expect_code(1);
    let check = resume_check(&doctor);
    assert!(
        check["error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("no event starts at its position {}", pos - 3))),
        "{check}"
    );
    std::fs::write(&path, entry.to_string()).expect("restore the state");
    let doctor = dir.faucet(&["doctor", "--json"]);
    doctor.expect_code(0);
    assert!(
        resume_check(&doctor)["target"]
            .as_str()
            .is_some_and(|t| t.contains(&format!("resumes at mariadb-bin.000001:{pos}"))),
        "{}",
        doctor.stdout
    );

    server.sql("RESET MASTER");
    insert_each(&server, 100, 3);
    let run = dir.faucet(&["run"]);
    assert_ne!(run.code, 0, "refused: {}", run.stderr);
    run.stderr_has(&[
        "history diverged: re-snapshot",
        "past the end of `mariadb-bin.000001`",
    ]);
    assert_eq!(dir.lines("out.jsonl").len(), 60, "nothing delivered");
    let doctor = dir.faucet(&["doctor", "--json"]);
    doctor.expect_code(1);
    let check = resume_check(&doctor);
    assert!(
        check["ok"] == false
            && check["error"]
                .as_str()
                .is_some_and(|e| e.contains("history diverged")),
        "{check}"
    );
}
