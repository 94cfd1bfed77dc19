//! Cases 04, 11, 22, 23, 24 through the `postgres` query source (numeric precision,
//! incremental ties, infinity/NaN, arrays as text, bytea output): exact values
//! of numerics, specials, arrays and bytea; incremental reads over tie groups.

use std::collections::BTreeSet;
use std::str::FromStr as _;

use sqlx::Connection as _;

use faucet_connectors::postgres::{PostgresQueryConfig, PostgresQuerySource, ReplicationMethod};
use faucet_core::testing::conformance;
use faucet_core::{Bookmark, Page, Value};
use serde_json::json;

use crate::postgres_query_support::{TestDb, column_json, json_lines, pg_url, read_pages};

fn full(table: &str) -> PostgresQuerySource {
    PostgresQuerySource::new(PostgresQueryConfig::for_table(pg_url(), table)).expect("config")
}

fn full_at(url: &str, table: &str) -> PostgresQuerySource {
    PostgresQuerySource::new(PostgresQueryConfig::for_table(url, table)).expect("config")
}

fn incremental(table: &str, key: &[&str]) -> PostgresQuerySource {
    let mut c = PostgresQueryConfig::for_table(pg_url(), table);
    c.replication_method = ReplicationMethod::Incremental;
    c.replication_key = key.iter().map(|s| (*s).to_owned()).collect();
    PostgresQuerySource::new(c).expect("config")
}

fn ids(pages: &[Page]) -> Vec<i64> {
    pages
        .iter()
        .flat_map(|p| p.rows())
        .map(|r| match r.get("id") {
            Some(Value::Int(i)) => *i,
            other => panic!("{other:?}"),
        })
        .collect()
}

/// The DDL and rows of case 04 (`trade`).
pub(crate) const CASE_04: &str = "\
CREATE TABLE trade (id integer PRIMARY KEY, amount numeric, pegged_rate numeric(36,18), \
  qty numeric(20,0), price numeric(10,4), fx double precision);
INSERT INTO trade VALUES
 (1, 0.00000000000000006938893903907228, 1.123456789012345678, 12345678901234567890, 0.1000, 0.1),
 (2, 12345678901234567890.123456789, 0.000000000000000001, 9007199254740993, 123456.7890, 1e300),
 (3, 1.10, -99999999999999999.999999999999999999, -9223372036854775809, -0.0001, 2.5e-308),
 (4, 100, 1e-18, 0, 9.9999, -0.0);";

/// The DDL and rows of case 22 (`validity`).
pub(crate) const CASE_22: &str = "\
CREATE TABLE validity (id integer PRIMARY KEY, valid_to timestamptz, valid_ts timestamp, \
  valid_day date, amount numeric(12,2), ratio numeric, score double precision, score4 real);
INSERT INTO validity VALUES
 (3, '2026-01-01 00:00:00+00', '2026-01-01 00:00:00', '2026-01-01', 1.50, '-Infinity', 0, 1.0e-45),
 (1, 'infinity', 'infinity', 'infinity', 'NaN', 'NaN', 'NaN', 'NaN'),
 (2, '-infinity', '-infinity', '-infinity', 0, 'Infinity', 'Infinity', '-Infinity');";

/// The DDL and rows of case 23 (`tagged`).
pub(crate) const CASE_23: &str = "\
CREATE TABLE tagged (id integer PRIMARY KEY, tags text[], nums integer[], grid integer[][]);
INSERT INTO tagged VALUES
 (1, ARRAY['a,b','c'], ARRAY[1,2,3], NULL),
 (2, ARRAY['NULL', NULL, ''], ARRAY[NULL,4]::integer[], NULL),
 (3, ARRAY['say \"hi\"', 'back\\slash', 'two words', '{brace}'], '{}', NULL),
 (4, '{}', NULL, ARRAY[[1,2],[3,4]]),
 (5, '[0:1]={x,y}', '[3:4]={7,8}', NULL);";

/// The DDL and rows of case 24 (`blob_store`).
pub(crate) const CASE_24: &str = "\
CREATE TABLE blob_store (id integer PRIMARY KEY, payload bytea);
INSERT INTO blob_store VALUES
 (1, '\\xdeadbeef'), (2, '\\x00015c7f80ff'), (3, convert_to('{\"k\":\"v\"}', 'UTF8')),
 (4, ''::bytea), (5, NULL), (6, '\\x5c5c00ff');";

