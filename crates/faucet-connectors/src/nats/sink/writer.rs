//! [`NatsWriter`]: an open [`NatsSink`] — publishing a page's messages pipelined, chaining
//! them to the stream sequence when fenced, and re-anchoring where the stream stands.

use std::collections::VecDeque;

use async_nats::header::{NATS_EXPECTED_LAST_SEQUENCE, NATS_MESSAGE_ID};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, Context};
use async_nats::{Client, HeaderMap, HeaderName, HeaderValue};
use async_trait::async_trait;
use bytes::Bytes;
use faucet_core::state::LeaseError;
use faucet_core::{Bookmark, Commit, CommitToken, FaucetError, Fence, Page, SinkWriter, fault};

use crate::bus::message::{HEADER_ID, HEADER_OP, HEADER_POSITION, HEADER_TABLE, page_id};
use crate::bus::{Message, PageMeter, SourceKeys, stats};
use crate::nats::anchor::{
    self, Anchor, HEADER_COMMIT, HEADER_KEY, HEADER_PAGE, HEADER_PAGE_INDEX, PageHeader,
};
use crate::nats::config::check_message;

use super::{CONNECTOR, NatsSink, TIMEOUT, WINDOW, marker_subject};

/// Where an open writer stands in the stream.
#[derive(Debug, Clone)]
struct Position {
    /// The stream's last sequence: the next chained publish expects it.
    last_seq: u64,
    /// The last committed page's sequence (0: none).
    committed: u64,
    /// The bookmark the next page starts from.
    start: Bookmark,
    /// Records after `start` that are stored already.
    skip: u64,
}

/// `value` (JSON or an id: UTF-8 as the encoder wrote it) as a header value's text; checked
/// with `from_utf8`, which validates a whole slice at once where `from_utf8_lossy` walks it
/// in chunks (2.4 % of a CSV → NATS run's CPU under `perf`); a byte that is not UTF-8 would
/// be replaced, never dropped.
fn text(value: &[u8]) -> std::borrow::Cow<'_, str> {
    std::str::from_utf8(value).map_or_else(|_| String::from_utf8_lossy(value), Into::into)
}

/// What a committed page's messages say about the page, beside the shared message headers.
struct PageMeta<'a> {
    sequence: u64,
    start: &'a Bookmark,
    commit: Option<&'a str>,
}

/// `faucet-page` and, on a committed page (`index`), `faucet-page-index`.
fn anchor_headers(h: &mut HeaderMap, page: &HeaderValue, index: Option<usize>) {
    h.insert(HeaderName::from_static(HEADER_PAGE), page.clone());
    if let Some(index) = index {
        h.insert(
            HeaderName::from_static(HEADER_PAGE_INDEX),
            HeaderValue::from(index),
        );
    }
}

/// Header values that repeat from one message of a page to the next, made once: async-nats
/// checks every value it is handed for a line break, character by character (7 % of a
/// CSV → NATS run's CPU), and a clone is not checked again.
#[derive(Default)]
struct Repeats {
    /// The last `faucet-position`: a plain row's is its page's bookmark (a csv source's is
    /// some 300 bytes), the same for every row of the page.
    position: Option<(Vec<u8>, HeaderValue)>,
    /// The last message's `faucet-id`: `Nats-Msg-Id` is mostly the same text.
    id: Option<HeaderValue>,
}

impl Repeats {
    /// The message's own headers ([`Message::headers`]) and `faucet-key`.
    fn message_headers(
        &mut self,
        key: Option<&[u8]>,
        op: Option<&'static str>,
        table: Option<String>,
        position: Vec<u8>,
        id: String,
    ) -> HeaderMap {
        // Names from `from_static`: no validation or copy of a name per message.
        let name = HeaderName::from_static;
        let mut h = HeaderMap::new();
        if let Some(op) = op {
            h.insert(name(HEADER_OP), op);
        }
        if let Some(table) = table {
            h.insert(name(HEADER_TABLE), table);
        }
        let position = match self.position.take() {
            Some((last, value)) if last == position => (last, value),
            _ => {
                let value = HeaderValue::from(text(&position).as_ref());
                (position, value)
            }
        };
        h.insert(name(HEADER_POSITION), position.1.clone());
        self.position = Some(position);
        let id = HeaderValue::from(id);
        h.insert(name(HEADER_ID), id.clone());
        self.id = Some(id);
        if let Some(key) = key {
            h.insert(name(HEADER_KEY), text(key).as_ref());
        }
        h
    }

