//! How one page is written: its entries, the commit token and the writer-fence check as one
//! atomic step, by either of two means that write the same keys and refuse the same pages.
//!
//! * **Watched** (first): `WATCH` the fence key, the token key and the page's stream keys,
//!   read them (`GET` the fence, `HGET` the token's `sequence`, `TYPE` each stream) and check
//!   them here; then one `MULTI` / `EXEC` of `SET` fence, the `XADD`s and `HSET` token. The
//!   server runs `EXEC` only if no watched key changed since `WATCH` (a newer writer's
//!   fence, another token, another type at a stream key), else it answers nil and writes
//!   nothing. Native `XADD`s inside `EXEC` take about half the server's time the same
//!   entries take as `redis.call`s of a script (16 ms against 34 ms for 10,000 entries on
//!   Redis 7.0, `INFO commandstats`).
//! * **Script** (when `EXEC` was refused [`WATCH_ATTEMPTS`] times in a row — another
//!   writer adds entries to the same stream between this writer's `WATCH` and its `EXEC`):
//!   the Lua script of [`super::script`], which Redis runs as one step whatever else writes.
//!
//! `WATCH` lives on a connection: the writer's connection is a plain multiplexed one that
//! never reconnects by itself (a reconnection between `WATCH` and `EXEC` would run the
//! transaction unwatched); the writer drops it after any failure and opens another for the
//! next call. A connection the server closed between pages (a restart, its idle `timeout`)
//! fails the `WATCH` step, which writes nothing: that step is tried once more on a new
//! connection.

use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};

use super::script::WRITE_PAGE;
use crate::bus::Message;

/// How many times a page's `EXEC` may be refused (a watched key changed) before the page
/// goes through the script.
pub(crate) const WATCH_ATTEMPTS: usize = 2;

/// What a page's checks found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Written.
    Written,
    /// The fence key holds a larger fence (its value).
    Fenced(String),
    /// The token's sequence is not below the page's (the stored sequence).
    Stale(String),
    /// A stream key holds another type (the key).
    WrongType(String),
}

/// One page to write: the keys, the checks' inputs and the entries.
pub(crate) struct PageWrite<'a> {
    /// `{prefix}fence/<scope>`.
    pub fence_key: &'a str,
    /// `{prefix}token/<scope>`.
    pub token_key: &'a str,
    /// The writer's fence, when it has one: refused below the stored one, then stored.
    pub fence: Option<u64>,
    /// The commit token's sequence and bookmark (JSON): refused unless above the stored
    /// sequence, then stored.
    pub token: Option<(u64, &'a str)>,
    /// `MAXLEN ~ n` of every `XADD`.
    pub maxlen: Option<u64>,
    /// The entries, in order.
    pub messages: &'a [Message],
}

