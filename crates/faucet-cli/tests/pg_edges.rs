//! PostgreSQL edge cases through the binary: names PostgreSQL stores but other tools
//! mangle (non-ASCII, quotes, `;`, longer than 63 bytes), values PostgreSQL cannot store
//! (U+0000), missing privileges, and a slot creation that waits for other transactions. Each
//! case must fail before anything is created — or work end to end. Change records appended
//! as rows (the audit table) are in [`audit`].
//!
//! PostgreSQL with wal_level=logical from `FAUCET_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`; `scripts/services.sh` starts it).

mod audit;

use faucet_connectors::sql::ident::quote_ident;

use crate::support::pg::{drop_cdc_objects, query, slot_exists, sql, unique_suffix};
use crate::support::{Dir, Run, pg_url};

/// The environment variable the configs read the server's URL from.
const URL_VAR: &str = "FAUCET_EDGE_PG_URL";

/// `faucet <args>` in `dir`, with the test server's URL in [`URL_VAR`].
fn faucet(dir: &Dir, args: &[&str]) -> Run {
    dir.faucet_env(args, &[(URL_VAR, &pg_url())])
}

/// A YAML single-quoted scalar.
fn yaml_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A test's own schema, slot and publication, dropped when the test ends (also on failure).
struct Names {
    schema: String,
    slot: String,
    publication: String,
}

impl Names {
    /// Names tagged `tag`; the schema is `schema_prefix` + a unique suffix.
    fn new(tag: &str, schema_prefix: &str) -> Self {
        let suffix = unique_suffix();
        let names = Self {
            schema: format!("{schema_prefix}{suffix}"),
            slot: format!("edge_{tag}_{suffix}"),
            publication: format!("edge_{tag}_pub_{suffix}"),
        };
        sql(&format!(
            "DROP SCHEMA IF EXISTS {0} CASCADE; CREATE SCHEMA {0}",
            quote_ident(&names.schema)
        ));
        names
    }

    /// `"schema"."table"`.
    fn quoted(&self, table: &str) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(table))
    }

    /// `schema.table`, as configs spell it (YAML-quoted).
    fn config_name(&self, table: &str) -> String {
        yaml_str(&format!("{}.{table}", self.schema))
    }

    /// A `postgres-cdc` source over `tables` (creating the publication).
    fn cdc_source(&self, tables: &[&str]) -> String {
        let tables: Vec<String> = tables.iter().map(|t| self.config_name(t)).collect();
        format!(
            "{{ type: postgres-cdc, config: {{ connection_url: \"${{env:{URL_VAR}}}\", \
             slot_name: {}, publication: {}, tables: [{}], create_publication: true }} }}",
            self.slot,
            self.publication,
            tables.join(", ")
        )
    }

    /// A `postgres` sink into `table` with extra config `extra` (`, key: [id]`).
    fn pg_sink(&self, table: &str, extra: &str) -> String {
        format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:{URL_VAR}}}\", \
             table: {}, create_table: true{extra} }} }}",
            self.config_name(table)
        )
    }
}

impl Drop for Names {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop_cdc_objects(&self.slot, &self.publication, &self.schema);
        }));
    }
}

/// A pipeline file: `source`, `sink`, a file state store, and `extra` lines under
/// `pipeline:`.
fn pipeline(name: &str, source: &str, sink: &str, extra: &str) -> String {
    format!(
        "version: 1\nname: {name}\npipeline:\n  source: {source}\n  sink: {sink}\n  \
         state: {{ type: file, config: {{ path: ./state }} }}\n{extra}"
    )
}

/// The (id, v) rows of `table` (quoted), ordered by id.
fn id_v(table: &str) -> Vec<(i64, String)> {
    query(&format!("SELECT id::bigint, v FROM {table} ORDER BY id"))
}

// ---- 11: one table-name rule, checked before anything is created ----

