//! The `mysql` sink against a real MariaDB: append, upsert of rows and change records, the
//! atomic commit token and the writer fence, typed errors for values the target cannot hold,
//! non-transactional engines refused (`create_table`'s type mapping and the values MariaDB
//! would change are in `mysql_sink_values`).

use faucet_connectors::mysql::{MysqlSink, MysqlSinkConfig};
use faucet_core::testing::conformance;
use faucet_core::{Commit, CommitToken, DataType, FaucetError, Fence, Sink, Value};
use serde_json::json;

use crate::mysql_sink_support::{append_sink, read_back, s, sink_db, texts, upsert_sink, url_for};
use crate::sink_support::{
    change, change_page, expect_old_row_missing, id_v_page, plain_page, row, several_versions_page,
    toast_move_pages, write_all,
};

#[tokio::test]
async fn append_and_upsert_keep_their_promises() {
    let mut db = sink_db("ms_conformance").await;
    db.exec(
        "CREATE TABLE appended (id BIGINT, v TEXT) ENGINE=InnoDB;
         CREATE TABLE upserted (id BIGINT PRIMARY KEY, v TEXT) ENGINE=InnoDB;",
    )
    .await;
    let append = append_sink(&db, "appended");
    assert!(append.capabilities().atomic_watermark);
    assert!(!append.capabilities().keyed_upsert);
    conformance::sink_flush_is_durable(&append, read_back(&db.db, "appended"))
        .await
        .expect("flushed rows are there");
    conformance::sink_guarantee_is_truthful(&append, read_back(&db.db, "appended"))
        .await
        .expect("atomic watermark holds");
    let upsert = upsert_sink(&db, "upserted", &["id"]);
    assert!(upsert.capabilities().keyed_upsert);
    conformance::sink_guarantee_is_truthful(&upsert, read_back(&db.db, "upserted"))
        .await
        .expect("keyed upsert and atomic watermark hold");
    conformance::config_is_strict::<MysqlSinkConfig>(&json!({
        "connection_url": url_for(&db.db), "table": "t"
    }))
    .expect("strict");
    let target = append.target().expect("target");
    assert!(
        target.ends_with(&format!("/{} table {}.appended", db.db, db.db)),
        "{target}"
    );
    assert!(!target.contains("root"), "{target}");
    db.drop_db().await;
}

/// A value the column cannot hold fails its page with an error naming the page row and the
/// column; nothing of that page is committed, nothing before it is lost.
#[tokio::test]
async fn a_value_the_column_cannot_hold_fails_the_page_naming_row_and_column() {
    let mut db = sink_db("ms_bad_values").await;
    db.exec(
        "CREATE TABLE t (id INT PRIMARY KEY, small TINYINT, name VARCHAR(3) NOT NULL, d DATE, \
         amount DECIMAL(6,2), dur TIME(6)) ENGINE=InnoDB",
    )
    .await;
    let fields = [
        ("id", DataType::Int),
        ("small", DataType::Int),
        ("name", DataType::Text),
        ("d", DataType::Date),
        ("amount", DataType::Numeric),
        ("dur", DataType::Interval),
    ];
    let good = |id: i64| {
        vec![
            Value::Int(id),
            Value::Int(1),
            Value::Text("abc".into()),
            Value::Date("2024-02-29".into()),
            Value::Numeric("1.25".into()),
            Value::Interval("-838:59:59.000000".into()),
        ]
    };
    let sink = append_sink(&db, "t");
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &[plain_page(&fields, vec![good(1)], json!(1))]).await;
    // (column of page row 3's bad value, the value, what the error says, whether page row 2
    // holds NULL in the nullable `small`).
    let cases: [(usize, Value, &str, bool); 8] = [
        (1, Value::Int(300), "Out of range", false),
        (2, Value::Text("abcd".into()), "too long", false),
        // MySQL's message names no row here (error 1048): the first row with NULL there —
        // in the column the message names, not an earlier row's NULL in a nullable column.
        (2, Value::Null, "cannot be null", false),
        (2, Value::Null, "cannot be null", true),
        (3, Value::Date("2023-02-29".into()), "Incorrect date", false),
        (4, Value::Numeric("1.255".into()), "Data truncated", false),
        (
            5,
            Value::Interval("P1DT2H".into()),
            "ISO 8601 duration",
            false,
        ),
        (4, Value::Numeric("NaN".into()), "NaN", false),
    ];
    for (col, bad, says, earlier_null) in cases {
        let mut row2 = good(11);
        if earlier_null {
            row2[1] = Value::Null;
        }
        let mut bad_row = good(12);
        bad_row[col] = bad;
        let page = plain_page(&fields, vec![good(10), row2, bad_row, good(13)], json!(2));
        let err = w.write(&page).await.expect_err("bad value");
        let FaucetError::Data {
            location, message, ..
        } = &err
        else {
            panic!("{err:?}");
        };
        let column = fields[col].0;
        assert_eq!(
            location,
            &format!("{}.t, column {column}, page row 3", db.db),
            "{err}"
        );
        assert!(message.contains(says), "{err}");
        assert_eq!(
            db.column("SELECT id FROM t ORDER BY id").await,
            [s("1")],
            "nothing of the failed page is committed: {err}"
        );
    }
    // The writer goes on with the next page.
    write_all(w.as_mut(), &[plain_page(&fields, vec![good(2)], json!(3))]).await;
    assert_eq!(
        db.column("SELECT id FROM t ORDER BY id").await,
        [s("1"), s("2")]
    );
    db.drop_db().await;
}

