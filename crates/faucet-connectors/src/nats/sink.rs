//! [`NatsSink`]: each record a JetStream publish to the subject its template names.

use std::collections::VecDeque;
use std::time::Duration;

use async_nats::header::{NATS_EXPECTED_LAST_SEQUENCE, NATS_MESSAGE_ID};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, Context};
use async_nats::{Client, HeaderMap, HeaderName};
use async_trait::async_trait;
use bytes::Bytes;
use faucet_core::state::LeaseError;
use faucet_core::{
    Bookmark, Commit, CommitToken, FaucetError, Fence, Page, Sink, SinkCapabilities, SinkWriter,
    fault,
};
use secrecy::ExposeSecret as _;

use super::anchor::{
    self, Anchor, HEADER_COMMIT, HEADER_FENCE, HEADER_KEY, HEADER_PAGE_INDEX, HEADER_PAGE_START,
    HEADER_SCOPE, HEADER_SEQUENCE,
};
use super::config::{NatsSinkConfig, ValidatedNatsConfig, check_message};
use crate::bus::message::page_id;
use crate::bus::{Message, MessageEncoder, PageMeter};

/// The connector's name.
pub const CONNECTOR: &str = "nats";
/// How long connecting, and one JetStream API request, may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a publish may wait for its acknowledgement.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);
/// Publishes in flight at most: past it the oldest acknowledgement is awaited first.
const WINDOW: usize = 8_192;

/// The subject of the commit markers: a page that publishes no message (an empty page, or
/// one whose records were all stored before a crash) stores its commit token in a message
/// here, `_faucet.commit.<stream>`; a stream the sink creates captures it.
pub fn marker_subject(stream: &str) -> String {
    format!("_faucet.commit.{stream}")
}

/// The `nats` sink (see the module docs of [`crate::nats`]). Built without I/O;
/// [`Sink::open`] and [`Sink::check`] connect.
#[derive(Debug)]
pub struct NatsSink {
    config: NatsSinkConfig,
    encoder: MessageEncoder,
    filter: String,
    /// `nats://host:port`, never the user or password.
    server: String,
}

