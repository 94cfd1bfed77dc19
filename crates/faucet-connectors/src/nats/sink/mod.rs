//! [`NatsSink`]: each record a JetStream publish to the subject its template names.

use std::time::Duration;

use async_nats::Client;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, Context};
use async_trait::async_trait;
use bytes::Bytes;
use faucet_core::{FaucetError, Sink, SinkCapabilities, SinkWriter};
use secrecy::ExposeSecret as _;

use super::config::{NatsSinkConfig, ValidatedNatsConfig};
use crate::bus::MessageEncoder;

mod writer;
use writer::NatsWriter;

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

    /// Without `key`, change records are keyed by their source table's key.
    fn keys_by_source(&self) -> bool {
        self.encoder.keys_by_source()
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
        Ok(Box::new(NatsWriter::new(self, client, js)))
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
