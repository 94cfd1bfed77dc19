//! postgres-cdc values: exact through the stream (cases 04, 22, 23, 24) — numeric digits,
//! integers past 2^53, timestamps in UTC, infinities and NaN as strings, array literals,
//! bytea as base64 also when the role's default `bytea_output` is `escape`.

use faucet_connectors::postgres::cdc::{PostgresCdcConfig, PostgresCdcSource};
use faucet_core::serde_json::{self, Value as Json};

use crate::postgres_cdc::{Fixture, admin, pg_url, prime, read_all, records};

async fn afters(fx: &Fixture, source: &PostgresCdcSource) -> Vec<Json> {
    fx.wait_slot_released().await;
    let recs = records(&read_all(source, None, 1000).await);
    assert!(recs.iter().all(|r| r["op"] == "c"));
    recs.into_iter().map(|r| r["after"].clone()).collect()
}

/// Compares `got` with `expected` (JSON text): exact for every column (numbers keep their
/// digits) except the `floats`, compared as f64 (shortest round-trip form).
fn assert_row(got: &Json, expected: &str, floats: &[&str]) {
    let expected: Json = serde_json::from_str(expected).expect("expected json");
    let (g, e) = (
        got.as_object().expect("object"),
        expected.as_object().expect("object"),
    );
    assert_eq!(
        g.keys().collect::<Vec<_>>(),
        e.keys().collect::<Vec<_>>(),
        "columns of {got}"
    );
    for (k, ev) in e {
        let gv = &g[k];
        if floats.contains(&k.as_str()) && ev.is_number() {
            let parse = |v: &Json| v.to_string().parse::<f64>().expect("f64");
            assert_eq!(parse(gv), parse(ev), "{k} in {got}");
        } else {
            assert_eq!(
                serde_json::to_string(gv).expect("json"),
                serde_json::to_string(ev).expect("json"),
                "{k} in {got}"
            );
        }
    }
}

/// [`assert_row`] of each row against the expected JSON at its index; as many rows as expected.
#[track_caller]
fn assert_rows(rows: &[Json], expected: &[&str], floats: &[&str]) {
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
    for (got, want) in rows.iter().zip(expected) {
        assert_row(got, want, floats);
    }
}

#[tokio::test]
async fn case_04_numerics_keep_every_digit() {
    let fx = Fixture::new("num").await;
    fx.sql(
        "CREATE TABLE {s}.trade (id integer PRIMARY KEY, amount numeric, pegged_rate numeric(36,18),
           qty numeric(20,0), price numeric(10,4), fx double precision, big bigint)",
    )
    .await;
    let source = fx.source(&["trade"]);
    prime(&fx, &source).await;
    fx.sql(
        "INSERT INTO {s}.trade VALUES
         (1, 0.00000000000000006938893903907228, 1.123456789012345678, 12345678901234567890, 0.1000, 0.1, 9007199254740993),
         (2, 12345678901234567890.123456789, 0.000000000000000001, 9007199254740993, 123456.7890, 1e300, -9223372036854775808),
         (3, 1.10, -99999999999999999.999999999999999999, -9223372036854775809, -0.0001, 2.5e-308, 9223372036854775807),
         (4, 100, 1e-18, 0, 9.9999, -0.0, 0)",
    )
    .await;
    let rows = afters(&fx, &source).await;
    assert_rows(
        &rows,
        &[
            r#"{"id":1,"amount":0.00000000000000006938893903907228,"pegged_rate":1.123456789012345678,"qty":12345678901234567890,"price":0.1000,"fx":0.1,"big":9007199254740993}"#,
            r#"{"id":2,"amount":12345678901234567890.123456789,"pegged_rate":0.000000000000000001,"qty":9007199254740993,"price":123456.7890,"fx":1e300,"big":-9223372036854775808}"#,
            r#"{"id":3,"amount":1.10,"pegged_rate":-99999999999999999.999999999999999999,"qty":-9223372036854775809,"price":-0.0001,"fx":2.5e-308,"big":9223372036854775807}"#,
            r#"{"id":4,"amount":100,"pegged_rate":0.000000000000000001,"qty":0,"price":9.9999,"fx":-0.0,"big":0}"#,
        ],
        &["fx"],
    );
}

#[tokio::test]
async fn case_22_infinities_and_nan_are_spelled_out() {
    let fx = Fixture::new("inf").await;
    fx.sql(
        "CREATE TABLE {s}.validity (id integer PRIMARY KEY, valid_to timestamptz, valid_ts timestamp,
           valid_day date, amount numeric(12,2), ratio numeric, score double precision, score4 real)",
    )
    .await;
    let source = fx.source(&["validity"]);
    prime(&fx, &source).await;
    fx.sql(
        "INSERT INTO {s}.validity VALUES
         (1, 'infinity',  'infinity',  'infinity',  'NaN', 'NaN',      'NaN',      'NaN'),
         (2, '-infinity', '-infinity', '-infinity', 0,     'Infinity', 'Infinity', '-Infinity'),
         (3, '2026-01-01 01:00:00+01', '2026-01-01 00:00:00', '2026-01-01', 1.50, '-Infinity', 0, 1.0e-45)",
    )
    .await;
    let rows = afters(&fx, &source).await;
    assert_rows(
        &rows,
        &[
            r#"{"id":1,"valid_to":"infinity","valid_ts":"infinity","valid_day":"infinity","amount":"NaN","ratio":"NaN","score":"NaN","score4":"NaN"}"#,
            r#"{"id":2,"valid_to":"-infinity","valid_ts":"-infinity","valid_day":"-infinity","amount":0.00,"ratio":"Infinity","score":"Infinity","score4":"-Infinity"}"#,
            r#"{"id":3,"valid_to":"2026-01-01T00:00:00Z","valid_ts":"2026-01-01T00:00:00","valid_day":"2026-01-01","amount":1.50,"ratio":"-Infinity","score":0,"score4":1e-45}"#,
        ],
        &["score", "score4"],
    );
}

