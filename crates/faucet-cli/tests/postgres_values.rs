//! One value, one JSON form, whichever path reads it (README, "Values"): a table with a
//! column of every PostgreSQL type the mapping knows, plus enum, domains, arrays of both,
//! composite, array of composite, ranges, inet, xml and edge values, read through the
//! binary by the `postgres` source, by `postgres-cdc` (the `after` of the inserts) and by
//! `faucet replicate`'s snapshot (the `after` of the `r` records): the three JSON texts of
//! each row are byte-identical, and equal to the expected literals. And the values read
//! come back unchanged when written to PostgreSQL again (years before 1 and after 9999,
//! json text), also from a CSV file.

use std::path::Path;
use std::process::Command;

use crate::support::pg::{Names, cleanup, exec, faucet_with_pg_url, query, text_rows};
use crate::support::{Dir, output_of_success, pg_pool, runtime};

const URL_VAR: &str = "FAUCET_VALUES_PG_URL";

/// Types, and the table with one row (id 0) of the shape before a column is added.
const SCHEMA_SQL: &str = r#"
CREATE SCHEMA «S»;
CREATE TYPE «S».mood AS ENUM ('sad', 'happy', 'it''s "odd"');
CREATE DOMAIN «S».posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN «S».label AS text;
CREATE TYPE «S».pair AS (a integer, b text);
CREATE TABLE «S».vals (
  id integer PRIMARY KEY,
  i2 smallint, i4 integer, i8 bigint, o oid, num numeric, f4 real, f8 double precision,
  b boolean, t text, vc varchar(20), bp char(3), nm name, ch "char", u uuid,
  d date, ts timestamp, tstz timestamptz, tm time, tmtz timetz, iv interval,
  j json, jb jsonb, by bytea,
  a_i4 integer[], a_t text[], a_num numeric[], a_tstz timestamptz[], a_d date[],
  a_jb jsonb[], a_by bytea[], a_b boolean[], a_f8 float8[], grid integer[],
  md «S».mood, di «S».posint, dt «S».label, a_md «S».mood[], a_di «S».posint[],
  cp «S».pair, a_cp «S».pair[], r int4range, tr tstzrange, ip inet, a_ip inet[],
  x xml, bits bit varying
);
"#;

/// After the slot exists: row 0, then a column of a type created mid-stream, then the rows
/// compared, then row 0 deleted (so the CDC stream sees two shapes of the table).
const ROWS_SQL: &str = r#"
INSERT INTO «S».vals (id) VALUES (0);
CREATE DOMAIN «S».cents AS numeric(10,2);
ALTER TABLE «S».vals ADD COLUMN late «S».cents;
INSERT INTO «S».vals VALUES
 (1, 1, 2, 3, 4, 1.10, 0.1, 0.1, true, 'plain', 'vc', 'ab', 'nm', 'c',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29', '2024-02-29 13:45:00.123456',
  '2024-02-29 12:45:00.5+00', '13:45:00', '13:45:00+01', '1 year 2 mons 3 days 04:05:06.5',
  '{"a": [1, 2.50]}', '{"a": [1, 2.50]}', '\xdeadbeef',
  '{1,2,3}', '{"a,b",NULL}', '{1.10,NaN}', '{"2024-02-29 12:45:00+00"}', '{2024-02-29}',
  '{"{\"k\": 1}"}', '{"\\xdead"}', '{t,f}', '{0.1,Infinity}', '{{1,2},{3,4}}',
  'sad', 5, 'label text', '{sad,"it''s \"odd\""}', '{1,2}', ROW(1, 'a b'),
  ARRAY[ROW(1, 'a b'), ROW(2, 'x')]::«S».pair[], '[1,5)',
  '[2024-01-01 00:00:00+00,2024-02-01 00:00:00+00)', '10.0.0.1/8', '{10.0.0.1,::1}',
  '<a>b</a>', B'101', 12.5),
 (2, -32768, -2147483648, -9223372036854775808, 4294967295, 'NaN', '-Infinity', '-0', false,
  E'tab\there\nnew "q" \\ back', '', '   ', '', '', '00000000-0000-0000-0000-000000000000',
  '4713-01-01 BC', '4713-01-01 00:00:00 BC', '294276-12-31 23:59:59.999999+00', '24:00:00',
  '00:00:00-15:59', '-178000000 years',
  E'{"dup":1,\n"dup":2, "sp" :  1}', '{"dup":1,"dup":2, "sp" :  1}', '\x',
  '{}', '{"NULL",""}', '{-Infinity}', '{infinity,-infinity}', '{"4713-01-01 BC","10000-01-01"}',
  '{null}', '{NULL}', '{}', '{NaN,-0}', '{}',
  'it''s "odd"', 2147483647, '', '{}', '{}', ROW(NULL, E'q"uo\\te,'), '{}', 'empty', '(,)',
  '::1', '{}', '', B'', -0.01);
