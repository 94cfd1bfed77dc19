//! The warnings a SQL query source has gathered: its config's own, logged when it is built,
//! and those its plan found once it looked at the database (each kept once).

use std::sync::Mutex;

/// A source's warnings, shared between its `check()` / `open()` and its `warnings()`.
#[derive(Debug, Default)]
pub(crate) struct Warnings(Mutex<Vec<String>>);

impl Warnings {
    /// The config's own warnings, each also logged with `tracing::warn!` for `connector`.
    pub(crate) fn from_config(connector: &str, warnings: Vec<String>) -> Self {
        for w in &warnings {
            tracing::warn!(source = connector, "{w}");
        }
        Self(Mutex::new(warnings))
    }

    /// Adds the plan's warnings that are not there yet.
    pub(crate) fn add(&self, found: &[String]) {
        if let Ok(mut w) = self.0.lock() {
            for warning in found {
                if !w.contains(warning) {
                    w.push(warning.clone());
                }
            }
        }
    }

    /// Every warning so far, in the order they were found.
    pub(crate) fn list(&self) -> Vec<String> {
        self.0.lock().map(|w| w.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_warning_is_kept_once_in_order() {
        let w = Warnings::from_config("x", vec!["a".into()]);
        w.add(&["b".into(), "a".into()]);
        w.add(&["b".into(), "c".into()]);
        assert_eq!(w.list(), ["a", "b", "c"]);
    }
}
