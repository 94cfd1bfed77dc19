//! `faucet doctor [CONFIG]`: probes every row's source, sink and state store (`check()`, each
//! under a timeout) and prints a checklist with timings:
//!
//! ```text
//! ✓ config faucet.yaml 1 ms
//! ✓ source csv ./data.csv 2 ms
//! ✗ state postgres postgres://u:***@db/x table faucet_state 10 ms: <error> — hint: ...
//! ✓ resume mysql-cdc orders: will resume on this server (server_id 2) by GTID state ... 9 ms
//! ```
//!
//! Where the state store holds a bookmark for the row's key and the source can say how a run
//! would resume from it ([`faucet_core::Source::check_resume`]: `mysql-cdc` says whether it
//! resumes by position or is carried over to another server by GTID), a `resume` line says
//! so, or fails with the refusal the run would meet (left out when the source or state probe
//! failed: the same failure would be counted twice). With no bookmark stored yet, a source
//! that can say where a run starts does (`mysql-cdc`: `no bookmark is stored yet: a run
//! starts at `start`: `end`, … (now FILE:POS)`).
//!
//! A change source whose `tables` holds a pattern (`shop.*`) gets a `tables` line naming the
//! tables it matches now (`✓ tables postgres-cdc shop.* → shop.lines, shop.orders`), from
//! the source's catalog ([`faucet_core::Source::table_keys`]).
//!
//! A source that fixes its records' schema up front (a change-data source) has the sink
//! probe also check that the target takes it ([`faucet_core::Sink::check_schema`]: a
//! `postgres` `append` table lacking an audit column fails here, naming it, not at the
//! first page of a run).
//!
//! A source that knows its tables' columns from its catalog (`postgres-cdc`) gets a `drift`
//! line per table whose target the sink can compare (`postgres`, `sqlite` tables): the columns
//! now against the stored bookmark's shapes (a schema change made while faucet was stopped,
//! which a run delivers first) and the target's columns against the source's (a column
//! added, dropped or retyped in the target by hand). `✓ drift postgres s.items → s.copy:
//! the source changed since the last run (column `w` added, text); a run applies: ALTER
//! TABLE … ADD COLUMN "w" text`, or `✗` with the error a run stops with (`schema_changes:
//! fail`, a narrowing) or the difference a run fails on, with its `ALTER TABLE`.
//!
//! Probes never move data or advance a bookmark (a state store's check writes and deletes
//! only the sentinel key `__faucet_doctor__`), and never print a password. The exit code is
//! the number of failed probes (at most 100); a config that cannot be loaded is one failed
//! probe.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use faucet_core::FaucetError;
use faucet_core::keys::KeyNote;
use serde::Serialize;

use crate::config::{self, DEFAULT_CONFIG, PipelineConfig};
use crate::output::error_chain;
use crate::registry::Hints;
use crate::secret::redact_url;

/// `faucet doctor`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The pipeline file.
    #[arg(value_name = "CONFIG", default_value = DEFAULT_CONFIG)]
    pub(crate) config: PathBuf,
    /// Print one JSON document instead of the checklist:
    /// `{"checks":[{"row","probe","type","target","ok","elapsed_ms","error","hint"}],"failed"}`.
    #[arg(long)]
    pub(crate) json: bool,
    /// How long each probe may take, in seconds.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub(crate) timeout_secs: u64,
}

/// One probe's result.
#[derive(Debug, Serialize)]
struct Check {
    /// The matrix row (`null` without a matrix).
    row: Option<String>,
    /// `config`, `source`, `tables`, `sink`, `keys`, `state`, `resume` or `drift`.
    probe: &'static str,
    /// The connector or store type (`csv`, `postgres`), or the file for `config`.
    #[serde(rename = "type")]
    kind: String,
    /// What was probed: a path, or a URL with its password redacted.
    target: String,
    /// Whether it passed.
    ok: bool,
    /// How long it took, milliseconds.
    elapsed_ms: u128,
    /// What failed, secrets redacted.
    error: Option<String>,
    /// What to try.
    hint: Option<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    checks: Vec<Check>,
    failed: usize,
}

