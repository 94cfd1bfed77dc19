//! [`RedisStreamsSink`]: each record an `XADD` to the stream its template names.

use std::time::Duration;

use async_trait::async_trait;
use faucet_core::state::LeaseError;
use faucet_core::{
    Commit, CommitToken, FaucetError, Fence, Page, PublishStats, Sink, SinkCapabilities, SinkWriter,
};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};
use secrecy::ExposeSecret as _;

use super::config::{RedisStreamsSinkConfig, ValidatedRedisStreamsConfig};
use super::page::{PageWrite, Verdict, WATCH_ATTEMPTS};
use crate::bus::{Message, MessageEncoder, PageMeter, SourceKeys};

/// The connector's name.
pub const CONNECTOR: &str = "redis-streams";
/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one command (a page's `EXEC` or script among them) may wait for its reply.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// The `redis-streams` sink (see the module docs of [`crate::redis`]). Built without I/O;
/// [`Sink::open`] and [`Sink::check`] connect.
#[derive(Debug)]
pub struct RedisStreamsSink {
    config: RedisStreamsSinkConfig,
    encoder: MessageEncoder,
    /// `redis://[user@]host:port/db` ([`super::describe_server`]), never the password.
    server: String,
}

impl RedisStreamsSink {
    /// A sink for `config`, validated (no I/O).
    ///
    /// # Errors
    /// [`FaucetError::Config`] from [`RedisStreamsSinkConfig::validate`].
    pub fn new(config: RedisStreamsSinkConfig) -> Result<Self, FaucetError> {
        let ValidatedRedisStreamsConfig { config, stream } = config.validate()?;
        let server = Client::open(config.url.expose_secret())
            .map(|c| super::describe_server(c.get_connection_info()))
            .unwrap_or_default();
        let encoder = MessageEncoder::new(CONNECTOR, stream, config.key.clone(), config.format);
        Ok(Self {
            config,
            encoder,
            server,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RedisStreamsSinkConfig {
        &self.config
    }

    /// The key scope of pages under `state_key`: `<state key> -> <stream template>`, so two
    /// pipelines of one name writing other streams keep their own tokens and fences.
    fn scope(&self, state_key: &str) -> String {
        format!("{state_key} -> {}", self.encoder.route())
    }

    fn token_key(&self, scope: &str) -> String {
        format!("{}token/{scope}", self.config.prefix)
    }

    fn fence_key(&self, scope: &str) -> String {
        format!("{}fence/{scope}", self.config.prefix)
    }

    /// A connection that never reconnects by itself (see [`super::page`]: a `WATCH` must
    /// not outlive its connection unnoticed), pinged.
    async fn connect(&self) -> Result<MultiplexedConnection, FaucetError> {
        let client = Client::open(self.config.url.expose_secret())
            .map_err(|_| FaucetError::config("url", "is not a usable Redis URL"))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_response_timeout(RESPONSE_TIMEOUT);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.fail("connect", e))?;
        redis::cmd("PING")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| self.fail("connect", e))?;
        // How `CLIENT LIST` names the connection (a user without `+client` keeps it unnamed).
        let named = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(self.client_name())
            .query_async::<()>(&mut conn)
            .await;
        if let Err(e) = named {
            tracing::debug!(server = %self.server, "CLIENT SETNAME refused: {e}");
        }
        Ok(conn)
    }

    /// The connection's name in `CLIENT LIST`: `faucet-redis-streams@<prefix>`, every
    /// character of the prefix outside `!`..`~` (which a client name may not hold) as `_`.
    pub fn client_name(&self) -> String {
        let prefix: String = self
            .config
            .prefix
            .chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '_' })
            .collect();
        format!("{CONNECTOR}@{prefix}")
    }

    /// A redis error as a [`FaucetError`]: a [`FaucetError::Connect`] when the server cannot
    /// be reached (retryable), else a [`FaucetError::Write`] saying what to fix.
    fn fail(&self, op: &str, e: RedisError) -> FaucetError {
        let server = &self.server;
        if e.is_connection_refusal()
            || e.is_timeout()
            || e.is_io_error()
            || e.is_connection_dropped()
        {
            return FaucetError::connect(
                CONNECTOR,
                format!("{op}: cannot reach {server}; is Redis running there? check `url`"),
                Some(Box::new(e)),
            );
        }
        let hint = match (e.kind(), e.code()) {
            (redis::ErrorKind::AuthenticationFailed, _) | (_, Some("WRONGPASS" | "NOAUTH")) => {
                "; the server rejected the login: check the user and password in `url`"
            }
            (_, Some("NOPERM")) => {
                "; the ACL user needs XADD, TYPE, GET, SET, HGET, HSET, WATCH, UNWATCH, \
                 MULTI, EXEC, EVALSHA/EVAL on the streams and on the prefix's keys"
            }
            (redis::ErrorKind::ReadOnly, _) => {
                "; the server is a read-only replica: point `url` at the primary"
            }
            (_, Some("OOM")) => "; the server is out of memory: raise maxmemory or set `maxlen`",
            (_, Some("CROSSSLOT")) => {
                "; in Redis Cluster a page's streams, token and fence must share a slot: put a \
                 hash tag in `stream` and `prefix` (`{cdc}.{table}`)"
            }
            _ => "",
        };
        FaucetError::write(
            CONNECTOR,
            format!("{op} at {server} failed{hint}"),
            Some(Box::new(e)),
        )
    }

    /// Logs a warning when the server does not append every write to its log (AOF off): a
    /// Redis restart then loses the entries (and tokens) written since its last snapshot.
    async fn warn_unless_aof(&self, conn: &mut MultiplexedConnection) {
        let info: Result<String, _> = redis::cmd("INFO")
            .arg("persistence")
            .query_async(conn)
            .await;
        if let Ok(info) = info
            && info.lines().any(|l| l.trim() == "aof_enabled:0")
        {
            tracing::warn!(
                server = %self.server,
                "redis has appendonly off: stream entries written since the last snapshot are \
                 lost if the server restarts; set `appendonly yes` (with `appendfsync always` \
                 for every acknowledged page to survive a power loss)"
            );
        }
    }
}

