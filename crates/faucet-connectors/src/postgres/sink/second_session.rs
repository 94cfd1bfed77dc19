//! The writer's second session on the target: a snapshot page's plain COPY
//! ([`super::snapshot_copy`]) is split between the page's session and this one, so two
//! server backends parse the page's rows at once. Parsing the rows is most of what a copy
//! into PostgreSQL costs the target (a `pg_dump | psql` floor spends its time there), and one
//! backend uses one core; in `bench/replicate_db.sh` two sessions copied about 30 % more rows
//! per second than one (its README paragraph gives the runs).
//!
//! Per page, after the page's session began the page's transaction, checked the writer fence
//! (a `FOR SHARE` lock on the fence row, read with the `BEGIN`,
//! [`super::fence::begin_checked`]) and set the savepoint:
//!
//! 1. the rows are parted in two by their key's hash (a key twice in a page lands in one
//!    part, so the two sessions never wait on each other's uncommitted key);
//! 2. while the page's session copies the first part, the second session begins its own
//!    transaction and, when the writer has a fence, takes `FOR SHARE NOWAIT` on the same
//!    fence row, which must hold the writer's fence (both sessions then hold the row; a newer
//!    writer's raise waits for both); then it copies the second part. Anything else (the row
//!    locked for a raise, another fence, no session to be had) declines: the page's session
//!    copies the second part after the first, as if there were no second session;
//! 3. the second session commits **first**, then the page's transaction with the commit
//!    token (the atomic watermark): the token never vouches for a row that is not
//!    committed. A crash between the two leaves a part committed without its token; the run
//!    delivers the page again, the target then holds rows, so the page is upserted and the
//!    replay absorbed ([`super::snapshot_copy`]'s rule for a target holding rows). The
//!    second session commits while it holds the fence row with the writer's fence, so no
//!    newer writer can have written in between. Its `COMMIT` does not wait for the WAL flush
//!    (`synchronous_commit = off` on that session only): the page's `COMMIT` comes later in
//!    the WAL, and PostgreSQL flushes the WAL in order, so the page's durable `COMMIT` makes
//!    the part durable too; a server crash before it loses both, and the page is delivered
//!    again;
//! 4. a failure of either part rolls the second session back and the page's session to its
//!    savepoint: a key the target already holds upserts the page (as the plain COPY's key
//!    conflict does), a bad value is the page's error naming its page row, a lost second
//!    session is dropped and the page's session copies its part. A `COMMIT` of the second
//!    session that fails leaves its outcome unknown: the page fails (and is delivered again).
//!
//! The session is the sink's, opened at the first page that uses it and kept; the writer's
//! lease ttl is its `idle_in_transaction_session_timeout` too, so a writer stopped mid-page
//! holds the fence row no longer on this session than on its page's.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use sqlx::Executor as _;
use sqlx::postgres::PgConnection;
use tokio::sync::{Mutex, MutexGuard};

use faucet_core::Value;

use super::fence::{self, RowLock};
use super::nul::NulBytes;
use super::write::{Buffers, CopyFailure, copy_in};
use crate::postgres::config::CONNECTOR;
use crate::postgres::connection::PostgresUrl;
use crate::postgres::ident::TableName;
use crate::sql::sink::fence::WriterFence;

/// Pages of fewer snapshot rows are copied by the page's session alone: the second
/// session's five round trips (`BEGIN`, the fence read, the COPY's start and end, `COMMIT`)
/// would cost more than the parsing they share.
pub(crate) const MIN_ROWS: usize = 64;

/// The sink's second session (see the module); clones share it, so every writer and routed
/// target of one sink has one, used by one page at a time.
#[derive(Clone)]
pub(crate) struct SecondSession {
    inner: Arc<Inner>,
}

struct Inner {
    connection: PostgresUrl,
    /// The fence table the writer's fence row is in.
    fences: TableName,
    settings: StdMutex<Settings>,
    session: Mutex<Session>,
}

/// What the writer told the sink: its lease ttl and fence.
#[derive(Default, Clone)]
struct Settings {
    ttl: Option<Duration>,
    fence: Option<WriterFence>,
}

#[derive(Default)]
struct Session {
    conn: Option<PgConnection>,
    bufs: Buffers,
    /// The session could not be opened: the sink goes on with one session.
    unavailable: bool,
}

impl SecondSession {
    /// The second session of a sink writing through `connection`, whose writer fences are in
    /// `fences` (nothing is opened yet).
    pub(crate) fn new(connection: PostgresUrl, fences: TableName) -> Self {
        Self {
            inner: Arc::new(Inner {
                connection,
                fences,
                settings: StdMutex::new(Settings::default()),
                session: Mutex::new(Session::default()),
            }),
        }
    }

    /// The writer's lease ttl: the session's `idle_in_transaction_session_timeout`.
    pub(crate) fn set_ttl(&self, ttl: Duration) {
        if let Ok(mut s) = self.inner.settings.lock() {
            s.ttl = Some(ttl);
        }
    }

