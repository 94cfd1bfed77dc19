//! `faucet serve --cluster` through the binary: several real members on loopback ports, the
//! real PostgreSQL as the cluster database and the state store, each test in its own schema,
//! members table and state table.
//!
//! Twelve pipelines (CSV → PostgreSQL append, i.e. atomic watermark; CSV → JSON Lines;
//! PostgreSQL query → upsert; postgres-cdc → upsert and → append) on three members: SIGKILL
//! one, its rows resume on the others within the ttl and every target equals its source;
//! the killed member rejoins and gets exactly its rows back; a SIGTERMed member hands over
//! within a heartbeat. A member restarted five times in a minute moves only its own rows.
//! A cron tick runs once across three members. Drain through the API needs the token; a
//! pause survives a restart of every member. Memory/file stores are refused.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::support::pg::{drop_slot, exec, unique_suffix};
use crate::support::server::Server;
use crate::support::{Dir, config_yaml, ids, numbered_csv, pg_pool, pg_url, runtime};

const TOKEN: &str = "cluster-test-token-0123456789";
/// The lease ttl, and so the members' heartbeat ttl (heartbeat every second).
const TTL: Duration = Duration::from_secs(3);

/// One test's cluster: its directory of pipeline files, its schema (targets, members
/// table), its state table, and the members running.
struct Cluster {
    dir: Dir,
    schema: String,
    state: String,
    slots: Vec<String>,
    publications: Vec<String>,
    rt: tokio::runtime::Runtime,
    pool: PgPool,
    /// The cluster database (the test server unless a test starts its own).
    cluster_url: String,
    /// The members table in it.
    members_table: String,
}

impl Cluster {
    fn new(tag: &str) -> Self {
        let suffix = unique_suffix();
        let rt = runtime();
        let pool = rt.block_on(pg_pool());
        let schema = format!("cl_{tag}_{suffix}");
        rt.block_on(exec(&pool, &format!("CREATE SCHEMA {schema}")));
        Self {
            dir: Dir::new(),
            state: format!("cl_state_{tag}_{suffix}"),
            cluster_url: pg_url(),
            members_table: format!("{schema}.members"),
            schema,
            slots: Vec::new(),
            publications: Vec::new(),
            rt,
            pool,
        }
    }

    fn sql(&self, sql: &str) {
        self.rt.block_on(exec(&self.pool, sql));
    }

    fn rows(&self, sql: &str) -> Vec<(i64, Option<String>)> {
        self.rt
            .block_on(sqlx::query_as(sql).fetch_all(&self.pool))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The state block every row shares.
    fn state_yaml(&self) -> String {
        format!(
            "{{ type: postgres, config: {{ url: \"${{env:FAUCET_CL_PG_URL}}\", table: {}, ensure_table: true }} }}",
            self.state
        )
    }

    /// Starts member `name` of the cluster, serving `pipelines/`.
    fn member(&self, name: &str, settle: &str) -> Server {
        self.member_serving(name, settle, "pipelines")
    }

    /// Starts member `name` of the cluster, serving `path` (a file or directory).
    fn member_serving(&self, name: &str, settle: &str, path: &str) -> Server {
        let url = pg_url();
        let table = &self.members_table;
        let ttl = format!("{}s", TTL.as_secs());
        Server::launch(
            &self.dir,
            name,
            &[
                path,
                "--cluster-table",
                table,
                "--lease-ttl",
                &ttl,
                "--settle",
                settle,
            ],
            Some(TOKEN),
            &[
                ("FAUCET_CL_PG_URL", url.as_str()),
                ("FAUCET_CLUSTER_URL", self.cluster_url.as_str()),
            ],
        )
    }

    /// The member that last started each row, by the owners table.
    fn recorded(&self) -> BTreeMap<String, Option<String>> {
        let sql = format!("SELECT key, member FROM {}.members_owners", self.schema);
        self.rt
            .block_on(sqlx::query_as::<_, (String, String)>(&sql).fetch_all(&self.pool))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .into_iter()
            .map(|(k, m)| (k, Some(m)))
            .collect()
    }

    /// Waits until every row was last started by the member it is placed on (`placed`), so
    /// moves counted from now on are new ones.
    fn wait_started_as_placed(
        &self,
        placed: &BTreeMap<String, Option<String>>,
        diag: impl Fn() -> String,
    ) {
        eventually(
            "every row started on its owner",
            Duration::from_secs(90),
            || {
                let now = self.recorded();
                if &now == placed {
                    Ok(())
                } else {
                    Err(format!("{now:?}, placed {placed:?}{}", diag()))
                }
            },
        );
    }

    /// The `moves` of every row in the owners table.
    fn moves(&self) -> BTreeMap<String, i64> {
        let sql = format!("SELECT moves, key FROM {}.members_owners", self.schema);
        self.rows(&sql)
            .into_iter()
            .map(|(m, k)| (k.unwrap_or_default(), m))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.rt.block_on(async {
                for slot in &self.slots {
                    drop_slot(&self.pool, slot, Duration::from_secs(10)).await;
                }
                let mut sql = String::new();
                for p in &self.publications {
                    sql.push_str(&format!("DROP PUBLICATION IF EXISTS {p};"));
                }
                sql.push_str(&format!(
                    "DROP SCHEMA IF EXISTS {} CASCADE; DROP TABLE IF EXISTS {s}, {s}_lease;",
                    self.schema,
                    s = self.state
                ));
                let _ = sqlx::raw_sql(&sql).execute(&self.pool).await;
            });
        }));
    }
}