/// A table name with a non-ASCII letter, double quotes, `;` and spaces, in a schema with
/// non-ASCII and `;`: `validate` accepts it, and `faucet replicate` copies it and then
/// streams its changes into a postgres upsert sink whose target has such a name too. On the
/// old code `replicate` refused the name only after creating the slot, publication and a
/// snapshot bookmark.
#[test]
fn replicate_copies_and_streams_tables_with_any_name_postgres_allows() {
    let names = Names::new("names", "edge ü;");
    let source = "Bestellung \"ü\"; x";
    let target = "Ziel \"ß\"; drop";
    let src = names.quoted(source);
    let dst = names.quoted(target);
    sql(&format!(
        "CREATE TABLE {src} (id bigint PRIMARY KEY, v text NOT NULL); \
         INSERT INTO {src} VALUES (1, 'eins'), (2, 'zwei'), (3, 'drei')"
    ));
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        pipeline(
            "edgenames",
            &names.cdc_source(&[source]),
            &names.pg_sink(target, ", write_mode: upsert, key: [id]"),
            "  batch_size: 2\n",
        ),
    );
    faucet(&dir, &["validate", "p.yaml"]).expect_code(0);
    faucet(&dir, &["doctor", "p.yaml"]).expect_code(0);
    faucet(&dir, &["replicate", "p.yaml"]).expect_code(0);
    assert_eq!(
        id_v(&dst),
        [(1, "eins".into()), (2, "zwei".into()), (3, "drei".into())]
    );
    sql(&format!(
        "UPDATE {src} SET v = 'ZWEI' WHERE id = 2; DELETE FROM {src} WHERE id = 3; \
         INSERT INTO {src} VALUES (4, 'vier')"
    ));
    faucet(&dir, &["replicate", "p.yaml"]).expect_code(0);
    assert_eq!(
        id_v(&dst),
        [(1, "eins".into()), (2, "ZWEI".into()), (4, "vier".into())]
    );
    // `faucet run` continues the same pipeline's change stream, by the same name rule.
    sql(&format!("UPDATE {src} SET v = 'EINS' WHERE id = 1"));
    faucet(&dir, &["run", "p.yaml"]).expect_code(0);
    assert_eq!(
        id_v(&dst),
        [(1, "EINS".into()), (2, "ZWEI".into()), (4, "vier".into())]
    );
}

/// A name PostgreSQL would truncate (64 bytes, here of two-byte letters) or cannot hold (a
/// `.` inside a part) is refused by `validate`, `run` and `replicate` alike, with exit 2,
/// naming the field, before a slot, a publication or a bookmark exists.
#[test]
fn names_postgres_cannot_hold_are_refused_offline_by_every_command() {
    let names = Names::new("badnames", "edge_bad_");
    let too_long = "é".repeat(32);
    for (bad, needles) in [
        (too_long.as_str(), vec!["tables[0]", "64 bytes", "63 bytes"]),
        ("a.b", vec!["tables[0]", "schema.table"]),
    ] {
        let dir = Dir::new();
        dir.write(
            "p.yaml",
            pipeline(
                "edgebad",
                &names.cdc_source(&[bad]),
                "{ type: jsonl, config: { path: ./out.jsonl } }",
                "",
            ),
        );
        for cmd in ["validate", "run", "replicate", "doctor"] {
            let run = faucet(&dir, &[cmd, "p.yaml"]);
            let all = format!("{}{}", run.stdout, run.stderr);
            // doctor exits with the number of failed probes (here: the source's).
            let code = if cmd == "doctor" { 1 } else { 2 };
            assert_eq!(run.code, code, "{cmd} {bad}: {all}");
            for n in &needles {
                assert!(all.contains(n), "{cmd} {bad}: lacks {n:?}: {all}");
            }
            assert!(!slot_exists(&names.slot), "{cmd} {bad}: created the slot");
            if cmd != "doctor" {
                assert!(!dir.join("state").exists(), "{cmd} {bad}: wrote state");
            }
            assert!(
                !dir.join("out.jsonl").exists(),
                "{cmd} {bad}: wrote the sink"
            );
        }
    }
    let publications: Vec<(i32,)> = query(&format!(
        "SELECT 1 FROM pg_publication WHERE pubname = '{}'",
        names.publication
    ));
    assert!(publications.is_empty(), "a publication was created");
}

// ---- 12: names longer than PostgreSQL's 63 bytes ----

