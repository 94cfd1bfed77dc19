//! Loading a pipeline file (grammar version 1).
//!
//! The steps, in order: read the file → parse the YAML (serde-saphyr, with its budgets
//! against alias bombs) into a generic tree → interpolate `${env:VAR}` inside string scalars
//! ([`mod@env`]) → deep-merge each matrix row into `pipeline` ([`matrix`]) → deserialize the typed
//! [`PipelineConfig`] with `serde_path_to_error`, so a bad field is reported by its path
//! (`pipeline.sink.config.pathh`) → resolve relative file paths against the config file's
//! directory. No network, no data files: `faucet validate` runs this offline.
//!
//! ```yaml
//! version: 1
//! name: orders            # default: the config file's stem
//! pipeline:
//!   source: { type: csv, config: { path: ./data.csv } }
//!   sink:   { type: jsonl, config: { path: ./out/data.jsonl } }
//!   state:  { type: file, config: { path: ./.faucet/state } }
//!   delivery: at_least_once
//!   batch_size: 10000
//!   max_page_delay: 50ms
//! matrix:
//!   - { id: eu, source: { config: { path: ./eu.csv } } }
//! ```

pub(crate) mod env;
mod matrix;
pub(crate) mod schedule;

use std::path::{Path, PathBuf};

use faucet_core::state::{shown_key, validate_state_key};
use faucet_core::{DeliveryRequest, FaucetError};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::output;
use crate::registry::{SinkConfig, SourceConfig, StateConfig};

/// The config file `faucet run` reads when none is given: `faucet.yaml` in the current
/// directory.
pub(crate) const DEFAULT_CONFIG: &str = "faucet.yaml";

/// The pipeline file, before `pipeline` and the rows are typed.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a pipeline file: a mapping with `version: 1`, `pipeline` and optionally `name` and `matrix`"
)]
struct Document {
    /// The grammar version; only `1` exists.
    version: Value,
    /// The pipeline's name, the first part of every state key. Default: the file's stem.
    #[serde(default)]
    name: Option<String>,
    /// The pipeline: `source`, `sink`, `state`, `delivery`, `batch_size`.
    pipeline: Value,
    /// One run per row, each deep-merged into `pipeline`.
    #[serde(default)]
    matrix: Option<Vec<Value>>,
}

/// `pipeline:` (and each matrix row after merging).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PipelineConfig {
    /// Where records come from: `{type: csv | jsonl | postgres | postgres-cdc, config: {...}}`.
    pub(crate) source: SourceConfig,
    /// Where records go: `{type: jsonl | postgres, config: {...}}`.
    pub(crate) sink: SinkConfig,
    /// Where bookmarks live: `{type: memory | file | postgres | redis, config: {...}}`.
    /// Default: `file` at `.faucet/state` beside the config file.
    #[serde(default)]
    pub(crate) state: StateConfig,
    /// The delivery request: `at_least_once` (default), `effectively_once`, or
    /// `exactly_once` (the same request as `effectively_once`).
    #[serde(default)]
    pub(crate) delivery: DeliveryRequest,
    /// The most records in a page (≥ 1). Default 10000. A number, or a string of digits.
    #[serde(
        default = "default_batch_size",
        deserialize_with = "crate::lenient::positive_usize"
    )]
    pub(crate) batch_size: usize,
    /// The longest a change waits in a page of a continuous source (`postgres-cdc`) before
    /// the page is handed over, however few records it holds: milliseconds (a number or a
    /// string of digits) or a duration (`50ms`, `2s`), from 1 ms to 1 h. Default 50 ms.
    /// Sources that read what is already there (files, queries) fill their pages at once.
    #[serde(
        default = "default_max_page_delay",
        deserialize_with = "crate::lenient::page_delay"
    )]
    pub(crate) max_page_delay: std::time::Duration,
    /// When `faucet serve` starts a bounded run of this row: a cron string (UTC) or `{cron,
    /// timezone}` ([`schedule`]). Ignored by `faucet run`; refused on a continuous source
    /// (which runs all the time under `faucet serve`).
    #[serde(default)]
    pub(crate) schedule: Option<schedule::Schedule>,
}

fn default_max_page_delay() -> std::time::Duration {
    faucet_core::source::DEFAULT_MAX_PAGE_DELAY
}

fn default_batch_size() -> usize {
    faucet_core::source::DEFAULT_BATCH_SIZE
}

impl PipelineConfig {
    fn resolve_paths(&mut self, base: &Path) {
        self.source.resolve_paths(base);
        self.sink.resolve_paths(base);
        self.state.resolve_paths(base);
    }
}

