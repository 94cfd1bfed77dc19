//! The `postgres` sink against a real server: append with COPY, upsert of rows and change
//! records (cases 01, 14, 15), the atomic commit token, typed errors, table creation.

use faucet_connectors::postgres::{PostgresSink, PostgresSinkConfig};
use faucet_core::testing::conformance;
use faucet_core::{Commit, CommitToken, DataType, FaucetError, Fence, Sink, Value};
use serde_json::json;

use crate::postgres_query_support::{TestDb, pg_url};
use crate::postgres_sink_support::{
    append_sink, assert_table, change, change_page, plain_page, read_back, row, table_text,
    upsert_sink, write_all,
};
use crate::sink_support::{
    ARTICLE, article_key, expect_old_row_missing, id_row, id_v_page, moved, several_versions_page,
    toast_move_pages,
};

#[tokio::test]
async fn append_and_upsert_keep_their_promises() {
    let mut db = TestDb::new("s_conformance").await;
    // Two schemas: each has its own commit token table.
    let mut db2 = TestDb::new("s_conformance_upsert").await;
    db.exec("CREATE TABLE appended (id bigint, v text)").await;
    db2.exec("CREATE TABLE upserted (id bigint PRIMARY KEY, v text)")
        .await;
    let appended = db.table("appended");
    let upserted = db2.table("upserted");
    let append = append_sink(&appended);
    assert!(append.capabilities().atomic_watermark);
    assert!(!append.capabilities().keyed_upsert);
    conformance::sink_flush_is_durable(&append, read_back(&appended, "id"))
        .await
        .expect("flushed rows are there");
    conformance::sink_guarantee_is_truthful(&append, read_back(&appended, "id"))
        .await
        .expect("atomic watermark holds");
    let upsert = upsert_sink(&upserted, &["id"]);
    assert!(upsert.capabilities().keyed_upsert);
    conformance::sink_guarantee_is_truthful(&upsert, read_back(&upserted, "id"))
        .await
        .expect("keyed upsert and atomic watermark hold");
    conformance::config_is_strict::<PostgresSinkConfig>(&json!({
        "connection_url": pg_url(), "table": "t"
    }))
    .expect("strict");
    db.drop().await;
    db2.drop().await;
}

/// Case 14: five versions of two keys in one page; the first attempt succeeds and the last
/// version of each key wins.
#[tokio::test]
async fn case_14_several_versions_of_a_key_in_one_page() {
    let db = TestDb::with(
        "s_case14",
        "CREATE TABLE contact (id integer PRIMARY KEY, phone text NOT NULL, seq integer NOT NULL);
         INSERT INTO contact VALUES (1, '000', 0);
         CREATE TABLE contact_cdc (LIKE contact INCLUDING ALL);
         INSERT INTO contact_cdc VALUES (1, '000', 0);",
    )
    .await;
    let page = several_versions_page();
    let table = db.table("contact");
    let sink = upsert_sink(&table, &["id"]);
    let mut w = sink.open().await.expect("open");
    w.write(&page).await.expect("first attempt succeeds");
    w.flush().await.expect("flush");
    let want = "1\t555\t5\n2\t444\t4\n";
    assert_table(&format!("SELECT * FROM {table} ORDER BY id"), want).await;
    // The same as change records in one transaction (insert, insert, update, update, update).
    let cdc = db.table("contact_cdc");
    let c = |id: i64, p: &str, s: i64| id_row(id, ("phone", p), ("seq", s));
    let k = article_key;
    let page = change_page(
        vec![
            change("c", "public.contact_src", Value::Null, c(1, "111", 1), &[]),
            change("c", "public.contact_src", Value::Null, c(2, "222", 2), &[]),
            change("u", "public.contact_src", k(1), c(1, "333", 3), &[]),
            change("u", "public.contact_src", k(2), c(2, "444", 4), &[]),
            change("u", "public.contact_src", k(1), c(1, "555", 5), &[]),
        ],
        json!(1),
    );
    let sink = upsert_sink(&cdc, &["id"]);
    let mut w = sink.open().await.expect("open");
    write_all(w.as_mut(), &[page]).await;
    assert_table(&format!("SELECT * FROM {cdc} ORDER BY id"), want).await;
    db.drop().await;
}

