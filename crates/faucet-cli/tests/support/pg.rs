//! Crash-test helpers for pipelines into the `postgres` sink (feature `postgres`): a
//! [`Scenario`] (config, source, target, and the exact check of the target) for the crash
//! drivers of [`super::crash`], and [`state_lost_at_every_point`].
//!
//! PostgreSQL from `FAUCET_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`;
//! `scripts/services.sh` starts it); each scenario in its own schema. `FAUCET_SOAK=1` runs
//! more random kills.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use super::crash::Cleanup;
pub(crate) use super::crash::{abort_at_every_point, killed_at_random_instants};

use sqlx::{Executor as _, PgConnection};

use super::{faucet_unarmed, output_of_success, pg_connect, pg_url, runtime};

/// Rows of every scenario's source.
pub(crate) const ROWS: usize = 3_000;
/// Records per page for the fault-point tests.
pub(crate) const BATCH: usize = 250;
/// Small pages for the SIGKILL tests, so a run lasts long enough to be killed mid-way.
pub(crate) const KILL_BATCH: usize = 20;

/// A connection to the test server; panics naming the service and the script that starts it.
pub(crate) async fn connect() -> PgConnection {
    pg_connect(&pg_url()).await
}

/// Runs `sql` (one or several statements) on `pool`; panics naming the statement on failure.
pub(crate) async fn exec(pool: &sqlx::PgPool, sql: &str) {
    sqlx::raw_sql(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

pub(crate) use faucet_test_support::unique_suffix;

/// Runs `statement(i)` for `i` = 1, 2, … one at a time, 2 ms apart, until `stop`, on its own
/// thread, runtime and pool (so it writes while the test waits on `faucet`); returns how
/// many it ran.
pub(crate) fn write_until(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    statement: impl Fn(i64) -> String + Send + 'static,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let step = |pool: sqlx::PgPool, sql: String| async move {
                exec(&pool, &sql).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
                pool
            };
            faucet_test_support::write_until(stop, super::pg_pool().await, statement, step).await
        })
    })
}

/// A test's own schema, replication slot and publication names (`repl_<tag>_<suffix>`, ...).
pub(crate) struct Names {
    pub(crate) schema: String,
    pub(crate) slot: String,
    pub(crate) publication: String,
}

impl Names {
    pub(crate) fn new(tag: &str) -> Self {
        let suffix = unique_suffix();
        Self {
            schema: format!("repl_{tag}_{suffix}"),
            slot: format!("faucet_repl_{tag}_{suffix}"),
            publication: format!("pub_repl_{tag}_{suffix}"),
        }
    }

    /// A `postgres-cdc` source (YAML flow mapping) on the server in the environment variable
    /// `url_env`, reading `tables` (a YAML list's items, `a.t, b.u`) through this slot and
    /// this publication, which it creates.
    pub(crate) fn cdc_source(&self, url_env: &str, tables: &str) -> String {
        format!(
            "{{ type: postgres-cdc, config: {{ connection_url: \"${{env:{url_env}}}\", \
             slot_name: {}, publication: {}, tables: [{tables}], create_publication: true }} }}",
            self.slot, self.publication
        )
    }
}

/// The condition on `pg_replication_slots` of a slot a run streams from: held by a session
/// and done being created. While `CREATE_REPLICATION_SLOT` waits for the transactions running
/// at that moment (long under load) the slot is already `active` but has no
/// `confirmed_flush_lsn`, and a change committed then is before the slot's start, never
/// streamed — a test that writes once the slot is merely `active` loses its first changes.
pub(crate) const SLOT_STREAMING: &str = "active AND confirmed_flush_lsn IS NOT NULL";

/// Drops the slot (waiting for its process to let go), the publication and the schema.
pub(crate) async fn cleanup(pool: &sqlx::PgPool, names: &Names) {
    drop_cdc_test_objects(pool, &names.slot, &names.publication, &names.schema).await;
}

/// [`cleanup`] from a test's own (synchronous) code: drops the slot, the publication and the
/// schema of `names`.
pub(crate) fn drop_names(names: &Names) {
    runtime().block_on(async { cleanup(&super::pg_pool().await, names).await });
}