/// MyISAM, Aria and MEMORY keep rows across a ROLLBACK: refused before any data moves, in
/// the words of what was asked — the typed delivery error when effectively-once asks for the
/// commit token, a config error naming the engine for a plain write (at-least-once).
#[tokio::test]
async fn a_non_transactional_engine_is_refused_naming_it() {
    let mut db = sink_db("ms_engine").await;
    let fields = [("id", DataType::Int), ("v", DataType::Text)];
    let page = plain_page(
        &fields,
        vec![vec![Value::Int(1), Value::Text("a".into())]],
        json!(1),
    );
    let token = CommitToken {
        sequence: 1,
        bookmark: json!(1),
    };
    for engine in ["MyISAM", "Aria", "MEMORY"] {
        let table = format!("t_{engine}");
        db.exec(&format!(
            "CREATE TABLE `{table}` (id INT PRIMARY KEY, v VARCHAR(10)) ENGINE={engine}"
        ))
        .await;
        let sink = append_sink(&db, &table);
        let mut w = sink.open().await.expect(engine);
        let err = w.last_committed_token("k").await.expect_err(engine);
        assert!(matches!(err, FaucetError::Delivery(_)), "{err:?}");
        assert!(
            err.to_string().contains(&format!("{engine} engine")),
            "{err}"
        );
        assert!(err.to_string().contains("ENGINE=InnoDB"), "{err}");
        let err = w
            .write_committed(&page, &Commit::new("k", &token))
            .await
            .expect_err(engine);
        assert!(matches!(err, FaucetError::Delivery(_)), "{err:?}");
        let err = w.write(&page).await.expect_err(engine);
        assert!(matches!(err, FaucetError::Config { .. }), "{err:?}");
        let said = err.to_string();
        assert!(said.contains(&format!("{engine} engine")), "{said}");
        assert!(said.contains("ENGINE=InnoDB"), "{said}");
        assert!(!said.contains("effectively-once"), "{said}");
        assert_eq!(
            db.column(&format!("SELECT COUNT(*) FROM `{table}`")).await,
            [s("0")],
            "{engine}: nothing was written"
        );
        let err = sink.check().await.expect_err(engine);
        assert!(err.to_string().contains(engine), "{err}");
        assert!(!err.to_string().contains("effectively-once"), "{err}");
    }
    db.drop_db().await;
}

