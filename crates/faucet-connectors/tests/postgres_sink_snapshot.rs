//! The `postgres` upsert sink and snapshot rows (`op: "r"`): into a target that was empty
//! they take a plain COPY, a key the target already holds turns the page (and the target's
//! later pages) back into upserts, and a target that held rows is upserted from the start.
//! Which path a page took is seen from the target's statement-level `UPDATE` trigger, which
//! an `INSERT … ON CONFLICT DO UPDATE` fires and a COPY does not.

use faucet_core::{Commit, CommitToken, Sink, Value};
use serde_json::json;

use crate::postgres_query_support::TestDb;
use crate::postgres_sink_support::{
    assert_table, change, change_page, row, table_count, upsert_sink,
};

/// `snap (id integer PRIMARY KEY, v text NOT NULL)` in `db`, with `rows` (SQL `VALUES`
/// tuples, or empty), and a statement-level `UPDATE` trigger counting into `upserts`.
async fn snapshot_target(db: &mut TestDb, rows: &str) -> String {
    let s = db.table("snap");
    let upserts = db.table("upserts");
    let schema = &db.schema;
    db.exec(&format!(
        "CREATE TABLE {s} (id integer PRIMARY KEY, v text NOT NULL);
         CREATE TABLE {upserts} (n integer);
         CREATE FUNCTION {schema}.count_upsert() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN INSERT INTO {upserts} VALUES (1); RETURN NULL; END $$;
         CREATE TRIGGER count_upsert AFTER UPDATE ON {s}
           FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_upsert();"
    ))
    .await;
    if !rows.is_empty() {
        db.exec(&format!("INSERT INTO {s} VALUES {rows}")).await;
    }
    s
}

/// How many upsert statements the target took so far.
async fn upserts(db: &TestDb) -> usize {
    table_count(&format!("SELECT count(*) FROM {}", db.table("upserts"))).await
}

/// A page of snapshot rows `(id, v)` of `public.snap`, with bookmark `bookmark`.
fn snapshot_page(rows: &[(i64, &str)], bookmark: i64) -> faucet_core::Page {
    snapshot_page_of(
        rows.iter().map(|(id, v)| (*id, Value::Text((*v).into()))),
        bookmark,
    )
}

/// [`snapshot_page`] with any value for `v` (a NULL the target refuses).
fn snapshot_page_of(rows: impl Iterator<Item = (i64, Value)>, bookmark: i64) -> faucet_core::Page {
    change_page(
        rows.map(|(id, v)| {
            let after = row(&[("id", Value::Int(id)), ("v", v)]);
            change("r", "public.snap", Value::Null, after, &[])
        })
        .collect(),
        json!(bookmark),
    )
}

/// The commit token of sequence `sequence` at bookmark `bookmark`.
fn token(sequence: u64, bookmark: i64) -> CommitToken {
    CommitToken {
        sequence,
        bookmark: json!(bookmark),
    }
}

#[tokio::test]
async fn snapshot_rows_copy_into_an_empty_target_and_upsert_after_a_key_conflict() {
    let mut db = TestDb::new("s_snapshot_copy").await;
    let table = snapshot_target(&mut db, "").await;
    let sink = upsert_sink(&table, &["id"]);
    let mut w = sink.open().await.expect("open");
    // Empty target: a plain COPY (no upsert statement), with the commit token.
    let first = snapshot_page(&[(1, "a"), (2, "b"), (3, "c")], 1);
    w.write_committed(&first, &Commit::new("snap", &token(1, 1)))
        .await
        .expect("first page");
    assert_eq!(upserts(&db).await, 0, "the first page was upserted");
    // Key 3 again (a page written again after a crash): the COPY is rolled back to its
    // savepoint and the page upserted, in the same transaction as its token.
    let second = snapshot_page(&[(3, "c2"), (4, "d"), (5, "e")], 2);
    w.write_committed(&second, &Commit::new("snap", &token(2, 2)))
        .await
        .expect("a key conflict is not an error");
    assert!(
        upserts(&db).await > 0,
        "the conflicting page was not upserted"
    );
    let after_conflict = upserts(&db).await;
    // From then on the target upserts.
    w.write_committed(
        &snapshot_page(&[(6, "f")], 3),
        &Commit::new("snap", &token(3, 3)),
    )
    .await
    .expect("third page");
    assert!(
        upserts(&db).await > after_conflict,
        "upserts again after a conflict"
    );
    assert_table(
        &format!("SELECT * FROM {table} ORDER BY id"),
        "1\ta\n2\tb\n3\tc2\n4\td\n5\te\n6\tf\n",
    )
    .await;
    assert_eq!(
        w.last_committed_token("snap").await.expect("token"),
        Some(token(3, 3))
    );
    db.drop().await;
}

