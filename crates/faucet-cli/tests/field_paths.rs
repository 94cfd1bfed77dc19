//! A bad field of any connector or state store is named once by its full path in the
//! pipeline file (`pipeline.source.config.replication_key`): each connector names its fields
//! relative to its own config, and the registry puts the config's place before them once.

use crate::support::{Dir, numbered_csv};

/// The source, sink and state lines of a pipeline, each a YAML flow mapping.
fn pipeline(source: &str, sink: &str, state: &str) -> String {
    format!(
        "version: 1\nname: p\npipeline:\n  source: {source}\n  sink: {sink}\n  state: {state}\n"
    )
}

const CSV: &str = "{ type: csv, config: { path: ./data.csv } }";
const JSONL_SINK: &str = "{ type: jsonl, config: { path: ./out/data.jsonl } }";
const FILE_STATE: &str = "{ type: file, config: { path: ./state } }";

/// `faucet validate` on `yaml` exits 2 and prints ``invalid configuration at `field`: ``
/// with exactly `field` (no doubled `config.` segment), and `says`.
#[track_caller]
fn names_exactly(yaml: &str, field: &str, says: &str) {
    names_exactly_in("validate", yaml, field, says);
}

/// [`names_exactly`] for `faucet <command>`.
#[track_caller]
fn names_exactly_in(command: &str, yaml: &str, field: &str, says: &str) {
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 3, true));
    dir.write("data.jsonl", "{\"id\": 1}\n");
    dir.write("p.yaml", yaml);
    let run = dir.faucet(&[command, "p.yaml"]);
    run.expect_code(2)
        .stderr_has(&[&format!("invalid configuration at `{field}`: "), says]);
    for doubled in [
        "config.source.config",
        "config.sink.config",
        "config.state.config",
        "config.config",
    ] {
        assert!(!run.stderr.contains(doubled), "{}", run.stderr);
    }
}

#[test]
fn a_file_connectors_bad_field_is_named_by_its_path() {
    names_exactly(
        &pipeline(
            "{ type: csv, config: { path: ./data.csv, delimiter: ';;' } }",
            JSONL_SINK,
            FILE_STATE,
        ),
        "pipeline.source.config.delimiter",
        "exactly one ASCII character",
    );
    names_exactly(
        &pipeline(
            "{ type: jsonl, config: { path: ./data.jsonl, max_line_bytes: 0 } }",
            JSONL_SINK,
            FILE_STATE,
        ),
        "pipeline.source.config.max_line_bytes",
        "at least 1",
    );
    names_exactly(
        &pipeline(CSV, "{ type: jsonl, config: { path: '' } }", FILE_STATE),
        "pipeline.sink.config.path",
        "must name a JSON Lines file",
    );
    names_exactly(
        &pipeline(CSV, JSONL_SINK, "{ type: file, config: { path: '' } }"),
        "pipeline.state.config.path",
        "is empty",
    );
}

/// The SQL query source's read fields (one config of `sql::query` for every database), each
/// bad one named by its path, for `type: kind` at `url`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn query_source_fields_are_named(kind: &str, url: &str) {
    let query = |extra: &str| {
        format!("{{ type: {kind}, config: {{ connection_url: '{url}', table: t{extra} }} }}")
    };
    names_exactly(
        &pipeline(
            &query(", replication_method: incremental"),
            JSONL_SINK,
            FILE_STATE,
        ),
        "pipeline.source.config.replication_key",
        "is required",
    );
    names_exactly(
        &pipeline(
            &query(", replication_method: incremental, replication_key: [id, id]"),
            JSONL_SINK,
            FILE_STATE,
        ),
        "pipeline.source.config.replication_key[1]",
        "listed twice",
    );
    names_exactly(
        &pipeline(&query(", query: 'select 1'"), JSONL_SINK, FILE_STATE),
        "pipeline.source.config.query",
        "not both",
    );
}

