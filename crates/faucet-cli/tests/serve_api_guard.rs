//! `faucet serve`'s API at its edges, through the binary: the bearer scheme in any case, a
//! non-ASCII token, `--listen` with a host name, and off loopback every read but `/healthz`
//! and a bare `/readyz` behind the token (`/metrics` opened on purpose by `--public-metrics`;
//! the status page `/`, which holds no data, open).

use faucet_test_support::json_keys as keys;

use crate::serve::two_pipelines as pipelines;
use crate::support::server::Server;

const TOKEN: &str = "guard-test-token-0123456789";

#[test]
fn the_bearer_scheme_is_case_insensitive_and_a_non_ascii_token_authenticates() {
    let dir = pipelines();
    let server = Server::start(&dir, &["pipelines/good.yaml"], Some(TOKEN));
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let auth = format!("{scheme} {TOKEN}");
        let (code, body) =
            server.request_authorized("PUT", "/pipelines/good/pause", Some(auth.as_bytes()));
        assert_eq!(code, 200, "{scheme}: {body}");
    }
    let wrong = format!("Bearer {}", TOKEN.to_uppercase());
    let (code, _) =
        server.request_authorized("PUT", "/pipelines/good/pause", Some(wrong.as_bytes()));
    assert_eq!(code, 401, "the token itself is compared exactly");
    let (code, _) = server.request_authorized(
        "PUT",
        "/pipelines/good/pause",
        Some(format!("Basic {TOKEN}").as_bytes()),
    );
    assert_eq!(code, 401);
    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");

    // A token with non-ASCII characters arrives as its UTF-8 bytes, and admits.
    let unicode = "pässwörd-ünïcödé-0123456789";
    let server = Server::start(&dir, &["pipelines/good.yaml"], Some(unicode));
    let auth = format!("Bearer {unicode}");
    let (code, body) =
        server.request_authorized("PUT", "/pipelines/good/resume", Some(auth.as_bytes()));
    assert_eq!(code, 200, "{body}");
    let (code, _) = server.request_authorized(
        "PUT",
        "/pipelines/good/resume",
        Some("Bearer pässwörd-ünïcödé-012345678".as_bytes()),
    );
    assert_eq!(code, 401);
    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn listen_takes_a_host_name_and_refuses_one_that_does_not_resolve() {
    let dir = pipelines();
    let server = Server::launch_at(
        &dir,
        "localhost:0",
        "m1",
        &["pipelines/good.yaml"],
        None,
        &[],
    );
    let (code, doc) = server.json("GET", "/healthz", None);
    assert_eq!((code, doc["status"].as_str()), (200, Some("ok")));
    // On loopback (every address `localhost` resolves to), reads are open.
    let (code, doc) = server.json("GET", "/pipelines", None);
    assert_eq!(code, 200, "{doc}");
    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");
    for (listen, said) in [
        ("no-such-host.invalid:7373", "does not resolve"),
        ("localhost", "has no port"),
    ] {
        dir.faucet(&["serve", "--listen", listen, "pipelines/good.yaml"])
            .expect_code(2)
            .stderr_has(&["--listen", said]);
    }
}

#[test]
fn off_loopback_reads_need_the_token_and_readyz_without_it_is_bare() {
    let dir = pipelines();
    let server = Server::launch_at(&dir, "0.0.0.0:0", "m1", &["pipelines"], Some(TOKEN), &[]);
    server.wait_for("bad", "FAILED", |s| s["state"] == "FAILED");
    for route in ["/pipelines", "/pipelines/good", "/members", "/metrics"] {
        let (code, body) = server.request("GET", route, None);
        assert_eq!(code, 401, "{route} without the token: {body}");
        assert!(!body.contains("bad.csv"), "{route}: {body}");
        let (code, body) = server.request("GET", route, Some(TOKEN));
        assert_eq!(code, 200, "{route} with the token: {body}");
    }
    let (code, body) = server.request("GET", "/pipelines", Some("wrong-token-0123456789"));
    assert_eq!(code, 401, "{body}");
    // The status page holds no data: served to anyone, it reads the API with the token.
    let (code, page) = server.request("GET", "/", None);
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<title>faucet serve</title>"), "{page}");
    assert!(
        !page.contains("bad.csv") && !page.contains("good.yaml"),
        "{page}"
    );
    // Readiness: the status for anyone (probes), the reasons only with the token.
    let (code, doc) = server.json("GET", "/readyz", None);
    assert_eq!(code, 503, "{doc}");
    assert_eq!(keys(&doc), ["ready"], "{doc}");
    let (code, doc) = server.json("GET", "/readyz", Some(TOKEN));
    assert_eq!(code, 503, "{doc}");
    assert!(doc["not_ready"].to_string().contains("FAILED"), "{doc}");
    let (code, _) = server.json("GET", "/healthz", None);
    assert_eq!(code, 200);
    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");

    // `--public-metrics` opens /metrics on purpose, and nothing else.
    let server = Server::launch_at(
        &dir,
        "0.0.0.0:0",
        "m1",
        &["pipelines/good.yaml", "--public-metrics"],
        Some(TOKEN),
        &[],
    );
    let (code, body) = server.request("GET", "/metrics", None);
    assert_eq!(code, 200, "{body}");
    let (code, _) = server.request("GET", "/pipelines", None);
    assert_eq!(code, 401);
    let (code, stderr) = server.terminate();
    assert_eq!(code, 0, "{stderr}");
}
