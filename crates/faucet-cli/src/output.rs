//! What `faucet run` prints: errors on stderr (`error: ...` and the chain of causes, secrets
//! redacted), a one-line summary per row, or with `--output json` one JSON document on stdout.

use std::error::Error as _;
use std::io::Write as _;
use std::time::Duration;

use faucet_core::{Bookmark, DeliveryGuarantee, Extent, FaucetError, RunSummary};
use serde::Serialize;

use crate::secret::redact_url;

/// `println!` that does not panic when stdout is closed (`faucet run | head -1`): what
/// faucet prints on stdout is a report, and the run it reports on is already persisted.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::say_line(format_args!($($arg)*))
    };
}

/// Set when a sink writes its data to stdout (`path: "-"`): reports then go to stderr.
static STDOUT_IS_DATA: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, what [`say_line`] prints goes to stderr: stdout carries a sink's data.
pub(crate) fn reports_to_stderr() {
    STDOUT_IS_DATA.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Writes one line on stdout (stderr after [`reports_to_stderr`]), ignoring a closed pipe.
pub(crate) fn say_line(args: std::fmt::Arguments<'_>) {
    if STDOUT_IS_DATA.load(std::sync::atomic::Ordering::Relaxed) {
        let mut out = std::io::stderr().lock();
        let _ = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
}

/// `e` and its causes as one message, secrets redacted: `msg: cause: cause`.
///
/// faucet's own messages never hold their cause's text (it is chained with `#[source]`), so
/// `e`'s cause is always shown. A deeper cause is left out when the error it caused already
/// shows its text, as some libraries' errors do (sqlx's `error communicating with database:
/// Connection refused (os error 111)` chains that same I/O error).
pub(crate) fn error_chain(e: &FaucetError) -> String {
    let mut text = e.to_string();
    let mut shown_by_previous: Option<String> = None;
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        let repeated = shown_by_previous.as_deref().is_some_and(|p| p.contains(&s));
        if !s.is_empty() && !repeated {
            text.push_str(": ");
            text.push_str(&s);
        }
        shown_by_previous = Some(s);
        cause = c.source();
    }
    clip_long_words(&redact_url(&text))
}

/// `value` for a message: as is up to 60 characters, else its first 60 and `… (N bytes)`.
pub(crate) fn clip(value: &str) -> String {
    if value.chars().count() <= KEPT {
        value.to_owned()
    } else {
        let head: String = value.chars().take(KEPT).collect();
        format!("{head}… ({} bytes)", value.len())
    }
}

/// A word (a run without whitespace) longer than this is cut in messages.
const LONG_WORD: usize = 200;
/// How many characters of a cut word are kept.
const KEPT: usize = 60;

/// `text` with every word longer than 200 characters cut to its first 60 and
/// `… (N bytes)`: a user value echoed in a message (a 50 MB `name:`, a field name, a path)
/// never floods the terminal.
pub(crate) fn clip_long_words(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(4096));
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if word.chars().count() > LONG_WORD {
            out.extend(word.chars().take(KEPT));
            out.push_str(&format!("… ({} bytes)", word.len()));
        } else {
            out.push_str(word);
        }
    }
    out
}

/// Prints `error: <context><message>: <causes>` on stderr.
pub(crate) fn print_error(context: &str, e: &FaucetError) {
    eprintln!(
        "error: {}",
        clip_long_words(&format!("{context}{}", error_chain(e)))
    );
}

/// One row's outcome, as `--output json` shows it.
#[derive(Debug, Serialize)]
pub(crate) struct RunJson {
    /// The matrix row id (`null` without a matrix).
    pub(crate) row: Option<String>,
    /// The state key.
    pub(crate) state_key: String,
    /// Records written to the sink by this run.
    pub(crate) rows: u64,
    /// Pages written.
    pub(crate) pages: u64,
    /// Wall time, seconds.
    pub(crate) elapsed_secs: f64,
    /// The delivery guarantee the run gave (`"at_least_once"` or `{"effectively_once":
    /// "keyed_upsert"}`); `null` when the run failed, since it did not deliver what it was
    /// asked to (`rows` and `pages` say what was committed before the error).
    pub(crate) guarantee: Option<DeliveryGuarantee>,
    /// The guarantee the plan derived before the run (`faucet validate` shows it); `null`
    /// when the requested delivery cannot be given. Differs from `guarantee` when the run
    /// failed or gave less than planned.
    pub(crate) planned_guarantee: Option<DeliveryGuarantee>,
    /// The last bookmark persisted (or the one resumed from when nothing moved).
    pub(crate) bookmark: Option<Bookmark>,
    /// Whether the run resumed from the sink's commit token instead of the state store's
    /// bookmark (atomic watermark: the token was ahead, or the state entry was lost).
    pub(crate) re_anchored: bool,
    /// Whether SIGINT/SIGTERM stopped the run after the page in hand.
    pub(crate) cancelled: bool,
    /// How far the last persisted bookmark was behind the source, in seconds, when it became
    /// durable (a change stream's commit or keepalive time to durable); `null` for sources
    /// without a clock (files, queries) or when no page was persisted.
    pub(crate) lag_seconds: Option<f64>,
    /// Why the run failed, or `null`.
    pub(crate) error: Option<ErrorJson>,
}

