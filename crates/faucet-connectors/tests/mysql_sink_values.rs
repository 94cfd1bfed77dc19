//! The `mysql` sink and the values MariaDB would change without a warning (bound parameters
//! are converted silently, whatever the `sql_mode`): fraction digits beyond a column's
//! precision, digits a FLOAT or DOUBLE cannot hold, a BINARY(n) padded with zero bytes, the
//! trailing spaces a CHAR/ENUM drops, a text into BIT. Each fails its page naming the page row
//! and the column, nothing of the page committed; values that fit go in exactly. And
//! `create_table`'s type mapping (every row of the README table, each value read back as the
//! server renders it) and its refusals of tables MySQL cannot make (key too wide, a JSON key,
//! two fields differing only in case).

use faucet_connectors::mysql::{MysqlSink, MysqlSinkConfig};
use faucet_core::{Commit, CommitToken, DataType, FaucetError, Sink, Value};
use serde_json::json;

use crate::mysql_sink_support::{append_sink, s, sink_db, texts, url_for};
use crate::sink_support::{plain_page, row, write_all};

/// The fields of table `t` below, in order.
fn fields() -> Vec<(&'static str, DataType)> {
    vec![
        ("id", DataType::Int),
        ("dt3", DataType::Timestamp),
        ("dt0", DataType::Timestamp),
        ("ts3", DataType::TimestampTz),
        ("tm2", DataType::Time),
        ("f", DataType::Float),
        ("d", DataType::Unknown),
        ("bin", DataType::Bytes),
        ("c", DataType::Text),
        ("e", DataType::Text),
        ("bits", DataType::Unknown),
        ("amount", DataType::Numeric),
    ]
}

/// A row of values every column holds exactly.
fn good(id: i64) -> Vec<Value> {
    vec![
        Value::Int(id),
        Value::Timestamp("2024-01-01T12:00:00.120".into()),
        Value::Timestamp("2024-01-01T12:00:00".into()),
        Value::TimestampTz("2024-01-01T12:00:00.123000Z".into()),
        Value::Time("12:00:00.50".into()),
        Value::Float(0.1),
        Value::Int(1 << 53),
        Value::Bytes(vec![b'a', b'b', 0, 0]),
        Value::Text(" ab".into()),
        Value::Text("a".into()),
        Value::Int(255),
        Value::Numeric("1.20".into()),
    ]
}

