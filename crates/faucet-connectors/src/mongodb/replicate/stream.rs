//! The replicate stream: the collections (or what is missing of them) read one after the
//! other in `_id` order and bounded pages as `op: r` records, each page handed out once
//! the next one is read and the watermark drained, without the documents changed after the
//! anchor; then the change stream from the anchor.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::TryStreamExt as _;
use mongodb::Client;
use mongodb::bson::{Document, doc};

use faucet_core::{Bookmark, FaucetError, Page, PageBuilder, PageStream, ReadOptions, Source};

use super::CONNECTOR;
use super::bookmark::{SnapshotBookmark, TableCopy};
use super::watermark::{Watermark, key_of_text, key_text};
use crate::copy_history::{KeepCopied, Staged, after_copy, carrying};
use crate::copy_progress::CopyProgress;
use crate::mongodb::cdc::record::{copied, record_schema};
use crate::mongodb::cdc::{MongodbCdcSource, ValidatedMongodbCdcConfig};

/// Where the next page of a collection starts.
#[derive(Debug, Clone)]
enum Next {
    /// After this `_id` (its key text); `None`: from the first document.
    After(Option<String>),
    /// The last page was read.
    Done,
}

/// A page read and held back: a page is handed out only once the next one is read (so
/// its bookmark can name the page in flight after it) and the watermark drained.
struct Held {
    staged: Staged,
    /// The key text of each record's `_id`, in the page's order.
    keys: Vec<String>,
}

/// The collection being copied.
struct Copying {
    /// `db.coll`.
    name: String,
    next: Next,
    held: Option<Held>,
    /// The last key handed out (or the key the copy resumed after).
    after: Option<Vec<String>>,
}

/// See the module docs of [`super`].
pub(crate) struct ReplicateStream<'a> {
    cdc: &'a MongodbCdcSource,
    config: &'a ValidatedMongodbCdcConfig,
    client: Client,
    /// The listed collections (`db.coll`), in copy order.
    tables: Vec<String>,
    position: SnapshotBookmark,
    options: ReadOptions,
    /// `None` once the copy is over (or when nothing is left to copy).
    watermark: Option<Watermark<'a>>,
    /// Index of the next collection to consider.
    next: usize,
    copying: Option<Copying>,
    /// The change stream, once the copy is over.
    changes: Option<Box<dyn PageStream + 'a>>,
    /// The copy's share read ([`CopyProgress`]), worked out before its first page.
    progress: Option<CopyProgress>,
}

impl<'a> ReplicateStream<'a> {
    /// A stream copying what `position` says is missing of `tables` (all of them on a
    /// first run) against `watermark`, then streaming the changes from the anchor.
    pub(crate) fn new(
        cdc: &'a MongodbCdcSource,
        client: Client,
        tables: Vec<String>,
        position: SnapshotBookmark,
        watermark: Option<Watermark<'a>>,
        options: ReadOptions,
    ) -> Self {
        Self {
            cdc,
            config: cdc.validated(),
            client,
            tables,
            position,
            options,
            watermark,
            next: 0,
            copying: None,
            changes: None,
            progress: None,
        }
    }

    fn all_finished(&self) -> bool {
        self.tables.iter().all(|t| self.position.holds(t))
    }

    /// The listed collections, every one copied once the copy is over.
    fn listed(&self) -> std::collections::BTreeSet<String> {
        self.tables.iter().cloned().collect()
    }

    /// The bookmark after a page of the copy: the snapshot position, or, once every
    /// collection is copied, the anchor with the collections copied.
    fn copy_bookmark(&self) -> Bookmark {
        if !self.all_finished() {
            return self.position.to_json();
        }
        let anchor = self.position.anchor();
        after_copy(
            self.position.start.to_json(),
            &anchor,
            &self.position.copied,
            &self.listed(),
        )
    }

    /// The collections left to copy, for the copy's [`CopyProgress`]; `None` when one
    /// resumes mid-way (how much of it is left is not known).
    fn tables_left(&self) -> Option<Vec<String>> {
        crate::copy_progress::tables_left(
            &self.tables,
            Clone::clone,
            |name| self.position.holds(name),
            &self.position.copied,
        )
        .map(|left| left.into_iter().cloned().collect())
    }

