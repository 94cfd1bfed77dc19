//! CDC pipelines in a cluster: a take-over from a paused owner ends its walsender; the
//! cluster database restarted mid-run.

use super::*;

/// `p.yaml`: postgres-cdc on `{schema}.csrc` → `out/changes.jsonl`, shared PostgreSQL state,
/// continuous, with `slot_in_use: {mode}`.
pub(super) fn cdc_takeover(c: &mut Cluster, mode: &str) -> String {
    let suffix = unique_suffix();
    let (slot, publication) = (format!("cl_take_{suffix}"), format!("cl_take_pub_{suffix}"));
    c.slots.push(slot.clone());
    c.publications.push(publication.clone());
    let s = &c.schema;
    c.sql(&format!(
        "CREATE TABLE IF NOT EXISTS {s}.csrc (id int PRIMARY KEY, v int NOT NULL)"
    ));
    c.dir.write(
        "p.yaml",
        format!(
            "version: 1\nname: take\npipeline:\n  source: {{ type: postgres-cdc, config: {{ connection_url: \"${{env:FAUCET_CL_PG_URL}}\", \
             slot_name: {slot}, publication: {publication}, tables: [{s}.csrc], create_publication: true, continuous: true, \
             slot_in_use: {mode} }} }}\n  sink: {{ type: jsonl, config: {{ path: ./out/changes.jsonl }} }}\n  state: {}\n  batch_size: 5\n",
            c.state_yaml()
        ),
    );
    slot
}

/// `faucet run p.yaml --lease-ttl 1s` in the background, its stderr collected.
fn cdc_run(
    c: &Cluster,
) -> (
    std::process::Child,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    use std::io::BufRead as _;
    let url = pg_url();
    let mut child = crate::support::faucet_command()
        .current_dir(c.dir.path())
        .args(["run", "p.yaml", "--lease-ttl", "1s"])
        .env("FAUCET_CL_PG_URL", &url)
        .env("FAUCET_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn faucet run");
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let pipe = child.stderr.take().expect("stderr");
    let sink = text.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut t = sink.lock().expect("lock");
            t.push_str(&line);
            t.push('\n');
        }
    });
    (child, text)
}

pub(super) fn slot_active_pid(c: &Cluster, slot: &str) -> Option<i64> {
    let sql = format!(
        "SELECT active_pid::bigint, NULL::text FROM pg_replication_slots WHERE slot_name = '{slot}' AND {}",
        crate::support::pg::SLOT_STREAMING
    );
    c.rows(&sql).first().map(|r| r.0)
}

/// A paused owner (SIGSTOP) keeps its walsender, and so the slot; after its lease expired
/// the new owner, holding the lease, ends that walsender (`slot_in_use: terminate`), says so,
/// and delivers. With `wait` it fails naming the holder instead (the control run).
#[test]
fn a_cdc_pipeline_taken_over_from_a_paused_owner_ends_its_walsender_and_says_so() {
    for mode in ["terminate", "wait"] {
        let mut c = Cluster::new("take");
        let slot = cdc_takeover(&mut c, mode);
        let (mut old, old_log) = cdc_run(&c);
        // Streaming: its walsender holds the slot (not only the session that created it).
        eventually("the old owner streams", Duration::from_secs(60), || {
            let text = old_log.lock().expect("lock").clone();
            if text.contains("postgres-cdc stream opened") {
                Ok(())
            } else {
                Err(text)
            }
        });
        let old_pid = eventually(
            "the old owner holds the slot",
            Duration::from_secs(60),
            || slot_active_pid(&c, &slot).ok_or_else(|| "not active".to_owned()),
        );
        let stop = std::process::Command::new("kill")
            .args(["-STOP", &old.id().to_string()])
            .status()
            .expect("kill -STOP");
        assert!(stop.success());
        std::thread::sleep(Duration::from_millis(1500));
        let (mut new, log) = cdc_run(&c);
        if mode == "wait" {
            let code = eventually("the new run gives up", Duration::from_secs(60), || {
                new.try_wait()
                    .expect("wait")
                    .ok_or_else(|| "still running".to_owned())
            });
            let text = log.lock().expect("lock").clone();
            assert_ne!(code.code(), Some(0), "{text}");
            assert!(text.contains("is active in another process"), "{text}");
            assert_eq!(
                slot_active_pid(&c, &slot),
                Some(old_pid),
                "the old walsender lives on"
            );
        } else {
            eventually(
                "the new owner ended the walsender",
                Duration::from_secs(60),
                || {
                    let text = log.lock().expect("lock").clone();
                    if text.contains("terminated the walsender holding the replication slot") {
                        Ok(())
                    } else {
                        Err(text)
                    }
                },
            );
            c.sql(&format!(
                "INSERT INTO {}.csrc VALUES (1, 1), (2, 2)",
                c.schema
            ));
            eventually("the new owner delivers", Duration::from_secs(60), || {
                let got = ids(&c
                    .dir
                    .jsonl("out/changes.jsonl")
                    .iter()
                    .map(|r| r["after"].clone())
                    .collect::<Vec<_>>());
                if got == [1, 2] {
                    Ok(())
                } else {
                    Err(format!("{got:?}"))
                }
            });
            let pid = slot_active_pid(&c, &slot);
            assert!(
                pid.is_some() && pid != Some(old_pid),
                "{pid:?} vs {old_pid}"
            );
        }
        let _ = old.kill();
        let _ = old.wait();
        let _ = new.kill();
        let _ = new.wait();
    }
}

