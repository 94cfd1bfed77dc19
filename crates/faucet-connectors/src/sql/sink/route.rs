//! Routing: which target table of a SQL sink takes the change records of each source table,
//! the same for every SQL dialect.
//!
//! A SQL sink's `table` is either one fixed name (every record into one table, as always) or
//! a [`TableTemplate`] over the record's source table (`replica.{table}`,
//! `{schema}_{table}`); beside it, `tables:` maps source tables to targets:
//!
//! ```yaml
//! table: "replica.{table}"            # optional with `tables:`: the default for the others
//! tables:
//!   public.orders: replica.orders_copy            # a target name
//!   public.events: {table: replica.events_log, write_mode: append}
//!   public.lines: {table: replica.lines, key: [order_id, line_no]}
//! ```
//!
//! A sink routes ([`Route`]) when its `table` has a placeholder or `tables:` is given. A
//! record is routed by its `table` field (the source table, qualified as its system
//! qualifies it: PostgreSQL `schema.table`, MySQL `database.table`): the `tables:` entry of
//! that name, else the `table` template; a record whose table maps to nothing is a
//! [`FaucetError::Data`] naming it and the fix — there is no `unmapped: skip`: a change
//! stream that silently drops a table's changes is a copy that silently diverges. Two source
//! tables routed to one target are refused (a config error for two `tables:` entries, a data
//! error when a template renders one name for two of them): their keys would overwrite each
//! other's rows.
//!
//! Every target of a route is written in the same page transaction, with one commit token:
//! the engine ([`super::SqlSinkWriter`]) splits a page by source table. `write_mode` and
//! `key` are the sink's unless an entry sets its own; with `write_mode: upsert` and no `key`
//! the source's key of the table is used (its primary key, else its first unique key: what
//! [`faucet_core::Source::table_keys`] tells the writer through
//! [`faucet_core::SinkWriter::source_keys`]).
//!
//! The commit token and fence tables of a routed sink live in the schema (database) the
//! `table` template fixes before its `.` (`replica` for `replica.{table}`), else where an
//! unqualified name lands (PostgreSQL: the session's `search_path`, normally `public`;
//! MySQL: the connection URL's database) — [`Route::home`].

use std::collections::BTreeMap;

use serde::Deserialize;

use faucet_core::FaucetError;
use faucet_core::keys::TableKeys;
use faucet_core::route::TableTemplate;

use crate::sql::WriteMode;
use crate::sql::sink::fence::FENCES;
use crate::sql::sink::token::TOKENS;

/// Refuses `name` (a target table as written: `table` or `schema.table`) when its table part
/// is one of faucet's own tables, which live beside the targets: the commit tokens
/// (`faucet_commit_tokens`) and the writer fences (`faucet_fences`). Rows routed there would
/// be written into faucet's bookkeeping (or fail on its columns) — a source table of that
/// name, routed by `{table}`, met it. Compared without case: SQLite, and MySQL on a
/// case-insensitive file system, fold it.
///
/// # Errors
/// [`FaucetError::Config`] naming `field`.
pub(crate) fn refuse_reserved(name: &str, field: &str) -> Result<(), FaucetError> {
    let table = name.rsplit('.').next().unwrap_or(name);
    match [TOKENS, FENCES]
        .into_iter()
        .find(|own| table.eq_ignore_ascii_case(own))
    {
        Some(own) => Err(FaucetError::config(
            field,
            format!(
                "`{name}` names faucet's own `{own}` table (the sink keeps its {} there, \
                 beside the targets); write into a table of another name",
                if own == TOKENS {
                    "commit tokens"
                } else {
                    "writer fences"
                }
            ),
        )),
        None => Ok(()),
    }
}

/// One `tables:` entry as written: a target name, or `{table, key, write_mode}`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum TargetEntry {
    /// The target table's name (`replica.orders`).
    Name(String),
    /// The target with its own settings.
    Spec(TargetSpec),
}

