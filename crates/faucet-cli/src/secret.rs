//! Connection URLs that may hold a password: a type that never prints it
//! (docs/architecture.md, "The shape the code keeps", point 7).

use std::fmt;

use faucet_core::FaucetError;
use serde::{Deserialize, Deserializer};

/// A connection URL (`postgres://user:pass@host/db`, `redis://:pass@host/`). `Debug` and
/// [`SecretUrl::redacted`] show it with the password replaced by `***`; only
/// [`SecretUrl::expose`] gives the real text, to hand to a client.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SecretUrl(String);

impl SecretUrl {
    /// Wraps a URL given outside a config file (`--cluster`, `FAUCET_CLUSTER_URL`) and
    /// [`remember`]s its password, so no message shows it.
    pub(crate) fn new(url: String) -> Self {
        remember(&url);
        Self(url)
    }

    /// The URL itself, for a client library. Never print it.
    #[cfg_attr(
        not(any(feature = "state-postgres", feature = "state-redis")),
        allow(dead_code)
    )]
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with any password replaced by `***` ([`redact_one`]).
    pub(crate) fn redacted(&self) -> String {
        redact_one(&self.0)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({:?})", self.redacted())
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self)
    }
}

/// The passwords of the connection URLs in the loaded config ([`remember`]): every message
/// faucet prints has them replaced, whatever characters they hold.
static KNOWN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Shorter secrets are not replaced literally (a one-letter password would garble every
/// message); the URL rules still hide them.
const MIN_KNOWN_LEN: usize = 3;

/// Records `secret` itself (an API token) so [`redact_url`] hides it in every message.
pub(crate) fn remember_secret(secret: &str) {
    let mut known = KNOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if secret.len() >= MIN_KNOWN_LEN && !known.iter().any(|k| k == secret) {
        known.push(secret.to_owned());
        known.sort_by_key(|k| std::cmp::Reverse(k.len()));
    }
}

/// Records the password of `value` (a config string: a URL's user info, or a libpq
/// `password=` value), as written and percent-decoded, so [`redact_url`] hides it anywhere.
pub(crate) fn remember(value: &str) {
    let mut found = Vec::new();
    if let Some((_, rest)) = value.split_once("://")
        && let Some(at) = userinfo_end(rest)
        && let Some((_, password)) = rest[..at].split_once(':')
    {
        found.push(password.to_owned());
        found.push(percent_decode(password));
    }
    let lower = value.to_ascii_lowercase();
    for key in ["password=", "pass=", "pwd="] {
        for (i, _) in lower.match_indices(key) {
            let v = &value[i + key.len()..];
            let end = v.find(['&', ' ', ';', '#']).unwrap_or(v.len());
            found.push(v[..end].to_owned());
        }
    }
    let mut known = KNOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for f in found {
        if f.len() >= MIN_KNOWN_LEN && !known.contains(&f) {
            known.push(f);
        }
    }
    // Longest first, so a secret containing another is replaced whole.
    known.sort_by_key(|k| std::cmp::Reverse(k.len()));
}

/// Whether a config key names a secret by itself (`password`, `sasl.password`,
/// `client_secret`, `token`): its value is hidden in every message.
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password") || key.contains("secret") || key.ends_with("token")
}

/// Walks a config tree (after `${env:…}` interpolation): [`remember`]s every URL's
/// password and every value of a key that names a secret ([`is_secret_key`]), and refuses a
/// URL field (`url`, `*_url`) whose user info holds an unencoded `/`, `?` or `#`, naming the
/// field (`pipeline.sink.config.connection_url`) and never the value.
///
/// # Errors
/// [`FaucetError::Config`] at the field, with the percent-encodings to use.
pub(crate) fn scan_config(tree: &serde_json::Value, field: &str) -> Result<(), FaucetError> {
    match tree {
        serde_json::Value::String(s) => {
            if s.contains("://") || s.to_ascii_lowercase().contains("password=") {
                remember(s);
            }
            let last = field.rsplit('.').next().unwrap_or(field);
            if is_secret_key(last) {
                // A secret by its name: the `kafka` sink's `properties: {sasl.password: …}`.
                remember_secret(s);
            }
            let is_url_field = last == "url" || last.ends_with("_url");
            if is_url_field && has_unencoded_userinfo(s) {
                return Err(FaucetError::config(
                    field,
                    "the URL's user info (its password?) holds an unencoded `/`, `?`, `#` or \
                     `@`, so a client would read part of it as the host or path; percent-encode \
                     them (`/` %2F, `?` %3F, `#` %23, `@` %40, space %20). The URL is not shown",
                ));
            }
            Ok(())
        }
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| scan_config(v, &format!("{field}[{i}]"))),
        serde_json::Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            let at = if field.is_empty() {
                k.clone()
            } else {
                format!("{field}.{k}")
            };
            scan_config(v, &at)
        }),
        _ => Ok(()),
    }
}