/// An error in `--output json`.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorJson {
    /// `config`, `connect`, `read`, `write`, `state`, `data`, `delivery`, `lease`.
    pub(crate) kind: &'static str,
    /// The message and its causes, secrets redacted.
    pub(crate) message: String,
}

impl ErrorJson {
    /// The JSON form of `e`.
    pub(crate) fn of(e: &FaucetError) -> Self {
        Self {
            kind: e.kind(),
            message: error_chain(e),
        }
    }
}

/// `--output json`: the whole document.
#[derive(Debug, Serialize)]
pub(crate) struct RunReport {
    /// One entry per row that ran, in order.
    pub(crate) runs: Vec<RunJson>,
    /// Whether every row succeeded (and the config was valid).
    pub(crate) ok: bool,
    /// Whether a signal stopped the run (rows after it were not started).
    pub(crate) cancelled: bool,
    /// An error before any row ran (invalid config, unmet delivery request), or `null`.
    pub(crate) error: Option<ErrorJson>,
}

impl RunReport {
    /// Prints the document on stdout.
    pub(crate) fn print(&self) {
        match serde_json::to_string(self) {
            Ok(s) => say!("{s}"),
            Err(e) => eprintln!("error: cannot encode the JSON summary: {e}"),
        }
    }
}

/// The JSON of a successful run.
pub(crate) fn run_json(
    row: Option<String>,
    s: &RunSummary,
    planned: Option<DeliveryGuarantee>,
) -> RunJson {
    RunJson {
        row,
        state_key: s.state_key.clone(),
        rows: s.records_out,
        pages: s.pages,
        elapsed_secs: s.elapsed.as_secs_f64(),
        guarantee: Some(s.guarantee),
        planned_guarantee: planned,
        bookmark: s.last_bookmark.clone(),
        re_anchored: s.re_anchored,
        cancelled: s.cancelled,
        lag_seconds: s.lag_seconds,
        error: None,
    }
}

/// The human one-line summary of a run:
/// `eu: 26115 records in 3 pages, 0.41 s (63,695 rows/s), at-least-once, state key w::eu`.
pub(crate) fn summary_line(label: &str, s: &RunSummary) -> String {
    let mut line = format!(
        "{label}: {} in {}, {} ({} rows/s), {}, state key {}",
        plural(s.records_out, "record"),
        plural(s.pages, "page"),
        secs(s.elapsed),
        thousands(rate(s.records_out, s.elapsed)),
        s.guarantee,
        s.state_key
    );
    if let Some(lag) = s.lag_seconds {
        line.push_str(&format!(
            ", source lag {}",
            secs(Duration::from_secs_f64(lag))
        ));
    }
    if let Some(extent) = &s.extent {
        // An uncancelled run read its source to the end: an estimated total no longer counts.
        let percent = if extent.estimate && !s.cancelled {
            100
        } else {
            whole_percent(extent)
        };
        line.push_str(&format!(", {percent}% of the source"));
    }
    if s.cancelled {
        line.push_str("; cancelled after persisting the page in hand, run again to resume");
    }
    line
}