/// Runs `test` with fresh [`Names`] (`Names::new(tag)`) and a temporary folder, then drops the
/// names' slot, publication and schema ([`cleanup`]) — also when `test` panics (the panic is
/// passed on after).
pub(crate) fn with_names(tag: &str, test: impl FnOnce(&Names, &tempfile::TempDir)) {
    let names = Names::new(tag);
    let dir = tempfile::tempdir().expect("tempdir");
    super::with_cleanup(|| test(&names, &dir), || drop_names(&names));
}

/// Drops the replication slot `slot` once no session holds it (a run spawned before a failed
/// assertion may still be catching up: this waits up to `wait`), best effort.
pub(crate) async fn drop_slot(pool: &sqlx::PgPool, slot: &str, wait: Duration) {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let active: Option<bool> =
            sqlx::query_scalar("SELECT active FROM pg_replication_slots WHERE slot_name = $1")
                .bind(slot)
                .fetch_optional(pool)
                .await
                .unwrap_or(None);
        match active {
            None => return,
            Some(false) => {
                let _ = sqlx::query("SELECT pg_drop_replication_slot($1)")
                    .bind(slot)
                    .execute(pool)
                    .await;
            }
            Some(true) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some(true) => return,
        }
    }
}

/// Drops a CDC test's replication slot (waiting up to 10 s for its process to let go), its
/// publication and its schema, best effort; the names are quoted, so any name works.
pub(crate) async fn drop_cdc_test_objects(
    pool: &sqlx::PgPool,
    slot: &str,
    publication: &str,
    schema: &str,
) {
    use faucet_connectors::sql::ident::quote_ident;
    drop_slot(pool, slot, Duration::from_secs(10)).await;
    let _ = sqlx::raw_sql(&format!(
        "DROP PUBLICATION IF EXISTS {}; DROP SCHEMA IF EXISTS {} CASCADE",
        quote_ident(publication),
        quote_ident(schema)
    ))
    .execute(pool)
    .await;
}

/// An LSN's text form (`X/X`, hex) as the 64-bit position it denotes.
pub(crate) fn lsn_value(text: &str) -> u64 {
    let (hi, lo) = text.split_once('/').expect("X/X");
    (u64::from_str_radix(hi, 16).expect("hex") << 32) | u64::from_str_radix(lo, 16).expect("hex")
}

/// One change to an `items (id, v, …)` table: `(op, id, v)`, `op` as in docs/change-records.md's change
/// records (`c`, `u`, `d`); `v` is `None` for deletes.
pub(crate) type Change = (String, i64, Option<i64>);

/// The changes to `<schema>.items` in `test_decoding` output lines (an independent oracle
/// slot's `pg_logical_slot_get_changes` data), in order; other tables' lines and
/// `BEGIN`/`COMMIT` are skipped. Panics on a line of `items` it cannot read.
pub(crate) fn test_decoding_changes<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    schema: &str,
) -> Vec<Change> {
    test_decoding_table_changes(lines, &format!("{schema}.items"))
}

/// As [`test_decoding_changes`], for the table `table` (`schema.name`, with an `id` and a
/// `v` column).
pub(crate) fn test_decoding_table_changes<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    table: &str,
) -> Vec<Change> {
    let prefix = format!("table {table}: ");
    let field = |line: &str, name: &str| -> Option<i64> {
        let start = line.find(&format!("{name}["))?;
        let rest = &line[start..];
        let value = &rest[rest.find("]:")? + 2..];
        value.split(' ').next()?.parse().ok()
    };
    lines
        .into_iter()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|line| {
            let (op, fields) = line.split_once(": ").expect("op");
            let id = field(fields, "id").expect("id");
            match op {
                "INSERT" => ("c".to_owned(), id, field(fields, "v")),
                "UPDATE" => ("u".to_owned(), id, field(fields, "v")),
                "DELETE" => ("d".to_owned(), id, None),
                other => panic!("unexpected {other}"),
            }
        })
        .collect()
}

