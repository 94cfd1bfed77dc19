//! The message every bus sink sends for a record: route, key, value and headers, made here
//! once for all of them (`redis-streams`, `nats`, `kafka`).
//!
//! | part | what |
//! |---|---|
//! | route | the stream / subject / topic: the sink's [`TableTemplate`] rendered for the record's source table (`cdc.{schema}.{table}` → `cdc.public.orders`) |
//! | value | `format: faucet` (default): the record as faucet's JSON, the bytes of a jsonl line without its newline ([`faucet_core::RowRef::write_json`]) — a change record as its change-record JSON. `format: debezium`: `{"before","after","source","op","ts_ms"}` (below) |
//! | key | `{"f": value, …}` as JSON, taken from the row, or from a change record's `after` (its `before` for a delete), of the fields `key: [f, …]` names; without `key`, a change record's by its source table's key ([`SourceKeys`]: the primary key, else the first unique key whose columns the record has); none for a plain row without `key`, a table without a key, or a truncate |
//! | `faucet-op` | a change record's op (`c` `u` `d` `r` `t`); absent for plain rows |
//! | `faucet-table` | a change record's source table (`public.orders`, `shop.orders`); absent for plain rows |
//! | `faucet-position` | where the record is in its source, as JSON: a change record's position fields (`{"lsn":"0/16B3748"}`, `{"binlog_file":…,"binlog_pos":…,"gtid":…}`); for a plain row, the bookmark after its page |
//! | `faucet-id` | a deterministic message id, `<state key>/<start>/<n>`: the state key (empty when the writer was not told one: an at-least-once run without a lease), 16 hex digits of SHA-256 over the bookmark the record's page started from ([`faucet_core::PageStart`], set by the run loop), and `n`, the record's place after that bookmark (its index in the page, plus the records of pages without a bookmark before it). A source replays the same records in the same order after a bookmark however it cuts them into pages, so one id never names two records; a record replayed from the same bookmark gets the same id, so a consumer can drop duplicates by it (a replay from a later bookmark names it anew: dropping by id removes duplicates, never a record) |
//!
//! The Debezium envelope: `before` and `after` as the change record has them (rows as JSON
//! objects, or null), `op` its op, `ts_ms` its `commit_ts` in milliseconds since the epoch
//! (null without one), `source` `{"table": <source table>, <position fields>…}`. A plain row
//! is sent as a snapshot read: `{"before":null,"after":<row>,"source":{},"op":"r","ts_ms":null}`.

use std::sync::Arc;

use faucet_core::change::{ChangeLayout, Op};
use faucet_core::route::TableTemplate;
use faucet_core::value::json::{write_object, write_str, write_value};
use faucet_core::{FaucetError, Page, Schema, Value};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// Header: the change record's op.
pub const HEADER_OP: &str = "faucet-op";
/// Header: the change record's source table.
pub const HEADER_TABLE: &str = "faucet-table";
/// Header: the record's source position, as JSON.
pub const HEADER_POSITION: &str = "faucet-position";
/// Header: the deterministic message id.
pub const HEADER_ID: &str = "faucet-id";

/// How a record becomes a message's value (`format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageFormat {
    /// The record as faucet's JSON (a jsonl line).
    #[default]
    Faucet,
    /// The Debezium envelope `{"before","after","source","op","ts_ms"}`.
    Debezium,
}

/// One record as a bus message (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The stream, subject or topic.
    pub route: String,
    /// The key as JSON: the sink's `key` fields, or a change record's source key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
    /// `faucet-op`.
    pub op: Option<&'static str>,
    /// `faucet-table`.
    pub table: Option<String>,
    /// `faucet-position` (JSON).
    pub position: Vec<u8>,
    /// `faucet-id`.
    pub id: String,
}

impl Message {
    /// The headers present, in the order of the module docs: `(name, value)`.
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, &[u8])> + '_ {
        [
            self.op.map(|op| (HEADER_OP, op.as_bytes())),
            self.table.as_deref().map(|t| (HEADER_TABLE, t.as_bytes())),
            Some((HEADER_POSITION, self.position.as_slice())),
            Some((HEADER_ID, self.id.as_bytes())),
        ]
        .into_iter()
        .flatten()
    }
}

/// How many of `messages` go to each route (stream, subject), in the order first met: what
/// a bus sink's writer reports as [`faucet_core::SinkWriter::written_targets`].
pub fn per_route(messages: &[Message]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for m in messages {
        match out.iter_mut().rev().find(|(route, _)| *route == m.route) {
            Some((_, n)) => *n += 1,
            None => out.push((m.route.clone(), 1)),
        }
    }
    out
}