/// Each value a column would store as something else — silently (the encoder's checks) or
/// with a warning (the server's) — fails its page naming page row and column; nothing of the
/// page is committed; the fitting values read back exactly.
#[tokio::test]
async fn a_value_the_column_would_change_fails_the_page_and_fitting_values_go_in_exactly() {
    let mut db = sink_db("ms_inexact").await;
    db.exec(
        "CREATE TABLE t (id INT PRIMARY KEY, dt3 DATETIME(3), dt0 DATETIME, \
         ts3 TIMESTAMP(3) NULL, tm2 TIME(2), f FLOAT, d DOUBLE, bin BINARY(4), c CHAR(4), \
         e ENUM('a','b'), bits BIT(8), amount DECIMAL(10,2)) ENGINE=InnoDB",
    )
    .await;
    let fields = fields();
    let sink = append_sink(&db, "t");
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &[plain_page(&fields, vec![good(1)], json!(1))]).await;
    let cases: Vec<(usize, Value, &str)> = vec![
        (
            1,
            Value::Timestamp("2024-01-01T12:00:00.123456".into()),
            "fraction digits beyond the 3",
        ),
        (
            2,
            Value::Timestamp("2024-01-01T12:00:00.5".into()),
            "fraction digits beyond the 0",
        ),
        (
            3,
            Value::TimestampTz("2024-01-01T12:00:00.1234Z".into()),
            "fraction digits beyond the 3",
        ),
        (4, Value::Time("12:00:00.125".into()), "beyond the 2"),
        (5, Value::Float(0.123_456_789), "FLOAT"),
        (5, Value::Int(16_777_217), "FLOAT"),
        (6, Value::Int((1 << 53) + 1), "DOUBLE"),
        (6, Value::Numeric("0.12345678901234567890".into()), "DOUBLE"),
        (7, Value::Bytes(b"ab".to_vec()), "VARBINARY(4)"),
        (8, Value::Text("ab ".into()), "VARCHAR"),
        (9, Value::Text("a ".into()), "ENUM"),
        (10, Value::Text("1".into()), "BIT"),
        (10, Value::Float(1.5), "BIT"),
        // The server's own refusals, checked here so they stay refusals.
        (10, Value::Int(256), "too long"),
        (4, Value::Interval("839:00:00".into()), "Incorrect time"),
        (11, Value::Numeric("1.234".into()), "Data truncated"),
    ];
    for (col, bad, says) in cases {
        let mut bad_row = good(12);
        bad_row[col] = bad.clone();
        let page = plain_page(
            &fields,
            vec![good(10), good(11), bad_row, good(13)],
            json!(2),
        );
        let err = w.write(&page).await.expect_err("an inexact value");
        let FaucetError::Data {
            location, message, ..
        } = &err
        else {
            panic!("{bad:?}: {err:?}");
        };
        let column = fields[col].0;
        assert_eq!(
            *location,
            format!("{}.t, column {column}, page row 3", db.db),
            "{bad:?}: {err}"
        );
        assert!(message.contains(says), "{bad:?}: {err}");
        assert_eq!(
            db.column("SELECT id FROM t ORDER BY id").await,
            [s("1")],
            "nothing of the failed page is committed: {err}"
        );
    }
    // More values that fit, each read back as given.
    let mut more = good(2);
    more[1] = Value::Timestamp("2024-01-01T12:00:00.123000".into());
    more[5] = Value::Float(-3.25);
    more[6] = Value::Numeric("0.1".into());
    more[7] = Value::Text("abcd".into());
    more[10] = Value::Numeric("5".into());
    write_all(w.as_mut(), &[plain_page(&fields, vec![more], json!(3))]).await;
    let back = texts(
        &mut db,
        "SELECT id, dt3, dt0, ts3, tm2, f, d, HEX(bin), CONCAT('[', c, ']'), e, bits + 0, \
         amount FROM t ORDER BY id",
    )
    .await;
    assert_eq!(
        back,
        [
            vec![
                s("1"),
                s("2024-01-01 12:00:00.120"),
                s("2024-01-01 12:00:00"),
                s("2024-01-01 12:00:00.123"),
                s("12:00:00.50"),
                s("0.1"),
                s("9.007199254740992e15"),
                s("61620000"),
                s("[ ab]"),
                s("a"),
                s("255"),
                s("1.20"),
            ],
            vec![
                s("2"),
                s("2024-01-01 12:00:00.123"),
                s("2024-01-01 12:00:00"),
                s("2024-01-01 12:00:00.123"),
                s("12:00:00.50"),
                s("-3.25"),
                s("0.1"),
                s("61626364"),
                s("[ ab]"),
                s("a"),
                s("5"),
                s("1.20"),
            ],
        ]
    );
    db.drop_db().await;
}

/// A sink creating `table` in `db`, keyed (upsert) by `key`.
fn creating_sink(db: &str, table: &str, key: &[&str]) -> MysqlSink {
    let config = MysqlSinkConfig::new(url_for(db), table).creating_table();
    let config = if key.is_empty() {
        config
    } else {
        config.upsert(key.iter().copied())
    };
    MysqlSink::new(config).expect("config")
}

/// Whether `table` exists in `db`.
async fn exists(db: &mut crate::mysql_support::TestDb, table: &str) -> bool {
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{}' AND \
         TABLE_NAME = '{table}'",
        db.db
    );
    db.column(&sql).await == [s("1")]
}

