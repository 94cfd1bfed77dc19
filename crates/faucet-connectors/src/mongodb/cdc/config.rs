//! The `mongodb-cdc` source's configuration (the `source.config` block), and its pure
//! validation.

use secrecy::SecretString;
use serde::Deserialize;

use faucet_core::FaucetError;

use super::CONNECTOR;
use crate::mongodb::connection::MongoConnection;

/// Configuration of a [`super::MongodbCdcSource`].
///
/// ```yaml
/// source:
///   type: mongodb-cdc
///   config:
///     connection_url: ${env:SOURCE_MONGODB_URL}
///     collections: [shop.orders, "inventory.*"]
///     # continuous: false
///     # start: end              # or {at_operation_time: {t: 1700000000, i: 1}}
///     # full_document: update_lookup   # or when_available, required
///     # before: off                    # or when_available, required
/// ```
///
/// The page size and the longest a change waits in a page come from the run
/// ([`faucet_core::ReadOptions`]: `batch_size`, `max_page_delay`), as for the other change
/// sources.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MongodbCdcConfig {
    /// The source, `mongodb://user:password@host:27017/?replicaSet=rs0` (a replica set: change
    /// streams need one). A secret: never printed; `Debug` shows `[redacted]`. The user needs
    /// the `changeStream` and `find` actions on the collections.
    pub connection_url: SecretString,
    /// What to watch, one stream for all: `db.coll` (one collection) or `db.*` (every
    /// collection of the database but `system.*`). All in one database: a database watch;
    /// several databases: a cluster watch (the user then needs `changeStream` on every
    /// database).
    pub collections: Vec<String>,
    /// `false` (the default): a run catches up to the stream's position when it started
    /// (the server's operation time then) and ends, also on an idle server. `true`: follow the
    /// stream until the run is cancelled (SIGINT/SIGTERM), then finish the page in hand and end.
    #[serde(default)]
    pub continuous: bool,
    /// Where a first run (one without a bookmark) starts: `end` (the default: changes made
    /// after the start) or `{at_operation_time: {t, i}}` (a cluster time still in the oplog:
    /// `t` seconds since the epoch, `i` the increment). Ignored once a bookmark exists.
    #[serde(default)]
    pub start: StartPosition,
    /// What `after` holds for an update: `update_lookup` (the default: the document as it is
    /// when the change is read, looked up by `_id`; null when deleted since), `when_available`
    /// (the post-image as of the change, null where the collection has no
    /// `changeStreamPreAndPostImages`), `required` (the post-image as of the change; the run
    /// fails where there is none). Inserts and replaces always carry the whole document.
    #[serde(default)]
    pub full_document: FullDocument,
    /// What `before` holds for updates, replaces and deletes: `off` (the default: the key,
    /// `{"_id": …}`), `when_available` (the pre-image where the collection has
    /// `changeStreamPreAndPostImages` enabled, else the key), `required` (the pre-image; the
    /// run fails where there is none).
    #[serde(default)]
    pub before: Before,
}

/// Where a first run starts reading the change stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum StartPosition {
    /// The stream's end when the run starts.
    #[default]
    End,
    /// A cluster time (`startAtOperationTime`); changes at and after it are read.
    AtOperationTime {
        /// Seconds since the Unix epoch.
        t: u32,
        /// The increment within that second.
        i: u32,
    },
}

/// `full_document`: what an update's `after` holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FullDocument {
    /// `fullDocument: updateLookup`: the current document.
    #[default]
    UpdateLookup,
    /// `fullDocument: whenAvailable`: the post-image where there is one.
    WhenAvailable,
    /// `fullDocument: required`: the post-image, or the run fails.
    Required,
}

/// `before`: what an update's, replace's and delete's `before` holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Before {
    /// The key only (`documentKey`).
    #[default]
    Off,
    /// `fullDocumentBeforeChange: whenAvailable`: the pre-image where there is one.
    WhenAvailable,
    /// `fullDocumentBeforeChange: required`: the pre-image, or the run fails.
    Required,
}

impl std::fmt::Debug for MongodbCdcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongodbCdcConfig")
            .field("connection_url", &"[redacted]")
            .field("collections", &self.collections)
            .field("continuous", &self.continuous)
            .field("start", &self.start)
            .field("full_document", &self.full_document)
            .field("before", &self.before)
            .finish()
    }
}

/// One entry of `collections`: a database and one collection of it, or all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The database.
    pub db: String,
    /// The collection; `None` for `db.*`.
    pub coll: Option<String>,
}

impl Watched {
    /// Whether the change of `db.coll` is one of this entry's (`db.*` leaves out `system.*`).
    pub fn covers(&self, db: &str, coll: &str) -> bool {
        self.db == db
            && match &self.coll {
                Some(c) => c == coll,
                None => !coll.starts_with("system."),
            }
    }
}

/// A [`MongodbCdcConfig`] that passed [`MongodbCdcConfig::validate`], with what validation
/// parsed.
#[derive(Clone, Debug)]
pub struct ValidatedMongodbCdcConfig {
    pub(crate) config: MongodbCdcConfig,
    pub(crate) connection: MongoConnection,
    pub(crate) watched: Vec<Watched>,
}

impl ValidatedMongodbCdcConfig {
    /// The configuration as written.
    pub fn config(&self) -> &MongodbCdcConfig {
        &self.config
    }

    /// Whether a change of `db.coll` is read.
    pub fn covers(&self, db: &str, coll: &str) -> bool {
        self.watched.iter().any(|w| w.covers(db, coll))
    }

    /// The one database every entry names, if they all name the same (a database watch).
    pub fn single_database(&self) -> Option<&str> {
        let first = &self.watched.first()?.db;
        self.watched
            .iter()
            .all(|w| &w.db == first)
            .then_some(first.as_str())
    }
}

