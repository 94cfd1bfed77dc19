//! `type: mysql-cdc` through the binary, against the private MariaDB with a binlog
//! (scripts/services.sh, `FAUCET_TEST_MYSQL_URL`): `doctor` passes, a first run starts at the
//! end of the log, the next run writes exactly the changes made since, a third nothing; then
//! `doctor` says where the stored bookmark resumes, and names the refusal of one that
//! belongs to another server and has no GTID.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::mariadb::{fresh_database, mariadb as sql, mysql_url_for, unique_server_id};
use crate::support::write_pipeline;

fn faucet(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_faucet"))
        .current_dir(dir)
        .args(args)
        .env_remove("FAUCET_FAULT")
        .stdin(Stdio::null())
        .output()
        .expect("faucet runs")
}

/// Writes `faucet.yaml`: pipeline `name`, the `mysql-cdc` source on database `db` of the
/// binlog server (as a replica of its own `server_id`) of `tables` (a YAML list's inside)
/// into `./out.jsonl`, a file state in `./state`, then `extra` (pipeline lines, each
/// starting `  `, ending in a line break).
fn write_config(dir: &Path, name: &str, db: &str, tables: &str, extra: &str) {
    let source = format!(
        "{{ type: mysql-cdc, config: {{ connection_url: \"{}\", server_id: {}, \
         tables: [{tables}] }} }}",
        mysql_url_for(db, None),
        unique_server_id()
    );
    let sink = "{ type: jsonl, config: { path: ./out.jsonl } }";
    write_pipeline(dir, name, &source, sink, extra);
}

