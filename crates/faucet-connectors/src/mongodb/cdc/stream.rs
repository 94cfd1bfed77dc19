//! The change stream read into pages: one `watch` (a database's when every listed collection
//! is in one database, else the cluster's) filtered to the listed collections on the server,
//! each event decoded by `record`, the bookmark after every page.
//!
//! * A page ends at `batch_size` records; as soon as the stream is caught up (a `getMore`
//!   returned no event: the server has nothing more committed — the rule of the other
//!   change sources, [`faucet_core::PageDeadline`]'s "caught up"); when its oldest record
//!   waited `max_page_delay`; or when the run is cancelled (the page in hand is handed
//!   over). Each `getMore` waits at most `max_page_delay` for new events (`maxAwaitTimeMS`,
//!   10 ms to 1 s), so a page is late by at most that much again.
//! * Bounded (the default): the run ends at the first empty batch (the stream caught up) or
//!   at the first event after the server's operation time at open (that event is left for
//!   the next run: the bookmark stays before it).
//! * The bookmark is the resume token of the last event read (also of events that give no
//!   record: other collections, dropDatabase), or after an empty batch the post-batch resume
//!   token, so an idle stream's position moves too; an empty page carries it when it moved
//!   and [`IDLE_BOOKMARK`] passed since the last page (continuous) or at the end (bounded),
//!   with the server's operation time then as its cluster time (the stream has read up to
//!   it).
//! * An invalidate event ends the server's stream: it is opened again after it (`startAfter`,
//!   which MongoDB allows for an invalidate's token).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use futures_util::future::Either;
use mongodb::Client;
use mongodb::bson::{Bson, Document, Timestamp, doc};
use mongodb::change_stream::ChangeStream;
use mongodb::change_stream::event::{ChangeStreamEvent, ResumeToken};
use mongodb::options::{FullDocumentBeforeChangeType, FullDocumentType};

use faucet_core::page::PageBuilder;
use faucet_core::value::Schema;
use faucet_core::{Extent, ExtentUnit, FaucetError, Page, PageDeadline, PageStream, ReadOptions};

use super::bookmark::CdcBookmark;
use super::config::{Before, FullDocument, ValidatedMongodbCdcConfig};
use super::record::{self, Decoded};

/// The longest an idle continuous stream waits before it hands over a bookmark that moved
/// without records (the post-batch resume token), so an idle collection's position keeps up
/// with the oplog.
pub(crate) const IDLE_BOOKMARK: Duration = Duration::from_secs(5);

/// Where a stream starts.
#[derive(Debug, Clone)]
pub(crate) enum Start {
    /// Now.
    End,
    /// `startAtOperationTime`.
    At(Timestamp),
    /// `startAfter` this token (a bookmark's).
    After(ResumeToken),
}

type Events = ChangeStream<ChangeStreamEvent<Document>>;

/// What the events of a change stream carry besides their key and namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Carry {
    /// The documents `full_document` and `before` ask for, `getMore` waiting up to
    /// `max_page_delay` (the records' stream).
    Documents,
    /// Keys only, `getMore` waiting 10 ms: the positions and keys of the changes (the
    /// watermark of a `faucet replicate` copy).
    Keys,
}

