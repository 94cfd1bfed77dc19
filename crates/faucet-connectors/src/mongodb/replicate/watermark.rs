//! The watermark of a copy: a second change stream over the listed collections, from the
//! anchor on, that carries keys only. Drained before a page of the copy is handed out, it
//! says which `_id`s of the collections still to copy changed after the anchor: those
//! documents are left out of the copy (the change stream delivers them), so every document
//! the copy hands out is the one of the anchor (module docs of [`super`]).

use std::collections::{BTreeSet, HashMap, HashSet};

use mongodb::Client;
use mongodb::bson::{Bson, Document};
use mongodb::change_stream::ChangeStream;
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType};

use faucet_core::{FaucetError, ReadOptions};

use crate::mongodb::cdc::CdcBookmark;
use crate::mongodb::cdc::ValidatedMongodbCdcConfig;
use crate::mongodb::cdc::stream::{Carry, Start, watch};

/// The text an `_id` is kept and compared in: its canonical Extended JSON, so that its
/// BSON type is kept (an ObjectId and a string of the same hex differ).
pub(crate) fn key_text(id: &Bson) -> String {
    id.clone().into_canonical_extjson().to_string()
}

/// The `_id` of a key text [`key_text`] wrote; `None` for any other text.
pub(crate) fn key_of_text(text: &str) -> Option<Bson> {
    let json: faucet_core::serde_json::Value = faucet_core::serde_json::from_str(text).ok()?;
    Bson::try_from(json).ok()
}

/// The keys changed after the anchor, by collection (`db.coll`), for the collections still
/// to copy.
pub(crate) struct Watermark<'a> {
    client: Client,
    config: &'a ValidatedMongodbCdcConfig,
    options: ReadOptions,
    events: ChangeStream<ChangeStreamEvent<Document>>,
    /// The collections whose changed keys are kept.
    tracked: BTreeSet<String>,
    changed: HashMap<String, HashSet<String>>,
}

impl<'a> Watermark<'a> {
    /// The watermark from `start` (a stored anchor), tracking `tracked`; drained once, so
    /// everything changed since the anchor is known.
    ///
    /// # Errors
    /// As [`watch`] (an anchor no longer in the oplog: [`FaucetError::Bookmark`]).
    pub(crate) async fn from(
        client: Client,
        config: &'a ValidatedMongodbCdcConfig,
        start: Start,
        options: &ReadOptions,
        tracked: BTreeSet<String>,
    ) -> Result<Self, FaucetError> {
        let events = watch(&client, config, start, options, Carry::Keys).await?;
        let mut w = Self {
            client,
            config,
            options: options.clone(),
            events,
            tracked,
            changed: HashMap::new(),
        };
        w.drain().await?;
        Ok(w)
    }

    /// A new anchor: the watermark opened now and drained to the end of what the server has
    /// committed, and the position there (its post-batch resume token) as a `mongodb-cdc`
    /// bookmark whose cluster time is the server's operation time before it opened. Every
    /// change before that position is committed, so any later read holds it; every change
    /// after it reaches the watermark and the change stream read from that bookmark.
    ///
    /// # Errors
    /// As [`watch`]; [`FaucetError::Read`] when the server gives no resume token.
    pub(crate) async fn anchored(
        client: Client,
        config: &'a ValidatedMongodbCdcConfig,
        options: &ReadOptions,
        tracked: BTreeSet<String>,
        operation_time: mongodb::bson::Timestamp,
    ) -> Result<(Self, CdcBookmark), FaucetError> {
        let mut w = Self::from(client, config, Start::End, options, tracked).await?;
        w.changed.clear();
        let token = w.events.resume_token().ok_or_else(|| {
            FaucetError::read(
                super::CONNECTOR,
                "the server gave the copy's change stream no resume token to start from",
                None,
            )
        })?;
        let anchor = CdcBookmark {
            resume_token: crate::mongodb::cdc::record::token_text(&token)?,
            cluster_time: Some(operation_time),
        };
        Ok((w, anchor))
    }

    /// Reads the watermark to the end of what the server has committed, noting the keys
    /// changed in the tracked collections: until an empty batch, or past the server's
    /// operation time when the drain began (every change up to it is then read: the stream
    /// is in cluster-time order), so a writer faster than the watermark cannot hold the
    /// copy up.
    ///
    /// # Errors
    /// The driver's error.
    pub(crate) async fn drain(&mut self) -> Result<(), FaucetError> {
        let until = crate::mongodb::cdc::operation_time(&self.client, self.config).await?;
        loop {
            let next = self.events.next_if_any().await.map_err(|e| {
                self.config
                    .connection
                    .error("read the copy's change stream", &e)
            })?;
            let Some(event) = next else {
                return Ok(());
            };
            if event.operation_type == OperationType::Invalidate {
                self.events = watch(
                    &self.client,
                    self.config,
                    Start::After(event.id.clone()),
                    &self.options,
                    Carry::Keys,
                )
                .await?;
                continue;
            }
            self.note(&event);
            if event.cluster_time.is_some_and(|t| t > until) {
                return Ok(());
            }
        }
    }

    /// Notes the key of `event` when it is of a tracked collection.
    fn note(&mut self, event: &ChangeStreamEvent<Document>) {
        let (Some(ns), Some(key)) = (&event.ns, &event.document_key) else {
            return;
        };
        let table = format!("{}.{}", ns.db, ns.coll.as_deref().unwrap_or_default());
        if let (true, Some(id)) = (self.tracked.contains(&table), key.get("_id")) {
            self.changed.entry(table).or_default().insert(key_text(id));
        }
    }

    /// Whether the document of `table` with key text `key` changed after the anchor (as far
    /// as drained).
    pub(crate) fn changed(&self, table: &str, key: &str) -> bool {
        self.changed.get(table).is_some_and(|k| k.contains(key))
    }

    /// Stops tracking `table` (copied): its changes flow through the change stream alone.
    pub(crate) fn copied(&mut self, table: &str) {
        self.tracked.remove(table);
        self.changed.remove(table);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::oid::ObjectId;

    #[test]
    fn key_texts_keep_the_type_and_round_trip() {
        let oid = ObjectId::parse_str("65f1c0ffee00000000000001").expect("oid");
        for id in [
            Bson::Int32(5),
            Bson::Int64(5),
            Bson::Double(5.5),
            Bson::String("65f1c0ffee00000000000001".into()),
            Bson::ObjectId(oid),
            Bson::Document(mongodb::bson::doc! {"a": 1, "b": "x"}),
        ] {
            let text = key_text(&id);
            assert_eq!(key_of_text(&text), Some(id.clone()), "{text}");
        }
        assert_ne!(
            key_text(&Bson::ObjectId(oid)),
            key_text(&Bson::String(oid.to_hex()))
        );
        assert_eq!(key_of_text("not json"), None);
    }
}
