//! The store's two tables: the state table's name, checked when the store is built, the
//! lease table's name derived from it, and every SQL statement the store sends, built once
//! with both names double-quoted ([`TableName::quoted`]).

use faucet_connectors::postgres::ident::{MAX_IDENT_BYTES, TableName};
use faucet_core::FaucetError;

/// The longest PostgreSQL identifier, in bytes (`NAMEDATALEN - 1`).
pub(crate) const MAX_IDENT_LEN: usize = MAX_IDENT_BYTES;

const LEASE_SUFFIX: &str = "_lease";

/// Checks a state table name by seed 004's rule ("Validated identifiers": 1 to 63 ASCII
/// letters, digits or `_`), before any SQL is sent: PostgreSQL's one table-name rule of
/// faucet, [`TableName::parse_plain`].
///
/// # Errors
/// [`FaucetError::Config`] on field `table`, saying what is wrong with which name.
pub fn validate_table_name(table: &str) -> Result<(), FaucetError> {
    TableName::parse_plain(table, "table").map(drop)
}

/// The lease table that goes with state table `table`: `<table>_lease`. When that would be
/// longer than 63 bytes (PostgreSQL would truncate it, and a 63-character state table
/// would then share its name with its own lease table), the name is the first 48
/// characters, `_`, 8 hex digits of a 32-bit FNV-1a hash of the full name, and `_lease` —
/// stable across releases, and distinct for long names that share a prefix.
pub(crate) fn lease_table_name(table: &str) -> String {
    if table.len() + LEASE_SUFFIX.len() <= MAX_IDENT_LEN {
        return format!("{table}{LEASE_SUFFIX}");
    }
    let hash = table.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    // `table` is validated ASCII, so byte slicing is on a character boundary.
    let head = &table[..MAX_IDENT_LEN - LEASE_SUFFIX.len() - 9];
    format!("{head}_{hash:08x}{LEASE_SUFFIX}")
}

/// Every statement of the store, with the table names quoted in.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) table: String,
    pub(crate) lease_table: String,
    pub(crate) create_state: String,
    pub(crate) create_lease: String,
    pub(crate) get: String,
    pub(crate) get_with_time: String,
    pub(crate) put: String,
    pub(crate) delete: String,
    pub(crate) acquire: String,
    pub(crate) live_holder: String,
    pub(crate) lease_row: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) put_fenced: String,
}

