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
//!
//! For schema changes ([`super::shapes`]) each Relation message's columns also get their
//! type as PostgreSQL spells it (`format_type` of the message's type OID and modifier: what
//! the stream says, whatever the catalog holds now) and their `attnum`, looked up by name
//! in the catalog as it is now (0 when the name is not there any more).

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

    /// Sets the `decode_oid`, `source_type` and `attnum` of every column of a Relation
    /// message of `table` (relation `oid`).
    ///
    /// # Errors
    /// [`FaucetError::Connect`] when the catalog connection cannot be opened or was lost (a
    /// retry resumes from the bookmark); [`FaucetError::Read`] when the lookup fails
    /// otherwise.
    pub(crate) async fn resolve(
        &mut self,
        relation: u32,
        table: &str,
        columns: &mut [RelationColumn],
    ) -> Result<(), FaucetError> {
        let unknown: Vec<u32> = columns
            .iter()
            .map(|c| c.type_oid)
            .filter(|&o| self.oids.get(o).is_none())
            .collect();
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => self.conn.insert(self.connection.connect_sql().await?),
        };
        let looked_up = match self.oids.resolve(conn, &unknown).await {
            Ok(()) => describe(conn, relation, columns).await,
            Err(e) => Err(e),
        };
        let described = match looked_up {
            Ok(d) => d,
            Err(e) => {
                self.conn = None;
                let message = format!("cannot look up the columns of {table} in the catalog");
                return Err(if is_connection_lost(&e) {
                    FaucetError::connect(CONNECTOR, message, Some(Box::new(e)))
                } else {
                    FaucetError::read(CONNECTOR, message, Some(Box::new(e)))
                });
            }
        };
        for (c, (source_type, attnum)) in columns.iter_mut().zip(described) {
            c.decode_oid = self.oids.get(c.type_oid).unwrap_or(oid::TEXT);
            c.source_type = source_type;
            c.attnum = attnum;
        }
        Ok(())
    }
}

/// Each column's `format_type(type OID, modifier)` and its `attnum` in relation `relation`
/// now, by name (0 when not found), in column order.
async fn describe(
    conn: &mut PgConnection,
    relation: u32,
    columns: &[RelationColumn],
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let types: Vec<i64> = columns.iter().map(|c| i64::from(c.type_oid)).collect();
    let mods: Vec<i32> = columns.iter().map(|c| c.type_mod).collect();
    let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    sqlx::query_as(
        "SELECT format_type(t.typ::oid, t.md), \
           COALESCE((SELECT a.attnum::int8 FROM pg_attribute a \
                     WHERE a.attrelid = $1::int8::oid AND a.attname = t.nm \
                       AND a.attnum > 0 AND NOT a.attisdropped), 0) \
         FROM unnest($2::int8[], $3::int4[], $4::text[]) WITH ORDINALITY AS t(typ, md, nm, n) \
         ORDER BY t.n",
    )
    .bind(i64::from(relation))
    .bind(types)
    .bind(mods)
    .bind(names)
    .fetch_all(conn)
    .await
}
