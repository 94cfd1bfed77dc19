//! Helpers of the `faucet replicate` crash tests (PostgreSQL and MySQL sources): the stored
//! bookmark of a file state store, a run aborted mid-snapshot at a fault point, a run
//! SIGKILLed after a delay, the strict replay of an append sink's records, and the rows of
//! an `(id bigint, v bigint, note text)` table by each database's own SELECT.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value as Json;

use super::bookmark_of;

/// The rows of `table` (`id`, `v`, `note`) by PostgreSQL's SELECT: `id -> {"id","v","note"}`.
pub(crate) async fn pg_rows(pool: &sqlx::PgPool, table: &str) -> BTreeMap<i64, Json> {
    let rows: Vec<(i64, i64, String)> = sqlx::query_as(&format!("SELECT id, v, note FROM {table}"))
        .fetch_all(pool)
        .await
        .expect("select");
    rows.into_iter()
        .map(|(id, v, note)| (id, serde_json::json!({"id": id, "v": v, "note": note})))
        .collect()
}

/// The rows of the MariaDB table `table` (`id`, `v`, `note`) by its own SELECT (the
/// `mariadb` client): `id -> {"id","v","note"}`.
#[cfg(feature = "mysql")]
pub(crate) fn mariadb_rows(table: &str) -> BTreeMap<i64, Json> {
    let out = super::mariadb::mariadb(&format!("SELECT id, v, note FROM {table}"));
    out.lines()
        .map(|l| {
            let mut f = l.split('\t');
            let id: i64 = f.next().and_then(|v| v.parse().ok()).expect("id");
            let v: i64 = f.next().and_then(|v| v.parse().ok()).expect("v");
            let note = f.next().expect("note").to_owned();
            (id, serde_json::json!({"id": id, "v": v, "note": note}))
        })
        .collect()
}

/// The stored bookmark of the file state store in `dir/state`, if any.
pub(crate) fn stored(dir: &Path) -> Option<Json> {
    for e in std::fs::read_dir(dir.join("state")).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") && !name.starts_with('.') {
            let text = std::fs::read(e.path()).expect("read state");
            return serde_json::from_slice(&text).ok().map(bookmark_of);
        }
    }
    None
}

/// Runs `replicate` (a `faucet replicate` command in `dir`, stderr piped) aborted at the
/// `hit`-th pass of `point`; asserts it died there, mid-snapshot (the stored bookmark is a
/// snapshot position), and returns that bookmark.
pub(crate) fn aborted_mid_snapshot(
    mut replicate: Command,
    dir: &Path,
    point: &str,
    hit: u32,
) -> Json {
    let out = replicate
        .env("FAUCET_FAULT", format!("{point}:{hit}"))
        .output()
        .expect("spawn faucet");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("fault point"),
        "faucet did not abort at {point}:{hit}: {stderr}"
    );
    let b = stored(dir).expect("a stored bookmark");
    assert!(b.get("snapshot").is_some(), "not mid-snapshot: {b}");
    b
}

/// SIGKILLs `replicate` after `after`; `true` when it was still running (killed).
pub(crate) fn killed_after(mut replicate: Command, after: Duration) -> bool {
    let mut child = replicate.spawn().expect("spawn faucet");
    std::thread::sleep(after);
    let running = child.try_wait().expect("try_wait").is_none();
    if running {
        let _ = child.kill();
    }
    let _ = child.wait();
    running
}

/// The ids inside the ranges in flight (`dirty`) of a stored snapshot bookmark.
pub(crate) fn in_flight(bookmark: &Json, table: &str, ids: &HashSet<i64>) -> HashSet<i64> {
    let key = |v: &Json| -> Option<i64> { v.as_array()?.first()?.as_str()?.parse().ok() };
    let mut out = HashSet::new();
    for d in bookmark["snapshot"]["tables"][table]["dirty"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let (after, to) = (key(&d["after"]), key(&d["to"]));
        out.extend(
            ids.iter()
                .filter(|&&id| after.is_none_or(|a| id > a) && to.is_none_or(|t| id <= t)),
        );
    }
    out
}

/// The JSONL records replayed by id: strict (no `r` twice, no insert of a present row, no
/// update or delete of an absent one) except for the `in_flight` ids, applied as upserts.
pub(crate) fn replay(records: &[Json], in_flight: &HashSet<i64>) -> BTreeMap<i64, Json> {
    let mut rows = BTreeMap::new();
    let id = |v: &Json| v["id"].as_i64().expect("id");
    for r in records {
        let op = r["op"].as_str().expect("op");
        let touched = [&r["before"], &r["after"]]
            .iter()
            .any(|v| !v.is_null() && in_flight.contains(&id(v)));
        if op != "r" && touched {
            if !r["before"].is_null() {
                rows.remove(&id(&r["before"]));
            }
            if !r["after"].is_null() {
                rows.insert(id(&r["after"]), r["after"].clone());
            }
            continue;
        }
        match op {
            "r" | "c" => assert!(
                rows.insert(id(&r["after"]), r["after"].clone()).is_none(),
                "a row delivered twice (overlap): {r}"
            ),
            "u" => {
                assert!(
                    rows.remove(&id(&r["before"])).is_some(),
                    "update of a row never delivered (gap): {r}"
                );
                rows.insert(id(&r["after"]), r["after"].clone());
            }
            "d" => assert!(
                rows.remove(&id(&r["before"])).is_some(),
                "delete of a row never delivered (gap): {r}"
            ),
            other => panic!("unexpected op {other}: {r}"),
        }
    }
    rows
}