impl Statements {
    /// Validates `table` and builds the statements for it and its lease table.
    ///
    /// # Errors
    /// [`FaucetError::Config`] when `table` is not a valid name (see [`validate_table_name`]).
    pub(crate) fn new(table: &str) -> Result<Self, FaucetError> {
        let name = TableName::parse_plain(table, "table")?;
        let lease_table = lease_table_name(table);
        let t = name.quoted();
        let l = name.sibling(&lease_table).quoted();
        Ok(Self {
            create_state: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n    \
                 key        TEXT        PRIMARY KEY,\n    \
                 value      JSONB       NOT NULL,\n    \
                 updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW()\n)"
            ),
            create_lease: format!(
                "CREATE TABLE IF NOT EXISTS {l} (\n    \
                 key        TEXT        PRIMARY KEY,\n    \
                 holder_id  TEXT        NOT NULL,\n    \
                 holder     JSONB       NOT NULL,\n    \
                 fence      BIGINT      NOT NULL,\n    \
                 expires_at TIMESTAMPTZ NOT NULL\n)"
            ),
            get: format!("SELECT value FROM {t} WHERE key = $1"),
            get_with_time: format!(
                "SELECT value, EXTRACT(EPOCH FROM updated_at)::float8 FROM {t} WHERE key = $1"
            ),
            put: format!(
                "INSERT INTO {t} (key, value, updated_at) VALUES ($1, $2, now()) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, \
                 updated_at = EXCLUDED.updated_at"
            ),
            delete: format!("DELETE FROM {t} WHERE key = $1"),
            // One atomic statement: a new key gets fence 1; an existing row is taken over
            // (fence + 1) only when it has expired or is already this holder's.
            acquire: format!(
                "INSERT INTO {l} AS l (key, holder_id, holder, fence, expires_at) \
                 VALUES ($1, $2, $3, 1, now() + make_interval(secs => $4)) \
                 ON CONFLICT (key) DO UPDATE SET holder_id = EXCLUDED.holder_id, \
                 holder = EXCLUDED.holder, fence = l.fence + 1, \
                 expires_at = EXCLUDED.expires_at \
                 WHERE l.expires_at < now() OR l.holder_id = EXCLUDED.holder_id \
                 OR l.holder_id = $5 \
                 RETURNING fence"
            ),
            live_holder: format!("SELECT holder FROM {l} WHERE key = $1 AND expires_at >= now()"),
            lease_row: format!(
                "SELECT holder_id, fence, holder, expires_at >= now() FROM {l} WHERE key = $1"
            ),
            renew: format!(
                "UPDATE {l} SET expires_at = now() + make_interval(secs => $4) \
                 WHERE key = $1 AND holder_id = $2 AND fence = $3 AND expires_at >= now()"
            ),
            release: format!(
                "UPDATE {l} SET expires_at = '-infinity' \
                 WHERE key = $1 AND holder_id = $2 AND fence = $3"
            ),
            // The lease row is locked (FOR UPDATE) for the statement, so a concurrent
            // acquisition waits for it and then sees the new bookmark; a stale holder's
            // CTE is empty and nothing is written.
            put_fenced: format!(
                "WITH l AS (SELECT 1 FROM {l} WHERE key = $5 AND holder_id = $3 \
                 AND fence = $4 AND expires_at >= now() FOR UPDATE) \
                 INSERT INTO {t} (key, value, updated_at) SELECT $1::text, $2::jsonb, now() \
                 FROM l ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, \
                 updated_at = EXCLUDED.updated_at"
            ),
            table: table.to_owned(),
            lease_table,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_postgres_identifier_rules() {
        for ok in ["faucet_state", "S", "_x9", "9lives", &"t".repeat(63)] {
            assert!(Statements::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_with_the_name_and_the_rule() {
        for (bad, why) in [
            ("faucet_state; DROP TABLE x", "contains ';'"),
            ("", "is empty"),
            (&"t".repeat(64), "64 characters"),
            ("a.b", "contains '.'"),
            ("a\"b", "contains '\"'"),
            ("é", "contains 'é'"),
        ] {
            let err = Statements::new(bad).expect_err(bad);
            assert!(matches!(err, FaucetError::Config { .. }), "{err:?}");
            let msg = err.to_string();
            assert!(msg.contains(why) && msg.contains("table"), "{msg}");
        }
    }

    #[test]
    fn lease_table_names_stay_within_63_and_distinct() {
        assert_eq!(lease_table_name("faucet_state"), "faucet_state_lease");
        let at_limit = "t".repeat(57);
        assert_eq!(lease_table_name(&at_limit), format!("{at_limit}_lease"));
        let a = format!("{}a", "t".repeat(62));
        let b = format!("{}b", "t".repeat(62));
        let (la, lb) = (lease_table_name(&a), lease_table_name(&b));
        assert!(la.len() <= MAX_IDENT_LEN && lb.len() <= MAX_IDENT_LEN);
        assert_ne!(la, lb);
        assert_ne!(la, a);
        assert!(la.ends_with("_lease"));
        assert!(validate_table_name(&la).is_ok());
    }

    #[test]
    fn statements_quote_the_names() {
        let s = Statements::new("Mixed_Case").expect("valid");
        assert!(s.get.contains("FROM \"Mixed_Case\""), "{}", s.get);
        assert!(s.acquire.contains("\"Mixed_Case_lease\""), "{}", s.acquire);
    }
}