/// Runs `statements` (one or several, `;`-separated) on a fresh connection.
pub(crate) fn sql(statements: &str) {
    runtime().block_on(async {
        let mut c = connect().await;
        c.execute(statements)
            .await
            .unwrap_or_else(|e| panic!("`{statements}`: {e}"));
    });
}

/// The rows of `select`, as `T`.
pub(crate) fn query<T>(select: &str) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    runtime().block_on(async {
        let mut c = connect().await;
        sqlx::query_as(select)
            .fetch_all(&mut c)
            .await
            .unwrap_or_else(|e| panic!("`{select}`: {e}"))
    })
}

/// Whether `name` (`schema.table`) exists.
pub(crate) fn table_exists(name: &str) -> bool {
    let found: Vec<(Option<String>,)> = query(&format!("SELECT to_regclass('{name}')::text"));
    found.first().is_some_and(|(t,)| t.is_some())
}

/// `faucet` with no fault armed, the test server's URL in the environment variable `var`
/// (for `${env:<var>}` in configs) and stdin closed.
pub(crate) fn faucet_with_pg_url(var: &str) -> Command {
    let mut c = faucet_unarmed();
    c.env(var, pg_url());
    c
}

/// `faucet` with no fault armed, the test server's URL in `FAUCET_CRASH_PG_URL` (for
/// `${env:FAUCET_CRASH_PG_URL}` in configs) and stdin closed.
pub(crate) fn faucet() -> Command {
    faucet_with_pg_url("FAUCET_CRASH_PG_URL")
}

/// `faucet run --quiet` in `dir` with `FAUCET_FAULT=<fault>`; panics unless the run failed
/// (the point was reached).
pub(crate) fn run_aborted_at(dir: &Path, fault: &str) {
    super::expect_aborted(faucet().args(["run", "--quiet"]).current_dir(dir), fault);
}

/// `faucet run` in `dir` (logs on stderr), which must succeed.
pub(crate) fn run_to_completion(dir: &Path) -> Output {
    output_of_success(faucet().arg("run").current_dir(dir), "the restarted run")
}

/// Asserts every id 0..n is in `table` exactly once with `v = id * 3`.
pub(crate) fn check_exactly_once(table: &str, n: usize, what: &str) {
    let rows: Vec<(i64, i64)> = query(&format!(
        "SELECT id::bigint, count(*)::bigint FROM {table} GROUP BY id ORDER BY id"
    ));
    let lost = n.saturating_sub(rows.len());
    let dups: i64 = rows.iter().map(|(_, c)| c - 1).sum();
    assert_eq!(
        (lost, dups),
        (0, 0),
        "{what}: lost {lost}, duplicated {dups}"
    );
    let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (0..n as i64).collect::<Vec<_>>(), "{what}");
    let wrong: Vec<(i64, i64)> = query(&format!(
        "SELECT id::bigint, v::bigint FROM {table} WHERE v <> id * 3"
    ));
    assert!(wrong.is_empty(), "{what}: wrong values {wrong:?}");
}

/// Which pipeline a [`Scenario`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pair {
    /// csv → postgres append, atomic watermark; the target has no key.
    CsvAppend,
    /// csv → postgres upsert by `id` (text, numeric and null values; keys restated later in
    /// the file, also inside one page: the last occurrence wins).
    CsvUpsert,
    /// Incremental postgres query → postgres upsert by `id` (keyed upsert).
    QueryUpsert,
}

/// A scenario: a config and how to (re)create its source and target, and check the target.
pub(crate) struct Scenario {
    /// The scenario's own schema (dropped by [`Scenario::drop`]).
    pub(crate) schema: String,
    /// The pipeline name, which is also the state key.
    name: &'static str,
    yaml: String,
    pair: Pair,
}