    /// `Nats-Msg-Id`: a clone of the message's `faucet-id` when the page's ids are the same
    /// text (`same`, decided once a page), else `<prefix>/<i>`.
    fn message_id(&self, h: &mut HeaderMap, same: bool, prefix: &str, i: usize) {
        match &self.id {
            Some(id) if same => h.insert(NATS_MESSAGE_ID, id.clone()),
            _ => h.insert(NATS_MESSAGE_ID, format!("{prefix}/{i}")),
        }
    }
}

/// Why a publish of a page was refused ([`NatsWriter::settle`]).
enum Refused {
    /// The stream moved on: a newer run's publish, or another writer's.
    Overtaken,
    /// Any other failure.
    Failed(jetstream::context::PublishError),
}

/// An open [`NatsSink`].
pub(super) struct NatsWriter<'a> {
    sink: &'a NatsSink,
    client: Client,
    js: Context,
    /// The state key last told; part of every message id.
    scope: String,
    /// The run's lease fence: pages are then chained and carry it.
    fence: Option<u64>,
    /// Read from the target at the first page or token read of a chained writer.
    at: Option<Position>,
    /// At-least-once: the bookmark after the last page written (its successor's start).
    previous: Option<Bookmark>,
    /// The last page's messages per subject ([`SinkWriter::written_targets`]).
    written: Vec<(String, u64)>,
    /// What the last page published ([`SinkWriter::published`]).
    published: Option<faucet_core::PublishStats>,
    /// The source's keys of its tables, when told ([`SinkWriter::source_keys`]).
    keys: SourceKeys,
}

impl<'a> NatsWriter<'a> {
    /// A writer of `sink` on an open connection, told nothing yet.
    pub(super) fn new(sink: &'a NatsSink, client: Client, js: Context) -> Self {
        Self {
            sink,
            client,
            js,
            scope: String::new(),
            fence: None,
            at: None,
            previous: None,
            written: Vec::new(),
            published: None,
            keys: SourceKeys::default(),
        }
    }
}

