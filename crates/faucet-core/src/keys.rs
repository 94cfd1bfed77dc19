//! Whether a sink's upsert key is a key of the source's tables: the one rule, for every
//! source that knows its keys ([`Source::table_keys`]: `postgres-cdc`, `mysql-cdc`) and every
//! upsert sink ([`Sink::upserts_by`]).
//!
//! An upsert keeps one row per key value. When the key is not a key of the source table,
//! distinct source rows that share a value overwrite each other in the target: source rows
//! `(1, w)`, `(1, x)`, `(2, z)` upserted by the first column leave `(1, x)`, `(2, z)` — a row
//! lost, though every change was delivered. So:
//!
//! * a source table with **no key at all** (no primary key, no unique key; PostgreSQL: no
//!   replica identity index either) into an upsert is refused before anything is written
//!   ([`DeliveryError::KeylessSource`]): nothing the sink's `key:` names can be unique;
//! * a sink `key:` that is neither the table's primary key nor one of its unique keys (the
//!   same columns, in any order) is a **warning** naming both, and the run proceeds — the
//!   data may in fact be unique by those columns, which the catalog cannot say;
//! * a source that cannot know (a query, a file: `table_keys` is `None`) changes nothing.
//!
//! [`check`] applies the rule; the run loop calls it before it opens the sink, `faucet
//! doctor` prints its outcome as the `keys` line.

use crate::delivery::DeliveryError;
use crate::error::FaucetError;
use crate::sink::Sink;
use crate::source::Source;

/// The keys of one source table, from its catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableKeys {
    /// The table, qualified as the source qualifies it (`public.orders`, `shop.orders`).
    pub table: String,
    /// The primary key's columns, in key order; `None` when the table has none.
    pub primary_key: Option<Vec<String>>,
    /// The column sets of every unique key that makes a row unique (the primary key
    /// included; PostgreSQL: the replica identity index among them).
    pub unique_sets: Vec<Vec<String>>,
}

impl TableKeys {
    /// Whether the table has no key at all: no primary key and no unique key.
    pub fn is_keyless(&self) -> bool {
        self.primary_key.is_none() && self.unique_sets.is_empty()
    }

    /// Whether `key` is the primary key or one of the unique keys (same columns, any order).
    pub fn is_key(&self, key: &[String]) -> bool {
        let same =
            |set: &Vec<String>| set.len() == key.len() && set.iter().all(|c| key.contains(c));
        self.primary_key.iter().chain(&self.unique_sets).any(same)
    }

    /// The table's keys in words: `primary key [id]`, `primary key [id], unique [email]`,
    /// `no primary key, unique [email]`, `no key`.
    pub fn describe(&self) -> String {
        let mut parts = vec![match &self.primary_key {
            Some(pk) => format!("primary key {}", columns(pk)),
            None if self.unique_sets.is_empty() => return "no key".to_owned(),
            None => "no primary key".to_owned(),
        }];
        parts.extend(
            self.unique_sets
                .iter()
                .filter(|set| Some(*set) != self.primary_key.as_ref())
                .map(|set| format!("unique {}", columns(set))),
        );
        parts.join(", ")
    }
}

/// `[a, b]`: a key's columns as the pipeline file spells them.
fn columns(cols: &[String]) -> String {
    format!("[{}]", cols.join(", "))
}

/// What [`check`] found that the user should hear about (the run proceeds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyNote {
    /// The sink's `key:` is a key of every source table.
    Matches(String),
    /// The sink's `key:` is not a key of these source tables: a warning naming both.
    Differs(String),
}

/// Applies the module's rule to `source` and `sink`: `Ok(None)` when there is nothing to
/// compare (the sink does not upsert, or the source cannot know its keys), a [`KeyNote`]
/// otherwise. Reads the source's catalog ([`Source::table_keys`]); writes nothing.
///
/// # Errors
/// [`FaucetError::Delivery`] ([`DeliveryError::KeylessSource`]) when a source table has no
/// key; the source's own error when its catalog cannot be read.
pub async fn check(source: &dyn Source, sink: &dyn Sink) -> Result<Option<KeyNote>, FaucetError> {
    if sink.upserts_by().is_none() {
        // Nothing to judge: the catalog is not read (a bus sink keyed by the source's keys
        // reads it only when it runs, `check_with_keys`).
        return Ok(None);
    }
    Ok(check_with_keys(source, sink).await?.0)
}

