//! Every example pipeline under `examples/` parses and validates (docs/architecture.md, "The shape the code keeps", point 10).

use std::path::{Path, PathBuf};

use crate::support::{Run, faucet_command, repo_root};

/// The registry's list of connector features (`src/registry/features.rs`).
#[path = "../src/registry/features.rs"]
mod features;

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() && !name.starts_with('.') && name != "out" {
            yaml_files(&p, out);
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            out.push(p);
        }
    }
}

/// The `${env:NAME}` names a file refers to.
fn env_names(text: &str) -> Vec<String> {
    text.split("${env:")
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
}

/// Whether a "not compiled" error is expected for this build: every error names a feature
/// this build lacks.
fn compiled_out_is_expected(stderr: &str) -> bool {
    stderr.lines().filter(|l| l.starts_with("error:")).all(|l| {
        l.split("rebuild with --features ")
            .nth(1)
            .is_some_and(|f| features::is_compiled_out(f.trim()))
    })
}

#[test]
fn every_example_config_validates() {
    let mut files = Vec::new();
    yaml_files(&repo_root().join("examples"), &mut files);
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("examples/weather/faucet.yaml")),
        "examples/weather/faucet.yaml is missing: {files:?}"
    );
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read example");
        let mut cmd = faucet_command();
        cmd.arg("validate").arg(&file);
        for name in env_names(&text) {
            if std::env::var_os(&name).is_none() {
                let dummy = if name.contains("URL") {
                    "postgres://faucet:example@127.0.0.1:5432/test"
                } else {
                    "example"
                };
                cmd.env(&name, dummy);
            }
        }
        let run = Run::from_output(cmd.output().expect("run faucet validate"));
        if run.code != 0 && compiled_out_is_expected(&run.stderr) {
            continue;
        }
        assert_eq!(
            run.code,
            0,
            "{} does not validate\n--- stdout\n{}\n--- stderr\n{}",
            file.display(),
            run.stdout,
            run.stderr
        );
        run.stdout_has(&["state key", "delivery", "valid"]);
    }
}

#[test]
fn the_weather_example_states_its_plan() {
    let file = repo_root().join("examples/weather/faucet.yaml");
    let run = Run::from_output(
        faucet_command()
            .arg("validate")
            .arg(&file)
            .output()
            .expect("run"),
    );
    run.expect_code(0).stdout_has(&[
        "pipeline `weather`, 1 run",
        "state key   weather\n",
        "examples/weather/weather.csv",
        "sink        jsonl ",
        "examples/weather/out/weather.jsonl",
        "state       file ",
        "examples/weather/.faucet/state",
        "batch size  10000",
        "delivery    at-least-once",
    ]);
}
