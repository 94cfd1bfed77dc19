//! [`FieldedSource`] and [`FieldedSink`]: name a connector's configuration error by its
//! place in the pipeline file also when it is found only once the connector is open (a csv
//! `columns` entry that is not in the file's header: `pipeline.source.config.columns`, not
//! just `columns`; a postgres sink `key` the table has no unique index on:
//! `pipeline.sink.config.key`).

use async_trait::async_trait;
use faucet_core::{
    Bookmark, Commit, CommitToken, FaucetError, Fence, Page, PageStream, ReadOptions,
    ReplayGuarantee, Sink, SinkCapabilities, SinkWriter, Source,
};

use super::at_field;

/// `result` with a [`FaucetError::Config`] placed under `prefix` ([`at_field`]): the one
/// thing these wrappers add to what they pass through.
fn placed<T>(prefix: &str, result: Result<T, FaucetError>) -> Result<T, FaucetError> {
    result.map_err(|e| at_field(prefix, e))
}

/// A source whose [`FaucetError::Config`] errors — from `open`, `check` or a page — carry
/// the field path `prefix.<field>` (see [`at_field`]); everything else passes through.
pub(crate) struct FieldedSource {
    inner: Box<dyn Source>,
    prefix: String,
}

impl FieldedSource {
    /// Wraps `inner`, whose configuration sits at `prefix` (`pipeline.source.config`).
    pub(crate) fn new(inner: Box<dyn Source>, prefix: String) -> Self {
        Self { inner, prefix }
    }
}

#[async_trait]
impl Source for FieldedSource {
    fn connector(&self) -> &str {
        self.inner.connector()
    }

    fn replay(&self) -> ReplayGuarantee {
        self.inner.replay()
    }

    fn resumes_without_bookmark(&self) -> bool {
        self.inner.resumes_without_bookmark()
    }

    fn reads_in_task(&self) -> bool {
        self.inner.reads_in_task()
    }

    fn record_schema(&self) -> Option<std::sync::Arc<faucet_core::Schema>> {
        self.inner.record_schema()
    }

    async fn table_keys(&self) -> Result<Option<Vec<faucet_core::keys::TableKeys>>, FaucetError> {
        self.inner.table_keys().await
    }

    async fn current_shapes(
        &self,
    ) -> Result<Option<faucet_core::change::schema::Shapes>, FaucetError> {
        placed(&self.prefix, self.inner.current_shapes().await)
    }

    fn retention_monitor(&self) -> Option<Box<dyn faucet_core::RetentionMonitor>> {
        self.inner.retention_monitor()
    }

    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let inner = placed(&self.prefix, self.inner.open(from, options).await)?;
        Ok(Box::new(FieldedStream {
            inner,
            prefix: &self.prefix,
        }))
    }

    async fn check(&self) -> Result<(), FaucetError> {
        placed(&self.prefix, self.inner.check().await)
    }

    async fn check_resume(&self, from: &Bookmark) -> Result<Option<String>, FaucetError> {
        placed(&self.prefix, self.inner.check_resume(from).await)
    }
}

struct FieldedStream<'a> {
    inner: Box<dyn PageStream + 'a>,
    prefix: &'a str,
}

#[async_trait]
impl PageStream for FieldedStream<'_> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        placed(self.prefix, self.inner.next_page().await)
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        self.inner.bookmark_durable(bookmark).await
    }

    fn reads_ahead(&self) -> bool {
        self.inner.reads_ahead()
    }
}

/// A sink whose [`FaucetError::Config`] errors — from `open`, `check` or its writer — carry
/// the field path `prefix.<field>` (see [`at_field`]); everything else passes through.
pub(crate) struct FieldedSink {
    inner: Box<dyn Sink>,
    prefix: String,
}

impl FieldedSink {
    /// Wraps `inner`, whose configuration sits at `prefix` (`pipeline.sink.config`).
    pub(crate) fn new(inner: Box<dyn Sink>, prefix: String) -> Self {
        Self { inner, prefix }
    }
}

#[async_trait]
impl Sink for FieldedSink {
    fn connector(&self) -> &str {
        self.inner.connector()
    }

    fn capabilities(&self) -> SinkCapabilities {
        self.inner.capabilities()
    }

    fn delivery_limit(&self) -> Option<faucet_core::delivery::SinkLimit> {
        self.inner.delivery_limit()
    }