/// `create_table` from values in exponent form takes their fraction digits (`1e-7` is
/// DECIMAL(65,7)); a table MySQL cannot make is refused before anything is created, naming
/// the fields and the fix.
#[tokio::test]
async fn create_table_makes_what_the_values_need_or_refuses_naming_the_fields() {
    let mut db = sink_db("ms_create_edges").await;
    let sink = creating_sink(&db.db, "small", &[]);
    let mut w = sink.open().await.expect("open");
    let numbers = [("n", DataType::Numeric)];
    let rows = vec![
        vec![Value::Numeric("1e-7".into())],
        vec![Value::Numeric("2.5E2".into())],
    ];
    write_all(w.as_mut(), &[plain_page(&numbers, rows, json!(1))]).await;
    let column = format!(
        "SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{}' AND \
         TABLE_NAME = 'small'",
        db.db
    );
    assert_eq!(db.column(&column).await, [s("decimal(65,7)")]);
    assert_eq!(
        db.column("SELECT n FROM small ORDER BY n").await,
        [s("0.0000001"), s("250.0000000")]
    );
    drop(w);

    // Four text key columns: 4 × 1,020 bytes is more than an InnoDB index holds.
    let text4 = [
        ("a", DataType::Text),
        ("b", DataType::Text),
        ("c", DataType::Text),
        ("d", DataType::Text),
    ];
    let row4 = vec![vec![
        Value::Text("1".into()),
        Value::Text("2".into()),
        Value::Text("3".into()),
        Value::Text("4".into()),
    ]];
    let sink = creating_sink(&db.db, "wide", &["a", "b", "c", "d"]);
    let mut w = sink.open().await.expect("open");
    let err = w
        .write(&plain_page(&text4, row4.clone(), json!(1)))
        .await
        .expect_err("key too wide");
    assert!(matches!(err, FaucetError::Config { .. }), "{err:?}");
    let msg = err.to_string();
    for part in ["`a` VARCHAR(255)", "`d` VARCHAR(255)", "3072", "fewer text"] {
        assert!(msg.contains(part), "{part}: {msg}");
    }
    assert!(!exists(&mut db, "wide").await, "nothing was created");
    drop(w);
    // Three are fine.
    let sink = creating_sink(&db.db, "wide3", &["a", "b", "c"]);
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &[plain_page(&text4, row4, json!(1))]).await;
    assert_eq!(
        db.column("SELECT CONCAT(a, b, c, d) FROM wide3").await,
        [s("1234")]
    );
    drop(w);

    // A JSON key.
    let sink = creating_sink(&db.db, "jsonkey", &["j"]);
    let mut w = sink.open().await.expect("open");
    let json_field = [("j", DataType::Json), ("v", DataType::Int)];
    let json_row = vec![vec![
        Value::Json(faucet_core::Json::verbatim(r#"{"a":1}"#).expect("json")),
        Value::Int(1),
    ]];
    let err = w
        .write(&plain_page(&json_field, json_row, json!(1)))
        .await
        .expect_err("json key");
    assert!(matches!(err, FaucetError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("key column `j`"), "{err}");
    assert!(!exists(&mut db, "jsonkey").await, "nothing was created");
    drop(w);

    // `id` and `ID` are one MySQL column name.
    let sink = creating_sink(&db.db, "cased", &[]);
    let mut w = sink.open().await.expect("open");
    let cased = [("id", DataType::Int), ("ID", DataType::Int)];
    let err = w
        .write(&plain_page(
            &cased,
            vec![vec![Value::Int(1), Value::Int(2)]],
            json!(1),
        ))
        .await
        .expect_err("id and ID");
    let FaucetError::Data {
        location, message, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(
        *location,
        format!("{}.cased, fields \"id\" and \"ID\"", db.db)
    );
    assert!(message.contains("ignore case"), "{err}");
    assert!(!exists(&mut db, "cased").await, "nothing was created");
    db.drop_db().await;
}

/// An empty first page with `create_table` (the table waits for a page with rows) leaves no
/// commit token for a table that does not exist; the next page creates the table and its
/// token carries the run on.
#[tokio::test]
async fn an_empty_first_page_leaves_no_token_for_a_table_not_made_yet() {
    let mut db = sink_db("ms_empty_first").await;
    let fields = [("id", DataType::Int)];
    let sink = creating_sink(&db.db, "later", &["id"]);
    let mut w = sink.open().await.expect("open");
    let t1 = CommitToken {
        sequence: 1,
        bookmark: json!(1),
    };
    w.write_committed(
        &plain_page(&fields, vec![], json!(1)),
        &Commit::new("k", &t1),
    )
    .await
    .expect("empty page");
    assert!(!exists(&mut db, "later").await);
    let tokens = format!(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{}' AND \
         TABLE_NAME = 'faucet_commit_tokens'",
        db.db
    );
    if db.column(&tokens).await == [s("1")] {
        assert_eq!(
            db.column("SELECT COUNT(*) FROM faucet_commit_tokens").await,
            [s("0")],
            "no token for a table that does not exist"
        );
    }
    drop(w);
    let mut w = sink.open().await.expect("reopen");
    assert_eq!(w.last_committed_token("k").await.expect("token"), None);
    let t2 = CommitToken {
        sequence: 2,
        bookmark: json!(2),
    };
    w.write_committed(
        &plain_page(&fields, vec![vec![Value::Int(7)]], json!(2)),
        &Commit::new("k", &t2),
    )
    .await
    .expect("page with rows");
    drop(w);
    let mut w = sink.open().await.expect("reopen");
    assert_eq!(w.last_committed_token("k").await.expect("token"), Some(t2));
    assert_eq!(db.column("SELECT id FROM later").await, [s("7")]);
    db.drop_db().await;
}

/// `create_table` maps every faucet value type to a MySQL column that holds it exactly
/// (README, "mysql sink"); each value reads back as the server renders it.
#[tokio::test]
async fn create_table_maps_every_type_and_values_round_trip() {
    let mut db = sink_db("ms_types").await;
    let fields: Vec<(&str, DataType, Value, &str, &str)> = vec![
        (
            "id",
            DataType::Int,
            Value::Int(-9223372036854775808),
            "bigint(20)",
            "-9223372036854775808",
        ),
        ("b", DataType::Bool, Value::Bool(true), "tinyint(1)", "1"),
        ("f", DataType::Float, Value::Float(0.1), "double", "0.1"),
        (
            "n",
            DataType::Numeric,
            Value::Numeric("12345678901234567890.1234567890".into()),
            "decimal(65,10)",
            "12345678901234567890.1234567890",
        ),
        (
            "u",
            DataType::Numeric,
            Value::Numeric("18446744073709551615".into()),
            "decimal(65,0)",
            "18446744073709551615",
        ),
        (
            "t",
            DataType::Text,
            Value::Text("café ✓ 'q' \\ \"".into()),
            "longtext",
            "café ✓ 'q' \\ \"",
        ),
        (
            "by",
            DataType::Bytes,
            Value::Bytes(vec![0, 255, 10, 0]),
            "longblob",
            "\0\u{fffd}\n\0",
        ),
        (
            "j",
            DataType::Json,
            Value::Json(
                faucet_core::Json::verbatim(r#"{"a":[1,2.50,null],"b":"x"}"#).expect("json"),
            ),
            "longtext",
            "{\"a\":[1,2.50,null],\"b\":\"x\"}",
        ),
        (
            "d",
            DataType::Date,
            Value::Date("2024-02-29".into()),
            "date",
            "2024-02-29",
        ),
        (
            "ts",
            DataType::Timestamp,
            Value::Timestamp("2024-02-29T13:45:00.123456".into()),
            "datetime(6)",
            "2024-02-29 13:45:00.123456",
        ),
        (
            "tz",
            DataType::TimestampTz,
            Value::TimestampTz("2024-02-29T12:45:00.5Z".into()),
            "datetime(6)",
            "2024-02-29 12:45:00.500000",
        ),
        (
            "tm",
            DataType::Time,
            Value::Time("13:45:00.25".into()),
            "time(6)",
            "13:45:00.250000",
        ),
        (
            "ttz",
            DataType::TimeTz,
            Value::TimeTz("13:45:00+01:00".into()),
            "varchar(32)",
            "13:45:00+01:00",
        ),
        (
            "my_time",
            DataType::Interval,
            Value::Interval("-838:59:59.000000".into()),
            "time(6)",
            "-838:59:59.000000",
        ),
        (
            "iso",
            DataType::Interval,
            Value::Interval("P1Y2M3DT4H5M6.5S".into()),
            "varchar(64)",
            "P1Y2M3DT4H5M6.5S",
        ),
        (
            "arr",
            DataType::Array(Box::new(DataType::Int)),
            Value::Array(vec![Value::Int(1), Value::Null]),
            "longtext",
            "[1,null]",
        ),
        (
            "nested",
            DataType::Json,
            row(&[("k", Value::Int(1))]),
            "longtext",
            "{\"k\":1}",
        ),
        ("unknown", DataType::Unknown, Value::Null, "longtext", ""),
    ];
    let names: Vec<(&str, DataType)> = fields.iter().map(|(n, t, ..)| (*n, t.clone())).collect();
    let values: Vec<Value> = fields.iter().map(|(_, _, v, ..)| v.clone()).collect();
    let sink = MysqlSink::new(
        MysqlSinkConfig::new(url_for(&db.db), "typed")
            .creating_table()
            .upsert(["id"]),
    )
    .expect("config");
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &[plain_page(&names, vec![values], json!(1))]).await;
    let sql = format!(
        "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{}' \
         AND TABLE_NAME = 'typed' ORDER BY ORDINAL_POSITION",
        db.db
    );
    let types = texts(&mut db, &sql).await;
    let want: Vec<Vec<Option<String>>> = fields
        .iter()
        .map(|(n, _, _, t, _)| vec![s(n), s(t)])
        .collect();
    assert_eq!(types, want);
    let engine = db
        .column(&format!(
            "SELECT CONCAT(ENGINE, ' ', TABLE_COLLATION) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = '{}' AND TABLE_NAME = 'typed'",
            db.db
        ))
        .await;
    assert_eq!(engine, [s("InnoDB utf8mb4_nopad_bin")]);
    let back = texts(&mut db, "SELECT * FROM typed").await;
    for (i, (name, _, v, _, text)) in fields.iter().enumerate() {
        let got = back[0][i].clone();
        let want = if v.is_null() { None } else { s(text) };
        assert_eq!(got, want, "{name}");
    }
    // MariaDB's JSON is LONGTEXT with a json_valid check: that check is there.
    let checks = db
        .column(&format!(
            "SELECT COUNT(*) FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = '{}' \
             AND TABLE_NAME = 'typed'",
            db.db
        ))
        .await;
    assert_eq!(checks, [s("3")]);
    db.drop_db().await;
}
