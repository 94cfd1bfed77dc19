//! The progress line on stderr while a row runs (records, rows/s, pages, elapsed), shown only
//! when stderr is a terminal and `--quiet` is off; and the counters a failed run reports.

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use faucet_core::pipeline::{Progress, ProgressFn};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::output::{rate, thousands};

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
    bar: Option<ProgressBar>,
    counters: Arc<Counters>,
}

impl ProgressLine {
    /// Starts a line for `label`; hidden when `quiet` or stderr is not a terminal.
    pub(crate) fn start(label: &str, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix}: {msg}") {
                bar.set_style(style);
            }
            bar.set_prefix(label.to_owned());
            bar.set_message("starting");
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Self {
            bar,
            counters: Arc::new(Counters::default()),
        }
    }

    /// The counters the callback updates.
    pub(crate) fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// The `on_progress` callback for the run loop.
    pub(crate) fn callback(&self) -> ProgressFn {
        let bar = self.bar.clone();
        let counters = self.counters.clone();
        Arc::new(move |p: &Progress| {
            counters.records.store(p.records, Ordering::Relaxed);
            counters.pages.store(p.pages, Ordering::Relaxed);
            if let Some(bar) = &bar {
                let lag = p
                    .lag
                    .map(|l| format!(", lag {}", crate::output::secs(l)))
                    .unwrap_or_default();
                bar.set_message(format!(
                    "{} records, {} rows/s, {} pages, {}{lag}",
                    thousands(p.records),
                    thousands(rate(p.records, p.elapsed)),
                    p.pages,
                    humantime::format_duration(Duration::from_secs(p.elapsed.as_secs()))
                ));
            }
        })
    }

    /// Removes the line.
    pub(crate) fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