fn lines(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("out.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[test]
fn mysql_cdc_runs_through_the_binary() {
    let db = fresh_database(
        "cli_cdc",
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), "mycdc", &db, &format!("{db}.t"), "");
    let doctor = faucet(dir.path(), &["doctor"]);
    assert!(
        doctor.status.success(),
        "doctor: {}",
        String::from_utf8_lossy(&doctor.stderr)
    );
    let first = faucet(dir.path(), &["run"]);
    assert!(
        first.status.success(),
        "first run: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(lines(dir.path()).is_empty());
    sql(&format!(
        "INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b'); UPDATE {db}.t SET v = 'c' WHERE id = 1; \
         DELETE FROM {db}.t WHERE id = 2"
    ));
    let second = faucet(dir.path(), &["run"]);
    assert!(
        second.status.success(),
        "second run: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    let got: Vec<String> = lines(dir.path())
        .iter()
        .map(|r| format!("{} {} {}", r["op"], r["before"], r["after"]))
        .collect();
    assert_eq!(
        got,
        [
            r#""c" null {"id":1,"v":"a"}"#,
            r#""c" null {"id":2,"v":"b"}"#,
            r#""u" {"id":1,"v":"a"} {"id":1,"v":"c"}"#,
            r#""d" {"id":2,"v":"b"} null"#,
        ]
    );
    let third = faucet(dir.path(), &["run"]);
    assert!(
        third.status.success(),
        "third run: {}",
        String::from_utf8_lossy(&third.stderr)
    );
    assert_eq!(lines(dir.path()).len(), 4, "nothing new, nothing repeated");

    // doctor reads the stored bookmark: where it resumes …
    let resume = |out: &std::process::Output| {
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor --json");
        crate::support::mariadb::doctor_check(&report, "resume")
    };
    let doctor = faucet(dir.path(), &["doctor", "--json"]);
    assert!(doctor.status.success(), "doctor after runs");
    let check = resume(&doctor);
    assert_eq!(check["ok"], true, "{check}");
    assert!(
        check["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("mycdc: resumes at ")),
        "{check}"
    );
    // … and the refusal a run would meet: another server's bookmark without a GTID.
    let state = dir.path().join("state").join("mycdc.json");
    let mut entry: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).expect("state entry")).expect("json");
    let bookmark = if entry.get("bookmark").is_some() {
        &mut entry["bookmark"]
    } else {
        &mut entry
    };
    bookmark["server"]["server_id"] = 999_999.into();
    bookmark["gtid"] = serde_json::Value::Null;
    bookmark["gtid_state"] = serde_json::Value::Null;
    std::fs::write(&state, entry.to_string()).expect("write the entry");
    let doctor = faucet(dir.path(), &["doctor", "--json"]);
    assert_eq!(doctor.status.code(), Some(1), "one failed probe");
    let check = resume(&doctor);
    assert_eq!(check["ok"], false, "{check}");
    assert!(
        check["error"]
            .as_str()
            .is_some_and(|e| e.contains("server_id 999999") && e.contains("no GTID")),
        "{check}"
    );
    // doctor consumed nothing: the entry and the output are as they were.
    assert_eq!(
        std::fs::read(&state).expect("state"),
        entry.to_string().into_bytes()
    );
    assert_eq!(lines(dir.path()).len(), 4);

    // The server down: one failed probe, the source's; the resume line is left out rather
    // than blaming the stored bookmark for the same refused connection.
    let config = dir.path().join("faucet.yaml");
    let yaml = std::fs::read_to_string(&config).expect("config");
    let url = mysql_url_for(&db, None);
    std::fs::write(&config, yaml.replace(&url, "mysql://root@127.0.0.1:1/x")).expect("config");
    let doctor = faucet(dir.path(), &["doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).expect("doctor --json");
    assert_eq!(doctor.status.code(), Some(1), "one failed probe: {report}");
    let checks = report["checks"].as_array().expect("checks");
    assert!(
        checks
            .iter()
            .any(|c| c["probe"] == "source" && c["ok"] == false),
        "{report}"
    );
    assert!(!checks.iter().any(|c| c["probe"] == "resume"), "{report}");
    sql(&format!("DROP DATABASE {db}"));
}

/// A listed table the server does not have (a typo, another case) is named in a warning by
/// `run` and by `doctor`: it would read nothing while the bookmark moves on.
#[test]
fn a_listed_table_the_server_lacks_is_named_in_a_warning() {
    let db = fresh_database("cli_cdc_missing", "CREATE TABLE t_pk (id INT PRIMARY KEY)");
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(
        dir.path(),
        "mycdc",
        &db,
        &format!("{db}.t_pk, {db}.T_PK"),
        "",
    );
    for args in [&["run"][..], &["doctor"][..]] {
        let out = faucet(dir.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        let warned: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("are not on the server"))
            .collect();
        assert_eq!(warned.len(), 1, "{args:?}: {stderr}");
        assert!(
            warned[0].contains(&format!("{db}.T_PK"))
                && !warned[0].contains(&format!("{db}.t_pk,")),
            "{args:?}: {stderr}"
        );
    }
    sql(&format!("DROP DATABASE IF EXISTS {db}"));
}

#[test]
fn mysql_cdc_aborted_at_every_fault_point_inside_a_large_transaction_loses_nothing() {
    const ROWS: usize = 5_000;
    const BATCH: usize = 500;
    let db = fresh_database(
        "cli_cdc_crash",
        &format!(
            "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL); \
             INSERT INTO t SELECT seq, 0 FROM seq_1_to_{ROWS}"
        ),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(
        dir.path(),
        "mycrash",
        &db,
        &format!("{db}.t"),
        &format!("  batch_size: {BATCH}\n"),
    );
    let first = faucet(dir.path(), &["run"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // One transaction of ROWS changes, so every crash below is inside it.
    sql(&format!("UPDATE {db}.t SET v = v + 1"));
    let points = [
        "mid_page",
        "after_write",
        "after_flush",
        "state_mid_put",
        "after_state_put",
    ];
    for point in points {
        let out = Command::new(env!("CARGO_BIN_EXE_faucet"))
            .current_dir(dir.path())
            .args(["run", "--quiet"])
            .env("FAUCET_FAULT", format!("{point}:2"))
            .stdin(Stdio::null())
            .output()
            .expect("faucet runs");
        assert!(
            !out.status.success(),
            "the fault {point} did not abort the run"
        );
    }
    let last = faucet(dir.path(), &["run"]);
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    let mut seen = std::collections::HashMap::<u64, usize>::new();
    for r in lines(dir.path()) {
        assert_eq!(r["op"], "u");
        assert_eq!(r["after"]["v"], 1);
        *seen
            .entry(r["after"]["id"].as_u64().expect("id"))
            .or_default() += 1;
    }
    let lost = (1..=ROWS as u64)
        .filter(|id| !seen.contains_key(id))
        .count();
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    assert_eq!(lost, 0, "changes lost");
    assert!(
        duplicates <= points.len() * BATCH,
        "{duplicates} duplicates for {} crashes of pages of {BATCH}",
        points.len()
    );
    sql(&format!("DROP DATABASE {db}"));
}