/// Opens the server's change stream for `config` from `start`, its events carrying `carry`.
///
/// # Errors
/// The driver's error as a [`FaucetError`] (a token no longer in the oplog: 286,
/// [`FaucetError::Bookmark`]).
pub(crate) async fn watch(
    client: &Client,
    config: &ValidatedMongodbCdcConfig,
    start: Start,
    options: &ReadOptions,
    carry: Carry,
) -> Result<Events, FaucetError> {
    let database = config.single_database().map(|db| client.database(db));
    let watch = match &database {
        Some(db) => db.watch(),
        None => client.watch(),
    };
    let full_document = match config.config.full_document {
        FullDocument::UpdateLookup => FullDocumentType::UpdateLookup,
        FullDocument::WhenAvailable => FullDocumentType::WhenAvailable,
        FullDocument::Required => FullDocumentType::Required,
    };
    let mut watch = watch
        .pipeline([match_stage(config)])
        .batch_size(u32::try_from(options.batch_size).unwrap_or(u32::MAX));
    if carry == Carry::Keys {
        watch = watch.max_await_time(Duration::from_millis(10));
    } else {
        watch = watch
            .full_document(full_document)
            .max_await_time(await_time(options.max_page_delay));
        watch = match config.config.before {
            Before::Off => watch,
            Before::WhenAvailable => {
                watch.full_document_before_change(FullDocumentBeforeChangeType::WhenAvailable)
            }
            Before::Required => {
                watch.full_document_before_change(FullDocumentBeforeChangeType::Required)
            }
        };
    }
    watch = match start {
        Start::End => watch,
        Start::At(ts) => watch.start_at_operation_time(ts),
        Start::After(token) => watch.start_after(token),
    };
    watch
        .await
        .map_err(|e| config.connection.error("open the change stream", &e))
}

/// How long a `getMore` may wait for events: `max_page_delay`, within 10 ms to 1 s.
fn await_time(max_page_delay: Duration) -> Duration {
    max_page_delay.clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// `$match` of the listed collections' events (and renames into them, and the events of a
/// whole database — dropDatabase, invalidate — which have no collection).
fn match_stage(config: &ValidatedMongodbCdcConfig) -> Document {
    let mut any: Vec<Bson> = Vec::new();
    for w in &config.watched {
        match &w.coll {
            Some(c) => {
                any.push(Bson::Document(doc! {"ns.db": &w.db, "ns.coll": c}));
                any.push(Bson::Document(doc! {"to.db": &w.db, "to.coll": c}));
            }
            None => {
                any.push(Bson::Document(doc! {"ns.db": &w.db}));
                any.push(Bson::Document(doc! {"to.db": &w.db}));
            }
        }
    }
    any.push(Bson::Document(
        doc! {"operationType": {"$in": ["dropDatabase", "invalidate"]}},
    ));
    doc! {"$match": {"$or": any}}
}

/// An open read; see the module documentation.
pub(crate) struct CdcPageStream<'a> {
    pub(crate) client: Client,
    pub(crate) config: &'a ValidatedMongodbCdcConfig,
    pub(crate) events: Events,
    pub(crate) options: ReadOptions,
    pub(crate) schema: Arc<Schema>,
    /// Bounded runs: the server's operation time at open; events after it are left.
    pub(crate) end: Option<Timestamp>,
    /// Bounded runs: the cluster time the read starts from (the stored bookmark's, the
    /// configured `at_operation_time`, or `end` for `start: end`) and `end`, for the pages'
    /// [`Extent`] in oplog seconds; `None` for a continuous run or a bookmark without a
    /// cluster time.
    pub(crate) span: Option<(Timestamp, Timestamp)>,
    /// The position after the last event read (or the post-batch token).
    pub(crate) position: Option<CdcBookmark>,
    /// The position the last page handed over.
    pub(crate) handed: Option<CdcBookmark>,
    pub(crate) last_handed_at: Instant,
    pub(crate) done: bool,
}