/// A key-changing update that leaves a TOAST value unchanged, with no earlier record of the
/// page holding it: the stored row moves to the new key inside the target (the value intact,
/// no old row), also twice in one page and when replayed; an old row the target never got
/// fails the page naming both keys and the column, nothing of the page committed.
#[tokio::test]
async fn a_key_change_moves_the_stored_toast_value() {
    let mut db = sink_db("ms_toast_move").await;
    db.exec(
        "CREATE TABLE article (id INT PRIMARY KEY, title VARCHAR(40) NOT NULL, \
         body LONGTEXT NOT NULL) ENGINE=InnoDB;
         INSERT INTO article VALUES (1, 'one', REPEAT('a', 10000)), \
           (2, 'two', REPEAT('b', 10000)), (3, 'three', REPEAT('c', 10000));",
    )
    .await;
    let sink = upsert_sink(&db, "article", &["id"]);
    let mut w = sink.open().await.expect("open");
    let check = "SELECT id, title, LENGTH(body), LEFT(body, 1) FROM article ORDER BY id";
    let [moves, interleaved, lost] = toast_move_pages([
        json!({"lsn": "0/1"}),
        json!({"lsn": "0/2"}),
        json!({"lsn": "0/3"}),
    ]);
    let want = vec![
        vec![s("2"), s("three"), s("10000"), s("c")],
        vec![s("5"), s("one"), s("10000"), s("a")],
        vec![s("7"), s("two-edited"), s("10000"), s("b")],
    ];
    write_all(w.as_mut(), std::slice::from_ref(&moves)).await;
    assert_eq!(texts(&mut db, check).await, want);
    write_all(w.as_mut(), std::slice::from_ref(&moves)).await;
    assert_eq!(texts(&mut db, check).await, want, "replayed");
    let want = vec![
        vec![s("2"), s("three"), s("10000"), s("c")],
        vec![s("7"), s("one"), s("10000"), s("a")],
        vec![s("70"), s("two-edited"), s("10000"), s("b")],
    ];
    for _ in 0..2 {
        write_all(w.as_mut(), std::slice::from_ref(&interleaved)).await;
        assert_eq!(texts(&mut db, check).await, want, "interleaved");
    }
    let err = w.write(&lost).await.expect_err("no old row");
    expect_old_row_missing(&err);
    drop(w);
    assert_eq!(
        texts(&mut db, check).await,
        want,
        "nothing of the failed page"
    );
    db.drop_db().await;
}

/// Change records from any source: the last change of a key in a page wins, deletes and
/// upserts keep their order, a key-changing update leaves no old row, an unchanged TOAST
/// column keeps its stored value, a partial row updates only its columns, `t` empties the
/// table inside the page's transaction.
#[tokio::test]
async fn change_records_are_applied_by_key() {
    let mut db = sink_db("ms_changes").await;
    db.exec(
        "CREATE TABLE contact (id INT PRIMARY KEY, phone VARCHAR(20) NOT NULL, \
         notes TEXT NOT NULL, seq INT) ENGINE=InnoDB;
         INSERT INTO contact VALUES (1, '000', 'long notes', 0), (9, '999', 'x', 9);",
    )
    .await;
    let t = "shop.contact";
    let full = |id: i64, phone: &str, notes: &str, seq: i64| {
        row(&[
            ("id", Value::Int(id)),
            ("phone", Value::Text(phone.into())),
            ("notes", Value::Text(notes.into())),
            ("seq", Value::Int(seq)),
        ])
    };
    let key = |id: i64| row(&[("id", Value::Int(id))]);
    let page = change_page(
        vec![
            change("c", t, Value::Null, full(2, "222", "n2", 1), &[]),
            change("u", t, key(2), full(2, "223", "n2", 2), &[]),
            change("d", t, key(9), Value::Null, &[]),
            // Unchanged TOAST: notes is left out and keeps its stored value.
            change(
                "u",
                t,
                key(1),
                row(&[
                    ("id", Value::Int(1)),
                    ("phone", Value::Text("111".into())),
                    ("seq", Value::Int(3)),
                ]),
                &["notes"],
            ),
            // A key-changing update: 2 becomes 3.
            change("u", t, key(2), full(3, "333", "n3", 4), &[]),
            change("c", t, Value::Null, full(4, "444", "n4", 5), &[]),
            change("d", t, key(4), Value::Null, &[]),
        ],
        json!({"lsn": "0/1"}),
    );
    let sink = upsert_sink(&db, "contact", &["id"]);
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &[page]).await;
    assert_eq!(
        texts(
            &mut db,
            "SELECT id, phone, notes, seq FROM contact ORDER BY id"
        )
        .await,
        [
            vec![s("1"), s("111"), s("long notes"), s("3")],
            vec![s("3"), s("333"), s("n3"), s("4")],
        ]
    );
    // A plain partial row (no seq) updates only its columns; a truncate, then a row.
    let partial = change_page(
        vec![change(
            "u",
            t,
            key(3),
            row(&[
                ("id", Value::Int(3)),
                ("phone", Value::Text("334".into())),
                ("notes", Value::Text("n3".into())),
            ]),
            &[],
        )],
        json!({"lsn": "0/2"}),
    );
    write_all(w.as_mut(), &[partial]).await;
    assert_eq!(
        texts(&mut db, "SELECT id, phone, seq FROM contact WHERE id = 3").await,
        [vec![s("3"), s("334"), s("4")]]
    );
    let truncated = change_page(
        vec![
            change("t", t, Value::Null, Value::Null, &[]),
            change("c", t, Value::Null, full(7, "777", "n7", 7), &[]),
        ],
        json!({"lsn": "0/3"}),
    );
    // The truncate and the row commit with the token: the table is never seen empty.
    let token = CommitToken {
        sequence: 1,
        bookmark: json!({"lsn": "0/3"}),
    };
    w.write_committed(&truncated, &Commit::new("changes", &token))
        .await
        .expect("write");
    assert_eq!(
        db.column("SELECT id FROM contact ORDER BY id").await,
        [s("7")]
    );
    // A new row that leaves out a NOT NULL column cannot be created: an error naming it.
    let missing = change_page(
        vec![change(
            "u",
            t,
            key(8),
            row(&[("id", Value::Int(8)), ("phone", Value::Text("888".into()))]),
            &["notes"],
        )],
        json!({"lsn": "0/4"}),
    );
    let err = w.write(&missing).await.expect_err("no notes");
    assert!(
        matches!(&err, FaucetError::Data { location, .. } if location.ends_with("column notes, page row 1")),
        "{err:?}"
    );
    db.drop_db().await;
}

