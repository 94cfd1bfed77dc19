//! How the mysql sink applies change records: through the one contract of
//! [`faucet_core::change`], with the key identity of a value's JSON form (types apart:
//! `1` and `"1"` are two keys).
//!
//! A table that `create_table` made compares text keys byte for byte (a binary NO PAD
//! collation, `table::nopad_binary_collation`: trailing spaces count), as
//! this identity does. An existing table whose key is a case- or accent-insensitive text
//! column holds `A` and `a` as one row: two such keys in one page are two slots here, and the
//! later slot's row wins in the table.

use faucet_core::change::{self, Collapsed};
use faucet_core::{FaucetError, Page};

use crate::sql::sink::keys::JsonKeys;

use super::config::CONNECTOR;

/// Collapses `page` by `key` ([`faucet_core::change::collapse`]). `source_table` remembers
/// the `table` of the change records seen by this writer: one sink table takes the changes of
/// one source table.
///
/// # Errors
/// [`FaucetError::Data`] naming the page row when a record lacks a key column, has an
/// unknown `op`, or comes from another source table than earlier records.
pub(crate) fn collapse<'a>(
    page: &'a Page,
    key: &[String],
    target: &str,
    source_table: &mut Option<String>,
) -> Result<Collapsed<'a>, FaucetError> {
    change::collapse(page, key, CONNECTOR, target, source_table, &mut JsonKeys)
}