impl NatsSink {
    /// A sink for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`NatsSinkConfig::validate`].
    pub fn new(config: NatsSinkConfig) -> Result<Self, FaucetError> {
        let ValidatedNatsConfig {
            config,
            subject,
            filter,
        } = config.validate()?;
        let server = config
            .url
            .expose_secret()
            .parse::<async_nats::ServerAddr>()
            .map(|a| format!("nats://{}:{}", a.host(), a.port()))
            .unwrap_or_default();
        let encoder = MessageEncoder::new(CONNECTOR, subject, config.key.clone(), config.format);
        Ok(Self {
            config,
            encoder,
            filter,
            server,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &NatsSinkConfig {
        &self.config
    }

    /// The wildcard subject the sink's subjects match.
    pub fn filter(&self) -> &str {
        &self.filter
    }

    fn connect_error(&self, e: &async_nats::ConnectError) -> FaucetError {
        use async_nats::ConnectErrorKind as K;
        let server = &self.server;
        match e.kind() {
            K::Authentication | K::AuthorizationViolation => FaucetError::write(
                CONNECTOR,
                format!(
                    "connect: {server} rejected the login: check the user and password (or \
                     token) in `url`"
                ),
                None,
            ),
            K::Tls => FaucetError::connect(
                CONNECTOR,
                format!("connect: the TLS handshake with {server} failed: {e}"),
                None,
            ),
            _ => FaucetError::connect(
                CONNECTOR,
                format!(
                    "connect: cannot reach {server}; is nats-server running there? check `url`"
                ),
                None,
            ),
        }
    }

    async fn connect(&self) -> Result<(Client, Context), FaucetError> {
        self.connect_with(async_nats::ConnectOptions::new()).await
    }

    /// [`NatsSink::connect`] with `options` (an event callback).
    async fn connect_with(
        &self,
        options: async_nats::ConnectOptions,
    ) -> Result<(Client, Context), FaucetError> {
        let client = with_login(options, self.config.url.expose_secret())
            .connection_timeout(TIMEOUT)
            .name("faucet")
            .connect(self.config.url.expose_secret())
            .await
            .map_err(|e| self.connect_error(&e))?;
        let js = jetstream::ContextBuilder::new()
            .timeout(TIMEOUT)
            .ack_timeout(ACK_TIMEOUT)
            .max_ack_inflight(WINDOW + 16)
            .build(client.clone());
        Ok((client, js))
    }

    fn fail(&self, op: &str, e: impl std::error::Error + Send + Sync + 'static) -> FaucetError {
        FaucetError::write(
            CONNECTOR,
            format!("{op} at {} failed: {e}", self.server),
            Some(Box::new(e)),
        )
    }

    /// The stream, created when missing and `create_stream` is set.
    async fn stream(&self, js: &Context) -> Result<jetstream::stream::Stream, FaucetError> {
        let name = &self.config.stream;
        match js.get_stream(name).await {
            Ok(s) => Ok(s),
            Err(e) if stream_missing(&e) => {
                if !self.config.create_stream {
                    return Err(FaucetError::write(
                        CONNECTOR,
                        format!(
                            "the stream `{name}` does not exist at {}: create it (capturing \
                             `{}`), or set `create_stream: true`",
                            self.server, self.filter
                        ),
                        None,
                    ));
                }
                js.create_stream(jetstream::stream::Config {
                    name: name.clone(),
                    subjects: vec![self.filter.clone(), marker_subject(name)],
                    ..Default::default()
                })
                .await
                .map_err(|e| self.fail(&format!("creating the stream `{name}`"), e))
            }
            Err(e) if jetstream_off(&e) => Err(FaucetError::write(
                CONNECTOR,
                format!(
                    "{} has no JetStream for this account: start nats-server with `-js` (or \
                     enable JetStream for the account)",
                    self.server
                ),
                None,
            )),
            Err(e) => Err(self.fail(&format!("reading the stream `{name}`"), e)),
        }
    }
}

/// `options` with the login `url` holds, percent-decoded: `nats://user:password@host` a user
/// and password, `nats://token@host` a token. async-nats reads neither from the URL itself
/// (its `ServerAddr` only says one is there), so without this a server requiring a login
/// refuses the connection.
fn with_login(options: async_nats::ConnectOptions, url: &str) -> async_nats::ConnectOptions {
    let Ok(addr) = url.parse::<async_nats::ServerAddr>() else {
        return options;
    };
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    match (addr.username(), addr.password()) {
        (Some(user), Some(password)) => options.user_and_password(decode(user), decode(password)),
        (Some(token), None) => options.token(decode(token)),
        _ => options,
    }
}

fn stream_missing(e: &jetstream::context::GetStreamError) -> bool {
    matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j)
        if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

fn jetstream_off(e: &jetstream::context::GetStreamError) -> bool {
    matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j)
        if j.error_code() == jetstream::ErrorCode::JETSTREAM_NOT_ENABLED
            || j.error_code() == jetstream::ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT)
        || e.to_string().contains("no responders")
}

#[async_trait]
impl Sink for NatsSink {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// An atomic watermark: each page's last message carries its commit token, and a page
    /// stored in part is re-anchored exactly (see [`super::anchor`]).
    fn capabilities(&self) -> SinkCapabilities {
        SinkCapabilities {
            atomic_watermark: true,
            keyed_upsert: false,
        }
    }

    /// `nats host:port stream <stream> subject <template>`: no user, no password.
    fn target(&self) -> Option<String> {
        let server = self.server.strip_prefix("nats://").unwrap_or(&self.server);
        Some(format!(
            "{CONNECTOR} {server} stream {} subject {}",
            self.config.stream,
            self.encoder.route()
        ))
    }

    /// Connects, and finds (or creates) the stream.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when the server cannot be reached; [`FaucetError::Write`]
    /// when it refuses the login, has no JetStream, or the stream is missing.
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        let (client, js) = self.connect().await?;
        self.stream(&js).await?;
        Ok(Box::new(NatsWriter {
            sink: self,
            client,
            js,
            scope: String::new(),
            fence: None,
            at: None,
            previous: None,
            written: Vec::new(),
            published: None,
        }))
    }

