//! `faucet run` end to end on real files: exact values, resume, appends, matrix rows, `.env`.

use faucet_test_support::weather::{INT_COLUMNS, NUMERIC_COLUMNS};
use serde_json::Value;

use crate::support::{Dir, csv_pipeline, ids, numbered_csv};

/// Asserts that the output `line` holds exactly the CSV row: `NA` is null, the example's int
/// and numeric columns are JSON numbers written with the very characters of the file (`1e3`
/// stays `1e3`, `10.357019999999999` keeps every digit), the rest strings.
fn assert_same(header: &csv::StringRecord, row: &csv::StringRecord, line: &str, at: usize) {
    let record: Value = serde_json::from_str(line).expect("a JSON line");
    let obj = record.as_object().expect("an object");
    assert_eq!(obj.len(), header.len(), "record {at}: {line}");
    for (name, text) in header.iter().zip(row.iter()) {
        let fragment = if text == "NA" {
            format!("\"{name}\":null")
        } else if INT_COLUMNS.contains(&name) || NUMERIC_COLUMNS.contains(&name) {
            format!("\"{name}\":{text}")
        } else {
            format!("\"{name}\":{}", Value::from(text))
        };
        assert!(
            line.contains(&format!("{fragment},")) || line.contains(&format!("{fragment}}}")),
            "record {at}: {fragment} not in {line}"
        );
    }
}

fn csv_rows(bytes: &[u8]) -> (csv::StringRecord, Vec<csv::StringRecord>) {
    let mut r = csv::Reader::from_reader(bytes);
    let header = r.headers().expect("header").clone();
    let rows = r.records().map(|x| x.expect("csv row")).collect();
    (header, rows)
}

#[test]
fn weather_runs_resumes_and_moves_only_appended_rows() {
    let dir = Dir::new();
    dir.with_weather_example();
    let out = "out/weather.jsonl";

    // Run 1: every row, values exact.
    let run = dir.faucet(&["run", "faucet.yaml"]);
    run.expect_code(0).stdout_has(&[
        "weather: 26115 records in 3 pages",
        "at-least-once",
        "state key weather",
    ]);
    let (header, rows) = csv_rows(&dir.read("weather.csv").expect("csv"));
    assert_eq!(rows.len(), 26_115);
    let lines = dir.lines(out);
    assert_eq!(lines.len(), rows.len(), "one JSON line per CSV row");
    for (i, (row, line)) in rows.iter().zip(&lines).enumerate() {
        assert_same(&header, row, line, i);
    }
    let after_first = dir.read(out).expect("output");

    // Run 2: resumes at the end, moves nothing, output byte for byte the same.
    let run = dir.faucet(&["run", "faucet.yaml", "--output", "json"]);
    run.expect_code(0);
    let doc = run.json();
    assert_eq!(doc["runs"][0]["rows"], 0, "{doc}");
    assert_eq!(doc["runs"][0]["bookmark"]["records"], 26_115, "{doc}");
    assert_eq!(dir.read(out).expect("output"), after_first);

    // Append 10 rows: run 3 moves exactly those 10.
    let appended: String = std::str::from_utf8(&dir.read("weather.csv").expect("csv"))
        .expect("utf-8")
        .lines()
        .skip(1)
        .take(10)
        .map(|l| format!("{}\n", l.replacen("2013,", "2014,", 1)))
        .collect();
    dir.append("weather.csv", &appended);
    let run = dir.faucet(&["run", "faucet.yaml", "--output", "json"]);
    run.expect_code(0);
    assert_eq!(run.json()["runs"][0]["rows"], 10);
    let lines = dir.lines(out);
    assert_eq!(lines.len(), 26_125);
    let bytes = dir.read(out).expect("output");
    assert_eq!(
        &bytes[..after_first.len()],
        &after_first[..],
        "earlier output untouched"
    );
    let (_, appended_rows) = csv_rows(
        format!(
            "{}\n{appended}",
            header.iter().collect::<Vec<_>>().join(",")
        )
        .as_bytes(),
    );
    assert_eq!(appended_rows.len(), 10);
    for (i, (row, line)) in appended_rows.iter().zip(&lines[26_115..]).enumerate() {
        assert_same(&header, row, line, 26_115 + i);
        assert!(line.contains("\"year\":2014,"), "{line}");
    }
}

