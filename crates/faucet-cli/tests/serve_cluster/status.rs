//! Any member answers for every pipeline: a row owned by one member shows on another with
//! its owner's state (from the owner's report in the status table), `here: false`, the
//! durable bookmark read from the shared state store and the owner's records per target; a
//! dead owner's report is not shown as RUNNING, and after the takeover the new owner shows
//! the row as its own.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::cdc::{cdc_takeover, slot_active_pid};
use super::{Cluster, TTL, eventually};

/// The bookmark stored under `take` in the cluster's state table.
fn stored_bookmark(c: &Cluster) -> Value {
    let sql = format!("SELECT value FROM {} WHERE key = 'take'", c.state);
    let entry =
        c.rt.block_on(sqlx::query_scalar::<_, sqlx::types::Json<Value>>(&sql).fetch_one(&c.pool))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    crate::support::bookmark_of(entry.0)
}

/// The lines of `out/changes.jsonl`.
fn changes(c: &Cluster) -> usize {
    c.dir.jsonl("out/changes.jsonl").len()
}

#[test]
fn status_a_member_shows_a_pipeline_another_owns_and_its_own_after_the_takeover() {
    let mut c = Cluster::new("status");
    let slot = cdc_takeover(&mut c, "terminate");
    let s = c.schema.clone();
    let a = c.member_serving("a", "1s", "p.yaml");
    a.wait_for("take", "RUNNING on a", |d| {
        d["state"] == "RUNNING" && d["owner"] == "a" && d["here"] == true
    });
    // RUNNING is said before the stream has its slot: a slot made after the INSERT below
    // would start past its changes (under load, making it waits for other transactions).
    eventually("a streams from its slot", Duration::from_secs(60), || {
        slot_active_pid(&c, &slot).ok_or_else(|| "not active".to_owned())
    });
    // Changes committed in the source reach the target (so a bookmark is durable).
    c.sql(&format!(
        "INSERT INTO {s}.csrc SELECT g, g FROM generate_series(1, 12) g"
    ));
    eventually("a delivers 12 changes", Duration::from_secs(60), || {
        let n = changes(&c);
        if n >= 12 {
            Ok(())
        } else {
            Err(format!("{n} lines"))
        }
    });

    // b settles for a minute, so the row stays on a; b answers for it all the same.
    let b = c.member_serving("b", "60s", "p.yaml");
    let seen = b.wait_for("take", "RUNNING on a, as b shows it", |d| {
        d["state"] == "RUNNING"
            && d["owner"] == "a"
            && d["here"] == false
            && !d["bookmark"].is_null()
            && d["records"].as_u64().is_some_and(|n| n >= 12)
    });
    assert!(
        seen["bookmark_at"].is_string(),
        "the store's time of the bookmark: {seen}"
    );
    assert!(
        seen["report_age_seconds"]
            .as_f64()
            .is_some_and(|a| a < TTL.as_secs_f64()),
        "{seen}"
    );
    assert!(seen["last_error"].is_null(), "{seen}");
    // Records per target come in the owner's report too (the jsonl sink names its file).
    eventually("b shows a's records per target", 2 * TTL, || {
        let (mine, shown) = (
            a.status("take")["targets"].clone(),
            b.status("take")["targets"].clone(),
        );
        let total: u64 = mine
            .as_object()
            .map_or(0, |t| t.values().filter_map(Value::as_u64).sum());
        if total >= 12 && shown == mine {
            Ok(())
        } else {
            Err(format!("a has {mine}, b shows {shown}"))
        }
    });
    // The bookmark b shows is the one in the state store, which a wrote (b reads it at its
    // heartbeat, so it may trail a page).
    eventually("b shows the stored bookmark", 2 * TTL, || {
        let shown = b.status("take")["bookmark"].clone();
        let stored = stored_bookmark(&c);
        if shown == stored {
            Ok(())
        } else {
            Err(format!("b shows {shown}, the store holds {stored}"))
        }
    });
    let (code, list) = b.json("GET", "/pipelines", None);
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["member"], "b", "{list}");
    assert_eq!(list["pipelines"][0]["owner"], "a", "{list}");
    assert_eq!(a.status("take")["here"], true);

    // a dies: b never shows a's last report as RUNNING once it is a ttl old, and takes over.
    let _ = a.kill();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(60);
    let taken = loop {
        let now = b.status("take");
        if now["owner"] == "a" && now["state"] == "RUNNING" {
            assert!(
                killed.elapsed() < TTL + Duration::from_millis(300),
                "{:?} after a's death b still shows a's report as RUNNING: {now}",
                killed.elapsed()
            );
        }
        if now["here"] == true && now["owner"] == "b" && now["state"] == "RUNNING" {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "b did not take over: {now}\n{}",
            b.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        taken["report_age_seconds"].is_null(),
        "b's own figures: {taken}"
    );
    c.sql(&format!(
        "INSERT INTO {s}.csrc SELECT g, g FROM generate_series(13, 15) g"
    ));
    eventually(
        "b delivers the new changes",
        Duration::from_secs(60),
        || {
            let n = changes(&c);
            if n >= 15 {
                Ok(())
            } else {
                Err(format!("{n} lines"))
            }
        },
    );
    let (code, stderr) = b.terminate();
    assert_eq!(code, 0, "{stderr}");
}
