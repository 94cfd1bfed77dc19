//! Connection URLs that may hold a password: a type that never prints it
//! (CONVENTIONS.md point 7).

use std::fmt;

use serde::{Deserialize, Deserializer};

/// A connection URL (`postgres://user:pass@host/db`, `redis://:pass@host/`). `Debug` and
/// [`SecretUrl::redacted`] show it with the password replaced by `***`; only
/// [`SecretUrl::expose`] gives the real text, to hand to a client.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SecretUrl(String);

impl SecretUrl {
    /// The URL itself, for a client library. Never print it.
    #[cfg_attr(
        not(any(feature = "state-postgres", feature = "state-redis")),
        allow(dead_code)
    )]
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with any password replaced by `***`.
    pub(crate) fn redacted(&self) -> String {
        redact_url(&self.0)
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

/// `text` with passwords replaced by `***`: the password of a URL's user info
/// (`scheme://user:secret@host`), and `password=` values in a query string or a libpq
/// key/value string (`host=x password=secret`).
pub(crate) fn redact_url(text: &str) -> String {
    let mut out = redact_userinfo(text);
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
        let s = SecretUrl("postgres://a:topsecret@h/d".to_owned());
        assert!(!format!("{s:?}").contains("topsecret"));
        assert!(!s.redacted().contains("topsecret"));
    }
}
