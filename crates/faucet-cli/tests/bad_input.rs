//! Bad input: each gets one clear error naming the thing, a non-zero exit code, and leaves
//! the output as it was (docs/run-loop.md, invariants 5 and 7); and says its cause once
//! ([`causes`]).

mod causes;

use crate::support::{Dir, bookmark_of, csv_pipeline, ids, numbered_csv};

/// A directory with `data.csv` (3 rows) and `p.yaml` = `yaml`.
fn setup(yaml: &str) -> Dir {
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 3, true));
    dir.write("p.yaml", yaml);
    dir
}

#[track_caller]
fn assert_no_output(dir: &Dir) {
    assert!(!dir.join("out").exists(), "the sink was touched");
    assert!(
        !dir.join(".faucet/state/p.json").exists(),
        "a bookmark was written"
    );
}

#[test]
fn unknown_field_is_named_by_its_path() {
    let dir = setup(
        "version: 1\npipeline:\n  source: { type: csv, config: { path: ./data.csv } }\n  sink: { type: jsonl, config: { pathh: ./out/x.jsonl } }\n",
    );
    for cmd in ["run", "validate"] {
        dir.faucet(&[cmd, "p.yaml"]).expect_code(2).stderr_has(&[
            "error:",
            "`pipeline.sink.config.pathh`",
            "unknown field `pathh`",
            "expected `path`",
        ]);
    }
    let dir = setup(&csv_pipeline("p", "  deliveryy: at_least_once\n"));
    dir.faucet(&["run", "p.yaml"])
        .expect_code(2)
        .stderr_has(&["`pipeline.deliveryy`", "unknown field"]);
    let dir = setup(&format!("{}extra: 1\n", csv_pipeline("p", "")));
    dir.faucet(&["run", "p.yaml"])
        .expect_code(2)
        .stderr_has(&["`extra`", "unknown field"]);
    assert_no_output(&dir);
}

#[test]
fn missing_environment_variable_is_named_with_its_field() {
    let dir = setup(
        "version: 1\npipeline:\n  source: { type: csv, config: { path: \"${env:FAUCET_CLI_TEST_SURELY_UNSET}\" } }\n  sink: { type: jsonl, config: { path: ./out/x.jsonl } }\n",
    );
    dir.faucet(&["run", "p.yaml"]).expect_code(2).stderr_has(&[
        "FAUCET_CLI_TEST_SURELY_UNSET",
        "`pipeline.source.config.path`",
        "is not set",
    ]);
    assert_no_output(&dir);
}

#[test]
fn a_value_cannot_change_the_structure() {
    // The variable holds YAML; it stays one string (a file name that does not exist).
    let dir = setup(&csv_pipeline(
        "p",
        "  state: { type: file, config: { path: \"${env:FAUCET_CLI_TEST_EVIL}\" } }\n",
    ));
    let run = dir.faucet_env(
        &["validate", "p.yaml"],
        &[("FAUCET_CLI_TEST_EVIL", "x\n  delivery: effectively_once")],
    );
    run.expect_code(0)
        .stdout_has(&["delivery    at-least-once"]);
}

#[test]
fn invalid_state_key_from_the_name() {
    let dir = setup(&csv_pipeline("my orders", ""));
    dir.faucet(&["run", "p.yaml"]).expect_code(2).stderr_has(&[
        "`name`",
        "\"my orders\"",
        "state key",
        "' '",
    ]);
    assert!(!dir.join("out").exists());
    // The default name is the file's stem: a stem with a space needs `name:`.
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 3, true));
    dir.write(
        "my pipeline.yaml",
        "version: 1\npipeline:\n  source: { type: csv, config: { path: ./data.csv } }\n  sink: { type: jsonl, config: { path: ./out/x.jsonl } }\n",
    );
    dir.faucet(&["run", "my pipeline.yaml"])
        .expect_code(2)
        .stderr_has(&["`name`", "\"my pipeline\""]);
}

