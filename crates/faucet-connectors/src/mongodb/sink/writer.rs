//! [`MongodbWriter`]: an open `mongodb` sink — one client, one session, one transaction per
//! page (module docs of [`super`]).

use std::time::{Duration, Instant};

use async_trait::async_trait;
use mongodb::bson::{Bson, Document, doc};
use mongodb::error::{Error as DriverError, TRANSIENT_TRANSACTION_ERROR};
use mongodb::{Client, ClientSession, Collection};

use faucet_core::delivery::{DeliveryError, LimitingSide};
use faucet_core::keys::TableKeys;
use faucet_core::state::LeaseError;
use faucet_core::{Commit, CommitToken, FaucetError, Fence, Page, SinkWriter, fault};

use super::ops::{CollectionOps, Planner};
use super::{CONNECTOR, FENCES, MongoWriteMode, MongodbSink, TOKENS};

/// How long a page that meets write conflicts (a transaction of a killed run still open on
/// the server, which ends it after `transactionLifetimeLimitSeconds`, 60 s by default) is
/// tried again.
const CONFLICT_PATIENCE: Duration = Duration::from_secs(90);

/// An open [`MongodbSink`].
pub(crate) struct MongodbWriter<'a> {
    sink: &'a MongodbSink,
    client: Client,
    session: ClientSession,
    /// Whether the server has multi-document transactions (a replica set member, `mongos`).
    transactions: bool,
    planner: Planner,
    /// The run's lease fence, checked in every page's transaction.
    fence: Option<u64>,
    /// The state key last told (fence, token).
    state_key: String,
    /// The last page's records per collection ([`SinkWriter::written_targets`]).
    written: Vec<(String, u64)>,
}

/// Whether the server behind `client` has transactions: its `hello` names a replica set, or
/// it is a `mongos` (`msg: isdbgrid`).
pub(crate) async fn has_transactions(
    sink: &MongodbSink,
    client: &Client,
) -> Result<bool, FaucetError> {
    let hello = client
        .database("admin")
        .run_command(doc! {"hello": 1})
        .await
        .map_err(|e| sink.config.connection.write_error("hello", e))?;
    Ok(hello.get_str("setName").is_ok() || hello.get_str("msg") == Ok("isdbgrid"))
}

impl<'a> MongodbWriter<'a> {
    pub(crate) async fn open(sink: &'a MongodbSink) -> Result<Self, FaucetError> {
        let conn = &sink.config.connection;
        let client = conn.client().await?;
        let transactions = has_transactions(sink, &client).await?;
        if !transactions {
            tracing::warn!(
                sink = CONNECTOR,
                server = conn.describe(),
                "the server is not a replica set member: pages are written without a \
                 transaction, commit token or writer fence (append is at-least-once)"
            );
        }
        let session = client
            .start_session()
            .await
            .map_err(|e| conn.write_error("start a session", e))?;
        let c = &sink.config;
        Ok(Self {
            sink,
            client,
            session,
            transactions,
            planner: Planner::new(
                c.collection.clone(),
                c.config.write_mode,
                c.config.key.clone(),
                c.config.sub_millisecond,
                c.route.clone(),
            ),
            fence: None,
            state_key: String::new(),
            written: Vec::new(),
        })
    }

    fn home<T: Send + Sync>(&self, name: &str) -> Collection<T> {
        self.client
            .database(&self.sink.config.home)
            .collection(name)
    }

    fn fail(&self, doing: &str, e: DriverError) -> FaucetError {
        fail(self.sink, doing, e)
    }