/// A CSV field whose name is 64 bytes (32 two-byte letters) into `create_table: true`: the
/// run fails before CREATE TABLE, naming the field, its byte length and the limit, and no
/// table is left behind. A 63-byte name works. Over-long table and key names are refused
/// offline by `validate`.
#[test]
fn names_over_63_bytes_are_refused_before_anything_is_created() {
    let names = Names::new("long", "edge_long_");
    let long = "ü".repeat(32);
    let fits = format!("{}x", "ü".repeat(31));
    let dir = Dir::new();
    let sink = |table: &str, extra: &str| names.pg_sink(table, extra);
    let csv_source = "{ type: csv, config: { path: ./in.csv } }";
    dir.write("in.csv", format!("id,{long}\n1,a\n2,b\n"));
    dir.write(
        "long.yaml",
        pipeline("edgelong", csv_source, &sink("t", ""), ""),
    );
    faucet(&dir, &["run", "long.yaml"])
        .expect_code(1)
        .stderr_has(&[&format!("field `{long}` is 64 bytes"), "63 bytes"]);
    assert!(
        !crate::support::pg::table_exists(&names.quoted("t")),
        "the table was left behind"
    );

    // Names no column can have: empty (a header cell left blank) or holding U+0000 (a JSON
    // key): refused naming the field, before the table exists.
    dir.write("blank.csv", "id,\n1,a\n");
    dir.write("nul.jsonl", "{\"id\":1,\"a\\u0000b\":2}\n");
    for (file, source, needle) in [
        (
            "blank",
            "{ type: csv, config: { path: ./blank.csv } }",
            "empty name",
        ),
        (
            "nul",
            "{ type: jsonl, config: { path: ./nul.jsonl } }",
            "holds U+0000",
        ),
    ] {
        dir.write(
            &format!("{file}.yaml"),
            pipeline(&format!("edge{file}"), source, &sink(file, ""), ""),
        );
        faucet(&dir, &["run", &format!("{file}.yaml")])
            .expect_code(1)
            .stderr_has(&[needle, "rename the field"]);
        assert!(
            !crate::support::pg::table_exists(&names.quoted(file)),
            "{file}: the table was left behind"
        );
    }

    dir.write("fits.csv", format!("id,{fits}\n1,a\n"));
    dir.write(
        "fits.yaml",
        pipeline(
            "edgefits",
            "{ type: csv, config: { path: ./fits.csv } }",
            &sink("t2", ""),
            "",
        ),
    );
    faucet(&dir, &["run", "fits.yaml"]).expect_code(0);
    let got: Vec<(String, String)> = query(&format!(
        "SELECT id, {} FROM {}",
        quote_ident(&fits),
        names.quoted("t2")
    ));
    assert_eq!(got, [("1".to_owned(), "a".to_owned())]);

    for (yaml, needles) in [
        (
            pipeline("edgelongt", csv_source, &sink(&long, ""), ""),
            vec!["sink.config.table", "64 bytes", "63 bytes"],
        ),
        (
            pipeline(
                "edgelongk",
                csv_source,
                &sink("t3", &format!(", write_mode: upsert, key: ['{long}']")),
                "",
            ),
            vec!["sink.config.key[0]", "64 bytes", "63 bytes"],
        ),
    ] {
        dir.write("bad.yaml", yaml);
        for cmd in ["validate", "run"] {
            let run = faucet(&dir, &[cmd, "bad.yaml"]);
            let all = format!("{}{}", run.stdout, run.stderr);
            assert_eq!(run.code, 2, "{cmd}: {all}");
            for n in &needles {
                assert!(all.contains(n), "{cmd}: lacks {n:?}: {all}");
            }
        }
    }
    assert!(!crate::support::pg::table_exists(&names.quoted("t3")));
}

// ---- 14: U+0000, which PostgreSQL cannot store ----

