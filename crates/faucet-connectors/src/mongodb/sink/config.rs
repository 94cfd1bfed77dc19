//! The `mongodb` sink's configuration (the `sink.config` block), and its pure validation.

use std::collections::BTreeMap;

use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;

use faucet_core::FaucetError;
use faucet_core::route::TableTemplate;

use crate::sql::{Route, TargetEntry, WriteMode};

use super::CONNECTOR;
use crate::mongodb::connection::MongoConnection;
use crate::mongodb::to_bson::SubMillisecond;

/// How the `mongodb` sink writes a page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MongoWriteMode {
    /// Every record is a new document (`insert_many`, ordered; `_id` made by the driver).
    #[default]
    Append,
    /// Documents by key: a change record replaces (`c`/`u`/`r`) or deletes (`d`) its key's
    /// document, `t` empties the collection; a plain record replaces its key's document.
    Upsert,
}

/// Configuration of a [`super::MongodbSink`].
///
/// ```yaml
/// sink:
///   type: mongodb
///   config:
///     connection_url: ${env:TARGET_MONGODB_URL}
///     collection: "replica.{table}"     # or a fixed `db.coll`
///     # tables:                         # per source table (the SQL sinks' `tables:`)
///     #   shop.orders: archive.orders
///     #   shop.events: {table: logs.events, write_mode: append}
///     write_mode: upsert                # or append (the default)
///     # key: [id]                       # default for change records: the source's key
///     # sub_millisecond: fail           # or truncate
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MongodbSinkConfig {
    /// The target server, `mongodb://user:password@host:27017/?replicaSet=rs0`. A secret:
    /// never printed. The commit token (effectively-once) needs multi-document
    /// transactions, so a replica set (one node is enough).
    pub connection_url: SecretString,
    /// The collection, `database.collection`: fixed (`shop.orders`), or a template over the
    /// record's source table (`replica.{table}`, `{schema}.{table}`; the placeholders of
    /// every routing sink: `{schema}` / `{database}`, `{table}`, `{source_table}`), so a
    /// change stream of many tables lands each table in its own collection. The part
    /// before the first `.` is the database. Optional with `tables:` (then the default
    /// for the source tables it does not list).
    #[serde(default)]
    pub collection: String,
    /// Source table → target collection (`db.coll`), or `{table: db.coll, key, write_mode}`
    /// with settings of its own: the routing of the SQL sinks' `tables:`
    /// ([`crate::sql::Route`], one definition), here naming collections. A record whose
    /// source table is neither listed nor covered by a `collection` template is a data error
    /// naming it; two source tables into one collection are refused.
    #[serde(default)]
    pub tables: BTreeMap<String, TargetEntry>,
    /// `append` (the default) or `upsert`.
    #[serde(default)]
    pub write_mode: MongoWriteMode,
    /// The fields a document is upserted by. Empty (the default): for change records the
    /// source's key of their table (its primary key, else its first unique key); for
    /// documents that have an `_id` field, `_id`. The target document's `_id` is the key's
    /// value when the key is one field, else a sub-document `{k1: v1, k2: v2}` in key order;
    /// the key fields also stay fields of the document.
    #[serde(default)]
    pub key: Vec<String>,
    /// A timestamp with digits beyond the millisecond (a BSON Date holds milliseconds):
    /// `fail` (the default: a data error naming the field and row) or `truncate`.
    #[serde(default)]
    pub sub_millisecond: SubMillisecond,
}

impl MongoWriteMode {
    /// The routing's write mode of the same name ([`Route`] is shared with the SQL sinks).
    pub(crate) fn routed(self) -> WriteMode {
        match self {
            Self::Append => WriteMode::Append,
            Self::Upsert => WriteMode::Upsert,
        }
    }
}

impl std::fmt::Debug for MongodbSinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongodbSinkConfig")
            .field("connection_url", &"[redacted]")
            .field("collection", &self.collection)
            .field("tables", &self.tables)
            .field("write_mode", &self.write_mode)
            .field("key", &self.key)
            .field("sub_millisecond", &self.sub_millisecond)
            .finish()
    }
}