    /// Reachable and the login accepted; JetStream on; the stream exists (or `create_stream`
    /// may create it: then nothing more is probed); the user may publish to one of the sink's
    /// subjects and the publish reaches the stream — an empty message sent with an expected
    /// last sequence no stream has (`Nats-Expected-Last-Sequence: u64::MAX`), so the stream
    /// refuses it and nothing is written. A publish the server's permissions refuse gets no
    /// answer, only a `Permissions Violation` notice on the connection, which fails the check
    /// naming the subject.
    ///
    /// # Errors
    /// The failing prerequisite, with its fix.
    async fn check(&self) -> Result<(), FaucetError> {
        let (refused_tx, mut refused) = tokio::sync::mpsc::unbounded_channel::<String>();
        let options = async_nats::ConnectOptions::new().event_callback(move |event| {
            let refused_tx = refused_tx.clone();
            async move {
                if let async_nats::Event::ServerError(async_nats::ServerError::Other(e)) = event
                    && e.to_ascii_lowercase().contains("permissions violation")
                {
                    let _ = refused_tx.send(e);
                }
            }
        });
        let (client, js) = self.connect_with(options).await?;
        let name = &self.config.stream;
        match js.get_stream(name).await {
            Ok(_) => {}
            Err(e) if stream_missing(&e) && self.config.create_stream => {
                tracing::info!(stream = %name, "the stream does not exist; `create_stream` makes it at open");
                return Ok(());
            }
            Err(_) => {
                self.stream(&js).await?;
            }
        }
        let subject = self.encoder.route().fixed().map_or_else(
            || self.filter.replace(['*', '>'], "faucet_doctor"),
            str::to_owned,
        );
        let probe = PublishMessage::build()
            .payload(Bytes::new())
            .header("Nats-Expected-Last-Sequence", u64::MAX.to_string().as_str());
        let ack = js
            .send_publish(subject.clone(), probe)
            .await
            .map_err(|e| self.fail("check (publishing a probe)", e))?;
        let result = tokio::select! {
            result = std::future::IntoFuture::into_future(ack) => result,
            Some(violation) = refused.recv() => {
                drop(client);
                return Err(FaucetError::write(
                    CONNECTOR,
                    format!(
                        "the user may not publish to `{subject}` at {}: the server refused it \
                         ({violation}); grant it publish permission on `{}`",
                        self.server, self.filter
                    ),
                    None,
                ));
            }
        };
        drop(client);
        match result {
            Err(e) if e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence => Ok(()),
            Err(e) if e.kind() == jetstream::context::PublishErrorKind::StreamNotFound => {
                Err(FaucetError::write(
                    CONNECTOR,
                    format!(
                        "no stream captures the subject `{subject}` at {}: the stream `{name}` \
                         must capture `{}`",
                        self.server, self.filter
                    ),
                    None,
                ))
            }
            Err(e) if e.kind() == jetstream::context::PublishErrorKind::TimedOut => {
                Err(FaucetError::write(
                    CONNECTOR,
                    format!(
                        "a publish to `{subject}` got no answer from {}: the user may not publish \
                         there (check its permissions)",
                        self.server
                    ),
                    None,
                ))
            }
            Err(e) => Err(self.fail("check (publishing a probe)", e)),
            Ok(ack) => Err(FaucetError::write(
                CONNECTOR,
                format!(
                    "the probe was stored in `{}` at sequence {} although it named an impossible \
                     last sequence",
                    ack.stream, ack.sequence
                ),
                None,
            )),
        }
    }
}

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

/// What a page's messages say about the page, beside the shared message headers.
struct PageMeta<'a> {
    sequence: u64,
    start: String,
    commit: Option<&'a str>,
}