/// A JSON Lines record whose text (or JSON) value holds U+0000 into the postgres sink: the
/// run fails naming the column, the page row, the record (its key, and its number in the
/// file) and the fix, and commits nothing of the page; `nul_bytes: strip` and `replace`
/// write the record without it.
#[test]
fn nul_bytes_are_named_by_column_and_record_or_stripped_or_replaced_on_request() {
    let names = Names::new("nul", "edge_nul_");
    let dir = Dir::new();
    dir.write(
        "in.jsonl",
        concat!(
            r#"{"id": 1, "name": "ok", "doc": {"k": "v"}}"#,
            "\n",
            r#"{"id": 2, "name": "bad\u0000x", "doc": {"k": "v"}}"#,
            "\n",
            r#"{"id": 3, "name": "fine", "doc": {"k": "w\u0000y"}}"#,
            "\n",
        ),
    );
    let source = "{ type: jsonl, config: { path: ./in.jsonl } }";
    let config = |table: &str, extra: &str| {
        pipeline(
            "edgenul",
            source,
            &names.pg_sink(table, &format!(", key: [id]{extra}")),
            "  state: { type: memory }\n",
        )
        .replace("  state: { type: file, config: { path: ./state } }\n", "")
    };
    dir.write("fail.yaml", config("t", ""));
    faucet(&dir, &["run", "fail.yaml"])
        .expect_code(1)
        .stderr_has(&[
            "column name, page row 2",
            "key id = 2",
            "record 2 of ",
            "in.jsonl",
            "U+0000",
            "nul_bytes: strip",
            "nul_bytes: replace",
        ]);
    // The table `create_table` made for the failed first page is gone again: nothing of the
    // page, and no empty table, is left behind.
    assert!(
        !crate::support::pg::table_exists(&names.quoted("t")),
        "the table created for the failed page was left behind"
    );

    // Upserts stage the rows first: the same error, the same row.
    dir.write("upsert.yaml", config("tu", ", write_mode: upsert"));
    faucet(&dir, &["run", "upsert.yaml"])
        .expect_code(1)
        .stderr_has(&["column name, page row 2", "key id = 2", "U+0000"]);
    assert!(
        !crate::support::pg::table_exists(&names.quoted("tu")),
        "the table created for the failed upsert page was left behind"
    );
    // Into a table that existed before, a failed page commits nothing and the table stays.
    sql(&format!(
        "CREATE TABLE {} (id bigint PRIMARY KEY, name text, doc jsonb)",
        names.quoted("kept")
    ));
    dir.write("kept.yaml", config("kept", ""));
    faucet(&dir, &["run", "kept.yaml"])
        .expect_code(1)
        .stderr_has(&["column name, page row 2", "U+0000"]);
    let count: Vec<(i64,)> = query(&format!("SELECT count(*) FROM {}", names.quoted("kept")));
    assert_eq!(count, [(0,)], "part of the failed page was committed");

    // jsonb refuses the escape \u0000 too: named the same way.
    dir.write(
        "json.jsonl",
        format!("{}\n", r#"{"id": 3, "doc": {"k": "w\u0000y"}}"#),
    );
    dir.write(
        "json.yaml",
        config("tj", "").replace("./in.jsonl", "./json.jsonl"),
    );
    faucet(&dir, &["run", "json.yaml"])
        .expect_code(1)
        .stderr_has(&["column doc, page row 1", "key id = 3", "U+0000"]);

    for (policy, name2, doc3) in [
        ("strip", "badx", r#"{"k": "wy"}"#),
        ("replace", "bad\u{fffd}x", r#"{"k": "w�y"}"#),
    ] {
        let table = format!("t_{policy}");
        dir.write("p.yaml", config(&table, &format!(", nul_bytes: {policy}")));
        faucet(&dir, &["run", "p.yaml"]).expect_code(0);
        let got: Vec<(i64, String, String)> = query(&format!(
            "SELECT id, name, doc::text FROM {} ORDER BY id",
            names.quoted(&table)
        ));
        assert_eq!(
            got,
            [
                (1, "ok".to_owned(), r#"{"k": "v"}"#.to_owned()),
                (2, name2.to_owned(), r#"{"k": "v"}"#.to_owned()),
                (3, "fine".to_owned(), doc3.to_owned()),
            ],
            "{policy}"
        );
    }
    dir.write("bad.yaml", config("tb", ", nul_bytes: drop"));
    faucet(&dir, &["validate", "bad.yaml"])
        .expect_code(2)
        .stderr_has(&["nul_bytes"]);
}

// ---- E1: doctor checks what create_publication needs ----

/// Drops the role (and what it owns or was granted in the test database) when dropped.
struct Role(String);

impl Drop for Role {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sql(&format!(
                "DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}",
                self.0
            ));
        }));
    }
}

/// `faucet doctor` on a `postgres-cdc` source with `create_publication: true` and no
/// publication yet, connected as a role with REPLICATION but without the CREATE privilege
/// on the database: the probe fails naming the privilege and the GRANT; with CREATE but
/// not owning the table, it names the ownership; as the owner it passes. Nothing is created.
#[test]
fn doctor_checks_the_privileges_create_publication_needs() {
    let names = Names::new("priv", "edge_priv_");
    let role = Role(format!("edge_role_{}", unique_suffix()));
    sql(&format!(
        "CREATE ROLE {0} LOGIN REPLICATION; \
         CREATE TABLE {1} (id bigint PRIMARY KEY); GRANT USAGE ON SCHEMA {2} TO {0}",
        role.0,
        names.quoted("items"),
        quote_ident(&names.schema)
    ));
    // The test server's URL with the role as its user (trust authentication).
    let base = pg_url();
    let (scheme, rest) = base.split_once("://").expect("a URL");
    let host = rest.split_once('@').map_or(rest, |(_, h)| h);
    let url = format!("{scheme}://{}@{host}", role.0);
    let database: Vec<(String,)> = query("SELECT current_database()::text");
    let database = &database[0].0;
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        pipeline(
            "edgepriv",
            &names.cdc_source(&["items"]),
            "{ type: jsonl, config: { path: ./out.jsonl } }",
            "",
        ),
    );
    let doctor = || dir.faucet_env(&["doctor", "p.yaml"], &[(URL_VAR, &url)]);
    let run = doctor();
    run.expect_code(1).stdout_has(&[
        "lacks the CREATE privilege on database",
        &format!(
            "GRANT CREATE ON DATABASE {} TO \"{}\"",
            quote_ident(database),
            role.0
        ),
    ]);
    sql(&format!(
        "GRANT CREATE ON DATABASE {} TO {}",
        quote_ident(database),
        role.0
    ));
    doctor()
        .expect_code(1)
        .stdout_has(&["does not own table", &format!("{}.items", names.schema)]);
    sql(&format!(
        "ALTER TABLE {} OWNER TO {}",
        names.quoted("items"),
        role.0
    ));
    doctor().expect_code(0);
    let publications: Vec<(i32,)> = query(&format!(
        "SELECT 1 FROM pg_publication WHERE pubname = '{}'",
        names.publication
    ));
    assert!(publications.is_empty(), "doctor created the publication");
    assert!(!slot_exists(&names.slot), "doctor created the slot");
}