/// A config [`MongodbSinkConfig::validate`] accepted, with its parts parsed.
#[derive(Debug, Clone)]
pub(crate) struct ValidatedMongodbSinkConfig {
    pub(crate) config: MongodbSinkConfig,
    pub(crate) connection: MongoConnection,
    /// `collection`, parsed.
    pub(crate) collection: TableTemplate,
    /// The database of the commit tokens and writer fences: the one `collection` fixes
    /// before its `.`, else the URL's default database, else (`tables:` alone) the first
    /// target's.
    pub(crate) home: String,
    /// The routing of source tables to collections, when `collection` is a template or
    /// `tables:` is given.
    pub(crate) route: Option<Route>,
}

impl MongodbSinkConfig {
    /// A configuration appending to `collection` (`db.coll`, or a template) at `url`.
    pub fn new(url: impl Into<String>, collection: impl Into<String>) -> Self {
        Self {
            connection_url: SecretString::from(url.into()),
            collection: collection.into(),
            tables: BTreeMap::new(),
            write_mode: MongoWriteMode::Append,
            key: Vec::new(),
            sub_millisecond: SubMillisecond::Fail,
        }
    }

    /// The routing of source tables to collections (`collection` a template, or
    /// `tables:`); `None` for one fixed collection, or a config that does not validate.
    pub fn route(&self) -> Option<Route> {
        self.validate().ok()?.route
    }

    /// Checks the configuration without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field: `connection_url` not a `mongodb://` URL,
    /// `collection` not `database.collection` (or a template of that shape) or naming an
    /// invalid database, a database placeholder with no database in the URL for the commit
    /// tokens, `key` with an empty or repeated field, a `key` with `write_mode: append`.
    pub(crate) fn validate(&self) -> Result<ValidatedMongodbSinkConfig, FaucetError> {
        let connection = MongoConnection::parse(&self.connection_url, "connection_url", CONNECTOR)?;
        let url_home = || url_database(self.connection_url.expose_secret());
        let (collection, home) = if self.collection.is_empty() {
            if self.tables.is_empty() {
                return Err(FaucetError::config(
                    "collection",
                    "is required: `database.collection`, a template over the source table \
                     (`replica.{table}`), or `tables:` mapping source tables to collections",
                ));
            }
            // The URL's database, else the first target's (the map's order: stable).
            let first = self.tables.values().next().and_then(|e| {
                let name = match e {
                    TargetEntry::Name(n) => n.as_str(),
                    TargetEntry::Spec(s) => s.table.as_str(),
                };
                name.split_once('.').map(|(db, _)| db.to_owned())
            });
            let home = url_home().or(first).ok_or_else(|| {
                FaucetError::config(
                    "tables",
                    "names no database for the commit tokens and writer fences: write \
                     targets as `database.collection`, or name one in the URL's path \
                     (`mongodb://host:27017/faucet`)",
                )
            })?;
            (TableTemplate::parse("{table}", "collection")?, home)
        } else {
            self.check_collection_field()?
        };
        let parse_name = |name: &str, field: &str| -> Result<(), FaucetError> {
            check_target(name).map_err(|m| FaucetError::config(field, m))
        };
        let validate_field = |name: &str, field: &str| -> Result<(), FaucetError> {
            crate::mongodb::to_bson::check_name(name)
                .map_err(|e| FaucetError::config(field, e.message))
        };
        let route = Route::parse(
            (&self.collection, &self.tables),
            (&self.key, self.write_mode.routed()),
            &parse_name,
            &validate_field,
        )?;
        for (i, k) in self.key.iter().enumerate() {
            if k.is_empty() {
                return Err(FaucetError::config(
                    format!("key[{i}]"),
                    "must not be empty",
                ));
            }
            if self.key[..i].contains(k) {
                return Err(FaucetError::config(
                    format!("key[{i}]"),
                    format!("`{k}` is listed twice"),
                ));
            }
        }
        if !self.key.is_empty() && self.write_mode == MongoWriteMode::Append {
            return Err(FaucetError::config(
                "key",
                "is used by `write_mode: upsert` only; remove it, or set `write_mode: upsert`",
            ));
        }
        Ok(ValidatedMongodbSinkConfig {
            config: self.clone(),
            connection,
            collection,
            home,
            route,
        })
    }

