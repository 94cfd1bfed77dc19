//! `${env:VAR}` interpolation in the parsed config tree, and the `.env` file beside the config.
//!
//! Interpolation runs on the parsed tree, inside string scalars only, so a value can never
//! change the document's structure: `path: ${env:P}` with `P="a\nb: c"` is the string
//! `"a\nb: c"`, not a new key. Mapping keys are never interpolated. `$${` writes a literal
//! `${`. Variables come from the process environment first, then from `.env` beside the
//! config (read with dotenvy, without modifying the process environment, so a real variable
//! always wins). A variable that is set in neither is an error naming it and the field.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use faucet_core::FaucetError;
use serde_json::Value;

/// The variables a config may use: the process environment over `.env` beside the config.
#[derive(Debug, Default)]
pub(crate) struct Env {
    dotenv: HashMap<String, String>,
    dotenv_path: Option<PathBuf>,
}

impl Env {
    /// Reads `<dir>/.env` when it exists (a missing file is fine; a UTF-8 byte order mark
    /// is skipped).
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the file (and the line number, never its content: it
    /// may hold secrets) when it exists but cannot be read or parsed.
    pub(crate) fn load(dir: &Path) -> Result<Self, FaucetError> {
        let path = dir.join(".env");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => {
                return Err(FaucetError::config(
                    ".env",
                    format!("cannot read {}: {e}", path.display()),
                ));
            }
        };
        let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        let mut dotenv = HashMap::new();
        for item in dotenvy::from_read_iter(text) {
            let (k, v) = item.map_err(|e| dotenv_error(&path, text, &e))?;
            dotenv.insert(k, v);
        }
        Ok(Self {
            dotenv,
            dotenv_path: Some(path),
        })
    }

    /// The value of `name`: the process environment first, then `.env`.
    fn get(&self, name: &str) -> Result<Option<String>, String> {
        match std::env::var(name) {
            Ok(v) => Ok(Some(v)),
            Err(std::env::VarError::NotPresent) => Ok(self.dotenv.get(name).cloned()),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("environment variable `{name}` is not valid UTF-8"))
            }
        }
    }

    fn missing(&self, name: &str) -> String {
        match &self.dotenv_path {
            Some(p) => format!(
                "environment variable `{name}` is not set (neither in the environment nor in {})",
                p.display()
            ),
            None => format!(
                "environment variable `{name}` is not set (and there is no .env beside the config)"
            ),
        }
    }
}

fn dotenv_error(path: &Path, text: &[u8], e: &dotenvy::Error) -> FaucetError {
    let message = match e {
        dotenvy::Error::LineParse(rest, _) => {
            // `rest` is the text from the line that failed to the end of what was read: find
            // where it starts to name the line, and never show it (it may hold passwords).
            let at = find(text, rest.as_bytes());
            let line = at.map(|i| text[..i].iter().filter(|b| **b == b'\n').count() + 1);
            match line {
                Some(n) => format!(
                    "cannot parse {} at line {n} (an unclosed quote, or not `NAME=value`); \
                     the line is not shown",
                    path.display()
                ),
                None => format!(
                    "cannot parse {} (an unclosed quote, or a line that is not `NAME=value`)",
                    path.display()
                ),
            }
        }
        dotenvy::Error::Io(io) => format!("cannot read {}: {io}", path.display()),
        _ => format!("cannot read {}", path.display()),
    };
    FaucetError::config(".env", message)
}

