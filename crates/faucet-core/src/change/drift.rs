//! [`Drift`]: how a target differs from its source's columns, for `faucet doctor` (a drift
//! made while faucet was stopped, in the source or in the target), and what a run would do
//! about it.
//!
//! The source's side comes from [`crate::Source::current_shapes`] (its catalog now) and the
//! stored bookmark's `shapes` (what was delivered): their [`super::schema::diff`] is the
//! schema change a run will deliver first. The target's side is the sink's
//! ([`crate::Sink::check_drift`]): the statements it would run for that change, or the
//! error it would stop with, and how its columns still differ from the source's after it.

use std::fmt;

/// What a sink finds comparing its target with a source table's columns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drift {
    /// The target, as the sink names it (`public.copy`).
    pub target: String,
    /// The statements a run would run for the pending schema change, in order.
    pub statements: Vec<String>,
    /// The error a run would stop with at the pending schema change, when it would.
    pub stop: Option<String>,
    /// Differences a run would fail on, each with its fix (a source column the target
    /// lacks, a target column that cannot hold the source's type).
    pub problems: Vec<String>,
    /// Differences a run lives with (a target column the source does not have).
    pub notes: Vec<String>,
}

impl Drift {
    /// Whether a run would go through: no stop, no problem.
    pub fn ok(&self) -> bool {
        self.stop.is_none() && self.problems.is_empty()
    }
}

impl fmt::Display for Drift {
    /// `a run applies: ALTER …; ALTER …`, then the stop, the problems and the notes, `; `
    /// between; `no drift` when there is nothing to say.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.statements.is_empty() {
            parts.push(format!("a run applies: {}", self.statements.join("; ")));
        }
        if let Some(stop) = &self.stop {
            parts.push(format!("a run stops: {stop}"));
        }
        parts.extend(self.problems.iter().cloned());
        parts.extend(self.notes.iter().cloned());
        if parts.is_empty() {
            return f.write_str("no drift");
        }
        f.write_str(&parts.join("; "))
    }
}