// ---- E2: a slot creation that waits says what it waits for ----

/// While another session holds a transaction with an xid, creating the slot waits
/// (PostgreSQL's rule). `faucet run` says so within seconds, naming that session's pid,
/// and shows no sqlx "slow statement" noise; once the transaction commits, the run
/// finishes and the slot exists.
#[test]
fn a_slot_creation_waiting_for_an_open_transaction_names_it() {
    // `run` creates the slot with pg_create_logical_replication_slot, `replicate` on a
    // replication session with an exported snapshot.
    for command in ["run", "replicate"] {
        slot_creation_waits_and_names(command);
    }
}

fn slot_creation_waits_and_names(command: &str) {
    use std::io::BufRead as _;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use sqlx::Executor as _;

    let names = Names::new("wait", "edge_wait_");
    sql(&format!(
        "CREATE TABLE {} (id bigint PRIMARY KEY)",
        names.quoted("items")
    ));
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        pipeline(
            "edgewait",
            &names.cdc_source(&["items"]),
            "{ type: jsonl, config: { path: ./out.jsonl } }",
            "",
        ),
    );
    let rt = crate::support::runtime();
    let mut side = rt.block_on(crate::support::pg::connect());
    let pid: i32 = rt.block_on(async {
        side.execute("BEGIN; SELECT txid_current()")
            .await
            .expect("open a transaction with an xid");
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut side)
            .await
            .expect("pid")
    });
    let mut child = crate::support::pg::faucet_with_pg_url(URL_VAR)
        .args([command, "p.yaml"])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn faucet");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    let needle = format!("pid {pid} ");
    let named = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                let hit = line.contains(&needle) && line.contains("WARN");
                seen.push(line);
                if hit {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    let finished_early = child.try_wait().expect("try_wait").is_some();
    rt.block_on(async { side.execute("COMMIT").await.expect("commit") });
    let status = {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break Some(s);
            }
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let _ = reader.join();
    seen.extend(lines.try_iter());
    let log = seen.join("\n");
    assert!(
        named,
        "{command}: no WARN naming pid {pid} within 15 s (finished early: \
         {finished_early}):\n{log}"
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "{command} did not finish after the commit ({status:?}):\n{log}"
    );
    assert!(
        !log.to_lowercase().contains("slow statement"),
        "{command}: sqlx's statement log leaked:\n{log}"
    );
    assert!(
        slot_exists(&names.slot),
        "{command}: the slot was not created"
    );
}

