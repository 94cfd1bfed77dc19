//! What the stream asks the catalog before it applies an event, on a connection of its own
//! kept for this (`catalog_conn`, opened at the first need): a changed listed table's
//! declared columns, and whether a statement-logged change may concern a listed table
//! (module `statement_scope`).

use mysql_async::binlog::events::{Event, QueryEvent, TableMapEvent};

use faucet_core::FaucetError;

use super::super::statement::{self, Statement};
use super::CdcPageStream;
use crate::mysql::catalog::TableCatalog;

impl CdcPageStream {
    /// For a table map of a listed table that differs from the one in hand: the table's
    /// declared columns, read from the catalog on a connection kept for this; else none.
    pub(super) async fn declared_for(
        &mut self,
        event: &Event,
    ) -> Result<TableCatalog, FaucetError> {
        if event.header().event_type_raw() != mysql_async::binlog::EventType::TABLE_MAP_EVENT as u8
        {
            return Ok(TableCatalog::default());
        }
        let Ok(tme) = event.read_event::<TableMapEvent<'_>>() else {
            return Ok(TableCatalog::default());
        };
        if !self.decoder.needs_catalog(&tme, event.data()) {
            return Ok(TableCatalog::default());
        }
        if self.catalog_conn.is_none() {
            self.catalog_conn = Some(self.connection.connect().await?);
        }
        let Some(conn) = self.catalog_conn.as_mut() else {
            return Ok(TableCatalog::default());
        };
        let result = TableCatalog::load(
            conn,
            &self.connection,
            &tme.database_name(),
            &tme.table_name(),
        )
        .await;
        if result.is_err() {
            self.catalog_conn = None;
        }
        result
    }

    /// For a Query event that changes data as an SQL statement (module `statement`): why
    /// it may have changed a listed table (`statement_scope`), `None` when it is proven not
    /// to. Other DDL makes the cached catalog answers stale: they are forgotten.
    ///
    /// # Errors
    /// [`FaucetError::Connect`] / [`FaucetError::Read`] when the catalog cannot be read.
    pub(super) async fn statement_concern(
        &mut self,
        event: &Event,
    ) -> Result<Option<String>, FaucetError> {
        if event.header().event_type_raw() != mysql_async::binlog::EventType::QUERY_EVENT as u8 {
            return Ok(None);
        }
        let Ok(q) = event.read_event::<QueryEvent<'_>>() else {
            return Ok(None);
        };
        let sql = q.query();
        let target = match statement::classify(&sql) {
            Statement::Dml(target) => target,
            Statement::Begin | Statement::Commit | Statement::Rollback | Statement::Xa => {
                return Ok(None);
            }
            _ => {
                self.scope.forget();
                return Ok(None);
            }
        };
        if self.catalog_conn.is_none() {
            self.catalog_conn = Some(self.connection.connect().await?);
        }
        let Some(conn) = self.catalog_conn.as_mut() else {
            return Ok(None);
        };
        let result = self
            .scope
            .concerns(conn, &self.decoder, &q.schema(), &sql, target.as_ref())
            .await;
        if result.is_err() {
            self.catalog_conn = None;
        }
        result
    }
}