/// Plain rows with the same key several times in a page: the last one wins (case 14).
#[tokio::test]
async fn several_versions_of_a_key_in_one_page_end_with_the_last() {
    let mut db = sink_db("ms_versions").await;
    db.exec("CREATE TABLE contact (id INT PRIMARY KEY, phone VARCHAR(9), seq INT) ENGINE=InnoDB")
        .await;
    let page = several_versions_page();
    let sink = upsert_sink(&db, "contact", &["id"]);
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &[page.clone(), page]).await;
    assert_eq!(
        texts(&mut db, "SELECT id, phone, seq FROM contact ORDER BY id").await,
        [
            vec![s("1"), s("555"), s("5")],
            vec![s("2"), s("444"), s("4")]
        ]
    );
    db.drop_db().await;
}

/// `create_table` makes text keys that compare byte for byte, trailing spaces and case
/// included (a NO PAD binary collation): `a`, `a ` and `A` are three rows, as in the source;
/// and a record without a key value is a data error, never a row merged or added per replay.
#[tokio::test]
async fn created_text_keys_keep_keys_differing_in_case_or_trailing_spaces_apart() {
    let mut db = sink_db("ms_nopad").await;
    let fields = [("id", DataType::Text), ("v", DataType::Int)];
    let page = plain_page(
        &fields,
        [("a", 1), ("a ", 2), ("A", 3)]
            .iter()
            .map(|(k, v)| vec![Value::Text((*k).into()), Value::Int(*v)])
            .collect(),
        json!(1),
    );
    let mut config = MysqlSinkConfig::new(url_for(&db.db), "pad").upsert(["id"]);
    config.create_table = true;
    let sink = MysqlSink::new(config).expect("config");
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &[page.clone(), page]).await;
    assert_eq!(
        texts(
            &mut db,
            "SELECT CONCAT('[', id, ']'), v FROM pad ORDER BY v"
        )
        .await,
        [
            vec![s("[a]"), s("1")],
            vec![s("[a ]"), s("2")],
            vec![s("[A]"), s("3")]
        ]
    );
    let null_key = plain_page(&fields, vec![vec![Value::Null, Value::Int(4)]], json!(2));
    let e = w.write(&null_key).await.expect_err("a null key is refused");
    assert!(e.to_string().contains("`id` is null"), "{e}");
    db.drop_db().await;
}