#[tokio::test]
async fn case_04_numerics_keep_every_digit() {
    let db = TestDb::with("q_case04", CASE_04).await;
    let pages = read_pages(&full(&db.table("trade")), None, 10)
        .await
        .expect("read");
    assert_eq!(
        column_json(&pages, "amount"),
        [
            "0.00000000000000006938893903907228",
            "12345678901234567890.123456789",
            "1.10",
            "100"
        ]
    );
    assert_eq!(
        column_json(&pages, "pegged_rate"),
        [
            "1.123456789012345678",
            "0.000000000000000001",
            "-99999999999999999.999999999999999999",
            "0.000000000000000001"
        ]
    );
    assert_eq!(
        column_json(&pages, "qty"),
        [
            "12345678901234567890",
            "9007199254740993",
            "-9223372036854775809",
            "0"
        ]
    );
    assert_eq!(
        column_json(&pages, "price"),
        ["0.1000", "123456.7890", "-0.0001", "9.9999"]
    );
    // float8: the shortest form that parses back to the identical f64.
    let fx: Vec<f64> = column_json(&pages, "fx")
        .iter()
        .map(|s| s.parse().expect("f64"))
        .collect();
    assert_eq!(fx, [0.1, 1e300, 2.5e-308, 0.0]);
    db.drop().await;
}

#[tokio::test]
async fn case_22_infinities_and_nan_are_spelled_out() {
    let db = TestDb::with("q_case22", CASE_22).await;
    let pages = read_pages(&full(&db.table("validity")), None, 10)
        .await
        .expect("read");
    assert_eq!(
        json_lines(&pages),
        [
            r#"{"id":1,"valid_to":"infinity","valid_ts":"infinity","valid_day":"infinity","amount":"NaN","ratio":"NaN","score":"NaN","score4":"NaN"}"#,
            r#"{"id":2,"valid_to":"-infinity","valid_ts":"-infinity","valid_day":"-infinity","amount":0.00,"ratio":"Infinity","score":"Infinity","score4":"-Infinity"}"#,
            r#"{"id":3,"valid_to":"2026-01-01T00:00:00Z","valid_ts":"2026-01-01T00:00:00","valid_day":"2026-01-01","amount":1.50,"ratio":"-Infinity","score":0.0,"score4":1e-45}"#,
        ]
    );
    for line in json_lines(&pages) {
        serde_json::from_str::<serde_json::Value>(&line).expect("strict JSON");
    }
    db.drop().await;
}

#[tokio::test]
async fn case_23_arrays_follow_the_literal_grammar() {
    let mut db = TestDb::with("q_case23", CASE_23).await;
    let table = db.table("tagged");
    let pages = read_pages(&full(&table), None, 10).await.expect("read");
    assert_eq!(
        json_lines(&pages),
        [
            r#"{"id":1,"tags":["a,b","c"],"nums":[1,2,3],"grid":null}"#,
            r#"{"id":2,"tags":["NULL",null,""],"nums":[null,4],"grid":null}"#,
            r#"{"id":3,"tags":["say \"hi\"","back\\slash","two words","{brace}"],"nums":[],"grid":null}"#,
            r#"{"id":4,"tags":[],"nums":null,"grid":[[1,2],[3,4]]}"#,
            r#"{"id":5,"tags":["x","y"],"nums":[7,8],"grid":null}"#,
        ]
    );
    // Identical to PostgreSQL's own to_jsonb of each row.
    let reference = db
        .copy_out(&format!("SELECT to_jsonb(t) FROM {table} t ORDER BY id"))
        .await;
    for (ours, theirs) in json_lines(&pages).iter().zip(reference.lines()) {
        let ours: serde_json::Value = serde_json::from_str(ours).expect("json");
        let theirs: serde_json::Value =
            serde_json::from_str(&theirs.replace("\\\\", "\\")).expect("json");
        assert_eq!(ours, theirs);
    }
    db.drop().await;
}

