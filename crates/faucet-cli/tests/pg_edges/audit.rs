//! (13) Change records into an append sink: an audit-log table (op, table, lsn, commit_ts,
//! before, after, unchanged_toast) made by `create_table`, `doctor` naming the audit columns
//! a table lacks, and `faucet replicate`'s snapshot and changes appended in order.

use super::{Names, faucet, pipeline};
use crate::support::Dir;
use crate::support::pg::{query, slot_exists, sql};

/// One audit row: op, table, `before` and `after` as JSON text.
type AuditRow = (String, String, Option<String>, Option<String>);

/// The audit rows of `table` (quoted) in log order.
fn audit(table: &str) -> Vec<AuditRow> {
    query(&format!(
        "SELECT op, \"table\", before::text, after::text FROM {table} \
         ORDER BY lsn::pg_lsn, ctid"
    ))
}

/// `postgres-cdc` → `postgres` with `write_mode: append` and `create_table: true` creates
/// a change table (op, table, lsn, commit_ts, before, after, unchanged_toast) and appends
/// every change record to it, once, in order. On the old code the table was created from
/// the `after` columns and every record then failed on field `op`.
#[test]
fn cdc_into_an_append_sink_appends_change_records_to_an_audit_table() {
    let names = Names::new("audit", "edge_audit_");
    let src = names.quoted("items");
    let log = names.quoted("items_log");
    sql(&format!(
        "CREATE TABLE {src} (id bigint PRIMARY KEY, v text NOT NULL); \
         INSERT INTO {src} VALUES (1, 'before the slot')"
    ));
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        pipeline(
            "edgeaudit",
            &names.cdc_source(&["items"]),
            &names.pg_sink("items_log", ""),
            "  delivery: effectively_once\n",
        ),
    );
    faucet(&dir, &["validate", "p.yaml"]).expect_code(0);
    // The first run creates the slot; nothing has changed since.
    faucet(&dir, &["run", "p.yaml"]).expect_code(0);
    for change in [
        format!("INSERT INTO {src} VALUES (2, 'zwei')"),
        format!("UPDATE {src} SET v = 'eins' WHERE id = 1"),
        format!("DELETE FROM {src} WHERE id = 2"),
    ] {
        sql(&change);
    }
    faucet(&dir, &["run", "p.yaml"]).expect_code(0);
    let table = format!("{}.items", names.schema);
    let want: Vec<AuditRow> = vec![
        (
            "c".into(),
            table.clone(),
            None,
            Some(r#"{"v": "zwei", "id": 2}"#.into()),
        ),
        (
            "u".into(),
            table.clone(),
            Some(r#"{"id": 1}"#.into()),
            Some(r#"{"v": "eins", "id": 1}"#.into()),
        ),
        ("d".into(), table.clone(), Some(r#"{"id": 2}"#.into()), None),
    ];
    assert_eq!(audit(&log), want);
    let lsns: Vec<(String, Option<String>)> =
        query(&format!("SELECT lsn, commit_ts::text FROM {log}"));
    assert!(
        lsns.iter().all(|(l, t)| l.contains('/') && t.is_some()),
        "{lsns:?}"
    );
    // A run with nothing new appends nothing; a further change is appended once.
    faucet(&dir, &["run", "p.yaml"]).expect_code(0);
    assert_eq!(audit(&log), want);
    sql(&format!("INSERT INTO {src} VALUES (3, 'drei')"));
    faucet(&dir, &["run", "p.yaml"]).expect_code(0);
    let got = audit(&log);
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[..3], want[..]);
    assert_eq!(got[3].0, "c");
    assert_eq!(got[3].3.as_deref(), Some(r#"{"v": "drei", "id": 3}"#));
}

/// `faucet doctor` on `postgres-cdc` → an existing `postgres` `append` table that lacks the
/// audit columns the sink writes for change records: the sink probe fails naming each
/// missing column and the `ALTER TABLE` that adds them; run as given, that statement makes
/// the probe pass. On the old code doctor passed, and the run failed at its first change.
#[test]
fn doctor_names_the_audit_columns_an_append_table_lacks() {
    let names = Names::new("auditcols", "edge_auditcols_");
    let log = names.quoted("items_log");
    sql(&format!(
        "CREATE TABLE {} (id bigint PRIMARY KEY, v text); \
         CREATE TABLE {log} (op text, \"table\" text, before jsonb)",
        names.quoted("items")
    ));
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        pipeline(
            "edgeauditcols",
            &names.cdc_source(&["items"]),
            &names.pg_sink("items_log", ""),
            "",
        ),
    );
    let run = faucet(&dir, &["doctor", "p.yaml"]);
    run.expect_code(1).stdout_has(&[
        "has no column lsn, commit_ts, after, unchanged_toast",
        "change records, appended as rows",
        "write_mode: upsert",
    ]);
    let alter = run
        .stdout
        .split("(`ALTER TABLE ")
        .nth(1)
        .and_then(|rest| rest.split("`)").next())
        .unwrap_or_else(|| panic!("no ALTER TABLE in: {}", run.stdout));
    assert!(
        alter.contains("ADD COLUMN \"unchanged_toast\" text[]"),
        "{alter}"
    );
    sql(&format!("ALTER TABLE {alter}"));
    faucet(&dir, &["doctor", "p.yaml"]).expect_code(0);
    assert!(!slot_exists(&names.slot), "doctor created the slot");
}

/// `faucet replicate` into an append sink with `create_table: true`: the snapshot's `op: r`
/// records and the changes after it land in one audit table.
#[test]
fn replicate_into_an_append_sink_appends_the_snapshot_and_the_changes() {
    let names = Names::new("auditrepl", "edge_auditrepl_");
    let src = names.quoted("items");
    let log = names.quoted("items_log");
    sql(&format!(
        "CREATE TABLE {src} (id bigint PRIMARY KEY, v text NOT NULL); \
         INSERT INTO {src} VALUES (1, 'eins'), (2, 'zwei')"
    ));
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        pipeline(
            "edgeauditrepl",
            &names.cdc_source(&["items"]),
            &names.pg_sink("items_log", ""),
            "",
        ),
    );
    faucet(&dir, &["replicate", "p.yaml"]).expect_code(0);
    sql(&format!("UPDATE {src} SET v = 'ZWEI' WHERE id = 2"));
    faucet(&dir, &["replicate", "p.yaml"]).expect_code(0);
    let table = format!("{}.items", names.schema);
    let want: Vec<AuditRow> = vec![
        (
            "r".into(),
            table.clone(),
            None,
            Some(r#"{"v": "eins", "id": 1}"#.into()),
        ),
        (
            "r".into(),
            table.clone(),
            None,
            Some(r#"{"v": "zwei", "id": 2}"#.into()),
        ),
        (
            "u".into(),
            table.clone(),
            Some(r#"{"id": 2}"#.into()),
            Some(r#"{"v": "ZWEI", "id": 2}"#.into()),
        ),
    ];
    assert_eq!(audit(&log), want);
}
