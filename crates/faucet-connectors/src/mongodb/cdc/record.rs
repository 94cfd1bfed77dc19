//! One change event as one change record (faucet's contract, `faucet_core::change`): the
//! record schema, the op of each event type, what `before` / `after` hold, and which events
//! are a `t` record, are passed over or stop the run.
//!
//! | event | record |
//! |---|---|
//! | insert | `c`, `after` the document |
//! | update | `u`, `before` the pre-image or the key, `after` the full document (null without one), `update_description` |
//! | replace | `u`, `before` the pre-image or the key, `after` the whole new document |
//! | delete | `d`, `before` the pre-image or the key |
//! | drop of a listed collection | `t` (the collection is gone; one created again starts empty) |
//! | rename of a listed collection to an unlisted one | `t` of the old name (its documents are gone from it) |
//! | rename *into* a listed collection | stops the run ([`FaucetError::Read`], naming both and the fix): its documents arrive without change events |
//! | dropDatabase | nothing (its collections' drops came first) |
//! | invalidate | nothing; the stream is opened again after it (`startAfter`) |
//! | anything else | stops the run, naming the event type |

use std::sync::Arc;

use faucet_core::FaucetError;
use faucet_core::change::{Op, UPDATE_DESCRIPTION, record_schema as change_schema};
use faucet_core::value::{DataType, Field, Schema, Value};
use mongodb::bson::{Bson, Document, Timestamp, doc};
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType, ResumeToken};

use super::CONNECTOR;
use super::config::ValidatedMongodbCdcConfig;
use crate::mongodb::value;

/// `resume_token`: the event's resume token, its `_data` text.
pub const RESUME_TOKEN: &str = "resume_token";
/// `cluster_time`: the event's cluster time, `{"$timestamp": {"t": …, "i": …}}`.
pub const CLUSTER_TIME: &str = "cluster_time";

/// The schema of every page: `op`, `table`, `resume_token`, `cluster_time`, `commit_ts` (the
/// event's `wallTime`), `before`, `after`, `update_description` (an update's
/// `{updatedFields, removedFields, truncatedArrays}`, null for other events).
pub fn record_schema() -> Arc<Schema> {
    change_schema(
        vec![
            Field::new(RESUME_TOKEN, DataType::Text),
            Field::new(CLUSTER_TIME, DataType::Json),
        ],
        vec![Field::new(UPDATE_DESCRIPTION, DataType::Json)],
    )
}

/// What one event means for the page.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// A record, its values in [`record_schema`]'s order.
    Record(Vec<Value>),
    /// Nothing to emit (an event of an unlisted collection, a dropDatabase); the position
    /// still moves past it.
    Pass,
    /// The stream ended (invalidate): open it again after this event's token.
    Invalidate,
}

/// The `_data` text of a resume token.
///
/// # Errors
/// [`FaucetError::Read`] when the token is not `{_data: "<hex>"}` (a server older than
/// MongoDB 4.2).
pub(crate) fn token_text(token: &ResumeToken) -> Result<String, FaucetError> {
    #[derive(serde::Serialize)]
    struct Wrap<'a> {
        t: &'a ResumeToken,
    }
    let bad = |what: String| {
        FaucetError::read(
            CONNECTOR,
            format!("a resume token faucet cannot keep ({what}): expected {{_data: \"<hex>\"}}"),
            None,
        )
    };
    let bytes = mongodb::bson::to_vec(&Wrap { t: token }).map_err(|e| bad(e.to_string()))?;
    let doc = Document::from_reader(bytes.as_slice()).map_err(|e| bad(e.to_string()))?;
    doc.get_document("t")
        .ok()
        .and_then(|t| t.get_str("_data").ok())
        .map(str::to_owned)
        .ok_or_else(|| bad(format!("{doc}")))
}

/// The resume token whose `_data` is `text` (a bookmark's).
///
/// # Errors
/// The BSON error when it cannot be built (never for a string).
pub(crate) fn token_from_text(text: &str) -> Result<ResumeToken, mongodb::bson::de::Error> {
    #[derive(serde::Deserialize)]
    struct Wrap {
        t: ResumeToken,
    }
    let bytes = mongodb::bson::to_vec(&doc! {"t": {"_data": text}})
        .map_err(|e| <mongodb::bson::de::Error as serde::de::Error>::custom(e.to_string()))?;
    mongodb::bson::from_slice::<Wrap>(&bytes).map(|w| w.t)
}

/// A cluster time as faucet writes it (`{"$timestamp": {"t", "i"}}`, the value mapping's).
pub(crate) fn cluster_time_value(ts: Timestamp) -> Value {
    value::value(Bson::Timestamp(ts))
}

/// A document of `table` read by a `faucet replicate` copy as of `anchor` (module
/// `crate::mongodb::replicate`): an `r` record whose position fields are the anchor's
/// (resume token, cluster time), `commit_ts`, `before` and `update_description` null,
/// `after` the document.
pub(crate) fn copied(table: &str, anchor: &super::CdcBookmark, doc: Document) -> Vec<Value> {
    vec![
        Value::Text(Op::Read.code().into()),
        Value::Text(table.into()),
        Value::Text(anchor.resume_token.as_str().into()),
        anchor.cluster_time.map_or(Value::Null, cluster_time_value),
        Value::Null,
        Value::Null,
        value::document(doc),
        Value::Null,
    ]
}