#[tokio::test]
async fn case_24_bytea_is_bytes() {
    let mut db = TestDb::with("q_case24", CASE_24).await;
    // A role whose sessions render bytea in the escape form (`bytea_output = escape`): the
    // source's session setup still reads hex, so the bytes are the same.
    let role = format!("faucet_esc_{}", std::process::id());
    let schema = db.schema.clone();
    db.exec(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN; \
         ALTER ROLE {role} SET bytea_output = 'escape'; \
         GRANT USAGE ON SCHEMA {schema} TO {role}; \
         GRANT SELECT ON {schema}.blob_store TO {role}"
    ))
    .await;
    let admin = sqlx::postgres::PgConnectOptions::from_str(&pg_url()).expect("url");
    let url = format!(
        "postgres://{role}@{}:{}/{}",
        admin.get_host(),
        admin.get_port(),
        admin.get_database().unwrap_or("test")
    );
    let mut plain = sqlx::PgConnection::connect(&url)
        .await
        .expect("role connects");
    let escaped = crate::postgres_query_support::copy_out(
        &mut plain,
        &format!("SELECT payload FROM {schema}.blob_store WHERE id = 1"),
    )
    .await;
    assert_eq!(
        escaped, "\\\\336\\\\255\\\\276\\\\357\n",
        "the role's own sessions use escape"
    );
    drop(plain);
    let pages = read_pages(&full_at(&url, &db.table("blob_store")), None, 10)
        .await
        .expect("read");
    let payloads: Vec<Value> = pages
        .iter()
        .flat_map(|p| p.rows())
        .map(|r| r.get("payload").cloned().expect("payload"))
        .collect();
    assert_eq!(
        payloads,
        [
            Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef]),
            Value::Bytes(vec![0x00, 0x01, 0x5c, 0x7f, 0x80, 0xff]),
            Value::Bytes(br#"{"k":"v"}"#.to_vec()),
            Value::Bytes(vec![]),
            Value::Null,
            Value::Bytes(vec![0x5c, 0x5c, 0x00, 0xff]),
        ]
    );
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
    assert_eq!(
        column_json(&pages, "payload"),
        [
            "\"3q2+7w==\"",
            "\"AAFcf4D/\"",
            "\"eyJrIjoidiJ9\"",
            "\"\"",
            "null",
            "\"XFwA/w==\""
        ]
    );
    db.drop().await;
}

/// Case 11: page size 2, a tie group across the page boundary, a late row with the
/// bookmark's value, an update; three runs.
#[tokio::test]
async fn case_11_ties_are_neither_skipped_nor_repeated() {
    let mut db = TestDb::with(
        "q_case11",
        "CREATE TABLE orders (id integer PRIMARY KEY, status text NOT NULL, \
           updated_at timestamp(6) NOT NULL);
         INSERT INTO orders VALUES
          (1, 'new', '2026-06-12 16:31:30.000000'),
          (2, 'new', '2026-06-12 16:31:32.869000'),
          (3, 'new', '2026-06-12 16:31:32.869000'),
          (4, 'new', '2026-06-12 16:31:32.869000'),
          (5, 'new', '2026-06-12 16:31:40.000000');",
    )
    .await;
    let table = db.table("orders");
    let src = incremental(&table, &["updated_at", "id"]);
    let run1 = read_pages(&src, None, 2).await.expect("run 1");
    assert_eq!(ids(&run1[..1]), [1, 2], "first page");
    assert_eq!(
        ids(&run1),
        [1, 2, 3, 4, 5],
        "ids 3 and 4 follow the boundary"
    );
    let b1: Bookmark = run1
        .last()
        .and_then(Page::bookmark)
        .cloned()
        .expect("bookmark");
    assert_eq!(
        b1,
        json!({"replication_key": ["updated_at", "id"], "values": ["2026-06-12 16:31:40", "5"]})
    );
    db.exec(
        "INSERT INTO orders VALUES (6, 'late', '2026-06-12 16:31:40.000000');
         UPDATE orders SET status = 'paid', updated_at = '2026-06-12 16:32:00.000000' WHERE id = 2;",
    )
    .await;
    let run2 = read_pages(&src, Some(b1), 2).await.expect("run 2");
    assert_eq!(ids(&run2), [6, 2]);
    let b2 = run2
        .last()
        .and_then(Page::bookmark)
        .cloned()
        .expect("bookmark");
    let run3 = read_pages(&src, Some(b2), 2).await.expect("run 3");
    assert!(ids(&run3).is_empty(), "run 3 re-emits nothing");
    db.drop().await;
}