/// Whether `url`'s user info holds a character that ends the authority (`/`, `?`, `#`)
/// unencoded, so that a client would read part of the password as the host or path: an
/// `@` after the authority anywhere but inside a query value.
pub(crate) fn has_unencoded_userinfo(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let tail = &rest[authority_len(rest)..];
    if !tail.contains('@') {
        return false;
    }
    let (path, query) = match tail.find(['?', '#']) {
        Some(i) if tail[i..].starts_with('?') => (&tail[..i], &tail[i + 1..]),
        Some(_) => return true,
        None => (tail, ""),
    };
    if path.contains('@') {
        return true;
    }
    let (query, fragment) = query.split_once('#').unwrap_or((query, ""));
    fragment.contains('@')
        || query.split('&').any(|pair| match pair.split_once('=') {
            Some((k, _)) => k.contains('@'),
            None => pair.contains('@'),
        })
}

/// Where the authority of `rest` (the text after `://`) ends: at the first `/`, `?`, `#`.
fn authority_len(rest: &str) -> usize {
    rest.find(['/', '?', '#']).unwrap_or(rest.len())
}

/// Where the user info of `rest` (after `://`) ends, at its `@`: the authority's last `@`,
/// or, when the user info holds unencoded `/?#`, the last `@` of all.
fn userinfo_end(rest: &str) -> Option<usize> {
    if has_unencoded_userinfo(&format!("x://{rest}")) {
        rest.rfind('@')
    } else {
        rest[..authority_len(rest)].rfind('@')
    }
}

/// `s` percent-decoded (`%` not followed by two hex digits stays as it is), invalid UTF-8
/// replaced.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// One connection URL, for people: the user kept, the password shown as `***`; when the
/// user info is malformed (a quote, space or unencoded `/?#` in the user name), none of it
/// is shown (`scheme://***@host/db`). `password=` parameters are redacted too.
pub(crate) fn redact_one(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_url(url);
    };
    let Some(at) = userinfo_end(rest) else {
        return redact_url(url);
    };
    let userinfo = &rest[..at];
    let plain = |u: &str| {
        !u.is_empty()
            && !u
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '`' | '@'))
    };
    let shown = match userinfo.split_once(':') {
        Some((user, _)) if user.is_empty() || plain(user) => format!("{user}:***"),
        None if plain(userinfo) => userinfo.to_owned(),
        _ => "***".to_owned(),
    };
    redact_url(&format!("{scheme}://{shown}{}", &rest[at..]))
}

/// `text` with passwords replaced by `***`: every password of the loaded config
/// ([`remember`]) wherever it appears, the password of a URL's user info
/// (`scheme://user:secret@host`), and `password=` values in a query string or a libpq
/// key/value string (`host=x password=secret`).
pub(crate) fn redact_url(text: &str) -> String {
    let mut out = {
        let known = KNOWN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known
            .iter()
            .fold(text.to_owned(), |t, k| t.replace(k.as_str(), "***"))
    };
    out = redact_userinfo(&out);
    for key in ["password=", "pass=", "pwd="] {
        out = redact_param(&out, key);
    }
    out
}

/// Every `scheme://user:password@host` in `text`, password replaced.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(found) = text[i..].find("://") {
        let start = i + found + 3;
        out.push_str(&text[i..start]);
        let rest = &text[start..];
        // The authority ends at a path, query, fragment, or whitespace / quote in prose.
        let authority_len = rest
            .find(|c: char| matches!(c, '/' | '?' | '#' | '`' | '"' | '\'') || c.is_whitespace())
            .unwrap_or(rest.len());
        let authority = &rest[..authority_len];
        match authority
            .rfind('@')
            .map(|at| (at, authority[..at].find(':')))
        {
            Some((at, Some(colon))) => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        i = start + authority_len;
    }
    out.push_str(&text[i..]);
    out
}

