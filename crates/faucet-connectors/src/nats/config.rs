//! The `nats` sink's configuration, and the subject rules it checks.

use faucet_core::FaucetError;
use faucet_core::route::TableTemplate;
use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;

use crate::bus::message::HEADER_TABLE;
use crate::bus::{Message, MessageFormat};

/// Configuration of the `nats` sink (`type: nats`).
/// ```yaml
/// sink:
///   type: nats
///   config:
///     url: ${env:NATS_URL}          # nats://[user:password@]host:4222
///     subject: "cdc.{schema}.{table}"
///     stream: CDC
///     create_stream: true
///     key: [id]
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSinkConfig {
    /// The server, `nats://[user:password@]host:port` (`tls://` for TLS). A secret: never
    /// printed.
    pub url: SecretString,
    /// The subject each record is published to: a template over the source table
    /// (`cdc.{schema}.{table}`; placeholders `{schema}` / `{database}`, `{table}`,
    /// `{source_table}`), or a fixed subject (`events`) for rows that are not change records.
    pub subject: String,
    /// The JetStream stream that captures the subjects.
    pub stream: String,
    /// Creates `stream` at open when it does not exist, capturing [`subject_filter`] of
    /// `subject`, with the server's defaults: file storage, limits retention (nothing
    /// discarded), one replica, a two-minute duplicate window. `false` (the default): the
    /// stream must exist.
    #[serde(default)]
    pub create_stream: bool,
    /// The record fields whose values make the message key (`{"id": 7}`, header
    /// `faucet-key`), from a change record's `after` (its `before` for a delete). Empty: a
    /// change record is keyed by its source table's key ([`crate::bus::SourceKeys`]), other
    /// rows have none.
    #[serde(default)]
    pub key: Vec<String>,
    /// The message value: `faucet` (the record as faucet's JSON) or `debezium` (the envelope
    /// `{"before","after","source","op","ts_ms"}`).
    #[serde(default)]
    pub format: MessageFormat,
}

/// A config that [`NatsSinkConfig::validate`] accepted, with its parts parsed.
#[derive(Debug, Clone)]
pub struct ValidatedNatsConfig {
    /// The configuration.
    pub config: NatsSinkConfig,
    /// `subject`, parsed.
    pub subject: TableTemplate,
    /// The wildcard subject every rendering of `subject` matches ([`subject_filter`]).
    pub filter: String,
}

impl NatsSinkConfig {
    /// A configuration publishing to `url`, subjects named by `subject`, into `stream`.
    pub fn new(
        url: impl Into<String>,
        subject: impl Into<String>,
        stream: impl Into<String>,
    ) -> Self {
        Self {
            url: SecretString::from(url.into()),
            subject: subject.into(),
            stream: stream.into(),
            create_stream: false,
            key: Vec::new(),
            format: MessageFormat::default(),
        }
    }

    /// Checks the configuration without I/O.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field: `url` not a `nats://` / `tls://` URL,
    /// `subject` not a template or with an empty token or a wildcard, `stream` empty or with
    /// a character a stream name may not hold (`.` `*` `>` `/` `\` or whitespace), `key`
    /// with an empty or repeated name.
    pub fn validate(&self) -> Result<ValidatedNatsConfig, FaucetError> {
        let url = self.url.expose_secret();
        if !["nats://", "tls://"].iter().any(|s| url.starts_with(s))
            || url.parse::<async_nats::ServerAddr>().is_err()
        {
            // The parse error is not shown: it may quote the URL, password and all.
            return Err(FaucetError::config(
                "url",
                "must be a nats:// URL (nats://[user:password@]host:4222, or tls://…)",
            ));
        }
        let subject = TableTemplate::parse(&self.subject, "subject")?;
        let filter = subject_filter(&subject).map_err(|m| FaucetError::config("subject", m))?;
        if self.stream.is_empty()
            || self.stream.chars().any(|c| {
                matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_whitespace() || c.is_control()
            })
        {
            return Err(FaucetError::config(
                "stream",
                format!(
                    "{:?} is not a stream name: use letters, digits, `-` and `_` (no `.`, `*`, \
                     `>`, `/`, `\\` or spaces)",
                    self.stream
                ),
            ));
        }
        crate::bus::validate_key(&self.key)?;
        Ok(ValidatedNatsConfig {
            config: self.clone(),
            subject,
            filter,
        })
    }
}