/// The source's keys of its tables, as a bus sink's writer is told them
/// ([`faucet_core::SinkWriter::source_keys`]): what a change record is keyed by when the
/// sink's config has no `key`. Per table: the primary key, then each unique key (a
/// PostgreSQL replica identity index among them); a record is keyed by the first of them
/// whose columns it has all of (a delete's `before` holds only the replica identity's).
#[derive(Debug, Clone, Default)]
pub struct SourceKeys(std::collections::HashMap<String, Vec<Vec<String>>>);

impl SourceKeys {
    /// The keys of `tables`; a table without any is left out (its records have no key).
    pub fn new(tables: &[faucet_core::keys::TableKeys]) -> Self {
        Self(
            tables
                .iter()
                .filter(|t| !t.is_keyless())
                .map(|t| {
                    let keys = t.primary_key.iter().chain(&t.unique_sets).cloned();
                    (t.table.clone(), keys.collect())
                })
                .collect(),
        )
    }

    /// The first key of `table` whose every column is a field of `schema`.
    fn of(&self, table: &str, schema: &Schema) -> Option<&[String]> {
        self.0
            .get(table)?
            .iter()
            .map(Vec::as_slice)
            .find(|key| key.iter().all(|c| schema.index_of(c).is_some()))
    }
}

/// Turns pages into [`Message`]s for one sink's configuration.
#[derive(Debug, Clone)]
pub struct MessageEncoder {
    connector: &'static str,
    route: TableTemplate,
    key: Vec<String>,
    format: MessageFormat,
}

impl MessageEncoder {
    /// An encoder routing by `route`, keying by `key`, writing `format`; `connector` names
    /// the sink in errors.
    pub fn new(
        connector: &'static str,
        route: TableTemplate,
        key: Vec<String>,
        format: MessageFormat,
    ) -> Self {
        Self {
            connector,
            route,
            key,
            format,
        }
    }

    /// The route template.
    pub fn route(&self) -> &TableTemplate {
        &self.route
    }

    /// Whether change records are keyed by their source table's key: the config names no
    /// `key` ([`faucet_core::Sink::keys_by_source`]).
    pub fn keys_by_source(&self) -> bool {
        self.key.is_empty()
    }

    /// The messages of `page`'s records, in order; `scope` is the state key the writer was
    /// told (empty when none), `keys` the source's keys it was told (change records are
    /// keyed by them when the sink has no `key`).
    ///
    /// # Errors
    /// [`FaucetError::Data`] naming the record when its route cannot be rendered (a template
    /// with placeholders and a record without a source table), a `key` field is missing, or
    /// a change record is malformed.
    pub fn encode(
        &self,
        page: &Page,
        scope: &str,
        keys: &SourceKeys,
    ) -> Result<Vec<Message>, FaucetError> {
        let schema = page.schema();
        let layout = ChangeLayout::of(schema);
        let start = page.start();
        let page_id = page_id(scope, start.bookmark.as_ref());
        let page_position = page
            .bookmark()
            .map(|b| serde_json::to_vec(b).unwrap_or_default())
            .unwrap_or_else(|| b"null".to_vec());
        let mut out = Vec::with_capacity(page.len());
        for (index, row) in page.rows().enumerate() {
            let values = row.values();
            let at = || format!("record {} of the page", index + 1);
            let id = format!("{page_id}/{}", start.offset + index as u64);
            let message = match &layout {
                None => {
                    let route = self
                        .route
                        .render(None)
                        .map_err(|m| FaucetError::data(self.connector, at(), m))?;
                    let key = key_json(&self.key, schema, values)
                        .map_err(|m| FaucetError::data(self.connector, at(), m))?;
                    let mut value = Vec::with_capacity(64);
                    match self.format {
                        MessageFormat::Faucet => write_object(&mut value, schema, values),
                        MessageFormat::Debezium => {
                            value.extend_from_slice(b"{\"before\":null,\"after\":");
                            write_object(&mut value, schema, values);
                            value.extend_from_slice(b",\"source\":{},\"op\":\"r\",\"ts_ms\":null}");
                        }
                    }
                    Message {
                        route,
                        key,
                        value,
                        op: None,
                        table: None,
                        position: page_position.clone(),
                        id,
                    }
                }
                Some(layout) => {
                    let change = layout
                        .read(values)
                        .map_err(|m| FaucetError::data(self.connector, at(), m))?;
                    let route = self
                        .route
                        .render(change.table)
                        .map_err(|m| FaucetError::data(self.connector, at(), m))?;
                    let keyed = match change.op {
                        Op::Delete => change.before,
                        _ => change.after.or(change.before),
                    };
                    let key = match keyed {
                        Some(r) if !matches!(change.op, Op::Truncate | Op::Schema) => {
                            let names = match (self.key.is_empty(), change.table) {
                                (false, _) => Some(self.key.as_slice()),
                                (true, Some(table)) => keys.of(table, &r.schema),
                                (true, None) => None,
                            };
                            key_json(names.unwrap_or_default(), &r.schema, &r.values)
                                .map_err(|m| FaucetError::data(self.connector, at(), m))?
                        }
                        _ => None,
                    };
                    let mut position = Vec::with_capacity(48);
                    position.push(b'{');
                    for (n, &i) in layout.position_fields().iter().enumerate() {
                        if n > 0 {
                            position.push(b',');
                        }
                        write_str(&mut position, &schema.fields()[i].name);
                        position.push(b':');
                        write_value(&mut position, &values[i]);
                    }
                    position.push(b'}');
                    let mut value = Vec::with_capacity(128);
                    match self.format {
                        MessageFormat::Faucet => write_object(&mut value, schema, values),
                        MessageFormat::Debezium => {
                            debezium(&mut value, schema, values, &change, &position);
                        }
                    }
                    Message {
                        route,
                        key,
                        value,
                        op: Some(change.op.code()),
                        table: change.table.map(str::to_owned),
                        position,
                        id,
                    }
                }
            };
            out.push(message);
        }
        Ok(out)
    }
}

