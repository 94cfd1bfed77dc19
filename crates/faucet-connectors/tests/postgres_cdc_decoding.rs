//! postgres-cdc decoding: the exact change records for inserts, updates, deletes and
//! truncates; REPLICA IDENTITY before-images; unchanged TOAST (case 01); columns added and
//! dropped mid-stream (case 26); truncate order (case 17).

use std::time::Duration;

use faucet_core::serde_json::{self, Value as Json};

use crate::postgres_cdc::{Fixture, admin, prime, read_all, records, shape};

/// Reads every change since the slot was primed, acknowledging each page.
async fn changes(
    fx: &Fixture,
    source: &faucet_connectors::postgres::cdc::PostgresCdcSource,
) -> Vec<Json> {
    fx.wait_slot_released().await;
    let pages = read_all(source, None, 1000).await;
    records(&pages)
}

fn lsn_value(text: &str) -> u64 {
    let (hi, lo) = text.split_once('/').expect("X/X");
    (u64::from_str_radix(hi, 16).expect("hex") << 32) | u64::from_str_radix(lo, 16).expect("hex")
}

#[tokio::test]
async fn inserts_updates_deletes_and_truncate_are_exact_change_records() {
    let fx = Fixture::new("ops").await;
    fx.sql(
        "CREATE TABLE {s}.orders (id int PRIMARY KEY, status text NOT NULL, amount numeric(10,2))",
    )
    .await;
    let source = fx.source(&["orders"]);
    prime(&fx, &source).await;
    let before = chrono::Utc::now() - chrono::Duration::seconds(5);
    fx.sql("INSERT INTO {s}.orders VALUES (1, 'new', 10.50), (2, 'new', NULL)")
        .await;
    fx.sql("UPDATE {s}.orders SET status = 'paid' WHERE id = 1")
        .await;
    fx.sql("UPDATE {s}.orders SET id = 3 WHERE id = 2").await;
    fx.sql("DELETE FROM {s}.orders WHERE id = 1").await;
    fx.sql("TRUNCATE {s}.orders").await;

    let recs = changes(&fx, &source).await;
    let t = fx.table("orders");
    let expected = [
        format!(
            r#"{{"op":"c","table":"{t}","before":null,"after":{{"id":1,"status":"new","amount":10.50}},"unchanged_toast":[]}}"#
        ),
        format!(
            r#"{{"op":"c","table":"{t}","before":null,"after":{{"id":2,"status":"new","amount":null}},"unchanged_toast":[]}}"#
        ),
        format!(
            r#"{{"op":"u","table":"{t}","before":{{"id":1}},"after":{{"id":1,"status":"paid","amount":10.50}},"unchanged_toast":[]}}"#
        ),
        format!(
            r#"{{"op":"u","table":"{t}","before":{{"id":2}},"after":{{"id":3,"status":"new","amount":null}},"unchanged_toast":[]}}"#
        ),
        format!(
            r#"{{"op":"d","table":"{t}","before":{{"id":1}},"after":null,"unchanged_toast":[]}}"#
        ),
        format!(r#"{{"op":"t","table":"{t}","before":null,"after":null,"unchanged_toast":[]}}"#),
    ];
    let got: Vec<String> = recs.iter().map(shape).collect();
    assert_eq!(got, expected);

    // lsn: the commit LSN of each record's transaction — shared inside one, increasing across.
    let lsns: Vec<u64> = recs
        .iter()
        .map(|r| lsn_value(r["lsn"].as_str().expect("lsn")))
        .collect();
    assert_eq!(lsns[0], lsns[1], "one INSERT statement, one transaction");
    for w in lsns[1..].windows(2) {
        assert!(w[0] < w[1], "{lsns:?}");
    }
    // commit_ts: RFC 3339 UTC, around now.
    for r in &recs {
        let ts = r["commit_ts"].as_str().expect("commit_ts");
        assert!(ts.ends_with('Z'), "{ts}");
        let at = chrono::DateTime::parse_from_rfc3339(ts).expect("rfc3339");
        assert!(
            at > before && at < chrono::Utc::now() + chrono::Duration::seconds(5),
            "{ts}"
        );
    }
}

#[tokio::test]
async fn before_images_follow_replica_identity() {
    let fx = Fixture::new("ident").await;
    fx.sql(
        "CREATE TABLE {s}.d (id int PRIMARY KEY, a text, b int);
         CREATE TABLE {s}.f (id int PRIMARY KEY, a text, b int);
         ALTER TABLE {s}.f REPLICA IDENTITY FULL;
         CREATE TABLE {s}.i (id int PRIMARY KEY, code text NOT NULL, a text);
         CREATE UNIQUE INDEX i_code ON {s}.i (code);
         ALTER TABLE {s}.i REPLICA IDENTITY USING INDEX i_code;",
    )
    .await;
    let source = fx.source(&["d", "f", "i"]);
    prime(&fx, &source).await;
    for t in ["d", "f"] {
        fx.sql(&format!("INSERT INTO {{s}}.{t} VALUES (1, 'x', 1)"))
            .await;
        fx.sql(&format!("UPDATE {{s}}.{t} SET a = 'y' WHERE id = 1"))
            .await;
        fx.sql(&format!("DELETE FROM {{s}}.{t} WHERE id = 1")).await;
    }
    fx.sql("INSERT INTO {s}.i VALUES (1, 'k1', 'x')").await;
    fx.sql("UPDATE {s}.i SET a = 'y' WHERE id = 1").await;
    fx.sql("UPDATE {s}.i SET code = 'k2' WHERE id = 1").await;
    fx.sql("DELETE FROM {s}.i WHERE id = 1").await;

    let recs = changes(&fx, &source).await;
    let got: Vec<(String, String, String)> = recs
        .iter()
        .map(|r| {
            (
                r["op"].as_str().expect("op").to_owned(),
                serde_json::to_string(&r["before"]).expect("json"),
                serde_json::to_string(&r["after"]).expect("json"),
            )
        })
        .collect();
    let e =
        |op: &str, before: &str, after: &str| (op.to_owned(), before.to_owned(), after.to_owned());
    assert_eq!(
        got,
        vec![
            // default: the primary key
            e("c", "null", r#"{"id":1,"a":"x","b":1}"#),
            e("u", r#"{"id":1}"#, r#"{"id":1,"a":"y","b":1}"#),
            e("d", r#"{"id":1}"#, "null"),
            // FULL: the whole old row
            e("c", "null", r#"{"id":1,"a":"x","b":1}"#),
            e(
                "u",
                r#"{"id":1,"a":"x","b":1}"#,
                r#"{"id":1,"a":"y","b":1}"#
            ),
            e("d", r#"{"id":1,"a":"y","b":1}"#, "null"),
            // USING INDEX: the index columns, old values when they changed
            e("c", "null", r#"{"id":1,"code":"k1","a":"x"}"#),
            e("u", r#"{"code":"k1"}"#, r#"{"id":1,"code":"k1","a":"y"}"#),
            e("u", r#"{"code":"k1"}"#, r#"{"id":1,"code":"k2","a":"y"}"#),
            e("d", r#"{"code":"k2"}"#, "null"),
        ]
    );
}

#[tokio::test]
async fn case_01_unchanged_toast_is_named_never_null() {
    let fx = Fixture::new("toast").await;
    fx.sql(
        "CREATE TABLE {s}.article (id integer PRIMARY KEY, title text NOT NULL, body text NOT NULL);
         ALTER TABLE {s}.article ALTER COLUMN body SET STORAGE EXTERNAL;
         CREATE TABLE {s}.article_full (LIKE {s}.article INCLUDING ALL);
         ALTER TABLE {s}.article_full ALTER COLUMN body SET STORAGE EXTERNAL;
         ALTER TABLE {s}.article_full REPLICA IDENTITY FULL;",
    )
    .await;
    let source = fx.source(&["article", "article_full"]);
    prime(&fx, &source).await;
    // A 10 kB random text: out of line (EXTERNAL), so an UPDATE of another column does not
    // carry it.
    fx.sql(
        "INSERT INTO {s}.article VALUES (1, 'draft', (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 313)))",
    )
    .await;
    fx.sql("INSERT INTO {s}.article_full SELECT * FROM {s}.article")
        .await;
    fx.sql("UPDATE {s}.article SET title = 'published' WHERE id = 1")
        .await;
    fx.sql("UPDATE {s}.article_full SET title = 'published' WHERE id = 1")
        .await;
    let random_body: String = sqlx::query_scalar(&fx.expand("SELECT body FROM {s}.article"))
        .fetch_one(&mut admin().await)
        .await
        .expect("body");
    assert_eq!(random_body.len(), 10_016);
    fx.sql("UPDATE {s}.article SET body = repeat('b', 10000), title = 'edited' WHERE id = 1")
        .await;

    let recs = changes(&fx, &source).await;
    assert_eq!(recs.len(), 5, "{recs:#?}");
    let (article, full) = (fx.table("article"), fx.table("article_full"));
    // 1, 2: inserts carry the whole value.
    assert_eq!(recs[0]["table"], article.as_str());
    assert_eq!(recs[0]["after"]["body"], random_body.as_str());
    assert_eq!(recs[1]["table"], full.as_str());
    assert_eq!(recs[1]["after"]["body"], random_body.as_str());
    // 3: default identity: body left out of `after` and named in unchanged_toast.
    assert_eq!(recs[2]["op"], "u");
    assert_eq!(
        serde_json::to_string(&recs[2]["after"]).expect("json"),
        r#"{"id":1,"title":"published"}"#
    );
    assert_eq!(recs[2]["unchanged_toast"], serde_json::json!(["body"]));
    // 4: FULL identity: the value comes from the old row, in `before` and `after`.
    assert_eq!(recs[3]["table"], full.as_str());
    assert_eq!(recs[3]["after"]["title"], "published");
    assert_eq!(recs[3]["after"]["body"], random_body.as_str());
    assert_eq!(recs[3]["before"]["body"], random_body.as_str());
    assert_eq!(recs[3]["unchanged_toast"], serde_json::json!([]));
    // 5: a changed large value is carried in full.
    assert_eq!(recs[4]["after"]["body"], "b".repeat(10_000).as_str());
    assert_eq!(recs[4]["after"]["title"], "edited");
    // The column is NOT NULL: a null anywhere would be a decoding bug.
    for r in &recs {
        if let Some(after) = r["after"].as_object() {
            assert_ne!(after.get("body"), Some(&Json::Null), "{r}");
        }
    }
}

#[tokio::test]
async fn case_26_columns_added_and_dropped_mid_stream() {
    let fx = Fixture::new("ddl").await;
    fx.sql("CREATE TABLE {s}.customer (id integer PRIMARY KEY, name text NOT NULL)")
        .await;
    let source = fx.source(&["customer"]);
    prime(&fx, &source).await;
    for sql in [
        "INSERT INTO {s}.customer VALUES (1, 'alpha'), (2, 'beta')",
        "ALTER TABLE {s}.customer ADD COLUMN tier text NOT NULL DEFAULT 'basic'",
        "INSERT INTO {s}.customer VALUES (3, 'gamma', 'gold')",
        "UPDATE {s}.customer SET name = 'alpha2' WHERE id = 1",
        "ALTER TABLE {s}.customer DROP COLUMN tier",
        "INSERT INTO {s}.customer VALUES (4, 'delta')",
        "ALTER TABLE {s}.customer ADD COLUMN created_at timestamptz DEFAULT '2026-01-01 00:00:00+00'",
        "INSERT INTO {s}.customer (id, name) VALUES (5, 'epsilon')",
    ] {
        fx.sql(sql).await;
    }
    let recs = changes(&fx, &source).await;
    // A schema change (`s`, issue 24) goes right before the first change with the new
    // columns: here by what it lists.
    let got: Vec<(String, String)> = recs
        .iter()
        .map(|r| {
            let op = r["op"].as_str().expect("op").to_owned();
            let after = if op == "s" {
                r["after"]["changes"]
                    .as_array()
                    .expect("changes")
                    .iter()
                    .map(|c| format!("{} {}", c["kind"], c["column"]))
                    .collect::<Vec<_>>()
                    .join(", ")
            } else {
                serde_json::to_string(&r["after"]).expect("json")
            };
            (op, after)
        })
        .collect();
    let e = |op: &str, after: &str| (op.to_owned(), after.to_owned());
    assert_eq!(
        got,
        vec![
            e("c", r#"{"id":1,"name":"alpha"}"#),
            e("c", r#"{"id":2,"name":"beta"}"#),
            e("s", r#""add" "tier""#),
            e("c", r#"{"id":3,"name":"gamma","tier":"gold"}"#),
            e("u", r#"{"id":1,"name":"alpha2","tier":"basic"}"#),
            e("s", r#""drop" "tier""#),
            e("c", r#"{"id":4,"name":"delta"}"#),
            e("s", r#""add" "created_at""#),
            e(
                "c",
                r#"{"id":5,"name":"epsilon","created_at":"2026-01-01T00:00:00Z"}"#
            ),
        ]
    );
}

#[tokio::test]
async fn case_17_truncates_keep_their_place_and_the_slot_advances() {
    let fx = Fixture::new("trunc").await;
    fx.sql(
        "CREATE TABLE {s}.event_log (id integer PRIMARY KEY, kind text NOT NULL);
         CREATE TABLE {s}.other_tbl (id integer PRIMARY KEY);",
    )
    .await;
    let source = fx.source(&["event_log", "other_tbl"]);
    prime(&fx, &source).await;
    fx.sql("INSERT INTO {s}.event_log VALUES (1,'a'),(2,'b')")
        .await;
    fx.sql("INSERT INTO {s}.other_tbl VALUES (10)").await;
    fx.sql("TRUNCATE {s}.event_log").await;
    fx.sql("INSERT INTO {s}.event_log VALUES (3,'c')").await;
    fx.sql(
        "BEGIN;
         INSERT INTO {s}.event_log VALUES (4,'d');
         TRUNCATE {s}.event_log, {s}.other_tbl;
         INSERT INTO {s}.event_log VALUES (5,'e');
         COMMIT;",
    )
    .await;

    let recs = changes(&fx, &source).await;
    let (ev, ot) = (fx.table("event_log"), fx.table("other_tbl"));
    let got: Vec<(String, String, Option<i64>)> = recs
        .iter()
        .map(|r| {
            (
                r["op"].as_str().expect("op").to_owned(),
                r["table"].as_str().expect("table").to_owned(),
                r["after"]["id"].as_i64(),
            )
        })
        .collect();
    let e = |op: &str, t: &str, id: Option<i64>| (op.to_owned(), t.to_owned(), id);
    assert_eq!(
        got,
        vec![
            e("c", &ev, Some(1)),
            e("c", &ev, Some(2)),
            e("c", &ot, Some(10)),
            e("t", &ev, None),
            e("c", &ev, Some(3)),
            e("c", &ev, Some(4)),
            // one statement over two tables: one record per table, in the statement's order
            e("t", &ev, None),
            e("t", &ot, None),
            e("c", &ev, Some(5)),
        ]
    );
    let last_txn = &recs[5]["lsn"];
    assert!(
        recs[5..].iter().all(|r| &r["lsn"] == last_txn),
        "one transaction"
    );

    // The stream acknowledged its last page before closing: the slot moved past the last
    // COMMIT (its confirmed_flush_lsn is that commit's end, past its commit LSN).
    fx.wait_slot_released().await;
    let confirmed = fx.confirmed_flush().await.expect("slot");
    assert!(
        lsn_value(&confirmed) > lsn_value(last_txn.as_str().expect("lsn")),
        "confirmed_flush_lsn {confirmed} must be past {last_txn}"
    );
    // And nothing is read again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(changes(&fx, &source).await.is_empty());
}

#[tokio::test]
async fn a_partitioned_table_reports_changes_under_its_own_name() {
    let fx = Fixture::new("part").await;
    fx.sql(
        "CREATE TABLE {s}.m (id int, region text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
         CREATE TABLE {s}.m_eu PARTITION OF {s}.m FOR VALUES IN ('eu');
         CREATE TABLE {s}.m_us PARTITION OF {s}.m FOR VALUES IN ('us');",
    )
    .await;
    let source = fx.source(&["m"]);
    prime(&fx, &source).await;
    fx.sql("INSERT INTO {s}.m VALUES (1, 'eu'), (2, 'us')")
        .await;
    let recs = changes(&fx, &source).await;
    let got: Vec<String> = recs.iter().map(shape).collect();
    let m = fx.table("m");
    assert_eq!(
        got,
        vec![
            format!(
                r#"{{"op":"c","table":"{m}","before":null,"after":{{"id":1,"region":"eu"}},"unchanged_toast":[]}}"#
            ),
            format!(
                r#"{{"op":"c","table":"{m}","before":null,"after":{{"id":2,"region":"us"}},"unchanged_toast":[]}}"#
            ),
        ]
    );

    // A publication that publishes the partitions under their own names is refused, with
    // the fix.
    fx.sql("ALTER PUBLICATION {p} SET (publish_via_partition_root = false)")
        .await;
    let e = faucet_core::Source::check(&source)
        .await
        .expect_err("via root off");
    assert!(
        e.to_string().contains("publish_via_partition_root = true"),
        "{e}"
    );
}