/// Decodes `event` (its token already read as `token`) for `config`.
///
/// # Errors
/// [`FaucetError::Read`] for a rename into a listed collection, an event type faucet does not
/// know, or an event that lacks what its type requires (a namespace, a document).
pub(crate) fn decode(
    event: ChangeStreamEvent<Document>,
    token: &str,
    config: &ValidatedMongodbCdcConfig,
) -> Result<Decoded, FaucetError> {
    let ns = event.ns.as_ref();
    let (db, coll) = match ns {
        Some(ns) => (ns.db.as_str(), ns.coll.as_deref().unwrap_or_default()),
        None => ("", ""),
    };
    let listed = config.covers(db, coll);
    let table = format!("{db}.{coll}");
    let op = match &event.operation_type {
        OperationType::Insert => Op::Insert,
        OperationType::Update | OperationType::Replace => Op::Update,
        OperationType::Delete => Op::Delete,
        OperationType::Drop => Op::Truncate,
        OperationType::DropDatabase => return Ok(Decoded::Pass),
        OperationType::Invalidate => return Ok(Decoded::Invalidate),
        OperationType::Rename => {
            let to = event
                .to
                .as_ref()
                .map(|t| (t.db.as_str(), t.coll.as_deref().unwrap_or_default()));
            if let Some((to_db, to_coll)) = to
                && config.covers(to_db, to_coll)
            {
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!(
                        "collection `{table}` was renamed to `{to_db}.{to_coll}` (resume token \
                         {token}), a listed collection: its documents arrive there without change \
                         events, so the stream cannot reproduce it; re-snapshot `{to_db}.{to_coll}` \
                         with `faucet replicate` from a fresh state, or stop listing it"
                    ),
                    None,
                ));
            }
            Op::Truncate
        }
        OperationType::Other(kind) => {
            return Err(FaucetError::read(
                CONNECTOR,
                format!(
                    "a change event of type `{kind}` on `{table}` (resume token {token}): faucet \
                     reads insert, update, replace, delete, drop, rename, dropDatabase and \
                     invalidate only; nothing was skipped — the run stops here"
                ),
                None,
            ));
        }
        // `OperationType` is non-exhaustive: a type a newer driver knows.
        other => {
            return Err(FaucetError::read(
                CONNECTOR,
                format!("a change event of type {other:?} on `{table}` faucet does not read"),
                None,
            ));
        }
    };
    if !listed {
        return Ok(Decoded::Pass);
    }
    let missing = |what: &str| {
        FaucetError::read(
            CONNECTOR,
            format!("a `{op}` event on `{table}` without {what} (resume token {token})"),
            None,
        )
    };
    // `before`: the pre-image where there is one, else the key.
    let before = || {
        event
            .full_document_before_change
            .clone()
            .or_else(|| event.document_key.clone())
            .map(value::document)
            .ok_or_else(|| missing("its documentKey"))
    };
    let (before, after) = match op {
        Op::Insert => (
            Value::Null,
            event
                .full_document
                .clone()
                .map(value::document)
                .ok_or_else(|| missing("its document"))?,
        ),
        Op::Update => (
            before()?,
            event
                .full_document
                .clone()
                .map_or(Value::Null, value::document),
        ),
        Op::Delete => (before()?, Value::Null),
        _ => (Value::Null, Value::Null),
    };
    let update_description = match &event.update_description {
        Some(d) => value::document(doc! {
            "updatedFields": d.updated_fields.clone(),
            "removedFields": d.removed_fields.clone(),
            "truncatedArrays": d.truncated_arrays.as_ref().map_or_else(Vec::new, |t| {
                t.iter()
                    .map(|a| Bson::Document(doc! {"field": a.field.clone(), "newSize": a.new_size}))
                    .collect()
            }),
        }),
        None => Value::Null,
    };
    let commit_ts = match (event.wall_time, event.cluster_time) {
        (Some(at), _) => Value::TimestampTz(value::date_text(at.timestamp_millis())),
        (None, Some(ts)) => {
            Value::TimestampTz(value::date_text(i64::from(ts.time).saturating_mul(1000)))
        }
        (None, None) => Value::Null,
    };
    Ok(Decoded::Record(vec![
        Value::Text(op.code().into()),
        Value::Text(table.into()),
        Value::Text(token.into()),
        event.cluster_time.map_or(Value::Null, cluster_time_value),
        commit_ts,
        before,
        after,
        update_description,
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_their_text() {
        let token = token_from_text("8263A0").expect("token");
        assert_eq!(token_text(&token).expect("text"), "8263A0");
    }

    #[test]
    fn the_schema_is_the_contract_with_the_update_description_last() {
        let s = record_schema();
        let names: Vec<&str> = s.names().collect();
        assert_eq!(
            names,
            [
                "op",
                "table",
                "resume_token",
                "cluster_time",
                "commit_ts",
                "before",
                "after",
                "update_description"
            ]
        );
    }
}