#[async_trait]
impl Sink for RedisStreamsSink {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// Without `key`, change records are keyed by their source table's key.
    fn keys_by_source(&self) -> bool {
        self.encoder.keys_by_source()
    }

    /// An atomic watermark: a page's entries and its commit token are one `MULTI`/`EXEC`
    /// (or one script).
    fn capabilities(&self) -> SinkCapabilities {
        SinkCapabilities {
            atomic_watermark: true,
            keyed_upsert: false,
        }
    }

    /// `redis-streams redis://host:port/db stream <template>`: no user, no password.
    fn target(&self) -> Option<String> {
        let server = self
            .server
            .split_once('@')
            .map_or(self.server.as_str(), |(_, s)| s);
        let server = server.strip_prefix("redis://").unwrap_or(server);
        Some(format!(
            "{CONNECTOR} {server} stream {}",
            self.encoder.route()
        ))
    }

    /// Connects and pings; warns when the server has no AOF.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when the server cannot be reached; [`FaucetError::Write`]
    /// when it refuses the login.
    async fn open(&self) -> Result<Box<dyn SinkWriter + '_>, FaucetError> {
        let mut conn = self.connect().await?;
        self.warn_unless_aof(&mut conn).await;
        Ok(Box::new(RedisStreamsWriter {
            sink: self,
            conn: Some(conn),
            scope: String::new(),
            fence: None,
            written: Vec::new(),
            published: None,
            keys: SourceKeys::default(),
        }))
    }

    /// Connects (reachable, login accepted), writes an empty page both ways a page is
    /// written (the script allowed, `WATCH`/`MULTI`/`EXEC` allowed, the prefix's keys
    /// readable), checks the right to add entries to the stream
    /// (a fixed `stream`, or a template's stream for the source table
    /// `faucet_doctor.faucet_doctor`) with `XADD <stream> 0-0 …` — the server checks the
    /// user's ACL (the command and the key) first and then refuses the id 0-0 before it
    /// touches the key, so a user with the right gets that refusal and nothing is written or
    /// created —, and checks that a fixed `stream` is a stream or missing; warns when the
    /// server has no AOF. Writes nothing.
    ///
    /// # Errors
    /// The failing prerequisite, with its fix.
    async fn check(&self) -> Result<(), FaucetError> {
        let mut conn = self.connect().await?;
        let scope = self.scope("faucet-doctor");
        let (fence_key, token_key) = (self.fence_key(&scope), self.token_key(&scope));
        // Nothing to check and nothing to write: both ways a page is written, empty.
        let probe = PageWrite {
            fence_key: &fence_key,
            token_key: &token_key,
            fence: None,
            token: None,
            maxlen: None,
            messages: &[],
        };
        probe
            .scripted(&mut conn)
            .await
            .map_err(|e| self.fail("check (running the page script)", e))?;
        // A transaction that reads (an empty one is never sent): `MULTI`, `EXEC` allowed.
        let mut read = redis::pipe();
        read.atomic()
            .cmd("HGET")
            .arg(&token_key)
            .arg("sequence")
            .ignore();
        let watch_and_exec = async {
            probe.watch(&mut conn).await?;
            probe.commit(&mut conn, &read).await
        };
        watch_and_exec
            .await
            .map_err(|e| self.fail("check (WATCH and MULTI/EXEC on the prefix's keys)", e))?;
        if let Ok(stream) = self
            .encoder
            .route()
            .render(Some("faucet_doctor.faucet_doctor"))
        {
            self.check_xadd(&mut conn, &stream).await?;
        }
        if let Some(stream) = self.encoder.route().fixed() {
            let kind: String = redis::cmd("TYPE")
                .arg(stream)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.fail("check", e))?;
            if kind != "none" && kind != "stream" {
                return Err(wrong_type(stream, &kind));
            }
        }
        self.warn_unless_aof(&mut conn).await;
        Ok(())
    }
}

