//! In-memory doubles for sources, sinks and state stores, with simulated crashes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::{Value as Json, json};

use crate::error::FaucetError;
use crate::page::{Bookmark, Page, PageBuilder};
use crate::sink::{Commit, CommitToken, Sink, SinkCapabilities, SinkWriter};
use crate::source::{PageStream, ReadOptions, ReplayGuarantee, Source};
use crate::state::{MemoryStateStore, StateStore};
use crate::value::{DataType, Field, Schema, Value};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Simulates the death of the process at the n-th durable operation (sink write, sink flush,
/// atomic commit, state put, source acknowledgement), counted from 1 across every double
/// sharing the switch. Once tripped, every double refuses to do anything more, so nothing
/// reaches "disk" after the crash — not even the run loop's flush on its error path.
#[derive(Debug, Clone, Default)]
pub struct CrashSwitch {
    inner: Arc<(AtomicUsize, AtomicUsize, AtomicBool)>,
}

impl CrashSwitch {
    /// A switch that never trips.
    pub fn never() -> Self {
        Self::default()
    }

    /// A switch that trips at the `n`-th operation (1-based); 0 never trips.
    pub fn at(n: usize) -> Self {
        let s = Self::default();
        s.inner.1.store(n, Ordering::SeqCst);
        s
    }

    /// Whether the simulated process has died.
    pub fn tripped(&self) -> bool {
        self.inner.2.load(Ordering::SeqCst)
    }

    /// Counts one operation; `Err` if the process is (now) dead and the operation must not
    /// take effect.
    ///
    /// # Errors
    /// A [`FaucetError::Write`] saying the simulated process crashed.
    pub fn tick(&self, what: &str) -> Result<(), FaucetError> {
        if self.tripped() {
            return Err(crashed(what));
        }
        let n = self.inner.0.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.inner.1.load(Ordering::SeqCst) {
            self.inner.2.store(true, Ordering::SeqCst);
            return Err(crashed(what));
        }
        Ok(())
    }

    /// Operations counted so far.
    pub fn operations(&self) -> usize {
        self.inner.0.load(Ordering::SeqCst)
    }
}

fn crashed(what: &str) -> FaucetError {
    FaucetError::write("crash-switch", format!("simulated crash at {what}"), None)
}

/// Holds a [`VecSource`]'s read of the page at one offset until the test opens it: the
/// run is then waiting on the source with the page not yet in hand (as a continuous source
/// waits for changes), for tests of what happens meanwhile (a lost lease).
#[derive(Debug, Clone, Default)]
pub struct PageGate {
    reached: Arc<tokio::sync::Notify>,
    open: Arc<tokio::sync::Notify>,
}

impl PageGate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Resolves once a read has reached the gate (at once if one already did).
    pub async fn reached(&self) {
        self.reached.notified().await;
    }

    /// Lets the held read (or the next one to arrive) go on.
    pub fn open(&self) {
        self.open.notify_one();
    }
}

/// A deterministic source over a fixed list of records with one `id` (Int) and one `v`
/// (Text) field. Bookmark: `{"offset": n}` = records delivered so far.
#[derive(Debug, Clone)]
pub struct VecSource {
    schema: Arc<Schema>,
    records: Arc<Vec<(i64, String)>>,
    /// Emits each page's bookmark one record short (a broken source, for proving checks fail).
    pub off_by_one: bool,
    /// Fails on opening from this offset with a read error (for error-path tests).
    pub fail_at_offset: Option<usize>,
    /// Ignores batch_size and emits everything in one page (a broken source).
    pub ignore_batch_size: bool,
    /// Lets the run loop read each next page while the last one is delivered
    /// ([`PageStream::reads_ahead`]).
    pub reads_ahead: bool,
    acks: Arc<Mutex<Vec<Bookmark>>>,
    switch: CrashSwitch,
    hold: Option<(usize, PageGate)>,
}

impl VecSource {
    /// A source of records `(id, v)` for `id` in `0..n`.
    pub fn sequence(n: usize) -> Self {
        Self::new((0..n as i64).map(|i| (i, format!("v{i}"))).collect())
    }

    /// A source of the given records.
    pub fn new(records: Vec<(i64, String)>) -> Self {
        Self {
            schema: Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int),
                Field::new("v", DataType::Text),
            ])),
            records: Arc::new(records),
            off_by_one: false,
            fail_at_offset: None,
            ignore_batch_size: false,
            reads_ahead: false,
            acks: Arc::default(),
            switch: CrashSwitch::never(),
            hold: None,
        }
    }

    /// Holds the read of the page starting at `offset` at `gate` (once per stream).
    pub fn held_at(mut self, offset: usize, gate: PageGate) -> Self {
        self.hold = Some((offset, gate));
        self
    }

    /// Shares `switch`: acknowledgements count as operations.
    pub fn with_crash_switch(mut self, switch: CrashSwitch) -> Self {
        self.switch = switch;
        self
    }

    /// Bookmarks acknowledged through [`PageStream::bookmark_durable`], in order.
    pub fn acks(&self) -> Vec<Bookmark> {
        lock(&self.acks).clone()
    }

    /// The records as JSON objects, as a sink would show them.
    pub fn expected(&self) -> Vec<Json> {
        self.records
            .iter()
            .map(|(id, v)| json!({"id": id, "v": v}))
            .collect()
    }
}