/// `{"f": value, …}` of the fields `names` of a row of `schema`, or `None` for no names.
fn key_json(
    names: &[String],
    schema: &Schema,
    values: &[Value],
) -> Result<Option<Vec<u8>>, String> {
    if names.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(32);
    out.push(b'{');
    for (n, name) in names.iter().enumerate() {
        let Some(i) = schema.index_of(name) else {
            return Err(format!(
                "the key field `{name}` is not a field of the record (fields: {})",
                schema.names().collect::<Vec<_>>().join(", ")
            ));
        };
        if n > 0 {
            out.push(b',');
        }
        write_str(&mut out, name);
        out.push(b':');
        write_value(&mut out, &values[i]);
    }
    out.push(b'}');
    Ok(Some(out))
}

/// `<scope>/<16 hex digits of SHA-256 of the bookmark's JSON>` (no bookmark, or a `null`
/// one — the source's start either way: of nothing): the page part of `faucet-id` and of the
/// `nats` sink's `Nats-Msg-Id`, both over the bookmark the page started from.
pub fn page_id(scope: &str, bookmark: Option<&faucet_core::Bookmark>) -> String {
    let text = match bookmark {
        None | Some(faucet_core::Bookmark::Null) => Vec::new(),
        Some(b) => serde_json::to_vec(b).unwrap_or_default(),
    };
    let digest = sha2::Sha256::digest(&text);
    let mut hex = String::with_capacity(scope.len() + 17);
    hex.push_str(scope);
    hex.push('/');
    for b in &digest[..8] {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// The Debezium envelope of one change record.
fn debezium(
    out: &mut Vec<u8>,
    schema: &Arc<Schema>,
    values: &[Value],
    change: &faucet_core::change::Change<'_>,
    position: &[u8],
) {
    let row = |out: &mut Vec<u8>, r: Option<&faucet_core::value::Row>| match r {
        Some(r) => write_object(out, &r.schema, &r.values),
        None => out.extend_from_slice(b"null"),
    };
    out.extend_from_slice(b"{\"before\":");
    row(out, change.before);
    out.extend_from_slice(b",\"after\":");
    row(out, change.after);
    out.extend_from_slice(b",\"source\":{");
    if let Some(t) = change.table {
        out.extend_from_slice(b"\"table\":");
        write_str(out, t);
        if position.len() > 2 {
            out.push(b',');
        }
    }
    // The position fields, without the braces of their object.
    out.extend_from_slice(&position[1..position.len() - 1]);
    out.extend_from_slice(b"},\"op\":");
    write_str(out, change.op.code());
    out.extend_from_slice(b",\"ts_ms\":");
    let ts = schema
        .index_of(faucet_core::change::COMMIT_TS)
        .and_then(|i| match &values[i] {
            Value::TimestampTz(t) | Value::Timestamp(t) | Value::Text(t) => {
                chrono::DateTime::parse_from_rfc3339(t).ok()
            }
            _ => None,
        });
    match ts {
        Some(t) => out.extend_from_slice(t.timestamp_millis().to_string().as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use faucet_core::change::record_schema;
    use faucet_core::{DataType, Field, PageBuilder};
    use serde_json::json;

    fn encoder(template: &str, key: &[&str], format: MessageFormat) -> MessageEncoder {
        MessageEncoder::new(
            "test",
            TableTemplate::parse(template, "stream").expect("template"),
            key.iter().map(|k| (*k).to_owned()).collect(),
            format,
        )
    }

    fn change_page() -> Page {
        let schema = record_schema(vec![Field::new("lsn", DataType::Text)], vec![]);
        let row_schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int),
            Field::new("v", DataType::Text),
        ]));
        let mut b = PageBuilder::new(schema, 2);
        b.push_row([
            Value::Text("c".into()),
            Value::Text("public.orders".into()),
            Value::Text("0/10".into()),
            Value::TimestampTz("2026-11-30T06:00:00Z".into()),
            Value::Null,
            Value::row(
                row_schema.clone(),
                vec![Value::Int(7), Value::Text("a".into())],
            ),
        ]);
        b.push_row([
            Value::Text("d".into()),
            Value::Text("public.orders".into()),
            Value::Text("0/20".into()),
            Value::TimestampTz("2026-11-30T06:00:01Z".into()),
            Value::row(row_schema, vec![Value::Int(7), Value::Null]),
            Value::Null,
        ]);
        b.finish(Some(json!({"lsn": "0/20"})))
    }

    fn parse(bytes: &[u8]) -> serde_json::Value {
        serde_json::from_slice(bytes).expect("json")
    }

    /// Without `key`, a change record is keyed by its table's source key: the primary key,
    /// or the first unique key the record's row has every column of; a table the source
    /// shows no key for, or one the sink was not told, gives no key. A configured `key`
    /// wins over the source's.
    #[test]
    fn change_records_are_keyed_by_the_source_key_without_key() {
        let keys = |primary: Option<&[&str]>, unique: &[&[&str]]| {
            let names = |k: &[&str]| k.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
            SourceKeys::new(&[faucet_core::keys::TableKeys {
                table: "public.orders".into(),
                primary_key: primary.map(names),
                unique_sets: unique.iter().map(|k| names(k)).collect(),
            }])
        };
        let e = encoder("cdc.{table}", &[], MessageFormat::Faucet);
        assert!(e.keys_by_source());
        let keyed = |keys: &SourceKeys| -> Vec<Option<serde_json::Value>> {
            e.encode(&change_page(), "", keys)
                .expect("encode")
                .iter()
                .map(|m| m.key.as_deref().map(parse))
                .collect()
        };
        // The insert's `after` and the delete's `before` both hold `id`.
        let by_id = Some(json!({"id": 7}));
        assert_eq!(keyed(&keys(Some(&["id"]), &[])), vec![by_id.clone(), by_id]);
        // A primary key the rows do not have: the first unique key they do.
        assert_eq!(
            keyed(&keys(Some(&["tenant", "id"]), &[&["x"], &["v"]])),
            vec![Some(json!({"v": "a"})), Some(json!({"v": null}))]
        );
        assert_eq!(keyed(&keys(None, &[])), vec![None, None], "a keyless table");
        assert_eq!(keyed(&SourceKeys::default()), vec![None, None], "not told");
        let configured = encoder("cdc.{table}", &["v"], MessageFormat::Faucet);
        assert!(!configured.keys_by_source());
        let m = configured
            .encode(&change_page(), "", &keys(Some(&["id"]), &[]))
            .expect("encode");
        assert_eq!(m[0].key.as_deref().map(parse), Some(json!({"v": "a"})));
    }

    /// A page that starts from the source's start gets one page id whether its start is
    /// given as no bookmark (the run loop's first page) or as `null` (the nats sink's
    /// re-anchor of an empty stream): its `faucet-id` and `Nats-Msg-Id` are the same text.
    #[test]
    fn the_source_start_has_one_page_id() {
        let none = page_id("k", None);
        assert_eq!(page_id("k", Some(&faucet_core::Bookmark::Null)), none);
        assert_eq!(none.len(), "k/".len() + 16);
        assert_ne!(page_id("k", Some(&serde_json::json!({"offset": 0}))), none);
    }

    #[test]
    fn change_records_carry_route_key_and_headers() {
        let page = change_page();
        let msgs = encoder("cdc.{schema}.{table}", &["id"], MessageFormat::Faucet)
            .encode(&page, "orders", &SourceKeys::default())
            .expect("encode");
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].route, "cdc.public.orders");
        assert_eq!(
            parse(msgs[0].key.as_deref().expect("key")),
            json!({"id": 7})
        );
        assert_eq!(
            parse(msgs[1].key.as_deref().expect("key")),
            json!({"id": 7})
        );
        // The value is exactly the record's JSON, as the jsonl sink writes it.
        let mut line = Vec::new();
        page.row(0).expect("row").write_json(&mut line);
        assert_eq!(msgs[0].value, line);
        let headers: Vec<_> = msgs[1].headers().collect();
        assert_eq!(headers[0], (HEADER_OP, b"d".as_slice()));
        assert_eq!(headers[1], (HEADER_TABLE, b"public.orders".as_slice()));
        assert_eq!(parse(headers[2].1), json!({"lsn": "0/20"}));
        assert!(msgs[1].id.starts_with("orders/") && msgs[1].id.ends_with("/1"));
        // Deterministic: the same page gives the same ids, another page other ones.
        let again = encoder("x", &[], MessageFormat::Faucet)
            .encode(&page, "orders", &SourceKeys::default())
            .expect("encode");
        assert_eq!(again[1].id, msgs[1].id);
        assert_eq!(again[0].key, None);
        let mut other = change_page();
        other.set_start(faucet_core::PageStart {
            bookmark: Some(json!({"lsn": "0/5"})),
            offset: 0,
        });
        let other = encoder("x", &[], MessageFormat::Faucet)
            .encode(&other, "orders", &SourceKeys::default())
            .expect("encode");
        assert_ne!(other[1].id, msgs[1].id);
    }

    /// The ids name records by where their page started, not where it ended: a replay that
    /// cuts pages elsewhere names the same record alike, and two different records ending
    /// pages at the same bookmark never share an id (they did when ids hashed the bookmark
    /// after the page: a consumer deduplicating by id would have dropped a record).
    #[test]
    fn ids_follow_the_records_not_the_page_cuts() {
        let at = |lsn: &str, offset| faucet_core::PageStart {
            bookmark: Some(json!({ "lsn": lsn })),
            offset,
        };
        let e = encoder("x", &[], MessageFormat::Faucet);
        // Run 1: one page of both records, from 0/5.
        let mut whole = change_page();
        whole.set_start(at("0/5", 0));
        let whole = e
            .encode(&whole, "k", &SourceKeys::default())
            .expect("encode");
        // Run 2, from the same bookmark: the second record comes in a page of its own after a
        // page without a bookmark that held the first.
        let mut tail = change_page();
        tail.set_start(at("0/5", 1));
        let tail = e
            .encode(&tail, "k", &SourceKeys::default())
            .expect("encode");
        assert_eq!(tail[0].id, whole[1].id, "the same record, the same id");
        // Run 3, from a later bookmark, ending at the same one: its first record is not run 1's.
        let mut later = change_page();
        later.set_start(at("0/10", 0));
        let later = e
            .encode(&later, "k", &SourceKeys::default())
            .expect("encode");
        assert!(later.iter().all(|m| whole.iter().all(|w| w.id != m.id)));
    }

    #[test]
    fn the_debezium_envelope() {
        let msgs = encoder("x", &[], MessageFormat::Debezium)
            .encode(&change_page(), "", &SourceKeys::default())
            .expect("encode");
        assert_eq!(
            parse(&msgs[0].value),
            json!({"before": null, "after": {"id": 7, "v": "a"},
                   "source": {"table": "public.orders", "lsn": "0/10"},
                   "op": "c", "ts_ms": 1_796_018_400_000_i64})
        );
        assert_eq!(parse(&msgs[1].value)["before"], json!({"id": 7, "v": null}));
    }

    #[test]
    fn plain_rows_and_their_errors() {
        let page = faucet_core::testing::conformance::sample_page(&[1, 2], "v", json!(9));
        let msgs = encoder("events", &["id"], MessageFormat::Debezium)
            .encode(&page, "", &SourceKeys::default())
            .expect("encode");
        assert_eq!(msgs[1].route, "events");
        assert_eq!(msgs[1].op, None);
        assert_eq!(msgs[1].position, b"9");
        assert_eq!(
            parse(&msgs[1].value),
            json!({"before": null, "after": {"id": 2, "v": "v2"}, "source": {}, "op": "r", "ts_ms": null})
        );
        let err = encoder("cdc.{table}", &[], MessageFormat::Faucet)
            .encode(&page, "", &SourceKeys::default())
            .expect_err("no table");
        assert!(matches!(err, FaucetError::Data { .. }), "{err}");
        let err = encoder("events", &["nope"], MessageFormat::Faucet)
            .encode(&page, "", &SourceKeys::default())
            .expect_err("no field");
        assert!(err.to_string().contains("`nope`"), "{err}");
    }
}