#[tokio::test]
async fn case_23_array_literals_are_parsed_not_split() {
    let fx = Fixture::new("arr").await;
    fx.sql("CREATE TABLE {s}.tagged (id integer PRIMARY KEY, tags text[], nums integer[], grid integer[][])")
        .await;
    let source = fx.source(&["tagged"]);
    prime(&fx, &source).await;
    fx.sql(
        r#"INSERT INTO {s}.tagged VALUES
         (1, ARRAY['a,b','c'], ARRAY[1,2,3], NULL),
         (2, ARRAY['NULL', NULL, ''], ARRAY[NULL,4]::integer[], NULL),
         (3, ARRAY['say "hi"', 'back\slash', 'two words', '{brace}'], '{}', NULL),
         (4, '{}', NULL, ARRAY[[1,2],[3,4]]),
         (5, '[0:1]={x,y}', '[3:4]={7,8}', NULL)"#,
    )
    .await;
    let rows = afters(&fx, &source).await;
    let expected = [
        r#"{"id":1,"tags":["a,b","c"],"nums":[1,2,3],"grid":null}"#,
        r#"{"id":2,"tags":["NULL",null,""],"nums":[null,4],"grid":null}"#,
        r#"{"id":3,"tags":["say \"hi\"","back\\slash","two words","{brace}"],"nums":[],"grid":null}"#,
        r#"{"id":4,"tags":[],"nums":null,"grid":[[1,2],[3,4]]}"#,
        r#"{"id":5,"tags":["x","y"],"nums":[7,8],"grid":null}"#,
    ];
    assert_rows(&rows, &expected, &[]);
}

#[tokio::test]
async fn case_24_bytea_is_base64_even_when_the_role_defaults_to_escape() {
    let mut fx = Fixture::new("bytea").await;
    fx.sql("CREATE TABLE {s}.blob_store (id integer PRIMARY KEY, payload bytea)")
        .await;
    // A role whose sessions default to the legacy escape format: the walsender must still
    // render hex (faucet pins bytea_output), and the bytes must come out exact.
    let role = format!("{}_esc", fx.slot);
    fx.roles.push(role.clone());
    fx.sql(&format!(
        "CREATE ROLE \"{role}\" LOGIN REPLICATION; ALTER ROLE \"{role}\" SET bytea_output = 'escape';
         CREATE PUBLICATION {{p}} FOR TABLE {{s}}.blob_store;"
    ))
    .await;
    let mut url = url::Url::parse(&pg_url()).expect("FAUCET_TEST_PG_URL");
    url.set_username(&role).expect("user");
    url.set_password(None).expect("password");
    let mut plain = <sqlx::PgConnection as sqlx::Connection>::connect(url.as_str())
        .await
        .expect("connect as the escape role (trust auth)");
    let output: String = sqlx::query_scalar("SHOW bytea_output")
        .fetch_one(&mut plain)
        .await
        .expect("show");
    assert_eq!(output, "escape", "the test's premise");
    drop(plain);

    let source = PostgresCdcSource::new(PostgresCdcConfig::new(
        url.as_str(),
        fx.slot.clone(),
        fx.publication.clone(),
        [fx.table("blob_store")],
    ))
    .expect("config");
    prime(&fx, &source).await;
    fx.sql(
        r#"INSERT INTO {s}.blob_store VALUES
         (1, '\xdeadbeef'),
         (2, '\x00015c7f80ff'),
         (3, convert_to('{"k":"v"}', 'UTF8')),
         (4, ''::bytea),
         (5, NULL),
         (6, '\x5c5c00ff')"#,
    )
    .await;
    let rows = afters(&fx, &source).await;
    let payloads: Vec<Json> = rows.iter().map(|r| r["payload"].clone()).collect();
    assert_eq!(
        payloads,
        vec![
            Json::from("3q2+7w=="),
            Json::from("AAFcf4D/"),
            Json::from("eyJrIjoidiJ9"),
            Json::from(""),
            Json::Null,
            Json::from("XFwA/w=="),
        ]
    );
    // The same bytes PostgreSQL has.
    let reference: Vec<Option<String>> = sqlx::query_scalar(
        &fx.expand("SELECT encode(payload, 'base64') FROM {s}.blob_store ORDER BY id"),
    )
    .fetch_all(&mut admin().await)
    .await
    .expect("reference");
    let got: Vec<Option<String>> = payloads
        .iter()
        .map(|p| p.as_str().map(str::to_owned))
        .collect();
    assert_eq!(got, reference);
}