#[test]
fn unknown_connector_type_lists_the_known_ones() {
    let dir = setup(
        "version: 1\npipeline:\n  source: { type: excel, config: { path: ./data.csv } }\n  sink: { type: jsonl, config: { path: ./out/x.jsonl } }\n",
    );
    dir.faucet(&["run", "p.yaml"]).expect_code(2).stderr_has(&[
        "`pipeline.source.type`",
        "unknown variant `excel`",
        "`csv`, `jsonl`, `postgres`, `postgres-cdc`",
    ]);
    let dir = setup(&csv_pipeline("p", "  state: { type: etcd }\n"));
    dir.faucet(&["validate", "p.yaml"])
        .expect_code(2)
        .stderr_has(&[
            "`pipeline.state.type`",
            "`etcd`",
            "`memory`, `file`, `postgres`, `redis`",
        ]);
}

#[test]
fn compiled_out_connectors_parse_but_say_how_to_get_them() {
    if cfg!(feature = "state-redis") {
        return;
    }
    let dir = setup(&csv_pipeline(
        "p",
        "  state: { type: redis, config: { url: \"redis://127.0.0.1:6379/\" } }\n",
    ));
    dir.faucet(&["run", "p.yaml"]).expect_code(2).stderr_has(&[
        "`pipeline.state.type`",
        "`redis` is not compiled into this binary; rebuild with --features state-redis",
    ]);
    assert_no_output(&dir);
}

/// `faucet replicate` takes only a source that can copy a snapshot and then stream its
/// changes; any other is refused at `pipeline.source.type` before anything is read or
/// written, and a compiled-out one says how to get it.
#[test]
fn replicate_refuses_a_source_it_cannot_replicate() {
    let dir = setup(&csv_pipeline("p", ""));
    dir.faucet(&["replicate", "p.yaml"])
        .expect_code(2)
        .stderr_has(&[
            "`pipeline.source.type`",
            "`faucet replicate` needs a `postgres-cdc`, `mysql-cdc` or `mongodb-cdc` source, not `csv`",
        ]);
    assert_no_output(&dir);
    if cfg!(feature = "postgres") {
        return;
    }
    let dir = setup(
        "version: 1\nname: p\npipeline:\n  source: { type: postgres-cdc, config: { connection_url: \"postgres://u@h/db\" } }\n  sink: { type: jsonl, config: { path: ./out/x.jsonl } }\n",
    );
    dir.faucet(&["replicate", "p.yaml"])
        .expect_code(2)
        .stderr_has(&[
            "`pipeline.source.type`",
            "`postgres-cdc` is not compiled into this binary; rebuild with --features postgres",
        ]);
    assert_no_output(&dir);
}

#[test]
fn effectively_once_with_a_jsonl_sink_fails_before_the_output_exists() {
    for request in ["effectively_once", "exactly_once"] {
        let dir = setup(&csv_pipeline("p", &format!("  delivery: {request}\n")));
        let run = dir.faucet(&["run", "p.yaml"]);
        run.expect_code(3).stderr_has(&[
            "effectively-once delivery cannot be met",
            "the sink `jsonl`",
            "fix:",
            "delivery: at_least_once",
        ]);
        assert_no_output(&dir);
        assert!(
            !dir.join(".faucet").exists(),
            "the state store was not even opened"
        );
        dir.faucet(&["validate", "p.yaml"])
            .expect_code(3)
            .stdout_has(&["delivery    ✗", "jsonl"]);
    }
}

#[test]
fn ragged_csv_row_names_file_and_line_and_keeps_committed_output() {
    let dir = Dir::new();
    // Lines 2-5 are rows 1-4; line 6 is row 5; line 7 has a missing field.
    let mut csv = numbered_csv(1, 5, true);
    csv.push_str("6,name-6\n");
    csv.push_str("7,name-7,21.07\n");
    dir.write("data.csv", &csv);
    dir.write("p.yaml", csv_pipeline("p", "  batch_size: 2\n"));
    let run = dir.faucet(&["run", "p.yaml"]);
    run.expect_code(1).stderr_has(&["error:", "data.csv:7"]);
    // The pages before the bad row were committed and stay; nothing after it was written.
    let committed = ids(&dir.jsonl("out/data.jsonl"));
    assert_eq!(committed, vec![1, 2, 3, 4], "{}", run.stderr);

    // Fixing the row and running again delivers the rest once.
    dir.write("data.csv", numbered_csv(1, 7, true));
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(
        ids(&dir.jsonl("out/data.jsonl")),
        (1..=7).collect::<Vec<_>>()
    );
}