impl RedisStreamsSink {
    /// Whether the user may `XADD` to `stream`, probed with the id 0-0 (see
    /// [`Sink::check`]): `NOPERM` fails the check naming the command and the key.
    async fn check_xadd(
        &self,
        conn: &mut MultiplexedConnection,
        stream: &str,
    ) -> Result<(), FaucetError> {
        let probe = redis::cmd("XADD")
            .arg(stream)
            .arg("0-0")
            .arg("faucet-doctor")
            .arg("probe")
            .query_async::<redis::Value>(conn)
            .await;
        match probe {
            Err(e) if e.code() == Some("NOPERM") => Err(FaucetError::write(
                CONNECTOR,
                format!(
                    "the user may not add entries to the stream `{stream}` at {}: {e}; grant \
                     it `+xadd` and the stream's keys (e.g. `~{}*`) in its ACL",
                    self.server,
                    self.encoder.route().fixed_prefix()
                ),
                None,
            )),
            // The id 0-0 refused: the ACL let the command through, nothing was written.
            Err(e)
                if matches!(
                    e.kind(),
                    redis::ErrorKind::ResponseError | redis::ErrorKind::TypeError
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(self.fail("check (probing XADD)", e)),
            Ok(answer) => Err(FaucetError::write(
                CONNECTOR,
                format!(
                    "check: `XADD {stream} 0-0` was not refused ({answer:?}); is this a Redis \
                     server?"
                ),
                None,
            )),
        }
    }
}

fn wrong_type(key: &str, kind: &str) -> FaucetError {
    FaucetError::write(
        CONNECTOR,
        format!(
            "the key `{key}` holds a Redis {kind}, not a stream; nothing of the page was \
             written. Rename or delete that key, or change `stream`"
        ),
        None,
    )
}

/// An open [`RedisStreamsSink`]: one connection (dropped after a failure, opened again at the
/// next call), one `MULTI`/`EXEC` (or script call) per page.
struct RedisStreamsWriter<'a> {
    sink: &'a RedisStreamsSink,
    conn: Option<MultiplexedConnection>,
    /// The state key last told (fence, token); part of every message id.
    scope: String,
    /// The run's lease fence, checked by every page.
    fence: Option<u64>,
    /// The last page's entries per stream ([`SinkWriter::written_targets`]).
    written: Vec<(String, u64)>,
    /// What the last page published ([`SinkWriter::published`]).
    published: Option<PublishStats>,
    /// The source's keys of its tables, when told ([`SinkWriter::source_keys`]).
    keys: SourceKeys,
}

