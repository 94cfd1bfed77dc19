//! Which rows `faucet serve PATHS…` serves: each path is a pipeline file or a directory of
//! them (its `*.yaml` / `*.yml` files, not recursive, in name order, hidden files skipped).
//! Every matrix row of every file is one pipeline, keyed by its state key as `faucet run`
//! keys it. Everything is planned offline before anything starts (the same planning as
//! `faucet run`: a bad row, or an unmet delivery request, stops the server before it serves).
//!
//! Rules of their own: a bounded row needs a `schedule:` (a continuous one runs all the
//! time) — a row without either is refused rather than run once at an arbitrary moment; two
//! rows may not share a state key; a state key may not start with the control prefix
//! ([`super::control::PREFIX`]); a sink writing to stdout (`path: "-"`) is refused.
//!
//! Rows whose state store is the same (same type, and the same directory, or URL — its
//! password aside — and table or prefix) share one connection to it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use faucet_core::FaucetError;

use super::control;
use super::pipeline::{SharedStore, Slot};
use crate::commands::plan;

/// A problem found before serving: the file, the row context, the error.
pub(crate) type Refused = Box<(String, FaucetError)>;

/// Every row of `paths`, planned, as slots by state key.
///
/// # Errors
/// The first problem, with `file: row: ` as its context.
pub(crate) fn discover(paths: &[PathBuf]) -> Result<BTreeMap<String, Slot>, Refused> {
    let mut slots: BTreeMap<String, Slot> = BTreeMap::new();
    // Rows with the same store (type, place and table or prefix) share one connection.
    let mut stores: BTreeMap<String, SharedStore> = BTreeMap::new();
    for file in files(paths)? {
        let shown = file.display().to_string();
        let prepared = plan::prepare(&file, None).map_err(|b| {
            let (context, e) = *b;
            Box::new((format!("{shown}: {context}"), e))
        })?;
        for p in prepared {
            let context = format!("{shown}: {}", p.context);
            let refuse = |e: FaucetError| Box::new((context.clone(), e));
            if !p.continuous && p.schedule.is_none() {
                return Err(refuse(FaucetError::config(
                    "pipeline.schedule",
                    "is missing: `faucet serve` runs a bounded pipeline on a schedule; add e.g. \
                     `schedule: \"*/5 * * * *\"` (or `{ cron: \"0 6 * * *\", timezone: \
                     Europe/Berlin }`), or `continuous: true` for a CDC source",
                )));
            }
            if p.sink_to_stdout {
                return Err(refuse(FaucetError::config(
                    "pipeline.sink.config.path",
                    "is `-` (stdout), which `faucet serve` cannot share between pipelines; write \
                     to a file",
                )));
            }
            if p.state_key.starts_with(control::PREFIX) {
                return Err(refuse(FaucetError::config(
                    "name",
                    format!(
                        "state keys starting with {:?} are reserved for faucet serve",
                        control::PREFIX
                    ),
                )));
            }
            let control_key = control::key_for(&p.state_key)
                .and_then(|k| p.state.validate_key(&k).map(|()| k))
                .map_err(|e| {
                    refuse(FaucetError::config(
                        "name",
                        format!(
                            "the state key is too long for faucet serve's control entry \
                             ({}{{state key}}): {}; shorten `name` or the row `id`",
                            control::PREFIX,
                            crate::output::error_chain(&e)
                        ),
                    ))
                })?;
            if let Some(other) = slots.get(&p.state_key) {
                return Err(refuse(FaucetError::config(
                    "name",
                    format!(
                        "the state key {} is also a row of {}; two pipelines cannot share one \
                         bookmark: give one another `name` or row `id`",
                        faucet_core::state::shown_key(&p.state_key),
                        other.file
                    ),
                )));
            }
            let key = p.state_key.clone();
            let store = stores
                .entry(format!("{} {}", p.state.type_name(), p.state.target()))
                .or_default()
                .clone();
            slots.insert(key, Slot::new(p, shown.clone(), control_key, store));
        }
    }
    Ok(slots)
}

/// The pipeline files of `paths`.
fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Refused> {
    let whole = |e| Box::new((String::new(), e));
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|e| {
                whole(FaucetError::config(
                    "PATHS",
                    format!("{} cannot be listed: {e}", path.display()),
                ))
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| is_pipeline_file(p))
                .collect();
            if found.is_empty() {
                return Err(whole(FaucetError::config(
                    "PATHS",
                    format!("{} holds no *.yaml or *.yml pipeline file", path.display()),
                )));
            }
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

fn is_pipeline_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    p.is_file()
        && !name.starts_with('.')
        && p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e == "yaml" || e == "yml")
}