/// An open [`NatsSink`].
struct NatsWriter<'a> {
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

    /// The headers of `m` (none for a commit marker), the `index`-th record of its page.
    fn headers(
        &self,
        m: Option<&Message>,
        index: usize,
        id: Option<&str>,
        meta: Option<&PageMeta<'_>>,
    ) -> HeaderMap {
        // Names from `from_static`: no validation or copy of a name per message.
        let name = HeaderName::from_static;
        let mut h = HeaderMap::new();
        if let Some(m) = m {
            for (header, value) in m.headers() {
                h.insert(name(header), text(value).as_ref());
            }
            if let Some(key) = &m.key {
                h.insert(name(HEADER_KEY), text(key).as_ref());
            }
        }
        if let Some(id) = id {
            h.insert(NATS_MESSAGE_ID, id);
        }
        if self.fence.is_some() || meta.is_some() {
            h.insert(name(HEADER_SCOPE), self.scope.as_str());
        }
        if let Some(f) = self.fence {
            h.insert(name(HEADER_FENCE), f.to_string());
        }
        if let Some(meta) = meta {
            h.insert(name(HEADER_SEQUENCE), meta.sequence.to_string());
            h.insert(name(HEADER_PAGE_START), meta.start.as_str());
            h.insert(name(HEADER_PAGE_INDEX), index.to_string());
        }
        h
    }

    /// Publishes `messages[from..]` (the page's records `from..`), pipelined; each publish
    /// expects the stream sequence before it when `chain` holds one. Returns the stream's
    /// last sequence after them.
    async fn publish(
        &mut self,
        messages: &[Message],
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
        let prefix = start.map(|s| page_id(&self.scope, Some(s)));
        let mut pending: VecDeque<PublishAckFuture> = VecDeque::new();
        let mut meter = PageMeter::start();
        let mut last = chain;
        let half = from + (messages.len() - from) / 2;
        for (i, m) in messages.iter().enumerate().skip(from) {
            if i == half && i > from {
                self.fault_point(fault::MID_PAGE, &mut pending, &mut last)
                    .await?;
            }
            let is_last = i + 1 == messages.len();
            if is_last && meta.is_some() {
                self.fault_point(fault::BEFORE_COMMIT, &mut pending, &mut last)
                    .await?;
            }
            let id = prefix.as_ref().map(|p| format!("{p}/{i}"));
            let mut headers = self.headers(Some(m), i, id.as_deref(), meta);
            if is_last && let Some(commit) = meta.and_then(|m| m.commit) {
                headers.insert(HeaderName::from_static(HEADER_COMMIT), commit);
            }
            if let Some(seq) = chain.as_mut() {
                headers.insert(NATS_EXPECTED_LAST_SEQUENCE, seq.to_string());
                *seq += 1;
            }
            let msg = PublishMessage::build()
                .payload(Bytes::copy_from_slice(&m.value))
                .headers(headers);
            let ack = self
                .js
                .send_publish(m.route.clone(), msg)
                .await
                .map_err(|e| self.publish_error(&m.route, e))?;
            pending.push_back(ack);
            meter.pending(pending.len());
            if pending.len() >= WINDOW {
                self.settle(&mut pending, 1, &mut last).await?;
            }
        }
        let n = pending.len();
        self.settle(&mut pending, n, &mut last).await?;
        self.published = Some(meter.finish(&messages[from..]));
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

    /// Awaits the `n` oldest acknowledgements of `pending`.
    async fn settle(
        &mut self,
        pending: &mut VecDeque<PublishAckFuture>,
        n: usize,
        last: &mut Option<u64>,
    ) -> Result<(), FaucetError> {
        let acks = futures_util::future::join_all(
            pending.drain(..n).map(std::future::IntoFuture::into_future),
        )
        .await;
        for ack in acks {
            match ack {
                // The same record is stored already: a newer run wrote it (the server checks
                // the id before the expected sequence), so this writer was overtaken.
                Ok(ack) if ack.duplicate && last.is_some() => {
                    return Err(self.overtaken().await);
                }
                Ok(ack) => {
                    if last.is_some() || !ack.duplicate {
                        *last = Some(ack.sequence.max(last.unwrap_or(0)));
                    }
                }
                Err(e) if e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence => {
                    return Err(self.overtaken().await);
                }
                Err(e) => return Err(self.publish_error(&self.sink.config.stream, e)),
            }
        }
        Ok(())
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
                start: bookmark.clone(),
                commit: Some(&bookmark),
            }
        } else {
            PageMeta {
                sequence: token.sequence + 1,
                start: bookmark.clone(),
                commit: None,
            }
        };
        let index = usize::try_from(remaining.saturating_sub(1)).unwrap_or(usize::MAX);
        let mut h = self.headers(None, index, None, Some(&meta));
        if let Some(c) = meta.commit {
            h.insert(HEADER_COMMIT, c);
        }
        h.insert("Nats-Expected-Last-Sequence", chain.to_string().as_str());
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
        let messages = self.sink.encoder.encode(page, &self.scope)?;
        let chain = match self.fence {
            Some(_) => {
                let scope = self.scope.clone();
                Some(self.position(&scope).await?.last_seq)
            }
            None => None,
        };
        let start = self.previous.take();
        let last = self
            .publish(&messages, 0, start.as_ref(), None, chain)
            .await?;
        if let (Some(at), Some(last)) = (self.at.as_mut(), last) {
            at.last_seq = last;
        }
        self.previous = page.bookmark().cloned();
        self.written = crate::bus::per_route(&messages);
        Ok(())
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
        let messages = self.sink.encoder.encode(page, scope)?;
        let skip = usize::try_from(at.skip)
            .unwrap_or(usize::MAX)
            .min(messages.len());
        let commit = json(&token.bookmark)?;
        let meta = PageMeta {
            sequence: token.sequence,
            start: json(&at.start)?,
            commit: Some(&commit),
        };
        let last = if skip < messages.len() {
            self.publish(
                &messages,
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
        self.written = crate::bus::per_route(&messages);
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