/// [`check`], also handing back the source's keys it read (`None` when the sink neither
/// upserts nor keys by the source's keys, [`Sink::keys_by_source`], or the source cannot
/// know), for [`crate::SinkWriter::source_keys`].
///
/// # Errors
/// As [`check`].
pub async fn check_with_keys(
    source: &dyn Source,
    sink: &dyn Sink,
) -> Result<(Option<KeyNote>, Option<Vec<TableKeys>>), FaucetError> {
    if sink.upserts_by().is_none() {
        // Nothing to judge; a sink that keys by the source's keys is told them.
        let tables = if sink.keys_by_source() {
            source.table_keys().await?
        } else {
            None
        };
        return Ok((None, tables));
    }
    let Some(tables) = source.table_keys().await? else {
        return Ok((None, None));
    };
    let key_of = |t: &str| sink.upserts_by_table(t);
    let note = judge(source.connector(), sink.connector(), &key_of, &tables)?;
    Ok((note, Some(tables)))
}

/// [`check`] without the I/O: each table against the key the sink upserts it by
/// ([`Sink::upserts_by_table`]; empty: the target's or the source's own key).
fn judge(
    source: &str,
    sink: &str,
    key_of: &dyn Fn(&str) -> Option<Vec<String>>,
    tables: &[TableKeys],
) -> Result<Option<KeyNote>, FaucetError> {
    let keyed: Vec<(&TableKeys, Vec<String>)> = tables
        .iter()
        .filter_map(|t| key_of(&t.table).map(|k| (t, k)))
        .collect();
    if let Some((t, _)) = keyed.iter().find(|(t, _)| t.is_keyless()) {
        return Err(DeliveryError::KeylessSource {
            connector: source.to_owned(),
            table: t.table.clone(),
            sink: sink.to_owned(),
        }
        .into());
    }
    let compared: Vec<&(&TableKeys, Vec<String>)> =
        keyed.iter().filter(|(_, k)| !k.is_empty()).collect();
    if compared.is_empty() {
        return Ok(None);
    }
    // One key for every table (a sink of one target): named once; else per table.
    let one = compared.iter().all(|(_, k)| *k == compared[0].1);
    let key = if one {
        columns(&compared[0].1)
    } else {
        "its target's key".to_owned()
    };
    let by = |k: &[String]| {
        if one {
            String::new()
        } else {
            format!(" by {}", columns(k))
        }
    };
    let differs: Vec<String> = compared
        .iter()
        .filter(|(t, k)| !t.is_key(k))
        .map(|(t, k)| format!("{} ({}){}", t.table, t.describe(), by(k)))
        .collect();
    if differs.is_empty() {
        let names: Vec<String> = compared
            .iter()
            .map(|(t, k)| format!("{}{}", t.table, by(k)))
            .collect();
        return Ok(Some(KeyNote::Matches(format!(
            "the sink `{sink}` upserts by key {key}, a key of the source table(s) {}",
            names.join(", ")
        ))));
    }
    Ok(Some(KeyNote::Differs(format!(
        "the sink `{sink}` upserts by key {key}, which is not a key of the `{source}` source \
         table(s) {}: source rows that share a value of {key} overwrite each other in the \
         target; use the source's key as `key:`, or `write_mode: append`",
        differs.join(", "),
    ))))
}

/// The source tables whose keys a writer was told ([`crate::SinkWriter::source_keys`]), so
/// the run loop notices a page of change records of a table it was not told about — one
/// created after the start that a `tables` pattern matches (README, "Table patterns") — and
/// asks the source again ([`check_with_keys`]) before the page is written: that table's
/// target is then upserted by its key, and a keyless one refused, as at start.
#[derive(Debug, Default)]
pub(crate) struct KnownTables {
    names: std::collections::HashSet<String>,
}

impl KnownTables {
    /// The tables of `keys`.
    pub(crate) fn new(keys: &[TableKeys]) -> Self {
        let mut known = Self::default();
        known.add(keys);
        known
    }

    /// Adds the tables of `keys`.
    pub(crate) fn add(&mut self, keys: &[TableKeys]) {
        self.names.extend(keys.iter().map(|k| k.table.clone()));
    }