#[tokio::test]
async fn snapshot_rows_into_a_target_holding_rows_are_upserted() {
    let mut db = TestDb::new("s_snapshot_held").await;
    let table = snapshot_target(&mut db, "(2, 'stale'), (9, 'kept')").await;
    let sink = upsert_sink(&table, &["id"]);
    let mut w = sink.open().await.expect("open");
    w.write(&snapshot_page(&[(1, "a"), (2, "b")], 1))
        .await
        .expect("write");
    w.flush().await.expect("flush");
    assert!(upserts(&db).await > 0, "a target holding rows is upserted");
    assert_table(
        &format!("SELECT * FROM {table} ORDER BY id"),
        "1\ta\n2\tb\n9\tkept\n",
    )
    .await;
    db.drop().await;
}

#[tokio::test]
async fn a_page_with_other_changes_keeps_the_upsert_for_later_snapshot_rows() {
    let mut db = TestDb::new("s_snapshot_mixed").await;
    let table = snapshot_target(&mut db, "").await;
    let sink = upsert_sink(&table, &["id"]);
    let mut w = sink.open().await.expect("open");
    let after = row(&[("id", Value::Int(1)), ("v", Value::Text("a".into()))]);
    let insert = change_page(
        vec![change("c", "public.snap", Value::Null, after, &[])],
        json!(1),
    );
    w.write(&insert).await.expect("insert");
    w.write(&snapshot_page(&[(1, "a2"), (2, "b")], 2))
        .await
        .expect("snapshot rows after a change");
    w.flush().await.expect("flush");
    assert!(upserts(&db).await >= 2, "both pages upserted");
    assert_table(
        &format!("SELECT * FROM {table} ORDER BY id"),
        "1\ta2\n2\tb\n",
    )
    .await;
    db.drop().await;
}

/// A routed target without a unique index on the source's key gets no plain COPY (a page
/// written again after a crash would not conflict there and would double its rows): the
/// sink's check of each target (upsert needs a unique key) refuses it before any write,
/// naming the fix, and nothing is written.
#[tokio::test]
async fn snapshot_rows_into_a_target_without_a_unique_key_are_not_copied() {
    let mut db = TestDb::new("s_snapshot_nokey").await;
    let target = db.table("t_snap");
    db.exec(&format!(
        "CREATE TABLE {target} (id integer, v text NOT NULL)"
    ))
    .await;
    let mut config = faucet_connectors::postgres::PostgresSinkConfig::new(
        crate::postgres_query_support::pg_url(),
        format!("{}.t_{{table}}", db.schema),
    );
    config.write_mode = faucet_connectors::postgres::WriteMode::Upsert;
    let sink = faucet_connectors::postgres::PostgresSink::new(config).expect("config");
    let mut w = sink.open().await.expect("open");
    w.source_keys(&[faucet_core::keys::TableKeys {
        table: "public.snap".into(),
        primary_key: Some(vec!["id".into()]),
        unique_sets: vec![],
    }]);
    let written = w
        .write_committed(
            &snapshot_page(&[(1, "a"), (2, "b")], 1),
            &Commit::new("snap", &token(1, 1)),
        )
        .await;
    let refused = written.expect_err("a target without a unique key took the snapshot rows");
    assert!(
        refused
            .to_string()
            .contains("upsert needs a primary key or unique index"),
        "{refused}"
    );
    assert_table(&format!("SELECT count(*) FROM {target}"), "0\n").await;
    db.drop().await;
}

/// How many transactions wrote the rows of `table` (their distinct `xmin`).
async fn writing_transactions(table: &str) -> usize {
    table_count(&format!("SELECT count(DISTINCT xmin::text) FROM {table}")).await
}

/// A page of snapshot rows `(id, v)` for the ids `ids`, `v` = `prefix` and the id.
fn numbered_page(ids: std::ops::Range<i64>, prefix: &str, bookmark: i64) -> faucet_core::Page {
    snapshot_page_of(ids.map(|id| (id, numbered(prefix, id))), bookmark)
}

/// The `v` of row `id` of a [`numbered_page`].
fn numbered(prefix: &str, id: i64) -> Value {
    Value::Text(format!("{prefix}{id}").into())
}