#[test]
fn corrupt_state_file_is_named_and_nothing_is_written() {
    let dir = setup(&csv_pipeline("p", ""));
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    let before = dir.read("out/data.jsonl").expect("output");
    dir.append("data.csv", &numbered_csv(4, 2, false));
    for torn in [&b""[..], &br#"{"file": "/x/data.csv", "byte_off"#[..]] {
        dir.write(".faucet/state/p.json", torn);
        dir.faucet(&["run", "p.yaml"]).expect_code(1).stderr_has(&[
            "error:",
            "state store file",
            ".faucet/state/p.json",
        ]);
        assert_eq!(
            dir.read("out/data.jsonl").expect("output"),
            before,
            "no rows written"
        );
    }
}

#[test]
fn missing_config_file_is_named() {
    let dir = Dir::new();
    dir.faucet(&["run", "nope.yaml"])
        .expect_code(2)
        .stderr_has(&["nope.yaml not found"]);
    dir.faucet(&["run"])
        .expect_code(2)
        .stderr_has(&["faucet.yaml not found", "current directory"]);
    dir.faucet(&["validate"])
        .expect_code(2)
        .stderr_has(&["faucet.yaml"]);
}

/// A YAML syntax error names the line and column but shows no text of the file: the lines
/// around it may hold a password (with a `"` in it, or cut short before its `@`).
#[test]
fn a_yaml_syntax_error_shows_no_line_of_the_file() {
    for (secret, broken) in [
        (
            "Tr0ub4dor3\\\"x",
            "  state: { type: redis, config: { url: \"redis://:Tr0ub4dor3\\\"x@r.example:6379/\", prefix: [\n",
        ),
        (
            "Tr0ub4dorLongPassw0rd",
            "  state: { type: redis, config: { url: \"redis://:Tr0ub4dorLongPassw0rd@r.example:6379/\" } }\n  sink: [\n",
        ),
    ] {
        let dir = setup(&format!(
            "version: 1\npipeline:\n  source: {{ type: csv, config: {{ path: ./in.csv }} }}\n{broken}"
        ));
        for args in [
            &["validate", "p.yaml"][..],
            &["run", "p.yaml"],
            &["doctor", "p.yaml", "--json"],
        ] {
            let run = dir.faucet(args);
            let shown = format!("{}{}", run.stdout, run.stderr);
            assert!(
                shown.contains("is not valid YAML") && shown.contains("at line"),
                "{args:?}: {shown}"
            );
            for part in ["Tr0ub4", "r.example", "prefix"] {
                assert!(
                    !shown.contains(part),
                    "{args:?} shows {part:?} of {secret:?}: {shown}"
                );
            }
        }
    }
}

#[test]
fn bad_yaml_and_bad_versions() {
    let dir = setup("version: 1\npipeline: { source: [\n");
    dir.faucet(&["run", "p.yaml"])
        .expect_code(2)
        .stderr_has(&["p.yaml is not valid YAML"]);
    let dir = setup(&csv_pipeline("p", "").replace("version: 1", "version: 2"));
    dir.faucet(&["run", "p.yaml"])
        .expect_code(2)
        .stderr_has(&["`version`", "version: 1"]);
    let dir = setup(&csv_pipeline("p", "").replace("version: 1\n", ""));
    dir.faucet(&["run", "p.yaml"])
        .expect_code(2)
        .stderr_has(&["missing field `version`"]);
    let dir = setup(&csv_pipeline("p", "  batch_size: 0\n"));
    dir.faucet(&["run", "p.yaml"])
        .expect_code(2)
        .stderr_has(&["`pipeline.batch_size`", "at least 1"]);
}

#[test]
fn matrix_errors_name_the_row() {
    let dir = setup(&format!(
        "{}matrix:\n  - {{ id: a }}\n  - {{ id: b, sink: {{ config: {{ pth: x }} }} }}\n  - {{ id: a }}\n  - {{ idd: c }}\n",
        csv_pipeline("p", "")
    ));
    let run = dir.faucet(&["validate", "p.yaml"]);
    run.expect_code(2).stderr_has(&[
        "row `b`: invalid configuration at `matrix[1].sink.config.pth`",
        "row `a`: invalid configuration at `matrix[2].id`: `a` is used by an earlier row",
        "`matrix[3].idd`",
    ]);
    dir.faucet(&["run", "p.yaml"]).expect_code(2);
    assert_no_output(&dir);
    let dir = setup(&format!("{}matrix: []\n", csv_pipeline("p", "")));
    dir.faucet(&["run", "p.yaml"])
        .expect_code(2)
        .stderr_has(&["`matrix`", "is empty"]);
}