/// A `tables:` entry with settings of its own.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// The target table's name, `table` or `schema.table` (MySQL `database.table`).
    pub table: String,
    /// The columns identifying a row in this target; default: the sink's `key`, else (for
    /// `upsert`) the source table's own key.
    #[serde(default)]
    pub key: Option<Vec<String>>,
    /// `append` or `upsert` for this target; default: the sink's `write_mode`.
    #[serde(default)]
    pub write_mode: Option<WriteMode>,
}

impl TargetEntry {
    fn table(&self) -> &str {
        match self {
            Self::Name(n) => n,
            Self::Spec(s) => &s.table,
        }
    }
}

/// A validated route (module docs): the default template, the `tables:` entries, the sink's
/// own `key` and `write_mode` (the defaults of every target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    default: Option<TableTemplate>,
    tables: BTreeMap<String, Mapped>,
    key: Vec<String>,
    write_mode: WriteMode,
}

/// One `tables:` entry, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapped {
    table: String,
    key: Option<Vec<String>>,
    write_mode: Option<WriteMode>,
}

/// Where one source table's records go: the target's name (validated by the dialect's name
/// rule), its key (empty: the source's key, for `upsert`) and its write mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTarget {
    /// The source table, as the records name it.
    pub source_table: String,
    /// The target table's name (`replica.orders`).
    pub name: String,
    /// The key of the target: the entry's, else the sink's, else (`upsert` of change
    /// records) the source table's; empty when none is known.
    pub key: Vec<String>,
    /// How this target is written.
    pub write_mode: WriteMode,
    /// The target's number in its writer, from 0 in the order first met (names per-target
    /// session objects such as PostgreSQL's staging table).
    pub ordinal: usize,
}

impl RouteTarget {
    /// The target's name by the dialect's rule `parse` (`TableName::parse`).
    ///
    /// # Errors
    /// [`FaucetError::Data`] of `connector` naming the source table, when the rendered name
    /// is not a valid table name, or names one of faucet's own tables
    /// (`faucet_commit_tokens`, `faucet_fences`).
    pub fn parsed_name<N>(
        &self,
        connector: &str,
        parse: impl Fn(&str, &str) -> Result<N, FaucetError>,
    ) -> Result<N, FaucetError> {
        refuse_reserved(&self.name, "table")
            .and_then(|()| parse(&self.name, "table"))
            .map_err(|e| {
                FaucetError::data(
                    connector,
                    format!("table {}", self.source_table),
                    format!("the target name {e}"),
                )
            })
    }
}

/// What a SQL sink upserts by, routed or not: the answers of its `Sink::upserts_by`,
/// `upserts_by_table` and `capabilities().keyed_upsert`, from its `route` (when it routes)
/// or its one table's `write_mode` and `key`.
#[derive(Debug, Clone, Copy)]
pub struct UpsertKeys<'a> {
    /// The route, when the sink routes.
    pub route: Option<&'a Route>,
    /// The sink's `write_mode`.
    pub write_mode: WriteMode,
    /// The sink's `key`.
    pub key: &'a [String],
}

impl UpsertKeys<'_> {
    /// `key:` when the sink upserts (a routed sink: when some target does).
    pub fn upserts_by(&self) -> Option<Vec<String>> {
        let upserts = match self.route {
            Some(r) => r.any_upsert(),
            None => self.write_mode == WriteMode::Upsert,
        };
        upserts.then(|| self.key.to_vec())
    }

    /// The key the records of `source_table` are upserted by ([`Route::upsert_key`]).
    pub fn upserts_by_table(&self, source_table: &str) -> Option<Vec<String>> {
        match self.route {
            Some(r) => r.upsert_key(source_table),
            None => self.upserts_by(),
        }
    }

    /// Whether every record is upserted by a key (a routed sink: every target upserts).
    pub fn keyed_upsert(&self) -> bool {
        match self.route {
            Some(r) => r.all_upsert(),
            None => self.write_mode == WriteMode::Upsert && !self.key.is_empty(),
        }
    }

    /// What a SQL sink promises ([`faucet_core::Sink::capabilities`]): the atomic watermark
    /// always (rows and commit token in one transaction), keyed upsert when every record is
    /// upserted by a key ([`Self::keyed_upsert`]).
    pub fn capabilities(&self) -> faucet_core::SinkCapabilities {
        faucet_core::SinkCapabilities {
            atomic_watermark: true,
            keyed_upsert: self.keyed_upsert(),
        }
    }

    /// How [`faucet_core::Sink::target`] names what the sink writes: `table <name>`, or
    /// `tables <route>`.
    pub fn target(&self, table: &dyn std::fmt::Display) -> String {
        match self.route {
            Some(r) => format!("tables {}", r.describe()),
            None => format!("table {table}"),
        }
    }
}