/// Runs the command; returns the number of failed probes.
pub(crate) async fn run(args: &DoctorArgs) -> usize {
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    let mut checks = Vec::new();
    let started = Instant::now();
    match config::load(&args.config) {
        Err(e) => checks.push(failed(
            None,
            "config",
            args.config.display().to_string(),
            String::new(),
            started,
            &e,
            Hints::default(),
        )),
        Ok(loaded) => {
            checks.push(passed(
                None,
                "config",
                loaded.path.display().to_string(),
                format!("{} run(s)", loaded.rows.len()),
                started,
            ));
            for row in &loaded.rows {
                let id = loaded.has_matrix.then(|| row.label.clone());
                match &row.config {
                    Ok((key, p)) => {
                        let run = Run {
                            row: id,
                            key,
                            p,
                            timeout,
                        };
                        probe_row(&mut checks, run).await;
                    }
                    Err(e) => checks.push(failed(
                        id,
                        "config",
                        loaded.path.display().to_string(),
                        String::new(),
                        Instant::now(),
                        e,
                        Hints::default(),
                    )),
                }
            }
        }
    }
    let failed = checks.iter().filter(|c| !c.ok).count();
    if args.json {
        match serde_json::to_string(&Report { checks, failed }) {
            Ok(s) => say!("{s}"),
            Err(e) => eprintln!("error: cannot encode the JSON report: {e}"),
        }
    } else {
        print_checklist(&checks, failed);
    }
    failed
}

/// One configured run to probe: its row (with a matrix), state key and pipeline, and the
/// probes' timeout.
struct Run<'a> {
    row: Option<String>,
    key: &'a str,
    p: &'a PipelineConfig,
    timeout: Duration,
}

async fn probe_row(checks: &mut Vec<Check>, run: Run<'_>) {
    let (row, key, p, timeout) = (run.row, run.key, run.p, run.timeout);
    let t = Instant::now();
    let (kind, target) = (p.source.type_name().to_owned(), p.source.target());
    // The schema the source fixes up front (change records), for the sink's probe.
    let mut schema = None;
    let outcome = match p.source.build() {
        Ok(source) => {
            schema = source.record_schema();
            within(timeout, source.check()).await
        }
        Err(e) => Err(e),
    };
    let hints = p.source.hints();
    let source_ok = outcome.is_ok();
    checks.push(finish(
        row.clone(),
        "source",
        kind,
        target,
        t,
        outcome,
        hints,
    ));
    if source_ok {
        probe_tables(checks, row.clone(), p, timeout).await;
    }

    let t = Instant::now();
    let (kind, target) = (p.sink.type_name().to_owned(), p.sink.target());
    let outcome = match p.sink.build() {
        Ok(sink) => {
            within(timeout, async {
                sink.check().await?;
                match &schema {
                    Some(schema) => sink.check_schema(schema).await,
                    None => Ok(()),
                }
            })
            .await
        }
        Err(e) => Err(e),
    };
    let hints = p.sink.hints();
    let sink_ok = outcome.is_ok();
    checks.push(finish(row.clone(), "sink", kind, target, t, outcome, hints));
    if source_ok && sink_ok {
        probe_keys(checks, row.clone(), p, timeout).await;
    }

    let t = Instant::now();
    let (kind, target) = (p.state.type_name().to_owned(), p.state.target());
    let outcome = within(timeout, async {
        let store = p.state.connect().await?;
        store.check().await
    })
    .await;
    let hints = p.state.hints();
    let state_ok = outcome.is_ok();
    checks.push(finish(
        row.clone(),
        "state",
        kind,
        target,
        t,
        outcome,
        hints,
    ));
    // A source that failed its probe (down, a prerequisite missing) would fail the resume
    // probe the same way: one failed probe, not a second one blaming the stored bookmark.
    if state_ok && source_ok {
        let run = Run {
            row: row.clone(),
            key,
            p,
            timeout,
        };
        probe_resume(checks, run).await;
    }
    if state_ok && source_ok && sink_ok {
        let run = Run {
            row,
            key,
            p,
            timeout,
        };
        probe_drift(checks, run).await;
    }
}

