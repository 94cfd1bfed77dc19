//! `faucet replicate` from MongoDB: a consistent copy of the listed collections, then their
//! change stream from exactly the copy's point — no gap, no overlap — into any sink. The
//! contract of `postgres::snapshot` and `mysql::snapshot`, on change-stream terms.
//!
//! [`MongodbReplicateSource`] takes a `mongodb-cdc` configuration ([`MongodbCdcConfig`]).
//!
//! **Why not a snapshot read.** MongoDB's way is to read the collections with `readConcern:
//! {level: "snapshot", atClusterTime: T}` and start the stream at `T`. SecantusDB, the
//! server faucet is tested against, accepts that read concern but does not pin the read
//! to `T` (checked: it reads the latest data), and a snapshot read on mongod is bounded by
//! `minSnapshotHistoryWindowInSeconds` (5 minutes by default), too short for a large copy
//! read in pages. So the copy reconciles against the change stream itself:
//!
//! 1. **Anchor.** A second change stream over the listed collections (the *watermark*:
//!    keys only, module `watermark`) is opened now and read to its end; its post-batch
//!    resume token is the anchor A. Every change before A is committed (the server's
//!    change stream never hands out a position past an uncommitted write), so every read
//!    after it holds it; every change after A reaches both the watermark and the change
//!    stream read from A.
//! 2. **Copy.** Each collection (in `collections` order; `db.*` in name order) is read in
//!    `_id` order in pages of `batch_size` documents (`find` with `{$expr: {$gt: ["$_id",
//!    last]}}`, sorted by `_id`; `$expr` orders `_id`s of different types as the `_id` index
//!    does). A page is handed out as `op: r` records once the next page is read and the
//!    watermark drained again, **without the documents whose `_id` changed after A**: their
//!    state reaches the sink through their change events. So every document the copy hands
//!    out is exactly the one of A (it did not change between A and its read), and no change
//!    the copy already holds is delivered again (no change of a handed-out document
//!    happened before its read) — the change stream is not filtered at all.
//! 3. **Changes.** Once every collection is copied, the `mongodb-cdc` change stream is read
//!    from A (`startAfter`), as `faucet run` reads it. The configuration's `start` is not
//!    used: A is taken when the copy begins.
//!
//! A document whose state comes from its change events needs its whole document in them:
//! `full_document: update_lookup` (the default) or `required`; `when_available` is refused
//! at `full_document` (an update without a post-image would carry no document).
//!
//! **Resuming an interrupted copy.** The copy's bookmark (module `bookmark`) keeps A and,
//! per collection, the last `_id` whose page's bookmark was stored (`copy_history`, one
//! point: A). The next run opens the watermark at A again (reading every change since,
//! which the change stream then reads too), and continues the interrupted collection after
//! that `_id`, then the collections not started — leaving out every document changed since
//! A, as before. The page in flight at the interruption may have reached the sink: read
//! again, it is the same documents of A (or left out, when changed since) — a repeat of
//! the same state, which an append sink receives twice and an upsert sink absorbs.
//!
//! **A collection added to `collections` later** (the bookmark's `copied` member lacks it):
//! the next run copies it the same way with the stored change-stream bookmark as its anchor,
//! then reads the change stream on from that bookmark.
//!
//! Limits (precise):
//! * The anchor and the watermark need the oplog to keep A until the copy is over (and the
//!   change stream after it): a copy longer than the oplog window fails with the history
//!   lost error (286), as a stopped `mongodb-cdc` does.
//! * The `_id`s changed after A of the collections not copied yet are kept in memory (their
//!   Extended JSON), so a copy under a heavy writer holds one entry per changed document.
//! * Two `_id`s equal as numbers but of different BSON types (`5` and `5.0`) are one key to
//!   MongoDB but two to the watermark: such a document changed during the copy may be
//!   handed out by the copy and delivered by its change too (a repeat, never a gap).
//! * The replay guarantee is reported as non-deterministic (a copy cannot be read again
//!   after a crash), so `effectively_once` needs a keyed upsert sink.

mod bookmark;
mod stream;
mod watermark;

use std::collections::BTreeSet;

use async_trait::async_trait;
use mongodb::Client;

use faucet_core::{Bookmark, FaucetError, PageStream, ReadOptions, ReplayGuarantee, Source};

use crate::copy_history::{KeepCopied, StreamBookmark};
use crate::mongodb::cdc::record::token_from_text;
use crate::mongodb::cdc::stream::Start;
use crate::mongodb::cdc::{
    CdcBookmark, FullDocument, MongodbCdcConfig, MongodbCdcSource, ValidatedMongodbCdcConfig,
};

use bookmark::{Anchor, SnapshotBookmark};
use stream::ReplicateStream;
use watermark::Watermark;

/// The connector's name, in errors and summaries.
pub const CONNECTOR: &str = "mongodb-replicate";

/// Copy-then-change-stream over a `mongodb-cdc` configuration (see the module docs). Built
/// without I/O; [`Source::open`] connects.
#[derive(Debug)]
pub struct MongodbReplicateSource {
    cdc: MongodbCdcSource,
}