#[cfg(feature = "mysql")]
#[test]
fn a_mysql_connectors_bad_field_is_named_by_its_path() {
    const URL: &str = "mysql://u@127.0.0.1:1/db";
    query_source_fields_are_named("mysql", URL);
    names_exactly(
        &pipeline(
            "{ type: mysql, config: { connection_url: 'postgres://u@h/db', table: t } }",
            JSONL_SINK,
            FILE_STATE,
        ),
        "pipeline.source.config.connection_url",
        "mysql://",
    );
    names_exactly(
        &pipeline(
            &format!("{{ type: mysql, config: {{ connection_url: '{URL}', table: a.b.c }} }}"),
            JSONL_SINK,
            FILE_STATE,
        ),
        "pipeline.source.config.table",
        "not `table` or `database.table`",
    );
    let sink = |extra: &str| {
        format!("{{ type: mysql, config: {{ connection_url: '{URL}', table: t{extra} }} }}")
    };
    names_exactly(
        &pipeline(CSV, &sink(", write_mode: upsert"), FILE_STATE),
        "pipeline.sink.config.key",
        "is required",
    );
    names_exactly(
        &pipeline(
            CSV,
            &sink(", write_mode: upsert, key: [id, id]"),
            FILE_STATE,
        ),
        "pipeline.sink.config.key[1]",
        "listed twice",
    );
    names_exactly(
        &pipeline(CSV, &sink(", mode: append"), FILE_STATE),
        "pipeline.sink.config.mode",
        "unknown field `mode`",
    );
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_connectors_bad_field_is_named_by_its_path() {
    const URL: &str = "postgres://u@127.0.0.1:1/db";
    query_source_fields_are_named("postgres", URL);
    let cdc = pipeline(
        &format!(
            "{{ type: postgres-cdc, config: {{ connection_url: '{URL}', slot_name: Bad-Slot, \
             publication: p, tables: [public.t] }} }}"
        ),
        JSONL_SINK,
        FILE_STATE,
    );
    // `faucet replicate` builds its own snapshot source from the same config.
    for command in ["validate", "replicate"] {
        names_exactly_in(
            command,
            &cdc,
            "pipeline.source.config.slot_name",
            "replication slot name",
        );
    }
    names_exactly(
        &pipeline(
            CSV,
            &format!(
                "{{ type: postgres, config: {{ connection_url: '{URL}', table: t, write_mode: upsert }} }}"
            ),
            FILE_STATE,
        ),
        "pipeline.sink.config.key",
        "is required for `write_mode: upsert`",
    );
    names_exactly(
        &pipeline(
            CSV,
            &format!("{{ type: postgres, config: {{ connection_url: '{URL}', table: a.b.c }} }}"),
            FILE_STATE,
        ),
        "pipeline.sink.config.table",
        "`a.b.c` is not `table` or `schema.table`",
    );
}

#[cfg(feature = "state-postgres")]
#[test]
fn a_postgres_state_stores_bad_field_is_named_by_its_path() {
    names_exactly(
        &pipeline(
            CSV,
            JSONL_SINK,
            "{ type: postgres, config: { url: 'postgres://u@127.0.0.1:1/db', table: bad-name } }",
        ),
        "pipeline.state.config.table",
        "bad-name",
    );
}

#[cfg(feature = "state-redis")]
#[test]
fn a_redis_state_stores_bad_field_is_named_by_its_path() {
    names_exactly(
        &pipeline(
            CSV,
            JSONL_SINK,
            "{ type: redis, config: { url: 'redis://127.0.0.1:1/', prefix: 'a b' } }",
        ),
        "pipeline.state.config.prefix",
        "no spaces",
    );
}

/// A config error the postgres sink finds only once connected (an upsert `key` the table has
/// no unique index on) is named by its path too, and nothing is written.
#[cfg(feature = "postgres")]
#[test]
fn a_sink_field_found_wrong_once_open_is_named_by_its_path() {
    use crate::support::pg::{query, sql, unique_suffix};
    let schema = format!("paths_{}", unique_suffix());
    sql(&format!(
        "CREATE SCHEMA {schema}; CREATE TABLE {schema}.t (id bigint, name text, amount numeric)"
    ));
    let dir = Dir::new();
    dir.write("data.csv", numbered_csv(1, 3, true));
    dir.write(
        "p.yaml",
        pipeline(
            CSV,
            &format!(
                "{{ type: postgres, config: {{ connection_url: '{}', table: {schema}.t, \
                 write_mode: upsert, key: [id] }} }}",
                crate::support::pg_url()
            ),
            FILE_STATE,
        ),
    );
    let run = dir.faucet(&["run", "p.yaml"]);
    let rows: Vec<(i64,)> = query(&format!("SELECT count(*) FROM {schema}.t"));
    sql(&format!("DROP SCHEMA {schema} CASCADE"));
    run.expect_code(2).stderr_has(&[
        "invalid configuration at `pipeline.sink.config.key`: ",
        "upsert needs a primary key or unique index",
    ]);
    assert_eq!(rows, [(0,)], "nothing written");
}

#[cfg(feature = "mongodb")]
#[test]
fn a_mongodb_sources_bad_field_is_named_by_its_path() {
    const URL: &str = "mongodb://u:secret@127.0.0.1:1/";
    let source = |collections: &str, extra: &str| {
        format!(
            "{{ type: mongodb-cdc, config: {{ connection_url: '{URL}', collections: \
             {collections}{extra} }} }}"
        )
    };
    names_exactly(
        &pipeline(&source("[shop.a, nodb]", ""), JSONL_SINK, FILE_STATE),
        "pipeline.source.config.collections[1]",
        "names no collection",
    );
    names_exactly(
        &pipeline(&source("[]", ""), JSONL_SINK, FILE_STATE),
        "pipeline.source.config.collections",
        "at least one collection",
    );
    names_exactly(
        &pipeline(
            "{ type: mongodb-cdc, config: { connection_url: 'mysql://h/db', collections: [a.b] } }",
            JSONL_SINK,
            FILE_STATE,
        ),
        "pipeline.source.config.connection_url",
        "mongodb://",
    );
    names_exactly(
        &pipeline(
            &source("[a.b]", ", full_document: default"),
            JSONL_SINK,
            FILE_STATE,
        ),
        "pipeline.source.config.full_document",
        "update_lookup",
    );
}

#[cfg(feature = "mongodb")]
#[test]
fn a_mongodb_sinks_bad_field_is_named_by_its_path() {
    let sink = |url: &str, collection: &str, extra: &str| {
        format!(
            "{{ type: mongodb, config: {{ connection_url: '{url}', collection: '{collection}'{extra} }} }}"
        )
    };
    const URL: &str = "mongodb://u:secret@127.0.0.1:1/";
    names_exactly(
        &pipeline(CSV, &sink(URL, "orders", ""), FILE_STATE),
        "pipeline.sink.config.collection",
        "names no database",
    );
    names_exactly(
        &pipeline(CSV, &sink(URL, "{schema}.{table}", ""), FILE_STATE),
        "pipeline.sink.config.collection",
        "name one in the URL's path",
    );
    names_exactly(
        &pipeline(CSV, &sink(URL, "shop.orders", ", key: [id]"), FILE_STATE),
        "pipeline.sink.config.key",
        "write_mode: upsert",
    );
    names_exactly(
        &pipeline(
            CSV,
            &sink(URL, "shop.orders", ", write_mode: upsert, key: [id, id]"),
            FILE_STATE,
        ),
        "pipeline.sink.config.key[1]",
        "listed twice",
    );
    names_exactly(
        &pipeline(CSV, &sink("redis://h/", "shop.orders", ""), FILE_STATE),
        "pipeline.sink.config.connection_url",
        "mongodb://",
    );
}
