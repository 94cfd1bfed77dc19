//! A page as MongoDB operations, per collection: the pure half of the `mongodb` sink.
//!
//! * The collection of a record: `collection` rendered over its source table (the change
//!   record's `table`); a fixed `collection` takes every record. A page whose records name
//!   several source tables is split by table, in source order within each.
//! * `append`: every record is one document (its fields, in order; a change record's
//!   `before` / `after` as embedded documents), inserted in page order.
//! * `upsert`: the records of each collection are collapsed by key, in source order
//!   ([`faucet_core::change::collapse`], the rule of every keyed sink): `t` empties the
//!   collection first, `d` deletes the key's document, `c`/`u`/`r` and plain records replace
//!   it (upsert), a key-changing `u` also deletes the old key's document. A record whose
//!   `unchanged_toast` names fields is applied with `$set` of the fields it carries, so the
//!   stored values of the others stay. A key-changing update with unchanged fields (the
//!   values exist only in the old document) is refused (a data error naming
//!   `REPLICA IDENTITY FULL`): MongoDB's `_id` cannot be renamed, and this sink does not yet
//!   move the stored document.
//!
//! `_id` of an upserted document: the key's value when the key is one field (`_id` itself
//! included), else a sub-document of the key fields in key order (`{"a": 1, "b": "x"}`). The
//! key fields stay fields of the document too; a record that has an `_id` field while the key
//! is another field is refused (the two would disagree).

use std::collections::HashMap;

use faucet_core::change::{ChangeLayout, KeyIdentity, Slot, TABLE, collapse};
use faucet_core::keys::TableKeys;
use faucet_core::route::TableTemplate;
use faucet_core::value::json::write_value;
use faucet_core::{FaucetError, Page, PageBuilder, Value};
use mongodb::bson::{Bson, Document};

use super::CONNECTOR;
use super::config::{MongoWriteMode, check_collection, check_database, check_target};
use crate::mongodb::to_bson::{self, BsonError, SubMillisecond};
use crate::sql::Route;

/// The operations of one page on one collection.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct CollectionOps {
    /// The database.
    pub(crate) db: String,
    /// The collection.
    pub(crate) coll: String,
    /// `upsert`: delete every document first (a `t` record).
    pub(crate) truncate: bool,
    /// `upsert`: the `_id`s to delete.
    pub(crate) deletes: Vec<Bson>,
    /// `upsert`: whole documents to put in place of their `_id`'s (`replace_one`, upsert).
    pub(crate) replaces: Vec<Document>,
    /// `upsert`: `(_id, fields)` to `$set` (records with unchanged fields left out).
    pub(crate) sets: Vec<(Bson, Document)>,
    /// `append`: the documents to insert, in page order.
    pub(crate) inserts: Vec<Document>,
    /// How many of the page's records went to this collection.
    pub(crate) records: u64,
}

impl CollectionOps {
    /// `db.coll`.
    pub(crate) fn name(&self) -> String {
        format!("{}.{}", self.db, self.coll)
    }

    /// Whether nothing is to be done.
    pub(crate) fn is_empty(&self) -> bool {
        !self.truncate
            && self.deletes.is_empty()
            && self.replaces.is_empty()
            && self.sets.is_empty()
            && self.inserts.is_empty()
    }
}

/// What turns pages into operations: the sink's settings and what the writer learnt (the
/// source's keys, the source table each collection took so far).
#[derive(Debug)]
pub(crate) struct Planner {
    pub(crate) collection: TableTemplate,
    pub(crate) write_mode: MongoWriteMode,
    pub(crate) key: Vec<String>,
    pub(crate) sub_ms: SubMillisecond,
    /// The routing of source tables to collections (`tables:`), when the sink routes.
    pub(crate) route: Option<Route>,
    /// The source's keys of its tables ([`faucet_core::SinkWriter::source_keys`]).
    pub(crate) source_keys: Vec<TableKeys>,
    /// Per collection, the source table whose records it took (one table per collection).
    seen: HashMap<String, Option<String>>,
}

impl Planner {
    /// A planner for the sink's settings.
    pub(crate) fn new(
        collection: TableTemplate,
        write_mode: MongoWriteMode,
        key: Vec<String>,
        sub_ms: SubMillisecond,
        route: Option<Route>,
    ) -> Self {
        Self {
            collection,
            write_mode,
            key,
            sub_ms,
            route,
            source_keys: Vec::new(),
            seen: HashMap::new(),
        }
    }