impl Route {
    /// The route of a sink whose `table` is `table` (empty when not given) and `tables:`
    /// `tables`, or `Ok(None)` for a sink that writes one fixed table (`table` without a
    /// placeholder and no `tables:`). `parse_name(name, field)` is the dialect's table-name
    /// rule, `validate_column(name, field)` its column rule.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field: no `table` nor `tables:`, a bad template
    /// (one that cannot render a valid name), a bad target name or key, two entries of one
    /// target, or `tables:` key that is not a source table name.
    pub fn parse(
        (table, tables): (&str, &BTreeMap<String, TargetEntry>),
        (key, write_mode): (&[String], WriteMode),
        parse_name: &dyn Fn(&str, &str) -> Result<(), FaucetError>,
        validate_column: &dyn Fn(&str, &str) -> Result<(), FaucetError>,
    ) -> Result<Option<Self>, FaucetError> {
        if table.is_empty() && tables.is_empty() {
            return Err(FaucetError::config(
                "table",
                "is required: a table name, a template over the source table \
                 (`replica.{table}`), or `tables:` mapping source tables to targets",
            ));
        }
        let default = if table.is_empty() {
            None
        } else {
            let t = TableTemplate::parse(table, "table")?;
            // A fixed name is refused here for every SQL sink that parses a route (postgres,
            // mysql): their one-table path needs no check of its own.
            if let Some(fixed) = t.fixed() {
                refuse_reserved(fixed, "table")?;
                if tables.is_empty() {
                    return Ok(None);
                }
            }
            // A template must render a valid name for any qualified source table.
            let sample = t
                .render(Some("s.t"))
                .map_err(|m| FaucetError::config("table", m))?;
            parse_name(&sample, "table")?;
            Some(t)
        };
        let mut mapped = BTreeMap::new();
        let mut targets: BTreeMap<&str, &str> = BTreeMap::new();
        for (source, entry) in tables {
            let at = format!("tables.{source}");
            if source.is_empty() {
                return Err(FaucetError::config(
                    "tables",
                    "has an empty source table name",
                ));
            }
            let name = entry.table();
            parse_name(name, &at)?;
            refuse_reserved(name, &at)?;
            if let Some(other) = targets.insert(name, source) {
                return Err(FaucetError::config(
                    at,
                    format!(
                        "routes `{source}` to `{name}`, where `{other}` goes too: two source \
                         tables in one target overwrite each other's rows; give each its own \
                         target"
                    ),
                ));
            }
            let (key, mode) = match entry {
                TargetEntry::Name(_) => (None, None),
                TargetEntry::Spec(s) => (s.key.clone(), s.write_mode),
            };
            if let Some(k) = &key {
                crate::sql::write::distinct_columns(k, &format!("{at}.key"), validate_column)?;
            }
            mapped.insert(
                source.clone(),
                Mapped {
                    table: name.to_owned(),
                    key,
                    write_mode: mode,
                },
            );
        }
        crate::sql::write::distinct_columns(key, "key", validate_column)?;
        Ok(Some(Self {
            default,
            tables: mapped,
            key: key.to_vec(),
            write_mode,
        }))
    }