    /// Writes `page` (and `token`): in one transaction when the server has them, tried again
    /// on write conflicts for up to [`CONFLICT_PATIENCE`].
    async fn write_page(
        &mut self,
        page: &Page,
        token: Option<&CommitToken>,
    ) -> Result<(), FaucetError> {
        self.written.clear();
        let ops = self.planner.plan(page)?;
        let written: Vec<(String, u64)> = ops
            .iter()
            .filter(|o| o.records > 0)
            .map(|o| (o.name(), o.records))
            .collect();
        if !self.transactions {
            self.apply_plain(&ops).await?;
            self.written = written;
            return Ok(());
        }
        let started = Instant::now();
        let mut wait = Duration::from_millis(50);
        loop {
            let outcome = self.transaction(&ops, token).await;
            let Err(e) = outcome else {
                self.written = written;
                return Ok(());
            };
            // Ends the server's transaction now (its documents stay locked otherwise); an
            // error here (no transaction open any more) changes nothing.
            let _ = self.session.abort_transaction().await;
            if !is_transient(&e) || started.elapsed() > CONFLICT_PATIENCE {
                return Err(e);
            }
            tracing::warn!(
                sink = CONNECTOR,
                error = %e,
                "a page's transaction met a write conflict (another transaction holds its \
                 documents: a killed run's, until the server ends it); trying again"
            );
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }

    /// One try of a page's transaction.
    async fn transaction(
        &mut self,
        ops: &[CollectionOps],
        token: Option<&CommitToken>,
    ) -> Result<(), FaucetError> {
        let sink = self.sink;
        let scope = sink.scope(&self.state_key);
        self.session
            .start_transaction()
            .await
            .map_err(|e| fail(sink, "start a transaction", e))?;
        if let Some(fence) = self.fence {
            let fences: Collection<Document> = self.home(FENCES);
            let stored = fences
                .find_one(doc! {"_id": scope.as_str()})
                .session(&mut self.session)
                .await
                .map_err(|e| fail(sink, "read the writer fence", e))?;
            let newer = stored.as_ref().map_or(0, stored_fence);
            if newer > fence {
                return Err(self.fenced(fence, newer));
            }
            fences
                .update_one(
                    doc! {"_id": scope.as_str()},
                    doc! {"$set": {"fence": as_i64(fence)}},
                )
                .upsert(true)
                .session(&mut self.session)
                .await
                .map_err(|e| fail(sink, "write the writer fence", e))?;
        }
        if let Some(t) = token {
            let tokens: Collection<Document> = self.home(TOKENS);
            let stored = tokens
                .find_one(doc! {"_id": scope.as_str()})
                .session(&mut self.session)
                .await
                .map_err(|e| fail(sink, "read the commit token", e))?;
            if let Some(seq) = stored.as_ref().and_then(|d| d.get_i64("sequence").ok())
                && seq >= as_i64(t.sequence)
            {
                return Err(FaucetError::write(
                    CONNECTOR,
                    format!(
                        "commit token for `{scope}` refused: {}.{TOKENS} holds sequence {seq}, \
                         not below {} (a stale or concurrent writer); nothing of the page was \
                         written",
                        self.sink.config.home, t.sequence
                    ),
                    None,
                ));
            }
            let bookmark = serde_json::to_string(&t.bookmark).map_err(|e| {
                FaucetError::write(CONNECTOR, "cannot encode the bookmark", Some(Box::new(e)))
            })?;
            tokens
                .replace_one(
                    doc! {"_id": scope.as_str()},
                    doc! {"_id": scope.as_str(), "sequence": as_i64(t.sequence), "bookmark": bookmark},
                )
                .upsert(true)
                .session(&mut self.session)
                .await
                .map_err(|e| fail(sink, "write the commit token", e))?;
        }
        self.apply(ops, true).await?;
        fault::point(fault::BEFORE_COMMIT);
        self.session
            .commit_transaction()
            .await
            .map_err(|e| fail(sink, "commit the page's transaction", e))
    }

    /// Without transactions: the operations one by one.
    async fn apply_plain(&mut self, ops: &[CollectionOps]) -> Result<(), FaucetError> {
        self.apply(ops, false).await
    }

    /// The operations of a page, in the session's transaction when `in_session`.
    async fn apply(&mut self, ops: &[CollectionOps], in_session: bool) -> Result<(), FaucetError> {
        let total: usize = ops
            .iter()
            .map(|o| o.deletes.len() + o.replaces.len() + o.sets.len() + o.inserts.len())
            .sum();
        let mut done = 0_usize;
        let mut mid_page = |n: usize| {
            let before = done;
            done += n;
            if total > 1 && before < total / 2 && done >= total / 2 {
                fault::point(fault::MID_PAGE);
            }
        };
        let sink = self.sink;
        for o in ops.iter().filter(|o| !o.is_empty()) {
            let coll: Collection<Document> = self.client.database(&o.db).collection(&o.coll);
            let name = o.name();
            let fail = |doing: &str, e: DriverError| fail(sink, &format!("{doing} {name}"), e);
            macro_rules! run {
                ($action:expr) => {
                    if in_session {
                        $action.session(&mut self.session).await
                    } else {
                        $action.await
                    }
                };
            }
            if o.truncate {
                run!(coll.delete_many(doc! {})).map_err(|e| fail("empty (truncate)", e))?;
            }
            if !o.deletes.is_empty() {
                let ids: Vec<Bson> = o.deletes.clone();
                run!(coll.delete_many(doc! {"_id": {"$in": ids}}))
                    .map_err(|e| fail("delete from", e))?;
                mid_page(o.deletes.len());
            }
            // Replaces and `$set`s as `update` commands of many statements (one round trip
            // per chunk, not per document), half a page before the mid-page point.
            let statements: Vec<Document> = o
                .replaces
                .iter()
                .map(|d| {
                    let id = d.get("_id").cloned().unwrap_or(Bson::Null);
                    doc! {"q": {"_id": id}, "u": d.clone(), "upsert": true}
                })
                .chain(o.sets.iter().map(|(id, fields)| {
                    doc! {"q": {"_id": id.clone()}, "u": {"$set": fields.clone()}, "upsert": true}
                }))
                .collect();
            let db = self.client.database(&o.db);
            for chunk in chunks(&statements, total / 2) {
                let n = chunk.len();
                let command = doc! {"update": o.coll.as_str(), "updates": chunk, "ordered": true};
                let reply = run!(db.run_command(command)).map_err(|e| fail("upsert into", e))?;
                if let Ok(errors) = reply.get_array("writeErrors")
                    && let Some(Bson::Document(first)) = errors.first()
                {
                    return Err(FaucetError::write(
                        CONNECTOR,
                        format!(
                            "upsert into {name}: the server refused a document (error {}): {}; \
                             nothing of the page was committed",
                            first.get_i32("code").unwrap_or_default(),
                            first.get_str("errmsg").unwrap_or_default()
                        ),
                        None,
                    ));
                }
                mid_page(n);
            }
            if !o.inserts.is_empty() {
                let half = if total > 1 { o.inserts.len() / 2 } else { 0 };
                for part in [&o.inserts[..half], &o.inserts[half..]] {
                    if part.is_empty() {
                        continue;
                    }
                    run!(coll.insert_many(part).ordered(true))
                        .map_err(|e| fail("insert into", e))?;
                    mid_page(part.len());
                }
            }
        }
        Ok(())
    }

    fn fenced(&self, fence: u64, newer: u64) -> FaucetError {
        LeaseError::Fenced {
            key: self.state_key.clone(),
            fence,
            newer,
            target: format!("{CONNECTOR} {}", self.sink.config.config.collection),
        }
        .into()
    }
}

/// The most statements, and about the most bytes, one `update` command carries (the server
/// takes up to 100,000 statements and 16 MiB per command).
const CHUNK_STATEMENTS: usize = 1_000;
const CHUNK_BYTES: usize = 8 << 20;

/// `statements` cut into chunks of at most [`CHUNK_STATEMENTS`] and about [`CHUNK_BYTES`],
/// a chunk also ending after `split` statements (the mid-page point falls between chunks).
fn chunks(statements: &[Document], split: usize) -> Vec<Vec<Document>> {
    let mut out = Vec::new();
    let mut chunk: Vec<Document> = Vec::new();
    let mut bytes = 0;
    for (i, s) in statements.iter().enumerate() {
        bytes += mongodb::bson::to_vec(s).map_or(0, |v| v.len());
        chunk.push(s.clone());
        if chunk.len() >= CHUNK_STATEMENTS || bytes >= CHUNK_BYTES || i + 1 == split {
            out.push(std::mem::take(&mut chunk));
            bytes = 0;
        }
    }
    if !chunk.is_empty() {
        out.push(chunk);
    }
    out
}

/// A driver error of `sink`'s while `doing`, as a [`FaucetError`].
fn fail(sink: &MongodbSink, doing: &str, e: DriverError) -> FaucetError {
    sink.config.connection.write_error(doing, e)
}

/// The fence a `_faucet_fences` document holds (0 when none).
fn stored_fence(d: &Document) -> u64 {
    d.get_i64("fence")
        .ok()
        .and_then(|f| u64::try_from(f).ok())
        .unwrap_or(0)
}

/// A sequence or fence as BSON's Int64 (they stay far below 2^63).
fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Whether `e` is a driver error labelled `TransientTransactionError` (a write conflict:
/// the whole transaction may run again).
fn is_transient(e: &FaucetError) -> bool {
    let source = match e {
        FaucetError::Write {
            source: Some(s), ..
        }
        | FaucetError::Connect {
            source: Some(s), ..
        } => s,
        _ => return false,
    };
    source
        .downcast_ref::<DriverError>()
        .is_some_and(|d| d.contains_label(TRANSIENT_TRANSACTION_ERROR))
}

#[async_trait]
impl SinkWriter for MongodbWriter<'_> {
    /// Writes the page (in one transaction when the server has them, fenced when the writer
    /// has a fence).
    async fn write(&mut self, page: &Page) -> Result<(), FaucetError> {
        if page.is_empty() {
            self.written.clear();
            return Ok(());
        }
        self.write_page(page, None).await
    }

    /// The page and its token in one transaction. Without transactions (a standalone server)
    /// an upsert sink writes the page by key and keeps no token; an append sink never gets
    /// here ([`SinkWriter::last_committed_token`] refused).
    async fn write_committed(&mut self, page: &Page, commit: &Commit) -> Result<(), FaucetError> {
        let (scope, token) = (commit.scope.as_str(), &commit.token);
        scope.clone_into(&mut self.state_key);
        self.write_page(page, self.transactions.then_some(token))
            .await
    }

    /// Raises the scope's fence (refused when it holds a larger one, unless `take_over`),
    /// recording this writer's session id beside it, after ending the session of the
    /// previous writer recorded there (`killSessions`: a killed run's transaction would hold
    /// its documents until the server's transaction lifetime ends). Without transactions:
    /// no fence (`Ok(false)`).
    async fn fence(&mut self, order: &Fence) -> Result<bool, FaucetError> {
        let (scope, fence, take_over) = (order.scope.as_str(), order.number, order.take_over);
        scope.clone_into(&mut self.state_key);
        if !self.transactions {
            return Ok(false);
        }
        let key = self.sink.scope(scope);
        let fences: Collection<Document> = self.home(FENCES);
        let stored = fences
            .find_one(doc! {"_id": key.as_str()})
            .await
            .map_err(|e| self.fail("read the writer fence", e))?;
        let newer = stored.as_ref().map_or(0, stored_fence);
        if newer > fence && !take_over {
            return Err(self.fenced(fence, newer));
        }
        let mine = self.session.id().clone();
        if let Some(old) = stored.as_ref().and_then(|d| d.get_document("lsid").ok())
            && *old != mine
            && let Err(e) = self
                .client
                .database("admin")
                .run_command(doc! {"killSessions": [old.clone()]})
                .await
        {
            tracing::warn!(
                sink = CONNECTOR,
                error = %self.fail("killSessions", e),
                "cannot end the previous writer's session; a transaction it left open holds \
                 its documents until the server ends it"
            );
        }
        fences
            .update_one(
                doc! {"_id": key.as_str()},
                doc! {"$set": {"fence": as_i64(fence), "lsid": mine}},
            )
            .upsert(true)
            .await
            .map_err(|e| self.fail("write the writer fence", e))?;
        self.fence = Some(fence);
        Ok(true)
    }

    /// With `append` into a fixed `collection`: whether it holds a document. Otherwise
    /// `None` (an upsert absorbs a replay; a template's collections are not known yet).
    async fn holds_data(&mut self) -> Result<Option<bool>, FaucetError> {
        let c = &self.sink.config;
        let Some(name) = c.collection.fixed() else {
            return Ok(None);
        };
        if c.config.write_mode != MongoWriteMode::Append {
            return Ok(None);
        }
        let Some((db, coll)) = name.split_once('.') else {
            return Ok(None);
        };
        let one = self
            .client
            .database(db)
            .collection::<Document>(coll)
            .find_one(doc! {})
            .await
            .map_err(|e| self.fail(&format!("read {name}"), e))?;
        Ok(Some(one.is_some()))
    }

    /// The last page's records per collection (`db.coll`), in the order first met.
    fn written_targets(&self) -> &[(String, u64)] {
        &self.written
    }

    fn source_keys(&mut self, keys: &[TableKeys]) {
        self.planner.source_keys = keys.to_vec();
    }

    /// The token in `_faucet_commit_tokens` under the scope. Without transactions: an
    /// `append` sink answers the unsatisfiable-delivery error (a run that asked for
    /// at-least-once continues in plain writes); an `upsert` sink has no token (`None`) and
    /// stays effectively-once by its key.
    async fn last_committed_token(
        &mut self,
        scope: &str,
    ) -> Result<Option<CommitToken>, FaucetError> {
        scope.clone_into(&mut self.state_key);
        if !self.transactions {
            if self.sink.config.config.write_mode == MongoWriteMode::Upsert {
                return Ok(None);
            }
            return Err(DeliveryError::Unsatisfiable {
                side: LimitingSide::Sink,
                connector: CONNECTOR.to_owned(),
                reason: format!(
                    "cannot commit a page with its commit token: {} is not a replica set \
                     member, so it has no multi-document transactions",
                    self.sink.config.connection.describe()
                ),
                fix: "run the server as a replica set (one node is enough: `--replSet rs0` \
                      and `rs.initiate()`), use `write_mode: upsert` with a key, or request \
                      `delivery: at_least_once`"
                    .to_owned(),
            }
            .into());
        }
        let key = self.sink.scope(scope);
        let tokens: Collection<Document> = self.home(TOKENS);
        let Some(d) = tokens
            .find_one(doc! {"_id": key.as_str()})
            .await
            .map_err(|e| self.fail("read the commit token", e))?
        else {
            return Ok(None);
        };
        let bad = |what: &str| {
            FaucetError::write(
                CONNECTOR,
                format!(
                    "the commit token `{key}` in {}.{TOKENS} has {what}; restore or delete \
                     that document",
                    self.sink.config.home
                ),
                None,
            )
        };
        let sequence = d
            .get_i64("sequence")
            .ok()
            .and_then(|s| u64::try_from(s).ok())
            .ok_or_else(|| bad("no sequence"))?;
        let bookmark = d
            .get_str("bookmark")
            .ok()
            .and_then(|b| serde_json::from_str(b).ok())
            .ok_or_else(|| bad("a bookmark that is not JSON text"))?;
        Ok(Some(CommitToken { sequence, bookmark }))
    }
}