#[test]
fn lease_held_by_another_run_exits_4() {
    use faucet_core::state::{
        FileStateStore, LeaseHolder, LeaseOutcome, LeaseRequest, StateStore as _,
    };
    let dir = setup(&csv_pipeline("p", ""));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = FileStateStore::new(dir.join(".faucet/state"));
    let holder = LeaseHolder::this_process();
    let lease = rt
        .block_on(store.acquire_lease(&LeaseRequest::new(
            "p",
            &holder,
            std::time::Duration::from_secs(30),
        )))
        .expect("acquire");
    assert!(matches!(lease, LeaseOutcome::Acquired(_)), "{lease:?}");
    dir.faucet(&["run", "p.yaml"])
        .expect_code(4)
        .stderr_has(&["state key `p` is in use by another run", "--wait-for-lease"]);
    let started = std::time::Instant::now();
    dir.faucet(&["run", "p.yaml", "--wait-for-lease", "1s"])
        .expect_code(4);
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    assert!(!dir.join("out").exists());
    if let LeaseOutcome::Acquired(l) = lease {
        rt.block_on(store.release_lease(&l)).expect("release");
    }
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(ids(&dir.jsonl("out/data.jsonl")), vec![1, 2, 3]);
}

/// A declared column the file's header does not have is found only once the file is open;
/// the error still names the field by its path in the pipeline file, and nothing is written.
#[test]
fn a_declared_column_missing_from_the_header_is_named_by_its_path() {
    let dir = setup(
        "version: 1\nname: p\npipeline:\n  source: { type: csv, config: { path: ./data.csv, columns: { idd: int } } }\n  sink: { type: jsonl, config: { path: ./out/data.jsonl } }\n",
    );
    dir.faucet(&["run", "p.yaml"]).expect_code(2).stderr_has(&[
        "`pipeline.source.config.columns`",
        "`idd` is not a column of",
        "(its header: id",
    ]);
    // The sink was opened before the file's header was read, but creates its file only
    // with the first record: there is none.
    assert!(!dir.join("out").exists(), "the output was created");
    // At most the run's "started" marker (JSON null), never a bookmark.
    let state = dir
        .read(".faucet/state/p.json")
        .unwrap_or_else(|| b"null".to_vec());
    let state = serde_json::from_slice(&state).expect("state file is JSON");
    assert_eq!(
        bookmark_of(state),
        serde_json::Value::Null,
        "a bookmark was written"
    );
}

#[test]
fn a_dotenv_parse_error_names_the_line_never_its_content() {
    let dir = setup(&csv_pipeline("p", ""));
    for bad in [
        "A=1\nNOTE=\"x\nREDIS_PASSWORD=hunter2secret\n",
        "A=1\nNOTE='x\nREDIS_PASSWORD=hunter2secret\n",
        "A=1\nnot a line hunter2secret\nB=2\n",
    ] {
        dir.write(".env", bad);
        for cmd in ["validate", "run"] {
            let run = dir.faucet(&[cmd, "p.yaml"]);
            run.expect_code(2)
                .stderr_has(&["`.env`", "line 2", "not shown"]);
            let all = format!("{}{}", run.stdout, run.stderr);
            for secret in ["hunter2secret", "NOTE", "REDIS_PASSWORD"] {
                assert!(!all.contains(secret), "{cmd} showed {secret:?}: {all}");
            }
        }
    }
    assert_no_output(&dir);
}

#[test]
fn a_dotenv_with_a_byte_order_mark_is_read() {
    let dir = setup(&csv_pipeline("p", "").replace("./out/data.jsonl", "\"${env:OUT}\""));
    dir.write(".env", b"\xEF\xBB\xBFOUT=./out/bom.jsonl\n");
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(ids(&dir.jsonl("out/bom.jsonl")), vec![1, 2, 3]);
}

