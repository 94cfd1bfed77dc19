//! Unit tests of [`load`]: names, defaults, paths, matrix merging and error attribution.

#![cfg(feature = "files")]

use std::path::{Path, PathBuf};

use super::*;
use crate::registry::{SinkConfig, SourceConfig};

fn load_text(text: &str) -> (tempfile::TempDir, Result<Loaded, FaucetError>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("orders.yaml");
    std::fs::write(&path, text).expect("write");
    let loaded = load(&path);
    (dir, loaded)
}

fn config_error(r: &Result<(String, PipelineConfig), FaucetError>) -> (String, String) {
    match r {
        Err(FaucetError::Config { field, message }) => (field.clone(), message.clone()),
        other => panic!("expected a config error, got {other:?}"),
    }
}

const BASE: &str = "version: 1
pipeline:
  source: { type: csv, config: { path: ./in/data.csv, delimiter: ';' } }
  sink: { type: jsonl, config: { path: out.jsonl } }
";

fn csv_path(p: &PipelineConfig) -> PathBuf {
    match &p.source {
        SourceConfig::Csv(c) => c.path.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn defaults_name_state_and_paths() {
    let (dir, loaded) = load_text(BASE);
    let loaded = loaded.expect("loads");
    assert_eq!(loaded.name, "orders", "the file's stem");
    assert!(!loaded.has_matrix);
    let row = &loaded.rows[0];
    let (key, p) = row.config.as_ref().expect("valid");
    assert_eq!(key, "orders");
    let base = std::path::absolute(dir.path()).expect("absolute");
    assert_eq!(csv_path(p), base.join("in/data.csv"));
    match &p.sink {
        SinkConfig::Jsonl(c) => assert_eq!(c.path, base.join("out.jsonl")),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.state.type_name(), "file");
    assert_eq!(
        p.state.target(),
        base.join(".faucet/state").display().to_string()
    );
    assert_eq!(p.delivery, DeliveryRequest::AtLeastOnce);
    assert_eq!(p.batch_size, 10_000);
}

#[test]
fn matrix_rows_merge_deeply_and_errors_point_at_their_origin() {
    let text = format!(
        "{BASE}matrix:
  - {{ id: eu, source: {{ config: {{ path: /abs/eu.csv }} }}, batch_size: 5 }}
  - {{ id: us, source: {{ config: {{ delimitr: ',' }} }} }}
  - {{ id: asia, source: {{ type: jsonl }} }}
  - {{ id: x, delivery: maybe }}
"
    );
    let (_dir, loaded) = load_text(&text);
    let loaded = loaded.expect("loads");
    assert!(loaded.has_matrix);
    let labels: Vec<&str> = loaded.rows.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["eu", "us", "asia", "x"]);

    let (key, eu) = loaded.rows[0].config.as_ref().expect("eu valid");
    assert_eq!(key, "orders::eu");
    assert_eq!(csv_path(eu), Path::new("/abs/eu.csv"));
    assert_eq!(eu.batch_size, 5);
    match &eu.source {
        SourceConfig::Csv(c) => assert_eq!(c.delimiter, ";", "kept from the pipeline"),
        other => panic!("{other:?}"),
    }

    // A field the row wrote: reported at the row.
    let (field, message) = config_error(&loaded.rows[1].config);
    assert_eq!(field, "matrix[1].source.config.delimitr");
    assert!(message.contains("unknown field `delimitr`"), "{message}");

    // A field of the pipeline that does not fit the row's type: reported at the pipeline,
    // naming the row.
    let (field, message) = config_error(&loaded.rows[2].config);
    assert_eq!(field, "pipeline.source.config.delimiter");
    assert!(message.contains("(in matrix row `asia`)"), "{message}");

    let (field, message) = config_error(&loaded.rows[3].config);
    assert_eq!(field, "matrix[3].delivery");
    assert!(message.contains("unknown variant `maybe`"), "{message}");
}

#[test]
fn yaml_1_1_booleans_and_leading_zeros_stay_strings() {
    // `NO` and `007` as plain scalars: with YAML 1.1 rules they would be `false` and `7`.
    let text = format!(
        "{BASE}  state: {{ type: redis, config: {{ url: 'redis://h/', prefix: NO }} }}\nname: 007\n"
    );
    let (_dir, loaded) = load_text(&text);
    let loaded = loaded.expect("loads");
    assert_eq!(loaded.name, "007");
    let (_, p) = loaded.rows[0].config.as_ref().expect("valid");
    assert_eq!(p.state.target(), "redis://h/ prefix NO");
}

#[test]
fn anchors_work_and_alias_bombs_are_refused() {
    let text = "version: 1
defaults: &sink { type: jsonl, config: { path: out.jsonl } }
";
    let (_dir, loaded) = load_text(text);
    let err = loaded.expect_err("unknown top-level field").to_string();
    assert!(err.contains("unknown field `defaults`"), "{err}");

    let text = "version: 1
pipeline:
  source: &src { type: csv, config: { path: a.csv } }
  sink: { type: jsonl, config: { path: out.jsonl } }
matrix:
  - { id: a, source: *src }
";
    let (_dir, loaded) = load_text(text);
    assert!(loaded.expect("aliases resolve").rows[0].config.is_ok());

    let mut bomb = String::from("version: 1\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        ));
    }
    let started = std::time::Instant::now();
    let (_dir, loaded) = load_text(&bomb);
    let err = loaded.expect_err("refused").to_string();
    assert!(err.contains("alias bomb"), "{err}");
    // Expanded, the bomb has 10^12 nodes: it would never be refused within a minute. The
    // bound is loose because this debug build takes seconds on a loaded 2-core machine.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}

#[test]
fn strings_for_numbers_only_where_documented() {
    let (_dir, loaded) = load_text(&format!("{BASE}  batch_size: '250'\n"));
    let loaded = loaded.expect("loads");
    assert_eq!(
        loaded.rows[0].config.as_ref().expect("valid").1.batch_size,
        250
    );
    let (_dir, loaded) = load_text(&format!("{BASE}  batch_size: many\n"));
    let (field, _) = config_error(&loaded.expect("loads").rows[0].config);
    assert_eq!(field, "pipeline.batch_size");
}

#[test]
fn max_page_delay_defaults_parses_and_names_its_path() {
    let delay = |text: &str| {
        let (_dir, loaded) = load_text(text);
        let loaded = loaded.expect("loads");
        loaded.rows[0]
            .config
            .as_ref()
            .expect("valid")
            .1
            .max_page_delay
    };
    let ms = std::time::Duration::from_millis;
    assert_eq!(delay(BASE), ms(50), "the default");
    for (given, want) in [("250", 250), ("'20'", 20), ("2s", 2000), ("'150ms'", 150)] {
        let text = format!("{BASE}  max_page_delay: {given}\n");
        assert_eq!(delay(&text), ms(want), "{given}");
    }
    for bad in ["0", "-1", "soon", "2h"] {
        let (_dir, loaded) = load_text(&format!("{BASE}  max_page_delay: {bad}\n"));
        let (field, message) = config_error(&loaded.expect("loads").rows[0].config);
        assert_eq!(field, "pipeline.max_page_delay", "{bad}: {message}");
    }
    // A matrix row overrides it.
    let (_dir, loaded) = load_text(&format!(
        "{BASE}matrix:\n  - {{ id: a }}\n  - {{ id: b, max_page_delay: 5ms }}\n"
    ));
    let rows = loaded.expect("loads").rows;
    let delay = |i: usize| rows[i].config.as_ref().expect("valid").1.max_page_delay;
    assert_eq!(delay(0), std::time::Duration::from_millis(50));
    assert_eq!(delay(1), std::time::Duration::from_millis(5));
}

#[test]
fn matrix_rows_override_the_schedule_and_a_bad_one_is_named_by_row() {
    let text = format!(
        "{BASE}  schedule: \"0 6 * * *\"\nmatrix:\n  - {{ id: a }}\n  - {{ id: b, schedule: {{ cron: \"*/10 * * * * *\", timezone: Asia/Tokyo }} }}\n  - {{ id: c, schedule: {{ cron: \"0 25 * * *\" }} }}\n"
    );
    let (_dir, loaded) = load_text(&text);
    let rows = loaded.expect("loads").rows;
    let schedule = |i: usize| {
        rows[i]
            .config
            .as_ref()
            .expect("valid")
            .1
            .schedule
            .as_ref()
            .map(ToString::to_string)
    };
    assert_eq!(schedule(0).as_deref(), Some("0 6 * * * (UTC)"));
    assert_eq!(schedule(1).as_deref(), Some("*/10 * * * * * (Asia/Tokyo)"));
    let (field, message) = config_error(&rows[2].config);
    assert_eq!(field, "matrix[2].schedule");
    assert!(
        message.contains("cron") && message.contains("not a cron expression"),
        "{message}"
    );
}