/// An upsert key that matches no unique index is refused naming the indexes there are; a key
/// column that does not exist names the columns.
#[tokio::test]
async fn an_upsert_key_must_match_a_unique_index() {
    let mut db = sink_db("ms_key").await;
    db.exec(
        "CREATE TABLE t (id INT PRIMARY KEY, email VARCHAR(50), v INT, UNIQUE KEY (email)) \
         ENGINE=InnoDB",
    )
    .await;
    let err = upsert_sink(&db, "t", &["v"])
        .open()
        .await
        .map(|_| ())
        .expect_err("no index on v");
    let FaucetError::Config { field, message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(field, "key");
    assert!(
        message.contains("(email)") && message.contains("(id)"),
        "{message}"
    );
    let err = upsert_sink(&db, "t", &["nope"])
        .open()
        .await
        .map(|_| ())
        .expect_err("no column");
    assert!(
        matches!(&err, FaucetError::Config { field, .. } if field == "key[0]"),
        "{err:?}"
    );
    // A key on the unique index other than the primary key works.
    let by_email = upsert_sink(&db, "t", &["email"]);
    let mut w = by_email.open().await.expect("unique email");
    let fields = [
        ("id", DataType::Int),
        ("email", DataType::Text),
        ("v", DataType::Int),
    ];
    let row = |id, v| vec![Value::Int(id), Value::Text("a@b".into()), Value::Int(v)];
    write_all(
        w.as_mut(),
        &[
            plain_page(&fields, vec![row(1, 1)], json!(1)),
            plain_page(&fields, vec![row(1, 2)], json!(2)),
        ],
    )
    .await;
    assert_eq!(
        texts(&mut db, "SELECT id, v FROM t").await,
        [vec![s("1"), s("2")]]
    );
    db.drop_db().await;
}

/// The commit token commits with the rows, only moves forward, and re-anchors the source;
/// a missing table with a left-over token forgets it; `holds_data` tells.
#[tokio::test]
async fn the_commit_token_commits_with_the_rows() {
    let mut db = sink_db("ms_token").await;
    let page = |ids: &[i64], b: i64| id_v_page(ids, json!(b));
    let sink = MysqlSink::new(
        MysqlSinkConfig::new(url_for(&db.db), "t")
            .creating_table()
            .upsert(["id"]),
    )
    .expect("config");
    let mut w = sink.open().await.expect("open");
    assert_eq!(w.holds_data().await.expect("holds"), Some(false));
    assert_eq!(w.last_committed_token("k").await.expect("token"), None);
    let t1 = CommitToken {
        sequence: 1,
        bookmark: json!({"b": 1, "big": u64::MAX}),
    };
    w.write_committed(&page(&[1, 2], 1), &Commit::new("k", &t1))
        .await
        .expect("page 1");
    assert_eq!(w.holds_data().await.expect("holds"), Some(true));
    // A replay of sequence 1 is refused, its rows with it.
    let err = w
        .write_committed(&page(&[3], 1), &Commit::new("k", &t1))
        .await
        .expect_err("stale");
    assert!(err.to_string().contains("refused"), "{err}");
    assert_eq!(
        db.column("SELECT id FROM t ORDER BY id").await,
        [s("1"), s("2")]
    );
    let t2 = CommitToken {
        sequence: 2,
        bookmark: json!({"b": 2}),
    };
    w.write_committed(&page(&[3], 2), &Commit::new("k", &t2))
        .await
        .expect("page 2");
    drop(w);
    let mut w = sink.open().await.expect("reopen");
    assert_eq!(
        w.last_committed_token("k").await.expect("token"),
        Some(t2.clone())
    );
    assert_eq!(w.last_committed_token("other").await.expect("token"), None);
    drop(w);
    assert_eq!(
        db.column("SELECT scope FROM faucet_commit_tokens").await,
        [s(&format!("k -> {}.t", db.db))]
    );
    // The table is gone: its token is forgotten rather than skipping everything.
    db.exec("DROP TABLE t").await;
    let mut w = sink.open().await.expect("reopen");
    assert_eq!(w.last_committed_token("k").await.expect("token"), None);
    db.drop_db().await;
}

/// A writer whose fence is below the target's is refused with `LeaseError::Fenced`, its page
/// rolled back; a take-over sets the fence.
#[tokio::test]
async fn a_stale_writer_is_fenced_off() {
    let mut db = sink_db("ms_fence").await;
    db.exec("CREATE TABLE t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB")
        .await;
    let fields = [("id", DataType::Int), ("v", DataType::Text)];
    let page = |id: i64| {
        plain_page(
            &fields,
            vec![vec![Value::Int(id), Value::Text("x".into())]],
            json!(id),
        )
    };
    let sink = append_sink(&db, "t");
    let ttl = std::time::Duration::from_secs(30);
    let mut old = sink.open().await.expect("open");
    assert!(old.fence(&Fence::new("k", 1, ttl)).await.expect("fence 1"));
    old.write(&page(1)).await.expect("old writes");
    let mut new = sink.open().await.expect("open");
    new.fence(&Fence::new("k", 2, ttl)).await.expect("fence 2");
    new.write(&page(2)).await.expect("new writes");
    let err = old.write(&page(3)).await.expect_err("fenced");
    assert!(
        matches!(
            err,
            FaucetError::Lease(faucet_core::state::LeaseError::Fenced {
                fence: 1,
                newer: 2,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(
        db.column("SELECT id FROM t ORDER BY id").await,
        [s("1"), s("2")]
    );
    // Opening with fence 1 again is refused; a take-over sets it.
    let mut again = sink.open().await.expect("open");
    assert!(again.fence(&Fence::new("k", 1, ttl)).await.is_err());
    again
        .fence(&Fence::new("k", 1, ttl).taking_over())
        .await
        .expect("take over");
    again.write(&page(4)).await.expect("writes after take-over");
    db.drop_db().await;
}

/// Change records appended as rows: an audit log with the records' own fields.
#[tokio::test]
async fn change_records_appended_make_an_audit_log() {
    let mut db = sink_db("ms_audit").await;
    let sink = MysqlSink::new(MysqlSinkConfig::new(url_for(&db.db), "audit").creating_table())
        .expect("config");
    let mut w = sink.open().await.expect("open");
    let page = change_page(
        vec![
            change("c", "s.t", Value::Null, row(&[("id", Value::Int(1))]), &[]),
            change("d", "s.t", row(&[("id", Value::Int(1))]), Value::Null, &[]),
        ],
        json!({"lsn": "0/1"}),
    );
    write_all(w.as_mut(), &[page]).await;
    assert_eq!(
        texts(
            &mut db,
            "SELECT op, `table`, lsn, `before`, `after`, unchanged_toast FROM audit"
        )
        .await,
        [
            vec![
                s("c"),
                s("s.t"),
                s("0/16B3748"),
                None,
                s("{\"id\":1}"),
                s("[]")
            ],
            vec![
                s("d"),
                s("s.t"),
                s("0/16B3748"),
                s("{\"id\":1}"),
                None,
                s("[]")
            ],
        ]
    );
    db.drop_db().await;
}

/// `check()` (doctor) passes for a user who may write, and names the missing privilege for
/// one who may only read.
#[tokio::test]
async fn check_names_a_missing_privilege() {
    let mut db = sink_db("ms_check").await;
    db.exec("CREATE TABLE t (id INT PRIMARY KEY, v TEXT) ENGINE=InnoDB")
        .await;
    upsert_sink(&db, "t", &["id"])
        .check()
        .await
        .expect("root may write");
    let user = format!("faucet_ro_{}", faucet_test_support::unique_suffix());
    let user = &user[..user.len().min(32)];
    db.exec(&format!(
        "CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-ro'; GRANT SELECT ON `{}`.* TO '{user}'@'%'",
        db.db
    ))
    .await;
    let url = url_for(&db.db).replacen("root@", &format!("{user}:pw-ro@"), 1);
    let sink = MysqlSink::new(MysqlSinkConfig::new(url, "t")).expect("config");
    let err = sink.check().await.expect_err("read-only user");
    assert!(err.to_string().contains("no INSERT privilege"), "{err}");
    assert!(!err.to_string().contains("pw-ro"), "{err}");
    db.exec(&format!("DROP USER '{user}'@'%'")).await;
    db.drop_db().await;
}

/// A private MariaDB with `max_allowed_packet` = 1 MiB (a global setting the shared server
/// must not see): a page whose rows together exceed it is cut into statements that each fit,
/// and commits whole; a row that alone cannot fit fails its page with a data error naming the
/// row, the column, the value's size and `max_allowed_packet`, nothing of that page committed
/// (nor its commit token), and the writer goes on with the next page.
#[tokio::test]
async fn statements_fit_max_allowed_packet_and_a_row_too_large_is_a_data_error() {
    let server =
        crate::mysql_private::PrivateMariadb::start_with(1, &["--max-allowed-packet=1M"]).await;
    server
        .exec(
            "CREATE TABLE blobs (id BIGINT PRIMARY KEY, body LONGTEXT) ENGINE=InnoDB; \
             CREATE TABLE logged (id BIGINT, body LONGTEXT) ENGINE=InnoDB",
        )
        .await;
    let url = server.url("test");
    let fields = [("id", DataType::Int), ("body", DataType::Text)];
    let body = |id: i64, len: usize| {
        let unit = format!("{id:08}");
        Value::Text(unit.repeat(len / unit.len()).into())
    };
    // 12 rows of 200 kB: 2.4 MB, more than twice the packet limit.
    let rows = |from: i64| -> Vec<Vec<Value>> {
        (from..from + 12)
            .map(|i| vec![Value::Int(i), body(i, 200_000)])
            .collect()
    };
    for (sink, table) in [
        (
            MysqlSink::new(MysqlSinkConfig::new(url.clone(), "blobs").upsert(["id"]))
                .expect("config"),
            "blobs",
        ),
        (
            MysqlSink::new(MysqlSinkConfig::new(url.clone(), "logged")).expect("config"),
            "logged",
        ),
    ] {
        let mut w = sink.open().await.expect("open");
        let page = plain_page(&fields, rows(1), json!({"n": 1}));
        let token = |sequence: u64| CommitToken {
            sequence,
            bookmark: json!({ "n": sequence }),
        };
        w.write_committed(&page, &Commit::new("big", &token(1)))
            .await
            .unwrap_or_else(|e| panic!("{table}: {e:?}"));
        let lengths = server
            .column(&format!(
                "SELECT CONCAT(COUNT(*), ' ', SUM(LENGTH(body))) FROM {table}"
            ))
            .await;
        assert_eq!(lengths, ["12 2400000"], "{table}");
        // One row of 2 MB among small ones: a data error naming it, nothing committed.
        let mut big = rows(100);
        big[5][1] = body(105, 2_000_000);
        let page = plain_page(&fields, big, json!({"n": 2}));
        let err = w
            .write_committed(&page, &Commit::new("big", &token(2)))
            .await
            .expect_err("a row larger than max_allowed_packet");
        let text = err.to_string();
        assert!(matches!(err, FaucetError::Data { .. }), "{table}: {err:?}");
        for part in [
            "page row 6",
            "body",
            "2000000",
            "max_allowed_packet",
            "1048576",
        ] {
            assert!(text.contains(part), "{table}: {part}: {text}");
        }
        assert_eq!(
            server
                .column(&format!("SELECT COUNT(*) FROM {table}"))
                .await,
            ["12"],
            "{table}: nothing of the refused page"
        );
        assert_eq!(
            w.last_committed_token("big").await.expect("token"),
            Some(token(1)),
            "{table}: the refused page's token did not commit"
        );
        // The writer is still usable: the next page commits.
        let page = plain_page(&fields, rows(200), json!({"n": 3}));
        w.write_committed(&page, &Commit::new("big", &token(3)))
            .await
            .unwrap_or_else(|e| panic!("{table}: {e}"));
        assert_eq!(
            server
                .column(&format!("SELECT COUNT(*) FROM {table}"))
                .await,
            ["24"],
            "{table}"
        );
    }
}