    /// The schema (MySQL: database) the commit token and fence tables of the route live in:
    /// the part of the `table` template before its first `.` when it has no placeholder,
    /// else `None` (where an unqualified name lands).
    pub fn home(&self) -> Option<String> {
        let t = self.default.as_ref()?;
        let (outer, _) = t.as_str().split_once('.')?;
        let outer = TableTemplate::parse(outer, "table").ok()?;
        outer.fixed().map(str::to_owned)
    }

    /// The route in words, stable while the configuration means the same targets: the
    /// template, and how many `tables:` entries (`replica.{table}`, `tables: 3 entries,
    /// default replica.{table}`). The sink's identity (`Sink::target`) and its token scope.
    pub fn describe(&self) -> String {
        match (&self.default, self.tables.len()) {
            (Some(t), 0) => t.as_str().to_owned(),
            (Some(t), _) => format!("tables: mapped, default {t}"),
            (None, _) => "tables: mapped".to_owned(),
        }
    }

    /// Whether every target of the route is written by upsert.
    pub fn all_upsert(&self) -> bool {
        self.write_mode == WriteMode::Upsert
            && self
                .tables
                .values()
                .all(|m| m.write_mode.unwrap_or(self.write_mode) == WriteMode::Upsert)
    }

    /// Whether some target of the route is written by upsert.
    pub fn any_upsert(&self) -> bool {
        self.write_mode == WriteMode::Upsert
            || self
                .tables
                .values()
                .any(|m| m.write_mode == Some(WriteMode::Upsert))
    }

    /// The key records of `source_table` are upserted by (`Some(empty)`: the source's own),
    /// or `None` when its target appends — or when nothing routes it.
    pub fn upsert_key(&self, source_table: &str) -> Option<Vec<String>> {
        let (mode, key) = match self.tables.get(source_table) {
            Some(m) => (
                m.write_mode.unwrap_or(self.write_mode),
                m.key.clone().unwrap_or_else(|| self.key.clone()),
            ),
            None if self.default.is_some() => (self.write_mode, self.key.clone()),
            None => return None,
        };
        (mode == WriteMode::Upsert).then_some(key)
    }

    /// The target name of `source_table`, or why there is none (a message for people).
    pub fn target_name(&self, source_table: &str) -> Result<String, String> {
        if let Some(m) = self.tables.get(source_table) {
            return Ok(m.table.clone());
        }
        match &self.default {
            Some(t) => t.render(Some(source_table)),
            None => Err(format!(
                "no target for the records of `{source_table}`: it is not in `tables:` and \
                 there is no `table:` template for the others; add `{source_table}: <target>` \
                 to `tables:`, or set `table: \"<schema>.{{table}}\"`"
            )),
        }
    }

    /// Where records of `source_table` go (`keys`: the source's keys of its tables, from
    /// [`faucet_core::SinkWriter::source_keys`]; `ordinal`: the target's number in its
    /// writer). The rendered name is checked by the dialect (its `for_target`).
    ///
    /// # Errors
    /// [`FaucetError::Data`] of `connector` when nothing routes `source_table`, or an upsert
    /// has no key: none configured and the source tells none.
    pub fn resolve(
        &self,
        connector: &str,
        source_table: &str,
        keys: &[TableKeys],
        ordinal: usize,
    ) -> Result<RouteTarget, FaucetError> {
        let data = |m: String| FaucetError::data(connector, format!("table {source_table}"), m);
        let name = self.target_name(source_table).map_err(data)?;
        let mapped = self.tables.get(source_table);
        let write_mode = mapped.and_then(|m| m.write_mode).unwrap_or(self.write_mode);
        let mut key = mapped
            .and_then(|m| m.key.clone())
            .unwrap_or_else(|| self.key.clone());
        if key.is_empty() && write_mode == WriteMode::Upsert {
            let known = keys.iter().find(|k| k.table == source_table);
            key = known
                .and_then(|k| {
                    k.primary_key
                        .clone()
                        .or_else(|| k.unique_sets.first().cloned())
                })
                .ok_or_else(|| {
                    data(format!(
                        "`write_mode: upsert` into {name} needs a key, and the source tells \
                         none for `{source_table}` (no primary key or unique key{}); give it \
                         one: `tables: {{{source_table}: {{table: {name}, key: [..]}}}}`, or \
                         route it to an append target (`write_mode: append`)",
                        if known.is_none() {
                            ", or the source cannot tell its keys"
                        } else {
                            ""
                        }
                    ))
                })?;
        }
        Ok(RouteTarget {
            source_table: source_table.to_owned(),
            name,
            key,
            write_mode,
            ordinal,
        })
    }