impl Scenario {
    /// The scenario `pair`, its objects named after `tag`, in pages of `batch` records.
    pub(crate) fn new(pair: Pair, tag: &str, batch: usize) -> Self {
        let (prefix, name) = match pair {
            Pair::CsvAppend => ("cli_crash_csv", "crashcsv"),
            Pair::CsvUpsert => ("cli_crash_csvup", "crashcsvup"),
            Pair::QueryUpsert => ("cli_crash_pg", "crashpg"),
        };
        let schema = format!("{prefix}_{tag}_{}", std::process::id());
        let url = "\"${env:FAUCET_CRASH_PG_URL}\"";
        let (source, sink) = match pair {
            Pair::CsvAppend => (
                "{ type: csv, config: { path: ./in.csv, columns: { id: int, v: int } } }"
                    .to_owned(),
                format!(
                    "{{ type: postgres, config: {{ connection_url: {url}, table: {schema}.target }} }}"
                ),
            ),
            Pair::CsvUpsert => (
                "{ type: csv, config: { path: ./in.csv, null_values: [\"\"], \
                 columns: { id: int, name: string, amount: numeric } } }"
                    .to_owned(),
                format!(
                    "{{ type: postgres, config: {{ connection_url: {url}, table: {schema}.target, \
                     write_mode: upsert, key: [id] }} }}"
                ),
            ),
            Pair::QueryUpsert => (
                format!(
                    "{{ type: postgres, config: {{ connection_url: {url}, table: {schema}.src, \
                     replication_method: incremental, replication_key: [updated_at, id] }} }}"
                ),
                format!(
                    "{{ type: postgres, config: {{ connection_url: {url}, table: {schema}.target, \
                     write_mode: upsert, key: [id] }} }}"
                ),
            ),
        };
        let yaml = super::crash::scenario_yaml(name, &source, &sink, batch);
        Self {
            schema,
            name,
            yaml,
            pair,
        }
    }

    /// The state file of the scenario's pipeline in `dir` (file state store under `./state`).
    pub(crate) fn state_file(&self, dir: &Path) -> std::path::PathBuf {
        dir.join("state").join(format!("{}.json", self.name))
    }

    /// A fresh schema, source and target; the config in `dir`.
    pub(crate) fn prepare(&self, dir: &Path) {
        let s = &self.schema;
        match self.pair {
            Pair::CsvAppend => {
                std::fs::write(dir.join("in.csv"), super::crash::id_v_csv(ROWS)).expect("csv");
                sql(&format!(
                    "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}; \
                     CREATE TABLE {s}.target (id bigint, v bigint)"
                ));
            }
            Pair::CsvUpsert => {
                std::fs::write(dir.join("in.csv"), upsert_csv()).expect("csv");
                sql(&format!(
                    "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}; \
                     CREATE TABLE {s}.target (id bigint PRIMARY KEY, name text, amount numeric)"
                ));
            }
            Pair::QueryUpsert => sql(&format!(
                "DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}; \
                 CREATE TABLE {s}.src (id integer PRIMARY KEY, v integer NOT NULL, \
                   updated_at timestamp NOT NULL); \
                 INSERT INTO {s}.src SELECT g, g * 3, '2026-01-01'::timestamp + (g / 7) * interval '1 s' \
                   FROM generate_series(0, {}) g; \
                 CREATE TABLE {s}.target (id integer PRIMARY KEY, v integer NOT NULL, \
                   updated_at timestamp NOT NULL)",
                ROWS - 1
            )),
        }
        std::fs::write(dir.join("faucet.yaml"), &self.yaml).expect("config");
    }

    /// Asserts the target equals the source: nothing lost, nothing doubled, values exact.
    #[track_caller]
    pub(crate) fn check(&self, what: &str) {
        let target = format!("{}.target", self.schema);
        match self.pair {
            Pair::CsvAppend | Pair::QueryUpsert => check_exactly_once(&target, ROWS, what),
            Pair::CsvUpsert => {
                let got: Vec<(i64, Option<String>, Option<String>)> = query(&format!(
                    "SELECT id, name, amount::text FROM {target} ORDER BY id"
                ));
                let want = upsert_expected();
                let lost = want
                    .iter()
                    .filter(|w| !got.iter().any(|g| g.0 == w.0))
                    .count();
                let extra = got.len() + lost - want.len();
                assert_eq!((lost, extra), (0, 0), "{what}: lost {lost}, extra {extra}");
                let wrong: Vec<_> = got.iter().zip(&want).filter(|(g, w)| g != w).collect();
                assert!(
                    wrong.is_empty(),
                    "{what}: {} rows differ from the CSV (target, CSV), first {:?}",
                    wrong.len(),
                    wrong.first()
                );
            }
        }
    }

