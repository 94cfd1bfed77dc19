//! Where a change source's tables go in a SQL sink, refused before anything connects when a
//! run would fail or lose rows there (issue "a whole database through one change stream"):
//!
//! * change records of **several tables upserted into one table** (a sink without routing):
//!   the run would fail at its first page; the fix is a `table` template or `tables:`;
//! * a route that sends **two listed source tables to one target** (`table: "replica.{table}"`
//!   for `a.orders` and `b.orders`): their keys would overwrite each other's rows;
//! * a listed table the route sends **nowhere** (`tables:` without it, and no `table`
//!   template for the others).
//!
//! The source says what it reads ([`super::source::SourceEntry::change_feed`]), the sink its
//! route ([`super::sink::SinkEntry::route`]); [`check`] compares them from the configs
//! alone, so `faucet validate`, `doctor`, `run`, `replicate` and `serve` refuse alike.
//! Appending change records of several tables into one table (an audit log with a `table`
//! column) is fine and passes.
//!
//! A file sink whose path is a template over the source table (`jsonl`'s
//! `path: "out/{table}.jsonl"`, [`SinkConfig::file_route`]) is checked by [`check_files`]:
//!
//! * a source that is **not a change source** (a file, a query: its records name no table)
//!   would fail at its first record; the fix is a fixed path;
//! * **two listed source tables rendering one file** (`{table}` for `a.orders` and
//!   `b.orders`) are refused as the SQL sinks' case is: their records would be mixed in one
//!   file the name promises is one table's.
//!
//! A fixed path takes the records of every table into one file (each line names its
//! `table`) and passes.
//!
//! A `tables` pattern (`shop.*`, `faucet_connectors::sql::table_pattern`) names no tables
//! offline: it counts as several tables for the first rule, and as a table the route must
//! send somewhere (a `table` template) for the third; which tables it matches, and whether
//! two of them meet in one target, is known only when the source resolves it — the sink
//! then refuses the second table routed to a taken target (a data error naming both).

use faucet_core::{FaucetError, Source};

use super::{SinkConfig, SourceConfig};

/// Applies the file-sink rules of the module docs to a row's `source` config (`built`: the
/// source built from it) and `sink` config.
///
/// # Errors
/// [`FaucetError::Config`] at `pipeline.sink.config.path`, naming the source, the tables
/// and the fix.
pub(crate) fn check_files(
    source: &SourceConfig,
    built: &dyn Source,
    sink: &SinkConfig,
) -> Result<(), FaucetError> {
    let Some(template) = sink.file_route() else {
        return Ok(());
    };
    if built.record_schema().is_none() {
        return Err(FaucetError::config(
            "pipeline.sink.config.path",
            format!(
                "`{template}` names a file per source table, and the `{}` source's records \
                 have no source table (it is not a change source); use a fixed path",
                source.type_name(),
            ),
        ));
    }
    let Some(feed) = source.change_feed() else {
        return Ok(());
    };
    let mut by_file: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for table in feed.tables.iter().filter(|t| !t.contains('*')) {
        let qualified = feed.endpoint.qualify(table);
        if let Ok(file) = template.render(Some(&qualified)) {
            by_file.entry(file).or_default().push(qualified);
        }
    }
    if let Some((file, sources)) = by_file.iter().find(|(_, s)| s.len() > 1) {
        return Err(FaucetError::config(
            "pipeline.sink.config.path",
            format!(
                "the path sends the source tables {} to one file, {file}: their records                  would be mixed in a file named for one table; use a template that keeps them                  apart (`\"{{schema}}_{{table}}.jsonl\"`, `\"{{schema}}/{{table}}.jsonl\"`),                  or a fixed path for one file of every table",
                sources.join(" and "),
            ),
        ));
    }
    Ok(())
}

/// Applies the module's rules to a row's `source` and `sink` configs (`built`: the sink
/// built from `sink`).
///
/// # Errors
/// [`FaucetError::Config`] at `pipeline.sink.config.table` (or `.tables`), naming the
/// source tables, the target and the fix.
#[cfg(feature = "sql")]
pub(crate) fn check(
    source: &SourceConfig,
    sink: &SinkConfig,
    built: &dyn faucet_core::Sink,
) -> Result<(), FaucetError> {
    let Some(feed) = source.change_feed() else {
        return Ok(());
    };
    if sink.written_table().is_none() {
        return Ok(());
    }
    let qualified: Vec<String> = feed
        .tables
        .iter()
        .filter(|t| !t.contains('*'))
        .map(|t| feed.endpoint.qualify(t))
        .collect();
    let patterns: Vec<&String> = feed.tables.iter().filter(|t| t.contains('*')).collect();
    let Some(route) = sink.route() else {
        let mut distinct = qualified.clone();
        distinct.extend(patterns.iter().map(|p| (*p).clone()));
        distinct.sort();
        distinct.dedup();
        if (distinct.len() > 1 || !patterns.is_empty()) && built.upserts_by().is_some() {
            return Err(FaucetError::config(
                "pipeline.sink.config.table",
                format!(
                    "the `{}` source reads {} ({}), and the `{}` sink upserts into one \
                     table: the change records of one table would be applied to another's \
                     rows, so the run would refuse its first page. Route each source table \
                     to its own target: `table: \"<schema>.{{table}}\"` (or \
                     `\"{{schema}}_{{table}}\"`), or `tables: {{{}: <target>, …}}`",
                    source.type_name(),
                    if patterns.is_empty() {
                        format!("{} tables", distinct.len())
                    } else {
                        "the tables of a pattern".to_owned()
                    },
                    distinct.join(", "),
                    built.connector(),
                    distinct[0],
                ),
            ));
        }
        return Ok(());
    };
    let (shared, mut unrouted) = route.collisions(qualified.iter().map(String::as_str));
    unrouted.extend(
        patterns
            .iter()
            .filter(|p| route.target_name(p).is_err())
            .map(|p| (*p).clone()),
    );
    if let Some((target, sources)) = shared.first() {
        return Err(FaucetError::config(
            "pipeline.sink.config.table",
            format!(
                "the route sends the source tables {} to one target, {target}: their rows \
                 would overwrite each other's; use a template that keeps them apart \
                 (`\"{{schema}}_{{table}}\"`), or give each its own target in `tables:`",
                sources.join(" and "),
            ),
        ));
    }
    if !unrouted.is_empty() {
        return Err(FaucetError::config(
            "pipeline.sink.config.tables",
            format!(
                "the `{}` source reads {}, which the sink routes nowhere (not in `tables:`, \
                 and no `table` template for the others); add them to `tables:`, set \
                 `table: \"<schema>.{{table}}\"` for the rest, or take them out of the \
                 source's `tables`",
                source.type_name(),
                unrouted.join(", "),
            ),
        ));
    }
    Ok(())
}