INSERT INTO «S».vals (id) VALUES (3);
DELETE FROM «S».vals WHERE id = 0;
"#;

/// The expected JSON lines of rows 1–3 (identical on the three paths).
const EXPECTED: [&str; 3] = [
    concat!(
        r#"{"id":1,"i2":1,"i4":2,"i8":3,"o":4,"num":1.10,"f4":0.1,"f8":0.1,"b":true,"#,
        r#""t":"plain","vc":"vc","bp":"ab ","nm":"nm","ch":"c","#,
        r#""u":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11","d":"2024-02-29","#,
        r#""ts":"2024-02-29T13:45:00.123456","tstz":"2024-02-29T12:45:00.5Z","tm":"13:45:00","#,
        r#""tmtz":"13:45:00+01:00","iv":"P1Y2M3DT4H5M6.5S","j":{"a": [1, 2.50]},"#,
        r#""jb":{"a": [1, 2.50]},"by":"3q2+7w==","a_i4":[1,2,3],"a_t":["a,b",null],"#,
        r#""a_num":[1.10,"NaN"],"a_tstz":["2024-02-29T12:45:00Z"],"a_d":["2024-02-29"],"#,
        r#""a_jb":[{"k": 1}],"a_by":["3q0="],"a_b":[true,false],"a_f8":[0.1,"Infinity"],"#,
        r#""grid":[[1,2],[3,4]],"md":"sad","di":5,"dt":"label text","#,
        r#""a_md":["sad","it's \"odd\""],"a_di":[1,2],"cp":"(1,\"a b\")","#,
        r#""a_cp":["(1,\"a b\")","(2,x)"],"r":"[1,5)","#,
        r#""tr":"[\"2024-01-01 00:00:00+00\",\"2024-02-01 00:00:00+00\")","ip":"10.0.0.1/8","#,
        r#""a_ip":["10.0.0.1","::1"],"x":"<a>b</a>","bits":"101","late":12.50}"#
    ),
    concat!(
        r#"{"id":2,"i2":-32768,"i4":-2147483648,"i8":-9223372036854775808,"o":4294967295,"#,
        r#""num":"NaN","f4":"-Infinity","f8":-0.0,"b":false,"#,
        r#""t":"tab\there\nnew \"q\" \\ back","vc":"","bp":"   ","nm":"","ch":"","#,
        r#""u":"00000000-0000-0000-0000-000000000000","d":"-4712-01-01","#,
        r#""ts":"-4712-01-01T00:00:00","tstz":"+294276-12-31T23:59:59.999999Z","#,
        r#""tm":"24:00:00","tmtz":"00:00:00-15:59","iv":"P-178000000Y","#,
        r#""j":{"dup":1, "dup":2, "sp" :  1},"jb":{"sp": 1, "dup": 2},"by":"","#,
        r#""a_i4":[],"a_t":["NULL",""],"a_num":["-Infinity"],"a_tstz":["infinity","-infinity"],"#,
        r#""a_d":["-4712-01-01","+10000-01-01"],"a_jb":[null],"a_by":[null],"a_b":[],"#,
        r#""a_f8":["NaN",-0.0],"grid":[],"md":"it's \"odd\"","di":2147483647,"dt":"","#,
        r#""a_md":[],"a_di":[],"cp":"(,\"q\"\"uo\\\\te,\")","a_cp":[],"r":"empty","#,
        r#""tr":"(,)","ip":"::1","a_ip":[],"x":"","bits":"","late":-0.01}"#
    ),
    concat!(
        r#"{"id":3,"i2":null,"i4":null,"i8":null,"o":null,"num":null,"f4":null,"f8":null,"#,
        r#""b":null,"t":null,"vc":null,"bp":null,"nm":null,"ch":null,"u":null,"d":null,"#,
        r#""ts":null,"tstz":null,"tm":null,"tmtz":null,"iv":null,"j":null,"jb":null,"#,
        r#""by":null,"a_i4":null,"a_t":null,"a_num":null,"a_tstz":null,"a_d":null,"#,
        r#""a_jb":null,"a_by":null,"a_b":null,"a_f8":null,"grid":null,"md":null,"di":null,"#,
        r#""dt":null,"a_md":null,"a_di":null,"cp":null,"a_cp":null,"r":null,"tr":null,"#,
        r#""ip":null,"a_ip":null,"x":null,"bits":null,"late":null}"#
    ),
];

