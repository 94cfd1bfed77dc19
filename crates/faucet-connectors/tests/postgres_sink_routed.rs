//! The `postgres` sink routing each source table to its own target (`table` template,
//! `tables:`) against a real server: a page that touches several targets is one transaction
//! with one commit token — a refused record of one table leaves nothing of the page in any
//! target and the token where it was — each target is created with its source key, and a
//! record routed nowhere or into another table's target is an error naming it.

use faucet_connectors::postgres::{PostgresSink, PostgresSinkConfig};
use faucet_core::keys::TableKeys;
use faucet_core::{Commit, CommitToken, FaucetError, Sink, Value};
use serde_json::json;

use crate::postgres_query_support::{TestDb, pg_url};
use crate::postgres_sink_support::{change, change_page, row};

/// The source's keys: `src.a` by `id`, `src.b` by `code, n`.
fn source_keys() -> Vec<TableKeys> {
    let k = |table: &str, cols: &[&str]| TableKeys {
        table: table.into(),
        primary_key: Some(cols.iter().map(|c| (*c).to_owned()).collect()),
        unique_sets: vec![],
    };
    vec![k("src.a", &["id"]), k("src.b", &["code", "n"])]
}

fn a(id: i64, v: Value) -> Vec<Value> {
    change(
        "c",
        "src.a",
        Value::Null,
        row(&[("id", Value::Int(id)), ("v", v)]),
        &[],
    )
}

fn b(code: &str, n: i64, v: i64) -> Vec<Value> {
    change(
        "c",
        "src.b",
        Value::Null,
        row(&[
            ("code", Value::Text(code.into())),
            ("n", Value::Int(n)),
            ("v", Value::Int(v)),
        ]),
        &[],
    )
}

fn token(sequence: u64) -> CommitToken {
    CommitToken {
        sequence,
        bookmark: json!({"lsn": format!("0/{sequence}")}),
    }
}

#[tokio::test]
async fn a_page_of_several_targets_is_one_transaction_with_one_token() {
    let mut db = TestDb::new("s_routed").await;
    let mut config = PostgresSinkConfig::new(pg_url(), format!("{}.t_{{table}}", db.schema));
    config.write_mode = faucet_connectors::postgres::WriteMode::Upsert;
    config.create_table = true;
    let sink = PostgresSink::new(config).expect("config");
    assert!(sink.capabilities().atomic_watermark && sink.capabilities().keyed_upsert);
    assert_eq!(sink.upserts_by_table("src.a"), Some(vec![]));
    let mut w = sink.open().await.expect("open");
    w.source_keys(&source_keys());
    let page = change_page(
        vec![
            a(1, Value::Int(10)),
            b("x", 1, 100),
            a(2, Value::Int(20)),
            b("x", 2, 200),
        ],
        json!({"lsn": "0/1"}),
    );
    w.write_committed(&page, &Commit::new("k", &token(1)))
        .await
        .expect("page 1");
    let ta = db.table("t_a");
    let tb = db.table("t_b");
    // The page's records per target, for per-target counts.
    let mut written = w.written_targets().to_vec();
    written.sort();
    assert_eq!(written, [(ta.clone(), 2), (tb.clone(), 2)]);
    assert_eq!(
        db.copy_out(&format!("SELECT * FROM {ta} ORDER BY id"))
            .await,
        "1\t10\n2\t20\n"
    );
    assert_eq!(
        db.copy_out(&format!("SELECT * FROM {tb} ORDER BY n")).await,
        "x\t1\t100\nx\t2\t200\n"
    );
    // Each target's primary key is its source table's key.
    let pk = |t: String| {
        format!(
            "SELECT string_agg(a.attname, ',' ORDER BY a.attnum) FROM pg_index i JOIN \
             pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
             WHERE i.indrelid = '{t}'::regclass AND i.indisprimary"
        )
    };
    assert_eq!(db.copy_out(&pk(ta.clone())).await, "id\n");
    assert_eq!(db.copy_out(&pk(tb.clone())).await, "code,n\n");
    // Page 2: a's row is fine, b's value is not a bigint: nothing of the page is committed,
    // in either target, and the token stays at 1.
    let bad = change(
        "c",
        "src.b",
        Value::Null,
        row(&[
            ("code", Value::Text("y".into())),
            ("n", Value::Int(3)),
            ("v", Value::Text("not a number".into())),
        ]),
        &[],
    );
    let page = change_page(vec![a(3, Value::Int(30)), bad], json!({"lsn": "0/2"}));
    let err = w
        .write_committed(&page, &Commit::new("k", &token(2)))
        .await
        .expect_err("refused");
    assert!(matches!(err, FaucetError::Data { .. }), "{err}");
    assert!(err.to_string().contains("t_b"), "{err}");
    assert!(
        w.written_targets().is_empty(),
        "a refused page wrote nothing"
    );
    assert_eq!(
        db.copy_out(&format!("SELECT count(*) FROM {ta}")).await,
        "2\n"
    );
    assert_eq!(
        w.last_committed_token("k").await.expect("token"),
        Some(token(1))
    );
    // The same page with the value fixed commits both targets and the token.
    let page = change_page(
        vec![a(3, Value::Int(30)), b("y", 3, 300)],
        json!({"lsn": "0/2"}),
    );
    w.write_committed(&page, &Commit::new("k", &token(2)))
        .await
        .expect("page 2");
    assert_eq!(
        db.copy_out(&format!("SELECT count(*) FROM {ta}")).await,
        "3\n"
    );
    assert_eq!(
        db.copy_out(&format!("SELECT count(*) FROM {tb}")).await,
        "3\n"
    );
    assert_eq!(
        w.last_committed_token("k").await.expect("token"),
        Some(token(2))
    );
    db.drop().await;
}

#[tokio::test]
async fn a_record_routed_nowhere_or_onto_another_tables_target_is_refused() {
    let mut db = TestDb::new("s_routed_refusals").await;
    let s = db.schema.clone();
    db.exec("CREATE TABLE only_a (id bigint PRIMARY KEY, v bigint)")
        .await;
    let config: PostgresSinkConfig = serde_json::from_value(json!({
        "connection_url": pg_url(),
        "tables": {"src.a": format!("{s}.only_a")},
        "write_mode": "upsert",
    }))
    .expect("config");
    let sink = PostgresSink::new(config).expect("valid");
    let mut w = sink.open().await.expect("open");
    w.source_keys(&source_keys());
    let page = change_page(
        vec![a(1, Value::Int(1)), b("x", 1, 1)],
        json!({"lsn": "0/1"}),
    );
    let err = w.write(&page).await.expect_err("src.b routed nowhere");
    assert!(
        err.to_string().contains("src.b") && err.to_string().contains("tables:"),
        "{err}"
    );
    assert_eq!(
        db.copy_out(&format!("SELECT count(*) FROM {s}.only_a"))
            .await,
        "0\n"
    );
    // A template that renders one name for two source tables.
    let mut config = PostgresSinkConfig::new(pg_url(), format!("{s}.{{table}}"));
    config.create_table = true;
    let sink = PostgresSink::new(config).expect("valid");
    let mut w = sink.open().await.expect("open");
    let other = change(
        "c",
        "src2.a",
        Value::Null,
        row(&[("id", Value::Int(1)), ("v", Value::Int(1))]),
        &[],
    );
    let page = change_page(vec![a(1, Value::Int(1)), other], json!({"lsn": "0/1"}));
    let err = w.write(&page).await.expect_err("two tables, one target");
    let text = err.to_string();
    assert!(text.contains("src.a") && text.contains("src2.a"), "{text}");
    db.drop().await;
}
