//! `faucet doctor`'s drift line (issue 24), through the binary, PostgreSQL → PostgreSQL: a
//! schema change made in the source while faucet was stopped (what a run applies, the
//! `ALTER TABLE`s), a column dropped from the target by hand (what a run fails on, with its
//! fix), and `schema_changes: fail` (the error a run stops with).

use super::{PG_VAR, config, faucet, items_then_first_run};
use crate::support::output_of_success;
use crate::support::pg::{faucet_with_pg_url, sql};

/// The `drift` check of `faucet doctor --json` in `dir` (exactly one).
fn drift(dir: &std::path::Path) -> serde_json::Value {
    let out = faucet_with_pg_url(PG_VAR)
        .args(["doctor", "--json"])
        .current_dir(dir)
        .output()
        .expect("spawn doctor");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let checks: Vec<&serde_json::Value> = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["probe"] == "drift")
        .collect();
    assert_eq!(checks.len(), 1, "{report}");
    checks[0].clone()
}

/// The text of the drift check in `dir` ([`drift`], [`text`]), after asserting that it passed
/// (`ok`) or failed and that it says every one of `parts`.
#[track_caller]
pub(super) fn drift_says(dir: &std::path::Path, ok: bool, parts: &[&str]) -> String {
    let check = drift(dir);
    assert_eq!(check["ok"], ok, "{check}");
    let said = text(&check);
    for part in parts {
        assert!(said.contains(part), "`{part}` not in {said}");
    }
    said
}

/// Asserts that the drift check in `dir` passed and its note ends with `ending` (`… → target:
/// no drift`).
#[track_caller]
pub(super) fn no_drift(dir: &std::path::Path, ending: &str) {
    let check = drift(dir);
    assert_eq!(check["ok"], true, "{check}");
    assert!(text(&check).ends_with(ending), "{check}");
}

/// The text of a drift check: its note when it passed, its error when not.
fn text(check: &serde_json::Value) -> String {
    match check["ok"].as_bool() {
        Some(true) => check["target"].as_str().unwrap_or_default().to_owned(),
        _ => check["error"].as_str().unwrap_or_default().to_owned(),
    }
}

#[test]
fn doctor_reports_drift_made_while_stopped_and_what_a_run_does_about_it() {
    crate::support::pg::with_names("schema_doc", |names, dir| {
        let s = names.schema.clone();
        let t = format!("{s}.target");
        let sink = |extra: &str| {
            format!(
                "{{ type: postgres, config: {{ connection_url: \"${{env:{PG_VAR}}}\", table: {t}, \
                 write_mode: upsert, key: [id], create_table: true{extra} }} }}"
            )
        };
        items_then_first_run(dir.path(), names, "v integer, note varchar(10)", &sink(""));
        sql(&format!(
            "INSERT INTO {s}.items VALUES (1, 1, 'a'), (2, 2, 'b')"
        ));
        output_of_success(&mut faucet(dir.path()), "the run of rows 1 and 2");
        no_drift(dir.path(), &format!("{s}.items → {t}: no drift"));

        // Faucet is stopped; the source changes.
        sql(&format!(
            "ALTER TABLE {s}.items ADD COLUMN w text; \
             ALTER TABLE {s}.items RENAME COLUMN note TO memo; \
             ALTER TABLE {s}.items ALTER COLUMN v TYPE bigint"
        ));
        drift_says(
            dir.path(),
            true,
            &[
                "the source changed since the last run",
                "column `note` renamed to `memo`",
                "column `v` changed type from integer to bigint",
                "column `w` added, text",
                "a run applies: ",
                "RENAME COLUMN \"note\" TO \"memo\"",
                "ADD COLUMN \"w\" text",
            ],
        );
        // The run applies it; then there is nothing left to say.
        sql(&format!("INSERT INTO {s}.items VALUES (3, 3, 'c', 'w3')"));
        output_of_success(&mut faucet(dir.path()), "the run after the change");
        no_drift(dir.path(), "no drift");

        // The target loses a column by hand: a run would fail at the first row with it.
        sql(&format!("ALTER TABLE {t} DROP COLUMN w"));
        drift_says(
            dir.path(),
            false,
            &[
                "column `w` (text) is in the source, not in the target",
                "a run fails at the first row that has it",
                "add it: ALTER TABLE",
            ],
        );
        sql(&format!("ALTER TABLE {t} ADD COLUMN w text"));

        // `schema_changes: fail`: the error the run would stop with.
        config(dir.path(), names, &sink(", schema_changes: fail"), 100, "");
        sql(&format!("ALTER TABLE {s}.items ADD COLUMN x int"));
        drift_says(
            dir.path(),
            false,
            &[
                "column `x` added, integer",
                "a run stops: ",
                "`schema_changes: fail` is set",
            ],
        );
        sql(&format!(
            "INSERT INTO {s}.items VALUES (4, 4, 'd', 'w4', 4)"
        ));
        let run = crate::support::Run::from_output(faucet(dir.path()).output().expect("spawn"));
        assert!(
            run.code != 0,
            "the run must stop as doctor said: {}",
            run.stderr
        );
        run.stderr_has(&["column `x` added", "schema_changes: fail"]);
    });
}

#[cfg(feature = "sqlite")]
#[test]
fn doctor_reports_the_alter_a_run_applies_to_a_sqlite_target() {
    crate::support::pg::with_names("schema_doc_lite", |names, dir| {
        let s = names.schema.clone();
        let sink = "{ type: sqlite, config: { path: ./t.db, table: items, write_mode: upsert, \
                    key: [id], create_table: true } }";
        items_then_first_run(dir.path(), names, "v integer", sink);
        sql(&format!("INSERT INTO {s}.items VALUES (1, 1)"));
        output_of_success(&mut faucet(dir.path()), "the run of row 1");
        no_drift(dir.path(), "no drift");
        sql(&format!("ALTER TABLE {s}.items ADD COLUMN w text"));
        drift_says(
            dir.path(),
            true,
            &[
                "column `w` added, text",
                "a run applies: ALTER TABLE \"items\" ADD COLUMN \"w\"",
            ],
        );
    });
}