    /// `collection` parsed, and the database of the commit tokens it gives.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `collection` (module docs of [`Self::validate`]).
    fn check_collection_field(&self) -> Result<(TableTemplate, String), FaucetError> {
        let collection = TableTemplate::parse(&self.collection, "collection")?;
        let Some((db, coll)) = self.collection.split_once('.') else {
            return Err(FaucetError::config(
                "collection",
                format!(
                    "`{}` names no database: write `database.collection` (`shop.orders`, \
                     `replica.{{table}}`)",
                    self.collection
                ),
            ));
        };
        if coll.is_empty() {
            return Err(FaucetError::config(
                "collection",
                format!("`{}` has an empty collection name", self.collection),
            ));
        }
        let home = if db.contains('{') {
            url_database(self.connection_url.expose_secret()).ok_or_else(|| {
                FaucetError::config(
                    "collection",
                    format!(
                        "`{}` takes its database from the source table, so the commit tokens \
                         and writer fences need a database of their own: name one in the \
                         URL's path (`mongodb://host:27017/faucet`)",
                        self.collection
                    ),
                )
            })?
        } else {
            check_database(db).map_err(|m| FaucetError::config("collection", m))?;
            db.to_owned()
        };
        Ok((collection, home))
    }
}

/// A target `db.coll` by MongoDB's rules (a `tables:` entry, or a rendered template).
///
/// # Errors
/// A message naming the name and the rule.
pub(crate) fn check_target(name: &str) -> Result<(), String> {
    let Some((db, coll)) = name.split_once('.') else {
        return Err(format!(
            "`{name}` names no database: write `database.collection`"
        ));
    };
    check_database(db)?;
    check_collection(coll)
}

/// The database in a `mongodb://…/db?…` URL's path, if any.
fn url_database(url: &str) -> Option<String> {
    let rest = url.strip_prefix("mongodb://")?;
    let path = rest.split_once('/')?.1;
    let db = path.split('?').next().unwrap_or_default();
    (!db.is_empty()).then(|| db.to_owned())
}

/// MongoDB's database name rule: 1 to 63 bytes, none of `/\. "$*<>:|?` nor U+0000.
///
/// # Errors
/// A message naming the database and the rule.
pub(crate) fn check_database(db: &str) -> Result<(), String> {
    if db.is_empty()
        || db.len() > 63
        || db.contains([
            '/', '\\', '.', ' ', '"', '$', '*', '<', '>', ':', '|', '?', '\0',
        ])
    {
        return Err(format!(
            "`{db}` is not a MongoDB database name (1 to 63 bytes, none of / \\ . space \" $ * \
             < > : | ? or U+0000)"
        ));
    }
    Ok(())
}

/// MongoDB's collection name rule: not empty, no `$` nor U+0000, not `system.*`.
///
/// # Errors
/// A message naming the collection and the rule.
pub(crate) fn check_collection(coll: &str) -> Result<(), String> {
    if coll.is_empty() || coll.contains(['$', '\0']) || coll.starts_with("system.") {
        return Err(format!(
            "`{coll}` is not a collection name a sink may write (not empty, no `$` or U+0000, \
             not `system.*`)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(url: &str, coll: &str) -> MongodbSinkConfig {
        MongodbSinkConfig::new(url, coll)
    }

    #[test]
    fn collections_need_a_database_and_tokens_a_home() {
        let v = cfg("mongodb://h/", "shop.orders")
            .validate()
            .expect("valid");
        assert_eq!(v.home, "shop");
        let v = cfg("mongodb://h/", "replica.{table}")
            .validate()
            .expect("valid");
        assert_eq!(v.home, "replica");
        let e = cfg("mongodb://h/", "{schema}.{table}")
            .validate()
            .expect_err("no home");
        assert!(e.to_string().contains("URL's path"), "{e}");
        let v = cfg(
            "mongodb://u:p@h/faucet?directConnection=true",
            "{schema}.{table}",
        )
        .validate()
        .expect("valid");
        assert_eq!(v.home, "faucet");
        for bad in ["orders", "shop.", "sh op.orders", "shop.{nope}"] {
            assert!(cfg("mongodb://h/", bad).validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_are_checked() {
        let mut c = cfg("mongodb://h/", "a.b");
        c.key = vec!["id".into()];
        assert!(c.validate().is_err(), "key with append");
        c.write_mode = MongoWriteMode::Upsert;
        assert!(c.validate().is_ok());
        c.key = vec!["id".into(), "id".into()];
        assert!(c.validate().is_err());
    }
}
