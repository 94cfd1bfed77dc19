//! `faucet doctor` for the `mongodb` sink: reachable, transactions or not, the right to write.

use mongodb::bson::{Document, doc};

use faucet_core::FaucetError;

use super::writer::has_transactions;
use super::{CONNECTOR, FENCES, MongoWriteMode, MongodbSink};

/// Connects (`hello`); says whether the server has transactions (a warning for a standalone
/// server: `append` is then at-least-once); writes and removes a probe document in the home
/// database's `_faucet_fences` (the right to write there, where tokens and fences live); with
/// transactions and a fixed `collection`, inserts a probe document into it inside a
/// transaction that is aborted (the right to write the target, nothing written).
///
/// # Errors
/// [`FaucetError::Connect`] when unreachable; [`FaucetError::Write`] naming the write that
/// was refused and the privilege it needs.
pub(crate) async fn check(sink: &MongodbSink) -> Result<(), FaucetError> {
    let conn = &sink.config.connection;
    let client = conn.client().await?;
    let transactions = has_transactions(sink, &client).await?;
    let home = &sink.config.home;
    if transactions {
        tracing::info!(
            sink = CONNECTOR,
            server = conn.describe(),
            "the server is a replica set member: each page is one transaction with its commit \
             token (effectively-once)"
        );
    } else {
        tracing::warn!(
            sink = CONNECTOR,
            server = conn.describe(),
            "the server is not a replica set member (no multi-document transactions): no \
             commit token, so `write_mode: append` is at-least-once and `delivery: \
             effectively_once` is refused for it"
        );
    }
    let fences = client.database(home).collection::<Document>(FENCES);
    let probe = doc! {"_id": format!("faucet-doctor-probe-{}", std::process::id())};
    fences.insert_one(probe.clone()).await.map_err(|e| {
        conn.write_error(
            &format!(
                "insert a probe document into {home}.{FENCES} (the user needs insert, update, \
                 remove and find there: readWrite on `{home}`)"
            ),
            e,
        )
    })?;
    fences.delete_one(probe).await.map_err(|e| {
        conn.write_error(
            &format!("remove the probe document from {home}.{FENCES}"),
            e,
        )
    })?;
    if let (true, Some(name)) = (transactions, sink.config.collection.fixed()) {
        let Some((db, coll)) = name.split_once('.') else {
            return Ok(());
        };
        let target = client.database(db).collection::<Document>(coll);
        let mut session = client
            .start_session()
            .await
            .map_err(|e| conn.write_error("start a session", e))?;
        session
            .start_transaction()
            .await
            .map_err(|e| conn.write_error("start a transaction", e))?;
        let tried = target
            .insert_one(doc! {"faucet_doctor_probe": true})
            .session(&mut session)
            .await;
        let _ = session.abort_transaction().await;
        tried.map_err(|e| {
            conn.write_error(
                &format!(
                    "insert into {name} (in a transaction, rolled back; the user needs {}): ",
                    match sink.config.config.write_mode {
                        MongoWriteMode::Append => "insert",
                        MongoWriteMode::Upsert => "insert, update and remove",
                    }
                ),
                e,
            )
        })?;
    }
    Ok(())
}