    /// `held` as the page to hand out: without the documents the watermark says changed
    /// after the anchor (the change stream delivers them).
    fn hand_out(&self, table: &str, page: Page, keys: &[String]) -> Page {
        let Some(w) = &self.watermark else {
            return page;
        };
        if !keys.iter().any(|k| w.changed(table, k)) {
            return page;
        }
        let mut out = PageBuilder::new(Arc::clone(page.schema()), page.len());
        for (row, key) in page.rows().zip(keys) {
            if !w.changed(table, key) {
                out.push_row(row.values().iter().cloned());
            }
        }
        out.finish(page.bookmark().cloned())
    }

    /// The next page of the copy: `Ok(None)` when the copy is over (or cancelled),
    /// `Ok(Some(None))` when a step produced nothing to hand over.
    async fn next_copy_page(&mut self) -> Result<Option<Option<Page>>, FaucetError> {
        if self.options.cancel.is_cancelled() || self.watermark.is_none() {
            return Ok(None);
        }
        let size = self.options.batch_size.max(1);
        let anchor = self.position.anchor();
        let Some(current) = self.copying.as_mut() else {
            let Some(i) =
                (self.next..self.tables.len()).find(|&i| !self.position.holds(&self.tables[i]))
            else {
                return Ok(None);
            };
            let name = self.tables[i].clone();
            let after = self
                .position
                .copied
                .tables
                .get(&name)
                .and_then(TableCopy::resume_after)
                .map(<[String]>::to_vec);
            tracing::info!(collection = %name, after = ?after, "copying");
            self.next = i + 1;
            self.copying = Some(Copying {
                name,
                next: Next::After(after.as_ref().and_then(|a| a.first().cloned())),
                held: None,
                after,
            });
            return Ok(Some(None));
        };
        let name = current.name.clone();
        let Next::After(from) = current.next.clone() else {
            // The held page is the collection's last: drain once more, then hand it out.
            let held = current.held.take();
            self.copying = None;
            if let Some(w) = &mut self.watermark {
                w.drain().await?;
            }
            let page = match held {
                Some(h) => self.hand_out(&name, h.staged.page, &h.keys),
                None => Page::empty(record_schema(), None),
            };
            self.position
                .copied
                .tables
                .entry(name.clone())
                .or_default()
                .advance(anchor, None);
            if let Some(w) = &mut self.watermark {
                w.copied(&name);
            }
            let mut page = page;
            page.set_bookmark(Some(self.copy_bookmark()));
            return Ok(Some(Some(page)));
        };
        let (docs, end) =
            read_page(&self.client, self.config, &name, from.as_deref(), size).await?;
        if let Some(w) = &mut self.watermark {
            w.drain().await?;
        }
        let mut keys = Vec::with_capacity(docs.len());
        let mut records = PageBuilder::new(record_schema(), docs.len());
        for d in docs {
            keys.push(d.get("_id").map(key_text).unwrap_or_default());
            records.push_row(copied(&name, &self.position.start, d));
        }
        let end_key = end.clone().map(|k| vec![k]);
        let Some(current) = self.copying.as_mut() else {
            return Ok(Some(None));
        };
        current.next = end.map_or(Next::Done, |k| Next::After(Some(k)));
        let previous = current.held.take();
        if let Some(p) = &previous {
            current.after.clone_from(&p.staged.end);
        }
        let after = current.after.clone();
        current.held = Some(Held {
            staged: Staged {
                page: records.finish(None),
                end: end_key.clone(),
            },
            keys,
        });
        let (previous, previous_keys) = match previous {
            Some(h) => (Some(h.staged), h.keys),
            None => (None, Vec::new()),
        };
        let entry = self.position.copied.tables.entry(name.clone()).or_default();
        entry.key = Some(vec!["_id".to_owned()]);
        let page = entry.hold_back(&anchor, after, end_key, previous);
        let bookmark = Some(self.position.to_json());
        let page = page.map(|page| self.hand_out(&name, page, &previous_keys));
        Ok(Some(Some(carrying(page, record_schema(), bookmark))))
    }
}

/// The [`CopyProgress`] of copying `left`: their estimated document counts; none known
/// for `None` (a collection resumes mid-way) or a count that cannot be read.
async fn copy_progress(client: &Client, left: Option<Vec<String>>) -> CopyProgress {
    let Some(left) = left else {
        return CopyProgress::unknown();
    };
    let mut estimates = Vec::with_capacity(left.len());
    for name in &left {
        let (db, coll) = split(name);
        let count = client
            .database(db)
            .collection::<Document>(coll)
            .estimated_document_count()
            .await
            .ok();
        estimates.push((name.clone(), count));
    }
    CopyProgress::new(estimates)
}

