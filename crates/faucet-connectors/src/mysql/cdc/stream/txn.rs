//! A transaction's bounds in the binlog stream: where one begins (its GTID, skipping what a
//! resume inside it delivered before), where it commits (the position, the GTID state, a
//! carried-over stream settling on this server's terms), and the event boundaries between
//! transactions that become the position.

use std::time::{Duration, SystemTime};

use faucet_core::FaucetError;

use super::super::CONNECTOR;
use super::super::changes::{TxnContext, commit_ts_text};
use super::super::position::{BinlogPos, MariadbGtid};
use super::errors::protocol;
use super::{CdcPageStream, PendingGtid, Txn};

impl CdcPageStream {
    /// Between transactions, an event boundary further on in the same file becomes the
    /// position (a resume from it loses nothing).
    pub(super) fn advance_between(&mut self, end: u64) {
        if self.txn.is_none()
            && self.pending_gtid.is_none()
            && self.resume.is_none()
            && self.carry.is_none()
            && end > self.position.pos
            && self.file == self.position.file
        {
            self.position.pos = end;
        }
    }

    /// Opens the transaction `g` announced: its context for the records, and how many of its
    /// changes a resume inside it skips (delivered before).
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when the bookmark's transaction is not the one found at its
    /// place (or, carried over, by its GTID).
    pub(super) fn begin(&mut self, g: PendingGtid) -> Result<(), FaucetError> {
        let mut skip = 0;
        let parsed = g.gtid.as_deref().and_then(MariadbGtid::parse);
        if let Some(c) = self.carry.as_mut()
            && let Some(p) = parsed
        {
            c.unpassed.remove(&p.domain);
        }
        if let Some(r) = self.resume.take() {
            if self.carry.is_some() {
                // Carried over: the transaction is found by its GTID (offsets differ).
                if r.gtid.is_none() || r.gtid != g.gtid {
                    return Err(FaucetError::bookmark(
                        CONNECTOR,
                        format!(
                            "the bookmark is inside transaction {} of the server it was made \
                             on; carried over by GTID, this server's first transaction after \
                             the state before it is {} (at {}:{}): it orders the transactions \
                             of several domains differently, or its history differs. Point \
                             connection_url back at that server to finish the transaction",
                            r.gtid.as_deref().unwrap_or("none"),
                            g.gtid.as_deref().unwrap_or("one without a GTID"),
                            self.file,
                            g.start
                        ),
                        None,
                    ));
                }
            } else if g.start != r.start_pos || (r.gtid.is_some() && r.gtid != g.gtid) {
                return Err(FaucetError::bookmark(
                    CONNECTOR,
                    format!(
                        "the bookmark is inside the transaction at {}:{} (GTID {}), but the \
                         server's binlog has a transaction at {}:{} (GTID {}) there: the \
                         bookmark does not belong to this server's binlog; delete the state and \
                         re-snapshot the tables",
                        self.file,
                        r.start_pos,
                        r.gtid.as_deref().unwrap_or("none"),
                        self.file,
                        g.start,
                        g.gtid.as_deref().unwrap_or("none")
                    ),
                    None,
                ));
            }
            skip = r.skip;
        }
        self.txn = Some(Txn {
            ctx: TxnContext {
                file: self.file.as_str().into(),
                start_pos: g.start,
                gtid: g.gtid.map(Into::into),
                commit_ts: commit_ts_text(g.commit_us),
            },
            units: 0,
            skip,
            standalone: g.standalone,
            delivered: self.decoder.delivered(),
        });
        self.position_time = Some(SystemTime::UNIX_EPOCH + Duration::from_micros(g.commit_us));
        Ok(())
    }

    /// Closes the open transaction at the commit event ending at `end`: the GTID state moves
    /// past it, and so does the position — on a carried-over stream only where it settles
    /// (MariaDB: `settle_at`; a MySQL carry never settles).
    ///
    /// # Errors
    /// [`FaucetError::Read`] (an unexpected binlog stream) for a commit outside a transaction
    /// or with changes not delivered;
    /// [`FaucetError::Bookmark`] when a resume's bookmark said more of the transaction's
    /// changes were delivered than it has.
    pub(super) fn commit(&mut self, end: u64) -> Result<(), FaucetError> {
        let txn = self
            .txn
            .take()
            .ok_or_else(|| protocol("a commit outside a transaction"))?;
        if !self.pending.is_empty() {
            return Err(protocol("a commit with changes not delivered"));
        }
        if txn.skip > txn.units {
            // The bookmark said more of its changes were delivered than it has: resuming
            // past it would drop the ones never delivered without a word.
            return Err(FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "the bookmark's `in_txn.skip` says the first {} row changes of the \
                     transaction at {}:{} (GTID {}) were delivered, but it has only {} of \
                     the listed tables: the state was edited, or `tables` changed while a \
                     run was inside that transaction. Restore the state or the `tables` \
                     list it was made with, or delete this pipeline's state and \
                     re-snapshot the tables",
                    txn.skip,
                    self.file,
                    txn.ctx.start_pos,
                    txn.ctx
                        .gtid
                        .as_ref()
                        .map_or_else(|| "none".to_owned(), ToString::to_string),
                    txn.units,
                ),
                None,
            ));
        }
        self.gtid = txn.ctx.gtid.map(|g| g.to_string());
        if let (Some(state), Some(g)) = (
            self.gtid_state.as_mut(),
            self.gtid.as_deref().and_then(MariadbGtid::parse),
        ) {
            state.apply(g);
        }
        self.add_to_gtid_set();
        if let Some(c) = self.carry.take_if(|c| c.settles && c.unpassed.is_empty()) {
            // Every domain of the starting state passed: from here on, this server's terms.
            tracing::info!(
                source = CONNECTOR,
                server_id = c.server.server_id,
                at = %BinlogPos::new(self.file.clone(), end),
                "the carried-over stream settled on this server's binlog position"
            );
            self.server = c.server;
        }
        match &self.carry {
            None => self.position = BinlogPos::new(self.file.clone(), end),
            Some(c) if c.settles => self.settle_at = Some(BinlogPos::new(self.file.clone(), end)),
            Some(_) => {}
        }
        Ok(())
    }
}