/// Case 11 at scale: 1,000 rows share one `updated_at`; page size 7; every row once, and
/// a resume from every page's bookmark gives exactly the rest.
#[tokio::test]
async fn case_11_a_tie_group_larger_than_a_page() {
    let db = TestDb::with(
        "q_case11_big",
        "CREATE TABLE orders (id integer PRIMARY KEY, updated_at timestamp(6) NOT NULL);
         INSERT INTO orders SELECT g, '2026-06-12 16:31:32.869' FROM generate_series(1, 1000) g;
         INSERT INTO orders VALUES (1001, '2026-06-12 16:31:30'), (1002, '2026-06-12 16:31:40'),
           (1003, '2026-06-12 16:31:32.869');",
    )
    .await;
    let table = db.table("orders");
    let src = incremental(&table, &["updated_at", "id"]);
    let pages = read_pages(&src, None, 7).await.expect("read");
    let got = ids(&pages);
    assert_eq!(got.len(), 1003);
    assert_eq!(
        got.iter().collect::<BTreeSet<_>>().len(),
        1003,
        "no id twice"
    );
    assert_eq!(got[0], 1001);
    assert_eq!(got[1002], 1002);
    assert!(pages.iter().all(|p| p.bookmark().is_some()));
    conformance::source_bookmarks_round_trip(&src, 7)
        .await
        .expect("exactly the rest from every bookmark");
    db.drop().await;
}

/// A key that is not unique: warned about; no row is ever skipped by a resume (pages inside a
/// tie group keep the bookmark before the group, so the group is read again).
#[tokio::test]
async fn a_non_unique_key_never_skips_rows() {
    let db = TestDb::with(
        "q_nonunique",
        "CREATE TABLE events (id integer PRIMARY KEY, updated_at timestamp NOT NULL);
         INSERT INTO events SELECT g, '2026-01-01'::timestamp + g * interval '1 s'
           FROM generate_series(1, 5) g;
         INSERT INTO events SELECT g, '2026-01-02' FROM generate_series(6, 105) g;
         INSERT INTO events SELECT g, '2026-01-03'::timestamp + g * interval '1 s'
           FROM generate_series(106, 110) g;",
    )
    .await;
    let table = db.table("events");
    let src = incremental(&table, &["updated_at"]);
    let pages = read_pages(&src, None, 7).await.expect("read");
    let all = ids(&pages);
    assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), 110);
    assert_eq!(all.len(), 110, "one run reads every row once");
    let warnings = src.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("not known to be unique") && w.contains("id")),
        "{warnings:?}"
    );
    let mut seen = 0;
    for page in &pages {
        seen += page.len();
        let after: BTreeSet<i64> = all[seen..].iter().copied().collect();
        let Some(b) = page.bookmark() else { continue };
        let rest: BTreeSet<i64> = ids(&read_pages(&src, Some(b.clone()), 7).await.expect("resume"))
            .into_iter()
            .collect();
        assert!(after.is_subset(&rest), "resume from {b} lost rows");
    }
    // Pages inside the tie group keep the bookmark of the last complete group (id 5's time).
    assert_eq!(
        pages[3].bookmark(),
        Some(&json!({"replication_key": ["updated_at"], "values": ["2026-01-01 00:00:05"]}))
    );
    db.drop().await;
}

