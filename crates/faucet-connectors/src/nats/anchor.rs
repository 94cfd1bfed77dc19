//! The headers a `nats` page carries for the exact re-anchor, and reading them back from the
//! last stored message.
//!
//! | header | on | value |
//! |---|---|---|
//! | `faucet-page` | every message of an effectively-once or fenced page | the page as JSON, the same for all its messages: `{"scope": <state key>, "sequence": <commit-token sequence>, "start": <bookmark the page started from, null for a source's first page>, "fence": <the run's writer fence>}` (`sequence` only with a commit token, `fence` only with a lease; `start` always, `null` on a fenced page without a token) |
//! | `faucet-page-index` | every message of an effectively-once page | the record's index in its page, from 0 |
//! | `faucet-commit` | a page's last message | the bookmark after the page (the commit token's), as JSON |
//!
//! The last stored message of the sink's subjects says where the target stands: one with
//! `faucet-commit` closes page `sequence`, so that page is committed; one without is part of
//! a page stored in part (a crash between its publishes): the page before it is the committed
//! one (its token: the sequence less one, the bookmark `start`), and the first
//! `faucet-page-index + 1` records after `start` are already stored. A page's messages are
//! stored in order and without a gap (each publish names the stream sequence it expects to
//! follow), so that count is exact.
//!
//! One `faucet-page` header, built once a page, rather than one header per part: each header
//! is an allocation, a validation and a hash-map entry per message in `async-nats`, and the
//! four of them were a tenth of a CSV → NATS run's CPU (`perf`, `bench/bus_sinks.sh`). Streams
//! written before (the parts as `faucet-scope`, `faucet-sequence`, `faucet-page-start`,
//! `faucet-fence`) are still read.

use async_nats::HeaderMap;
use faucet_core::{Bookmark, CommitToken};
use serde::{Deserialize, Serialize};

/// Header: the page, as JSON ([`PageHeader`]).
pub const HEADER_PAGE: &str = "faucet-page";
/// Header: the record's index in its page.
pub const HEADER_PAGE_INDEX: &str = "faucet-page-index";
/// Header, on a page's last message: the bookmark after the page (JSON).
pub const HEADER_COMMIT: &str = "faucet-commit";
/// Header: the message key (JSON), with `key:`.
pub const HEADER_KEY: &str = "faucet-key";

/// The headers that held [`PageHeader`]'s parts before it (still read): the state key, the
/// commit-token sequence, the page's start bookmark (JSON) and the writer fence.
const EARLIER: [&str; 4] = [
    "faucet-scope",
    "faucet-sequence",
    "faucet-page-start",
    "faucet-fence",
];

/// The `faucet-page` header's value: what every message of a page says about its page.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PageHeader {
    /// The state key the page was written under.
    pub scope: String,
    /// The page's commit-token sequence; absent on a fenced page without a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// The bookmark the page started from (`Some(null)`: the source's start); `None` when
    /// the message does not say (a malformed or foreign one: refused where it is needed).
    #[serde(default, deserialize_with = "present")]
    pub start: Option<Bookmark>,
    /// The writer fence of the run that wrote the page, when it held a lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
}

/// A field that is there, `null` included (`Option<Value>` alone reads `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Bookmark>, D::Error> {
    Bookmark::deserialize(d).map(Some)
}

