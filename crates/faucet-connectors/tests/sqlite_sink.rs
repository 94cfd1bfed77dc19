//! The `sqlite` sink against real database files, read back with Debian's `sqlite3`
//! command-line tool: the conformance battery, `create_table`'s value mapping (every row of
//! the module's table), change records applied by key, the commit token kept across
//! sessions, and the errors for a locked file, a read-only file and a directory.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;

use faucet_connectors::sqlite::{SqliteSink, SqliteSinkConfig};
use faucet_core::testing::conformance;
use faucet_core::{Commit, CommitToken, DataType, Fence, Sink, Value};
use serde_json::{Value as Json, json};

use crate::sink_support::{change, change_page, plain_page, row, write_all};

/// `sqlite3 -json db sql`: the rows as JSON objects.
fn sqlite3(db: &Path, sql: &str) -> Vec<Json> {
    serde_json::from_str(&faucet_test_support::sqlite3_json(db, sql)).expect("sqlite3 -json output")
}

fn read_back(
    path: PathBuf,
    table: &str,
) -> impl Fn() -> Pin<Box<dyn Future<Output = Vec<Json>> + Send>> + use<> {
    let sql = format!("SELECT id, v FROM \"{table}\" ORDER BY id");
    move || {
        let (path, sql) = (path.clone(), sql.clone());
        Box::pin(async move { sqlite3(&path, &sql) })
    }
}

#[tokio::test]
async fn append_and_upsert_keep_their_promises() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("t.db");
    sqlite3(
        &db,
        "CREATE TABLE appended (id INTEGER, v TEXT); \
         CREATE TABLE upserted (id INTEGER PRIMARY KEY, v TEXT);",
    );
    let append = SqliteSink::new(SqliteSinkConfig::new(&db, "appended")).expect("sink");
    assert!(append.capabilities().atomic_watermark);
    assert!(!append.capabilities().keyed_upsert);
    conformance::sink_flush_is_durable(&append, read_back(db.clone(), "appended"))
        .await
        .expect("flushed rows are there");
    conformance::sink_guarantee_is_truthful(&append, read_back(db.clone(), "appended"))
        .await
        .expect("atomic watermark holds");
    let upsert =
        SqliteSink::new(SqliteSinkConfig::new(&db, "upserted").upsert(["id"])).expect("sink");
    assert!(upsert.capabilities().keyed_upsert);
    conformance::sink_guarantee_is_truthful(&upsert, read_back(db.clone(), "upserted"))
        .await
        .expect("keyed upsert and atomic watermark hold");
    conformance::config_is_strict::<SqliteSinkConfig>(&json!({"path": "x.db", "table": "t"}))
        .expect("strict");
    let target = append.target().expect("target");
    assert_eq!(target, format!("sqlite {} table appended", db.display()));
    // WAL journal mode, kept in the file.
    assert_eq!(
        sqlite3(&db, "PRAGMA journal_mode"),
        vec![json!({"journal_mode": "wal"})]
    );
}