struct VecStream<'a> {
    source: &'a VecSource,
    offset: usize,
    batch: usize,
    held: bool,
}

#[async_trait]
impl Source for VecSource {
    fn connector(&self) -> &str {
        "vec"
    }
    fn replay(&self) -> ReplayGuarantee {
        ReplayGuarantee::Deterministic
    }
    async fn open(
        &self,
        from: Option<Bookmark>,
        options: ReadOptions,
    ) -> Result<Box<dyn PageStream + '_>, FaucetError> {
        let offset = match from {
            None => 0,
            Some(b) => b["offset"].as_u64().ok_or_else(|| {
                FaucetError::bookmark("vec", format!("not a vec bookmark: {b}"), None)
            })? as usize,
        };
        if self.fail_at_offset == Some(offset) {
            return Err(FaucetError::read("vec", "planned failure", None));
        }
        Ok(Box::new(VecStream {
            source: self,
            offset,
            batch: if self.ignore_batch_size {
                usize::MAX
            } else {
                options.batch_size
            },
            held: false,
        }))
    }
    async fn check(&self) -> Result<(), FaucetError> {
        Ok(())
    }
}

#[async_trait]
impl PageStream for VecStream<'_> {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        let all = &self.source.records;
        if self.offset >= all.len() {
            return Ok(None);
        }
        if self.source.fail_at_offset == Some(self.offset) {
            return Err(FaucetError::read("vec", "planned failure", None));
        }
        if let Some((at, gate)) = &self.source.hold
            && *at == self.offset
            && !self.held
        {
            self.held = true;
            gate.reached.notify_one();
            gate.open.notified().await;
        }
        let end = self.offset.saturating_add(self.batch).min(all.len());
        let mut b = PageBuilder::new(self.source.schema.clone(), end - self.offset);
        for (id, v) in &all[self.offset..end] {
            b.push_row([Value::Int(*id), Value::Text(v.as_str().into())]);
        }
        self.offset = end;
        let mark = if self.source.off_by_one { end - 1 } else { end };
        Ok(Some(b.finish(Some(json!({ "offset": mark })))))
    }

    async fn bookmark_durable(&mut self, bookmark: &Bookmark) -> Result<(), FaucetError> {
        self.source.switch.tick("source ack")?;
        lock(&self.source.acks).push(bookmark.clone());
        Ok(())
    }

    fn reads_ahead(&self) -> bool {
        self.source.reads_ahead
    }
}

/// What a [`MemorySink`] holds: the durable rows (as JSON objects, in write order; keyed
/// sinks replace by key), rows written but not yet flushed, and commit tokens by scope.
#[derive(Debug, Default, Clone)]
pub struct SinkLog {
    /// Rows that survived (flushed or committed).
    pub durable: Vec<Json>,
    /// Rows written since the last flush; lost in a crash.
    pub pending: Vec<Json>,
    /// Commit tokens by scope.
    pub tokens: std::collections::BTreeMap<String, CommitToken>,
    /// `write`, `flush`, `commit` calls in order, for ordering tests.
    pub calls: Vec<&'static str>,
    /// Where each page written started ([`crate::Page::start`]), in order.
    pub starts: Vec<crate::PageStart>,
}

/// A sink keeping everything in memory, with configurable capabilities.
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    log: Arc<Mutex<SinkLog>>,
    /// Deduplicate by this field (keyed upsert).
    pub key: Option<String>,
    /// Offer atomic watermark commits.
    pub atomic: bool,
    /// Claim keyed upsert without deduplicating (a lying sink, for proving checks fail).
    pub lie_about_key: bool,
    /// Accept tokens that move backwards (a broken atomic sink).
    pub accept_stale_tokens: bool,
    /// Make `flush` a no-op that loses the pending rows (a broken sink).
    pub drop_on_flush: bool,
    switch: CrashSwitch,
}

impl MemorySink {
    /// A plain append sink (at-least-once).
    pub fn new() -> Self {
        Self::default()
    }

    /// A keyed-upsert sink deduplicating by `field`.
    pub fn keyed(field: &str) -> Self {
        Self {
            key: Some(field.to_owned()),
            ..Self::default()
        }
    }

    /// An atomic-watermark sink.
    pub fn atomic() -> Self {
        Self {
            atomic: true,
            ..Self::default()
        }
    }

    /// Shares `switch`: writes, flushes and commits count as operations.
    pub fn with_crash_switch(mut self, switch: CrashSwitch) -> Self {
        self.switch = switch;
        self
    }