/// Drops the tests' slots, publications and schemas when dropped, also after a failed
/// assertion (a leaked slot would hold WAL and take one of the server's slots).
struct Cleanup(Vec<Names>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        runtime().block_on(async {
            let pool = pg_pool().await;
            for names in &self.0 {
                cleanup(&pool, names).await;
            }
        });
    }
}

fn pipeline(dir: &Path, source: &str, sink: &str) {
    std::fs::write(
        dir.join("faucet.yaml"),
        format!(
            "version: 1\nname: values\npipeline:\n  source: {source}\n  sink: {sink}\n  \
             state: {{ type: file, config: {{ path: ./state }} }}\n  batch_size: 2\n"
        ),
    )
    .expect("config");
}

fn cdc_source(names: &Names, schema: &str) -> String {
    format!(
        "{{ type: postgres-cdc, config: {{ connection_url: \"${{env:{URL_VAR}}}\", \
         slot_name: {}, publication: {}, tables: [{schema}.vals], create_publication: true }} }}",
        names.slot, names.publication
    )
}

fn faucet(dir: &Path, command: &str) -> Command {
    let mut c = faucet_with_pg_url(URL_VAR);
    c.args([command, "--quiet"]).current_dir(dir);
    c
}

/// The lines of `out.jsonl` in `dir`.
fn lines(dir: &Dir) -> Vec<String> {
    dir.lines("out.jsonl")
}