impl RedisStreamsWriter<'_> {
    /// The connection, opened again when a failure dropped it.
    async fn conn(&mut self) -> Result<&mut MultiplexedConnection, FaucetError> {
        if self.conn.is_none() {
            self.conn = Some(self.sink.connect().await?);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| FaucetError::write(CONNECTOR, "no connection", None))
    }

    /// Runs `cmd` on the connection; a failure drops the connection and is named by `op`.
    async fn query<T: redis::FromRedisValue>(
        &mut self,
        op: &str,
        cmd: &redis::Cmd,
    ) -> Result<T, FaucetError> {
        let answer = cmd.query_async(self.conn().await?).await;
        answer.map_err(|e| self.failed(op, e))
    }

    /// `e` as [`RedisStreamsSink::fail`] names it; drops the connection, which may hold a
    /// `WATCH` or be broken.
    fn failed(&mut self, op: &str, e: RedisError) -> FaucetError {
        self.conn = None;
        self.sink.fail(op, e)
    }

    /// Writes `messages` (and the token) as one atomic step ([`super::page`]); returns what
    /// that published (every entry awaits the one reply).
    async fn write_page(
        &mut self,
        messages: &[Message],
        token: Option<&CommitToken>,
    ) -> Result<PublishStats, FaucetError> {
        let sink = self.sink;
        let mut meter = PageMeter::start();
        let scope = sink.scope(&self.scope);
        let bookmark = token
            .map(|t| serde_json::to_string(&t.bookmark))
            .transpose()
            .map_err(|e| {
                FaucetError::write(CONNECTOR, "cannot encode the bookmark", Some(Box::new(e)))
            })?;
        let (fence_key, token_key) = (sink.fence_key(&scope), sink.token_key(&scope));
        let page = PageWrite {
            fence_key: &fence_key,
            token_key: &token_key,
            fence: self.fence,
            token: token.zip(bookmark.as_deref()).map(|(t, b)| (t.sequence, b)),
            maxlen: sink.config.maxlen,
            messages,
        };
        let tx = page.transaction();
        // Once a page, before anything of it is sent (and before a refused page's checks).
        faucet_core::fault::point(faucet_core::fault::BEFORE_COMMIT);
        meter.pending(messages.len());
        let mut verdict = None;
        let mut reconnected = false;
        for _ in 0..WATCH_ATTEMPTS {
            let watched = match page.watch(self.conn().await?).await {
                // A connection the server closed since the last page (a restart, its idle
                // `timeout`): nothing of the page was sent; once more on a new one.
                Err(e) if !reconnected && (e.is_connection_dropped() || e.is_io_error()) => {
                    reconnected = true;
                    self.conn = None;
                    page.watch(self.conn().await?).await
                }
                other => other,
            };
            let checked = watched.map_err(|e| self.failed("checking a page", e))?;
            if checked != Verdict::Written {
                verdict = Some(checked);
                break;
            }
            let committed = page.commit(self.conn().await?, &tx).await;
            if committed.map_err(|e| self.failed("writing a page", e))? {
                verdict = Some(Verdict::Written);
                break;
            }
        }
        let verdict = match verdict {
            Some(v) => v,
            None => {
                tracing::debug!(
                    streams = %sink.encoder.route(),
                    "the page's keys changed between WATCH and EXEC {WATCH_ATTEMPTS} times \
                     (another writer adds to its streams): writing it with the page script"
                );
                let conn = self.conn().await?;
                let scripted = page.scripted(conn).await;
                scripted.map_err(|e| self.failed("writing a page", e))?
            }
        };
        match verdict {
            Verdict::Written => Ok(meter.finish(messages)),
            Verdict::Fenced(newer) => Err(LeaseError::Fenced {
                key: self.scope.clone(),
                fence: self.fence.unwrap_or_default(),
                newer: newer.parse().unwrap_or_default(),
                target: format!("redis-streams {}", sink.encoder.route()),
            }
            .into()),
            Verdict::Stale(stored) => Err(FaucetError::write(
                CONNECTOR,
                format!(
                    "commit token for `{scope}` refused: {token_key} holds sequence {stored}, \
                     not below {} (a stale or concurrent writer); nothing of the page was \
                     written",
                    token.map_or(0, |t| t.sequence)
                ),
                None,
            )),
            Verdict::WrongType(key) => Err(wrong_type(&key, "value of another type")),
        }
    }
}