/// The rows `(id, v)` of `ids` as `assert_table` reads them.
fn numbered_text(ids: impl Iterator<Item = i64>, prefix: &str) -> String {
    ids.map(|id| format!("{id}\t{prefix}{id}\n")).collect()
}

/// A snapshot page of many rows into an empty target is copied by two sessions at once, each
/// committing its part (two transactions wrote it), the page's session last with the commit
/// token, under the writer's fence. A page written again (a crash after the second session
/// committed its part, before the token) meets its own keys: both parts roll back and the
/// page is upserted, so no row is doubled or lost.
#[tokio::test]
async fn a_large_snapshot_page_is_copied_by_two_sessions_and_a_replay_is_upserted() {
    let mut db = TestDb::new("s_snapshot_split").await;
    let table = snapshot_target(&mut db, "").await;
    let sink = upsert_sink(&table, &["id"]);
    let mut w = sink.open().await.expect("open");
    let fence = faucet_core::Fence::new("snap", 7, std::time::Duration::from_secs(30));
    assert!(w.fence(&fence).await.expect("fence"));
    w.write_committed(
        &numbered_page(1..1001, "a", 1),
        &Commit::new("snap", &token(1, 1)),
    )
    .await
    .expect("first page");
    assert_eq!(upserts(&db).await, 0, "the first page was upserted");
    assert_eq!(
        writing_transactions(&table).await,
        2,
        "the page was not parted between two sessions"
    );
    assert_table(
        &format!("SELECT * FROM {table} ORDER BY id"),
        &numbered_text(1..1001, "a"),
    )
    .await;
    // The same keys again, new values: a replay after a crash between the two commits.
    w.write_committed(
        &numbered_page(501..1501, "b", 2),
        &Commit::new("snap", &token(2, 2)),
    )
    .await
    .expect("a replayed page is not an error");
    assert!(upserts(&db).await > 0, "the replayed page was not upserted");
    let want = numbered_text(1..501, "a") + &numbered_text(501..1501, "b");
    assert_table(&format!("SELECT * FROM {table} ORDER BY id"), &want).await;
    assert_eq!(
        w.last_committed_token("snap").await.expect("token"),
        Some(token(2, 2))
    );
    db.drop().await;
}

/// A value the target refuses in a page copied by two sessions is the page's error naming
/// its page row (whichever session copied it), and nothing of the page stays: the part of
/// the other session is rolled back too.
#[tokio::test]
async fn a_refused_value_in_a_parted_snapshot_page_names_its_row_and_writes_nothing() {
    let mut db = TestDb::new("s_snapshot_split_bad").await;
    let table = snapshot_target(&mut db, "").await;
    let sink = upsert_sink(&table, &["id"]);
    for bad in [3_i64, 150, 299] {
        let mut w = sink.open().await.expect("open");
        let page = snapshot_page_of(
            (1..=300).map(|id| {
                (
                    id,
                    if id == bad {
                        Value::Null
                    } else {
                        numbered("v", id)
                    },
                )
            }),
            1,
        );
        let err = w
            .write(&page)
            .await
            .expect_err("a NULL into a NOT NULL column was written");
        assert!(
            err.to_string().contains(&format!("page row {bad}")),
            "row {bad}: {err}"
        );
        assert_table(&format!("SELECT count(*) FROM {table}"), "0\n").await;
    }
    db.drop().await;
}

/// A key twice in one large snapshot page (the upsert's collapsing keeps its last version)
/// lands in one session's part, so the two sessions never wait on each other's key: the
/// page is upserted, the key's last version stored.
#[tokio::test]
async fn a_key_twice_in_a_parted_snapshot_page_keeps_its_last_version() {
    let mut db = TestDb::new("s_snapshot_split_twice").await;
    let table = snapshot_target(&mut db, "").await;
    let sink = upsert_sink(&table, &["id"]);
    let mut w = sink.open().await.expect("open");
    let rows = (1..=200)
        .map(|id| (id, numbered("a", id)))
        .chain([(77, Value::Text("last".into()))]);
    let written = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        w.write(&snapshot_page_of(rows, 1)),
    )
    .await
    .expect("the two sessions waited on each other");
    written.expect("write");
    let want = numbered_text(1..77, "a") + "77\tlast\n" + &numbered_text(78..201, "a");
    assert_table(&format!("SELECT * FROM {table} ORDER BY id"), &want).await;
    db.drop().await;
}