impl NatsWriter<'_> {
    /// Reads where the target stands for `scope`: the stream's last sequence and the last
    /// message of the sink's subjects (or of its commit markers, whichever is later).
    async fn read_anchor(&mut self, scope: &str) -> Result<Anchor, FaucetError> {
        let sink = self.sink;
        let mut stream = sink.stream(&self.js).await?;
        let last_seq = stream
            .info()
            .await
            .map_err(|e| sink.fail("reading the stream's state", e))?
            .state
            .last_sequence;
        let mut last: Option<jetstream::message::StreamMessage> = None;
        for subject in [sink.filter.clone(), marker_subject(&sink.config.stream)] {
            match stream.get_last_raw_message_by_subject(&subject).await {
                Ok(m) => {
                    if last.as_ref().is_none_or(|l| l.sequence < m.sequence) {
                        last = Some(m);
                    }
                }
                Err(e)
                    if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {}
                Err(e) => return Err(sink.fail("reading the last message of the subjects", e)),
            }
        }
        let anchor = match last {
            Some(m) => anchor::read(&m.headers, scope)
                .map_err(|msg| FaucetError::write(CONNECTOR, msg, None))?
                .unwrap_or_default(),
            None => Anchor::default(),
        };
        self.at = Some(Position {
            last_seq,
            committed: anchor.token.as_ref().map_or(0, |t| t.sequence),
            start: anchor.start.clone(),
            skip: anchor.skip,
        });
        Ok(anchor)
    }

    async fn position(&mut self, scope: &str) -> Result<Position, FaucetError> {
        if self.at.is_none() || self.scope != scope {
            scope.clone_into(&mut self.scope);
            self.read_anchor(scope).await?;
        }
        self.at
            .clone()
            .ok_or_else(|| FaucetError::write(CONNECTOR, "no position", None))
    }

    /// The `faucet-page` header for a page with `meta` (a committed page) or written under a
    /// fence; `None` for neither. Made once a page ([`anchor`]) and cloned into each message.
    fn page_header(&self, meta: Option<&PageMeta<'_>>) -> Option<HeaderValue> {
        if self.fence.is_none() && meta.is_none() {
            return None;
        }
        let page = PageHeader {
            scope: self.scope.clone(),
            sequence: meta.map(|m| m.sequence),
            start: Some(meta.map(|m| m.start.clone()).unwrap_or_default()),
            fence: self.fence,
        };
        Some(HeaderValue::from(page.text()))
    }

    /// Publishes `messages[from..]` (the page's records `from..`), pipelined; each publish
    /// expects the stream sequence before it when `chain` holds one. Returns the stream's
    /// last sequence after them. The messages are consumed: each one's value and route go
    /// to its publish as they are, not copied.
    async fn publish(
        &mut self,
        messages: Vec<Message>,
        from: usize,
        start: Option<&Bookmark>,
        meta: Option<&PageMeta<'_>>,
        mut chain: Option<u64>,
    ) -> Result<Option<u64>, FaucetError> {
        for (i, m) in messages.iter().enumerate().skip(from) {
            check_message(m).map_err(|msg| {
                FaucetError::data(CONNECTOR, format!("record {} of the page", i + 1), msg)
            })?;
        }
        let sent = stats::tally(&messages[from..]);
        let prefix = start.map(|s| page_id(&self.scope, Some(s)));
        // `Nats-Msg-Id` is `<prefix>/<i>`, `faucet-id` `<page id>/<offset + i>`: equal for one
        // message only when prefix and page id agree and the offset is 0, so equal for all.
        let same_ids = prefix.as_deref().is_some_and(|p| {
            messages
                .get(from)
                .is_some_and(|m| m.id == format!("{p}/{from}"))
        });
        let page = self.page_header(meta);
        let mut repeats = Repeats::default();
        let mut pending: VecDeque<PublishAckFuture> = VecDeque::new();
        let mut meter = PageMeter::start();
        let mut last = chain;
        let (len, half) = (messages.len(), from + (messages.len() - from) / 2);
        for (i, m) in messages.into_iter().enumerate().skip(from) {
            if i == half && i > from {
                self.fault_point(fault::MID_PAGE, &mut pending, &mut last)
                    .await?;
            }
            let is_last = i + 1 == len;
            if is_last && meta.is_some() {
                self.fault_point(fault::BEFORE_COMMIT, &mut pending, &mut last)
                    .await?;
            }
            let Message {
                route,
                key,
                value,
                op,
                table,
                position,
                id,
            } = m;
            let mut headers = repeats.message_headers(key.as_deref(), op, table, position, id);
            if let Some(prefix) = &prefix {
                repeats.message_id(&mut headers, same_ids, prefix, i);
            }
            if let Some(page) = &page {
                anchor_headers(&mut headers, page, meta.is_some().then_some(i));
            }
            if is_last && let Some(commit) = meta.and_then(|m| m.commit) {
                headers.insert(HeaderName::from_static(HEADER_COMMIT), commit);
            }
            if let Some(seq) = chain.as_mut() {
                headers.insert(NATS_EXPECTED_LAST_SEQUENCE, HeaderValue::from(*seq));
                *seq += 1;
            }
            let msg = PublishMessage::build()
                .payload(Bytes::from(value))
                .headers(headers);
            // The route's bytes become the subject as they are (a clone is a reference count).
            let subject = async_nats::Subject::from(route);
            let ack = self
                .js
                .send_publish(subject.clone(), msg)
                .await
                .map_err(|e| self.publish_error(&subject, e))?;
            pending.push_back(ack);
            meter.pending(pending.len());
            if pending.len() >= WINDOW {
                self.settle(&mut pending, 1, &mut last).await?;
            }
        }
        let n = pending.len();
        self.settle(&mut pending, n, &mut last).await?;
        self.published = Some(meter.finish_tallied(sent));
        Ok(last)
    }

    /// At an armed fault point, waits for what was sent before it to be stored, so the abort
    /// leaves exactly that part of the page in the stream; then passes the point.
    async fn fault_point(
        &mut self,
        name: &str,
        pending: &mut VecDeque<PublishAckFuture>,
        last: &mut Option<u64>,
    ) -> Result<(), FaucetError> {
        if fault::armed_at(name) {
            let n = pending.len();
            self.settle(pending, n, last).await?;
        }
        fault::point(name);
        Ok(())
    }

    /// Awaits the `n` oldest acknowledgements of `pending`, in order, one at a time: one
    /// that is in already is taken without registering a waker or a timer (a `join_all`
    /// of thousands cost about 15 % of a postgres-cdc → nats run's CPU). All of them must be
    /// in within [`TIMEOUT`] of the call, as when they were awaited at once (each one's own
    /// timeout starts when it is first polled, so one after another a stuck server would
    /// cost `n` timeouts): past it, the error is a lost connection (or the refusal, when
    /// one came before). Every one is awaited even after a refusal, so the stream is still
    /// when the refusal is judged.
    async fn settle(
        &mut self,
        pending: &mut VecDeque<PublishAckFuture>,
        n: usize,
        last: &mut Option<u64>,
    ) -> Result<(), FaucetError> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        let mut refused: Option<Refused> = None;
        for ack in pending.drain(..n) {
            let Ok(ack) = tokio::time::timeout_at(deadline, ack.into_future()).await else {
                if refused.is_some() {
                    break; // the refusal says more than the silence after it
                }
                return Err(FaucetError::connect(
                    CONNECTOR,
                    format!(
                        "publishing to `{}`: no acknowledgement from {} within {} s",
                        self.sink.config.stream,
                        self.sink.server,
                        TIMEOUT.as_secs()
                    ),
                    None,
                ));
            };
            if refused.is_some() {
                continue;
            }
            match ack {
                // The same record is stored already: a newer run wrote it (the server checks
                // the id before the expected sequence), so this writer was overtaken.
                Ok(ack) if ack.duplicate && last.is_some() => refused = Some(Refused::Overtaken),
                Ok(ack) => {
                    if last.is_some() || !ack.duplicate {
                        *last = Some(ack.sequence.max(last.unwrap_or(0)));
                    }
                }
                Err(e) if e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence => {
                    refused = Some(Refused::Overtaken);
                }
                Err(e) => refused = Some(Refused::Failed(e)),
            }
        }
        match refused {
            None => Ok(()),
            Some(Refused::Overtaken) => Err(self.overtaken().await),
            Some(Refused::Failed(e)) => Err(self.publish_error(&self.sink.config.stream, e)),
        }
    }

    fn publish_error(&self, subject: &str, e: jetstream::context::PublishError) -> FaucetError {
        use jetstream::context::PublishErrorKind as K;
        let sink = self.sink;
        match e.kind() {
            K::StreamNotFound => FaucetError::write(
                CONNECTOR,
                format!(
                    "no stream captures `{subject}` at {}: the stream `{}` must capture `{}` (and \
                     `{}` for commit markers)",
                    sink.server,
                    sink.config.stream,
                    sink.filter,
                    marker_subject(&sink.config.stream)
                ),
                None,
            ),
            K::TimedOut | K::BrokenPipe => FaucetError::connect(
                CONNECTOR,
                format!(
                    "publishing to `{subject}`: no acknowledgement from {}",
                    sink.server
                ),
                Some(Box::new(e)),
            ),
            _ => sink.fail(&format!("publishing to `{subject}`"), e),
        }
    }

    /// The error for a publish refused because the stream moved on since this writer's last
    /// page: a newer run took over ([`LeaseError::Fenced`], when the last message carries a
    /// larger fence), or another program publishes into the stream.
    async fn overtaken(&mut self) -> FaucetError {
        let scope = self.scope.clone();
        let newer = match self.read_anchor(&scope).await {
            Ok(a) => a.fence,
            Err(_) => None,
        };
        self.at = None;
        match (self.fence, newer) {
            (Some(fence), Some(newer)) if newer > fence => LeaseError::Fenced {
                key: scope,
                fence,
                newer,
                target: format!("nats stream {}", self.sink.config.stream),
            }
            .into(),
            _ => FaucetError::write(
                CONNECTOR,
                format!(
                    "the stream `{}` moved on since this writer's last page (another writer \
                     published into it): nothing of the page after that point was stored. An \
                     effectively-once or fenced run needs the stream to itself",
                    self.sink.config.stream
                ),
                None,
            ),
        }
    }

    /// Stores where the target stands in a commit marker (a page that publishes no record):
    /// with nothing left to skip, `token` closes the page; with `remaining` records after
    /// its bookmark stored already, the marker reads as a page stored in part from there
    /// (`token.sequence + 1`, start `token.bookmark`, index `remaining - 1`).
    async fn marker(
        &mut self,
        token: &CommitToken,
        remaining: u64,
        chain: u64,
    ) -> Result<u64, FaucetError> {
        let bookmark = json(&token.bookmark)?;
        let meta = if remaining == 0 {
            PageMeta {
                sequence: token.sequence,
                start: &token.bookmark,
                commit: Some(&bookmark),
            }
        } else {
            PageMeta {
                sequence: token.sequence + 1,
                start: &token.bookmark,
                commit: None,
            }
        };
        let index = usize::try_from(remaining.saturating_sub(1)).unwrap_or(usize::MAX);
        let mut h = HeaderMap::new();
        if let Some(page) = self.page_header(Some(&meta)) {
            anchor_headers(&mut h, &page, Some(index));
        }
        if let Some(c) = meta.commit {
            h.insert(HEADER_COMMIT, c);
        }
        h.insert(NATS_EXPECTED_LAST_SEQUENCE, HeaderValue::from(chain));
        let subject = marker_subject(&self.sink.config.stream);
        let ack = self
            .js
            .send_publish(
                subject.clone(),
                PublishMessage::build().payload(Bytes::new()).headers(h),
            )
            .await
            .map_err(|e| self.publish_error(&subject, e))?;
        let mut pending = VecDeque::from([ack]);
        let mut last = Some(chain);
        self.settle(&mut pending, 1, &mut last).await?;
        Ok(last.unwrap_or(chain))
    }
}

