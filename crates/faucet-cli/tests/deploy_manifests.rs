//! The example Kubernetes manifests of `deploy/kubernetes/`, checked offline (they are not
//! applied to a cluster here): every file passes `kubernetes-validate --strict` against the
//! Kubernetes JSON schemas the PyPI package bundles (installed by `scripts/services.sh`), and a
//! manifest with a misspelled field does not (so the check can fail); the ConfigMap's pipeline
//! files pass `faucet validate`; the Deployment runs `faucet serve` with `--cluster` from a
//! Secret (never on the command line), probes `/readyz` and `/healthz`, has resource limits,
//! and a PodDisruptionBudget covers its pods.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::support::{Dir, faucet_command, repo_root};

/// The Kubernetes version the manifests are checked against (bundled by the package).
const KUBERNETES: &str = "1.37.0";

fn manifests() -> Vec<PathBuf> {
    let dir = repo_root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// `kubernetes-validate --strict` on `file`: whether it passed, and what it said.
fn validate(file: &std::path::Path) -> (bool, String) {
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--no-warn", "-k", KUBERNETES])
        .arg(file)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "kubernetes-validate (PyPI: pip install kubernetes-validate; \
                 scripts/services.sh installs it) must be on PATH: {e}"
            )
        });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn parse(file: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(file).expect("manifest");
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The manifest of `kind`.
fn of_kind(kind: &str) -> Value {
    manifests()
        .iter()
        .map(|f| parse(f))
        .find(|m| m["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in deploy/kubernetes"))
}

#[test]
fn every_manifest_passes_the_kubernetes_schemas_offline_and_a_typo_does_not() {
    let files = manifests();
    assert!(files.len() >= 4, "{files:?}");
    for f in &files {
        let (ok, said) = validate(f);
        assert!(ok, "{}: {said}", f.display());
    }
    // The check can fail: `replicas` misspelled under strict validation.
    let text = std::fs::read_to_string(repo_root().join("deploy/kubernetes/deployment.yaml"))
        .expect("deployment");
    assert!(text.contains("  replicas: 3\n"));
    let dir = Dir::new();
    let broken = dir.write(
        "broken.yaml",
        text.replace("  replicas: 3\n", "  replica: 3\n"),
    );
    let (ok, said) = validate(&broken);
    assert!(!ok, "a misspelled field passed: {said}");
}

#[test]
fn the_deployment_serves_a_cluster_from_its_secret_with_probes_limits_and_a_budget() {
    let d = of_kind("Deployment");
    assert!(
        d["spec"]["replicas"].as_u64().is_some_and(|n| n >= 2),
        "{d}"
    );
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(args.first(), Some(&"serve"), "{args:?}");
    assert!(
        !args
            .iter()
            .any(|a| a.contains("postgres://") || *a == "--cluster"),
        "the cluster URL (a secret) must come from FAUCET_CLUSTER_URL: {args:?}"
    );
    let env = c["env"].as_array().expect("env");
    let from_secret = |name: &str| {
        env.iter()
            .any(|e| e["name"] == name && e["valueFrom"]["secretKeyRef"]["name"] == "faucet")
    };
    assert!(from_secret("FAUCET_CLUSTER_URL") && from_secret("FAUCET_API_TOKEN"));
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    // Off loopback /metrics needs the token, which annotation-based scraping cannot send.
    let scraped =
        d["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true";
    assert!(
        !scraped || args.contains(&"--public-metrics"),
        "scraped by annotation, so /metrics must be opened with --public-metrics: {args:?}"
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(c["resources"]["limits"]["memory"].is_string(), "{c}");
    assert!(c["resources"]["requests"]["cpu"].is_string(), "{c}");
    let mount = &c["volumeMounts"][0];
    let dir = mount["mountPath"].as_str().expect("mount");
    assert!(
        args.contains(&dir),
        "serve reads the mounted pipelines: {args:?}"
    );
    let config = of_kind("ConfigMap");
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        config["metadata"]["name"]
    );

    let pdb = of_kind("PodDisruptionBudget");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        d["spec"]["template"]["metadata"]["labels"]
    );
}

#[test]
fn the_configmap_s_pipeline_files_are_valid() {
    let config = of_kind("ConfigMap");
    let files = config["data"].as_object().expect("data");
    assert!(!files.is_empty());
    let dir = Dir::new();
    for (name, text) in files {
        dir.write(name, text.as_str().expect("a file"));
        let out = faucet_command()
            .current_dir(dir.path())
            .args(["validate", name])
            .env("SOURCE_PG_URL", "postgres://u@127.0.0.1:5432/src")
            .env("TARGET_PG_URL", "postgres://u@127.0.0.1:5432/dst")
            .env("FAUCET_CLUSTER_URL", "postgres://u@127.0.0.1:5432/state")
            .output()
            .expect("faucet validate");
        assert!(
            out.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