/// The fields of `m`'s entry, in order: `key` (with `key:`), `value`, then the headers.
fn fields(m: &Message) -> impl Iterator<Item = (&'static str, &[u8])> + '_ {
    m.key
        .as_deref()
        .map(|k| ("key", k))
        .into_iter()
        .chain(std::iter::once(("value", m.value.as_slice())))
        .chain(m.headers())
}

impl PageWrite<'_> {
    /// The page's `MULTI` / `EXEC`: `SET` fence, the `XADD`s, `HSET` token (built before
    /// anything is sent; the [`MID_PAGE`](faucet_core::fault::MID_PAGE) fault point fires
    /// half-way).
    pub(crate) fn transaction(&self) -> redis::Pipeline {
        let mut tx = redis::pipe();
        tx.atomic();
        if let Some(fence) = self.fence {
            tx.cmd("SET").arg(self.fence_key).arg(fence).ignore();
        }
        let half = self.messages.len() / 2;
        for (i, m) in self.messages.iter().enumerate() {
            if i == half && i > 0 {
                faucet_core::fault::point(faucet_core::fault::MID_PAGE);
            }
            let xadd = tx.cmd("XADD").arg(&m.route);
            if let Some(n) = self.maxlen {
                xadd.arg("MAXLEN").arg("~").arg(n);
            }
            xadd.arg("*");
            for (name, value) in fields(m) {
                xadd.arg(name).arg(value);
            }
            xadd.ignore();
        }
        if let Some((sequence, bookmark)) = self.token {
            tx.cmd("HSET")
                .arg(self.token_key)
                .arg("sequence")
                .arg(sequence)
                .arg("bookmark")
                .arg(bookmark)
                .ignore();
        }
        tx
    }

    /// `WATCH`es the page's keys, reads them and checks them. When the checks pass
    /// ([`Verdict::Written`]) the keys stay watched for [`PageWrite::commit`]; else the
    /// `WATCH` is dropped. Writes nothing, so it may be tried again on a new connection.
    ///
    /// # Errors
    /// The server's or the connection's error; the connection may then hold a `WATCH` and
    /// must not be used again.
    pub(crate) async fn watch(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> Result<Verdict, RedisError> {
        let streams: Vec<String> = crate::bus::per_route(self.messages)
            .into_iter()
            .map(|(route, _)| route)
            .collect();
        let mut read = redis::pipe();
        read.cmd("WATCH")
            .arg(self.fence_key)
            .arg(self.token_key)
            .arg(&streams)
            .ignore();
        read.cmd("GET").arg(self.fence_key);
        read.cmd("HGET").arg(self.token_key).arg("sequence");
        for s in &streams {
            read.cmd("TYPE").arg(s);
        }
        let found: Vec<Value> = read.query_async(conn).await?;
        let text = |v: Option<&Value>| -> Option<String> {
            v.and_then(|v| redis::from_redis_value::<Option<String>>(v).ok().flatten())
        };
        let verdict = self.check(
            text(found.first()).as_deref(),
            text(found.get(1)).as_deref(),
            streams
                .iter()
                .zip(found.iter().skip(2))
                .map(|(s, t)| (s.as_str(), text(Some(t)).unwrap_or_default())),
        );
        if verdict != Verdict::Written {
            redis::cmd("UNWATCH").query_async::<()>(conn).await?;
        }
        Ok(verdict)
    }

    /// Sends `tx` ([`PageWrite::transaction`]) after a [`PageWrite::watch`] that passed:
    /// whether the server ran its `EXEC` (`false`: a watched key changed, nothing written).
    ///
    /// # Errors
    /// The connection's error (whether `EXEC` ran is then unknown); the server's error for
    /// the transaction (nothing written when it refused a queued command) or for one of its
    /// commands (Redis runs the others: the config's checks keep every command of a page
    /// valid — a stream key of another type is refused by the `WATCH` step, a `maxlen` Redis
    /// would not take by `validate`).
    pub(crate) async fn commit(
        &self,
        conn: &mut MultiplexedConnection,
        tx: &redis::Pipeline,
    ) -> Result<bool, RedisError> {
        let done: Value = tx.query_async(conn).await?;
        Ok(done != Value::Nil)
    }

    /// The checks of the module docs over what was read: the stored fence, the stored
    /// sequence, each stream key's type. A value that is not a number refuses the page.
    fn check<'k>(
        &self,
        held: Option<&str>,
        stored: Option<&str>,
        types: impl Iterator<Item = (&'k str, String)>,
    ) -> Verdict {
        let number = |stored: &str| stored.parse::<u64>().ok();
        if let (Some(fence), Some(held)) = (self.fence, held)
            && number(held).is_none_or(|h| h > fence)
        {
            return Verdict::Fenced(held.to_owned());
        }
        if let (Some((sequence, _)), Some(stored)) = (self.token, stored)
            && number(stored).is_none_or(|s| s >= sequence)
        {
            return Verdict::Stale(stored.to_owned());
        }
        for (stream, kind) in types {
            if kind != "none" && kind != "stream" {
                return Verdict::WrongType(stream.to_owned());
            }
        }
        Verdict::Written
    }

    /// Writes the page with the script (see the module docs).
    ///
    /// # Errors
    /// The server's or the connection's error.
    pub(crate) async fn scripted(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> Result<Verdict, RedisError> {
        let script = redis::Script::new(WRITE_PAGE);
        let mut inv = script.prepare_invoke();
        inv.key(self.fence_key).key(self.token_key);
        inv.arg(self.fence.map(|f| f.to_string()).unwrap_or_default());
        match self.token {
            Some((sequence, bookmark)) => inv.arg(sequence).arg(bookmark),
            None => inv.arg("").arg(""),
        };
        inv.arg(self.maxlen.map(|n| n.to_string()).unwrap_or_default());
        for m in self.messages {
            inv.key(&m.route);
            inv.arg(fields(m).count());
            for (name, value) in fields(m) {
                inv.arg(name).arg(value);
            }
        }
        let (status, detail): (String, String) = inv.invoke_async(conn).await?;
        Ok(match status.as_str() {
            "ok" => Verdict::Written,
            "fenced" => Verdict::Fenced(detail),
            "stale" => Verdict::Stale(detail),
            "wrongtype" => Verdict::WrongType(detail),
            other => {
                return Err(RedisError::from((
                    redis::ErrorKind::ResponseError,
                    "the page script answered",
                    other.to_owned(),
                )));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(fence: Option<u64>, token: Option<(u64, &'static str)>) -> PageWrite<'static> {
        PageWrite {
            fence_key: "f",
            token_key: "t",
            fence,
            token,
            maxlen: None,
            messages: &[],
        }
    }

    #[test]
    fn checks_refuse_as_the_script_does() {
        let none = || std::iter::empty();
        assert_eq!(
            page(Some(5), None).check(Some("5"), None, none()),
            Verdict::Written
        );
        assert_eq!(
            page(Some(5), None).check(Some("4"), None, none()),
            Verdict::Written
        );
        assert_eq!(
            page(Some(5), None).check(Some("6"), None, none()),
            Verdict::Fenced("6".into())
        );
        assert_eq!(
            page(Some(5), None).check(Some("x"), None, none()),
            Verdict::Fenced("x".into())
        );
        assert_eq!(
            page(None, None).check(Some("9"), None, none()),
            Verdict::Written
        );
        let token = Some((7, "{}"));
        assert_eq!(
            page(None, token).check(None, Some("6"), none()),
            Verdict::Written
        );
        assert_eq!(
            page(None, token).check(None, Some("7"), none()),
            Verdict::Stale("7".into())
        );
        assert_eq!(
            page(None, token).check(None, None, none()),
            Verdict::Written
        );
        let types = [("a", "stream".to_owned()), ("b", "none".to_owned())];
        assert_eq!(
            page(None, None).check(None, None, types.into_iter()),
            Verdict::Written
        );
        let types = [("a", "stream".to_owned()), ("b", "hash".to_owned())];
        assert_eq!(
            page(None, None).check(None, None, types.into_iter()),
            Verdict::WrongType("b".into())
        );
    }
}