    /// Drops the scenario's schema.
    pub(crate) fn drop(&self) {
        sql(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
    }
}

/// One line of the upsert CSV: `id`, `name` (`None`: an empty unquoted field, read as null),
/// `amount` (numeric text, exact scale).
type UpsertRow = (i64, Option<String>, Option<String>);

/// The upsert CSV's records in file order: ids 0..ROWS; every 10th id restated with new
/// values near the end of the file (another page); ids 100 + 250k restated on the very next
/// line (the same page, so the page's last occurrence must win); names with commas, quotes,
/// an empty quoted string and nulls.
fn upsert_rows() -> Vec<UpsertRow> {
    let mut rows = Vec::new();
    for i in 0..ROWS as i64 {
        let name = match i % 97 {
            0 => None,
            1 => Some(String::new()),
            2 => Some(format!("quote \"{i}\", comma")),
            _ => Some(format!("name-{i}")),
        };
        rows.push((i, name, Some(format!("{}.{:02}", i * 3, i % 100))));
        if i % 250 == 100 {
            rows.push((i, Some(format!("again-{i}")), Some(format!("-{i}.5"))));
        }
    }
    for i in (0..ROWS as i64).step_by(10) {
        let amount = if i % 20 == 0 {
            None
        } else {
            Some(format!("{i}000.125"))
        };
        rows.push((i, Some(format!("renamed-{i}")), amount));
    }
    rows
}

fn upsert_csv() -> String {
    let field = |v: &Option<String>| match v {
        None => String::new(),
        Some(s) => format!("\"{}\"", s.replace('"', "\"\"")),
    };
    let mut text = String::from("id,name,amount\n");
    for (id, name, amount) in upsert_rows() {
        text.push_str(&format!("{id},{},{}\n", field(&name), field(&amount)));
    }
    text
}

/// What the upsert target must hold: the last occurrence of each id, ordered by id.
fn upsert_expected() -> Vec<UpsertRow> {
    let mut last = std::collections::BTreeMap::new();
    for (id, name, amount) in upsert_rows() {
        last.insert(id, (id, name, amount));
    }
    last.into_values().collect()
}

/// For every fault point: a run aborted at the point's second hit, the state entry deleted
/// (as a user or a lost disk would), a restart to completion and the exact check; then the
/// entry of the finished run deleted and one more run, which must not double the target.
/// Returns the stderr of every restart, for the caller to assert what the user was told.
pub(crate) fn state_lost_at_every_point(scenario: &Scenario) -> Vec<String> {
    let _cleanup = Cleanup(scenario);
    let mut told = Vec::new();
    for point in faucet_core::fault::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        scenario.prepare(dir.path());
        run_aborted_at(dir.path(), &format!("{point}:2"));
        let state = scenario.state_file(dir.path());
        // The first page's bookmark was persisted before the second hit of any point.
        std::fs::remove_file(&state)
            .unwrap_or_else(|e| panic!("deleting {} after {point}:2: {e}", state.display()));
        let out = run_to_completion(dir.path());
        told.push(String::from_utf8_lossy(&out.stderr).into_owned());
        scenario.check(&format!("state deleted after an abort at {point}:2"));
        std::fs::remove_file(&state).expect("the restart wrote the state file again");
        let out = run_to_completion(dir.path());
        told.push(String::from_utf8_lossy(&out.stderr).into_owned());
        scenario.check(&format!(
            "state of the finished run deleted, then a run ({point})"
        ));
    }
    told
}

/// Starts `faucet run --quiet` in `dir`, SIGKILLs it after `delay` and reaps it
/// ([`super::crash::kill_after`]). Returns whether it was still running when killed.
pub(crate) fn kill_after(dir: &Path, delay: Duration) -> bool {
    super::crash::kill_after(faucet(), dir, delay)
}