fn case_15_records() -> Vec<Vec<Value>> {
    let d = |id: i64, name: &str, ver: i64| id_row(id, ("name", name), ("ver", ver));
    let k = article_key;
    let t = "public.device";
    vec![
        change("d", t, k(1), Value::Null, &[]),
        change("c", t, Value::Null, d(1, "a-reborn", 2), &[]),
        change("c", t, Value::Null, d(4, "d", 1), &[]),
        change("d", t, k(4), Value::Null, &[]),
        change("u", t, k(2), d(2, "b2", 2), &[]),
        change("d", t, k(2), Value::Null, &[]),
        change("c", t, Value::Null, d(2, "b3", 3), &[]),
        change("d", t, k(3), Value::Null, &[]),
        change("c", t, Value::Null, d(3, "c-new", 2), &[]),
    ]
}

/// Case 15: deletes and inserts of the same keys in one page keep their order; page size 1
/// gives the identical result.
#[tokio::test]
async fn case_15_delete_insert_order_is_kept() {
    let mut db = TestDb::new("s_case15").await;
    let want = "1\ta-reborn\t2\n2\tb3\t3\n3\tc-new\t2\n";
    for (name, page_size) in [("device_big", 10), ("device_one", 1)] {
        db.exec(&format!(
            "CREATE TABLE {name} (id integer PRIMARY KEY, name text NOT NULL, ver integer NOT NULL);
             INSERT INTO {name} VALUES (1,'a',1),(2,'b',1),(3,'c',1);"
        ))
        .await;
        let table = db.table(name);
        let pages: Vec<_> = case_15_records()
            .chunks(page_size)
            .enumerate()
            .map(|(i, chunk)| change_page(chunk.to_vec(), json!(i)))
            .collect();
        let sink = upsert_sink(&table, &["id"]);
        let mut w = sink.open().await.expect("open");
        write_all(w.as_mut(), &pages).await;
        assert_eq!(
            table_text(&format!("SELECT * FROM {table} ORDER BY id")).await,
            want,
            "page size {page_size}"
        );
    }
    db.drop().await;
}

/// A fresh database `tag` with `article (id integer PRIMARY KEY, title text, body text)`, its
/// `body` stored out of line (TOAST, `STORAGE EXTERNAL`), holding the rows `values` (SQL
/// `VALUES` tuples); returns it and the table's qualified name.
async fn articles(tag: &str, values: &str) -> (TestDb, String) {
    let db = TestDb::with(
        tag,
        &format!(
        "CREATE TABLE article (id integer PRIMARY KEY, title text NOT NULL, body text NOT NULL);
         ALTER TABLE article ALTER COLUMN body SET STORAGE EXTERNAL;
         INSERT INTO article VALUES {values};"
    ),
    )
    .await;
    let table = db.table("article");
    (db, table)
}