#[test]
fn a_name_the_file_store_cannot_hold_is_refused_offline() {
    // The file store's limit is 200 bytes (a file name is 255, its temp file adds 42).
    let long = "n".repeat(245);
    let dir = setup(&csv_pipeline(&long, ""));
    for cmd in ["validate", "run"] {
        dir.faucet(&[cmd, "p.yaml"]).expect_code(2).stderr_has(&[
            "`name`",
            "245 bytes",
            "at most 200 bytes",
            "shorten `name`",
        ]);
    }
    assert!(!dir.join("out").exists(), "the sink was touched");
    // A matrix row whose key `{name}::{id}` is too long is named by its id.
    let dir = setup(&format!(
        "{}matrix:\n  - {{ id: {} }}\n",
        csv_pipeline("p", ""),
        "i".repeat(198)
    ));
    dir.faucet(&["validate", "p.yaml"])
        .expect_code(2)
        .stderr_has(&["`matrix[0].id`", "201 bytes", "at most 200 bytes"]);
    // At the limit, it runs and resumes.
    let name = "m".repeat(200);
    let dir = setup(&csv_pipeline(&name, ""));
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    dir.faucet(&["run", "p.yaml"]).expect_code(0);
    assert_eq!(ids(&dir.jsonl("out/data.jsonl")), vec![1, 2, 3]);
}

#[test]
fn a_huge_user_value_is_not_echoed_whole() {
    let huge = "h".repeat(5_000_000);
    let dir = setup(&csv_pipeline(&huge, ""));
    let run = dir.faucet(&["validate", "p.yaml"]);
    run.expect_code(2)
        .stderr_has(&["`name`", "… (5000000 bytes)"]);
    assert!(
        run.stderr.len() + run.stdout.len() < 2000,
        "{} bytes",
        run.stderr.len()
    );
    let dir = setup(&format!(
        "{}matrix:\n  - {{ id: {huge} }}\n",
        csv_pipeline("p", "")
    ));
    for cmd in ["validate", "run"] {
        let run = dir.faucet(&[cmd, "p.yaml"]);
        run.expect_code(2)
            .stderr_has(&["`matrix[0].id`", "(5000000 bytes)"]);
        assert!(
            run.stderr.len() + run.stdout.len() < 2000,
            "{cmd}: {} bytes",
            run.stderr.len() + run.stdout.len()
        );
    }
}

#[test]
fn lease_durations_out_of_bounds_are_refused_before_any_run() {
    let dir = setup(&csv_pipeline("p", ""));
    for cmd in ["run", "replicate"] {
        for (flag, value, says) in [
            ("--lease-ttl", "0s", "from 1s to 1day"),
            ("--lease-ttl", "1ms", "from 1s to 1day"),
            ("--lease-ttl", "2days", "from 1s to 1day"),
            ("--lease-ttl", "100000000000y", "from 1s to 1day"),
            ("--wait-for-lease", "99999999999y", "at most 7days"),
        ] {
            dir.faucet(&[cmd, "p.yaml", flag, value])
                .expect_code(2)
                .stderr_has(&[flag, value, says]);
            assert_no_output(&dir);
        }
    }
    // Inside the bounds, the run works.
    dir.faucet(&[
        "run",
        "p.yaml",
        "--lease-ttl",
        "1s",
        "--wait-for-lease",
        "7days",
    ])
    .expect_code(0);
    assert_eq!(ids(&dir.jsonl("out/data.jsonl")), vec![1, 2, 3]);
}

/// No library internals in messages (`DuplicateKeyPolicy`, `struct MatrixRow`, `invalid
/// length`, `budget breached`): each says what is wrong, where, in the file's terms.
#[test]
fn yaml_shape_errors_speak_the_files_language() {
    let internals = [
        "DuplicateKeyPolicy",
        "Options",
        "struct",
        "invalid length",
        "budget breached",
        "MatrixRow",
    ];
    let base = csv_pipeline("p", "");
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            format!("{base}  sink: {{ type: jsonl, config: {{ path: ./o.jsonl }} }}\n"),
            vec!["line 6", "`sink` appears twice"],
        ),
        (
            format!("{base}matrix:\n  - eu\n"),
            vec!["`matrix[0]`", "is a string", "a matrix row is a mapping"],
        ),
        (
            format!("{base}matrix:\n  - 1\n"),
            vec!["`matrix[0]`", "is a number"],
        ),
        (
            format!("{base}matrix:\n  - {{ id: a }}\n  - [1, 2]\n"),
            vec!["`matrix[1]`", "is a sequence"],
        ),
        ("- 1\n".to_owned(), vec!["holds a sequence", "`version: 1`"]),
        (
            base.replace("{ path: ./out/data.jsonl }", "[./out/data.jsonl]"),
            vec!["`pipeline.sink.config`", "as a mapping"],
        ),
    ];
    for (yaml, says) in cases {
        let dir = setup(&yaml);
        for cmd in ["validate", "run"] {
            let run = dir.faucet(&[cmd, "p.yaml"]);
            run.expect_code(2).stderr_has(&says);
            for internal in internals {
                assert!(!run.stderr.contains(internal), "{cmd}: {}", run.stderr);
            }
        }
        assert_no_output(&dir);
    }
}