/// One source table's drift: the table, the schema change a run will deliver first (the
/// source changed since the stored bookmark's shapes), and what the sink finds.
type TableDrift = (
    String,
    Option<faucet_core::change::schema::SchemaChange>,
    faucet_core::change::Drift,
);

/// The `drift` lines, one per source table whose columns the source knows from its catalog
/// ([`faucet_core::Source::current_shapes`]) and whose target the sink can compare
/// ([`faucet_core::Sink::check_drift`]): the source's columns now against the stored
/// bookmark's shapes (what the last run delivered) — their difference is the schema change
/// a run delivers first — and the target's columns against the source's. `✓` with what a
/// run applies (or `no drift`), `✗` with the error a run stops with or the difference it
/// fails on.
async fn probe_drift(checks: &mut Vec<Check>, run: Run<'_>) {
    use faucet_core::change::schema::{ColumnShape, SchemaChange, diff, shapes_from_bookmark};
    let (row, key, p, timeout) = (run.row, run.key, run.p, run.timeout);
    let t = Instant::now();
    let outcome = within(timeout, async {
        let source = p.source.build()?;
        let Some(now) = source.current_shapes().await? else {
            return Ok(Vec::new());
        };
        let store = p.state.connect().await?;
        let delivered = match store.get(key).await? {
            Some(entry) => shapes_from_bookmark(
                source.connector(),
                &faucet_core::pipeline::stored_bookmark(entry),
            )?,
            None => Default::default(),
        };
        let sink = p.sink.build()?;
        let mut out: Vec<TableDrift> = Vec::new();
        for (table, columns) in &now {
            let shapes: Vec<ColumnShape> = columns.iter().map(|c| c.shape.clone()).collect();
            let pending = delivered.get(table).and_then(|old| {
                let changes = diff(old, columns);
                (!changes.is_empty()).then(|| SchemaChange {
                    changes,
                    columns: shapes.clone(),
                })
            });
            if let Some(drift) = sink.check_drift(table, &shapes, pending.as_ref()).await? {
                out.push((table.clone(), pending, drift));
            }
        }
        Ok(out)
    })
    .await;
    let kind = p.sink.type_name().to_owned();
    match outcome {
        Ok(drifts) => {
            for (table, pending, drift) in drifts {
                let changed = pending
                    .map(|c| {
                        let what: Vec<String> = c.changes.iter().map(ToString::to_string).collect();
                        format!(
                            "the source changed since the last run ({}); ",
                            what.join(", ")
                        )
                    })
                    .unwrap_or_default();
                let what = format!("{table} → {}", drift.target);
                let text = format!("{changed}{drift}");
                if drift.ok() {
                    checks.push(passed(
                        row.clone(),
                        "drift",
                        kind.clone(),
                        format!("{what}: {text}"),
                        t,
                    ));
                } else {
                    checks.push(Check {
                        row: row.clone(),
                        probe: "drift",
                        kind: kind.clone(),
                        target: redact_url(&what),
                        ok: false,
                        elapsed_ms: t.elapsed().as_millis(),
                        error: Some(text),
                        hint: None,
                    });
                }
            }
        }
        Err(e) => checks.push(failed(
            row,
            "drift",
            kind,
            String::new(),
            t,
            &e,
            p.sink.hints(),
        )),
    }
}

/// The `tables` line of a change source with `tables` patterns: the tables they (and the
/// listed names) stand for now, as the source resolves them at start.
async fn probe_tables(
    checks: &mut Vec<Check>,
    row: Option<String>,
    p: &PipelineConfig,
    timeout: Duration,
) {
    let Some(feed) = p.source.change_feed() else {
        return;
    };
    let patterns: Vec<&String> = feed.tables.iter().filter(|t| t.contains('*')).collect();
    if patterns.is_empty() {
        return;
    }
    let t = Instant::now();
    let outcome = within(timeout, async { p.source.build()?.table_keys().await }).await;
    let kind = p.source.type_name().to_owned();
    let entries = patterns
        .iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    match outcome {
        Ok(keys) => {
            let names: Vec<String> = keys
                .unwrap_or_default()
                .into_iter()
                .map(|k| k.table)
                .collect();
            let matched = if names.is_empty() {
                "no table yet".to_owned()
            } else {
                names.join(", ")
            };
            checks.push(passed(
                row,
                "tables",
                kind,
                format!("{entries} → {matched}"),
                t,
            ));
        }
        Err(e) => checks.push(failed(
            row,
            "tables",
            kind,
            entries,
            t,
            &e,
            p.source.hints(),
        )),
    }
}