/// The text of the `after` member of a change record's JSON line, as written.
fn after_text(line: &str) -> &str {
    let start = line.find(r#","after":"#).expect("after") + r#","after":"#.len();
    let end = line
        .rfind(r#","unchanged_toast":"#)
        .expect("unchanged_toast");
    &line[start..end]
}

/// The `after` texts of the records of `op`, by row id, ids 1–3.
fn afters(lines: &[String], op: &str) -> Vec<String> {
    let mut rows: Vec<(i64, String)> = lines
        .iter()
        .filter(|l| l.starts_with(&format!(r#"{{"op":"{op}""#)))
        .map(|l| {
            let after = after_text(l).to_owned();
            let id = serde_json::from_str::<serde_json::Value>(&after).expect("after")["id"]
                .as_i64()
                .expect("id");
            (id, after)
        })
        .filter(|(id, _)| (1..=3).contains(id))
        .collect();
    rows.sort();
    rows.into_iter().map(|(_, a)| a).collect()
}

#[test]
fn every_postgres_type_reads_byte_identically_on_the_query_cdc_and_replicate_paths() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let guard = Cleanup(vec![Names::new("vals_cdc"), Names::new("vals_repl")]);
    let (cdc, repl) = (&guard.0[0], &guard.0[1]);
    let s = cdc.schema.clone();
    rt.block_on(exec(&pool, &SCHEMA_SQL.replace("«S»", &s)));

    // postgres-cdc: a first run creates the slot; the second reads the changes after it.
    let cdc_dir = Dir::new();
    pipeline(
        cdc_dir.path(),
        &cdc_source(cdc, &s),
        "{ type: jsonl, config: { path: ./out.jsonl } }",
    );
    output_of_success(
        &mut faucet(cdc_dir.path(), "run"),
        "the run creating the slot",
    );
    rt.block_on(exec(&pool, &ROWS_SQL.replace("«S»", &s)));
    output_of_success(&mut faucet(cdc_dir.path(), "run"), "the postgres-cdc run");
    let cdc_lines = lines(&cdc_dir);
    let cdc_rows = afters(&cdc_lines, "c");
    // Row 0 came before the column was added, in the same stream.
    assert!(
        cdc_lines.iter().any(|l| l.starts_with(r#"{"op":"c""#)
            && l.contains(r#""after":{"id":0,"#)
            && !l.contains(r#""late""#)),
        "{cdc_lines:?}"
    );

    // The postgres source.
    let query_dir = Dir::new();
    pipeline(
        query_dir.path(),
        &format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:{URL_VAR}}}\", table: {s}.vals }} }}"
        ),
        "{ type: jsonl, config: { path: ./out.jsonl } }",
    );
    output_of_success(
        &mut faucet(query_dir.path(), "run"),
        "the postgres source run",
    );
    let query_rows = lines(&query_dir);

    // faucet replicate: the snapshot's `r` records.
    let repl_dir = Dir::new();
    pipeline(
        repl_dir.path(),
        &cdc_source(repl, &s),
        "{ type: jsonl, config: { path: ./out.jsonl } }",
    );
    output_of_success(
        &mut faucet(repl_dir.path(), "replicate"),
        "faucet replicate",
    );
    let repl_rows = afters(&lines(&repl_dir), "r");

    drop(guard);

    for (i, want) in EXPECTED.iter().enumerate() {
        assert_eq!(
            query_rows.get(i).map(String::as_str),
            Some(*want),
            "postgres source, row {}",
            i + 1
        );
        assert_eq!(
            cdc_rows.get(i).map(String::as_str),
            Some(*want),
            "postgres-cdc, row {}",
            i + 1
        );
        assert_eq!(
            repl_rows.get(i).map(String::as_str),
            Some(*want),
            "replicate, row {}",
            i + 1
        );
    }
    assert_eq!(query_rows.len(), 3);
}

#[test]
fn expanded_years_and_json_text_are_written_back_unchanged_from_postgres_and_csv() {
    let rt = runtime();
    let pool = rt.block_on(pg_pool());
    let guard = Cleanup(vec![Names::new("vals_back")]);
    let s = &guard.0[0].schema;
    rt.block_on(exec(
        &pool,
        &r#"CREATE SCHEMA «S»;
        CREATE TABLE «S».src (id integer PRIMARY KEY, d date, ts timestamp, tstz timestamptz,
          a_d date[], j json, jb jsonb);
        CREATE TABLE «S».dst (LIKE «S».src);
        CREATE TABLE «S».from_csv (id integer, d date, ts timestamp, tstz timestamptz);
        INSERT INTO «S».src VALUES
         (1, '4713-01-01 BC', '4713-01-01 00:00:00.5 BC', '4714-11-24 00:00:00+00 BC',
          '{"0001-01-01 BC","0044-03-15 BC"}', E' {"dup":1,\n"dup":2, "sp" :  1} ',
          '{"b": 1, "a": [1.10]}'),
         (2, '294276-12-31', '294276-12-31 23:59:59.999999', '294276-12-31 23:59:59.999999+00',
          '{10000-01-01,9999-12-31}', '[1e400, "x\ty"]', '"s"'),
         (3, 'infinity', '-infinity', 'infinity', '{-infinity}', 'null', 'null');"#
            .replace("«S»", s),
    ));
    let dir = Dir::new();
    pipeline(
        dir.path(),
        &format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:{URL_VAR}}}\", table: {s}.src }} }}"
        ),
        &format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:{URL_VAR}}}\", table: {s}.dst }} }}"
        ),
    );
    output_of_success(&mut faucet(dir.path(), "run"), "postgres to postgres");
    let text = "SELECT id::text, d::text, ts::text, tstz::text, a_d::text, j::text, jb::text FROM";
    let src = text_rows(&format!("{text} {s}.src ORDER BY id"));
    let dst = text_rows(&format!("{text} {s}.dst ORDER BY id"));
    assert_eq!(dst, src);
    assert_eq!(
        dst[0][5].as_deref(),
        Some(" {\"dup\":1,\n\"dup\":2, \"sp\" :  1} "),
        "json is written back byte for byte"
    );

    // A CSV file in ISO 8601's expanded form lands as the same PostgreSQL values.
    let csv = Dir::new();
    csv.write(
        "in.csv",
        "id,d,ts,tstz\n\
         1,-4712-01-01,-4712-01-01T00:00:00.5,-4713-11-24T00:00:00Z\n\
         2,+10000-01-01,0000-12-31T23:59:59,+10000-01-01T01:00:00+01:00\n",
    );
    pipeline(
        csv.path(),
        "{ type: csv, config: { path: ./in.csv, columns: { id: int, d: date, ts: timestamp, tstz: timestamptz } } }",
        &format!(
            "{{ type: postgres, config: {{ connection_url: \"${{env:{URL_VAR}}}\", table: {s}.from_csv }} }}"
        ),
    );
    output_of_success(&mut faucet(csv.path(), "run"), "csv to postgres");
    let got: Vec<(i32, String, String, String)> = query(&format!(
        "SELECT id, d::text, ts::text, tstz::text FROM {s}.from_csv ORDER BY id"
    ));
    assert_eq!(
        got,
        [
            (
                1,
                "4713-01-01 BC".to_owned(),
                "4713-01-01 00:00:00.5 BC".to_owned(),
                "4714-11-24 00:00:00+00 BC".to_owned()
            ),
            (
                2,
                "10000-01-01".to_owned(),
                "0001-12-31 23:59:59 BC".to_owned(),
                "10000-01-01 00:00:00+00".to_owned()
            ),
        ]
    );
}