/// Case 01: a column named in `unchanged_toast` keeps its stored value; also when an earlier
/// record of the same page set it; a key update moves the row.
#[tokio::test]
async fn unchanged_toast_is_never_nulled() {
    let (db, table) = articles("s_toast", "(1, 'draft', repeat('a', 10000))").await;
    let t = ARTICLE;
    let k = article_key;
    let full = |id: i64, title: &str, body: String| {
        row(&[
            ("id", Value::Int(id)),
            ("title", Value::Text(title.into())),
            ("body", Value::Text(body.into())),
        ])
    };
    let sink = upsert_sink(&table, &["id"]);
    let mut w = sink.open().await.expect("open");
    write_all(
        w.as_mut(),
        &[change_page(vec![moved(1, 1, "published")], json!(1))],
    )
    .await;
    let check = format!(
        "SELECT id, title, length(body), body = repeat('a', 10000), body = repeat('b', 10000) \
         FROM {table} ORDER BY id"
    );
    assert_table(&check, "1\tpublished\t10000\tt\tf\n").await;
    // One page: insert id 2 with a body, then an update leaving the body unchanged, then the
    // key of id 1 changes to 5 with the body unchanged... and a new body for id 5 later.
    write_all(
        w.as_mut(),
        &[change_page(
            vec![
                change("c", t, Value::Null, full(2, "two", "b".repeat(10000)), &[]),
                moved(2, 2, "two-edited"),
                change("u", t, k(1), full(1, "edited", "b".repeat(10000)), &[]),
            ],
            json!(2),
        )],
    )
    .await;
    assert_table(
        &check,
        "1\tedited\t10000\tf\tt\n2\ttwo-edited\t10000\tf\tt\n",
    )
    .await;
    write_all(
        w.as_mut(),
        &[change_page(
            vec![change(
                "u",
                t,
                k(2),
                full(5, "moved", "a".repeat(10000)),
                &[],
            )],
            json!(3),
        )],
    )
    .await;
    assert_table(&check, "1\tedited\t10000\tf\tt\n5\tmoved\t10000\tt\tf\n").await;
    // Truncate: everything before it in the page is dropped; what follows stays.
    write_all(
        w.as_mut(),
        &[change_page(
            vec![
                change("c", t, Value::Null, full(7, "gone", "x".into()), &[]),
                change("t", t, Value::Null, Value::Null, &[]),
                change("c", t, Value::Null, full(8, "after", "y".into()), &[]),
            ],
            json!(4),
        )],
    )
    .await;
    assert_table(
        &format!("SELECT id, title, body FROM {table} ORDER BY id"),
        "8\tafter\ty\n",
    )
    .await;
    db.drop().await;
}

/// A key-changing update that leaves a TOAST value unchanged, with no earlier record of the
/// page holding it: the stored row moves to the new key inside the target (the value intact,
/// no old row), also twice in one page and when replayed; an old row the target never got
/// fails the page naming both keys and the column, nothing of the page committed.
#[tokio::test]
async fn a_key_change_moves_the_stored_toast_value() {
    let (db, table) = articles(
        "s_toast_move",
        "(1, 'one', repeat('a', 10000)), (2, 'two', repeat('b', 10000)), \
         (3, 'three', repeat('c', 10000))",
    )
    .await;
    let sink = upsert_sink(&table, &["id"]);
    let mut w = sink.open().await.expect("open");
    let check = format!("SELECT id, title, length(body), left(body, 1) FROM {table} ORDER BY id");
    let [moves, interleaved, lost] = toast_move_pages([json!(1), json!(2), json!(3)]);
    let want = "2\tthree\t10000\tc\n5\tone\t10000\ta\n7\ttwo-edited\t10000\tb\n";
    write_all(w.as_mut(), std::slice::from_ref(&moves)).await;
    assert_table(&check, want).await;
    // Replayed (at-least-once): the same rows.
    write_all(w.as_mut(), std::slice::from_ref(&moves)).await;
    assert_table(&check, want).await;
    let want = "2\tthree\t10000\tc\n7\tone\t10000\ta\n70\ttwo-edited\t10000\tb\n";
    for _ in 0..2 {
        write_all(w.as_mut(), std::slice::from_ref(&interleaved)).await;
        assert_table(&check, want).await;
    }
    // The old row was never delivered: an error, not a row without its body.
    let err = w.write(&lost).await.expect_err("no old row");
    expect_old_row_missing(&err);
    drop(w);
    assert_eq!(table_text(&check).await, want, "nothing of the failed page");
    db.drop().await;
}