/// The `keys` line, when the sink upserts and the source knows its tables' keys
/// ([`faucet_core::keys::check`]): `✓ keys` when the sink's `key:` is a key of every source
/// table, `✓ keys … warning: …` when it is not (a run proceeds, and warns the same), `✗ keys`
/// for a keyless source table (a run is refused).
async fn probe_keys(
    checks: &mut Vec<Check>,
    row: Option<String>,
    p: &PipelineConfig,
    timeout: Duration,
) {
    let t = Instant::now();
    let outcome = within(timeout, async {
        let (source, sink) = (p.source.build()?, p.sink.build()?);
        faucet_core::keys::check(source.as_ref(), sink.as_ref()).await
    })
    .await;
    let kind = p.sink.type_name().to_owned();
    match outcome {
        Ok(None) => {}
        Ok(Some(KeyNote::Matches(note))) => checks.push(passed(row, "keys", kind, note, t)),
        Ok(Some(KeyNote::Differs(warning))) => {
            checks.push(passed(row, "keys", kind, format!("warning: {warning}"), t));
        }
        Err(e) => checks.push(failed(
            row,
            "keys",
            kind,
            String::new(),
            t,
            &e,
            Hints::default(),
        )),
    }
}

/// The `resume` line: how a run would resume from the bookmark stored under `key`, or with
/// none stored yet where a run would start, when the source has something to say
/// ([`faucet_core::Source::check_resume`], asked with a null bookmark when none is stored;
/// nothing is read or consumed). A failure names what it concerns in its error, after the
/// elapsed time like every failed probe: `✗ resume mysql-cdc KEY 3 ms: mysql-cdc: cannot
/// resume: …`.
async fn probe_resume(checks: &mut Vec<Check>, run: Run<'_>) {
    let (row, key, p, timeout) = (run.row, run.key, run.p, run.timeout);
    let t = Instant::now();
    let mut stored = false;
    let outcome = within(timeout, async {
        let store = p.state.connect().await?;
        let bookmark = match store.get(key).await? {
            Some(entry) => faucet_core::pipeline::stored_bookmark(entry),
            None => faucet_core::Bookmark::Null,
        };
        stored = !bookmark.is_null();
        p.source.build()?.check_resume(&bookmark).await
    })
    .await;
    let kind = p.source.type_name().to_owned();
    match outcome {
        Ok(None) => {}
        Ok(Some(note)) => checks.push(passed(row, "resume", kind, format!("{key}: {note}"), t)),
        Err(e) => {
            let mut check = failed(row, "resume", kind, key.to_owned(), t, &e, p.source.hints());
            // A refused bookmark says so itself (`mysql-cdc: cannot resume: …`).
            let what = match (stored, &e) {
                (true, FaucetError::Bookmark { .. }) => None,
                (true, _) => Some("cannot resume from the stored bookmark"),
                (false, _) => Some("no bookmark is stored yet, and a run cannot start"),
            };
            if let Some(what) = what {
                check.error = check.error.map(|e| format!("{what}: {e}"));
            }
            checks.push(check);
        }
    }
}

async fn within<T>(
    timeout: Duration,
    probe: impl Future<Output = Result<T, FaucetError>>,
) -> Result<T, FaucetError> {
    match tokio::time::timeout(timeout, probe).await {
        Ok(r) => r,
        Err(_) => Err(FaucetError::connect(
            "probe",
            format!(
                "no answer within {} s (--timeout-secs); is the host reachable?",
                timeout.as_secs()
            ),
            None,
        )),
    }
}

fn finish(
    row: Option<String>,
    probe: &'static str,
    kind: String,
    target: String,
    started: Instant,
    outcome: Result<(), FaucetError>,
    hints: Hints,
) -> Check {
    match outcome {
        Ok(()) => passed(row, probe, kind, target, started),
        Err(e) => failed(row, probe, kind, target, started, &e, hints),
    }
}