/// The cluster database restarted mid-run (a private server): the members stop their rows
/// once they cannot heartbeat for a ttl (`/readyz` 503 naming the database), resume when it
/// is back, and every target ends equal to its source — nothing lost, nothing doubled.
#[test]
fn the_cluster_database_restarted_mid_run_pauses_and_resumes_with_nothing_lost() {
    use faucet_test_support::private_pg::PrivatePostgres;
    let db = PrivatePostgres::start(None, &[]);
    let mut c = Cluster::new("dbrestart");
    c.cluster_url = db.url();
    c.members_table = "public.members".to_owned();
    let s = c.schema.clone();
    let rows: Vec<String> = (0..4).map(|i| format!("a{i}")).collect();
    let matrix = csv_matrix(&c, &rows, |r| format!("table: {s}.{r}"));
    c.dir.write(
        "pipelines/csvpg.yaml",
        config_yaml(
            "csvpg",
            "{ type: csv, config: { path: ../x.csv, columns: { id: int } } }",
            &format!("{{ type: postgres, config: {{ connection_url: \"${{env:FAUCET_CL_PG_URL}}\", table: {s}.x, create_table: true }} }}"),
            &c.state_yaml(),
            &format!("  delivery: effectively_once\n  batch_size: 3\n  schedule: \"*/1 * * * * *\"\nmatrix:\n{matrix}"),
        ),
    );
    let exact = |n: i64| -> Result<(), String> {
        for r in &rows {
            let sql = format!("SELECT count(*)::bigint, count(DISTINCT id)::text FROM {s}.{r}");
            let got =
                c.rt.block_on(sqlx::query_as::<_, (i64, Option<String>)>(&sql).fetch_one(&c.pool))
                    .map_err(|e| e.to_string())?;
            if got != (n, Some(n.to_string())) {
                return Err(format!("{r}: {got:?} of {n}"));
            }
        }
        Ok(())
    };
    let members = [c.member("m1", "1s"), c.member("m2", "1s")];
    eventually("every row delivered", Duration::from_secs(90), || exact(20));

    db.stop("immediate");
    for r in &rows {
        c.dir
            .append(&format!("{r}.csv"), &numbered_csv(21, 10, false));
    }
    eventually("members not ready without their database", 3 * TTL, || {
        let (code, doc) = members[0].json("GET", "/readyz", None);
        if code == 503 && doc.to_string().contains("cluster database") {
            Ok(())
        } else {
            Err(doc.to_string())
        }
    });
    std::thread::sleep(TTL);
    db.start_again(&[]);
    for r in &rows {
        c.dir
            .append(&format!("{r}.csv"), &numbered_csv(31, 10, false));
    }
    eventually(
        "every row delivered after the restart",
        Duration::from_secs(90),
        || exact(40),
    );
    for m in &members {
        eventually("ready again", 3 * TTL, || {
            let (code, doc) = m.json("GET", "/readyz", None);
            if code == 200 {
                Ok(())
            } else {
                Err(doc.to_string())
            }
        });
    }
    for m in members {
        let (code, stderr) = m.terminate();
        assert_eq!(code, 0, "{stderr}");
    }
}