fn redact_param(text: &str, key: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(found) = lower[i..].find(key) {
        let at = i + found;
        let boundary = at == 0 || matches!(lower.as_bytes()[at - 1], b'?' | b'&' | b' ' | b';');
        let value_start = at + key.len();
        out.push_str(&text[i..value_start]);
        if boundary {
            let value_len = text[value_start..]
                .find(['&', ' ', ';', '#'])
                .unwrap_or(text.len() - value_start);
            out.push_str("***");
            i = value_start + value_len;
        } else {
            i = value_start;
        }
    }
    out.push_str(&text[i..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_secret_keys_never_show() {
        let tree = serde_json::json!({"sink": {"properties": {
            "sasl.password": "kafka-pw-4471", "linger.ms": "5"}}});
        scan_config(&tree, "pipeline").expect("scan");
        let shown = redact_url("librdkafka said kafka-pw-4471 was refused; linger.ms 5");
        assert!(!shown.contains("kafka-pw-4471"), "{shown}");
        assert!(shown.contains("linger.ms 5"), "{shown}");
    }

    #[test]
    fn passwords_never_show() {
        let cases = [
            (
                "postgres://user:s3cr3t@localhost:5432/faucet",
                "postgres://user:***@localhost:5432/faucet",
            ),
            (
                "redis://:hunter2@127.0.0.1:6379/",
                "redis://:***@127.0.0.1:6379/",
            ),
            (
                "postgres://postgres@127.0.0.1:5432/test",
                "postgres://postgres@127.0.0.1:5432/test",
            ),
            (
                "postgres://u:p%40ss@h/db?sslmode=require&password=x2",
                "postgres://u:***@h/db?sslmode=require&password=***",
            ),
            (
                "host=localhost user=u password=abc dbname=x",
                "host=localhost user=u password=*** dbname=x",
            ),
            ("./data.csv", "./data.csv"),
            (
                "cannot connect to `postgres://a:b@h/x` or redis://:c@r:1/0 (tried twice)",
                "cannot connect to `postgres://a:***@h/x` or redis://:***@r:1/0 (tried twice)",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(redact_url(input), want, "{input}");
        }
        for (input, want) in [
            ("postgres://u:Ppw secret8@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u:S3cr3t-P@ss/w#rd?x@h/db",
                "postgres://u:***@h/db",
            ),
            ("postgres://u:a/b@h/db", "postgres://u:***@h/db"),
            ("redis://:p\"q`r'@h:1/0", "redis://:***@h:1/0"),
            ("postgres://a b:c@h/db", "postgres://***@h/db"),
            (
                "postgres://u:p@h/db?application_name=me@x",
                "postgres://u:***@h/db?application_name=me@x",
            ),
        ] {
            assert_eq!(redact_one(input), want, "{input}");
        }
        assert!(has_unencoded_userinfo(
            "postgres://u:S3cr3t-P@ss/w#rd?x@h/db"
        ));
        assert!(has_unencoded_userinfo("postgres://u:a?b@h/db"));
        assert!(!has_unencoded_userinfo(
            "postgres://u:p@h/db?application_name=me@x"
        ));
        assert!(!has_unencoded_userinfo("postgres://u:p w@h/db"));
        let tree = serde_json::json!({"source": {"config": {
            "query": "select 1 where u = 'https://medium.com/@me'",
            "connection_url": "postgres://u:p@h/db",
        }}});
        assert!(scan_config(&tree, "pipeline").is_ok());
        let tree = serde_json::json!({"state": {"config": {"url": "redis://:a/b@h/"}}});
        let err = scan_config(&tree, "pipeline")
            .expect_err("unencoded")
            .to_string();
        assert!(
            err.contains("pipeline.state.config.url") && !err.contains("a/b"),
            "{err}"
        );
        remember("postgres://u:Kq9 zz7@h/db");
        assert_eq!(
            redact_url("failed: user u password Kq9 zz7 rejected"),
            "failed: user u password *** rejected"
        );
        let s = SecretUrl("postgres://a:topsecret@h/d".to_owned());
        assert!(!format!("{s:?}").contains("topsecret"));
        assert!(!s.redacted().contains("topsecret"));
    }
}
