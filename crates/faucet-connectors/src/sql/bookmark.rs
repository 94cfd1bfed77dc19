//! The bookmark of a SQL read (opaque to everything but the query sources), one format for
//! every system:
//! * incremental: `{"replication_key": ["updated_at","id"], "values": ["2026-06-12
//!   16:31:32.869","2"]}` — the key tuple of the last row delivered, each value as the exact
//!   text the system binds back as a typed literal, so it compares exactly;
//! * full table, mid-read (a table with a primary key): `{"full_table":"in_progress","key":
//!   ["id"],"values":["42"]}`; a finished read: `{"full_table":"done"}`, after which the next
//!   run reads the whole table again.

use serde_json::json;

use faucet_core::{Bookmark, FaucetError};

use super::key::{KeyKind, OrderKey};
use super::read::ReplicationMethod;

/// Where a read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// From the first row.
    Beginning,
    /// After the row whose key tuple is this text.
    After(Vec<String>),
}

/// The bookmark after a row whose key tuple is `values`, mid-read (`None` for a read without
/// an ordering key: it cannot resume mid-table).
pub(crate) fn after(order: Option<&OrderKey>, values: &[String]) -> Option<Bookmark> {
    let order = order?;
    Some(match order.kind {
        KeyKind::Replication => json!({"replication_key": order.names, "values": values}),
        KeyKind::PrimaryKey => {
            json!({"full_table": "in_progress", "key": order.names, "values": values})
        }
    })
}

/// The bookmark of the last page of a finished read whose last key tuple is `last`.
pub(crate) fn done(
    method: ReplicationMethod,
    order: Option<&OrderKey>,
    last: Option<&[String]>,
) -> Option<Bookmark> {
    match method {
        ReplicationMethod::FullTable => Some(json!({"full_table": "done"})),
        ReplicationMethod::Incremental => last.and_then(|v| after(order, v)),
    }
}

/// Where a read of `label` by `method`, ordered by `order`, starts from the stored `from`.
/// The key values are returned as stored; the system checks that each is a literal of its
/// column's type.
///
/// # Errors
/// [`FaucetError::Bookmark`] for `connector` when `from` is not a bookmark this
/// configuration made (another method, another key, a malformed one); the message says to
/// delete the state entry to start over ([`mismatch`]).
pub(crate) fn start(
    connector: &str,
    label: &str,
    method: ReplicationMethod,
    order: Option<&OrderKey>,
    from: Option<&Bookmark>,
) -> Result<Start, FaucetError> {
    let Some(bookmark) = from else {
        return Ok(Start::Beginning);
    };
    let fail = |what: &str| mismatch(connector, bookmark, what);
    match method {
        ReplicationMethod::Incremental => {
            let order = order.ok_or_else(|| fail("has no key"))?;
            let (names, values) = key_and_values(bookmark, "replication_key")
                .ok_or_else(|| fail("is not an incremental bookmark"))?;
            if names != order.names {
                return Err(fail(&format!(
                    "was made for replication_key {names:?}, but the config says {:?}",
                    order.names
                )));
            }
            Ok(Start::After(values))
        }
        ReplicationMethod::FullTable => match bookmark.get("full_table").and_then(|v| v.as_str()) {
            Some("done") => Ok(Start::Beginning),
            Some("in_progress") => {
                let (names, values) =
                    key_and_values(bookmark, "key").ok_or_else(|| fail("is malformed"))?;
                match order {
                    Some(o) if o.names == names => Ok(Start::After(values)),
                    _ => Err(fail(&format!(
                        "resumes a full read ordered by {names:?}, which is not the primary \
                         key of {label} any more"
                    ))),
                }
            }
            _ => Err(fail("is not a full_table bookmark")),
        },
    }
}

/// The error for a stored bookmark this configuration cannot resume from: `the stored
/// bookmark <json> <what>; delete the pipeline's state entry to start over`.
pub(crate) fn mismatch(connector: &str, bookmark: &Bookmark, what: &str) -> FaucetError {
    FaucetError::bookmark(
        connector,
        format!(
            "the stored bookmark {bookmark} {what}; delete the pipeline's state entry to start \
             over"
        ),
        None,
    )
}

/// `{"<names_field>": [..], "values": [..]}` → (names, values), all strings, as many values
/// as names, at least one.
fn key_and_values(bookmark: &Bookmark, names_field: &str) -> Option<(Vec<String>, Vec<String>)> {
    let strings = |v: &serde_json::Value| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let names = strings(bookmark.get(names_field)?)?;
    let values = strings(bookmark.get("values")?)?;
    (!names.is_empty() && names.len() == values.len()).then_some((names, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: KeyKind) -> OrderKey {
        OrderKey {
            kind,
            names: vec!["updated_at".into(), "id".into()],
            indexes: vec![1, 0],
            unique: true,
        }
    }

    fn start_of(
        method: ReplicationMethod,
        order: Option<&OrderKey>,
        b: serde_json::Value,
    ) -> Result<Start, FaucetError> {
        start("x", "t", method, order, Some(&b))
    }

    #[test]
    fn incremental_bookmarks_round_trip_and_refuse_another_key() {
        let order = key(KeyKind::Replication);
        let values = vec!["2026-01-01 00:00:00".to_owned(), "7".to_owned()];
        let b = after(Some(&order), &values).expect("a value");
        assert_eq!(
            b,
            json!({"replication_key": ["updated_at", "id"], "values": values})
        );
        let m = ReplicationMethod::Incremental;
        assert_eq!(
            start_of(m, Some(&order), b).expect("a value"),
            Start::After(values)
        );
        let other = json!({"replication_key": ["id"], "values": ["7"]});
        let e = start_of(m, Some(&order), other)
            .expect_err("an error")
            .to_string();
        assert!(
            e.contains("was made for replication_key") && e.contains("start over"),
            "{e}"
        );
        let short = json!({"replication_key": ["updated_at", "id"], "values": ["7"]});
        assert!(start_of(m, Some(&order), short).is_err());
        assert!(start_of(m, Some(&order), json!({"full_table": "done"})).is_err());
        assert_eq!(done(m, Some(&order), None), None);
    }

    #[test]
    fn full_table_bookmarks_mid_read_and_done() {
        let order = key(KeyKind::PrimaryKey);
        let m = ReplicationMethod::FullTable;
        let values = vec!["a".to_owned(), "1".to_owned()];
        let b = after(Some(&order), &values).expect("a value");
        assert_eq!(b["full_table"], "in_progress");
        assert_eq!(
            start_of(m, Some(&order), b.clone()).expect("a value"),
            Start::After(values)
        );
        let d = done(m, Some(&order), None).expect("a value");
        assert_eq!(d, json!({"full_table": "done"}));
        assert_eq!(
            start_of(m, Some(&order), d).expect("a value"),
            Start::Beginning
        );
        // The primary key changed since the bookmark was made.
        let e = start_of(m, None, b).expect_err("an error").to_string();
        assert!(e.contains("not the primary key of t"), "{e}");
        assert!(after(None, &["1".to_owned()]).is_none());
    }
}