impl CdcPageStream<'_> {
    /// The next event, or `None` after an empty batch; `Err(None)` when cancelled.
    async fn next_event(
        &mut self,
    ) -> Result<Option<ChangeStreamEvent<Document>>, Option<FaucetError>> {
        let cancel = self.options.cancel.clone();
        let next = std::pin::pin!(self.events.next_if_any());
        let cancelled = std::pin::pin!(cancel.cancelled());
        match futures_util::future::select(next, cancelled).await {
            Either::Left((r, _)) => {
                r.map_err(|e| Some(self.config.connection.error("read the change stream", &e)))
            }
            Either::Right(((), _)) => Err(None),
        }
    }

    /// Before an empty page hands over the post-batch token: the stream has read everything
    /// up to the server's time now, so the position's cluster time becomes the server's
    /// operation time (later than the token's by at most this round trip; never earlier than
    /// before). An idle collection's bookmark then ages with the oplog only while the
    /// pipeline is stopped, not while it waits for changes.
    async fn caught_up(&mut self) -> Result<(), FaucetError> {
        let now = super::operation_time(&self.client, self.config).await?;
        if let Some(p) = &mut self.position
            && p.cluster_time.is_none_or(|t| t < now)
        {
            p.cluster_time = Some(now);
        }
        Ok(())
    }

    fn page(&mut self, page: PageBuilder, source_time: Option<SystemTime>) -> Page {
        self.handed.clone_from(&self.position);
        self.last_handed_at = Instant::now();
        let extent = self.extent();
        page.finish(self.position.as_ref().map(CdcBookmark::to_json))
            .with_source_time(source_time)
            .with_extent(extent)
    }

    /// How far a bounded run is, in seconds of cluster time: the position's minus the
    /// start's, of the end's minus the start's (all of it once the stream is done).
    fn extent(&self) -> Option<Extent> {
        let (start, end) = self.span?;
        let total = u64::from(end.time.saturating_sub(start.time));
        let done = if self.done {
            total
        } else {
            let at = self.position.as_ref()?.cluster_time?;
            u64::from(at.time.saturating_sub(start.time))
        };
        Some(Extent::exact(done, total, ExtentUnit::OplogSeconds))
    }
}

#[async_trait]
impl PageStream for CdcPageStream<'_> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        if self.done {
            return Ok(None);
        }
        let batch = self.options.batch_size.max(1);
        let mut page = PageBuilder::new(Arc::clone(&self.schema), batch);
        let mut deadline = PageDeadline::new(self.options.max_page_delay, IDLE_BOOKMARK);
        let mut source_time = None;
        loop {
            if page.len() >= batch || deadline.wait(false).is_none() {
                break;
            }
            let event = match self.next_event().await {
                Ok(Some(event)) => event,
                Ok(None) => {
                    if let Some(token) = self.events.resume_token() {
                        let cluster_time = self.position.as_ref().and_then(|p| p.cluster_time);
                        self.position = Some(CdcBookmark {
                            resume_token: record::token_text(&token)?,
                            cluster_time,
                        });
                    }
                    let idle_handover = page.is_empty()
                        && self.position != self.handed
                        && (self.end.is_some() || self.last_handed_at.elapsed() >= IDLE_BOOKMARK);
                    if idle_handover {
                        self.caught_up().await?;
                    }
                    if self.end.is_some() {
                        self.done = true;
                        break;
                    }
                    // Caught up (the server had nothing more): the page in hand goes now.
                    if idle_handover || !page.is_empty() {
                        break;
                    }
                    continue;
                }
                Err(None) => {
                    self.done = true;
                    break;
                }
                Err(Some(e)) => return Err(e),
            };
            if let (Some(end), Some(at)) = (self.end, event.cluster_time)
                && at > end
            {
                self.done = true;
                break;
            }
            let token = record::token_text(&event.id)?;
            let id = event.id.clone();
            let cluster_time = event.cluster_time;
            let wall = event.wall_time;
            match record::decode(event, &token, self.config)? {
                Decoded::Record(values) => {
                    page.push_row(values);
                    source_time = wall.map(SystemTime::from);
                }
                Decoded::Pass => {}
                Decoded::Invalidate => {
                    self.events = watch(
                        &self.client,
                        self.config,
                        Start::After(id),
                        &self.options,
                        Carry::Documents,
                    )
                    .await?;
                }
            }
            self.position = Some(CdcBookmark {
                resume_token: token,
                cluster_time: cluster_time.or(self.position.as_ref().and_then(|p| p.cluster_time)),
            });
            deadline.note(page.is_empty());
        }
        // Only a finished stream breaks out with nothing new to hand over.
        if page.is_empty() && self.position == self.handed {
            return Ok(None);
        }
        Ok(Some(self.page(page, source_time)))
    }
}
