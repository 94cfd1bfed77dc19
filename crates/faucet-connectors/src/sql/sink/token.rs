//! The commit token of every SQL sink's atomic watermark: one row per scope in
//! `faucet_commit_tokens`, beside the target table, written in the same transaction as a
//! page's rows; the stored sequence only moves forward. Each dialect spells the table and
//! its statements ([`super::SinkDialect::advance_token`]); the scope, the bookmark's stored
//! form and the messages are these, once.
//!
//! The scope is the state key *and* the target table ([`scope`]: `orders::eu -> shop.orders`):
//! two pipelines of the same name writing to two tables of one schema each have their own
//! token, so a run never re-anchors at a token another table's pages committed (which would
//! skip, in this table, everything before it).

use faucet_core::FaucetError;

/// The token table's name, beside the target table.
pub(crate) const TOKENS: &str = "faucet_commit_tokens";

/// The token scope of pages under `state_key` into `target`.
pub(crate) fn scope(state_key: &str, target: &dyn std::fmt::Display) -> String {
    format!("{state_key} -> {target}")
}

/// The bookmark as the token table stores it: its JSON text.
///
/// # Errors
/// [`FaucetError::Write`] of `connector` (a bookmark is always JSON; this does not happen).
pub(crate) fn stored_bookmark(
    connector: &str,
    bookmark: &faucet_core::Bookmark,
) -> Result<String, FaucetError> {
    serde_json::to_string(bookmark).map_err(|e| {
        FaucetError::write(
            connector,
            "cannot serialise the bookmark",
            Some(Box::new(e)),
        )
    })
}

/// The token read back from the table `tokens` of `connector`: its sequence and the
/// bookmark's JSON text.
///
/// # Errors
/// [`FaucetError::Write`] when the text is not JSON.
pub(crate) fn read_back(
    connector: &str,
    (tokens, scope): (&dyn std::fmt::Display, &str),
    sequence: u64,
    bookmark: &str,
) -> Result<faucet_core::CommitToken, FaucetError> {
    let bookmark = serde_json::from_str(bookmark).map_err(|e| {
        FaucetError::write(
            connector,
            format!("the commit token of `{scope}` in {tokens} is not JSON"),
            Some(Box::new(e)),
        )
    })?;
    Ok(faucet_core::CommitToken { sequence, bookmark })
}

/// A sequence as a signed column (`bigint`, SQLite's INTEGER) stored it, read back for
/// `scope` of the table `tokens` of `connector`.
///
/// # Errors
/// [`FaucetError::Write`] for a negative one (not a token this sink wrote).
pub(crate) fn stored_sequence(
    connector: &str,
    (tokens, scope): (&dyn std::fmt::Display, &str),
    sequence: i64,
) -> Result<u64, FaucetError> {
    u64::try_from(sequence).map_err(|_| {
        FaucetError::write(
            connector,
            format!("the commit token of `{scope}` in {tokens} has a negative sequence"),
            None,
        )
    })
}

/// The refusal of a page whose token's sequence is not above the one `tokens` holds for
/// `scope` (`stored`, when the statement told it): a stale or concurrent writer; the page
/// was rolled back.
pub(crate) fn refused(
    connector: &str,
    (tokens, scope): (&dyn std::fmt::Display, &str),
    sequence: u64,
    stored: Option<u64>,
) -> FaucetError {
    let holds = match stored {
        Some(s) => format!("holds sequence {s} (this page's is {sequence})"),
        None => format!("already holds sequence {sequence} or later"),
    };
    FaucetError::write(
        connector,
        format!(
            "commit token for `{scope}` refused: {tokens} {holds}; a stale or concurrent \
             writer; the page was rolled back"
        ),
        None,
    )
}
