//! The progress line on stderr while a row runs (records, rows/s, pages, elapsed, and where
//! the source knows its end, the share read and the time left: `37% (12,345 of ~33,000
//! rows), ETA 1m 20s`), shown only when stderr is a terminal and `--quiet` is off — or, with
//! `FAUCET_PROGRESS=always` ([`PROGRESS_ENV`]), as one plain line per page on any stderr (for
//! logs and tests); and the counters a failed run reports.

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use faucet_core::pipeline::{Progress, ProgressFn};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::output::{progress_text, rate, thousands};

/// The variable that forces the progress line on: `always` writes it as one plain line per
/// page to stderr even when stderr is not a terminal (still not with `--quiet` or
/// `--output json`).
pub(crate) const PROGRESS_ENV: &str = "FAUCET_PROGRESS";

/// Where the line goes.
#[derive(Clone)]
enum Draw {
    /// Redrawn in place on a terminal.
    Bar(ProgressBar),
    /// One line per page (`FAUCET_PROGRESS=always` on a stderr that is not a terminal).
    Lines(Arc<str>),
}

/// What the run loop reported last: records and pages committed so far. A failed run still
/// reports how much it had committed.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    records: AtomicU64,
    pages: AtomicU64,
}

impl Counters {
    /// Records committed so far.
    pub(crate) fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Pages committed so far.
    pub(crate) fn pages(&self) -> u64 {
        self.pages.load(Ordering::Relaxed)
    }
}

/// A row's progress line (or nothing, when hidden).
pub(crate) struct ProgressLine {
    draw: Option<Draw>,
    counters: Arc<Counters>,
}

impl ProgressLine {
    /// Starts a line for `label`; hidden when `quiet`, or when stderr is not a terminal and
    /// [`PROGRESS_ENV`] is not `always`.
    pub(crate) fn start(label: &str, quiet: bool) -> Self {
        let forced = std::env::var(PROGRESS_ENV).is_ok_and(|v| v == "always");
        let terminal = std::io::stderr().is_terminal();
        let draw = (!quiet && terminal).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix}: {msg}") {
                bar.set_style(style);
            }
            bar.set_prefix(label.to_owned());
            bar.set_message("starting");
            bar.enable_steady_tick(Duration::from_millis(200));
            Draw::Bar(bar)
        });
        let draw = draw.or_else(|| (!quiet && forced).then(|| Draw::Lines(label.into())));
        Self {
            draw,
            counters: Arc::new(Counters::default()),
        }
    }

    /// The counters the callback updates.
    pub(crate) fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// The `on_progress` callback for the run loop.
    pub(crate) fn callback(&self) -> ProgressFn {
        let draw = self.draw.clone();
        let counters = self.counters.clone();
        Arc::new(move |p: &Progress| {
            counters.records.store(p.records, Ordering::Relaxed);
            counters.pages.store(p.pages, Ordering::Relaxed);
            match &draw {
                Some(Draw::Bar(bar)) => bar.set_message(message(p)),
                Some(Draw::Lines(label)) => eprintln!("{label}: {}", message(p)),
                None => {}
            }
        })
    }

    /// Removes the line.
    pub(crate) fn finish(self) {
        if let Some(Draw::Bar(bar)) = self.draw {
            bar.finish_and_clear();
        }
    }
}

/// The line's text: `26,115 records, 63,695 rows/s, 3 pages, 1s, 37% (…), ETA 2s, lag 0.05 s`
/// (the share and the ETA only where the source knows its end).
fn message(p: &Progress) -> String {
    let share = p
        .extent
        .as_ref()
        .map(|e| format!(", {}", progress_text(e, p.eta)))
        .unwrap_or_default();
    let lag = p
        .lag
        .map(|l| format!(", lag {}", crate::output::secs(l)))
        .unwrap_or_default();
    format!(
        "{} records, {} rows/s, {} pages, {}{share}{lag}",
        thousands(p.records),
        thousands(rate(p.records, p.elapsed)),
        p.pages,
        humantime::format_duration(Duration::from_secs(p.elapsed.as_secs()))
    )
}