    /// The operations of `page`, per collection, in the order the collections are first
    /// met.
    ///
    /// # Errors
    /// [`FaucetError::Data`] naming the collection, page row and field: a record without
    /// the source table the template needs, a value with no exact BSON form, a record
    /// without its key, a collection taking two source tables' upserts.
    pub(crate) fn plan(&mut self, page: &Page) -> Result<Vec<CollectionOps>, FaucetError> {
        let mut out = Vec::new();
        for (table, rows) in groups(page, &self.collection, self.route.is_some())? {
            let (name, write_mode, key) = self.target(table.as_deref())?;
            let (db, coll) = split_name(&name)?;
            let mut ops = CollectionOps {
                db,
                coll,
                ..CollectionOps::default()
            };
            let part = match rows {
                None => std::borrow::Cow::Borrowed(page),
                Some(rows) => {
                    let mut b = PageBuilder::new(page.schema().clone(), rows.len());
                    for r in rows {
                        if let Some(row) = page.row(r) {
                            b.push_row(row.values().iter().cloned());
                        }
                    }
                    std::borrow::Cow::Owned(b.finish(page.bookmark().cloned()))
                }
            };
            ops.records = part.len() as u64;
            match write_mode {
                MongoWriteMode::Append => self.append(&part, &mut ops)?,
                MongoWriteMode::Upsert => {
                    // A fixed collection is not split by table: its key is its records'
                    // table's (one table per collection, which `collapse` holds it to).
                    let table = table.or_else(|| first_table(&part));
                    self.upsert(&part, table.as_deref(), &key, &mut ops)?;
                }
            }
            out.push(ops);
        }
        Ok(out)
    }

    /// Where the records of `table` go: the collection, how and by which key (empty: the
    /// source's key, else `_id`) — by the route when the sink routes, else the
    /// `collection` template and the sink's own `write_mode` and `key`.
    ///
    /// # Errors
    /// [`FaucetError::Data`] naming the source table when nothing routes it, or the
    /// template cannot render a name for it.
    fn target(
        &self,
        table: Option<&str>,
    ) -> Result<(String, MongoWriteMode, Vec<String>), FaucetError> {
        let Some(route) = &self.route else {
            let name = self
                .collection
                .render(table)
                .map_err(|m| FaucetError::data(CONNECTOR, self.collection.as_str(), m))?;
            return Ok((name, self.write_mode, self.key.clone()));
        };
        let table = table.unwrap_or_default();
        let name = route
            .target_name(table)
            .map_err(|m| FaucetError::data(CONNECTOR, format!("table {table}"), m))?;
        check_target(&name).map_err(|m| {
            FaucetError::data(
                CONNECTOR,
                format!("table {table}"),
                format!("the target {m}"),
            )
        })?;
        Ok(match route.upsert_key(table) {
            Some(key) => (name, MongoWriteMode::Upsert, key),
            None => (name, MongoWriteMode::Append, Vec::new()),
        })
    }

    fn append(&self, page: &Page, ops: &mut CollectionOps) -> Result<(), FaucetError> {
        let target = ops.name();
        for (i, row) in page.rows().enumerate() {
            let mut doc = Document::new();
            for (field, value) in row.schema().fields().iter().zip(row.values()) {
                let name = field.name.as_str();
                let bson = to_bson::check_name(name)
                    .and_then(|()| to_bson::bson(value, self.sub_ms))
                    .map_err(|e| data_error(&target, i, &e.under(name)))?;
                doc.insert(name, bson);
            }
            ops.inserts.push(doc);
        }
        Ok(())
    }