/// The progress of a read whose end is known: `37% (12,345 of ~33,000 rows), ETA 1m 20s`
/// — `~` marks an estimated total ([`Extent::estimate`]), the ETA is left out when not known
/// ([`faucet_core::pipeline::Progress::eta`]). A read with parts names the part it is in
/// and its share: `37% (12,345 of ~33,000 rows), public.orders (3 of 12) 45%, ETA 1m 20s`.
pub(crate) fn progress_text(extent: &Extent, eta: Option<Duration>) -> String {
    let tilde = if extent.estimate { "~" } else { "" };
    let mut text = format!(
        "{}% ({} of {tilde}{} {})",
        whole_percent(extent),
        thousands(extent.done),
        thousands(extent.total),
        extent.unit.word()
    );
    if let Some(part) = &extent.part {
        // A display value in 0..=100.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let percent = part.percent(extent.estimate).floor() as u64;
        text.push_str(&format!(
            ", {} ({} of {}) {percent}%",
            part.name, part.number, part.count
        ));
    }
    if let Some(eta) = eta {
        text.push_str(&format!(
            ", ETA {}",
            humantime::format_duration(Duration::from_secs(eta.as_secs()))
        ));
    }
    text
}

/// [`Extent::percent`] rounded down (99.7% is not 100%).
fn whole_percent(extent: &Extent) -> u64 {
    // A display value in 0..=100.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let p = extent.percent().floor() as u64;
    p
}

/// `1 page`, `3 pages`.
pub(crate) fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Records per second, rounded down.
pub(crate) fn rate(records: u64, elapsed: Duration) -> u64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return 0;
    }
    // A display value: precision beyond u64 is irrelevant.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let r = (records as f64 / secs) as u64;
    r
}

/// `0.41 s`, `12.3 s`, `2m 5s`.
pub(crate) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2} s")
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else {
        format!("{}m {}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// `63695` → `63,695`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_for_people() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(63695), "63,695");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(rate(100, Duration::from_millis(500)), 200);
        assert_eq!(rate(100, Duration::ZERO), 0);
        assert_eq!(secs(Duration::from_millis(410)), "0.41 s");
        assert_eq!(secs(Duration::from_secs(125)), "2m 5s");
    }

    #[test]
    fn progress_for_people() {
        use faucet_core::ExtentUnit;
        let rows = Extent::estimated(12_345, 33_000, ExtentUnit::Rows);
        assert_eq!(
            progress_text(&rows, Some(Duration::from_millis(80_900))),
            "37% (12,345 of ~33,000 rows), ETA 1m 20s"
        );
        let over = Extent::estimated(40_000, 33_000, ExtentUnit::Rows);
        assert_eq!(progress_text(&over, None), "99% (40,000 of ~33,000 rows)");
        let bytes = Extent::exact(1_999, 2_000, ExtentUnit::Bytes);
        assert_eq!(progress_text(&bytes, None), "99% (1,999 of 2,000 bytes)");
        let end = Extent::exact(2_000, 2_000, ExtentUnit::WalBytes);
        assert_eq!(progress_text(&end, None), "100% (2,000 of 2,000 WAL bytes)");
        let table = Extent::estimated(12_345, 33_000, ExtentUnit::Rows).with_part(
            faucet_core::ExtentPart {
                name: "public.orders".into(),
                number: 3,
                count: 12,
                done: 900,
                total: 2_000,
            },
        );
        assert_eq!(
            progress_text(&table, None),
            "37% (12,345 of ~33,000 rows), public.orders (3 of 12) 45%"
        );
        let oplog = Extent::exact(30, 120, ExtentUnit::OplogSeconds);
        assert_eq!(progress_text(&oplog, None), "25% (30 of 120 oplog seconds)");
    }

    #[test]
    fn chains_causes_once_and_redacts() {
        let io = std::io::Error::other("connection refused");
        let e = FaucetError::connect(
            "postgres",
            "cannot reach postgres://u:pw@h/db",
            Some(Box::new(io)),
        );
        assert_eq!(
            error_chain(&e),
            "postgres: cannot connect: cannot reach postgres://u:***@h/db: connection refused"
        );
        let io = std::io::Error::other("denied");
        let e = FaucetError::state_io("file", "cannot write x", io);
        assert_eq!(error_chain(&e), "state store file: cannot write x: denied");
    }

    /// A library error that shows its own cause (`outer: inner`, chaining `inner`) is not
    /// followed by that cause again; faucet's message is always followed by its cause.
    #[test]
    fn a_library_error_showing_its_cause_is_not_repeated() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "error communicating with database: {}", self.0)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let inner = std::io::Error::other("Connection refused (os error 111)");
        let e = FaucetError::connect(
            "postgres",
            "PostgreSQL at h:1/db",
            Some(Box::new(Outer(inner))),
        );
        assert_eq!(
            error_chain(&e),
            "postgres: cannot connect: PostgreSQL at h:1/db: error communicating with database: \
             Connection refused (os error 111)"
        );
    }
}