impl MongodbReplicateSource {
    /// A source for `config`, validated without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the invalid field; at `full_document` for
    /// `when_available` (module docs).
    pub fn new(config: MongodbCdcConfig) -> Result<Self, FaucetError> {
        if config.full_document == FullDocument::WhenAvailable {
            return Err(FaucetError::config(
                "full_document",
                "`faucet replicate` needs every update to carry its document (a document \
                 changed during the copy reaches the sink through its changes): use \
                 `update_lookup` (the default) or `required`, not `when_available`",
            ));
        }
        Ok(Self {
            cdc: MongodbCdcSource::new(config)?,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MongodbCdcConfig {
        self.cdc.config()
    }

    fn validated(&self) -> &ValidatedMongodbCdcConfig {
        self.cdc.validated()
    }

    /// A watermark from the stored anchor `start` (a resumed or late copy), tracking the
    /// collections of `tables` that `position` does not hold; `None` when none is left.
    async fn watermark_at(
        &self,
        client: &Client,
        start: &CdcBookmark,
        position: &SnapshotBookmark,
        tables: &[String],
        options: &ReadOptions,
    ) -> Result<Option<Watermark<'_>>, FaucetError> {
        let tracked: BTreeSet<String> = tables
            .iter()
            .filter(|t| !position.holds(t))
            .cloned()
            .collect();
        if tracked.is_empty() {
            return Ok(None);
        }
        let token = token_from_text(&start.resume_token).map_err(|e| {
            FaucetError::bookmark(
                CONNECTOR,
                format!("the stored resume token cannot be used: {e}"),
                None,
            )
        })?;
        tracing::info!(
            collections = ?tracked,
            "resuming the copy: reading the changes since its anchor"
        );
        Watermark::from(
            client.clone(),
            self.validated(),
            Start::After(token),
            options,
            tracked,
        )
        .await
        .map(Some)
    }
}

/// The listed collections now (`db.coll`): each named one, and for `db.*` the database's
/// collections (not `system.*`) in name order; each once, in `collections` order.
async fn collections_now(
    client: &Client,
    config: &ValidatedMongodbCdcConfig,
) -> Result<Vec<String>, FaucetError> {
    let mut out: Vec<String> = Vec::new();
    for w in &config.watched {
        let names = match &w.coll {
            Some(c) => vec![c.clone()],
            None => {
                let mut names = client
                    .database(&w.db)
                    .list_collection_names()
                    .await
                    .map_err(|e| {
                        config
                            .connection
                            .error(&format!("list the collections of {}", w.db), &e)
                    })?;
                names.retain(|n| !n.starts_with("system."));
                names.sort();
                names
            }
        };
        for n in names {
            let name = format!("{}.{n}", w.db);
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    Ok(out)
}

#[async_trait]
impl Source for MongodbReplicateSource {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// A copy cannot be read again once the documents changed.
    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::NonDeterministic
    }

    /// Every page holds change records, of `mongodb-cdc`'s one schema.
    fn record_schema(&self) -> Option<std::sync::Arc<faucet_core::Schema>> {
        Some(crate::mongodb::cdc::record_schema())
    }

    /// Without a bookmark: checks the `mongodb-cdc` prerequisites, anchors, copies, then
    /// reads the change stream from the anchor. With a snapshot bookmark: continues the
    /// copy against the changes since its anchor. With a change-stream bookmark: reads on
    /// from it, after a late copy of the listed collections its `copied` member lacks.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] for a malformed bookmark or an anchor no longer in the
    /// oplog; otherwise as [`MongodbCdcSource::open`].
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let config = self.validated();
        let client = config.connection.client().await?;
        // `db.*` is matched once, here: a collection created later arrives through the
        // change stream from its creation on.
        let tables = collections_now(&client, config).await?;
        if let Some(b) = &from {
            if let Some(position) = SnapshotBookmark::from_json(b)? {
                let start = position.start.clone();
                let watermark = self
                    .watermark_at(&client, &start, &position, &tables, &options)
                    .await?;
                return Ok(Box::new(ReplicateStream::new(
                    &self.cdc, client, tables, position, watermark, options,
                )));
            }
            let listed: BTreeSet<String> = tables.iter().cloned().collect();
            let StreamBookmark {
                cdc,
                known,
                missing,
                ..
            } = StreamBookmark::<Anchor>::read(b, CONNECTOR, &listed)?;
            if missing.is_empty() {
                let inner = self.cdc.open(Some(cdc), options).await?;
                return Ok(KeepCopied::wrap(inner, Some(known)));
            }
            // A late copy of the listed collections not copied before (module docs).
            let start = CdcBookmark::from_json(&cdc)?;
            tracing::info!(
                collections = ?missing,
                "copying the listed collections not copied before, then reading the change \
                 stream on"
            );
            let position = SnapshotBookmark {
                start: start.clone(),
                copied: bookmark::Copied::default(),
                earlier: known,
            };
            let watermark = self
                .watermark_at(&client, &start, &position, &tables, &options)
                .await?;
            return Ok(Box::new(ReplicateStream::new(
                &self.cdc, client, tables, position, watermark, options,
            )));
        }
        self.cdc.check().await?;
        let now = crate::mongodb::cdc::operation_time(&client, config).await?;
        let (watermark, start) = Watermark::anchored(
            client.clone(),
            config,
            &options,
            tables.iter().cloned().collect(),
            now,
        )
        .await?;
        tracing::info!(anchor = %start.resume_token, "copy anchored");
        let position = SnapshotBookmark {
            start,
            copied: bookmark::Copied::default(),
            earlier: BTreeSet::new(),
        };
        Ok(Box::new(ReplicateStream::new(
            &self.cdc,
            client,
            tables,
            position,
            Some(watermark),
            options,
        )))
    }

    /// As `mongodb-cdc`'s check (a replica set, the privileges, the images); nothing is
    /// read.
    async fn check(&self) -> Result<(), FaucetError> {
        self.cdc.check().await
    }

    /// The oplog window and the bookmark's age in it, as for `mongodb-cdc`.
    fn retention_monitor(&self) -> Option<Box<dyn faucet_core::RetentionMonitor>> {
        self.cdc.retention_monitor()
    }
}