    fn upsert(
        &mut self,
        page: &Page,
        table: Option<&str>,
        key: &[String],
        ops: &mut CollectionOps,
    ) -> Result<(), FaucetError> {
        let target = ops.name();
        let key = self.key_for(page, table, key, &target)?;
        let seen = self.seen.entry(target.clone()).or_default();
        let collapsed = collapse(page, &key, CONNECTOR, &target, seen, &mut JsonIdentity)?;
        if let Some(moved) = collapsed.moves().first() {
            return Err(FaucetError::data(
                CONNECTOR,
                format!("{target}, page row {}", moved.row + 1),
                format!(
                    "an update changed the key and left field(s) {} out as unchanged (TOASTed \
                     values the server did not resend): their values are only in the old \
                     document, and MongoDB cannot rename an `_id`; faucet does not write null \
                     instead, and nothing of this page was committed. Set `ALTER TABLE {} \
                     REPLICA IDENTITY FULL` on the source so such updates carry every value",
                    moved.columns.join(", "),
                    moved.table.unwrap_or("<the source table>")
                ),
            ));
        }
        ops.truncate = collapsed.truncate;
        let layout = ChangeLayout::of(page.schema());
        for slot in &collapsed.slots {
            match slot {
                Slot::Delete { key: values, row } => {
                    ops.deletes.push(
                        self.id(&key, values)
                            .map_err(|e| data_error(&target, *row, &e))?,
                    );
                }
                Slot::Upsert { columns, row, .. } => {
                    let err = |e: &BsonError| data_error(&target, *row, e);
                    let values: Vec<&Value> = key
                        .iter()
                        .filter_map(|k| columns.iter().find(|(n, _)| *n == k.as_str()))
                        .map(|(_, v)| *v)
                        .collect();
                    let id = self.id(&key, &values).map_err(|e| err(&e))?;
                    let mut doc = Document::new();
                    if key != ["_id"] {
                        doc.insert("_id", id.clone());
                    }
                    for (name, value) in columns {
                        if *name == "_id" && key != ["_id"] {
                            return Err(err(&BsonError {
                                path: "_id".into(),
                                message: format!(
                                    "the record has an `_id` field while the key is {key:?}: \
                                     the document's `_id` is made from the key; rename the \
                                     field or upsert by `key: [_id]`"
                                ),
                            }));
                        }
                        let bson = to_bson::check_name(name)
                            .and_then(|()| to_bson::bson(value, self.sub_ms))
                            .map_err(|e| err(&e.under(name)))?;
                        doc.insert(*name, bson);
                    }
                    let partial = layout.as_ref().is_some_and(|l| {
                        page.row(*row)
                            .and_then(|r| l.read(r.values()).ok())
                            .is_some_and(|c| c.unchanged().next().is_some())
                    });
                    if partial {
                        doc.remove("_id");
                        ops.sets.push((id, doc));
                    } else {
                        ops.replaces.push(doc);
                    }
                }
            }
        }
        Ok(())
    }

    /// The key of `table`'s records into `target`: the configured one, else the source's
    /// key of the table, else `_id` when the records have one.
    fn key_for(
        &self,
        page: &Page,
        table: Option<&str>,
        key: &[String],
        target: &str,
    ) -> Result<Vec<String>, FaucetError> {
        if !key.is_empty() {
            return Ok(key.to_vec());
        }
        if let Some(t) = table
            && let Some(k) = self.source_keys.iter().find(|k| k.table == t)
            && let Some(key) = k
                .primary_key
                .clone()
                .or_else(|| k.unique_sets.first().cloned())
        {
            return Ok(key);
        }
        if has_id(page) {
            return Ok(vec!["_id".to_owned()]);
        }
        Err(FaucetError::data(
            CONNECTOR,
            target,
            format!(
                "`write_mode: upsert` needs a key, and {}the records have no `_id` field; set \
                 the sink's `key: [..]`",
                match table {
                    Some(t) => format!("the source tells none for `{t}` and "),
                    None => String::new(),
                }
            ),
        ))
    }

    /// The `_id` of a document whose key fields `key` hold `values`.
    fn id(&self, key: &[String], values: &[&Value]) -> Result<Bson, BsonError> {
        match (key, values) {
            ([k], [v]) => to_bson::bson(v, self.sub_ms).map_err(|e| e.under(k)),
            _ => {
                let mut doc = Document::new();
                for (k, v) in key.iter().zip(values) {
                    doc.insert(
                        k.as_str(),
                        to_bson::bson(v, self.sub_ms).map_err(|e| e.under(k))?,
                    );
                }
                Ok(Bson::Document(doc))
            }
        }
    }
}

/// Whether the page's rows (plain rows, or a change record's `after` / `before`) have `_id`.
fn has_id(page: &Page) -> bool {
    let Some(layout) = ChangeLayout::of(page.schema()) else {
        return page.schema().index_of("_id").is_some();
    };
    page.rows().any(|r| {
        layout.read(r.values()).is_ok_and(|c| {
            c.after
                .or(c.before)
                .is_some_and(|row| row.schema.index_of("_id").is_some())
        })
    })
}

/// A page's source tables and their rows ([`groups`]).
type Groups = Vec<(Option<String>, Option<Vec<usize>>)>;

/// The rows of each source table, in order of first appearance: `(None, None)` (the whole
/// page) for a fixed collection or records without a table, else `(Some(table), rows)`
/// (`None` rows: the whole page is that table's).
fn groups(page: &Page, template: &TableTemplate, routed: bool) -> Result<Groups, FaucetError> {
    if page.is_empty() {
        return Ok(Vec::new());
    }
    if template.fixed().is_some() && !routed {
        return Ok(vec![(None, None)]);
    }
    let groups = match faucet_core::change::rows_by_table(page) {
        Ok(Some(groups)) => groups,
        Ok(None) => return Ok(vec![(None, None)]),
        Err(i) => {
            return Err(FaucetError::data(
                CONNECTOR,
                format!("{}, page row {}", template.as_str(), i + 1),
                "a change record without its source `table`, which `collection` needs",
            ));
        }
    };
    let whole = groups.len() == 1;
    Ok(groups
        .into_iter()
        .map(|(t, rows)| (Some(t), (!whole).then_some(rows)))
        .collect())
}

