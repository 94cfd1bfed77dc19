//! Placement and membership: fewer pipeline files, an unreachable cluster database, a member
//! restarted five times, a cron tick across members, drain and pause, refused stores.

use super::*;
#[test]
fn a_member_started_with_fewer_pipeline_files_is_never_given_a_row_it_lacks() {
    // `full` serves eight rows, `sub` only one of them (a rollout of new files in
    // progress): every row is delivered, none is left UNASSIGNED, and each member says the
    // other loaded different rows.
    let c = Cluster::new("subset");
    let rows = csv_rows(&c, 8);
    let csvjl = std::fs::read_to_string(c.dir.join("pipelines/csvjl.yaml")).expect("file");
    let (head, _) = csvjl.split_once("matrix:\n").expect("a matrix");
    c.dir.write(
        "sub/csvjl.yaml",
        format!(
            "{head}matrix:\n  - {{ id: r0, source: {{ config: {{ path: ../r0.csv }} }}, sink: {{ config: {{ path: ../out/r0.jsonl }} }} }}\n"
        ),
    );
    // `sub` settles first, so every placement counts it (by these names' weights it wins
    // r1, r6 and r7, which it lacks, besides r0).
    let sub = c.member_serving("sub", "1s", "sub");
    std::thread::sleep(Duration::from_millis(2500));
    let members: BTreeMap<&str, Server> = [
        ("full", c.member_serving("full", "1s", "pipelines")),
        ("sub", sub),
    ]
    .into_iter()
    .collect();
    eventually("every row delivered", Duration::from_secs(60), || {
        delivered(&c, &rows, 20).map_err(|e| format!("{e}; {:?}", owners(&members["full"])))
    });
    let placed = owners(&members["full"]);
    assert_eq!(placed.len(), 8, "{placed:?}");
    for (key, owner) in &placed {
        match owner.as_deref() {
            Some("full") => {}
            Some("sub") => assert_eq!(key, "csvjl::r0", "only r0 may be on sub: {placed:?}"),
            other => panic!("{key} is placed on {other:?}: {placed:?}"),
        }
    }
    let (_, doc) = members["full"].json("GET", "/members", None);
    let loaded: BTreeMap<String, u64> = doc["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or_default().to_owned(),
                m["rows_loaded"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        loaded,
        BTreeMap::from([("full".to_owned(), 8), ("sub".to_owned(), 1)])
    );
    eventually("full says sub lacks rows", Duration::from_secs(10), || {
        let said = members["full"].stderr();
        if said.contains("loaded different pipeline rows") && said.contains("lacks=7") {
            Ok(())
        } else {
            Err(said)
        }
    });
    for (_, m) in members {
        let (code, stderr) = m.terminate();
        assert_eq!(code, 0, "{stderr}");
    }
}

#[test]
fn an_unreachable_cluster_database_is_named_with_its_cause_within_seconds() {
    let dir = Dir::new();
    dir.write("a.csv", numbered_csv(1, 3, true));
    dir.write(
        "p.yaml",
        "version: 1\nname: p\npipeline:\n  source: { type: csv, config: { path: ./a.csv } }\n  sink: { type: jsonl, config: { path: ./out.jsonl } }\n  state: { type: postgres, config: { url: \"postgres://u@127.0.0.1:1/d\" } }\n  schedule: \"* * * * *\"\n",
    );
    for (url, said) in [
        ("postgres://faucet@127.0.0.1:1/cluster", "refused"),
        (
            "postgres://faucet@no-such-host.invalid:5432/cluster",
            "no-such-host.invalid:5432",
        ),
    ] {
        let mut cmd = crate::support::faucet_command();
        cmd.current_dir(dir.path())
            .args(["serve", "--listen", "127.0.0.1:0", "p.yaml"])
            .env("FAUCET_CLUSTER_URL", url);
        let host = url.split('@').nth(1).and_then(|h| h.split('/').next());
        let (_, mut child, _) = stderr_until(cmd, &[host.expect("host"), said, "retrying"]);
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn a_member_restarted_five_times_in_a_minute_moves_only_its_own_pipelines_and_backs_off() {
    let c = Cluster::new("flap");
    let rows = csv_rows(&c, 12);
    let mut members: BTreeMap<&str, Server> = ["m1", "m2", "m3"]
        .into_iter()
        .map(|m| (m, c.member(m, "2s")))
        .collect();
    eventually("every row delivered", Duration::from_secs(90), || {
        delivered(&c, &rows, 20)
    });
    // Settled, every row on its placed owner.
    eventually("every member settled", Duration::from_secs(30), || {
        let (_, doc) = members["m1"].json("GET", "/members", None);
        let all = doc["members"].as_array().cloned().unwrap_or_default();
        if all.len() == 3 && all.iter().all(|m| m["settled"] == true) {
            Ok(())
        } else {
            Err(doc.to_string())
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    let before = owners(&members["m1"]);
    let theirs: BTreeSet<String> = before
        .iter()
        .filter(|(_, o)| o.as_deref() == Some("m3"))
        .map(|(k, _)| k.clone())
        .collect();
    assert!(!theirs.is_empty(), "m3 owns some rows: {before:?}");
    c.wait_started_as_placed(&before, || errors(&members));
    let moves_before = c.moves();

    let started = Instant::now();
    for _ in 0..5 {
        members.remove("m3").expect("m3").kill();
        members.insert("m3", c.member("m3", "2s"));
        std::thread::sleep(Duration::from_millis(1500));
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    for r in &rows {
        c.dir
            .append(&format!("{r}.csv"), &numbered_csv(21, 10, false));
    }
    eventually(
        "every row delivered while m3 flaps",
        Duration::from_secs(60),
        || delivered(&c, &rows, 30),
    );

    // Only m3's rows moved, each once; m3 backs off (its settle doubled per restart).
    let moves = c.moves();
    let mut moved = 0;
    for (key, n) in &moves {
        let delta = n - moves_before.get(key).copied().unwrap_or(0);
        if theirs.contains(key) {
            assert!(delta <= 1, "{key} (m3's) moved {delta} times");
        } else {
            assert_eq!(delta, 0, "{key} is not m3's and moved {delta} times");
        }
        moved += delta;
    }
    eprintln!(
        "m3 restarted 5 times: {moved} moves, m3 owned {}",
        theirs.len()
    );
    let (_, doc) = members["m1"].json("GET", "/members", None);
    let m3 = doc["members"]
        .as_array()
        .and_then(|a| a.iter().find(|m| m["name"] == "m3"))
        .cloned()
        .expect("m3");
    assert!(
        m3["settle_seconds"].as_f64().unwrap_or_default() >= 32.0,
        "m3's settle grew: {m3}"
    );
    assert_eq!(m3["pipelines"], 0, "m3 waits out its settle: {m3}");
    assert_eq!(m3["alive"], true, "{m3}");
    for (_, m) in members {
        let (code, stderr) = m.terminate();
        assert_eq!(code, 0, "{stderr}");
    }
}

#[test]
fn a_cron_tick_across_three_members_runs_exactly_once() {
    let c = Cluster::new("cron");
    let rows = ["t0", "t1", "t2"];
    let matrix: String = rows
        .iter()
        .map(|r| format!("  - {{ id: {r}, sink: {{ config: {{ path: ../out/{r}.jsonl }} }} }}\n"))
        .collect();
    // Every run writes one record with the time it ran: a full-table read of `now()`.
    c.dir.write(
        "pipelines/tick.yaml",
        format!(
            "version: 1\nname: tick\npipeline:\n  source: {{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CL_PG_URL}}\", \
             query: \"SELECT 1 AS id, extract(epoch FROM clock_timestamp())::float8 AS t\", replication_method: full_table }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ../out/x.jsonl }} }}\n  state: {}\n  \
             schedule: \"*/2 * * * * *\"\nmatrix:\n{matrix}",
            c.state_yaml()
        ),
    );
    let members: Vec<Server> = ["m1", "m2", "m3"]
        .into_iter()
        .map(|m| c.member(m, "1s"))
        .collect();
    eventually("five ticks of every row", Duration::from_secs(90), || {
        for r in rows {
            let n = c.dir.jsonl(&format!("out/{r}.jsonl")).len();
            if n < 5 {
                return Err(format!("{r}: {n} runs"));
            }
        }
        Ok(())
    });
    let mut runs_by_members = BTreeMap::new();
    for m in &members {
        for r in rows {
            let doc = m.status(&format!("tick::{r}"));
            *runs_by_members.entry(r).or_insert(0) += doc["ticks"]["run"].as_u64().unwrap_or(0);
        }
    }
    for m in members {
        let (code, stderr) = m.terminate();
        assert_eq!(code, 0, "{stderr}");
    }
    for r in rows {
        let mut times: Vec<f64> = c
            .dir
            .jsonl(&format!("out/{r}.jsonl"))
            .iter()
            .map(|v| v["t"].as_f64().expect("t"))
            .collect();
        times.sort_by(f64::total_cmp);
        assert!(times.len() >= 4, "{r}: ticks ran: {times:?}");
        for w in times.windows(2) {
            assert!(
                w[1] - w[0] > 1.0,
                "{r}: two runs {:.3} s apart: a tick ran twice ({times:?})",
                w[1] - w[0]
            );
        }
        // Every run came from a tick one member claimed; a tick claimed just before the
        // SIGTERM may have had its run cancelled before it read anything.
        let ran = runs_by_members[r];
        let written = times.len() as u64;
        assert!(
            written <= ran && ran <= written + 1,
            "{r}: {ran} ticks run by the members, {written} runs in the output"
        );
    }
}

#[test]
fn drain_needs_the_token_moves_every_pipeline_off_and_pause_survives_restarting_every_member() {
    let c = Cluster::new("drain");
    let rows = csv_rows(&c, 6);
    let mut m1 = c.member("m1", "1s");
    let mut m2 = c.member("m2", "1s");
    eventually("every row delivered", Duration::from_secs(90), || {
        delivered(&c, &rows, 20)
    });

    let (code, doc) = m1.json("PUT", "/members/m2/drain", None);
    assert_eq!(code, 401, "{doc}");
    let (code, doc) = m1.json("PUT", "/members/m2/drain", Some("not-the-token-at-all"));
    assert_eq!(code, 401, "{doc}");
    let (code, doc) = m1.json("PUT", "/members/nobody/drain", Some(TOKEN));
    assert_eq!(code, 404, "{doc}");
    let (code, doc) = m1.json("PUT", "/members/m2/drain", Some(TOKEN));
    assert_eq!(code, 200, "{doc}");
    let all_on_m1 = |m: &Server| {
        let now = owners(m);
        if now.values().all(|o| o.as_deref() == Some("m1")) {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    };
    eventually("m2 drained", 2 * TTL, || all_on_m1(&m2));
    let (_, doc) = m1.json("GET", "/members", None);
    let m2_row = doc["members"]
        .as_array()
        .and_then(|a| a.iter().find(|m| m["name"] == "m2"))
        .cloned()
        .expect("m2");
    assert_eq!(m2_row["draining"], true, "{doc}");
    assert_eq!(m2_row["pipelines"], 0, "{doc}");
    let (code, ready) = m2.json("GET", "/readyz", None);
    assert_eq!(code, 503, "a drained member is not ready: {ready}");
    // And it runs nothing: no run starts there any more (counted in its own log: the
    // `runs` it shows for rows placed elsewhere are their owner's).
    let runs_on = |m: &Server| -> usize { m.stderr().matches("run starting").count() };
    std::thread::sleep(Duration::from_secs(1));
    let drained_runs = runs_on(&m2);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(runs_on(&m2), drained_runs, "a drained member started runs");
    let (code, ready) = m1.json("GET", "/readyz", None);
    assert_eq!(code, 200, "{ready}");
    for r in &rows {
        c.dir
            .append(&format!("{r}.csv"), &numbered_csv(21, 5, false));
    }
    eventually("m1 delivers everything", Duration::from_secs(30), || {
        delivered(&c, &rows, 25)
    });

    // Paused through the member that does not own it; the owner stops it.
    let (code, doc) = m2.json("PUT", "/pipelines/csvjl::r0/pause", Some(TOKEN));
    assert_eq!(code, 200, "{doc}");
    m1.wait_for("csvjl::r0", "PAUSED on the owner", |d| {
        d["state"] == "PAUSED"
    });
    let r0_lines = || c.dir.jsonl("out/r0.jsonl").len();
    let paused_at = r0_lines();
    c.dir.append("r0.csv", &numbered_csv(26, 5, false));

    // Every member restarted: m2 still drained, r0 still paused.
    let (code, stderr) = m1.terminate();
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr) = m2.terminate();
    assert_eq!(code, 0, "{stderr}");
    m1 = c.member("m1", "1s");
    m2 = c.member("m2", "1s");
    m1.wait_for("csvjl::r0", "PAUSED after the restarts", |d| {
        d["state"] == "PAUSED"
    });
    m2.wait_for("csvjl::r0", "PAUSED after the restarts", |d| {
        d["state"] == "PAUSED"
    });
    eventually("m2 still drained after its restart", 3 * TTL, || {
        all_on_m1(&m1)
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(r0_lines(), paused_at, "a paused row moved records");

    // Undrained, m2 takes rows again; resumed, r0 catches up.
    let (code, doc) = m1.json("PUT", "/members/m2/undrain", Some(TOKEN));
    assert_eq!(code, 200, "{doc}");
    eventually("m2 owns rows again", 3 * TTL, || {
        let now = owners(&m1);
        if now.values().any(|o| o.as_deref() == Some("m2")) {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    });
    let (code, doc) = m1.json("PUT", "/pipelines/csvjl::r0/resume", Some(TOKEN));
    assert_eq!(code, 200, "{doc}");
    eventually("r0 catches up", Duration::from_secs(30), || {
        delivered(&c, &rows[..1], 30)
    });
    for m in [m1, m2] {
        let (code, stderr) = m.terminate();
        assert_eq!(code, 0, "{stderr}");
    }
}

#[test]
fn a_store_without_shared_leases_is_refused_and_the_cluster_url_is_never_printed() {
    let c = Cluster::new("refuse");
    c.dir.write("data.csv", numbered_csv(1, 5, true));
    c.dir.write(
        "p.yaml",
        "version: 1\nname: local\npipeline:\n  source: { type: csv, config: { path: ./data.csv } }\n  \
         sink: { type: jsonl, config: { path: ./out/x.jsonl } }\n  state: { type: file, config: { path: ./state } }\n  \
         schedule: \"*/1 * * * * *\"\n",
    );
    let secret = "postgres://postgres:sekrit-cluster-pass@127.0.0.1:1/test";
    c.dir
        .faucet_env(
            &["serve", "p.yaml", "--listen", "127.0.0.1:0"],
            &[("FAUCET_CLUSTER_URL", secret)],
        )
        .expect_code(2)
        .stderr_has(&[
            "p.yaml",
            "pipeline.state.type",
            "`file`",
            "postgres",
            "redis",
        ]);
    // A shared store, but an unreachable cluster database: retried and named at once, no
    // password; SIGTERM while waiting stops it with the cause.
    let url = pg_url();
    c.dir.write(
        "shared.yaml",
        format!(
            "version: 1\nname: shared\npipeline:\n  source: {{ type: csv, config: {{ path: ./data.csv }} }}\n  \
             sink: {{ type: jsonl, config: {{ path: ./out/x.jsonl }} }}\n  state: {}\n  \
             schedule: \"*/1 * * * * *\"\n",
            c.state_yaml()
        ),
    );
    let mut cmd = crate::support::faucet_command();
    cmd.current_dir(c.dir.path())
        .args([
            "serve",
            "shared.yaml",
            "--listen",
            "127.0.0.1:0",
            "--cluster",
            secret,
        ])
        .env("FAUCET_CL_PG_URL", url.as_str());
    let (found, mut child, lines) = stderr_until(cmd, &["127.0.0.1:1", "retrying"]);
    let stop = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(stop.success());
    let code = child.wait().expect("wait").code();
    std::thread::sleep(Duration::from_millis(300));
    let said: String = lines.try_iter().map(|l| l + "\n").collect();
    let said = format!("{found}{said}");
    assert!(said.contains("retrying"), "{said}");
    assert_ne!(code, Some(0), "{said}");
    assert!(
        said.contains("stopped before the cluster database answered"),
        "{said}"
    );
    assert!(!said.contains("sekrit-cluster-pass"), "{said}");
}

/// Spawns `cmd` (stderr piped) and reads its stderr until every one of `needles` was seen or
/// 4 s passed: what it said by then (empty when a needle was missing), the child, and the
/// lines still coming.
fn stderr_until(
    mut cmd: std::process::Command,
    needles: &[&str],
) -> (
    String,
    std::process::Child,
    std::sync::mpsc::Receiver<String>,
) {
    use std::io::{BufRead as _, BufReader};
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn faucet");
    let pipe = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut seen = String::new();
    while started.elapsed() < Duration::from_secs(4) {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push_str(&line);
            seen.push('\n');
        }
        if needles.iter().all(|n| seen.contains(n)) {
            return (seen, child, rx);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("within 4 s, stderr did not say all of {needles:?}: {seen}");
}
