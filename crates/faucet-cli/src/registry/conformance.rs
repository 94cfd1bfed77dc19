//! Where every registered source and sink runs the conformance battery
//! (`faucet_core::testing::conformance`), one line per connector, and the test that holds the
//! registry to it: a connector added to `source.rs` or `sink.rs` without its line here, a
//! line naming a test that does not exist, or a test that skips one of the kind's required
//! checks fails `every_registered_connector_runs_the_conformance_battery`; so does a test file
//! that is not a module of its crate's `tests/main.rs` (it would never run).
//!
//! A line is `(kind, type, test file, test functions)`: the file relative to the repository
//! root, the functions (top-level `fn`s in it) that together call every check of
//! [`REQUIRED`] for the kind. A check not required (`errors_not_panics`,
//! `cancellation_flushes`) may be called too; the battery's own table says which apply.

/// The checks each kind must call: a source's config, bounded pages and bookmark round
/// trip; a sink's config, truthful guarantee and durable flush.
const REQUIRED: &[(&str, &[&str])] = &[
    (
        "source",
        &[
            "config_is_strict",
            "source_pages_are_bounded",
            "source_bookmarks_round_trip",
        ],
    ),
    (
        "sink",
        &[
            "config_is_strict",
            "sink_guarantee_is_truthful",
            "sink_flush_is_durable",
        ],
    ),
];