/// `faucet run` on a state key whose bookmark `faucet replicate` left mid-copy refuses with
/// what to do instead of calling the bookmark malformed, and changes nothing: the replicate
/// then finishes the copy.
#[test]
fn run_on_an_interrupted_replicate_bookmark_says_to_finish_the_replicate() {
    let names = Names::new("foreign", "edge_foreign_");
    let src = names.quoted("items");
    let dst = names.quoted("copy");
    sql(&format!(
        "CREATE TABLE {src} (id bigint PRIMARY KEY, v text NOT NULL); \
         INSERT INTO {src} SELECT g, 'v' || g FROM generate_series(1, 5) g"
    ));
    let dir = Dir::new();
    dir.write(
        "p.yaml",
        pipeline(
            "edgeforeign",
            &names.cdc_source(&["items"]),
            &names.pg_sink("copy", ", write_mode: upsert, key: [id]"),
            "  batch_size: 1\n",
        ),
    );
    crate::support::expect_aborted(
        crate::support::pg::faucet_with_pg_url(URL_VAR)
            .args(["replicate", "p.yaml", "--quiet"])
            .current_dir(dir.path()),
        "after_state_put:3",
    );
    let state = std::fs::read_to_string(dir.join("state/edgeforeign.json")).expect("state");
    assert!(state.contains("snapshot"), "{state}");
    faucet(&dir, &["run", "p.yaml"])
        .expect_code(1)
        .stderr_has(&["bookmark of `faucet replicate`", "run `faucet replicate`"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("state/edgeforeign.json")).expect("state"),
        state,
        "the run changed the bookmark"
    );
    faucet(&dir, &["replicate", "p.yaml"]).expect_code(0);
    let got = id_v(&dst);
    assert_eq!(got.len(), 5, "{got:?}");
}

/// Two pipelines of the same `name` (each with its own state store) into two tables of one
/// schema: the atomic watermark's commit token belongs to a state key *and* a table, so the
/// second run starts at the beginning instead of re-anchoring at the first table's token
/// (which skipped everything and never created its table).
#[test]
fn the_same_name_into_two_tables_of_one_schema_delivers_each_wholly() {
    let names = Names::new("tok", "edge_tok_");
    let (a, b) = (Dir::new(), Dir::new());
    for (dir, table) in [(&a, "t_a"), (&b, "t_b")] {
        dir.write("in.csv", "id,v\n1,a\n2,b\n");
        dir.write(
            "p.yaml",
            pipeline(
                "orders",
                "{ type: csv, config: { path: ./in.csv, columns: { id: int } } }",
                &names.pg_sink(table, ""),
                "  delivery: effectively_once\n",
            ),
        );
    }
    faucet(&a, &["run", "p.yaml"])
        .expect_code(0)
        .stdout_has(&["2 records"]);
    faucet(&b, &["run", "p.yaml"])
        .expect_code(0)
        .stdout_has(&["2 records"]);
    for table in ["t_a", "t_b"] {
        assert_eq!(
            id_v(&names.quoted(table)),
            vec![(1, "a".to_owned()), (2, "b".to_owned())],
            "{table}"
        );
    }
    // Reruns move nothing, each from its own state and token.
    faucet(&a, &["run", "p.yaml"])
        .expect_code(0)
        .stdout_has(&["0 records"]);
    faucet(&b, &["run", "p.yaml"])
        .expect_code(0)
        .stdout_has(&["0 records"]);
}