impl PageHeader {
    /// The header's text (JSON: no line break, whatever the state key holds).
    pub fn text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The page header of `headers`: `faucet-page`, or the separate headers written before
    /// it; `Ok(None)` when there is neither.
    fn of(headers: &HeaderMap) -> Result<Option<Self>, String> {
        if let Some(page) = text(headers, HEADER_PAGE) {
            return serde_json::from_str(page)
                .map(Some)
                .map_err(|e| format!("the header `{HEADER_PAGE}` of the last message: {e}"));
        }
        let [scope, sequence, start, fence] = EARLIER.map(|name| text(headers, name));
        if scope.is_none() && sequence.is_none() {
            return Ok(None);
        }
        let number = |name: &str, v: &str| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("the header `{name}` of the last message is not a number"))
        };
        Ok(Some(Self {
            scope: scope.unwrap_or_default().to_owned(),
            sequence: sequence.map(|v| number(EARLIER[1], v)).transpose()?,
            start: start
                .map(|v| {
                    serde_json::from_str(v).map_err(|_| {
                        format!(
                            "the header `{}` of the last message is not JSON",
                            EARLIER[2]
                        )
                    })
                })
                .transpose()?,
            fence: fence.map(|v| number(EARLIER[3], v)).transpose()?,
        }))
    }
}

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
    let Some(page) = PageHeader::of(headers)? else {
        return Ok(None);
    };
    let Some(sequence) = page.sequence else {
        return Ok(None);
    };
    if page.scope != scope {
        return Err(format!(
            "the last message of the sink's subjects was written under the state key \
             {:?}, not {scope:?}: another pipeline publishes to these subjects, and an \
             effectively-once (or fenced) run needs its subjects and stream to itself",
            page.scope
        ));
    }
    let fence = page.fence;
    if let Some(commit) = text(headers, HEADER_COMMIT) {
        let bookmark: Bookmark = serde_json::from_str(commit)
            .map_err(|_| format!("the header `{HEADER_COMMIT}` of the last message is not JSON"))?;
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
    let index: u64 = text(headers, HEADER_PAGE_INDEX)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            format!("the header `{HEADER_PAGE_INDEX}` of the last message is not a number")
        })?;
    let start = page.start.ok_or_else(|| {
        format!(
            "the last message does not say where its page started (`start` in `{HEADER_PAGE}`, \
             or `{}`)",
            EARLIER[2]
        )
    })?;
    // The page before a source's first page: no token (the run starts from the state
    // store's bookmark, which is where that page started).
    let token = (!start.is_null()).then(|| CommitToken {
        sequence: sequence.saturating_sub(1),
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

    /// The anchor read in scope `k` from a message of page `sequence` that started at
    /// `start`, the `index`-th of its page, written by a run with `fence`, and `more`.
    fn anchor(
        sequence: u64,
        start: Bookmark,
        index: &str,
        fence: Option<u64>,
        more: &[(&str, &str)],
    ) -> Anchor {
        let page = PageHeader {
            scope: "k".into(),
            sequence: Some(sequence),
            start: Some(start),
            fence,
        }
        .text();
        let mut pairs = vec![(HEADER_PAGE, page.as_str()), (HEADER_PAGE_INDEX, index)];
        pairs.extend_from_slice(more);
        read(&headers(&pairs), "k").expect("ok").expect("anchor")
    }

    #[test]
    fn the_page_header_is_one_line_of_json() {
        let page = PageHeader {
            scope: "a\r\nb".into(),
            sequence: Some(4),
            start: Some(json!({"offset": 30})),
            fence: Some(2),
        };
        assert_eq!(
            page.text(),
            r#"{"scope":"a\r\nb","sequence":4,"start":{"offset":30},"fence":2}"#
        );
        let fenced_only = PageHeader {
            scope: "k".into(),
            ..PageHeader::default()
        };
        assert_eq!(fenced_only.text(), r#"{"scope":"k","start":null}"#);
    }

    #[test]
    fn a_closed_page_is_committed() {
        let a = anchor(
            4,
            json!({"offset": 30}),
            "9",
            Some(2),
            &[(HEADER_COMMIT, "{\"offset\":40}")],
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
        let a = anchor(5, json!({"offset": 40}), "6", None, &[]);
        assert_eq!(
            a.token,
            Some(CommitToken {
                sequence: 4,
                bookmark: json!({"offset": 40})
            })
        );
        assert_eq!((a.skip, a.fence), (7, None));
        // The source's first page, stored in part: no token, the skip from the start.
        let a = anchor(1, Bookmark::Null, "2", None, &[]);
        assert_eq!((a.token, a.start, a.skip), (None, Bookmark::Null, 3));
    }

    #[test]
    fn a_message_written_before_the_page_header_is_read_the_same() {
        let earlier = headers(&[
            ("faucet-scope", "k"),
            ("faucet-sequence", "5"),
            ("faucet-page-start", "{\"offset\":40}"),
            ("faucet-fence", "3"),
            (HEADER_PAGE_INDEX, "6"),
        ]);
        let now = anchor(5, json!({"offset": 40}), "6", Some(3), &[]);
        assert_eq!(read(&earlier, "k"), Ok(Some(now)));
    }

    #[test]
    fn foreign_and_malformed_messages() {
        assert_eq!(read(&headers(&[("x", "1")]), "k"), Ok(None));
        // A fenced page without a commit token says nothing of where the target stands.
        let fenced = r#"{"scope":"k","fence":2}"#;
        assert_eq!(read(&headers(&[(HEADER_PAGE, fenced)]), "k"), Ok(None));
        let other = r#"{"scope":"other","sequence":1}"#;
        let err = read(&headers(&[(HEADER_PAGE, other)]), "k").expect_err("scope");
        assert!(err.contains("\"other\""), "{err}");
        let bad = headers(&[(HEADER_PAGE, r#"{"scope":"k","sequence":"x"}"#)]);
        assert!(read(&bad, "k").expect_err("bad").contains(HEADER_PAGE));
        let earlier = headers(&[("faucet-scope", "k"), ("faucet-sequence", "x")]);
        assert!(
            read(&earlier, "k")
                .expect_err("bad")
                .contains("faucet-sequence")
        );
        // A page stored in part must say where it started: no `start` is not the source's
        // start (`"start":null` is).
        let no_start = headers(&[
            (HEADER_PAGE, r#"{"scope":"k","sequence":2}"#),
            (HEADER_PAGE_INDEX, "0"),
        ]);
        assert!(read(&no_start, "k").expect_err("start").contains("start"));
        let earlier_no_start = headers(&[
            ("faucet-scope", "k"),
            ("faucet-sequence", "2"),
            (HEADER_PAGE_INDEX, "0"),
        ]);
        assert!(
            read(&earlier_no_start, "k")
                .expect_err("start")
                .contains("faucet-page-start")
        );
        let no_index = headers(&[(HEADER_PAGE, r#"{"scope":"k","sequence":1,"start":null}"#)]);
        assert!(
            read(&no_index, "k")
                .expect_err("index")
                .contains(HEADER_PAGE_INDEX)
        );
    }
}
