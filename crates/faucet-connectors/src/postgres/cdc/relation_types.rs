//! The decode OIDs of the columns of pgoutput's Relation messages, from the shared resolver
//! ([`crate::postgres::type_catalog`]), so a change record's values take the same JSON form
//! as the `postgres` source's and the snapshot's (a domain over integer is a number, an array
//! of enums an array of strings).
//!
//! Relation messages carry only type OIDs. Built-in types need no lookup; any other OID is
//! looked up in `pg_type` when first seen, on an ordinary connection the stream opens lazily
//! (and again after it was lost): a column of a new type added mid-stream (`ALTER TABLE ...
//! ADD COLUMN`), whose Relation message arrives before its first change, is resolved then.
//! Type OIDs do not change meaning while the type exists, so what was resolved is kept for
//! the stream's life.

use sqlx::postgres::PgConnection;

use faucet_core::FaucetError;

use super::CONNECTOR;
use super::pgoutput::RelationColumn;
use crate::postgres::connection::PostgresUrl;
use crate::postgres::failure::is_connection_lost;
use crate::postgres::type_catalog::DecodeOids;
use crate::postgres::types::oid;

/// The resolver of one change stream.
pub(crate) struct RelationTypes {
    connection: PostgresUrl,
    conn: Option<PgConnection>,
    oids: DecodeOids,
}

impl RelationTypes {
    /// A resolver that connects with `connection` when it first needs the catalog.
    pub(crate) fn new(connection: PostgresUrl) -> Self {
        Self {
            connection,
            conn: None,
            oids: DecodeOids::default(),
        }
    }

    /// Sets the `decode_oid` of every column of a Relation message of `table`.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when the catalog connection cannot be opened or was lost (a
    /// retry resumes from the bookmark); [`FaucetError::Read`] when the lookup fails
    /// otherwise.
    pub(crate) async fn resolve(
        &mut self,
        table: &str,
        columns: &mut [RelationColumn],
    ) -> Result<(), FaucetError> {
        let unknown: Vec<u32> = columns
            .iter()
            .map(|c| c.type_oid)
            .filter(|&o| self.oids.get(o).is_none())
            .collect();
        if !unknown.is_empty() {
            let conn = match &mut self.conn {
                Some(conn) => conn,
                None => self.conn.insert(self.connection.connect_sql().await?),
            };
            if let Err(e) = self.oids.resolve(conn, &unknown).await {
                self.conn = None;
                let message = format!("cannot look up the column types of {table} in pg_type");
                return Err(if is_connection_lost(&e) {
                    FaucetError::connect(CONNECTOR, message, Some(Box::new(e)))
                } else {
                    FaucetError::read(CONNECTOR, message, Some(Box::new(e)))
                });
            }
        }
        for c in columns {
            c.decode_oid = self.oids.get(c.type_oid).unwrap_or(oid::TEXT);
        }
        Ok(())
    }
}