/// The owner of every row, as `member` answers `GET /pipelines`.
fn owners(member: &Server) -> BTreeMap<String, Option<String>> {
    let (code, doc) = member.json("GET", "/pipelines", None);
    assert_eq!(code, 200, "{doc}");
    doc["pipelines"]
        .as_array()
        .expect("pipelines")
        .iter()
        .map(|p| {
            (
                p["key"].as_str().expect("key").to_owned(),
                p["owner"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// The rows some member shows with an error, and their errors, for a failure message.
fn errors(members: &BTreeMap<&str, Server>) -> String {
    let mut out = String::new();
    for (name, m) in members {
        let (_, doc) = m.json("GET", "/pipelines", None);
        for p in doc["pipelines"].as_array().cloned().unwrap_or_default() {
            if !p["last_error"].is_null() {
                out.push_str(&format!(
                    "\n{name}: {} {} owner {}: {}",
                    p["key"], p["state"], p["owner"], p["last_error"]
                ));
            }
        }
    }
    out
}

/// Waits up to `within` for `check` to give `Ok`; panics with its last `Err`.
fn eventually<T>(what: &str, within: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => panic!("{what} within {within:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Writes `<r>.csv` (20 numbered lines) for each of `rows`, and returns the matrix of a CSV
/// pipeline over them: row `r` reads `../<r>.csv` into the sink config `sink(r)` (the inside
/// of its `config` mapping).
fn csv_matrix(c: &Cluster, rows: &[String], sink: impl Fn(&str) -> String) -> String {
    rows.iter()
        .map(|r| {
            c.dir.write(&format!("{r}.csv"), numbered_csv(1, 20, true));
            format!(
                "  - {{ id: {r}, source: {{ config: {{ path: ../{r}.csv }} }}, sink: {{ config: {{ {} }} }} }}\n",
                sink(r)
            )
        })
        .collect()
}

/// `pipelines/csvjl.yaml`: `n` CSV → JSON Lines rows `r0`…, each its own CSV of 20 lines,
/// on the shared PostgreSQL state store, every second.
fn csv_rows(c: &Cluster, n: usize) -> Vec<String> {
    let rows: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
    let matrix = csv_matrix(c, &rows, |r| format!("path: ../out/{r}.jsonl"));
    c.dir.write(
        "pipelines/csvjl.yaml",
        config_yaml(
            "csvjl",
            "{ type: csv, config: { path: ../x.csv } }",
            "{ type: jsonl, config: { path: ../out/x.jsonl } }",
            &c.state_yaml(),
            &format!("  batch_size: 5\n  schedule: \"*/1 * * * * *\"\nmatrix:\n{matrix}"),
        ),
    );
    rows
}

/// `Ok` when every row's JSON Lines output holds ids 1..=`n` (duplicates allowed).
fn delivered(c: &Cluster, rows: &[String], n: u64) -> Result<(), String> {
    for r in rows {
        let got: BTreeSet<u64> = ids(&c.dir.jsonl(&format!("out/{r}.jsonl")))
            .into_iter()
            .collect();
        if got != (1..=n).collect() {
            return Err(format!("{r}: {} distinct ids of {n}", got.len()));
        }
    }
    Ok(())
}

mod cdc;
mod members;
mod status;
mod twelve;
