//! The status page (`GET /`) in a real browser: Debian's chromium, headless, driven by
//! playwright-core (`tests/browser/status_page.mjs`; both installed by
//! `scripts/services.sh`) against a running `faucet serve`. The page shows each pipeline
//! with its state and owner and the member's drain state, shows an error holding HTML as
//! text, and its pause button — after asking for the token, refusing a wrong one — pauses
//! the pipeline, which the API then reports as PAUSED. On failure the screenshot is kept
//! under the test target's tmp directory and its path printed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::serve::two_pipelines;
use crate::support::server::Server;

const TOKEN: &str = "status-page-token-0123456789";
const CHROMIUM: &str = "/usr/bin/chromium";

/// The browser script's directory, its `node_modules` checked.
fn browser_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: the status page is tested in Debian's chromium; run \
         scripts/services.sh (it runs `apt-get install -y chromium`)"
    );
    assert!(
        dir.join("node_modules/playwright-core/package.json")
            .exists(),
        "playwright-core is missing in {}: run scripts/services.sh (it runs `npm ci` there)",
        dir.display()
    );
    dir
}

#[test]
fn status_page_shows_the_pipelines_and_its_pause_button_pauses_one() {
    let browser = browser_dir();
    let dir = two_pipelines();
    // A row whose error holds HTML: the page must show it as text.
    let hostile = "<img src=x onerror=document.title='pwned'>.csv";
    dir.write(hostile, "id,name\n1,\"closed\"early\n");
    dir.write(
        "pipelines/hostile.yaml",
        format!(
            "version: 1\nname: hostile\npipeline:\n  source: {{ type: csv, config: {{ path: \"../{hostile}\" }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ../out/hostile.jsonl }} }}\n  \
             state: {{ type: file, config: {{ path: ../state }} }}\n  schedule: \"*/1 * * * * *\"\n"
        ),
    );
    let server = Server::start(&dir, &["pipelines"], Some(TOKEN));
    server.wait_for("good", "50 records", |d| d["records"] == 50);
    server.wait_for("hostile", "FAILED", |d| d["state"] == "FAILED");

    let (code, html) = server.request("GET", "/", None);
    assert_eq!(code, 200, "{html}");
    assert!(html.contains("<title>faucet serve</title>"), "{html}");

    let out =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("status_page-{}", std::process::id()));
    let url = format!("http://{}/", server.addr);
    let run = Command::new("node")
        .current_dir(&browser)
        .arg("status_page.mjs")
        .args([url.as_str(), TOKEN, "good", "hostile"])
        .arg(&out)
        .output()
        .expect("node (Debian's nodejs) must be on PATH");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let seen: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "the browser script printed no result: {stdout}\n{}",
                String::from_utf8_lossy(&run.stderr)
            )
        });
    assert!(
        run.status.success() && seen["ok"] == true,
        "the status page failed in chromium: {}\nscreenshot: {}\nserver stderr:\n{}\npage:\n{}",
        seen["error"],
        seen["screenshot"].as_str().unwrap_or("(none)"),
        server.stderr(),
        seen["html"].as_str().unwrap_or_default()
    );
    assert_eq!(seen["member"], "m1", "{seen}");
    assert_eq!(seen["owner"], "m1 (here)", "{seen}");
    // The good row's 50 records end its file: its progress is the whole file's bytes.
    let size = crate::support::numbered_csv(1, 50, true).len();
    assert_eq!(
        seen["progress"],
        format!("100% ({size} of {size} bytes)"),
        "{seen}"
    );
    assert_eq!(seen["draining"], "no", "{seen}");
    assert!(
        seen["hostileError"]
            .as_str()
            .is_some_and(|e| e.contains(hostile)),
        "the error shows the file name as text: {seen}"
    );
    assert_eq!(
        seen["imagesInTable"], 0,
        "no element made from data: {seen}"
    );
    assert_eq!(
        seen["title"], "faucet serve",
        "no script ran from data: {seen}"
    );
    assert_eq!(seen["dialogs"], serde_json::json!([]), "{seen}");
    // The wrong token's 401 is the only console error chromium may log.
    assert!(
        seen["consoleErrors"].as_array().is_some_and(|errors| errors
            .iter()
            .all(|e| e.as_str().is_some_and(|e| e.contains("401")))),
        "{seen}"
    );
    assert_eq!(seen["tokenKept"], true, "{seen}");
    assert!(
        seen["stateAfter"]
            .as_str()
            .is_some_and(|s| s.starts_with("PAUSED")),
        "{seen}"
    );

    // The click went through the API: the pipeline is PAUSED, and stays so.
    let status = server.status("good");
    assert_eq!(status["state"], "PAUSED", "{status}");
    let records = status["records"].clone();
    dir.append("good.csv", &crate::support::numbered_csv(51, 5, false));
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(
        server.status("good")["records"],
        records,
        "a paused row moved records"
    );
    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains(TOKEN), "the token is never printed");
}
