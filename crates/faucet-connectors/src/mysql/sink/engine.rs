//! The refusal of a target whose storage engine cannot roll a page back (MyISAM, Aria,
//! MEMORY, a view): how it is worded for effectively-once (a delivery error) and for any
//! other write (a config error at `table`), with the fix.

use faucet_core::FaucetError;
use faucet_core::delivery::{DeliveryError, LimitingSide};

use super::config::CONNECTOR;
use super::table;
use crate::mysql::table::TableName;

/// A target table whose engine is not transactional (MyISAM, Aria, MEMORY, a view): a
/// ROLLBACK keeps its rows, so neither a page's all-or-nothing nor the atomic watermark holds.
#[derive(Debug, Clone)]
pub(super) struct NotTransactional {
    table: TableName,
    /// `uses the MyISAM engine` / `is a view (or has no engine)`.
    what: String,
}

impl NotTransactional {
    pub(super) fn new(table: &TableName, engine: &table::Engine) -> Self {
        let what = if engine.name.is_empty() {
            "is a view (or has no engine), which faucet cannot write in a transaction".to_owned()
        } else {
            format!(
                "uses the {} engine, which is not transactional",
                engine.name
            )
        };
        Self {
            table: table.clone(),
            what,
        }
    }

    fn fix(&self) -> String {
        format!(
            "convert it (`ALTER TABLE {} ENGINE=InnoDB`) or write into an InnoDB table",
            self.table.quoted()
        )
    }

    /// The refusal when effectively-once was asked: [`FaucetError::Delivery`].
    pub(super) fn for_effectively_once(&self) -> FaucetError {
        DeliveryError::Unsatisfiable {
            side: LimitingSide::Sink,
            connector: CONNECTOR.to_owned(),
            reason: format!(
                "table {} {}: no commit token can commit with its rows, and a page that fails \
                 halfway would stay half-written",
                self.table, self.what
            ),
            fix: self.fix(),
        }
        .into()
    }

    /// The refusal for any other delivery (and `faucet doctor`): [`FaucetError::Config`] at
    /// `table` — this sink commits every page whole or not at all, which such a table
    /// cannot do.
    pub(super) fn for_writes(&self) -> FaucetError {
        FaucetError::config(
            "table",
            format!(
                "table {} {}: a page that fails halfway (a value a column cannot hold, a lost \
                 connection) would stay half-written, and this sink commits a page whole or \
                 not at all; {}; nothing was written",
                self.table,
                self.what,
                self.fix()
            ),
        )
    }
}
