//! The slot and its exported snapshot: `CREATE_REPLICATION_SLOT <slot> [TEMPORARY] LOGICAL
//! pgoutput (SNAPSHOT 'export')` on a replication session (PostgreSQL manual, "Streaming Replication
//! Protocol"), sent with `pgwire-replication`'s gated session, which runs commands before
//! (and here instead of) START_REPLICATION. The snapshot stays importable while that
//! session is open and runs no other command; [`ExportedSnapshot`] keeps it open and
//! [`ExportedSnapshot::import`] opens ordinary sessions reading as of the consistent point.
//!
//! A resumed copy needs a new snapshot but not a new slot: it creates a TEMPORARY slot
//! (`<slot>_r<hex>`), which the server drops when the session ends, also when the process
//! dies, so a crash leaves nothing behind.

use pgwire_replication::{Lsn, ReplicationClient};
use sqlx::{Executor as _, PgConnection};

use crate::sql::ident::quote_ident;
use faucet_core::FaucetError;

use super::CONNECTOR;
use crate::postgres::cdc::client::parse_lsn;
use crate::postgres::connection::PostgresUrl;

/// A slot just created, with the snapshot exported at its consistent point.
pub(crate) struct ExportedSnapshot {
    /// Holds the snapshot: dropping it ends the session and the snapshot.
    _session: ReplicationClient,
    /// The slot's consistent point as PostgreSQL prints it (`X/X`): changes committed
    /// after it are streamed, the ones before are in the snapshot.
    pub(crate) consistent_point_text: String,
    /// The snapshot's name, for `SET TRANSACTION SNAPSHOT`.
    pub(crate) name: String,
    /// The consistent point.
    pub(crate) consistent_point: Lsn,
}

/// The name of a temporary slot for `slot`: `<slot>_r<8 hex digits>`, at most 63 bytes
/// (PostgreSQL's NAMEDATALEN - 1), of lower-case letters, digits and underscores as `slot`.
pub(crate) fn temporary_slot_name(slot: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tag = (std::process::id() << 16) ^ nanos;
    let mut base: String = slot.chars().take(63 - 10).collect();
    while base.len() > 63 - 10 {
        base.pop();
    }
    format!("{base}_r{tag:08x}")
}

fn failed(message: String, e: Option<pgwire_replication::PgWireError>) -> FaucetError {
    FaucetError::read(
        CONNECTOR,
        message,
        e.map(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>),
    )
}

impl ExportedSnapshot {
    /// Creates `slot` (pgoutput; persistent, or dropped with the session when `temporary`)
    /// and exports its snapshot.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when the replication session cannot be opened;
    /// [`FaucetError::Read`] when the server refuses the slot (it exists, no free slot).
    pub(crate) async fn create(
        connection: &PostgresUrl,
        slot: &str,
        publication: &str,
        temporary: bool,
    ) -> Result<Self, FaucetError> {
        let config = connection.replication_config(
            slot,
            publication,
            Lsn(0),
            Lsn(0),
            crate::postgres::cdc::client::status_interval(
                faucet_core::source::DEFAULT_MAX_PAGE_DELAY,
            ),
        );
        let mut session = ReplicationClient::connect_gated(config)
            .await
            .map_err(|e| {
                FaucetError::connect(
                    CONNECTOR,
                    "cannot open a replication session to export a snapshot",
                    Some(Box::new(e)),
                )
            })?;
        let sql = format!(
            "CREATE_REPLICATION_SLOT {}{} LOGICAL pgoutput (SNAPSHOT 'export')",
            quote_ident(slot),
            if temporary { " TEMPORARY" } else { "" }
        );
        let rows = crate::postgres::cdc::slot_wait::while_creating(
            connection,
            slot,
            None,
            session.simple_query(&sql),
        )
        .await
        .map_err(|e| failed(format!("`{sql}` failed"), Some(e)))?;
        let text = |i: usize| -> Option<String> {
            let v = rows.first()?.get(i)?.as_ref()?;
            std::str::from_utf8(v).ok().map(str::to_owned)
        };
        let (Some(point), Some(name)) = (text(1), text(2)) else {
            return Err(failed(
                format!("`{sql}` returned no consistent point or snapshot name"),
                None,
            ));
        };
        let consistent_point = parse_lsn(&point)
            .ok_or_else(|| failed(format!("`{sql}` returned the LSN `{point}`"), None))?;
        tracing::info!(slot, temporary, consistent_point = %point, snapshot = %name, "created the slot with an exported snapshot");
        Ok(Self {
            _session: session,
            consistent_point_text: point,
            name,
            consistent_point,
        })
    }

    /// Makes `conn` read as of the consistent point: a read-only REPEATABLE READ transaction
    /// importing the snapshot.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the snapshot cannot be imported.
    pub(crate) async fn import(&self, conn: &mut PgConnection) -> Result<(), FaucetError> {
        let sql = format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT '{}'",
            self.name.replace('\'', "''")
        );
        conn.execute(sql.as_str()).await.map_err(|e| {
            FaucetError::read(
                CONNECTOR,
                format!("cannot import the exported snapshot `{}`", self.name),
                Some(Box::new(e)),
            )
        })?;
        Ok(())
    }
}