    /// The writer's fence, which the fence row must hold for the session to write.
    pub(crate) fn set_fence(&self, writer: &WriterFence) {
        if let Ok(mut s) = self.inner.settings.lock() {
            s.fence = Some(writer.clone());
        }
    }

    /// Takes the session for one page and begins its transaction, fenced as the module says;
    /// `None` declines (busy with another writer's page, cannot be opened, the fence row not
    /// shared with the writer's fence).
    pub(crate) async fn begin(&self) -> Option<Claimed<'_>> {
        let mut session = self.inner.session.try_lock().ok()?;
        if session.unavailable {
            return None;
        }
        let settings = self.inner.settings.lock().ok()?.clone();
        if session.conn.is_none() {
            match self.open(&settings).await {
                Ok(conn) => session.conn = Some(conn),
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "cannot open a second session on the target: snapshot pages are \
                         copied by one session"
                    );
                    session.unavailable = true;
                    return None;
                }
            }
        }
        let mut claimed = Claimed {
            session,
            open: true,
        };
        match claimed
            .fenced(&self.inner.fences, settings.fence.as_ref())
            .await
        {
            Ok(true) => Some(claimed),
            Ok(false) => {
                claimed.rollback().await;
                None
            }
            Err(e) => {
                tracing::debug!(error = %e, "the second session declined the page");
                claimed.rollback().await;
                None
            }
        }
    }

    async fn open(&self, settings: &Settings) -> Result<PgConnection, faucet_core::FaucetError> {
        let mut conn = self.inner.connection.open_session(CONNECTOR).await?;
        // Its COMMIT need not wait for the WAL flush: the page's COMMIT, later in the WAL,
        // waits for it (see the module).
        conn.execute("SET synchronous_commit = off")
            .await
            .map_err(|e| {
                faucet_core::FaucetError::connect(
                    CONNECTOR,
                    "cannot set synchronous_commit on the second session",
                    Some(Box::new(e)),
                )
            })?;
        if let Some(ttl) = settings.ttl {
            fence::abort_stalled_pages_after(&mut conn, ttl).await?;
        }
        Ok(conn)
    }
}

/// The second session, taken for one page with its transaction open. Dropped without
/// [`Claimed::commit`] or [`Claimed::rollback`] (the page's future cancelled), it closes the
/// connection, so the server rolls the transaction back.
pub(crate) struct Claimed<'s> {
    session: MutexGuard<'s, Session>,
    open: bool,
}

impl Claimed<'_> {
    /// `BEGIN`, then whether the fence row holds `writer`'s fence under a shared lock (no
    /// fence: nothing to check).
    async fn fenced(
        &mut self,
        fences: &TableName,
        writer: Option<&WriterFence>,
    ) -> Result<bool, sqlx::Error> {
        let conn = self.conn()?;
        conn.execute("BEGIN").await?;
        let Some(w) = writer else {
            return Ok(true);
        };
        let held = fence::read(conn, fences, &w.scope, RowLock::ShareNoWait).await?;
        Ok(held.is_some_and(|f| u64::try_from(f).is_ok_and(|f| f == w.fence)))
    }

    fn conn(&mut self) -> Result<&mut PgConnection, sqlx::Error> {
        self.session.conn.as_mut().ok_or(sqlx::Error::PoolClosed)
    }

    /// Copies `rows` into `into` (`cols`: its quoted column list) in the session's
    /// transaction ([`copy_in`]).
    pub(crate) async fn copy<'v, R, I>(
        &mut self,
        into: &str,
        cols: &str,
        rows: R,
        nul: NulBytes,
    ) -> Result<u64, CopyFailure>
    where
        R: Iterator<Item = I> + Send,
        I: Iterator<Item = &'v Value> + Send,
    {
        let Session { conn, bufs, .. } = &mut *self.session;
        let Some(conn) = conn.as_mut() else {
            return Err(CopyFailure::Sql(sqlx::Error::PoolClosed));
        };
        copy_in(conn, into, cols, rows, nul, bufs).await
    }

    /// Commits the session's part of the page.
    ///
    /// # Errors
    /// The server's error; the session is dropped (whether the part committed is unknown
    /// when it was lost).
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        let result = match self.conn() {
            Ok(conn) => conn.execute("COMMIT").await.map(|_| ()),
            Err(e) => Err(e),
        };
        self.open = false;
        if result.is_err() {
            self.session.conn = None;
        }
        result
    }

    /// Rolls the session's part back; a session that cannot be rolled back is dropped.
    pub(crate) async fn rollback(mut self) {
        let rolled = match self.conn() {
            Ok(conn) => conn.execute("ROLLBACK").await.is_ok(),
            Err(_) => false,
        };
        self.open = false;
        if !rolled {
            self.session.conn = None;
        }
    }

    /// Drops the session (lost): the next page opens a new one.
    pub(crate) fn drop_session(mut self) {
        self.open = false;
        self.session.conn = None;
    }
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        if self.open {
            self.session.conn = None;
        }
    }
}