/// The source table of the page's first change record, if any.
fn first_table(page: &Page) -> Option<String> {
    let at = ChangeLayout::of(page.schema()).and_then(|_| page.schema().index_of(TABLE))?;
    match page.row(0)?.values().get(at)? {
        Value::Text(t) => Some(t.to_string()),
        _ => None,
    }
}

/// `db.coll` of a rendered name, checked.
fn split_name(name: &str) -> Result<(String, String), FaucetError> {
    let bad = |m: String| FaucetError::data(CONNECTOR, format!("collection {name}"), m);
    let (db, coll) = name
        .split_once('.')
        .ok_or_else(|| bad("names no database (`db.collection`)".into()))?;
    check_database(db).map_err(bad)?;
    check_collection(coll).map_err(bad)?;
    Ok((db.to_owned(), coll.to_owned()))
}

fn data_error(target: &str, row: usize, e: &BsonError) -> FaucetError {
    let field = if e.path.is_empty() {
        String::new()
    } else {
        format!(", field {}", e.path)
    };
    FaucetError::data(
        CONNECTOR,
        format!("{target}, page row {}{field}", row + 1),
        e.message.clone(),
    )
}

/// Keys told apart by their JSON form (the values' types and digits: `1` and `"1"` are two
/// keys, as they are two `_id`s).
struct JsonIdentity;

impl KeyIdentity for JsonIdentity {
    fn identify(&mut self, key: &[&Value], out: &mut Vec<u8>) {
        for v in key {
            write_value(out, v);
            out.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use faucet_core::testing::{change_page, keys_of_a_and_b};
    use mongodb::bson::doc;

    use super::*;

    fn planner(template: &str, mode: MongoWriteMode) -> Planner {
        let mut p = Planner::new(
            TableTemplate::parse(template, "collection").expect("template"),
            mode,
            Vec::new(),
            SubMillisecond::Fail,
            None,
        );
        p.source_keys = keys_of_a_and_b();
        p
    }

    #[test]
    fn change_records_route_and_collapse_per_collection() {
        let page = change_page(
            &[
                ("c", "public.a", None, Some((1, "x"))),
                ("c", "public.b", None, Some((1, "y"))),
                ("u", "public.a", Some((1, "x")), Some((2, "x2"))),
                ("d", "public.b", Some((1, "y")), None),
                ("c", "public.a", None, Some((3, "z"))),
            ],
            None,
        );
        let mut p = planner("rep.{table}", MongoWriteMode::Upsert);
        let ops = p.plan(&page).expect("plan");
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].name(), "rep.a");
        assert_eq!(ops[0].deletes, vec![Bson::Int64(1)]);
        assert_eq!(
            ops[0].replaces,
            vec![
                doc! {"_id": 2_i64, "id": 2_i64, "v": "x2"},
                doc! {"_id": 3_i64, "id": 3_i64, "v": "z"}
            ]
        );
        assert_eq!(ops[1].name(), "rep.b");
        assert_eq!(
            ops[1].deletes,
            vec![Bson::Document(doc! {"id": 1_i64, "v": "y"})]
        );
        assert!(ops[1].replaces.is_empty());
    }

    #[test]
    fn append_keeps_every_record_and_truncate_empties_first() {
        let page = change_page(
            &[
                ("c", "public.a", None, Some((1, "x"))),
                ("t", "public.a", None, None),
                ("c", "public.a", None, Some((4, "w"))),
            ],
            None,
        );
        let ops = planner("rep.{table}", MongoWriteMode::Append)
            .plan(&page)
            .expect("plan");
        assert_eq!(ops[0].inserts.len(), 3);
        assert_eq!(
            ops[0].inserts[0].get_document("after").expect("after"),
            &doc! {"id": 1_i64, "v": "x"}
        );
        let ops = planner("rep.{table}", MongoWriteMode::Upsert)
            .plan(&page)
            .expect("plan");
        assert!(ops[0].truncate);
        assert_eq!(
            ops[0].replaces,
            vec![doc! {"_id": 4_i64, "id": 4_i64, "v": "w"}]
        );
    }

    #[test]
    fn plain_rows_need_a_key_or_an_id() {
        let page = faucet_core::testing::conformance::sample_page(&[1], "a", serde_json::json!(1));
        let mut p = planner("db.c", MongoWriteMode::Upsert);
        let e = p.plan(&page).expect_err("no key");
        assert!(e.to_string().contains("key"), "{e}");
        p.key = vec!["id".into()];
        let ops = p.plan(&page).expect("plan");
        assert_eq!(
            ops[0].replaces,
            vec![doc! {"_id": 1_i64, "id": 1_i64, "v": "a1"}]
        );
    }
}