/// Every row of the value table: what `create_table` declares and what is stored, read back
/// with `typeof()` and exact text.
#[tokio::test]
async fn create_table_keeps_every_value_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("values.db");
    let sink = SqliteSink::new(
        SqliteSinkConfig::new(&db, "vals")
            .upsert(["id"])
            .creating_table(),
    )
    .expect("sink");
    let fields = [
        ("id", DataType::Int),
        ("flag", DataType::Bool),
        ("f", DataType::Float),
        ("amount", DataType::Numeric),
        ("name", DataType::Text),
        ("at", DataType::TimestampTz),
        ("day", DataType::Date),
        ("doc", DataType::Json),
        ("raw", DataType::Bytes),
        ("tags", DataType::Array(Box::new(DataType::Text))),
    ];
    let page = plain_page(
        &fields,
        vec![
            vec![
                Value::Int(1),
                Value::Bool(true),
                Value::Float(0.1 + 0.2),
                Value::Numeric("1.10".into()),
                Value::Text("quote \" comma, é".into()),
                Value::TimestampTz("2024-02-29T12:45:00.123456Z".into()),
                Value::Date("2024-02-29".into()),
                Value::Json(
                    faucet_core::value::Json::parse(r#"{"k":1.50,"a":[1]}"#).expect("json"),
                ),
                Value::Bytes(vec![0, 255, 10]),
                Value::Array(vec![Value::Text("a".into()), Value::Null]),
            ],
            vec![
                Value::Int(2),
                Value::Bool(false),
                Value::Float(f64::NAN),
                Value::Numeric("-0.000100".into()),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
            ],
        ],
        json!(1),
    );
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &[page]).await;
    let declared = sqlite3(
        &db,
        "SELECT name, type FROM pragma_table_info('vals') ORDER BY cid",
    );
    let types: Vec<(&str, &str)> = declared
        .iter()
        .map(|r| {
            (
                r["name"].as_str().expect("name"),
                r["type"].as_str().expect("type"),
            )
        })
        .collect();
    assert_eq!(
        types,
        [
            ("id", "INTEGER"),
            ("flag", "INTEGER"),
            ("f", "REAL"),
            ("amount", "TEXT"),
            ("name", "TEXT"),
            ("at", "TEXT"),
            ("day", "TEXT"),
            ("doc", "TEXT"),
            ("raw", "BLOB"),
            ("tags", "TEXT")
        ]
    );
    let got = sqlite3(
        &db,
        "SELECT id, flag, typeof(f) AS tf, CAST(f AS TEXT) AS f, typeof(amount) AS ta, amount, \
         name, at, day, doc, hex(raw) AS raw, tags FROM vals ORDER BY id",
    );
    assert_eq!(
        got,
        vec![
            json!({"id": 1, "flag": 1, "tf": "real", "f": "0.3", "ta": "text", "amount": "1.10",
                   "name": "quote \" comma, é", "at": "2024-02-29T12:45:00.123456Z",
                   "day": "2024-02-29", "doc": r#"{"k":1.50,"a":[1]}"#, "raw": "00FF0A",
                   "tags": r#"["a",null]"#}),
            json!({"id": 2, "flag": 0, "tf": "text", "f": "NaN", "ta": "text",
                   "amount": "-0.000100", "name": null, "at": null, "day": null, "doc": null,
                   "raw": "", "tags": null}),
        ]
    );
    // The float is the exact double (SQLite's CAST shows 15 digits; the stored value is
    // all of it).
    assert_eq!(
        sqlite3(
            &db,
            "SELECT f = 0.30000000000000004 AS exact FROM vals WHERE id = 1"
        ),
        vec![json!({"exact": 1})]
    );
}

/// A text SQLite would store as a number spelled otherwise (an existing INTEGER / NUMERIC
/// column) fails its page naming table, column and page row; nothing of the page commits.
#[tokio::test]
async fn a_value_the_column_would_change_fails_naming_column_and_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("bad.db");
    sqlite3(
        &db,
        "CREATE TABLE t (id INTEGER, zip INTEGER, amount DECIMAL(10,2))",
    );
    let sink = SqliteSink::new(SqliteSinkConfig::new(&db, "t")).expect("sink");
    let fields = [
        ("id", DataType::Int),
        ("zip", DataType::Text),
        ("amount", DataType::Numeric),
    ];
    let good = vec![
        Value::Int(1),
        Value::Text("12345".into()),
        Value::Numeric("1.5".into()),
    ];
    let mut w = sink.open().await.expect("open");
    w.write(&plain_page(&fields, vec![good.clone()], json!(1)))
        .await
        .expect("a kept value");
    for (zip, amount, column) in [("00501", "2.5", "zip"), ("7", "2.50", "amount")] {
        let page = plain_page(
            &fields,
            vec![
                good.clone(),
                vec![
                    Value::Int(2),
                    Value::Text(zip.into()),
                    Value::Numeric(amount.into()),
                ],
            ],
            json!(2),
        );
        let err = w
            .write(&page)
            .await
            .expect_err("a changed value")
            .to_string();
        assert!(
            err.contains(&format!("t, column {column}, page row 2")) && err.contains("TEXT"),
            "{err}"
        );
    }
    assert_eq!(
        sqlite3(&db, "SELECT count(*) AS n FROM t"),
        vec![json!({"n": 1})]
    );
}