    /// Whether `page` holds change records ([`crate::change::TABLE`]) of a table not known;
    /// such tables count as known from then on, so the source is asked once per table (one
    /// it still does not show is left to the sink, which names it).
    pub(crate) fn met_new(&mut self, page: &crate::Page) -> bool {
        let Some(at) = page.schema().index_of(crate::change::TABLE) else {
            return false;
        };
        let mut met = false;
        // Records of one table come in runs: a row of the previous row's table needs no lookup.
        let mut previous: Option<&str> = None;
        for row in page.rows() {
            let Some(crate::Value::Text(t)) = row.values().get(at) else {
                continue;
            };
            if previous == Some(t.as_str()) {
                continue;
            }
            previous = Some(t.as_str());
            if !self.names.contains(t.as_str()) {
                self.names.insert(t.to_string());
                met = true;
            }
        }
        met
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(pk: Option<&[&str]>, unique: &[&[&str]]) -> TableKeys {
        let v = |s: &[&str]| s.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
        TableKeys {
            table: "db.t".into(),
            primary_key: pk.map(v),
            unique_sets: unique.iter().map(|s| v(s)).collect(),
        }
    }

    fn key(cols: &[&str]) -> Vec<String> {
        cols.iter().map(|c| (*c).to_owned()).collect()
    }

    /// Every table upserted by `cols`.
    fn one(cols: &[&str]) -> impl Fn(&str) -> Option<Vec<String>> {
        let k = key(cols);
        move |_| Some(k.clone())
    }

    #[test]
    fn a_keyless_table_is_refused_a_foreign_key_warned_the_same_key_matches() {
        let keyless = judge("mysql-cdc", "mysql", &one(&["a"]), &[keys(None, &[])]);
        let e = keyless.expect_err("refused").to_string();
        assert!(
            e.contains("db.t") && e.contains("write_mode: append"),
            "{e}"
        );
        let pk = keys(Some(&["id", "k"]), &[&["id", "k"], &["email"]]);
        assert!(matches!(
            judge("s", "k", &one(&["k", "id"]), std::slice::from_ref(&pk)),
            Ok(Some(KeyNote::Matches(_)))
        ));
        assert!(matches!(
            judge("s", "k", &one(&["email"]), std::slice::from_ref(&pk)),
            Ok(Some(KeyNote::Matches(_)))
        ));
        match judge("s", "k", &one(&["a"]), &[pk]) {
            Ok(Some(KeyNote::Differs(w))) => assert!(
                w.contains("[a]") && w.contains("primary key [id, k], unique [email]"),
                "{w}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            judge("s", "k", &one(&[]), &[keys(Some(&["id"]), &[])]),
            Ok(None)
        ));
    }

    #[test]
    fn a_page_of_a_table_not_told_is_met_once() {
        let schema = crate::change::record_schema(Vec::new(), Vec::new());
        let at = schema.index_of(crate::change::TABLE).expect("table field");
        let page = |tables: &[&str]| {
            let mut b = crate::page::PageBuilder::new(schema.clone(), tables.len());
            for t in tables {
                let mut row = vec![crate::Value::Null; schema.len()];
                row[at] = crate::Value::Text((*t).into());
                b.push_row(row);
            }
            b.finish(None)
        };
        let mut known = KnownTables::new(&[keys(Some(&["id"]), &[])]);
        assert!(!known.met_new(&page(&["db.t", "db.t"])), "told at start");
        assert!(
            known.met_new(&page(&["db.t", "db.new"])),
            "a table created later"
        );
        assert!(!known.met_new(&page(&["db.new"])), "asked once per table");
    }

    #[test]
    fn each_table_is_judged_by_its_own_target() {
        let mut keyless = keys(None, &[]);
        keyless.table = "db.log".into();
        let keyed = keys(Some(&["id"]), &[]);
        // The keyless table is appended, the other upserted by the source's key: no refusal.
        let key_of = |t: &str| (t != "db.log").then(Vec::new);
        assert_eq!(
            judge("s", "k", &key_of, &[keyless.clone(), keyed.clone()]).expect("ok"),
            None
        );
        let key_of = |t: &str| {
            Some(if t == "db.log" {
                key(&["x"])
            } else {
                key(&["v"])
            })
        };
        let e = judge("s", "k", &key_of, &[keyless]).expect_err("keyless upserted");
        assert!(e.to_string().contains("db.log"), "{e}");
        match judge("s", "k", &key_of, &[keyed]) {
            Ok(Some(KeyNote::Differs(w))) => assert!(
                w.contains("db.t (primary key [id])") && w.contains("[v]"),
                "{w}"
            ),
            other => panic!("{other:?}"),
        }
    }
}
