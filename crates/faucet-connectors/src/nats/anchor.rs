//! The headers a `nats` page carries for the exact re-anchor, and reading them back from the
//! last stored message.
//!
//! | header | on | value |
//! |---|---|---|
//! | `faucet-scope` | every message of an effectively-once or fenced page | the state key |
//! | `faucet-sequence` | the same | the page's commit-token sequence |
//! | `faucet-page-start` | the same | the bookmark the page started from, as JSON (`null` for a source's first page) |
//! | `faucet-page-index` | the same | the record's index in its page, from 0 |
//! | `faucet-fence` | the same, with a lease | the run's writer fence |
//! | `faucet-commit` | a page's last message | the bookmark after the page (the commit token's), as JSON |
//!
//! The last stored message of the sink's subjects says where the target stands: one with
//! `faucet-commit` closes page `faucet-sequence`, so that page is committed; one without is
//! part of a page stored in part (a crash between its publishes): the page before it is the
//! committed one (its token: the sequence less one, the bookmark `faucet-page-start`), and the
//! first `faucet-page-index + 1` records after `faucet-page-start` are already stored. A
//! page's messages are stored in order and without a gap (each publish names the stream
//! sequence it expects to follow), so that count is exact.

use async_nats::HeaderMap;
use faucet_core::{Bookmark, CommitToken};

/// Header: the state key the page was written under.
pub const HEADER_SCOPE: &str = "faucet-scope";
/// Header: the page's commit-token sequence.
pub const HEADER_SEQUENCE: &str = "faucet-sequence";
/// Header: the bookmark the page started from (JSON).
pub const HEADER_PAGE_START: &str = "faucet-page-start";
/// Header: the record's index in its page.
pub const HEADER_PAGE_INDEX: &str = "faucet-page-index";
/// Header: the writer fence of the run that wrote the page.
pub const HEADER_FENCE: &str = "faucet-fence";
/// Header, on a page's last message: the bookmark after the page (JSON).
pub const HEADER_COMMIT: &str = "faucet-commit";
/// Header: the message key (JSON), with `key:`.
pub const HEADER_KEY: &str = "faucet-key";

/// Where the target stands for one scope, read from its last stored message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Anchor {
    /// The last committed page's token; `None` when no page of the scope is committed.
    pub token: Option<CommitToken>,
    /// The bookmark the next page starts from (`null`: the source's start).
    pub start: Bookmark,
    /// How many records after `start` are stored already (a page stored in part).
    pub skip: u64,
    /// The fence of the run that wrote the last message, if it had one.
    pub fence: Option<u64>,
}

fn text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).map(async_nats::HeaderValue::as_str)
}

/// The [`Anchor`] that the last stored message's `headers` give for `scope`; `Ok(None)` when
/// the message carries no re-anchor headers (written by an at-least-once run without a lease,
/// or by another program).
///
/// # Errors
/// A message naming the header when one is malformed, or when the message belongs to another
/// scope (another pipeline publishes to these subjects).
pub fn read(headers: &HeaderMap, scope: &str) -> Result<Option<Anchor>, String> {
    let Some(sequence) = text(headers, HEADER_SEQUENCE) else {
        return Ok(None);
    };
    let written_by = text(headers, HEADER_SCOPE).unwrap_or_default();
    if written_by != scope {
        return Err(format!(
            "the last message of the sink's subjects was written under the state key \
             {written_by:?}, not {scope:?}: another pipeline publishes to these subjects, and an \
             effectively-once (or fenced) run needs its subjects and stream to itself"
        ));
    }
    let number = |name: &str, v: Option<&str>| -> Result<u64, String> {
        v.and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("the header `{name}` of the last message is not a number"))
    };
    let json = |name: &str, v: Option<&str>| -> Result<Bookmark, String> {
        v.and_then(|v| serde_json::from_str(v).ok())
            .ok_or_else(|| format!("the header `{name}` of the last message is not JSON"))
    };
    let sequence = number(HEADER_SEQUENCE, Some(sequence))?;
    let fence = text(headers, HEADER_FENCE)
        .map(|f| number(HEADER_FENCE, Some(f)))
        .transpose()?;
    if let Some(commit) = text(headers, HEADER_COMMIT) {
        let bookmark = json(HEADER_COMMIT, Some(commit))?;
        return Ok(Some(Anchor {
            token: Some(CommitToken {
                sequence,
                bookmark: bookmark.clone(),
            }),
            start: bookmark,
            skip: 0,
            fence,
        }));
    }
    let start = json(HEADER_PAGE_START, text(headers, HEADER_PAGE_START))?;
    let index = number(HEADER_PAGE_INDEX, text(headers, HEADER_PAGE_INDEX))?;
    let previous = sequence.saturating_sub(1);
    // The page before a source's first page: no token (the run starts from the state
    // store's bookmark, which is where that page started).
    let token = (!start.is_null()).then(|| CommitToken {
        sequence: previous,
        bookmark: start.clone(),
    });
    Ok(Some(Anchor {
        token,
        start,
        skip: index + 1,
        fence,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, *v);
        }
        h
    }

    /// The anchor read from a page's headers in scope `k`: `sequence`, page start, page
    /// index, and `more`.
    fn anchor(sequence: &str, start: &str, index: &str, more: &[(&str, &str)]) -> Anchor {
        let mut pairs = vec![
            (HEADER_SCOPE, "k"),
            (HEADER_SEQUENCE, sequence),
            (HEADER_PAGE_START, start),
            (HEADER_PAGE_INDEX, index),
        ];
        pairs.extend_from_slice(more);
        read(&headers(&pairs), "k").expect("ok").expect("anchor")
    }

    #[test]
    fn a_closed_page_is_committed() {
        let a = anchor(
            "4",
            "{\"offset\":30}",
            "9",
            &[(HEADER_FENCE, "2"), (HEADER_COMMIT, "{\"offset\":40}")],
        );
        assert_eq!(
            a.token,
            Some(CommitToken {
                sequence: 4,
                bookmark: json!({"offset": 40})
            })
        );
        assert_eq!(
            (a.start, a.skip, a.fence),
            (json!({"offset": 40}), 0, Some(2))
        );
    }

    #[test]
    fn a_page_stored_in_part_re_anchors_at_its_start_and_skips_what_is_stored() {
        let a = anchor("5", "{\"offset\":40}", "6", &[]);
        assert_eq!(
            a.token,
            Some(CommitToken {
                sequence: 4,
                bookmark: json!({"offset": 40})
            })
        );
        assert_eq!((a.skip, a.fence), (7, None));
        // The source's first page, stored in part: no token, the skip from the start.
        let a = anchor("1", "null", "2", &[]);
        assert_eq!((a.token, a.start, a.skip), (None, Bookmark::Null, 3));
    }

    #[test]
    fn foreign_and_malformed_messages() {
        assert_eq!(read(&headers(&[("x", "1")]), "k"), Ok(None));
        let other = headers(&[(HEADER_SCOPE, "other"), (HEADER_SEQUENCE, "1")]);
        assert!(read(&other, "k").expect_err("scope").contains("\"other\""));
        let bad = headers(&[(HEADER_SCOPE, "k"), (HEADER_SEQUENCE, "x")]);
        assert!(read(&bad, "k").expect_err("bad").contains(HEADER_SEQUENCE));
    }
}