impl MongodbCdcConfig {
    /// A configuration with the defaults for the optional fields.
    pub fn new(
        connection_url: impl Into<String>,
        collections: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            connection_url: SecretString::from(connection_url.into()),
            collections: collections.into_iter().map(Into::into).collect(),
            continuous: false,
            start: StartPosition::End,
            full_document: FullDocument::UpdateLookup,
            before: Before::Off,
        }
    }

    /// Checks the fields without any I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field (`connection_url`, `collections`,
    /// `collections[i]`) and what a valid value looks like.
    pub fn validate(&self) -> Result<ValidatedMongodbCdcConfig, FaucetError> {
        let connection = MongoConnection::parse(&self.connection_url, "connection_url", CONNECTOR)?;
        if self.collections.is_empty() {
            return Err(FaucetError::config(
                "collections",
                "name at least one collection as db.collection or db.*, e.g. [shop.orders]",
            ));
        }
        let mut watched: Vec<Watched> = Vec::with_capacity(self.collections.len());
        for (i, entry) in self.collections.iter().enumerate() {
            let field = format!("collections[{i}]");
            let w = parse_entry(entry).map_err(|m| FaucetError::config(&field, m))?;
            if watched.contains(&w) {
                return Err(FaucetError::config(
                    field,
                    format!("`{entry}` is listed twice"),
                ));
            }
            watched.push(w);
        }
        Ok(ValidatedMongodbCdcConfig {
            config: self.clone(),
            connection,
            watched,
        })
    }
}

/// `db.coll` or `db.*`: the database is up to the first dot (MongoDB database names have
/// none), the collection is the rest (it may hold dots: `shop.orders.2024`).
fn parse_entry(entry: &str) -> Result<Watched, String> {
    let Some((db, coll)) = entry.split_once('.') else {
        return Err(format!(
            "`{entry}` names no collection: write db.collection or db.* (every collection)"
        ));
    };
    if db.is_empty() || db.contains(['/', '\\', ' ', '"', '$', '\0', '*']) {
        return Err(format!("`{entry}`: `{db}` is not a valid database name"));
    }
    if coll.is_empty() || coll.contains(['$', '\0']) || (coll != "*" && coll.contains('*')) {
        return Err(format!(
            "`{entry}`: `{coll}` is not a collection name (or `*` for all of `{db}`)"
        ));
    }
    Ok(Watched {
        db: db.to_owned(),
        coll: (coll != "*").then(|| coll.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use faucet_core::testing::config_field as field_of;

    #[test]
    fn defaults_strictness_and_secrecy() {
        let c: MongodbCdcConfig = serde_json::from_value(serde_json::json!({
            "connection_url": "mongodb://u:hunter2@localhost:27017/",
            "collections": ["shop.orders", "inv.*"]
        }))
        .expect("valid");
        assert!(!c.continuous);
        assert_eq!(c.start, StartPosition::End);
        assert_eq!(c.full_document, FullDocument::UpdateLookup);
        assert_eq!(c.before, Before::Off);
        let v = c.validate().expect("valid");
        assert!(v.covers("shop", "orders") && !v.covers("shop", "other"));
        assert!(v.covers("inv", "items") && !v.covers("inv", "system.views"));
        assert_eq!(v.single_database(), None);
        assert!(!format!("{c:?}{v:?}").contains("hunter2"));
        let at: MongodbCdcConfig = serde_json::from_value(serde_json::json!({
            "connection_url": "mongodb://h/", "collections": ["a.b"],
            "start": {"at_operation_time": {"t": 1_700_000_000, "i": 3}},
            "full_document": "required", "before": "when_available"
        }))
        .expect("valid");
        assert_eq!(
            at.start,
            StartPosition::AtOperationTime {
                t: 1_700_000_000,
                i: 3
            }
        );
        assert_eq!(at.validate().expect("valid").single_database(), Some("a"));
        for bad in [
            serde_json::json!({"connection_url": "mongodb://h/", "collections": ["a.b"], "slot": 1}),
            serde_json::json!({"connection_url": "mongodb://h/", "collections": ["a.b"], "start": "now"}),
            serde_json::json!({"connection_url": "mongodb://h/", "collections": ["a.b"], "full_document": "default"}),
            serde_json::json!({"connection_url": "mongodb://h/", "collections": ["a.b"], "before": true}),
        ] {
            assert!(serde_json::from_value::<MongodbCdcConfig>(bad).is_err());
        }
    }

    #[test]
    fn fields_are_checked() {
        let base = MongodbCdcConfig::new("mongodb://localhost/", ["a.b"]);
        let mut c = base.clone();
        c.collections = vec![];
        assert_eq!(field_of(c.validate().expect_err("empty")), "collections");
        for bad in ["nodb", ".c", "a.", "a.b*", "a*.b", "a.$x"] {
            let mut c = base.clone();
            c.collections = vec!["x.y".into(), bad.into()];
            assert_eq!(
                field_of(c.validate().expect_err(bad)),
                "collections[1]",
                "{bad}"
            );
        }
        let mut c = base.clone();
        c.collections = vec!["a.b".into(), "a.b".into()];
        assert_eq!(field_of(c.validate().expect_err("dup")), "collections[1]");
        let mut c = base.clone();
        c.collections = vec!["a.b.c".into()];
        let v = c.validate().expect("dotted collection");
        assert!(v.covers("a", "b.c"));
        let mut c = base;
        c.connection_url = SecretString::from("postgres://localhost/db");
        assert_eq!(
            field_of(c.validate().expect_err("scheme")),
            "connection_url"
        );
    }
}
