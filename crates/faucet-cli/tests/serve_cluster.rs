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

mod twelve {
    use super::*;

    /// The three CSV → PostgreSQL append rows (`a0`…), the three CSV → JSON Lines rows
    /// (`j0`…), the four query → upsert rows (`q0`…), the CDC rows `cdcup` and `cdcaudit`.
    pub(super) const CSV_ROWS: [&str; 6] = ["a0", "a1", "a2", "j0", "j1", "j2"];

    /// What the sources hold, so the targets can be checked.
    pub(super) struct Sources {
        /// Rows in every CSV file (ids 1..=n).
        pub(super) csv: u64,
        /// Rows in `src` (ids 1..=n, v = `v{id}`).
        pub(super) src: i64,
        /// Every change made to `csrc`: (op, id, v).
        pub(super) changes: Vec<(String, i64, i64)>,
    }

    pub(super) fn setup(c: &mut Cluster) -> Sources {
        let s = c.schema.clone();
        let suffix = unique_suffix();
        let slots = [format!("cl_up_{suffix}"), format!("cl_audit_{suffix}")];
        let pubs = [
            format!("cl_pub_up_{suffix}"),
            format!("cl_pub_audit_{suffix}"),
        ];
        c.slots.extend(slots.iter().cloned());
        c.publications.extend(pubs.iter().cloned());
        c.sql(&format!(
            "CREATE TABLE {s}.src (id int PRIMARY KEY, v text NOT NULL);
             INSERT INTO {s}.src SELECT g, 'v' || g FROM generate_series(1, 100) g;
             CREATE TABLE {s}.csrc (id int PRIMARY KEY, v int NOT NULL);"
        ));
        for f in CSV_ROWS {
            c.dir.write(&format!("{f}.csv"), numbered_csv(1, 100, true));
        }
        let state = c.state_yaml();
        let url = "\"${env:FAUCET_CL_PG_URL}\"";
        let every = "schedule: \"*/1 * * * * *\"";
        let matrix = |rows: &[&str], row: &dyn Fn(&str) -> String| {
            rows.iter()
                .map(|r| format!("  - {}\n", row(r)))
                .collect::<String>()
        };
        let eo = "  delivery: effectively_once\n";
        // Pipeline `name`, every second, with a matrix of one row per `rows` item.
        let write = |name: &str,
                     source: &str,
                     sink: &str,
                     delivery: &str,
                     rows: &[&str],
                     row: &dyn Fn(&str) -> String| {
            let tail = format!(
                "{delivery}  batch_size: 7\n  {every}\nmatrix:\n{}",
                matrix(rows, row)
            );
            c.dir.write(
                &format!("pipelines/{name}.yaml"),
                config_yaml(name, source, sink, &state, &tail),
            );
        };
        write(
            "csvpg",
            "{ type: csv, config: { path: ../a0.csv, columns: { id: int } } }",
            &format!(
                "{{ type: postgres, config: {{ connection_url: {url}, table: {s}.a0, create_table: true }} }}"
            ),
            eo,
            &["a0", "a1", "a2"],
            &|r| {
                format!(
                    "{{ id: {r}, source: {{ config: {{ path: ../{r}.csv }} }}, sink: {{ config: {{ table: {s}.{r} }} }} }}"
                )
            },
        );
        write(
            "csvjl",
            "{ type: csv, config: { path: ../j0.csv } }",
            "{ type: jsonl, config: { path: ../out/j0.jsonl } }",
            "",
            &["j0", "j1", "j2"],
            &|r| {
                format!(
                    "{{ id: {r}, source: {{ config: {{ path: ../{r}.csv }} }}, sink: {{ config: {{ path: ../out/{r}.jsonl }} }} }}"
                )
            },
        );
        write(
            "query",
            &format!(
                "{{ type: postgres, config: {{ connection_url: {url}, table: {s}.src, replication_method: incremental, replication_key: [id] }} }}"
            ),
            &format!(
                "{{ type: postgres, config: {{ connection_url: {url}, table: {s}.q0, create_table: true, write_mode: upsert, key: [id] }} }}"
            ),
            eo,
            &["q0", "q1", "q2", "q3"],
            &|r| format!("{{ id: {r}, sink: {{ config: {{ table: {s}.{r} }} }} }}"),
        );
        for (i, (name, sink)) in [
            (
                "cdcup",
                format!("{{ connection_url: {url}, table: {s}.cdcup, create_table: true, write_mode: upsert, key: [id] }}"),
            ),
            (
                "cdcaudit",
                format!("{{ connection_url: {url}, table: {s}.cdcaudit, create_table: true }}"),
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let source = format!(
                "{{ type: postgres-cdc, config: {{ connection_url: {url}, slot_name: {}, publication: {}, tables: [{s}.csrc], create_publication: true, continuous: true, slot_in_use: terminate }} }}",
                slots[i], pubs[i]
            );
            c.dir.write(
                &format!("pipelines/{name}.yaml"),
                config_yaml(
                    name,
                    &source,
                    &format!("{{ type: postgres, config: {sink} }}"),
                    &state,
                    "  delivery: effectively_once\n  batch_size: 7\n",
                ),
            );
        }
        Sources {
            csv: 100,
            src: 100,
            changes: Vec::new(),
        }
    }

    /// Waits until both CDC rows hold their slots, so every later change reaches them.
    pub(super) fn wait_for_slots(c: &Cluster) {
        let sql = format!(
            "SELECT count(*)::bigint, NULL::text FROM pg_replication_slots WHERE slot_name IN ('{}', '{}')",
            c.slots[0], c.slots[1]
        );
        eventually("both CDC slots exist", Duration::from_secs(90), || {
            let n = c.rows(&sql)[0].0;
            if n == 2 {
                Ok(())
            } else {
                Err(format!("{n} slots"))
            }
        });
    }

    /// More data in every source: `csv` more CSV lines, `src` more rows, CDC inserts of
    /// `inserts` and updates of ids `updates`.
    pub(super) fn write(
        c: &Cluster,
        sources: &mut Sources,
        csv: u64,
        src: i64,
        inserts: std::ops::RangeInclusive<i64>,
        updates: &[i64],
    ) {
        let s = &c.schema;
        for f in CSV_ROWS {
            c.dir.append(
                &format!("{f}.csv"),
                &numbered_csv(sources.csv + 1, csv, false),
            );
        }
        sources.csv += csv;
        c.sql(&format!(
            "INSERT INTO {s}.src SELECT g, 'v' || g FROM generate_series({}, {}) g",
            sources.src + 1,
            sources.src + src
        ));
        sources.src += src;
        for id in inserts {
            c.sql(&format!("INSERT INTO {s}.csrc VALUES ({id}, {id})"));
            sources.changes.push(("c".to_owned(), id, id));
        }
        for &id in updates {
            c.sql(&format!("UPDATE {s}.csrc SET v = v + 1000 WHERE id = {id}"));
            let v: i64 = c.rows(&format!(
                "SELECT v::bigint, NULL::text FROM {s}.csrc WHERE id = {id}"
            ))[0]
                .0;
            sources.changes.push(("u".to_owned(), id, v));
        }
    }

    /// `Ok` when every target equals its source: EO targets exactly (nothing lost, nothing
    /// doubled), JSON Lines nothing lost.
    pub(super) fn check(c: &Cluster, sources: &Sources) -> Result<(), String> {
        let s = &c.schema;
        let want_csv: Vec<i64> = (1..=i64::try_from(sources.csv).expect("i64")).collect();
        let table_ids = |t: &str| -> Vec<i64> {
            let sql = format!("SELECT id::bigint, NULL::text FROM {s}.{t} ORDER BY id");
            c.rt.block_on(sqlx::query_as::<_, (i64, Option<String>)>(&sql).fetch_all(&c.pool))
                .map(|rows| rows.into_iter().map(|r| r.0).collect())
                .unwrap_or_default()
        };
        for t in ["a0", "a1", "a2"] {
            let got = table_ids(t);
            if got != want_csv {
                return Err(format!(
                    "{t}: {} rows, {} distinct, want {}",
                    got.len(),
                    got.iter().collect::<BTreeSet<_>>().len(),
                    want_csv.len()
                ));
            }
        }
        for j in ["j0", "j1", "j2"] {
            let got: BTreeSet<u64> = ids(&c.dir.jsonl(&format!("out/{j}.jsonl")))
                .into_iter()
                .collect();
            if got != (1..=sources.csv).collect() {
                return Err(format!(
                    "{j}: {} distinct ids of {}",
                    got.len(),
                    sources.csv
                ));
            }
        }
        let src = c.rows(&format!("SELECT id::bigint, v FROM {s}.src ORDER BY id"));
        for q in ["q0", "q1", "q2", "q3"] {
            let sql = format!("SELECT id::bigint, v FROM {s}.{q} ORDER BY id");
            let got =
                c.rt.block_on(sqlx::query_as::<_, (i64, Option<String>)>(&sql).fetch_all(&c.pool))
                    .unwrap_or_default();
            if got != src {
                return Err(format!("{q}: {} rows of {}", got.len(), src.len()));
            }
        }
        let csrc = c.rows(&format!(
            "SELECT id::bigint, v::text FROM {s}.csrc ORDER BY id"
        ));
        let sql = format!("SELECT id::bigint, v::text FROM {s}.cdcup ORDER BY id");
        let got =
            c.rt.block_on(sqlx::query_as::<_, (i64, Option<String>)>(&sql).fetch_all(&c.pool))
                .unwrap_or_default();
        if got != csrc {
            return Err(format!("cdcup: {} rows of {}", got.len(), csrc.len()));
        }
        let sql =
            format!("SELECT op, (after->>'id')::bigint, (after->>'v')::bigint FROM {s}.cdcaudit");
        let mut got: Vec<(String, i64, i64)> =
            c.rt.block_on(sqlx::query_as(&sql).fetch_all(&c.pool))
                .unwrap_or_default();
        got.sort();
        let mut want = sources.changes.clone();
        want.sort();
        if got != want {
            return Err(format!("cdcaudit: {} changes of {}", got.len(), want.len()));
        }
        Ok(())
    }
}

/// Waits up to `within` until `watcher` places no row on `gone` (and every row somewhere).
fn moved_off(watcher: &Server, gone: &str, within: Duration) {
    eventually(&format!("{gone}'s rows placed elsewhere"), within, || {
        let now = owners(watcher);
        match now
            .iter()
            .find(|(_, o)| o.as_deref() == Some(gone) || o.is_none())
        {
            Some(row) => Err(format!("{row:?}")),
            None => Ok(()),
        }
    });
}

/// Waits until every target equals its source (`what` names the moment), naming the rows'
/// errors when they do not.
fn converge(c: &Cluster, sources: &twelve::Sources, members: &BTreeMap<&str, Server>, what: &str) {
    eventually(what, Duration::from_secs(90), || {
        twelve::check(c, sources).map_err(|e| format!("{e}{}", errors(members)))
    });
}

#[test]
fn sigkill_one_of_three_members_its_pipelines_resume_elsewhere_and_every_target_equals_its_source()
{
    let mut c = Cluster::new("kill");
    let mut sources = twelve::setup(&mut c);
    let mut members: BTreeMap<&str, Server> = ["m1", "m2", "m3"]
        .into_iter()
        .map(|m| (m, c.member(m, "1s")))
        .collect();
    twelve::wait_for_slots(&c);
    twelve::write(&c, &mut sources, 0, 0, 1..=30, &[]);
    converge(&c, &sources, &members, "every target equals its source");

    // Every row has an owner, the same on every member; the member owning the most is killed.
    let before = eventually(
        "the members agree on the placement",
        Duration::from_secs(30),
        || {
            let views: Vec<_> = members.values().map(owners).collect();
            if views.windows(2).all(|w| w[0] == w[1]) && views[0].values().all(Option::is_some) {
                Ok(views[0].clone())
            } else {
                Err(format!("{views:?}"))
            }
        },
    );
    assert_eq!(before.len(), 12, "{before:?}");
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for o in before.values() {
        *count
            .entry(o.as_deref().expect("every row is placed"))
            .or_default() += 1;
    }
    let victim = *count.iter().max_by_key(|(_, n)| **n).expect("owners").0;
    let theirs: BTreeSet<String> = before
        .iter()
        .filter(|(_, o)| o.as_deref() == Some(victim))
        .map(|(k, _)| k.clone())
        .collect();
    c.wait_started_as_placed(&before, || errors(&members));
    let moves_before = c.moves();
    let killed_at = Instant::now();
    members.remove(victim).expect("victim").kill();
    let updates: Vec<i64> = (1..=10).collect();
    twelve::write(&c, &mut sources, 30, 50, 31..=50, &updates);

    // Within the ttl (plus a heartbeat period and a run), another member owns its rows.
    let survivor = members.values().next().expect("a survivor");
    moved_off(survivor, victim, 3 * TTL);
    let placed_after = killed_at.elapsed();
    converge(
        &c,
        &sources,
        &members,
        "every target equals its source after the kill",
    );
    eprintln!(
        "killed {victim} owning {} of 12 rows: placed elsewhere after {placed_after:?}, targets equal after {:?}",
        theirs.len(),
        killed_at.elapsed()
    );
    // Each of its rows moved once; no other row moved.
    let moves_after = c.moves();
    for (key, n) in &moves_after {
        let delta = n - moves_before.get(key).copied().unwrap_or(0);
        let want = i64::from(theirs.contains(key));
        assert_eq!(
            delta, want,
            "{key} moved {delta} times (the victim's: {theirs:?})"
        );
    }

    // The killed member comes back: after its settle it gets exactly its rows back.
    let (code, doc) = survivor.json("GET", "/members", None);
    assert_eq!(code, 200, "{doc}");
    let dead = doc["members"]
        .as_array()
        .and_then(|a| a.iter().find(|m| m["name"] == victim))
        .cloned()
        .expect("the killed member's row");
    assert_eq!(dead["alive"], false, "{doc}");
    assert_eq!(dead["pipelines"], 0, "{doc}");
    let back = c.member(victim, "1s");
    eventually(
        "the rejoined member owns its rows again",
        Duration::from_secs(30),
        || {
            let now = owners(&back);
            if now == before {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    );
    let updates: Vec<i64> = (11..=12).collect();
    twelve::write(&c, &mut sources, 10, 10, 51..=55, &updates);
    converge(
        &c,
        &sources,
        &members,
        "every target equals its source after the rejoin",
    );
    c.wait_started_as_placed(&before, || errors(&members));
    let moves_back = c.moves();
    for (key, n) in &moves_back {
        let delta = n - moves_after.get(key).copied().unwrap_or(0);
        let want = i64::from(theirs.contains(key));
        assert_eq!(delta, want, "{key} moved {delta} times on the rejoin");
    }
    members.insert(victim, back);

    // A graceful leave: SIGTERM hands the rows over within a heartbeat (plus the run's start).
    let leaver = *members
        .keys()
        .find(|m| **m != victim)
        .expect("another member");
    let left_at = Instant::now();
    let (code, stderr) = members.remove(leaver).expect("leaver").terminate();
    assert_eq!(code, 0, "{stderr}");
    let watcher = &members[victim];
    moved_off(watcher, leaver, TTL);
    eprintln!(
        "SIGTERMed {leaver}: its rows placed elsewhere after {:?}",
        left_at.elapsed()
    );
    let updates: Vec<i64> = (13..=14).collect();
    twelve::write(&c, &mut sources, 10, 10, 56..=60, &updates);
    converge(
        &c,
        &sources,
        &members,
        "every target equals its source after the leave",
    );
    for (_, m) in members {
        let (code, stderr) = m.terminate();
        assert_eq!(code, 0, "{stderr}");
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

/// `p.yaml`: postgres-cdc on `{schema}.csrc` → `out/changes.jsonl`, shared PostgreSQL state,
/// continuous, with `slot_in_use: {mode}`.
fn cdc_takeover(c: &mut Cluster, mode: &str) -> String {
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

fn slot_active_pid(c: &Cluster, slot: &str) -> Option<i64> {
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

mod status;