#[test]
fn matrix_rows_run_in_order_with_their_own_state_keys() {
    let dir = Dir::new();
    dir.write("eu.csv", numbered_csv(1, 5, true));
    dir.write("us.csv", numbered_csv(100, 7, true));
    dir.write(
        "orders.yaml",
        "version: 1\n\
         pipeline:\n  \
           source: { type: csv, config: { path: ./eu.csv } }\n  \
           sink: { type: jsonl, config: { path: ./out/eu.jsonl } }\n  \
           batch_size: 2\n\
         matrix:\n  \
           - { id: eu }\n  \
           - { id: us, source: { config: { path: ./us.csv } }, sink: { config: { path: ./out/us.jsonl } } }\n",
    );
    let run = dir.faucet(&["run", "orders.yaml"]);
    assert_eq!(
        run.stderr, "",
        "a clean run logs nothing at the default level"
    );
    run.expect_code(0).stdout_has(&[
        "eu: 5 records in 3 pages",
        "state key orders::eu",
        "us: 7 records in 4 pages",
        "state key orders::us",
    ]);
    let eu = run.stdout.find("eu:").expect("eu line");
    let us = run.stdout.find("us:").expect("us line");
    assert!(eu < us, "rows run in file order:\n{}", run.stdout);
    assert_eq!(ids(&dir.jsonl("out/eu.jsonl")), (1..=5).collect::<Vec<_>>());
    assert_eq!(
        ids(&dir.jsonl("out/us.jsonl")),
        (100..107).collect::<Vec<_>>()
    );
    assert!(dir.join(".faucet/state/orders::eu.json").exists());
    assert!(dir.join(".faucet/state/orders::us.json").exists());

    // --row runs one row only.
    dir.append("eu.csv", &numbered_csv(6, 2, false));
    dir.append("us.csv", &numbered_csv(107, 3, false));
    let run = dir.faucet(&["run", "orders.yaml", "--row", "us", "--output", "json"]);
    run.expect_code(0);
    let doc = run.json();
    assert_eq!(doc["runs"].as_array().map(Vec::len), Some(1), "{doc}");
    assert_eq!(doc["runs"][0]["row"], "us");
    assert_eq!(doc["runs"][0]["state_key"], "orders::us");
    assert_eq!(doc["runs"][0]["rows"], 3);
    assert_eq!(ids(&dir.jsonl("out/eu.jsonl")).len(), 5, "eu did not run");

    let run = dir.faucet(&["run", "orders.yaml", "--row", "asia"]);
    run.expect_code(2).stderr_has(&["--row", "asia", "eu, us"]);
}

#[test]
fn dotenv_beside_the_config_fills_variables_and_the_environment_wins() {
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 3, true));
    dir.write(
        "pipeline.yaml",
        "version: 1\n\
         pipeline:\n  \
           source: { type: csv, config: { path: \"${env:FAUCET_CLI_TEST_IN}\" } }\n  \
           sink: { type: jsonl, config: { path: \"./out/${env:FAUCET_CLI_TEST_OUT}.jsonl\" } }\n  \
           batch_size: \"${env:FAUCET_CLI_TEST_BATCH}\"\n",
    );
    dir.write(
        ".env",
        "FAUCET_CLI_TEST_IN=./data.csv\nFAUCET_CLI_TEST_OUT=from-dotenv\nFAUCET_CLI_TEST_BATCH=2\n",
    );
    let run = dir.faucet(&["run", "pipeline.yaml"]);
    run.expect_code(0).stdout_has(&["3 records in 2 pages"]);
    assert_eq!(ids(&dir.jsonl("out/from-dotenv.jsonl")), vec![1, 2, 3]);

    // A real environment variable is not overridden by .env (fresh state: a new output).
    std::fs::remove_dir_all(dir.join(".faucet")).expect("reset state");
    let run = dir.faucet_env(
        &["run", "pipeline.yaml"],
        &[("FAUCET_CLI_TEST_OUT", "from-env")],
    );
    run.expect_code(0);
    assert_eq!(ids(&dir.jsonl("out/from-env.jsonl")), vec![1, 2, 3]);
}

#[test]
fn the_default_config_is_faucet_yaml_and_paths_are_relative_to_the_config() {
    let dir = Dir::new();
    dir.write("conf/data.csv", numbered_csv(1, 4, true));
    dir.write("conf/faucet.yaml", csv_pipeline("conf", ""));
    // From another directory, relative paths still mean the config's directory.
    let run = dir.faucet(&["run", "conf/faucet.yaml"]);
    run.expect_code(0).stdout_has(&["conf: 4 records"]);
    assert_eq!(ids(&dir.jsonl("conf/out/data.jsonl")), vec![1, 2, 3, 4]);
    assert!(dir.join("conf/.faucet/state/conf.json").exists());

    // With no argument, faucet.yaml in the current directory; it resumes from the same state.
    let mut cmd = crate::support::faucet_command();
    cmd.current_dir(dir.join("conf")).arg("run");
    let run = crate::support::Run::from_output(cmd.output().expect("run"));
    run.expect_code(0).stdout_has(&["conf: 0 records"]);
}