/// Where `needle` starts in `hay`: at its end when it is a suffix (the usual case), else the
/// first occurrence.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    if hay.ends_with(needle) {
        return Some(hay.len() - needle.len());
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Replaces `${env:VAR}` in every string scalar of `tree`; `path` names the tree's root
/// (`""` for the document) in errors.
///
/// # Errors
/// [`FaucetError::Config`] at the field's path: a variable that is not set, or a malformed
/// reference (`${env:}`, an unterminated `${env:...`).
pub(crate) fn interpolate(tree: &mut Value, env: &Env, path: &str) -> Result<(), FaucetError> {
    match tree {
        Value::String(s) => {
            let is_path = path == "path" || path.ends_with(".path");
            if s.contains("${") {
                let (value, names) =
                    interpolate_str(s, env).map_err(|m| FaucetError::config(display(path), m))?;
                // An empty variable in a path changes where it points (`${env:DIR}/out`
                // becomes `/out`, at the file system's root; `./${env:SUB}` the config's
                // directory) or empties it: an error, never a silent other place.
                let empty: Vec<&String> = names
                    .iter()
                    .filter(|n| matches!(env.get(n), Ok(Some(v)) if v.is_empty()))
                    .collect();
                if is_path && !empty.is_empty() {
                    let what = if value.is_empty() {
                        "is empty".to_owned()
                    } else {
                        format!("would be `{}`", crate::output::clip(&value))
                    };
                    return Err(FaucetError::config(
                        display(path),
                        format!(
                            "{what}: {} set to an empty value; set it, or remove it from the \
                             path",
                            empty
                                .iter()
                                .map(|n| format!("`{n}` is"))
                                .collect::<Vec<_>>()
                                .join(" and ")
                        ),
                    ));
                }
                *s = value;
            }
            if is_path && let Some(name) = shell_variable(s) {
                eprintln!(
                    "warning: `{}` holds `${name}`, which faucet does not expand; write \
                     `${{env:{name}}}` for the variable",
                    display(path)
                );
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                interpolate(item, env, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                interpolate(v, env, &child)?;
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() { "." } else { path }
}

/// The first `$NAME` (a shell-style reference faucet does not expand) in `s`.
fn shell_variable(s: &str) -> Option<&str> {
    s.match_indices('$').find_map(|(i, _)| {
        let rest = &s[i + 1..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..len];
        is_var_name(name).then_some(name)
    })
}

/// One string: `${env:NAME}` → the variable's value, `$${` → `${`; any other `${` is an
/// error (faucet does not expand `${HOME}`; say `${env:HOME}`); other text is kept. Returns
/// the value and the variables used.
fn interpolate_str(s: &str, env: &Env) -> Result<(String, Vec<String>), String> {
    const OPEN: &str = "${env:";
    let mut out = String::with_capacity(s.len());
    let mut names = Vec::new();
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix(OPEN) {
            let end = after
                .find('}')
                .ok_or_else(|| format!("unterminated `{OPEN}`; write `{OPEN}NAME}}`"))?;
            let name = &after[..end];
            if !is_var_name(name) {
                return Err(format!(
                    "`{OPEN}{}}}` is not a valid reference; a variable name is letters, \
                     digits and `_`, not starting with a digit",
                    crate::output::clip(name)
                ));
            }
            match env.get(name)? {
                Some(v) => out.push_str(&v),
                None => return Err(env.missing(name)),
            }
            names.push(name.to_owned());
            rest = &after[end + 1..];
        } else if let Some(after) = tail.strip_prefix("${") {
            let name = after.split('}').next().unwrap_or("");
            let name = if is_var_name(name) { name } else { "NAME" };
            return Err(format!(
                "`${{{name}}}` is not expanded: write `${{env:{name}}}` for the environment \
                 variable, or `$${{{name}}}` for the text itself"
            ));
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok((out, names))
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env {
            dotenv: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            dotenv_path: Some(PathBuf::from("/cfg/.env")),
        }
    }

    #[test]
    fn replaces_inside_strings_only_and_keeps_structure() {
        let e = env(&[
            ("FAUCET_T_DIR", "/data"),
            ("FAUCET_T_EVIL", "x\nsink: {type: memory}"),
        ]);
        let mut tree = json!({
            "a": "${env:FAUCET_T_DIR}/in.csv",
            "b": ["${env:FAUCET_T_EVIL}"],
            "${env:FAUCET_T_DIR}": 1,
            "c": "cost: $$5 and $${env:NOPE} and $x",
        });
        interpolate(&mut tree, &e, "").expect("interpolate");
        assert_eq!(
            tree,
            json!({
                "a": "/data/in.csv",
                "b": ["x\nsink: {type: memory}"],
                "${env:FAUCET_T_DIR}": 1,
                "c": "cost: $$5 and ${env:NOPE} and $x",
            })
        );
    }

    #[test]
    fn missing_variable_names_it_and_the_path() {
        let mut tree =
            json!({"pipeline": {"source": {"config": {"path": "${env:FAUCET_T_MISSING_1}"}}}});
        let err = interpolate(&mut tree, &env(&[]), "")
            .expect_err("missing")
            .to_string();
        assert!(err.contains("FAUCET_T_MISSING_1"), "{err}");
        assert!(err.contains("pipeline.source.config.path"), "{err}");
        assert!(err.contains("/cfg/.env"), "{err}");
    }

    #[test]
    fn malformed_references_are_errors() {
        for bad in ["${env:", "${env:}", "${env:1A}", "${env:A-B}"] {
            let mut tree = json!({"k": [bad]});
            let err = interpolate(&mut tree, &env(&[]), "")
                .expect_err(bad)
                .to_string();
            assert!(err.contains("k[0]"), "{err}");
        }
    }

    #[test]
    fn process_environment_wins_over_dotenv() {
        // PATH is set in every test environment; `.env` must not override it.
        let e = env(&[("PATH", "from-dotenv")]);
        let got = interpolate_str("${env:PATH}", &e).expect("PATH").0;
        assert_ne!(got, "from-dotenv");
    }
}