/// One line per registered connector: `(kind, type, test file, test functions)`.
#[rustfmt::skip]
const RUNS: &[(&str, &str, &str, &[&str])] = &[
    ("source", "csv", "crates/faucet-connectors/tests/files_csv_resume.rs", &["the_conformance_battery_passes"]),
    ("source", "jsonl", "crates/faucet-connectors/tests/files_jsonl.rs", &["source_resumes_from_every_bookmark"]),
    ("source", "postgres", "crates/faucet-connectors/tests/postgres_query.rs", &["problems_are_typed_errors", "full_table_reads_every_airport_exactly", "incremental_reads_airports_and_resumes_from_every_page"]),
    ("source", "postgres-cdc", "crates/faucet-connectors/tests/postgres_cdc.rs", &["passes_the_source_conformance_battery"]),
    ("source", "mysql", "crates/faucet-connectors/tests/mysql_query.rs", &["the_config_is_strict_and_failures_are_errors", "a_read_stopped_mid_table_resumes_mid_table"]),
    ("source", "mysql-cdc", "crates/faucet-connectors/tests/mysql_cdc.rs", &["passes_the_source_conformance_battery"]),
    ("source", "mongodb-cdc", "crates/faucet-connectors/tests/mongodb_cdc.rs", &["bookmarks_resume_exactly_and_an_idle_stream_moves_its_position"]),
    ("sink", "jsonl", "crates/faucet-connectors/tests/files_jsonl.rs", &["sink_check_reports_an_unusable_path_and_the_battery_passes"]),
    ("sink", "postgres", "crates/faucet-connectors/tests/postgres_sink.rs", &["append_and_upsert_keep_their_promises"]),
    ("sink", "mysql", "crates/faucet-connectors/tests/mysql_sink.rs", &["append_and_upsert_keep_their_promises"]),
    ("sink", "redis-streams", "crates/faucet-connectors/tests/redis_streams_sink.rs", &["conformance_battery"]),
    ("sink", "nats", "crates/faucet-connectors/tests/nats_sink.rs", &["conformance_battery"]),
    ("sink", "kafka", "crates/faucet-connectors/tests/kafka_sink.rs", &["conformance_battery"]),
    ("sink", "sqlite", "crates/faucet-connectors/tests/sqlite_sink.rs", &["append_and_upsert_keep_their_promises"]),
    ("sink", "mongodb", "crates/faucet-connectors/tests/mongodb_sink.rs", &["passes_the_sink_conformance_battery"]),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::{REQUIRED, RUNS};
    use crate::registry::{SinkType, SourceType};

    /// The body of the top-level `fn name(` in `src`: from its line to the next line that is
    /// `}` (rustfmt's end of a top-level item); `None` when there is no such function.
    fn body<'a>(src: &'a str, name: &str) -> Option<&'a str> {
        let start = src
            .match_indices(&format!("fn {name}("))
            .map(|(i, _)| i)
            .find(|&i| {
                let line_start = src[..i].rfind('\n').map_or(0, |n| n + 1);
                !src[line_start..i].starts_with(char::is_whitespace)
            })?;
        let end = src[start..].find("\n}").map_or(src.len(), |e| start + e);
        Some(&src[start..end])
    }

    /// The conformance checks `body` calls (`conformance::<name>`).
    fn checks(body: &str) -> BTreeSet<String> {
        body.split("conformance::")
            .skip(1)
            .map(|rest| {
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_registered_connector_runs_the_conformance_battery() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let registered: BTreeSet<(&str, &str)> = SourceType::ALL
            .iter()
            .map(|k| ("source", k.name()))
            .chain(SinkType::ALL.iter().map(|k| ("sink", k.name())))
            .collect();
        let listed: BTreeSet<(&str, &str)> = RUNS.iter().map(|(k, t, _, _)| (*k, *t)).collect();
        let missing: Vec<_> = registered.difference(&listed).collect();
        assert!(
            missing.is_empty(),
            "registered connectors with no conformance run: {missing:?}; add a line for each to \
             RUNS in crates/faucet-cli/src/registry/conformance.rs naming the test that calls \
             the battery"
        );
        let stale: Vec<_> = listed.difference(&registered).collect();
        assert!(
            stale.is_empty(),
            "RUNS lists unregistered connectors: {stale:?}"
        );
        assert_eq!(
            listed.len(),
            RUNS.len(),
            "a connector is listed twice in RUNS"
        );

        for (kind, ty, file, tests) in RUNS {
            let src = std::fs::read_to_string(root.join(file))
                .unwrap_or_else(|e| panic!("{kind} {ty}: {file}: {e}"));
            // The file must be a module of its crate's one test binary, or it never runs.
            let path = Path::new(file);
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let main = root.join(path.with_file_name("main.rs"));
            let main = std::fs::read_to_string(&main)
                .unwrap_or_else(|e| panic!("{kind} {ty}: {}: {e}", main.display()));
            assert!(
                main.lines().any(|l| l.trim() == format!("mod {stem};")),
                "{kind} {ty}: {file} is not a module of {} (`mod {stem};`)",
                path.with_file_name("main.rs").display()
            );
            let mut called = BTreeSet::new();
            for test in *tests {
                let body = body(&src, test)
                    .unwrap_or_else(|| panic!("{kind} {ty}: no top-level `fn {test}(` in {file}"));
                called.extend(checks(body));
            }
            let required = REQUIRED
                .iter()
                .find(|(k, _)| k == kind)
                .map(|(_, r)| *r)
                .unwrap_or_else(|| panic!("no required checks for kind {kind}"));
            let skipped: Vec<_> = required.iter().filter(|c| !called.contains(**c)).collect();
            assert!(
                skipped.is_empty(),
                "{kind} {ty}: {tests:?} in {file} do not call conformance::{skipped:?}"
            );
        }
    }

    /// The checker itself can fail: a body without the calls, and a missing function.
    #[test]
    fn the_check_finds_calls_and_misses() {
        let src = "fn a() {\n    conformance::config_is_strict::<C>(&v);\n    x::conformance::sink_flush_is_durable(s)\n}\n\nfn b() {\n}\n";
        assert_eq!(
            checks(body(src, "a").expect("a")),
            BTreeSet::from([
                "config_is_strict".to_owned(),
                "sink_flush_is_durable".to_owned()
            ])
        );
        assert!(checks(body(src, "b").expect("b")).is_empty());
        assert!(body(src, "c").is_none());
    }
}
