//! Named fault points for crash tests.
//!
//! A crash test arms one point in a child process through the environment:
//! `FAUCET_FAULT=<point>` aborts the process the first time the point is reached,
//! `FAUCET_FAULT=<point>:<n>` the n-th time. Aborting runs no destructor and flushes no
//! buffer, like `kill -9`. Unarmed, a point costs one load and one branch.
//!
//! The points, in the order a page passes them: [`MID_PAGE`] (a sink has written part of a
//! page), [`AFTER_WRITE`], [`AFTER_FLUSH`], [`STATE_MID_PUT`] (a file state store has written
//! and fsynced its temporary file but not renamed it), [`AFTER_STATE_PUT`].

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms a fault point.
pub const ENV: &str = "FAUCET_FAULT";
/// Inside a sink's write, after part of the page was written.
pub const MID_PAGE: &str = "mid_page";
/// After the sink accepted a page, before flush.
pub const AFTER_WRITE: &str = "after_write";
/// After the sink's flush (or atomic commit), before the bookmark is persisted.
pub const AFTER_FLUSH: &str = "after_flush";
/// Inside a file state store's put, after the temporary file is durable, before the rename.
pub const STATE_MID_PUT: &str = "state_mid_put";
/// After the bookmark is persisted, before the next page is read.
pub const AFTER_STATE_PUT: &str = "after_state_put";
/// Every point, for tests that iterate over them.
pub const ALL: [&str; 5] = [
    MID_PAGE,
    AFTER_WRITE,
    AFTER_FLUSH,
    STATE_MID_PUT,
    AFTER_STATE_PUT,
];

static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
static HITS: AtomicU64 = AtomicU64::new(0);

fn armed() -> &'static Option<(String, u64)> {
    ARMED.get_or_init(|| {
        let spec = std::env::var(ENV).ok()?;
        let (name, nth) = match spec.split_once(':') {
            Some((name, n)) => (name.to_owned(), n.trim().parse().ok()?),
            None => (spec, 1),
        };
        Some((name, nth))
    })
}

/// Aborts the process if `name` is the armed point and this is its armed hit.
#[inline]
pub fn point(name: &str) {
    if let Some((armed, nth)) = armed()
        && armed == name
        && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *nth
    {
        eprintln!("faucet: fault point `{name}` reached (hit {nth}); aborting");
        std::process::abort();
    }
}
