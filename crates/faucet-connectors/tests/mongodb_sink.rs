//! The `mongodb` sink against SecantusDB (FAUCET_TEST_MONGODB_URL, started by
//! scripts/services.sh): the conformance battery (append and upsert), change records applied
//! by key and routed per table (key change, delete, truncate), every value type written and
//! read back exactly, a refused value leaving nothing of its page, and the commit token and
//! writer fence in a page's transaction. Every test uses a database of its own.

use std::sync::Arc;
use std::time::Duration;

use faucet_connectors::mongodb::sink::{
    MongoWriteMode, MongodbSink, MongodbSinkConfig, SubMillisecond,
};
use faucet_connectors::mongodb::value;
use faucet_core::change::record_schema;
use faucet_core::state::LeaseError;
use faucet_core::testing::conformance;
use faucet_core::{
    Commit, CommitToken, DataType, FaucetError, Fence, Field, Page, PageBuilder, Schema, Sink,
    Value,
};
use faucet_test_support::{Service, mongodb_url, unique_suffix};

use faucet_core::testing::{change_page, keys_of_a_and_b};
use mongodb::bson::{Bson, Document, doc};
use serde_json::{Value as Json, json};

async fn client() -> mongodb::Client {
    let client = Service::Mongodb.expect_up(mongodb::Client::with_uri_str(mongodb_url()).await);
    Service::Mongodb.expect_up(client.database("admin").run_command(doc! {"ping": 1}).await);
    client
}

/// A database of the test's own, dropped when the guard goes.
struct Db {
    name: String,
}

impl Db {
    fn new() -> Self {
        Self {
            name: format!("faucet_sink_{}", unique_suffix()),
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Best effort, on a runtime of its own (Drop is not async).
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                rt.block_on(async {
                    if let Ok(c) = mongodb::Client::with_uri_str(mongodb_url()).await {
                        let _ = c.database(&name).drop().await;
                    }
                });
            }
        })
        .join();
    }
}

/// The documents of `db.coll` sorted by `sort`, as relaxed Extended JSON.
async fn docs(db: &str, coll: &str, sort: Document) -> Vec<Document> {
    use futures_util::TryStreamExt as _;
    client()
        .await
        .database(db)
        .collection::<Document>(coll)
        .find(doc! {})
        .sort(sort)
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("documents")
}

/// A read-back for the battery: the documents as JSON, without `_id`.
fn rows_of(
    db: String,
    coll: &'static str,
    sort: Document,
) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = Vec<Json>>>> {
    move || {
        let (db, sort) = (db.clone(), sort.clone());
        Box::pin(async move {
            docs(&db, coll, sort)
                .await
                .into_iter()
                .map(|mut d| {
                    d.remove("_id");
                    Bson::Document(d).into_relaxed_extjson()
                })
                .collect()
        })
    }
}

fn sink(db: &str, coll: &str, mode: MongoWriteMode, key: &[&str]) -> MongodbSink {
    let mut c = MongodbSinkConfig::new(mongodb_url(), format!("{db}.{coll}"));
    c.write_mode = mode;
    c.key = key.iter().map(|k| (*k).to_owned()).collect();
    MongodbSink::new(c).expect("sink")
}

#[tokio::test]
async fn passes_the_sink_conformance_battery() {
    let db = Db::new();
    let append = sink(&db.name, "events", MongoWriteMode::Append, &[]);
    let by_insertion = doc! {"_id": 1};
    conformance::sink_flush_is_durable(
        &append,
        rows_of(db.name.clone(), "events", by_insertion.clone()),
    )
    .await
    .expect("flush is durable");
    conformance::sink_guarantee_is_truthful(
        &append,
        rows_of(db.name.clone(), "events", by_insertion),
    )
    .await
    .expect("guarantee is truthful (append)");
    let upsert = sink(&db.name, "items", MongoWriteMode::Upsert, &["id"]);
    conformance::sink_guarantee_is_truthful(
        &upsert,
        rows_of(db.name.clone(), "items", doc! {"id": 1}),
    )
    .await
    .expect("guarantee is truthful (upsert)");
    conformance::config_is_strict::<MongodbSinkConfig>(
        &json!({"connection_url": mongodb_url(), "collection": "a.b"}),
    )
    .expect("strict config");
    let down = MongodbSink::new(MongodbSinkConfig::new(
        "mongodb://127.0.0.1:1/?directConnection=true&serverSelectionTimeoutMS=300",
        "a.b",
    ))
    .expect("sink");
    conformance::errors_not_panics("open an unreachable server", async move {
        down.open().await.map(|_| ())
    })
    .await
    .expect("error, not panic");
    append.check().await.expect("doctor's check passes");
    upsert.check().await.expect("doctor's check passes");
    // The doctor's probes leave nothing behind.
    assert_eq!(docs(&db.name, "_faucet_fences", doc! {}).await.len(), 0);
}