/// Change records applied by key: creates, updates (one changing the key), deletes and a
/// truncate, several changes to one key in a page; replaying the pages changes nothing.
#[tokio::test]
async fn upsert_applies_change_records_by_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("cdc.db");
    let sink = SqliteSink::new(
        SqliteSinkConfig::new(&db, "items")
            .upsert(["id"])
            .creating_table(),
    )
    .expect("sink");
    let r = |id: i64, v: &str| row(&[("id", Value::Int(id)), ("v", Value::Text(v.into()))]);
    let t = "public.items";
    let pages = [
        change_page(
            vec![
                change("c", t, Value::Null, r(1, "a"), &[]),
                change("c", t, Value::Null, r(2, "b"), &[]),
                change("c", t, Value::Null, r(3, "c"), &[]),
                change("u", t, r(1, "a"), r(1, "a2"), &[]),
                change("u", t, r(1, "a2"), r(1, "a3"), &[]),
            ],
            json!(1),
        ),
        change_page(
            vec![
                change("d", t, r(2, "b"), Value::Null, &[]),
                change("u", t, r(3, "c"), r(30, "c2"), &[]),
                change("c", t, Value::Null, r(4, "d"), &[]),
            ],
            json!(2),
        ),
    ];
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &pages).await;
    let want = vec![
        json!({"id": 1, "v": "a3"}),
        json!({"id": 4, "v": "d"}),
        json!({"id": 30, "v": "c2"}),
    ];
    assert_eq!(sqlite3(&db, "SELECT id, v FROM items ORDER BY id"), want);
    write_all(w.as_mut(), &pages).await;
    assert_eq!(
        sqlite3(&db, "SELECT id, v FROM items ORDER BY id"),
        want,
        "replayed"
    );
    let truncate = change_page(
        vec![change("t", t, Value::Null, Value::Null, &[])],
        json!(3),
    );
    write_all(w.as_mut(), &[truncate]).await;
    assert_eq!(
        sqlite3(&db, "SELECT count(*) AS n FROM items"),
        vec![json!({"n": 0})]
    );
}

/// The commit token is stored with the rows and read back by a new session; a page with a
/// token already stored is refused and none of its rows commit (the run loop resumes after
/// it, so a replayed page is skipped).
#[tokio::test]
async fn the_commit_token_survives_the_session_and_a_replay_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("token.db");
    let sink = SqliteSink::new(SqliteSinkConfig::new(&db, "t").creating_table()).expect("sink");
    let page = |ids: &[i64]| faucet_core::testing::conformance::sample_page(ids, "x", json!(0));
    let token = |sequence| CommitToken {
        sequence,
        bookmark: json!({"offset": sequence}),
    };
    {
        let mut w = sink.open().await.expect("open");
        assert_eq!(w.last_committed_token("k").await.expect("none yet"), None);
        w.write_committed(&page(&[1, 2]), &Commit::new("k", &token(1)))
            .await
            .expect("first");
        w.write_committed(&page(&[3]), &Commit::new("k", &token(2)))
            .await
            .expect("second");
    }
    let mut w = sink.open().await.expect("reopen");
    assert_eq!(
        w.last_committed_token("k").await.expect("read"),
        Some(token(2))
    );
    let err = w
        .write_committed(&page(&[3]), &Commit::new("k", &token(2)))
        .await
        .expect_err("a replayed token")
        .to_string();
    assert!(err.contains("refused"), "{err}");
    assert_eq!(
        sqlite3(&db, "SELECT count(*) AS n, count(DISTINCT id) AS d FROM t"),
        vec![json!({"n": 3, "d": 3})]
    );
    assert_eq!(
        sqlite3(&db, "SELECT scope, sequence FROM faucet_commit_tokens"),
        vec![json!({"scope": "k -> t", "sequence": 2})]
    );
}

