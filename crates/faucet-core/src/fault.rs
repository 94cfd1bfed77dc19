//! Named fault points for crash tests.
//!
//! A crash test arms one point in a child process through the environment:
//! `FAUCET_FAULT=<point>` aborts the process the first time the point is reached,
//! `FAUCET_FAULT=<point>:<n>` the n-th time. Aborting runs no destructor and flushes no
//! buffer, like `kill -9`. Unarmed, a point costs one load and one branch.
//!
//! `FAUCET_FAULT=<point>:<n>:stop` instead **stops** the process there (SIGSTOP, sent to
//! itself by `kill -STOP <pid>`, so the stop has taken effect before the point returns):
//! every thread freezes, as in a long stall or a partition, until the test sends SIGCONT;
//! then the process carries on from the point as if nothing happened. Zombie-writer tests
//! (`faucet-cli/tests/zombie_fence.rs`) stop a run past its lease this way at an exact step
//! of the page cycle. The first line printed on stderr before stopping is
//! ``faucet: fault point `<point>` reached (hit <n>); stopping (SIGSTOP)``.
//!
//! The points, in the order a page passes them: [`BEFORE_WRITE`] (the page is read and the
//! lease checked, nothing written), [`MID_PAGE`] (a sink has written part of a page),
//! [`BEFORE_COMMIT`] (a SQL sink — `postgres`, `mysql` — wrote the page's rows, and token,
//! inside its transaction, and has not sent `COMMIT`), [`AFTER_WRITE`], [`AFTER_FLUSH`],
//! [`STATE_MID_PUT`] (a file state store has written and fsynced its temporary file but not
//! renamed it), [`AFTER_STATE_PUT`]. [`ALL`] lists the points every sink passes, which the
//! crash tests abort at; [`BEFORE_WRITE`] and [`BEFORE_COMMIT`] are not in it (the second is
//! the SQL sinks' only: [`SQL_SINK`] adds it).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms a fault point.
pub const ENV: &str = "FAUCET_FAULT";
/// In the run loop after the page was read and the lease checked, just before the sink is
/// handed the page: a process stopped here wakes up holding a page it believes it may write.
pub const BEFORE_WRITE: &str = "before_write";
/// Inside a SQL sink's page transaction (`postgres`, `mysql`), after its statements (fence
/// check, rows, commit token), before `COMMIT`.
pub const BEFORE_COMMIT: &str = "before_commit";
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
/// The points a SQL sink's run passes: [`ALL`] and [`BEFORE_COMMIT`].
pub const SQL_SINK: [&str; 6] = [
    MID_PAGE,
    BEFORE_COMMIT,
    AFTER_WRITE,
    AFTER_FLUSH,
    STATE_MID_PUT,
    AFTER_STATE_PUT,
];

/// What an armed point does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// `abort()`, like `kill -9`.
    Abort,
    /// SIGSTOP, until a SIGCONT.
    Stop,
}

/// The armed point: its name, the hit that fires, and what happens then.
type Armed = (String, u64, Action);

static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
static HITS: AtomicU64 = AtomicU64::new(0);

/// Parses `FAUCET_FAULT`'s value: `<point>`, `<point>:<n>`, `<point>:<n>:stop` (`abort` is
/// the default action). Anything else arms nothing.
fn parse(spec: &str) -> Option<Armed> {
    let mut parts = spec.split(':');
    let name = parts.next()?.trim().to_owned();
    let nth = match parts.next() {
        Some(n) => n.trim().parse().ok()?,
        None => 1,
    };
    let action = match parts.next().map(str::trim) {
        None | Some("abort") => Action::Abort,
        Some("stop") => Action::Stop,
        Some(_) => return None,
    };
    if parts.next().is_some() || name.is_empty() {
        return None;
    }
    Some((name, nth, action))
}

fn armed() -> &'static Option<Armed> {
    ARMED.get_or_init(|| parse(&std::env::var(ENV).ok()?))
}

/// Aborts (or stops) the process if `name` is the armed point and this is its armed hit.
#[inline]
pub fn point(name: &str) {
    if let Some((armed, nth, action)) = armed()
        && armed == name
        && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *nth
    {
        fire(name, *nth, *action);
    }
}

/// Whether `name` is the armed point (at any hit). A sink whose writes are pipelined (the
/// `nats` sink) asks it to make what it sent before the point reach the server first, so an
/// abort there leaves exactly that part of the page stored; unarmed, it costs a load.
pub fn armed_at(name: &str) -> bool {
    armed().as_ref().is_some_and(|(armed, _, _)| armed == name)
}

#[cold]
fn fire(name: &str, nth: u64, action: Action) {
    match action {
        Action::Abort => {
            eprintln!("faucet: fault point `{name}` reached (hit {nth}); aborting");
            std::process::abort();
        }
        Action::Stop => {
            eprintln!("faucet: fault point `{name}` reached (hit {nth}); stopping (SIGSTOP)");
            // `kill` delivers the signal before it exits, and this thread only returns from
            // waiting for it after that: the process is stopped before `status` returns.
            let stopped = std::process::Command::new("kill")
                .args(["-STOP", &std::process::id().to_string()])
                .status();
            if !stopped.is_ok_and(|s| s.success()) {
                eprintln!("faucet: could not stop at fault point `{name}`; aborting");
                std::process::abort();
            }
        }
    }
}

/// The environment variable of [`fence_disabled_for_test`].
pub const DISABLE_FENCE_ENV: &str = "FAUCET_TEST_DISABLE_FENCE";

/// **Test only, debug builds only.** `FAUCET_TEST_DISABLE_FENCE=1` makes the run loop skip
/// giving the sink its writer fence (`SinkWriter::fence`), so a zombie writer's page is not
/// refused: the control run of the zombie-writer proof, which must show the corruption the
/// fence prevents (so that proof can fail). A release build never reads the variable (this
/// is `false` there), so no deployment can switch the fence off by accident; a debug build
/// that reads it logs an error at every run.
pub fn fence_disabled_for_test() -> bool {
    #[cfg(debug_assertions)]
    {
        std::env::var_os(DISABLE_FENCE_ENV).is_some_and(|v| v == "1")
    }
    #[cfg(not(debug_assertions))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_junk_arms_nothing() {
        assert_eq!(
            parse("after_write"),
            Some(("after_write".into(), 1, Action::Abort))
        );
        assert_eq!(
            parse("after_write:3"),
            Some(("after_write".into(), 3, Action::Abort))
        );
        assert_eq!(
            parse("before_write:2:stop"),
            Some(("before_write".into(), 2, Action::Stop))
        );
        assert_eq!(
            parse("before_write:2:abort"),
            Some(("before_write".into(), 2, Action::Abort))
        );
        for junk in ["", "x:y", "x:1:explode", "x:1:stop:more", ":1"] {
            assert_eq!(parse(junk), None, "{junk:?}");
        }
    }
}
