//! The `mongodb-cdc` source: document changes read from a MongoDB change stream (the official
//! driver's `watch`), emitting faucet's change records. Tested against SecantusDB (a
//! MongoDB-wire-compatible server), not `mongod`; see the README for what comes from
//! MongoDB's manual only.
//!
//! ```no_run
//! # fn build() -> Result<(), faucet_core::FaucetError> {
//! use faucet_connectors::mongodb::cdc::{MongodbCdcConfig, MongodbCdcSource};
//!
//! let source = MongodbCdcSource::new(MongodbCdcConfig::new(
//!     "mongodb://reader:secret@localhost:27017/?replicaSet=rs0",
//!     ["shop.orders", "inventory.*"],
//! ))?;
//! # let _ = source;
//! # Ok(())
//! # }
//! ```
//!
//! How it reads (module `stream`): one stream for every listed collection, filtered on the
//! server; records as module `record` maps them (values by [`crate::mongodb::value`]); the
//! bookmark (module `bookmark`) is a resume token, resumed with `startAfter`. A token no
//! longer in the oplog (error 286, ChangeStreamHistoryLost) is refused with
//! [`FaucetError::Bookmark`], telling the user to re-snapshot with `faucet replicate`:
//! nothing is skipped silently. `check()` (`faucet doctor`) probes the server (a replica
//! set), the privileges (a change stream opened and closed, a `find` per listed collection),
//! the pre- and post-images `before` / `full_document` need, and reports the oplog window;
//! `check_resume` says whether the stored token is still inside it. The retention monitor
//! (module `retention`) samples the oplog window and the bookmark's age in it for `faucet
//! serve`'s metrics and status.

mod bookmark;
mod config;
mod probe;
pub(crate) mod record;
mod retention;
pub(crate) mod stream;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use mongodb::bson::{Timestamp, doc};

use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

pub use bookmark::CdcBookmark;
pub use config::{
    Before, FullDocument, MongodbCdcConfig, StartPosition, ValidatedMongodbCdcConfig, Watched,
};
pub use record::{CLUSTER_TIME, RESUME_TOKEN, record_schema};

use stream::{Carry, CdcPageStream, Start};

/// The connector's name, in errors and summaries.
pub const CONNECTOR: &str = "mongodb-cdc";

/// The `mongodb-cdc` source. Built without I/O; [`Source::open`] and [`Source::check`]
/// connect.
#[derive(Debug)]
pub struct MongodbCdcSource {
    validated: ValidatedMongodbCdcConfig,
}

impl MongodbCdcSource {
    /// A source for `config`, validated without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the invalid field.
    pub fn new(config: MongodbCdcConfig) -> Result<Self, FaucetError> {
        Ok(Self {
            validated: config.validate()?,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MongodbCdcConfig {
        &self.validated.config
    }

    /// The configuration with what validation parsed.
    pub fn validated(&self) -> &ValidatedMongodbCdcConfig {
        &self.validated
    }

    /// Where a read from `from` starts.
    fn start(&self, from: Option<&Bookmark>) -> Result<Start, FaucetError> {
        let Some(b) = from else {
            return Ok(match self.config().start {
                StartPosition::End => Start::End,
                StartPosition::AtOperationTime { t, i } => Start::At(Timestamp {
                    time: t,
                    increment: i,
                }),
            });
        };
        let bookmark = CdcBookmark::from_json(b)?;
        record::token_from_text(&bookmark.resume_token)
            .map(Start::After)
            .map_err(|e| {
                FaucetError::bookmark(
                    CONNECTOR,
                    format!("the stored resume token cannot be used: {e}"),
                    None,
                )
            })
    }
}

/// The server's operation time now (a `ping`'s `operationTime`, else its `$clusterTime`).
pub(crate) async fn operation_time(
    client: &mongodb::Client,
    config: &ValidatedMongodbCdcConfig,
) -> Result<Timestamp, FaucetError> {
    let reply = client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .map_err(|e| {
            config
                .connection
                .error("ask the server's operation time", &e)
        })?;
    reply
        .get_timestamp("operationTime")
        .ok()
        .or_else(|| {
            reply
                .get_document("$clusterTime")
                .ok()
                .and_then(|c| c.get_timestamp("clusterTime").ok())
        })
        .ok_or_else(|| {
            FaucetError::read(
                CONNECTOR,
                format!(
                    "{} gives no operation time: change streams need a replica set member",
                    config.connection.describe()
                ),
                None,
            )
        })
}

#[async_trait]
impl Source for MongodbCdcSource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// The same events from a resume token (with `update_lookup` an update's `after` is the
    /// document as it is when read).
    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::Deterministic
    }

    fn record_schema(&self) -> Option<Arc<faucet_core::Schema>> {
        Some(record_schema())
    }

    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let start = self.start(from.as_ref())?;
        let client = self.validated.connection.client().await?;
        let end = if self.config().continuous {
            None
        } else {
            Some(operation_time(&client, &self.validated).await?)
        };
        // A bounded run's span in cluster time: from where it starts to `end`.
        let span = end.and_then(|end| {
            let begin = match &start {
                Start::End => Some(end),
                Start::At(ts) => Some(*ts),
                Start::After(_) => from
                    .as_ref()
                    .and_then(|b| CdcBookmark::from_json(b).ok())
                    .and_then(|b| b.cluster_time),
            };
            begin.map(|begin| (begin, end))
        });
        let events =
            stream::watch(&client, &self.validated, start, &options, Carry::Documents).await?;
        Ok(Box::new(CdcPageStream {
            client,
            config: &self.validated,
            events,
            options,
            schema: record_schema(),
            end,
            span,
            position: None,
            handed: None,
            last_handed_at: Instant::now(),
            done: false,
        }))
    }

    async fn check(&self) -> Result<(), FaucetError> {
        probe::check(&self.validated).await.map(|_| ())
    }

    /// The oplog window and the bookmark's age in it (module `retention`), on a client of
    /// the monitor's own.
    fn retention_monitor(&self) -> Option<Box<dyn faucet_core::RetentionMonitor>> {
        Some(Box::new(retention::OplogMonitor::new(
            self.validated.connection.clone(),
        )))
    }

    async fn check_resume(&self, from: &Bookmark) -> Result<Option<String>, FaucetError> {
        if from.is_null() {
            return Ok(None);
        }
        let bookmark = CdcBookmark::from_json(from)?;
        probe::check_resume(&self.validated, &bookmark)
            .await
            .map(Some)
    }
}