    fn target(&self) -> Option<String> {
        self.inner.target()
    }

    fn upserts_by(&self) -> Option<Vec<String>> {
        self.inner.upserts_by()
    }

    fn upserts_by_table(&self, source_table: &str) -> Option<Vec<String>> {
        self.inner.upserts_by_table(source_table)
    }

    fn keys_by_source(&self) -> bool {
        self.inner.keys_by_source()
    }

    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        let inner = placed(&self.prefix, self.inner.open().await)?;
        Ok(Box::new(FieldedWriter {
            inner,
            prefix: &self.prefix,
        }))
    }

    async fn check(&self) -> Result<(), FaucetError> {
        placed(&self.prefix, self.inner.check().await)
    }

    async fn check_schema(&self, schema: &faucet_core::Schema) -> Result<(), FaucetError> {
        placed(&self.prefix, self.inner.check_schema(schema).await)
    }

    async fn check_drift(
        &self,
        source_table: &str,
        columns: &[faucet_core::change::schema::ColumnShape],
        pending: Option<&faucet_core::change::schema::SchemaChange>,
    ) -> Result<Option<faucet_core::change::Drift>, FaucetError> {
        placed(
            &self.prefix,
            self.inner.check_drift(source_table, columns, pending).await,
        )
    }
}

struct FieldedWriter<'a> {
    inner: Box<dyn SinkWriter + 'a>,
    prefix: &'a str,
}

#[async_trait]
impl SinkWriter for FieldedWriter<'_> {
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        placed(self.prefix, self.inner.write(page).await)
    }

    async fn flush(&mut self) -> Result<(), FaucetError> {
        placed(self.prefix, self.inner.flush().await)
    }

    async fn write_committed(&mut self, page: &Page, commit: &Commit) -> Result<(), FaucetError> {
        placed(self.prefix, self.inner.write_committed(page, commit).await)
    }

    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        placed(self.prefix, self.inner.holds_data().await)
    }

    fn source_keys(&mut self, keys: &[faucet_core::keys::TableKeys]) {
        self.inner.source_keys(keys);
    }

    fn written_targets(&self) -> &[(String, u64)] {
        self.inner.written_targets()
    }

    fn published(&self) -> Option<faucet_core::PublishStats> {
        self.inner.published()
    }

    async fn fence(&mut self, fence: &Fence) -> Result<bool, FaucetError> {
        placed(self.prefix, self.inner.fence(fence).await)
    }

    async fn last_committed_token(
        &mut self,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        placed(self.prefix, self.inner.last_committed_token(scope).await)
    }
}

#[cfg(test)]
mod tests {
    //! A wrapper that misses a trait method silently gets the trait's default (that is how
    //! `fence()` was once ignored): every method of the four traits must be forwarded here.

    use std::collections::BTreeSet;

    const SELF: &str = include_str!("fielded.rs");
    const SINK: &str = include_str!("../../../faucet-core/src/sink.rs");
    const SOURCE: &str = include_str!("../../../faucet-core/src/source.rs");

    /// The `fn` names in the block that starts with the line beginning `header` and ends at
    /// the next line that is `}`.
    fn methods(src: &str, header: &str) -> BTreeSet<String> {
        let mut lines = src.lines().skip_while(|l| !l.starts_with(header));
        assert!(lines.next().is_some(), "`{header}` not found");
        lines
            .take_while(|l| *l != "}")
            .filter_map(|l| {
                let after = l.split_once("fn ")?.1;
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                (!l.trim_start().starts_with("//") && !name.is_empty()).then_some(name)
            })
            .collect()
    }

    #[test]
    fn every_trait_method_is_forwarded() {
        for (src, tr, imp) in [
            (SOURCE, "pub trait Source", "impl Source for FieldedSource"),
            (
                SOURCE,
                "pub trait PageStream",
                "impl PageStream for FieldedStream",
            ),
            (SINK, "pub trait Sink:", "impl Sink for FieldedSink"),
            (
                SINK,
                "pub trait SinkWriter",
                "impl SinkWriter for FieldedWriter",
            ),
        ] {
            let wanted = methods(src, tr);
            assert!(!wanted.is_empty(), "no methods found in `{tr}`");
            assert_eq!(
                methods(SELF, imp),
                wanted,
                "{imp} must forward every method"
            );
        }
    }
}