impl super::crash::CrashScenario for Scenario {
    fn prepare(&self, dir: &Path) {
        Scenario::prepare(self, dir);
    }

    fn check(&self, what: &str) {
        Scenario::check(self, what);
    }

    fn drop(&self) {
        Scenario::drop(self);
    }

    fn faucet(&self) -> Command {
        faucet()
    }
}
/// Drops a CDC test's slot, publication and schema when it goes out of scope, also when an
/// assertion failed (a leaked slot holds WAL, and the server has only a few).
pub(crate) struct CdcObjectsGuard {
    pub(crate) slot: String,
    pub(crate) publication: String,
    pub(crate) schema: String,
}

impl Drop for CdcObjectsGuard {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop_cdc_objects(&self.slot, &self.publication, &self.schema);
        }));
    }
}

/// [`drop_cdc_test_objects`] on its own runtime, for synchronous tests and drop guards.
pub(crate) fn drop_cdc_objects(slot: &str, publication: &str, schema: &str) {
    runtime().block_on(async {
        let pool = super::pg_pool().await;
        drop_cdc_test_objects(&pool, slot, publication, schema).await;
    });
}

/// Whether the replication slot `slot` exists.
pub(crate) fn slot_exists(slot: &str) -> bool {
    let found: Vec<(i32,)> = query(&format!(
        "SELECT 1 FROM pg_replication_slots WHERE slot_name = '{}'",
        slot.replace('\'', "''")
    ));
    !found.is_empty()
}

/// The rows `select` returns, each column as text (`NULL` as `None`): every selected column
/// must be of a text type (cast the others, `id::text`).
pub(crate) fn text_rows(select: &str) -> Vec<Vec<Option<String>>> {
    use sqlx::Row as _;
    runtime().block_on(async {
        let mut c = connect().await;
        sqlx::query(select)
            .fetch_all(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{select}: {e}"))
            .iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| row.try_get::<Option<String>, _>(i).expect("a text column"))
                    .collect()
            })
            .collect()
    })
}

/// A change record of an `(id, v, …)` table as a [`Change`]: `(op, id, v)`, the id of
/// `before` for a delete (and no `v`), of `after` otherwise.
pub(crate) fn change_of_record(r: &serde_json::Value) -> Change {
    let op = r["op"].as_str().expect("op").to_owned();
    match op.as_str() {
        "d" => (op, r["before"]["id"].as_i64().expect("id"), None),
        _ => (
            op,
            r["after"]["id"].as_i64().expect("id"),
            r["after"]["v"].as_i64(),
        ),
    }
}

/// The rows of the `(id int, v bigint, note text)` table `table` as [`replay_items`] gives
/// them: `(id, (v, note))` by id.
pub(crate) async fn items_rows(pool: &sqlx::PgPool, table: &str) -> Vec<(i64, (i64, String))> {
    let rows: Vec<(i32, i64, String)> =
        sqlx::query_as(&format!("SELECT id, v, note FROM {table} ORDER BY id"))
            .fetch_all(pool)
            .await
            .expect("select");
    rows.into_iter()
        .map(|(id, v, note)| (i64::from(id), (v, note)))
        .collect()
}

/// What change records say an `(id int, v bigint, note text)` table holds, replayed in order
/// (`c`/`u` upsert `after`, `d` removes `before`'s id, `t` empties): `(id, (v, note))` by id,
/// to compare with the table's rows.
pub(crate) fn replay_items(records: &[serde_json::Value]) -> Vec<(i64, (i64, String))> {
    let mut replica = std::collections::BTreeMap::new();
    for r in records {
        match r["op"].as_str().expect("op") {
            "c" | "u" => {
                let a = &r["after"];
                replica.insert(
                    a["id"].as_i64().expect("id"),
                    (
                        a["v"].as_i64().expect("v"),
                        a["note"].as_str().expect("note").to_owned(),
                    ),
                );
            }
            "d" => {
                replica.remove(&r["before"]["id"].as_i64().expect("id"));
            }
            "t" => replica.clear(),
            other => panic!("op {other}"),
        }
    }
    replica.into_iter().collect()
}
