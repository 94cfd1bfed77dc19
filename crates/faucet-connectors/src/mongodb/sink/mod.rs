//! The `mongodb` sink, [`MongodbSink`]: documents into MongoDB collections.
//!
//! * **Where**: `collection` is `database.collection`, fixed or a template over the record's
//!   source table ([`faucet_core::route::TableTemplate`]: `replica.{table}`), so a change
//!   stream of many tables lands each table in its own collection; `tables:` maps source
//!   tables to collections, each with its own `key` / `write_mode` if given — the SQL
//!   sinks' routing ([`crate::sql::Route`], one definition). The records written per
//!   collection are told to `faucet serve` ([`faucet_core::SinkWriter::written_targets`]).
//! * **How** (`write_mode`, the module `ops` has the rules): `append` inserts every record as a
//!   document (`insert_many`, ordered); `upsert` applies change records by key (`d` deletes,
//!   `c`/`u`/`r` replace, `t` empties the collection, a key-changing `u` deletes the old key's
//!   document) and replaces plain records by key. Values by [`crate::mongodb::to_bson`].
//! * **A page is one multi-document transaction** when the server has transactions (a
//!   replica set member, or `mongos`): the writer-fence check (`_faucet_fences`), the page's
//!   writes and, for an effectively-once run, the commit token (`_faucet_commit_tokens`,
//!   `{_id: <scope>, sequence, bookmark}`, the bookmark as its JSON text) — committed together
//!   or not at all. That is the atomic watermark: effectively-once for `append` and `upsert`
//!   with a source that replays deterministically and a durable state store. The token and
//!   fence collections are in the database `collection` names (for a template whose database
//!   is a placeholder: the URL's database). The scope is `<state key> -> <collection>`.
//! * **A standalone server** (no transactions): pages are written without a transaction and
//!   without a token or fence; `upsert` stays effectively-once by its key, and `append` is
//!   at-least-once — a run asking `delivery: effectively_once` is refused with the delivery
//!   error naming the sink ([`faucet_core::DeliveryError::Unsatisfiable`]).
//! * **A run killed inside a page's transaction** leaves it open on the server until the
//!   server's `transactionLifetimeLimitSeconds` (60 s by default), holding its documents: the
//!   next writer of the scope (it holds the lease, so the old one is dead or fenced) ends the
//!   old session with `killSessions` — each writer records its session id with its fence —
//!   and a page that meets a write conflict (`TransientTransactionError`) runs again, for up
//!   to 90 s.
//! * Fault points: [`faucet_core::fault::MID_PAGE`] halfway through a page's writes,
//!   [`faucet_core::fault::BEFORE_COMMIT`] before `commitTransaction`.

mod config;
mod ops;
mod probe;
mod writer;

use async_trait::async_trait;

use faucet_core::{FaucetError, Sink, SinkCapabilities, SinkWriter};

pub use crate::mongodb::to_bson::SubMillisecond;
pub use config::{MongoWriteMode, MongodbSinkConfig};

use config::ValidatedMongodbSinkConfig;

/// The connector's name.
pub const CONNECTOR: &str = "mongodb";

/// The collection of commit tokens, in the sink's home database.
pub const TOKENS: &str = "_faucet_commit_tokens";
/// The collection of writer fences (and each writer's session id), in the home database.
pub const FENCES: &str = "_faucet_fences";

/// The `mongodb` sink (module docs). Built without I/O; [`Sink::open`] and [`Sink::check`]
/// connect.
#[derive(Debug)]
pub struct MongodbSink {
    config: ValidatedMongodbSinkConfig,
}

impl MongodbSink {
    /// A sink for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field ([`MongodbSinkConfig`]'s rules).
    pub fn new(config: MongodbSinkConfig) -> Result<Self, FaucetError> {
        Ok(Self {
            config: config.validate()?,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MongodbSinkConfig {
        &self.config.config
    }

    /// What the sink upserts by, routed or not (the SQL sinks' one rule).
    fn upsert_keys(&self) -> crate::sql::UpsertKeys<'_> {
        crate::sql::UpsertKeys {
            route: self.config.route.as_ref(),
            write_mode: self.config.config.write_mode.routed(),
            key: &self.config.config.key,
        }
    }

    /// The scope of tokens and fences under `state_key`: `<state key> -> <collection>`.
    fn scope(&self, state_key: &str) -> String {
        match &self.config.route {
            Some(r) => format!("{state_key} -> {}", r.describe()),
            None => format!("{state_key} -> {}", self.config.config.collection),
        }
    }
}

#[async_trait]
impl Sink for MongodbSink {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// An atomic watermark (a page and its token in one transaction; a server without
    /// transactions is found at open, see the module docs), and a keyed upsert with
    /// `write_mode: upsert`.
    fn capabilities(&self) -> SinkCapabilities {
        SinkCapabilities {
            atomic_watermark: true,
            keyed_upsert: self.upsert_keys().keyed_upsert()
                || (self.config.route.is_none()
                    && self.config.config.write_mode == MongoWriteMode::Upsert),
        }
    }

    /// `mongodb mongodb://host:port collection <collection>`: no user, no password.
    fn target(&self) -> Option<String> {
        let what = match &self.config.route {
            Some(r) => format!("collections {}", r.describe()),
            None => format!("collection {}", self.config.config.collection),
        };
        Some(format!(
            "{CONNECTOR} {} {what}",
            self.config.connection.describe()
        ))
    }

    /// With `write_mode: upsert` (a routed sink: when some target upserts): the
    /// configured `key` (empty: the source's key of each table, else `_id`).
    fn upserts_by(&self) -> Option<Vec<String>> {
        self.upsert_keys().upserts_by()
    }

    /// The key the records of `source_table` are upserted by (`tables:` entries may have
    /// their own), `None` when they are appended.
    fn upserts_by_table(&self, source_table: &str) -> Option<Vec<String>> {
        self.upsert_keys().upserts_by_table(source_table)
    }

    /// Connects (the server's `hello`: whether it has transactions) and starts the writer's
    /// session.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when the server cannot be reached.
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        Ok(Box::new(writer::MongodbWriter::open(self).await?))
    }

    /// `faucet doctor`: reachable, a replica set (transactions) or not, and the right to
    /// write (a probe document written and removed in `_faucet_fences`; with transactions,
    /// a probe insert into a fixed `collection` rolled back).
    ///
    /// # Errors
    /// The failing prerequisite, with its fix.
    async fn check(&self) -> Result<(), FaucetError> {
        probe::check(self).await
    }
}
