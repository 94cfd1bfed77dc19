//! Redis: the `redis-streams` sink, [`RedisStreamsSink`].
//!
//! * Each record is one entry (`XADD <stream> [MAXLEN ~ n] * …`) of the stream its
//!   `stream` template names for the record's source table, with the fields of the bus
//!   message ([`crate::bus::message`]): `key` (with `key:`), `value`, `faucet-op`,
//!   `faucet-table`, `faucet-position`, `faucet-id`. Entry ids are Redis's own (`*`), so
//!   entries keep the order they were written in.
//! * A page is one atomic step (its `page` module): one `MULTI`/`EXEC` under a `WATCH` of its
//!   keys, or — when another writer keeps changing them — one Lua script call (its `script`
//!   module). Either way the page's entries, its commit token (`{prefix}token/<scope>`, a
//!   hash of `sequence` and `bookmark`) and the writer-fence check (`{prefix}fence/<scope>`)
//!   are written together or not at all. That is an atomic watermark: effectively-once with
//!   a source that replays deterministically and a durable state store. The scope is
//!   `<state key> -> <stream template>`.
//! * A zombie writer (a run that stalled past its lease while a newer run took over) is
//!   refused at its next page, which finds a larger fence (or a changed fence key at its
//!   `EXEC`), with [`faucet_core::state::LeaseError::Fenced`]; nothing of that page is
//!   written.
//! * Durability is Redis's: an entry is acknowledged once in the server's memory; with
//!   `appendonly yes` it survives a restart, with `appendfsync always` also a power loss.
//!   `open` and `faucet doctor` warn when AOF is off.
//! * Redis Cluster: a page's keys must share a hash slot (a hash tag in `stream` and
//!   `prefix`), or the server refuses the page (`CROSSSLOT`).
//! * Fault points: [`faucet_core::fault::MID_PAGE`] fires once half a page's entries are in
//!   its transaction, [`faucet_core::fault::BEFORE_COMMIT`] once the transaction is built,
//!   before anything of the page is sent (at either, nothing of it has reached Redis).

mod config;
mod page;
mod script;
mod sink;

pub use config::{DEFAULT_PREFIX, RedisStreamsSinkConfig, ValidatedRedisStreamsConfig};
pub use sink::{CONNECTOR, RedisStreamsSink};

use ::redis::{ConnectionAddr, ConnectionInfo};

/// `redis://[user@]host:port/db` (`rediss://` over TLS, `redis+unix://` on a socket), without
/// the password: how the `redis-streams` sink and the Redis state store (`faucet-state-redis`)
/// name a server in messages.
pub fn describe_server(info: &ConnectionInfo) -> String {
    let user = info
        .redis
        .username
        .as_deref()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let scheme = match info.addr {
        ConnectionAddr::Tcp(..) => "redis",
        ConnectionAddr::TcpTls { .. } => "rediss",
        ConnectionAddr::Unix(_) => "redis+unix",
    };
    format!("{scheme}://{user}{}/{}", info.addr, info.redis.db)
}