#[tokio::test]
async fn the_commit_token_only_moves_forward() {
    let mut db = TestDb::with("s_token", "CREATE TABLE t (id bigint PRIMARY KEY, v text)").await;
    let table = db.table("t");
    let sink = upsert_sink(&table, &["id"]);
    let mut w = sink.open().await.expect("open");
    assert_eq!(
        w.last_committed_token("orders::eu").await.expect("read"),
        None
    );
    let page = |ids: &[i64]| id_v_page(ids, json!({"offset": ids[0]}));
    let t = |sequence: u64| CommitToken {
        sequence,
        bookmark: json!({"offset": sequence, "big": 12345678901234567890u64}),
    };
    w.write_committed(&page(&[1, 2]), &Commit::new("orders::eu", &t(1)))
        .await
        .expect("1");
    w.write_committed(&page(&[3]), &Commit::new("orders::eu", &t(2)))
        .await
        .expect("2");
    // A stale writer (same or lower sequence) is refused and its rows are not committed.
    for stale in [2, 1] {
        let err = w
            .write_committed(
                &page(&[90 + stale as i64]),
                &Commit::new("orders::eu", &t(stale)),
            )
            .await
            .expect_err("stale");
        assert!(matches!(err, FaucetError::Write { .. }), "{err}");
        assert!(err.to_string().contains("refused"), "{err}");
    }
    // Another scope has its own token; an empty page still moves its token.
    w.write_committed(&page(&[4]).clone(), &Commit::new("orders::us", &t(7)))
        .await
        .expect("us");
    let empty = faucet_core::Page::empty(page(&[0]).schema().clone(), Some(json!({"offset": 8})));
    w.write_committed(&empty, &Commit::new("orders::us", &t(8)))
        .await
        .expect("empty page");
    assert_eq!(
        w.last_committed_token("orders::eu").await.expect("read"),
        Some(t(2))
    );
    assert_eq!(
        w.last_committed_token("orders::us").await.expect("read"),
        Some(t(8))
    );
    assert_table(
        &format!("SELECT id FROM {table} ORDER BY id"),
        "1\n2\n3\n4\n",
    )
    .await;
    // A second writer (a new run) sees the same tokens.
    drop(w);
    let mut again = sink.open().await.expect("reopen");
    assert_eq!(
        again
            .last_committed_token("orders::eu")
            .await
            .expect("read"),
        Some(t(2))
    );
    let schema = db.schema.clone();
    assert_eq!(
        table_text(&format!(
            "SELECT scope, sequence FROM {schema}.faucet_commit_tokens ORDER BY scope"
        ))
        .await,
        format!("orders::eu -> {table}\t2\norders::us -> {table}\t8\n"),
        "one token per state key and target table"
    );
    // The same state key into another table of the schema has no token yet: a run there
    // must not re-anchor at this table's pages.
    db.exec("CREATE TABLE t2 (id bigint PRIMARY KEY, v text)")
        .await;
    let other = upsert_sink(&db.table("t2"), &["id"]);
    let mut w2 = other.open().await.expect("open t2");
    assert_eq!(
        w2.last_committed_token("orders::eu").await.expect("read"),
        None
    );
    db.drop().await;
}