#[test]
fn memory_state_forgets_and_quiet_prints_nothing() {
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 3, true));
    dir.write("m.yaml", csv_pipeline("m", "  state: { type: memory }\n"));
    let run = dir.faucet(&["run", "m.yaml", "--quiet"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "");
    let run = dir.faucet(&["run", "m.yaml", "-q"]);
    // Memory state forgets; the output already holds the rows, so the second run refuses to
    // append them again (case 13, S1) instead of silently doubling them.
    run.expect_code(1);
    assert!(
        run.stderr.contains("no bookmark under state key `m`"),
        "{}",
        run.stderr
    );
    assert_eq!(ids(&dir.jsonl("out/data.jsonl")), vec![1, 2, 3]);
    assert!(
        !dir.join(".faucet").exists(),
        "memory state writes no files"
    );
}

#[test]
fn log_level_comes_from_the_flag_or_faucet_log() {
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 2, true));
    dir.write("p.yaml", csv_pipeline("p", "  state: { type: memory }\n"));
    let quiet = dir.faucet(&["run", "p.yaml"]);
    quiet.expect_code(0);
    assert_eq!(quiet.stderr, "");
    std::fs::remove_file(dir.join("out/data.jsonl")).expect("fresh output");
    let chatty = dir.faucet(&["--log-level", "info", "run", "p.yaml"]);
    chatty.expect_code(0);
    assert!(chatty.stderr.contains("INFO"), "{}", chatty.stderr);
    assert!(chatty.stderr.contains("starting run"), "{}", chatty.stderr);
    assert!(chatty.stderr.contains("state_key=p"), "{}", chatty.stderr);
    std::fs::remove_file(dir.join("out/data.jsonl")).expect("fresh output");
    let chatty = dir.faucet_env(&["run", "p.yaml"], &[("FAUCET_LOG", "info")]);
    chatty.expect_code(0);
    assert!(chatty.stderr.contains("run finished"), "{}", chatty.stderr);
}

#[test]
fn a_forced_progress_line_shows_the_share_of_the_file_read() {
    let dir = Dir::new();
    let csv = numbered_csv(1, 1000, true);
    dir.write("data.csv", &csv);
    let pipeline = |name: &str| {
        format!(
            "version: 1\nname: {name}\npipeline:\n  source: {{ type: csv, config: {{ path: ./data.csv }} }}\n  sink: {{ type: jsonl, config: {{ path: ./out/{name}.jsonl }} }}\n  batch_size: 100\n"
        )
    };
    dir.write("plain.yaml", pipeline("plain"));
    dir.write("share.yaml", pipeline("share"));
    // 20,432 bytes, as the line writes it.
    let size = csv.len();
    let total = format!("{},{:03}", size / 1000, size % 1000);

    // Not a terminal: no progress line by default.
    let run = dir.faucet(&["run", "plain.yaml"]);
    run.expect_code(0);
    assert!(!run.stderr.contains("records,"), "{}", run.stderr);

    // FAUCET_PROGRESS=always: one line per page, with the share of the file's bytes.
    let run = dir.faucet_env(&["run", "share.yaml"], &[("FAUCET_PROGRESS", "always")]);
    run.expect_code(0);
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("share: "))
        .collect();
    assert_eq!(lines.len(), 10, "one line per page: {}", run.stderr);
    let mut before = 0;
    for line in &lines {
        let percent: u64 = line
            .split(", ")
            .find_map(|part| part.split_once("% (").map(|(p, _)| p))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no share in {line}"));
        assert!(percent >= before, "the share grows: {lines:?}");
        before = percent;
        assert!(
            line.contains(&format!(" of {total} bytes)")),
            "the file's size: {line}"
        );
    }
    assert!(!lines[0].contains("100% ("), "{}", lines[0]);
    assert!(
        lines[9].contains(&format!("100% ({total} of {total} bytes)")),
        "{}",
        lines[9]
    );
    run.stdout_has(&["share: 1000 records in 10 pages", "100% of the source"]);
}