fn ids_and_values(docs: &[Document]) -> Vec<(Bson, String)> {
    docs.iter()
        .map(|d| {
            (
                d.get("_id").cloned().unwrap_or(Bson::Null),
                d.get_str("v").unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn change_records_are_upserted_by_key_and_routed_per_table() {
    let db = Db::new();
    let mut c = MongodbSinkConfig::new(mongodb_url(), format!("{}.{{table}}", db.name));
    c.write_mode = MongoWriteMode::Upsert;
    let sink = MongodbSink::new(c).expect("sink");
    let mut w = sink.open().await.expect("open");
    // `a` keyed by id; `b` by (id, v): its `_id` is a sub-document.
    w.source_keys(&keys_of_a_and_b());
    let token = |sequence, bookmark: Json| CommitToken { sequence, bookmark };
    let page1 = change_page(
        &[
            ("c", "public.a", None, Some((1, "x"))),
            ("c", "public.a", None, Some((2, "y"))),
            ("c", "public.b", None, Some((1, "p"))),
            ("c", "public.b", None, Some((2, "q"))),
            ("u", "public.a", Some((1, "x")), Some((10, "x2"))),
            ("d", "public.b", Some((2, "q")), None),
        ],
        json!({"lsn": "0/1"}),
    );
    w.write_committed(&page1, &Commit::new("k", &token(1, json!({"lsn": "0/1"}))))
        .await
        .expect("page 1");
    assert_eq!(
        ids_and_values(&docs(&db.name, "a", doc! {"_id": 1}).await),
        vec![(Bson::Int64(2), "y".into()), (Bson::Int64(10), "x2".into())],
        "a key-changing update leaves no old document"
    );
    assert_eq!(
        ids_and_values(&docs(&db.name, "b", doc! {"_id": 1}).await),
        vec![(Bson::Document(doc! {"id": 1_i64, "v": "p"}), "p".into())]
    );
    // A replay of page 1 is refused by its token and changes nothing.
    assert!(
        w.write_committed(&page1, &Commit::new("k", &token(1, json!({"lsn": "0/1"}))))
            .await
            .is_err()
    );
    let page2 = change_page(
        &[
            ("c", "public.b", None, Some((3, "r"))),
            ("t", "public.a", None, None),
            ("c", "public.a", None, Some((5, "z"))),
            ("u", "public.b", Some((1, "p")), Some((1, "p"))),
        ],
        json!({"lsn": "0/2"}),
    );
    w.write_committed(&page2, &Commit::new("k", &token(2, json!({"lsn": "0/2"}))))
        .await
        .expect("page 2");
    assert_eq!(
        ids_and_values(&docs(&db.name, "a", doc! {"_id": 1}).await),
        vec![(Bson::Int64(5), "z".into())],
        "a truncate empties the collection, then the page's later records apply"
    );
    assert_eq!(docs(&db.name, "b", doc! {"_id": 1}).await.len(), 2);
    assert_eq!(
        w.last_committed_token("k").await.expect("token"),
        Some(token(2, json!({"lsn": "0/2"})))
    );
    // A table the source tells no key for, with records without `_id`: a data error.
    let e = w
        .write(&change_page(
            &[("c", "public.c", None, Some((1, "x")))],
            json!(3),
        ))
        .await
        .expect_err("no key");
    assert!(matches!(e, FaucetError::Data { .. }), "{e}");
}

#[tokio::test]
async fn tables_route_each_source_table_with_its_own_mode_and_count_written_targets() {
    let db = Db::new();
    let d = &db.name;
    let c: MongodbSinkConfig = serde_json::from_value(json!({
        "connection_url": mongodb_url(),
        "write_mode": "upsert",
        "key": ["id"],
        "tables": {
            "public.a": format!("{d}.orders"),
            "public.b": {"table": format!("{d}.log"), "write_mode": "append"},
        },
    }))
    .expect("config");
    let sink = MongodbSink::new(c).expect("sink");
    assert_eq!(
        sink.upserts_by_table("public.a"),
        Some(vec!["id".to_owned()])
    );
    assert_eq!(sink.upserts_by_table("public.b"), None, "appended");
    assert!(!sink.capabilities().keyed_upsert, "one target appends");
    let mut w = sink.open().await.expect("open");
    let page = change_page(
        &[
            ("c", "public.a", None, Some((1, "x"))),
            ("c", "public.b", None, Some((1, "p"))),
            ("u", "public.a", Some((1, "x")), Some((1, "x2"))),
            ("c", "public.b", None, Some((1, "p"))),
        ],
        json!({"lsn": "0/1"}),
    );
    w.write(&page).await.expect("page");
    assert_eq!(
        ids_and_values(&docs(d, "orders", doc! {"_id": 1}).await),
        vec![(Bson::Int64(1), "x2".into())],
        "public.a upserted by id"
    );
    assert_eq!(
        docs(d, "log", doc! {"_id": 1}).await.len(),
        2,
        "public.b appended"
    );
    assert_eq!(
        w.written_targets(),
        &[(format!("{d}.orders"), 2), (format!("{d}.log"), 2)],
        "records per collection"
    );
    let e = w
        .write(&change_page(
            &[("c", "public.z", None, Some((1, "x")))],
            json!({"lsn": "0/2"}),
        ))
        .await
        .expect_err("unrouted");
    assert!(
        matches!(e, FaucetError::Data { .. }) && e.to_string().contains("public.z"),
        "{e}"
    );
    // Two source tables into one collection are refused before anything connects.
    let mut c = MongodbSinkConfig::new(mongodb_url(), String::new());
    c.tables = serde_json::from_value(json!({"s.a": format!("{d}.x"), "s.b": format!("{d}.x")}))
        .expect("tables");
    let e = MongodbSink::new(c).expect_err("two into one");
    assert!(e.to_string().contains("tables.s.b"), "{e}");
}

/// A row of every faucet value type, and the BSON each must become.
fn every_value() -> (Page, Document) {
    let nested = Arc::new(Schema::new(vec![Field::new("n", DataType::Int)]));
    let fields: Vec<(&str, Value, Bson)> = vec![
        ("id", Value::Int(1), Bson::Int64(1)),
        ("null", Value::Null, Bson::Null),
        ("t", Value::Bool(true), Bson::Boolean(true)),
        ("big", Value::Int(i64::MIN), Bson::Int64(i64::MIN)),
        ("f", Value::Float(0.1), Bson::Double(0.1)),
        ("nan", Value::Float(f64::NAN), Bson::Double(f64::NAN)),
        ("dec", Value::numeric("12345678901234567890.1234567890123").expect("n"), Bson::Decimal128("12345678901234567890.1234567890123".parse().expect("d"))),
        ("dec0", Value::numeric("1.10").expect("n"), Bson::Decimal128("1.10".parse().expect("d"))),
        ("decnan", Value::numeric("NaN").expect("n"), Bson::Decimal128("NaN".parse().expect("d"))),
        ("text", Value::Text("é\"\u{0}x".into()), Bson::String("é\"\u{0}x".into())),
        ("bytes", Value::Bytes(vec![0, 1, 255]), Bson::Binary(mongodb::bson::Binary { subtype: mongodb::bson::spec::BinarySubtype::Generic, bytes: vec![0, 1, 255] })),
        ("json", Value::Json(faucet_core::value::Json::parse(r#"{"a": [1, "x", null], "b": 0.5, "c": 1.10, "d": {"$timestamp": {"t": 1700000000, "i": 7}}}"#).expect("json")),
            Bson::Document(doc! {"a": [1_i64, "x", Bson::Null], "b": 0.5, "c": Bson::Decimal128("1.10".parse().expect("d")), "d": Bson::Timestamp(mongodb::bson::Timestamp { time: 1_700_000_000, increment: 7 })})),
        ("tstz", Value::TimestampTz("2024-02-29T12:45:00.123Z".into()), Bson::DateTime(mongodb::bson::DateTime::from_millis(1_709_210_700_123))),
        ("ts_old", Value::Timestamp("1969-07-20T20:17:40".into()), Bson::DateTime(mongodb::bson::DateTime::from_millis(-14_182_940_000))),
        ("ts_micro_zero", Value::TimestampTz("2024-02-29T12:45:00.120000Z".into()), Bson::DateTime(mongodb::bson::DateTime::from_millis(1_709_210_700_120))),
        ("date", Value::Date("2024-02-29".into()), Bson::DateTime(mongodb::bson::DateTime::from_millis(1_709_164_800_000))),
        ("time", Value::Time("13:45:00".into()), Bson::String("13:45:00".into())),
        ("timetz", Value::TimeTz("13:45:00+01:00".into()), Bson::String("13:45:00+01:00".into())),
        ("interval", Value::Interval("P1Y2M3DT4H5M6.5S".into()), Bson::String("P1Y2M3DT4H5M6.5S".into())),
        ("array", Value::Array(vec![Value::Int(1), Value::Null, Value::Text("a".into())]), Bson::Array(vec![Bson::Int64(1), Bson::Null, Bson::String("a".into())])),
        ("row", Value::row(nested, vec![Value::Int(7)]), Bson::Document(doc! {"n": 7_i64})),
    ];
    let schema = Arc::new(Schema::new(
        fields
            .iter()
            .map(|(n, v, _)| Field::new(*n, v.data_type()))
            .collect(),
    ));
    let mut b = PageBuilder::new(schema, 1);
    b.push_row(fields.iter().map(|(_, v, _)| v.clone()));
    let mut want = Document::new();
    for (n, _, bson) in fields {
        want.insert(n, bson);
    }
    (b.finish(Some(json!(1))), want)
}

#[tokio::test]
async fn every_value_is_written_exactly_and_reads_back_the_same() {
    let db = Db::new();
    let sink = sink(&db.name, "values", MongoWriteMode::Upsert, &["id"]);
    let (page, mut want) = every_value();
    let mut w = sink.open().await.expect("open");
    w.write(&page).await.expect("write");
    let got = docs(&db.name, "values", doc! {}).await;
    assert_eq!(got.len(), 1);
    let mut got = got[0].clone();
    assert_eq!(
        got.remove("_id"),
        Some(Bson::Int64(1)),
        "_id is the key's value"
    );
    // NaN != NaN: compare the doubles' bits, then the rest.
    let nan = |d: &mut Document| match d.remove("nan") {
        Some(Bson::Double(f)) => f.to_bits(),
        other => panic!("nan: {other:?}"),
    };
    assert_eq!(nan(&mut got), nan(&mut want));
    assert_eq!(got, want);
    // Read back through the BSON → faucet mapping, the decimals keep their digits.
    let row = value::document(got);
    let mut text = Vec::new();
    faucet_core::value::json::write_value(&mut text, &row);
    let text = String::from_utf8(text).expect("utf-8");
    assert!(
        text.contains(r#""dec":12345678901234567890.1234567890123"#),
        "{text}"
    );
    assert!(text.contains(r#""dec0":1.10"#), "{text}");
    assert!(
        text.contains(r#""tstz":"2024-02-29T12:45:00.123Z""#),
        "{text}"
    );
}

#[tokio::test]
async fn a_value_without_an_exact_form_fails_its_page_whole() {
    let db = Db::new();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int),
        Field::new("at", DataType::TimestampTz),
    ]));
    let page = |rows: &[(i64, &str)]| {
        let mut b = PageBuilder::new(schema.clone(), rows.len());
        for (id, at) in rows {
            b.push_row([Value::Int(*id), Value::TimestampTz((*at).into())]);
        }
        b.finish(Some(json!(1)))
    };
    let micro = page(&[
        (1, "2024-02-29T12:45:00.123Z"),
        (2, "2024-02-29T12:45:00.123456Z"),
    ]);
    let s = sink(&db.name, "t", MongoWriteMode::Append, &[]);
    let mut w = s.open().await.expect("open");
    let e = w.write(&micro).await.expect_err("sub-millisecond refused");
    let text = e.to_string();
    assert!(
        matches!(e, FaucetError::Data { .. })
            && text.contains("page row 2")
            && text.contains("field at"),
        "{text}"
    );
    assert!(
        docs(&db.name, "t", doc! {}).await.is_empty(),
        "nothing of the page"
    );
    let mut c = MongodbSinkConfig::new(mongodb_url(), format!("{}.t", db.name));
    c.sub_millisecond = SubMillisecond::Truncate;
    let s = MongodbSink::new(c).expect("sink");
    let mut w = s.open().await.expect("open");
    w.write(&micro).await.expect("truncated");
    let got = docs(&db.name, "t", doc! {"id": 1}).await;
    assert_eq!(
        got[1].get_datetime("at").expect("date").timestamp_millis(),
        1_709_210_700_123
    );
}

#[tokio::test]
async fn a_stale_writer_is_fenced() {
    let db = Db::new();
    let s = sink(&db.name, "t", MongoWriteMode::Append, &[]);
    let ttl = Duration::from_secs(30);
    let mut old = s.open().await.expect("open");
    assert!(old.fence(&Fence::new("k", 1, ttl)).await.expect("fence"));
    old.write(&conformance::sample_page(&[1], "a", json!(1)))
        .await
        .expect("page of fence 1");
    let mut new = s.open().await.expect("open");
    assert!(new.fence(&Fence::new("k", 2, ttl)).await.expect("fence"));
    let e = old
        .write(&conformance::sample_page(&[2], "a", json!(2)))
        .await
        .expect_err("fenced");
    assert!(
        matches!(e, FaucetError::Lease(LeaseError::Fenced { .. })),
        "{e}"
    );
    new.write(&conformance::sample_page(&[3], "a", json!(3)))
        .await
        .expect("page of fence 2");
    let ids: Vec<i64> = docs(&db.name, "t", doc! {"id": 1})
        .await
        .iter()
        .map(|d| d.get_i64("id").expect("id"))
        .collect();
    assert_eq!(ids, [1, 3]);
    // A fence below the stored one is refused at `fence` already.
    let mut stale = s.open().await.expect("open");
    assert!(stale.fence(&Fence::new("k", 1, ttl)).await.is_err());
}

#[tokio::test]
async fn an_update_without_its_unchanged_fields_keeps_their_stored_values() {
    use faucet_core::change::unchanged_field;
    let db = Db::new();
    let s = sink(&db.name, "t", MongoWriteMode::Upsert, &["id"]);
    let mut w = s.open().await.expect("open");
    let schema = record_schema(
        vec![Field::new("lsn", DataType::Text)],
        vec![unchanged_field()],
    );
    let full = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int),
        Field::new("v", DataType::Text),
        Field::new("big", DataType::Text),
    ]));
    let part = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int),
        Field::new("v", DataType::Text),
    ]));
    let mut b = PageBuilder::new(schema.clone(), 1);
    b.push_row([
        Value::Text("c".into()),
        Value::Text("public.t".into()),
        Value::Text("0/1".into()),
        Value::TimestampTz("2026-12-01T00:00:00Z".into()),
        Value::Null,
        Value::row(
            full,
            vec![
                Value::Int(1),
                Value::Text("a".into()),
                Value::Text("toasted".into()),
            ],
        ),
        Value::Null,
    ]);
    w.write(&b.finish(Some(json!(1)))).await.expect("insert");
    let mut b = PageBuilder::new(schema, 1);
    b.push_row([
        Value::Text("u".into()),
        Value::Text("public.t".into()),
        Value::Text("0/2".into()),
        Value::TimestampTz("2026-12-01T00:00:01Z".into()),
        Value::Null,
        Value::row(part, vec![Value::Int(1), Value::Text("b".into())]),
        Value::Array(vec![Value::Text("big".into())]),
    ]);
    w.write(&b.finish(Some(json!(2)))).await.expect("update");
    let got = docs(&db.name, "t", doc! {}).await;
    assert_eq!(
        got,
        vec![doc! {"_id": 1_i64, "id": 1_i64, "v": "b", "big": "toasted"}]
    );
}