/// A loaded pipeline file.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The config file, as given.
    pub(crate) path: PathBuf,
    /// The pipeline's name.
    pub(crate) name: String,
    /// Whether the file has a `matrix`.
    pub(crate) has_matrix: bool,
    /// One per matrix row (one in all without a matrix), in file order.
    pub(crate) rows: Vec<Row>,
}

/// One run: a matrix row, or the whole pipeline when there is no matrix.
#[derive(Debug)]
pub(crate) struct Row {
    /// The row's id (`None` without a matrix).
    pub(crate) id: Option<String>,
    /// How to name the row in messages: its id, `matrix[3]` when it has none, or the
    /// pipeline's name without a matrix.
    pub(crate) label: String,
    /// The state key, `{name}::{id}` (`{name}` without a matrix), and the typed pipeline —
    /// or what is wrong with this row.
    pub(crate) config: Result<(String, PipelineConfig), FaucetError>,
}

/// Loads and checks `path`.
///
/// # Errors
/// [`FaucetError::Config`] naming the file, the field path, the variable or the row: a
/// missing or unreadable file, bad YAML, an unknown field, a missing variable, a version
/// other than 1, an empty matrix, a name that cannot be part of a state key. Errors inside
/// one matrix row are kept in that [`Row`] instead.
pub(crate) fn load(path: &Path) -> Result<Loaded, FaucetError> {
    let text = read(path)?;
    let base = base_dir(path)?;
    let env = env::Env::load(&base)?;
    let mut tree = parse_yaml(&text, path)?;
    env::interpolate(&mut tree, &env, "")?;
    crate::secret::scan_config(&tree, "")?;
    if !tree.is_object() {
        return Err(FaucetError::config(
            "config file",
            format!(
                "{} holds {}, not a pipeline file: a mapping with `version: 1`, `pipeline` and \
                 optionally `name` and `matrix`",
                path.display(),
                kind(&tree)
            ),
        ));
    }
    let doc: Document = typed(tree, "").map_err(|e| match e {
        FaucetError::Config { field, message } if field == "." => {
            FaucetError::config(path.display().to_string(), message)
        }
        other => other,
    })?;
    if doc.version != 1 {
        return Err(FaucetError::config(
            "version",
            format!(
                "{} is not a version this faucet reads; write `version: 1`",
                doc.version
            ),
        ));
    }
    let name = match doc.name {
        Some(n) => n,
        None => stem(path)?,
    };
    validate_state_key(&name).map_err(|e| {
        FaucetError::config(
            "name",
            format!(
                "{} cannot name a pipeline: it is the first part of every state key, and {}",
                shown_key(&name),
                reason(&name, &e)
            ),
        )
    })?;
    if !doc.pipeline.is_object() {
        return Err(FaucetError::config(
            "pipeline",
            "must be a mapping with `source`, `sink` and optionally `state`, `delivery`, \
             `batch_size`",
        ));
    }
    let has_matrix = doc.matrix.is_some();
    let rows = match doc.matrix {
        None => vec![Row {
            id: None,
            label: crate::output::clip(&name),
            config: typed_pipeline(doc.pipeline, None, &base).and_then(|p| {
                key_fits(&name, &p, "name")?;
                Ok((name.clone(), p))
            }),
        }],
        Some(rows) if rows.is_empty() => {
            return Err(FaucetError::config(
                "matrix",
                "is empty; remove it, or add rows like `- { id: eu }`",
            ));
        }
        Some(rows) => matrix_rows(&name, &doc.pipeline, rows, &base),
    };
    Ok(Loaded {
        path: path.to_path_buf(),
        name,
        has_matrix,
        rows,
    })
}

fn read(path: &Path) -> Result<String, FaucetError> {
    std::fs::read_to_string(path).map_err(|e| {
        let what = if e.kind() == std::io::ErrorKind::NotFound {
            "not found".to_owned()
        } else {
            format!("cannot be read: {e}")
        };
        let hint = if path == Path::new(DEFAULT_CONFIG) {
            format!(
                " (looked for {DEFAULT_CONFIG} in the current directory; pass the pipeline file: \
                 `faucet run path/to/pipeline.yaml`)"
            )
        } else {
            String::new()
        };
        FaucetError::config("config file", format!("{} {what}{hint}", path.display()))
    })
}