#[async_trait]
impl SinkWriter for RedisStreamsWriter<'_> {
    /// Adds the page's entries in one atomic step (fenced, when the writer has a fence).
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        self.written.clear();
        self.published = None;
        if page.is_empty() {
            return Ok(());
        }
        let messages = self.sink.encoder.encode(page, &self.scope, &self.keys)?;
        self.published = Some(self.write_page(&messages, None).await?);
        self.written = crate::bus::per_route(&messages);
        Ok(())
    }

    /// Keeps the source's keys: change records are keyed by them when the sink has no `key`.
    fn source_keys(&mut self, keys: &[faucet_core::keys::TableKeys]) {
        self.keys = SourceKeys::new(keys);
    }

    /// The streams the last page's entries went to, with how many each.
    fn written_targets(&self) -> &[(String, u64)] {
        &self.written
    }

    /// What the last page's atomic step added.
    fn published(&self) -> Option<PublishStats> {
        self.published
    }

    async fn write_committed(&mut self, page: &Page, commit: &Commit) -> Result<(), FaucetError> {
        let (scope, token) = (commit.scope.as_str(), &commit.token);
        self.written.clear();
        self.published = None;
        scope.clone_into(&mut self.scope);
        let messages = self.sink.encoder.encode(page, scope, &self.keys)?;
        self.published = Some(self.write_page(&messages, Some(token)).await?);
        self.written = crate::bus::per_route(&messages);
        Ok(())
    }

    /// Raises the scope's fence to `fence` (refused when it holds a larger one), or with
    /// `take_over` sets it; every later page checks it. Redis runs each `EXEC` (and script)
    /// whole, so a writer stalled mid-page holds nothing: `ttl` is not needed.
    async fn fence(&mut self, order: &Fence) -> Result<bool, FaucetError> {
        let (scope, fence, take_over) = (order.scope.as_str(), order.number, order.take_over);
        scope.clone_into(&mut self.scope);
        self.fence = Some(fence);
        if take_over {
            let key = self.sink.fence_key(&self.sink.scope(scope));
            let set = redis::cmd("SET").arg(key).arg(fence).clone();
            self.query::<()>("setting the writer fence", &set).await?;
            return Ok(true);
        }
        self.write_page(&[], None).await?;
        Ok(true)
    }

    /// With a fixed `stream`: whether it holds entries. A template's streams are not known
    /// before the records name them: `None`.
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        let Some(stream) = self.sink.encoder.route().fixed() else {
            return Ok(None);
        };
        let xlen = redis::cmd("XLEN").arg(stream).clone();
        let len: u64 = self.query("reading the stream length", &xlen).await?;
        Ok(Some(len > 0))
    }

    /// `HGET {prefix}token/<scope> sequence bookmark`.
    async fn last_committed_token(
        &mut self,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        scope.clone_into(&mut self.scope);
        let key = self.sink.token_key(&self.sink.scope(scope));
        let hmget = redis::cmd("HMGET")
            .arg(&key)
            .arg("sequence")
            .arg("bookmark")
            .clone();
        let (sequence, bookmark): (Option<String>, Option<String>) =
            self.query("reading the commit token", &hmget).await?;
        let (Some(sequence), Some(bookmark)) = (sequence, bookmark) else {
            return Ok(None);
        };
        let bad = |what: &str| {
            FaucetError::write(
                CONNECTOR,
                format!("the commit token in `{key}` has {what}; restore or delete the key"),
                None,
            )
        };
        Ok(Some(CommitToken {
            sequence: sequence
                .parse()
                .map_err(|_| bad("a sequence that is not a number"))?,
            bookmark: serde_json::from_str(&bookmark)
                .map_err(|_| bad("a bookmark that is not JSON"))?,
        }))
    }
}