    /// The targets `tables:` lists, as [`Route::resolve`] gives them without the source's
    /// keys (an upsert target without a configured key has an empty `key`), numbered from
    /// 0 in the map's order.
    pub fn listed(&self) -> Vec<RouteTarget> {
        self.tables
            .iter()
            .enumerate()
            .map(|(ordinal, (source, m))| RouteTarget {
                source_table: source.clone(),
                name: m.table.clone(),
                key: m.key.clone().unwrap_or_else(|| self.key.clone()),
                write_mode: m.write_mode.unwrap_or(self.write_mode),
                ordinal,
            })
            .collect()
    }

    /// The source tables of `listed` (a source's `tables:`) that the route sends to one
    /// target, as `(target, [source tables])`, and those it sends nowhere: what `faucet
    /// validate` refuses before anything connects.
    pub fn collisions<'l>(
        &self,
        listed: impl IntoIterator<Item = &'l str>,
    ) -> (Vec<(String, Vec<String>)>, Vec<String>) {
        let mut by_target: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut unrouted = Vec::new();
        for source in listed {
            match self.target_name(source) {
                Ok(t) => by_target.entry(t).or_default().push(source.to_owned()),
                Err(_) => unrouted.push(source.to_owned()),
            }
        }
        let shared = by_target.into_iter().filter(|(_, s)| s.len() > 1).collect();
        (shared, unrouted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: &str, _: &str) -> Result<(), FaucetError> {
        Ok(())
    }

    fn no_dots3(n: &str, f: &str) -> Result<(), FaucetError> {
        if n.split('.').count() > 2 || n.is_empty() {
            return Err(FaucetError::config(f, format!("`{n}` is not a table name")));
        }
        Ok(())
    }

    fn route(
        table: &str,
        tables: &[(&str, TargetEntry)],
        mode: WriteMode,
    ) -> Result<Option<Route>, FaucetError> {
        let tables: BTreeMap<String, TargetEntry> = tables
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        Route::parse((table, &tables), (&[], mode), &no_dots3, &ok)
    }

    fn keys(table: &str, pk: &[&str]) -> TableKeys {
        TableKeys {
            table: table.into(),
            primary_key: Some(pk.iter().map(|c| (*c).to_owned()).collect()),
            unique_sets: vec![],
        }
    }

    #[test]
    fn faucet_s_own_tables_are_no_target() {
        let refused = |r: Result<Option<Route>, FaucetError>, field: &str, own: &str| {
            let e = r.expect_err("refused").to_string();
            assert!(e.contains(field) && e.contains(own), "{e}");
        };
        for name in ["faucet_commit_tokens", "s.FAUCET_FENCES"] {
            let own = name.rsplit('.').next().expect("part");
            refused(route(name, &[], WriteMode::Append), "table", own);
            let map = [("s.t", TargetEntry::Name(name.into()))];
            refused(route("", &map, WriteMode::Append), "tables.s.t", own);
        }
        // A template is refused at the record whose source table renders to one of them.
        let r = route("replica.{table}", &[], WriteMode::Append)
            .expect("ok")
            .expect("routes");
        let target = r
            .resolve("test", "s.faucet_fences", &[], 0)
            .expect("resolved");
        let e = target
            .parsed_name("test", |n, f| no_dots3(n, f).map(|()| n.to_owned()))
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("table s.faucet_fences") && e.contains("faucet's own"),
            "{e}"
        );
        let ok = r
            .resolve("test", "s.faucet_fences_2", &[], 0)
            .expect("resolved");
        assert_eq!(
            ok.parsed_name("test", |n, _| Ok(n.to_owned()))
                .expect("a name that only starts like it"),
            "replica.faucet_fences_2"
        );
    }

    #[test]
    fn a_fixed_table_does_not_route_a_template_or_a_map_does() {
        assert_eq!(route("public.t", &[], WriteMode::Append).expect("ok"), None);
        let r = route("replica.{table}", &[], WriteMode::Upsert)
            .expect("ok")
            .expect("routes");
        assert_eq!(r.home().as_deref(), Some("replica"));
        assert_eq!(r.describe(), "replica.{table}");
        let t = r
            .resolve(
                "postgres",
                "public.orders",
                &[keys("public.orders", &["id"])],
                0,
            )
            .expect("resolves");
        assert_eq!(t.name, "replica.orders");
        assert_eq!(t.key, ["id"]);
        let r = route("{schema}_{table}", &[], WriteMode::Append)
            .expect("ok")
            .expect("routes");
        assert_eq!(r.home(), None);
        assert_eq!(r.target_name("shop.orders").as_deref(), Ok("shop_orders"));
    }

    #[test]
    fn a_map_routes_by_entry_then_template_and_names_an_unmapped_table() {
        let r = route(
            "",
            &[
                ("public.a", TargetEntry::Name("x.a".into())),
                (
                    "public.b",
                    TargetEntry::Spec(TargetSpec {
                        table: "x.b_log".into(),
                        key: None,
                        write_mode: Some(WriteMode::Append),
                    }),
                ),
            ],
            WriteMode::Upsert,
        )
        .expect("ok")
        .expect("routes");
        assert!(r.any_upsert() && !r.all_upsert());
        assert_eq!(r.upsert_key("public.b"), None);
        assert_eq!(r.upsert_key("public.a"), Some(vec![]));
        let b = r.resolve("postgres", "public.b", &[], 1).expect("b");
        assert_eq!(
            (b.name.as_str(), b.write_mode),
            ("x.b_log", WriteMode::Append)
        );
        let e = r
            .resolve("postgres", "public.c", &[], 2)
            .expect_err("unmapped");
        assert!(
            e.to_string().contains("public.c") && e.to_string().contains("tables:"),
            "{e}"
        );
        // An upsert without a key anywhere names the fix.
        let e = r
            .resolve("postgres", "public.a", &[], 0)
            .expect_err("no key");
        assert!(e.to_string().contains("key: [..]"), "{e}");
    }

    #[test]
    fn two_sources_into_one_target_are_refused() {
        let e = route(
            "",
            &[
                ("public.a", TargetEntry::Name("x.t".into())),
                ("public.b", TargetEntry::Name("x.t".into())),
            ],
            WriteMode::Append,
        )
        .expect_err("shared");
        assert!(matches!(&e, FaucetError::Config { field, .. } if field == "tables.public.b"));
        let r = route("x.{table}", &[], WriteMode::Append)
            .expect("ok")
            .expect("routes");
        let (shared, unrouted) = r.collisions(["a.t", "b.t", "a.u"]);
        assert_eq!(
            shared,
            [("x.t".to_owned(), vec!["a.t".to_owned(), "b.t".to_owned()])]
        );
        assert!(unrouted.is_empty());
    }

    #[test]
    fn bad_templates_and_missing_tables_name_the_field() {
        for bad in ["a.b.{table}", "x.{tabel}"] {
            let e = route(bad, &[], WriteMode::Append).expect_err(bad);
            assert!(
                matches!(&e, FaucetError::Config { field, .. } if field == "table"),
                "{e}"
            );
        }
        let e = route("", &[], WriteMode::Append).expect_err("nothing");
        assert!(matches!(&e, FaucetError::Config { field, .. } if field == "table"));
        let entry: TargetEntry =
            serde_json::from_value(serde_json::json!({"table": "x.y", "key": ["id"]}))
                .expect("spec");
        assert!(matches!(entry, TargetEntry::Spec(_)));
        assert!(serde_json::from_value::<TargetEntry>(serde_json::json!({"tabel": "x"})).is_err());
    }
}