#[test]
fn a_large_matrix_is_read_and_an_alias_bomb_is_not() {
    let mut yaml = csv_pipeline("p", "matrix:\n");
    for i in 0..100_000 {
        yaml.push_str(&format!(
            "  - {{ id: r{i}, source: {{ config: {{ path: ./d{i}.csv }} }} }}\n"
        ));
    }
    let dir = setup(&yaml);
    dir.faucet(&["validate", "p.yaml"])
        .expect_code(0)
        .stdout_has(&["100000 runs", "r99999"]);
    let mut bomb = csv_pipeline("p", "x:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    let mut prev = 'a';
    for n in "bcdefghi".chars() {
        let refs = vec![format!("*{prev}"); 10].join(", ");
        bomb.push_str(&format!("  {n}: &{n} [{refs}]\n"));
        prev = n;
    }
    let dir = setup(&bomb);
    let run = dir.faucet(&["validate", "p.yaml"]);
    run.expect_code(2).stderr_has(&["refused", "alias bomb"]);
    assert!(!run.stderr.contains("budget breached"), "{}", run.stderr);
}

/// `${HOME}` is refused with the fix, `$HOME` in a path warns, `~/` is the home directory,
/// an empty variable cannot turn a path into the config's directory, and a row id cannot be
/// empty.
#[test]
fn shell_habits_in_paths_are_named_or_expanded() {
    let with_source = |path: &str| {
        csv_pipeline("p", "").replace("path: ./data.csv", &format!("path: \"{path}\""))
    };
    let dir = setup(&with_source("${HOME}/data.csv"));
    for cmd in ["validate", "run"] {
        dir.faucet(&[cmd, "p.yaml"]).expect_code(2).stderr_has(&[
            "`pipeline.source.config.path`",
            "`${HOME}` is not expanded",
            "`${env:HOME}`",
        ]);
    }
    assert_no_output(&dir);

    let dir = setup(&with_source("$HOME/data.csv"));
    dir.faucet(&["validate", "p.yaml"]).stderr_has(&[
        "warning:",
        "`pipeline.source.config.path`",
        "`${env:HOME}`",
    ]);

    // `~/` is the home directory.
    let home = Dir::new();
    home.write("in/data.csv", numbered_csv(1, 2, true));
    let dir = setup(&with_source("~/in/data.csv"));
    let home_path = home.path().to_str().expect("utf-8 path");
    dir.faucet_env(&["run", "p.yaml"], &[("HOME", home_path)])
        .expect_code(0);
    assert_eq!(ids(&dir.jsonl("out/data.jsonl")), vec![1, 2]);

    // An empty variable in a path field (a sink, a source, the state directory).
    for yaml in [
        with_source("${env:FAUCET_T_EMPTY}"),
        csv_pipeline("p", "").replace("./out/data.jsonl", "\"${env:FAUCET_T_EMPTY}\""),
        csv_pipeline(
            "p",
            "  state: { type: file, config: { path: \"${env:FAUCET_T_EMPTY}\" } }\n",
        ),
    ] {
        let dir = setup(&yaml);
        for cmd in ["validate", "run"] {
            dir.faucet_env(&[cmd, "p.yaml"], &[("FAUCET_T_EMPTY", "")])
                .expect_code(2)
                .stderr_has(&["config.path`", "is empty", "`FAUCET_T_EMPTY`"]);
        }
        assert_no_output(&dir);
    }
    // An empty variable in front of a path moves it: `${env:DIR}/out.jsonl` would write at
    // the file system's root, `./${env:SUB}` into the config's directory.
    for yaml in [
        csv_pipeline("p", "").replace("./out/data.jsonl", "\"${env:FAUCET_T_EMPTY}/out.jsonl\""),
        csv_pipeline(
            "p",
            "  state: { type: file, config: { path: \"./${env:FAUCET_T_EMPTY}\" } }\n",
        ),
    ] {
        let dir = setup(&yaml);
        for cmd in ["validate", "run"] {
            dir.faucet_env(&[cmd, "p.yaml"], &[("FAUCET_T_EMPTY", "")])
                .expect_code(2)
                .stderr_has(&["config.path`", "would be `", "`FAUCET_T_EMPTY`"]);
        }
        assert_no_output(&dir);
    }

    let dir = setup(&format!(
        "{}matrix:\n  - {{ id: \"\" }}\n",
        csv_pipeline("p", "")
    ));
    dir.faucet(&["validate", "p.yaml"])
        .expect_code(2)
        .stderr_has(&["`matrix[0].id`", "is empty"]);
}

/// With `state: memory`, an error after committed pages does not promise a resume.
#[test]
fn a_memory_store_does_not_promise_a_resume() {
    let dir = Dir::new();
    dir.write("bad.csv", b"id,name\n1,a\n2,b\n3,c\n4,\xff\n");
    dir.write(
        "p.yaml",
        "version: 1\npipeline:\n  source: { type: csv, config: { path: ./bad.csv } }\n  sink: { type: jsonl, config: { path: ./out.jsonl } }\n  state: { type: memory }\n  batch_size: 2\n",
    );
    let run = dir.faucet(&["run", "p.yaml"]);
    run.expect_code(1).stderr_has(&[
        "2 records in 1 page were committed",
        "`memory` state store forgets",
        "starts from the beginning",
    ]);
    assert!(!run.stderr.contains("resumes after them"), "{}", run.stderr);
}

/// A bookmark the source cannot use (another source type's, or malformed) is the source's
/// "cannot resume", naming the source — not a failure of a state store called `csv` or
/// `bookmark` — with the fix, exit code 1 and kind `state`; nothing is written.
#[test]
fn a_bookmark_the_source_cannot_use_is_named_as_such() {
    for foreign in [
        r#"{"bookmark": {"lsn": "0/16B3748"}}"#,
        r#"{"bookmark": {"file": "data.csv", "byte_offset": "five"}}"#,
    ] {
        let dir = setup(&csv_pipeline("p", ""));
        dir.write(".faucet/state/p.json", foreign);
        let run = dir.faucet(&["run", "p.yaml"]);
        run.expect_code(1).stderr_has(&[
            "error: csv: cannot resume: the stored bookmark",
            "was not made by a csv source reading",
            "delete the state key",
        ]);
        assert!(!run.stderr.contains("state store"), "{}", run.stderr);
        assert!(!dir.join("out/data.jsonl").exists() || dir.lines("out/data.jsonl").is_empty());
        let doc = dir.faucet(&["run", "p.yaml", "--output", "json"]).json();
        let error = &doc["runs"][0]["error"];
        assert_eq!(error["kind"], "state", "{doc}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("csv: cannot resume: "), "{doc}");
    }
}

/// The same for a `postgres-cdc` source given a csv bookmark: refused before connecting.
#[cfg(feature = "postgres")]
#[test]
fn a_file_bookmark_given_to_a_cdc_source_is_named_as_such() {
    let dir = setup(
        "version: 1\nname: p\npipeline:\n  source: { type: postgres-cdc, config: { connection_url: 'postgres://u@127.0.0.1:1/db', slot_name: s, publication: p, tables: [public.t] } }\n  sink: { type: jsonl, config: { path: ./out/data.jsonl } }\n",
    );
    dir.write(
        ".faucet/state/p.json",
        r#"{"bookmark": {"file": "data.csv", "byte_offset": 5}}"#,
    );
    let run = dir.faucet(&["run", "p.yaml"]);
    run.expect_code(1).stderr_has(&[
        "error: postgres-cdc: cannot resume: ",
        "is not a postgres-cdc bookmark (unknown field `file`)",
    ]);
    assert!(!run.stderr.contains("state store"), "{}", run.stderr);
}