fn passed(
    row: Option<String>,
    probe: &'static str,
    kind: String,
    target: String,
    started: Instant,
) -> Check {
    Check {
        row,
        probe,
        kind,
        target: redact_url(&target),
        ok: true,
        elapsed_ms: started.elapsed().as_millis(),
        error: None,
        hint: None,
    }
}

fn failed(
    row: Option<String>,
    probe: &'static str,
    kind: String,
    target: String,
    started: Instant,
    e: &FaucetError,
    hints: Hints,
) -> Check {
    let error = error_chain(e);
    // Connectors often say what to try themselves; do not add a second hint then.
    let hint = (!error.contains("hint:")).then(|| hint(e, hints));
    Check {
        row,
        probe,
        hint,
        kind,
        target: redact_url(&target),
        ok: false,
        elapsed_ms: started.elapsed().as_millis(),
        error: Some(error),
    }
}

/// What to try, by what failed: the connector's own [`Hints`] (from the registry), else the
/// generic advice for the kind of error.
fn hint(e: &FaucetError, hints: Hints) -> String {
    let s = match e {
        FaucetError::Config { .. } => {
            "fix the field named in the error; `faucet validate` checks the file offline"
        }
        FaucetError::Connect { .. } => hints
            .connect
            .unwrap_or("is the server running and reachable from here?"),
        _ => hints.other.unwrap_or("see the error above"),
    };
    s.to_owned()
}

fn print_checklist(checks: &[Check], failed: usize) {
    let mut last_row: Option<&str> = None;
    for c in checks {
        if c.row.as_deref() != last_row {
            if let Some(r) = &c.row {
                say!("row {r}");
            }
            last_row = c.row.as_deref();
        }
        let indent = if c.row.is_some() { "  " } else { "" };
        let mark = if c.ok { '✓' } else { '✗' };
        let mut line = format!("{indent}{mark} {} {}", c.probe, c.kind);
        if !c.target.is_empty() {
            line.push(' ');
            line.push_str(&c.target);
        }
        line.push_str(&format!(" {} ms", c.elapsed_ms));
        if let Some(e) = &c.error {
            line.push_str(&format!(": {e}"));
        }
        if let Some(h) = &c.hint {
            line.push_str(&format!(" — hint: {h}"));
        }
        say!("{line}");
    }
    if failed == 0 {
        say!("all {} checks passed", checks.len());
    } else {
        say!("{failed} of {} checks failed", checks.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{SinkConfig, SourceConfig, StateConfig};

    fn parse<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("parses")
    }

    /// Each probe's hint comes from its connector's registry entry, falling back to the
    /// advice for the kind of error.
    #[test]
    fn hints_come_from_the_connector() {
        let down = FaucetError::connect("probe", "no answer", None);
        let denied = FaucetError::state("x", "denied");
        let bad = FaucetError::config("pipeline.sink.config.path", "is empty");

        let pg_state: StateConfig = parse(serde_json::json!(
            {"type": "postgres", "config": {"url": "postgres://u@h/db"}}
        ));
        assert_eq!(
            hint(&down, pg_state.hints()),
            "is PostgreSQL running, and are the host, port, user and database in the url right?"
        );
        assert!(hint(&denied, pg_state.hints()).contains("ensure_table: true"));
        let memory: StateConfig = parse(serde_json::json!({"type": "memory"}));
        assert_eq!(hint(&denied, memory.hints()), "see the error above");
        assert_eq!(
            hint(&down, memory.hints()),
            "is the server running and reachable from here?"
        );
        assert!(hint(&bad, memory.hints()).starts_with("fix the field named in the error"));

        if cfg!(feature = "files") {
            let csv: SourceConfig =
                parse(serde_json::json!({"type": "csv", "config": {"path": "a.csv"}}));
            assert_eq!(
                hint(&denied, csv.hints()),
                "does the file exist, and can this user read it?"
            );
            let jsonl: SinkConfig =
                parse(serde_json::json!({"type": "jsonl", "config": {"path": "a.jsonl"}}));
            assert_eq!(
                hint(&denied, jsonl.hints()),
                "does the directory exist, and can this user write to it?"
            );
        }
    }
}