    /// A snapshot of what the sink holds.
    pub fn log(&self) -> SinkLog {
        lock(&self.log).clone()
    }

    /// The durable rows.
    pub fn rows(&self) -> Vec<Json> {
        lock(&self.log).durable.clone()
    }

    /// Simulates a restart: rows never flushed are gone.
    pub fn restart(&self) {
        lock(&self.log).pending.clear();
    }

    fn apply(&self, durable: &mut Vec<Json>, rows: Vec<Json>) {
        for row in rows {
            match (&self.key, self.lie_about_key) {
                (Some(k), false) => {
                    if let Some(existing) = durable.iter_mut().find(|r| r[k] == row[k]) {
                        *existing = row;
                    } else {
                        durable.push(row);
                    }
                }
                _ => durable.push(row),
            }
        }
    }
}

struct MemoryWriter<'a> {
    sink: &'a MemorySink,
}

fn page_rows(page: &Page) -> Vec<Json> {
    page.rows().map(|r| r.to_json()).collect()
}

#[async_trait]
impl Sink for MemorySink {
    fn connector(&self) -> &str {
        "memory"
    }
    fn capabilities(&self) -> SinkCapabilities {
        SinkCapabilities {
            atomic_watermark: self.atomic,
            keyed_upsert: self.key.is_some(),
        }
    }
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        Ok(Box::new(MemoryWriter { sink: self }))
    }
    async fn check(&self) -> Result<(), FaucetError> {
        Ok(())
    }
}

#[async_trait]
impl SinkWriter for MemoryWriter<'_> {
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        self.sink.switch.tick("sink write")?;
        let mut log = lock(&self.sink.log);
        log.calls.push("write");
        log.starts.push(page.start().clone());
        log.pending.extend(page_rows(page));
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), FaucetError> {
        self.sink.switch.tick("sink flush")?;
        let mut log = lock(&self.sink.log);
        log.calls.push("flush");
        let pending = std::mem::take(&mut log.pending);
        if !self.sink.drop_on_flush {
            self.sink.apply(&mut log.durable, pending);
        }
        Ok(())
    }

    async fn write_committed(&mut self, page: &Page, commit: &Commit) -> Result<(), FaucetError> {
        let (scope, token) = (commit.scope.as_str(), &commit.token);
        if !self.sink.atomic {
            return Err(FaucetError::write("memory", "no atomic watermark", None));
        }
        self.sink.switch.tick("sink commit")?;
        let mut log = lock(&self.sink.log);
        log.calls.push("commit");
        log.starts.push(page.start().clone());
        if let Some(stored) = log.tokens.get(scope)
            && stored.sequence >= token.sequence
            && !self.sink.accept_stale_tokens
        {
            return Err(FaucetError::write(
                "memory",
                format!(
                    "stale commit token {} (stored {})",
                    token.sequence, stored.sequence
                ),
                None,
            ));
        }
        let rows = page_rows(page);
        let mut durable = std::mem::take(&mut log.durable);
        self.sink.apply(&mut durable, rows);
        log.durable = durable;
        log.tokens.insert(scope.to_owned(), token.clone());
        Ok(())
    }

    async fn last_committed_token(
        &mut self,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        Ok(lock(&self.sink.log).tokens.get(scope).cloned())
    }

    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        Ok(Some(!lock(&self.sink.log).durable.is_empty()))
    }
}

/// A [`MemoryStateStore`] that can be declared durable (so atomic watermark is allowed in
/// in-process tests) and whose `put`s count as operations of a [`CrashSwitch`].
#[derive(Debug, Clone, Default)]
pub struct CrashingStateStore {
    inner: Arc<MemoryStateStore>,
    switch: CrashSwitch,
    durable: bool,
    puts: Arc<Mutex<Vec<Json>>>,
}

impl CrashingStateStore {
    /// A durable in-memory store sharing `switch`.
    pub fn new(switch: CrashSwitch) -> Self {
        Self {
            inner: Arc::default(),
            switch,
            durable: true,
            puts: Arc::default(),
        }
    }

    /// The same entries, with a new switch (a restarted process).
    pub fn restarted(&self, switch: CrashSwitch) -> Self {
        Self {
            inner: self.inner.clone(),
            switch,
            durable: self.durable,
            puts: self.puts.clone(),
        }
    }

    /// Every value put, in order.
    pub fn puts(&self) -> Vec<Json> {
        lock(&self.puts).clone()
    }
}

#[async_trait]
impl StateStore for CrashingStateStore {
    fn name(&self) -> &str {
        "crashing-memory"
    }
    fn is_durable(&self) -> bool {
        self.durable
    }
    async fn get(&self, key: &str) -> Result<Option<Json>, FaucetError> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &str, value: &Json) -> Result<(), FaucetError> {
        self.switch.tick("state put")?;
        lock(&self.puts).push(value.clone());
        self.inner.put(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<(), FaucetError> {
        self.inner.delete(key).await
    }
}