/// The wildcard subject that every subject `template` renders matches: each `.`-separated
/// token holding a placeholder becomes `*`, except that a token holding `{source_table}`
/// (whose value has a `.` in it) or the last token holding one becomes `>` and ends the
/// filter (`cdc.{schema}.{table}` → `cdc.*.>`, `events` → `events`). The sink creates its
/// stream with it and reads its last message by it.
///
/// # Errors
/// A message when the template has an empty token (`a..b`, a leading or trailing `.`) or a
/// wildcard or whitespace of its own.
pub fn subject_filter(template: &TableTemplate) -> Result<String, String> {
    let text = template.as_str();
    let tokens: Vec<&str> = text.split('.').collect();
    let mut out = Vec::with_capacity(tokens.len());
    for (i, token) in tokens.iter().enumerate() {
        if token.is_empty() {
            return Err(format!(
                "{text:?} has an empty token (`..`, or a `.` at an end)"
            ));
        }
        if token
            .chars()
            .any(|c| matches!(c, '*' | '>') || c.is_whitespace())
        {
            return Err(format!(
                "{text:?} holds a wildcard or whitespace; a subject to publish to has neither"
            ));
        }
        let literal = token.replace("{{", "").replace("}}", "");
        if !literal.contains('{') {
            out.push((*token).replace("{{", "{").replace("}}", "}"));
        } else if literal.contains("{source_table}") || i + 1 == tokens.len() {
            out.push(">".to_owned());
            break;
        } else {
            out.push("*".to_owned());
        }
    }
    Ok(out.join("."))
}

/// Checks a rendered subject: no empty token, no wildcard, no whitespace.
///
/// # Errors
/// A message saying what is wrong with `subject`.
pub fn check_subject(subject: &str) -> Result<(), String> {
    if subject.split('.').any(str::is_empty)
        || subject
            .chars()
            .any(|c| matches!(c, '*' | '>') || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "the subject {subject:?} is not one NATS can publish to (an empty token, a wildcard \
             `*` / `>` or whitespace, from the source table's name)"
        ));
    }
    Ok(())
}

/// Checks what a record puts on the wire before any of its page is sent: its subject
/// ([`check_subject`]) and its header values (the shared message headers and `faucet-key`),
/// none of which may hold a line break — NATS headers are lines, and async-nats panics on a
/// `\r` or `\n` in a value. A source table's name may hold one (PostgreSQL and MySQL allow
/// it in a quoted identifier); faucet's JSON values escape it.
///
/// # Errors
/// A message naming the header, its value and the fix.
pub fn check_message(m: &Message) -> Result<(), String> {
    check_subject(&m.route)?;
    let key = m.key.as_deref().map(|k| (super::anchor::HEADER_KEY, k));
    for (name, value) in m.headers().chain(key) {
        if value.iter().any(|b| matches!(b, b'\r' | b'\n')) {
            let fix = if name == HEADER_TABLE {
                "; rename the source table, or send its changes to another sink"
            } else {
                ""
            };
            return Err(format!(
                "the `{name}` header would hold a line break ({:?}), which a NATS header cannot \
                 carry{fix}",
                String::from_utf8_lossy(value)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(t: &str) -> Result<String, String> {
        subject_filter(&TableTemplate::parse(t, "subject").expect("template"))
    }

    #[test]
    fn filters_of_templates() {
        assert_eq!(filter("events").as_deref(), Ok("events"));
        assert_eq!(filter("cdc.{schema}.{table}").as_deref(), Ok("cdc.*.>"));
        assert_eq!(filter("cdc.{table}.v1").as_deref(), Ok("cdc.*.v1"));
        assert_eq!(filter("cdc.{source_table}.x").as_deref(), Ok("cdc.>"));
        assert_eq!(filter("a{{b}}.c").as_deref(), Ok("a{b}.c"));
        assert!(filter("a..b").is_err());
        assert!(filter("a.*").is_err());
        assert!(check_subject("cdc.public.orders").is_ok());
        assert!(check_subject("cdc.my schema.t").is_err());
        assert!(check_subject("cdc..t").is_err());
    }

    #[test]
    fn validation_names_the_field() {
        let ok = NatsSinkConfig::new("nats://127.0.0.1:4222", "cdc.{table}", "CDC");
        assert!(ok.validate().is_ok());
        let mut c = ok.clone();
        c.url = SecretString::from("http://u:hunter2@h".to_owned());
        let err = c.validate().expect_err("url").to_string();
        assert!(err.contains("url") && !err.contains("hunter2"), "{err}");
        let mut c = ok.clone();
        c.stream = "a.b".into();
        assert!(
            c.validate()
                .expect_err("stream")
                .to_string()
                .contains("stream")
        );
        let mut c = ok;
        c.key = vec!["id".into(), "id".into()];
        assert!(
            c.validate()
                .expect_err("key")
                .to_string()
                .contains("key[1]")
        );
    }
}