/// The config file's directory, absolute, so that bookmarks naming files (and messages) do
/// not depend on the directory faucet is started from.
fn base_dir(path: &Path) -> Result<PathBuf, FaucetError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::path::absolute(parent)
        .map(|abs| crate::registry::resolve_path(&abs, Path::new(".")))
        .map_err(|e| {
            FaucetError::config(
                "config file",
                format!("cannot resolve the directory of {}: {e}", path.display()),
            )
        })
}

/// The YAML budget: serde-saphyr's defaults (alias, anchor and expansion limits against
/// alias bombs, depth 64, 64 MiB of text), except room for a large matrix: 2 million nodes
/// and 4 million parser events (a 100,000-row matrix of small rows needs about 1 million).
fn yaml_budget() -> serde_saphyr::Budget {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = 2_000_000;
    budget.max_events = 4_000_000;
    budget
}

fn parse_yaml(text: &str, path: &Path) -> Result<Value, FaucetError> {
    let mut options = serde_saphyr::Options::default();
    // Only `true`/`false` are booleans (`country: NO` stays a string), and `007` stays text.
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    options.budget = Some(yaml_budget());
    serde_saphyr::from_str_with_options::<Value>(text, options)
        .map_err(|e| FaucetError::config("config file", yaml_error(path, &e)))
}

/// A YAML error for people: a duplicate key and a budget breach in our words, with the line;
/// anything else as the parser says it, with the line and column but without its snippet of
/// the file (which may hold a password).
fn yaml_error(path: &Path, e: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error as E;
    use serde_saphyr::budget::BudgetBreach as B;
    let mut inner = e;
    while let E::AliasError { error, .. } | E::WithSnippet { error, .. } = inner {
        inner = error;
    }
    let at = inner
        .location()
        .map(|l| format!(" at line {}", l.line()))
        .unwrap_or_default();
    let file = path.display();
    match inner {
        E::DuplicateMappingKey { key, .. } => {
            let key = key
                .as_deref()
                .map_or_else(|| "a key".to_owned(), |k| format!("`{}`", output::clip(k)));
            format!("{file}{at}: {key} appears twice in one mapping; keep one of them")
        }
        E::Budget { breach, .. } => {
            let budget = yaml_budget();
            let why = match breach {
                B::Nodes { .. } => format!("more than {} YAML values", budget.max_nodes),
                B::Events { .. } => format!("more than {} YAML events", budget.max_events),
                B::Depth { .. } => format!("nested deeper than {} levels", budget.max_depth),
                B::ScalarBytes { .. } => format!(
                    "more than {} MiB of text",
                    budget.max_total_scalar_bytes / (1024 * 1024)
                ),
                B::Aliases { .. }
                | B::Anchors { .. }
                | B::AliasAnchorRatio { .. }
                | B::MergeKeys { .. }
                | B::RecordedAnchorEvents { .. }
                | B::RecordedAnchorBytes { .. } => {
                    "aliases (`*name`) that expand too far (an alias bomb?)".to_owned()
                }
                _ => "more than a pipeline file may hold".to_owned(),
            };
            format!("{file}{at}: refused, it holds {why}")
        }
        // The parser's snippet would quote the lines around the error, secrets included:
        // name the line and column, never the text.
        _ => {
            let message = inner.to_string();
            let message = message.lines().next().unwrap_or_default();
            let at = match inner.location() {
                Some(l) if !message.contains("at line") => {
                    format!(" at line {}, column {}", l.line(), l.column())
                }
                _ => String::new(),
            };
            format!(
                "{file} is not valid YAML: {message}{at} (the line is not shown: it may hold a \
                 secret)"
            )
        }
    }
}

/// What a YAML value is, for messages: `a string`, `a sequence`, ….
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// The default name: the file's stem (`orders` for `orders.yaml`).
fn stem(path: &Path) -> Result<String, FaucetError> {
    path.file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            FaucetError::config(
                "name",
                format!(
                    "{} has no usable file name to default to; set `name:`",
                    path.display()
                ),
            )
        })
}

/// Checks that the row's state store can hold `key` (offline: the file store's file-name
/// limit), naming `field` (`name`, or `matrix[3].id`) and the limit.
fn key_fits(key: &str, p: &PipelineConfig, field: &str) -> Result<(), FaucetError> {
    p.state.validate_key(key).map_err(|e| {
        let why = match &e {
            FaucetError::Config { message, .. } => message.clone(),
            other => other.to_string(),
        };
        FaucetError::config(
            field,
            format!("the state key {why}; shorten `name` (or the matrix row's `id`)"),
        )
    })
}

