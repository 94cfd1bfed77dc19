//! A running `faucet serve` on a loopback port, for the serve tests: start it, send it HTTP
//! requests, wait for a pipeline's status, SIGTERM or SIGKILL it.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Dir, faucet_command};

/// A running `faucet serve`, its address and its stderr so far.
pub(crate) struct Server {
    /// The process.
    pub(crate) child: Child,
    /// `host:port` of its API.
    pub(crate) addr: String,
    stderr: Arc<Mutex<String>>,
    /// The API token it was started with, sent by [`Server::status`] (reads need it off
    /// loopback).
    token: Option<String>,
}

impl Server {
    /// A process started by the caller that serves HTTP on `addr` (its stderr not read).
    pub(crate) fn adopt(child: Child, addr: String) -> Self {
        Self {
            child,
            addr,
            stderr: Arc::default(),
            token: None,
        }
    }

    /// `faucet serve --member m1 ARGS` in `dir`, `token` as FAUCET_API_TOKEN.
    pub(crate) fn start(dir: &Dir, args: &[&str], token: Option<&str>) -> Self {
        Self::start_env(dir, args, token, &[])
    }

    /// [`Server::start`] with `env` set.
    pub(crate) fn start_env(
        dir: &Dir,
        args: &[&str],
        token: Option<&str>,
        env: &[(&str, &str)],
    ) -> Self {
        Self::launch(dir, "m1", args, token, env)
    }

    /// `faucet serve --listen 127.0.0.1:0 --member MEMBER ARGS` in `dir`, `token` as
    /// FAUCET_API_TOKEN, `env` set; returns once it listens.
    pub(crate) fn launch(
        dir: &Dir,
        member: &str,
        args: &[&str],
        token: Option<&str>,
        env: &[(&str, &str)],
    ) -> Self {
        Self::launch_at(dir, "127.0.0.1:0", member, args, token, env)
    }

    /// [`Server::launch`] with `--listen LISTEN`.
    pub(crate) fn launch_at(
        dir: &Dir,
        listen: &str,
        member: &str,
        args: &[&str],
        token: Option<&str>,
        env: &[(&str, &str)],
    ) -> Self {
        let mut cmd = faucet_command();
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.current_dir(dir.path())
            .args(["serve", "--listen", listen, "--member", member])
            .args(args)
            .env("FAUCET_LOG", "info")
            .env_remove("FAUCET_API_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(t) = token {
            cmd.env("FAUCET_API_TOKEN", t);
        }
        let mut child = cmd.spawn().expect("spawn faucet serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        let addr = rest.split(',').next().unwrap_or_default().to_owned();
                        let _ = tx.send(addr);
                    }
                    let mut s = stderr.lock().expect("lock");
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        }
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!(
                    "faucet serve did not start: {}",
                    stderr.lock().expect("lock")
                )
            });
        Self {
            child,
            addr,
            stderr,
            token: token.map(str::to_owned),
        }
    }

    /// Sends one request; returns the status code and the body.
    pub(crate) fn request(&self, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
        let auth = token.map(|t| format!("Bearer {t}"));
        self.request_authorized(method, path, auth.as_deref().map(str::as_bytes))
    }

    /// Sends one request with `authorization` as the `Authorization` header's bytes (sent
    /// as they are, UTF-8 included); returns the status code and the body.
    pub(crate) fn request_authorized(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&[u8]>,
    ) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr).into_bytes();
        if let Some(a) = authorization {
            head.extend_from_slice(b"Authorization: ");
            head.extend_from_slice(a);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"Content-Length: 0\r\nConnection: close\r\n\r\n");
        stream.write_all(&head).expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status code");
        (code, body.to_owned())
    }

    pub(crate) fn json(&self, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
        let (code, body) = self.request(method, path, token);
        let doc = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        (code, doc)
    }

    pub(crate) fn status(&self, key: &str) -> Value {
        let (code, doc) = self.json("GET", &format!("/pipelines/{key}"), self.token.as_deref());
        assert_eq!(code, 200, "{doc}");
        doc
    }

    /// Waits until `check` holds for the status of `key`.
    pub(crate) fn wait_for(&self, key: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let doc = self.status(key);
            if check(&doc) {
                return doc;
            }
            assert!(
                Instant::now() < deadline,
                "{key}: {what} within 30 s; last status {doc}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// SIGKILL, waited for; returns its stderr.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(100));
        self.stderr()
    }

    /// SIGTERM, then the exit code and stderr.
    pub(crate) fn terminate(mut self) -> (i32, String) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        let code = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("faucet serve did not drain within 30 s: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(100));
        (code, self.stderr())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