/// Another connection holding the file's write lock past `busy_timeout_ms`: the page fails
/// naming the file and the lock, writes nothing, and the next page goes in once the lock is
/// gone.
#[tokio::test]
async fn a_locked_file_fails_the_page_naming_the_file() {
    use sqlx::ConnectOptions as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("locked.db");
    sqlite3(&db, "CREATE TABLE t (id INTEGER, v TEXT)");
    let mut config = SqliteSinkConfig::new(&db, "t");
    config.busy_timeout_ms = 50;
    let sink = SqliteSink::new(config).expect("sink");
    let mut w = sink.open().await.expect("open");
    let mut other = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&db)
        .connect()
        .await
        .expect("another connection");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .expect("take the lock");
    let page = faucet_core::testing::conformance::sample_page(&[1], "x", json!(1));
    let err = w.write(&page).await.expect_err("locked").to_string();
    assert!(
        err.contains(&format!("the database file {} is locked", db.display()))
            && err.contains("busy_timeout_ms = 50"),
        "{err}"
    );
    sqlx::query("ROLLBACK")
        .execute(&mut other)
        .await
        .expect("release");
    w.write(&page).await.expect("written once the lock is gone");
    assert_eq!(
        sqlite3(&db, "SELECT count(*) AS n FROM t"),
        vec![json!({"n": 1})]
    );
}

/// A file this process cannot write — immutable (`chattr +i`, which root cannot write
/// either) — and a directory given as `path`: `open` fails naming the path and why.
#[tokio::test]
async fn a_read_only_file_or_a_directory_fails_naming_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink =
        SqliteSink::new(SqliteSinkConfig::new(dir.path(), "t").creating_table()).expect("sink");
    let err = sink.open().await.err().expect("a directory").to_string();
    assert!(
        err.contains(&format!(
            "cannot open the database file {}",
            dir.path().display()
        )) && err.contains("it is a directory"),
        "{err}"
    );
    let db = dir.path().join("ro.db");
    sqlite3(&db, "CREATE TABLE t (id INTEGER, v TEXT)");
    let immutable = Command::new("chattr").arg("+i").arg(&db).status();
    if !immutable.is_ok_and(|s| s.success()) {
        eprintln!("skipped the read-only half: `chattr +i` is not available here");
        return;
    }
    let sink = SqliteSink::new(SqliteSinkConfig::new(&db, "t")).expect("sink");
    let result = sink.open().await.err().map(|e| e.to_string());
    let check = sink.check().await.err().map(|e| e.to_string());
    let _ = Command::new("chattr").arg("-i").arg(&db).status();
    for err in [result, check] {
        let err = err.expect("a read-only file");
        assert!(
            err.contains(&format!("the database file {} is read-only", db.display())),
            "{err}"
        );
    }
}

/// The writer fence: a writer whose lease a newer run took (a larger fence stored for the
/// scope) has its next page refused with `LeaseError::Fenced`, and none of its rows commit.
#[tokio::test]
async fn a_fenced_writer_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("fence.db");
    let sink = SqliteSink::new(SqliteSinkConfig::new(&db, "t").creating_table()).expect("sink");
    let page = |ids: &[i64]| faucet_core::testing::conformance::sample_page(ids, "x", json!(0));
    let ttl = std::time::Duration::from_secs(30);
    let mut old = sink.open().await.expect("open");
    assert!(old.fence(&Fence::new("k", 1, ttl)).await.expect("fence 1"));
    old.write(&page(&[1]))
        .await
        .expect("the first writer's page");
    let mut new = sink.open().await.expect("open");
    assert!(new.fence(&Fence::new("k", 2, ttl)).await.expect("fence 2"));
    new.write(&page(&[2]))
        .await
        .expect("the newer writer's page");
    let err = old.write(&page(&[3])).await.expect_err("fenced");
    assert!(
        matches!(
            &err,
            faucet_core::FaucetError::Lease(faucet_core::state::LeaseError::Fenced {
                fence: 1,
                newer: 2,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(
        sqlite3(&db, "SELECT id FROM t ORDER BY id"),
        vec![json!({"id": 1}), json!({"id": 2})]
    );
}
