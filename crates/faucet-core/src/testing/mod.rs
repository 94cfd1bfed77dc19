//! Test support (feature `testing`): in-memory doubles and the conformance battery every
//! connector calls from its tests.
//!
//! * [`doubles`]: [`VecSource`] (a deterministic source over given records),
//!   [`MemorySink`] (a sink that records what is durable, with configurable capabilities),
//!   and a [`CrashSwitch`] that makes both, and [`CrashingStateStore`], behave as if the
//!   process died at a chosen operation — for in-process crash simulation (property tests);
//! * [`pages`]: pages of change records for sink tests ([`change_page`]);
//! * [`conformance`]: checks a connector must pass (strict config, bounded pages, bookmark
//!   round trip, idempotent replay for keyed and atomic sinks, truthful guarantees, errors
//!   not panics, cancellation flushes, state store contract). Each returns
//!   `Err(ConformanceError)` saying what broke; faucet-core's own tests prove each can fail.

pub mod conformance;
pub mod doubles;
pub mod pages;

pub use conformance::ConformanceError;

/// Reads `source` from `from` to its end in pages of `batch_size`: every page, in order.
///
/// # Errors
/// The first error of `open` or `next_page`.
pub async fn read_pages(
    source: &dyn crate::source::Source,
    from: Option<crate::page::Bookmark>,
    batch_size: usize,
) -> Result<Vec<crate::page::Page>, crate::FaucetError> {
    let options = crate::source::ReadOptions {
        batch_size,
        ..crate::source::ReadOptions::default()
    };
    let mut stream = source.open(from, options).await?;
    let mut pages = Vec::new();
    while let Some(page) = stream.next_page().await? {
        pages.push(page);
    }
    Ok(pages)
}

/// `err`'s Display and Debug forms followed by those of every error in its
/// [`source`](std::error::Error::source) chain, joined by ` | ` — everything a user could see
/// printed, for tests that check a secret (a password in a URL) never shows.
pub fn everything_printed(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = format!("{err} | {err:?}");
    let mut source = err.source();
    while let Some(s) = source {
        out.push_str(&format!(" | {s} | {s:?}"));
        source = s.source();
    }
    out
}
/// The field a [`crate::FaucetError::Config`] names (`tables[1]`, `pipeline.sink.key`), for
/// tests that check an error points at the right place.
///
/// # Panics
/// When `e` is another kind of error: the test expected a config error.
pub fn config_field(e: crate::FaucetError) -> String {
    match e {
        crate::FaucetError::Config { field, .. } => field,
        other => panic!("expected a config error, got {other}"),
    }
}

pub use doubles::{CrashSwitch, CrashingStateStore, MemorySink, PageGate, SinkLog, VecSource};
pub use pages::{ChangeRow, change_page, keyed_change_page, keys_of_a_and_b};

/// The bookmark of a state entry as the run loop stores it: `{"bookmark": B, "sink": "…"}`
/// (a sink that names its target) gives `B`; a bare bookmark is itself.
pub fn stored_bookmark(entry: serde_json::Value) -> crate::page::Bookmark {
    crate::pipeline::stored_bookmark(entry)
}