/// Types faucet does not map one by one: enums, domains, composites, ranges, network
/// types, xml, and arrays of them, are read by their base type or as PostgreSQL's text.
#[tokio::test]
async fn other_types_are_read_by_base_type_or_as_text() {
    let mut db = TestDb::new("q_other_types").await;
    let s = db.schema.clone();
    db.exec(&format!(
        "CREATE TYPE {s}.mood AS ENUM ('sad', 'happy');
         CREATE DOMAIN {s}.posint AS integer CHECK (VALUE > 0);
         CREATE TYPE {s}.pair AS (a integer, b text);
         CREATE TABLE {s}.odd (id integer PRIMARY KEY, m {s}.mood, ms {s}.mood[], p {s}.posint,
           ps {s}.posint[], c {s}.pair, r int4range, ip inet, u uuid,
           span interval, t time, tz timetz, x xml, small smallint, big bigint, ch \"char\");
         INSERT INTO {s}.odd VALUES (1, 'happy', '{{sad,happy}}', 7, '{{1,2}}', ROW(1, 'x y'),
           '[1,5)', '10.0.0.1/8', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
           '1 year 2 months 3 days 04:05:06.5', '13:45:00', '13:45:00+01', '<a>b</a>',
           -32768, 9223372036854775807, 'z');"
    ))
    .await;
    let pages = read_pages(&full(&db.table("odd")), None, 10)
        .await
        .expect("read");
    assert_eq!(
        json_lines(&pages),
        [concat!(
            r#"{"id":1,"m":"happy","ms":["sad","happy"],"p":7,"ps":[1,2],"c":"(1,\"x y\")","#,
            r#""r":"[1,5)","ip":"10.0.0.1/8","#,
            r#""u":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11","span":"P1Y2M3DT4H5M6.5S","#,
            r#""t":"13:45:00","tz":"13:45:00+01:00","x":"<a>b</a>","small":-32768,"#,
            r#""big":9223372036854775807,"ch":"z"}"#
        )]
    );
    db.drop().await;
}

/// json and jsonb columns arrive as the text PostgreSQL sent, byte for byte (json: the
/// input text, whitespace, duplicate keys, escapes and number spellings included; jsonb: its
/// canonical output), embedded as itself in JSON (a line break between tokens as a space).
#[tokio::test]
async fn json_and_jsonb_arrive_as_the_server_sent_them() {
    let db = TestDb::with(
        "q_json_text",
        r#"CREATE TABLE docs (id integer PRIMARY KEY, j json, jb jsonb);
INSERT INTO docs VALUES
 (1, E' {\n "b" : 1.10 ,\t"a": [ 1e400, -0 ], "b": "x  y \\"q\\" \\\\ \\u00e9 é" } ',
     E' {\n "b" : 1.10 ,\t"a": [ 1e2, -0 ], "b": "x  y \\"q\\" \\\\ \\u00e9 é" } '),
 (2, '12345678901234567890.5', '[ {"k": null}, [], {}, "", true ]'),
 (3, NULL, NULL);"#,
    )
    .await;
    let pages = read_pages(&full(&db.table("docs")), None, 10)
        .await
        .expect("read");
    let texts = |column: &str| -> Vec<Option<String>> {
        pages
            .iter()
            .flat_map(|p| p.rows())
            .map(|r| match r.get(column).expect("column") {
                Value::Json(j) => Some(j.as_str().to_owned()),
                Value::Null => None,
                other => panic!("{column}: expected json, got {other:?}"),
            })
            .collect()
    };
    assert_eq!(
        texts("j"),
        [
            Some(
                " {\n \"b\" : 1.10 ,\t\"a\": [ 1e400, -0 ], \"b\": \"x  y \\\"q\\\" \\\\ \\u00e9 é\" } "
                    .to_owned()
            ),
            Some("12345678901234567890.5".to_owned()),
            None
        ]
    );
    assert_eq!(
        texts("jb"),
        [
            Some(r#"{"a": [100, 0], "b": "x  y \"q\" \\ é é"}"#.to_owned()),
            Some(r#"[{"k": null}, [], {}, "", true]"#.to_owned()),
            None
        ]
    );
    assert_eq!(
        json_lines(&pages)[1],
        r#"{"id":2,"j":12345678901234567890.5,"jb":[{"k": null}, [], {}, "", true]}"#
    );
    assert_eq!(
        json_lines(&pages)[0],
        concat!(
            r#"{"id":1,"j": {  "b" : 1.10 ,"#,
            "\t",
            r#""a": [ 1e400, -0 ], "b": "x  y \"q\" \\ \u00e9 é" } ,"#,
            r#""jb":{"a": [100, 0], "b": "x  y \"q\" \\ é é"}}"#
        )
    );
    db.drop().await;
}