/// The part of `validate_state_key(key)`'s error after the quoted key: `contains ' '; ...`.
fn reason(key: &str, e: &FaucetError) -> String {
    match e {
        FaucetError::Config { message, .. } => message
            .strip_prefix(&format!("{} ", shown_key(key)))
            .unwrap_or(message)
            .to_owned(),
        other => other.to_string(),
    }
}

/// Deserializes `tree` into `T`, naming a bad field by its path under `prefix`.
fn typed<T: DeserializeOwned>(tree: Value, prefix: &str) -> Result<T, FaucetError> {
    serde_path_to_error::deserialize(tree).map_err(|e| {
        let field = join(prefix, &e.path().to_string());
        FaucetError::config(field, e.inner().to_string())
    })
}

fn join(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path == ".") {
        (true, true) => ".".to_owned(),
        (true, false) => path.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// Types a (merged) pipeline tree. With a matrix row, an error whose field is in the row's
/// overrides is reported at `matrix[i].<field>`; otherwise at `pipeline.<field>`, naming the row.
fn typed_pipeline(
    tree: Value,
    row: Option<(usize, &str, &Value)>,
    base: &Path,
) -> Result<PipelineConfig, FaucetError> {
    let mut p: PipelineConfig = match serde_path_to_error::deserialize(tree) {
        Ok(p) => p,
        Err(e) => {
            let path = e.path().to_string();
            let message = e.inner().to_string();
            return Err(match row {
                Some((i, _, over)) if matrix::has_path(over, e.path()) => {
                    FaucetError::config(join(&format!("matrix[{i}]"), &path), message)
                }
                Some((_, id, _)) => FaucetError::config(
                    join("pipeline", &path),
                    format!("{message} (in matrix row `{id}`)"),
                ),
                None => FaucetError::config(join("pipeline", &path), message),
            });
        }
    };
    if p.schedule.is_some() && p.source.is_continuous() {
        let field = match row {
            Some((i, _, over)) if over.get("schedule").is_some() => format!("matrix[{i}].schedule"),
            _ => "pipeline.schedule".to_owned(),
        };
        return Err(FaucetError::config(
            field,
            "is set on a continuous source (`continuous: true`), which `faucet serve` runs all \
             the time; remove `schedule`, or `continuous` to run it bounded on the schedule",
        ));
    }
    p.resolve_paths(base);
    Ok(p)
}

fn matrix_rows(name: &str, pipeline: &Value, rows: Vec<Value>, base: &Path) -> Vec<Row> {
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    rows.into_iter()
        .enumerate()
        .map(|(i, raw)| {
            let at = format!("matrix[{i}]");
            let row = if raw.is_object() {
                typed::<matrix::MatrixRow>(raw, &at)
            } else {
                Err(FaucetError::config(
                    &at,
                    format!(
                        "is {}; a matrix row is a mapping like `{{ id: eu, source: {{ config: \
                         {{ path: ./eu.csv }} }} }}`",
                        kind(&raw)
                    ),
                ))
            };
            let row: matrix::MatrixRow = match row {
                Ok(r) => r,
                Err(e) => {
                    return Row {
                        id: None,
                        label: at,
                        config: Err(e),
                    };
                }
            };
            let id = row.id.clone();
            let config = (|| {
                if id.is_empty() {
                    return Err(FaucetError::config(
                        format!("{at}.id"),
                        "is empty; a row id is part of the state key `{name}::{id}`: give it \
                         letters, digits or `_ - .` (e.g. `id: eu`)",
                    ));
                }
                if seen.contains(&id) {
                    return Err(FaucetError::config(
                        format!("{at}.id"),
                        format!(
                            "`{}` is used by an earlier row; row ids must be unique",
                            crate::output::clip(&id)
                        ),
                    ));
                }
                seen.insert(id.clone());
                let key = format!("{name}::{id}");
                validate_state_key(&key).map_err(|e| {
                    FaucetError::config(
                        format!("{at}.id"),
                        format!(
                            "{} cannot name a row: the state key {} {}",
                            shown_key(&id),
                            shown_key(&key),
                            reason(&key, &e)
                        ),
                    )
                })?;
                let over = row.overrides();
                let mut merged = pipeline.clone();
                matrix::deep_merge(&mut merged, &over);
                let p = typed_pipeline(merged, Some((i, &id, &over)), base)?;
                key_fits(&key, &p, &format!("{at}.id"))?;
                Ok((key, p))
            })();
            Row {
                id: Some(id.clone()),
                label: if id.is_empty() {
                    format!("matrix[{i}]")
                } else {
                    crate::output::clip(&id)
                },
                config,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