fn json(b: &Bookmark) -> Result<String, FaucetError> {
    serde_json::to_string(b)
        .map_err(|e| FaucetError::write(CONNECTOR, "cannot encode the bookmark", Some(Box::new(e))))
}

#[async_trait]
impl SinkWriter for NatsWriter<'_> {
    /// Publishes the page's records and awaits every acknowledgement (the page is then
    /// durable). With a fence the publishes are chained as in [`SinkWriter::write_committed`].
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        self.written.clear();
        self.published = None;
        if page.is_empty() {
            self.previous = page.bookmark().cloned();
            return Ok(());
        }
        let messages = self.sink.encoder.encode(page, &self.scope, &self.keys)?;
        let chain = match self.fence {
            Some(_) => {
                let scope = self.scope.clone();
                Some(self.position(&scope).await?.last_seq)
            }
            None => None,
        };
        let start = self.previous.take();
        let written = crate::bus::per_route(&messages);
        let last = self
            .publish(messages, 0, start.as_ref(), None, chain)
            .await?;
        if let (Some(at), Some(last)) = (self.at.as_mut(), last) {
            at.last_seq = last;
        }
        self.previous = page.bookmark().cloned();
        self.written = written;
        Ok(())
    }

    /// Keeps the source's keys: change records are keyed by them when the sink has no `key`.
    fn source_keys(&mut self, keys: &[faucet_core::keys::TableKeys]) {
        self.keys = SourceKeys::new(keys);
    }

    /// The subjects the last page's messages went to, with how many each (a replayed page
    /// counts whole, also the messages found already stored).
    fn written_targets(&self) -> &[(String, u64)] {
        &self.written
    }

    /// The messages the last page published (a replay's skipped ones not counted); `None`
    /// for a page stored whole already (its commit marker is not counted).
    fn published(&self) -> Option<faucet_core::PublishStats> {
        self.published
    }

    /// Publishes the page's records not yet stored (a replay of a page stored in part skips
    /// its first ones), chained, the last carrying the token; durable when every
    /// acknowledgement is in. A page publishing nothing stores its token in a commit marker.
    async fn write_committed(&mut self, page: &Page, commit: &Commit) -> Result<(), FaucetError> {
        let (scope, token) = (commit.scope.as_str(), &commit.token);
        self.written.clear();
        self.published = None;
        let at = self.position(scope).await?;
        if token.sequence <= at.committed {
            return Err(FaucetError::write(
                CONNECTOR,
                format!(
                    "commit token for `{scope}` refused: the stream `{}` holds sequence {}, not \
                     below {} (a stale or concurrent writer); nothing of the page was written",
                    self.sink.config.stream, at.committed, token.sequence
                ),
                None,
            ));
        }
        let messages = self.sink.encoder.encode(page, scope, &self.keys)?;
        let skip = usize::try_from(at.skip)
            .unwrap_or(usize::MAX)
            .min(messages.len());
        let commit = json(&token.bookmark)?;
        let meta = PageMeta {
            sequence: token.sequence,
            start: &at.start,
            commit: Some(&commit),
        };
        let written = crate::bus::per_route(&messages);
        let last = if skip < messages.len() {
            self.publish(
                messages,
                skip,
                Some(&at.start),
                Some(&meta),
                Some(at.last_seq),
            )
            .await?
            .unwrap_or(at.last_seq)
        } else {
            fault::point(fault::MID_PAGE);
            fault::point(fault::BEFORE_COMMIT);
            self.marker(token, at.skip - skip as u64, at.last_seq)
                .await?
        };
        self.at = Some(Position {
            last_seq: last,
            committed: token.sequence,
            start: token.bookmark.clone(),
            skip: at.skip - skip as u64,
        });
        self.written = written;
        Ok(())
    }

    /// Keeps `fence`: from now on pages are chained (each publish names the stream sequence
    /// it follows, so a zombie's publish after a newer run's is refused) and carry it. A last
    /// message of the scope with a larger fence is [`LeaseError::Fenced`] unless `take_over`.
    async fn fence(&mut self, order: &Fence) -> Result<bool, FaucetError> {
        let (scope, fence, take_over) = (order.scope.as_str(), order.number, order.take_over);
        scope.clone_into(&mut self.scope);
        let anchor = self.read_anchor(scope).await?;
        if let Some(newer) = anchor.fence
            && newer > fence
            && !take_over
        {
            return Err(LeaseError::Fenced {
                key: scope.to_owned(),
                fence,
                newer,
                target: format!("nats stream {}", self.sink.config.stream),
            }
            .into());
        }
        self.fence = Some(fence);
        Ok(true)
    }

    /// Whether the stream holds messages of the sink's subjects.
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        let stream = self.sink.stream(&self.js).await?;
        match stream
            .get_last_raw_message_by_subject(&self.sink.filter)
            .await
        {
            Ok(_) => Ok(Some(true)),
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
                Ok(Some(false))
            }
            Err(e) => Err(self
                .sink
                .fail("reading the last message of the subjects", e)),
        }
    }

    /// The re-anchor: the last stored message of the sink's subjects says which page is
    /// committed and how much of the next one is stored ([`super::anchor`]).
    async fn last_committed_token(
        &mut self,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        scope.clone_into(&mut self.scope);
        let anchor = self.read_anchor(scope).await?;
        if anchor.skip > 0 {
            tracing::warn!(
                key = scope,
                stored = anchor.skip,
                "the last page was stored in part: resuming from its start and skipping the \
                 records already in the stream"
            );
        }
        let _ = &self.client;
        Ok(anchor.token)
    }
}
