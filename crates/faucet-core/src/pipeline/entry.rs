//! The state entry: the bookmark and what it was delivered to.
//!
//! A sink that names its target ([`crate::Sink::target`]) has its entries stored as
//! `{"bookmark": <bookmark>, "sink": "<target>"}`; a sink without one, as the bare bookmark
//! (as before). A bare bookmark read back (an entry written before targets were recorded) is
//! an entry with no recorded sink: compatible with any sink, and recorded on this run. A
//! recorded sink that differs from this run's is refused: resuming would skip, in the new
//! target, everything before the bookmark.

use serde_json::{Map, Value};

use crate::error::FaucetError;
use crate::page::Bookmark;

const BOOKMARK: &str = "bookmark";
const SINK: &str = "sink";

/// A decoded state entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// The bookmark; `Null` marks a run that started but persisted no page.
    pub(crate) bookmark: Bookmark,
    /// The sink the bookmark was delivered to, when recorded.
    pub(crate) sink: Option<String>,
}

impl Entry {
    /// Reads a stored value: an envelope (an object of `bookmark` and, optionally, a string
    /// `sink`, nothing else; a user removes `sink` to accept a new target), or a bare
    /// bookmark.
    pub(crate) fn decode(value: Value) -> Self {
        if let Value::Object(map) = &value
            && let Some(b) = map.get(BOOKMARK)
        {
            match map.get(SINK) {
                Some(Value::String(s)) if map.len() == 2 => {
                    return Self {
                        bookmark: b.clone(),
                        sink: Some(s.clone()),
                    };
                }
                None if map.len() == 1 => {
                    return Self {
                        bookmark: b.clone(),
                        sink: None,
                    };
                }
                _ => {}
            }
        }
        Self {
            bookmark: value,
            sink: None,
        }
    }
}

/// The value to store for `bookmark` delivered to `sink`.
pub(crate) fn encode(bookmark: &Bookmark, sink: Option<&str>) -> Value {
    match sink {
        Some(s) => {
            let mut map = Map::new();
            map.insert(BOOKMARK.to_owned(), bookmark.clone());
            map.insert(SINK.to_owned(), Value::String(s.to_owned()));
            Value::Object(map)
        }
        None => bookmark.clone(),
    }
}

/// Refuses a run whose sink differs from the one the entry under `key` was delivered to.
///
/// # Errors
/// [`FaucetError::State`] naming both targets and the two fixes.
pub(crate) fn check_sink(
    store: &str,
    key: &str,
    recorded: Option<&str>,
    current: Option<&str>,
) -> Result<(), FaucetError> {
    match (recorded, current) {
        (Some(old), Some(new)) if old != new => Err(FaucetError::State {
            store: store.to_owned(),
            message: format!(
                "the bookmark under state key `{key}` was delivered to `{old}`, but this run's \
                 sink is `{new}`: resuming would skip, in the new target, every record before \
                 the bookmark. To deliver everything to the new target, give the pipeline (or \
                 the matrix row) a new `name`/`id`, which starts a new state key; if the \
                 target was moved on purpose, set the entry's \"sink\" to \"{new}\" (or remove \
                 the \"sink\" field) in the state store"
            ),
            source: None,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn bare_bookmarks_and_envelopes_round_trip() {
        let b = json!({"line": 3});
        assert_eq!(encode(&b, None), b);
        let e = Entry::decode(encode(&b, Some("jsonl /x")));
        assert_eq!(e.bookmark, b);
        assert_eq!(e.sink.as_deref(), Some("jsonl /x"));
        let unrecorded = Entry::decode(json!({"bookmark": 1}));
        assert_eq!((unrecorded.bookmark, unrecorded.sink), (json!(1), None));
        let other = json!({"bookmark": 1, "page": 2});
        assert_eq!(Entry::decode(other.clone()).bookmark, other);
        assert_eq!(Entry::decode(Value::Null).bookmark, Value::Null);
    }

    #[test]
    fn only_a_different_recorded_sink_is_refused() {
        assert!(check_sink("file", "k", None, Some("a")).is_ok());
        assert!(check_sink("file", "k", Some("a"), None).is_ok());
        assert!(check_sink("file", "k", Some("a"), Some("a")).is_ok());
        let e = check_sink("file", "k", Some("a"), Some("b"))
            .expect_err("different")
            .to_string();
        assert!(
            e.contains("`a`") && e.contains("`b`") && e.contains("`name`"),
            "{e}"
        );
    }
}