#[tokio::test]
async fn a_value_the_column_cannot_hold_is_a_data_error() {
    let db = TestDb::with(
        "s_data",
        "CREATE TABLE t (id integer PRIMARY KEY, qty integer NOT NULL, note text); \
         CREATE TABLE u (LIKE t INCLUDING ALL);",
    )
    .await;
    let fields = [
        ("id", DataType::Int),
        ("qty", DataType::Text),
        ("note", DataType::Text),
    ];
    let page = plain_page(
        &fields,
        vec![
            vec![Value::Int(1), Value::Text("5".into()), Value::Null],
            vec![Value::Int(2), Value::Text("five".into()), Value::Null],
        ],
        json!(1),
    );
    for (table, sink) in [
        (db.table("t"), append_sink(&db.table("t"))),
        (db.table("u"), upsert_sink(&db.table("u"), &["id"])),
    ] {
        let mut w = sink.open().await.expect("open");
        let err = w.write(&page).await.expect_err("bad value");
        match &err {
            FaucetError::Data {
                location, message, ..
            } => {
                assert!(location.contains(&table), "{location}");
                assert!(location.contains("column qty"), "{location}");
                assert!(location.contains("page row 2"), "{location}");
                assert!(message.contains("five"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // Nothing of the page was committed.
        assert_table(&format!("SELECT count(*) FROM {table}"), "0\n").await;
    }
    // A NULL into a NOT NULL column, and a field the table does not have.
    let t_sink = append_sink(&db.table("t"));
    let mut w = t_sink.open().await.expect("open");
    for (field, data_type, what) in [
        ("qty", DataType::Int, "not null"),
        ("colour", DataType::Text, "unknown column"),
    ] {
        let page = plain_page(
            &[("id", DataType::Int), (field, data_type)],
            vec![vec![Value::Int(1), Value::Null]],
            json!(1),
        );
        let err = w.write(&page).await.expect_err(what);
        assert!(
            matches!(&err, FaucetError::Data { location, .. } if location.contains(field)),
            "{what}: {err}"
        );
    }
    db.drop().await;
}

#[tokio::test]
async fn tables_are_checked_and_created_on_request() {
    let db = TestDb::with("s_create", "CREATE TABLE nokey (id bigint, v text)").await;
    // Missing without create_table: an error naming the fix.
    let missing = append_sink(&db.table("missing"));
    let err = missing.check().await.expect_err("missing");
    assert!(err.to_string().contains("create_table"), "{err}");
    assert!(missing.open().await.is_err());
    // Upsert needs a unique index on exactly the key.
    let err = upsert_sink(&db.table("nokey"), &["id"])
        .open()
        .await
        .err()
        .expect("no unique key");
    assert!(
        matches!(&err, FaucetError::Config { field, .. } if field == "key"),
        "{err}"
    );
    // create_table: typed columns from the first page, the key as primary key.
    let table = db.table("made");
    let mut config = PostgresSinkConfig::new(pg_url(), &table).upsert(["id"]);
    config.create_table = true;
    let sink = PostgresSink::new(config).expect("config");
    sink.check().await.expect("may be created");
    let mut w = sink.open().await.expect("open");
    let page = plain_page(
        &[
            ("id", DataType::Int),
            ("amount", DataType::Numeric),
            ("at", DataType::TimestampTz),
            ("tags", DataType::Array(Box::new(DataType::Text))),
            ("doc", DataType::Json),
            ("blob", DataType::Bytes),
            ("unknown", DataType::Unknown),
        ],
        vec![vec![
            Value::Int(1),
            Value::numeric("1.10").expect("n"),
            Value::TimestampTz("2024-02-29T12:45:00.5Z".into()),
            Value::Array(vec![Value::Text("a,b".into()), Value::Null]),
            Value::json(json!({"n": 12345678901234567890u64})),
            Value::Bytes(vec![0xde, 0xad]),
            Value::Bool(true),
        ]],
        json!(1),
    );
    write_all(w.as_mut(), &[page.clone(), page]).await;
    let schema = db.schema.clone();
    assert_eq!(
        table_text(&format!(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute \
             WHERE attrelid = '{schema}.made'::regclass AND attnum > 0 ORDER BY attnum"
        ))
        .await,
        "id\tbigint\namount\tnumeric\nat\ttimestamp with time zone\ntags\ttext[]\n\
         doc\tjsonb\nblob\tbytea\nunknown\tboolean\n"
    );
    assert_eq!(
        table_text(&format!(
            "SELECT id, amount, at AT TIME ZONE 'UTC', tags, doc, blob, unknown FROM {table}"
        ))
        .await,
        "1\t1.10\t2024-02-29 12:45:00.5\t{\"a,b\",NULL}\t{\"n\": 12345678901234567890}\t\\\\xdead\tt\n"
    );
    db.drop().await;
}

/// A lost session is never papered over by a retry: the page fails with a write error, the
/// writer refuses further pages (the run loop re-delivers from the last durable bookmark),
/// and nothing of the failed page is in the table.
#[tokio::test]
async fn a_lost_session_fails_the_page_without_a_retry() {
    let mut db = TestDb::with("s_lost", "CREATE TABLE t (id bigint PRIMARY KEY, v text)").await;
    let table = db.table("t");
    // The sink's session is named in the URL, so the test can end exactly that one.
    let name = format!("faucet_lost_{}", std::process::id());
    let sep = if pg_url().contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}application_name={name}", pg_url());
    let sink =
        PostgresSink::new(PostgresSinkConfig::new(url, &table).upsert(["id"])).expect("config");
    let mut w = sink.open().await.expect("open");
    let page = |ids: &[i64]| id_v_page(ids, json!(ids[0]));
    write_all(w.as_mut(), &[page(&[1, 2])]).await;
    db.exec(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{name}'"
    ))
    .await;
    let err = w.write(&page(&[3, 4])).await.expect_err("session is gone");
    assert!(matches!(err, FaucetError::Write { .. }), "{err}");
    let again = w.write(&page(&[5])).await.expect_err("no further pages");
    assert!(again.to_string().contains("unusable"), "{again}");
    assert_table(&format!("SELECT id FROM {table} ORDER BY id"), "1\n2\n").await;
    db.drop().await;
}

/// The lost-bookmark guard (case 13, S1) asks the sink whether its target holds data: the
/// table answers from its rows (a missing table holds nothing).
#[tokio::test]
async fn holds_data_answers_from_the_table() {
    let mut db = TestDb::new("s_holds_data").await;
    let appended = db.table("appended");
    let upserted = db.table("upserted");
    let fields = [("id", DataType::Int), ("v", DataType::Text)];
    let page = |id: i64| {
        plain_page(
            &fields,
            vec![vec![Value::Int(id), Value::Text("x".into())]],
            json!({"id": id}),
        )
    };

    let mut config = PostgresSinkConfig::new(pg_url(), &appended);
    config.create_table = true;
    let append = PostgresSink::new(config).expect("config");
    let mut w = append.open().await.expect("open");
    assert_eq!(
        w.holds_data().await.expect("holds_data"),
        Some(false),
        "no table yet"
    );
    write_all(w.as_mut(), &[page(1)]).await;
    assert_eq!(w.holds_data().await.expect("holds_data"), Some(true));
    drop(w);

    db.exec("CREATE TABLE upserted (id bigint PRIMARY KEY, v text)")
        .await;
    let upsert = upsert_sink(&upserted, &["id"]);
    let mut w = upsert.open().await.expect("open");
    write_all(w.as_mut(), &[page(1)]).await;
    // Truthful for an upsert table too; the run loop does not refuse a keyed target (it
    // absorbs the replay: faucet-core tests/run_loop.rs, and query → upsert with its state
    // deleted through the binary in faucet-cli tests/effectively_once_crash.rs).
    assert_eq!(w.holds_data().await.expect("holds_data"), Some(true));
    drop(w);
    db.drop().await;
}

/// The sink refuses a zombie (a lease alone cannot stop it: docs/delivery.md): a writer whose lease a newer run
/// took (a larger fence) wakes up holding a page of older values; its page is rolled back
/// with a typed error, for upsert and append alike, and the newer writer's rows stay. A
/// control writer that never told the sink its fence overwrites them: the check is what
/// keeps them.
#[tokio::test]
async fn a_writer_with_a_stale_fence_is_refused_and_its_page_rolled_back() {
    use faucet_core::state::LeaseError;
    let ttl = std::time::Duration::from_secs(30);
    let db = TestDb::with(
        "s_fence",
        r#"CREATE TABLE device (id bigint PRIMARY KEY, v text NOT NULL);
         CREATE TABLE readings (id bigint, v text);
         CREATE TABLE "it's\log" (id bigint, v text)"#,
    )
    .await;
    let fields = [("id", DataType::Int), ("v", DataType::Text)];
    let page = |v: &str| {
        plain_page(
            &fields,
            (1..=3)
                .map(|id| vec![Value::Int(id), Value::Text(v.into())])
                .collect(),
            json!(1),
        )
    };
    // The third target's name holds a quote and a backslash, and so does its fence row's
    // scope, which each page's fence read sends as a literal.
    for (table, sink, target) in [
        (
            "device",
            upsert_sink(&db.table("device"), &["id"]),
            db.table("device"),
        ),
        (
            "readings",
            append_sink(&db.table("readings")),
            db.table("readings"),
        ),
        (
            r"it's\log",
            append_sink(&db.table(r"it's\log")),
            db.table(r#""it's\log""#),
        ),
    ] {
        // The zombie (fence 1) writes a first page, then stalls; a newer run (fence 2)
        // takes over and writes the newer values.
        let mut zombie = sink.open().await.expect("open");
        assert!(
            zombie.fence(&Fence::new("k", 1, ttl)).await.expect("fence"),
            "postgres fences"
        );
        zombie
            .write(&page("old"))
            .await
            .expect("first page of fence 1");
        let mut newer = sink.open().await.expect("open");
        assert!(newer.fence(&Fence::new("k", 2, ttl)).await.expect("fence"));
        newer.write(&page("new")).await.expect("fence 2 writes");
        let before = table_text(&format!("SELECT * FROM {target} ORDER BY 1, 2")).await;
        // The zombie wakes up with a page of old values: refused, rolled back.
        let err = zombie
            .write(&page("stale"))
            .await
            .expect_err("a stale fence is refused");
        assert!(
            matches!(
                &err,
                FaucetError::Lease(LeaseError::Fenced {
                    fence: 1,
                    newer: 2,
                    ..
                })
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("rolled back"), "{err}");
        assert_eq!(
            table_text(&format!("SELECT * FROM {target} ORDER BY 1, 2")).await,
            before,
            "{table}: the refused page left nothing"
        );
        // A writer given a fence below the target's at the start is refused before any
        // page; with `take_over` (the run loop's answer once its lease proved live) it sets
        // the target's fence and writes.
        let mut reset = sink.open().await.expect("open");
        assert!(matches!(
            reset.fence(&Fence::new("k", 1, ttl)).await,
            Err(FaucetError::Lease(LeaseError::Fenced { newer: 2, .. }))
        ));
        assert!(
            reset
                .fence(&Fence::new("k", 1, ttl).taking_over())
                .await
                .expect("take over")
        );
        reset
            .write(&page("new"))
            .await
            .expect("the taken-over fence writes");
        let mut newer_again = sink.open().await.expect("open");
        assert!(
            newer_again
                .fence(&Fence::new("k", 2, ttl))
                .await
                .expect("fence")
        );
        // Another pipeline (another state key) on the same table has its own fence.
        let mut other = sink.open().await.expect("open");
        assert!(
            other
                .fence(&Fence::new("other", 1, ttl))
                .await
                .expect("fence")
        );
        other.write(&page("other")).await.expect("its own scope");
        // Control: a writer that never set its fence is not checked, and overwrites.
        let mut unfenced = sink.open().await.expect("open");
        unfenced.write(&page("stale")).await.expect("unchecked");
        let after = table_text(&format!("SELECT * FROM {target} ORDER BY 1, 2")).await;
        assert!(after.contains("stale"), "{table}: {after}");
    }
    let upserted = table_text(&format!("SELECT * FROM {} ORDER BY 1", db.table("device"))).await;
    assert_eq!(upserted, "1\tstale\n2\tstale\n3\tstale\n");
    db.drop().await;
}

/// A commit token whose target table was dropped vouches for rows that are gone: the sink
/// forgets it (so a reload after a reset state store really reloads, and a new sequence
/// starts over) instead of re-anchoring the run past everything.
#[tokio::test]
async fn a_token_outliving_its_dropped_table_is_forgotten() {
    let mut db = TestDb::new("s_token_dropped").await;
    let table = db.table("t");
    let mut config = PostgresSinkConfig::new(pg_url(), &table).upsert(["id"]);
    config.create_table = true;
    let sink = PostgresSink::new(config).expect("config");
    let page = plain_page(
        &[("id", DataType::Int), ("v", DataType::Text)],
        vec![vec![Value::Int(1), Value::Text("a".into())]],
        json!({"offset": 1}),
    );
    let token = |sequence| CommitToken {
        sequence,
        bookmark: json!({"offset": sequence}),
    };
    let mut w = sink.open().await.expect("open");
    w.write_committed(&page, &Commit::new("k", &token(5)))
        .await
        .expect("5");
    drop(w);
    let mut w = sink.open().await.expect("open");
    assert_eq!(
        w.last_committed_token("k").await.expect("read"),
        Some(token(5)),
        "the table is there: the token holds"
    );
    drop(w);
    db.exec(&format!("DROP TABLE {table}")).await;
    let mut w = sink.open().await.expect("open");
    assert_eq!(w.last_committed_token("k").await.expect("read"), None);
    w.write_committed(&page, &Commit::new("k", &token(1)))
        .await
        .expect("a new sequence starts over");
    assert_table(&format!("SELECT * FROM {table}"), "1\ta\n").await;
    db.drop().await;
}