/// Reads up to `size` documents of `table` after `after` in `_id` order: the documents and
/// the key text of the last one when the page is full (`None`: the collection has no
/// documents after these). The comparison is the aggregation `$gt`, which orders `_id`s of
/// different BSON types as the `_id` index does (a query `$gt` compares within one type
/// only).
///
/// # Errors
/// [`FaucetError::Bookmark`] for a stored `_id` that is not Extended JSON; the driver's
/// error.
async fn read_page(
    client: &Client,
    config: &ValidatedMongodbCdcConfig,
    table: &str,
    after: Option<&str>,
    size: usize,
) -> Result<(Vec<Document>, Option<String>), FaucetError> {
    let filter = match after {
        None => doc! {},
        Some(text) => {
            let id = key_of_text(text).ok_or_else(|| {
                FaucetError::bookmark(
                    CONNECTOR,
                    format!(
                        "the copy of {table} stopped after `_id` {text}, which is not Extended \
                         JSON; rerun the replicate from scratch"
                    ),
                    None,
                )
            })?;
            doc! {"$expr": {"$gt": ["$_id", {"$literal": id}]}}
        }
    };
    let (db, coll) = split(table);
    let what = format!("copy {table}");
    let docs: Vec<Document> = client
        .database(db)
        .collection::<Document>(coll)
        .find(filter)
        .sort(doc! {"_id": 1})
        .limit(i64::try_from(size).unwrap_or(i64::MAX))
        .batch_size(u32::try_from(size).unwrap_or(u32::MAX))
        .await
        .map_err(|e| config.connection.error(&what, &e))?
        .try_collect()
        .await
        .map_err(|e| config.connection.error(&what, &e))?;
    let end = if docs.len() < size {
        None
    } else {
        let last = docs.last().and_then(|d| d.get("_id")).ok_or_else(|| {
            FaucetError::read(CONNECTOR, format!("{what}: a document without `_id`"), None)
        })?;
        Some(key_text(last))
    };
    Ok((docs, end))
}

/// `db` and `coll` of `db.coll` (the database name has no dot).
fn split(table: &str) -> (&str, &str) {
    table.split_once('.').unwrap_or((table, ""))
}

#[async_trait]
impl PageStream for ReplicateStream<'_> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        loop {
            if let Some(changes) = &mut self.changes {
                return changes.next_page().await;
            }
            if self.progress.is_none() {
                let left = self.tables_left();
                self.progress = Some(copy_progress(&self.client, left).await);
            }
            match self.next_copy_page().await? {
                Some(Some(page)) => {
                    return Ok(Some(match &mut self.progress {
                        Some(progress) => progress.stamp(page),
                        None => page,
                    }));
                }
                Some(None) => {}
                None if self.options.cancel.is_cancelled() => return Ok(None),
                None => {
                    if !self.all_finished() {
                        return Err(FaucetError::read(
                            CONNECTOR,
                            "the copy ended before every collection was copied",
                            None,
                        ));
                    }
                    // Every collection is copied: the change stream from the anchor.
                    self.watermark = None;
                    let start = self.position.start.to_json();
                    let stream = self.cdc.open(Some(start), self.options.clone()).await?;
                    tracing::info!(
                        collections = self.tables.len(),
                        "copy done; reading the change stream from its anchor"
                    );
                    self.changes = Some(KeepCopied::wrap(stream, Some(self.listed())));
                }
            }
        }
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        match &mut self.changes {
            Some(changes) => changes.bookmark_durable(bookmark).await,
            None => Ok(()),
        }
    }

    /// The copy reads ahead (its next page is read at the copy's snapshot, whatever the sink
    /// does); the change stream as it says.
    fn reads_ahead(&self) -> bool {
        self.changes
            .as_ref()
            .is_none_or(|changes| changes.reads_ahead())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_split_at_the_first_dot() {
        assert_eq!(split("shop.orders.2024"), ("shop", "orders.2024"));
        assert_eq!(split("shop"), ("shop", ""));
    }
}
