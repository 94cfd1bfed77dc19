//! Connection and naming rules shared by the `postgres` query source and the `postgres` sink:
//! the connection URL (a secret, never printed), opening a session with
//! [`SESSION_SETUP`](super::types::SESSION_SETUP), identifier validation, and the mapping of
//! driver errors to [`FaucetError`]s that never carry the URL.

use std::str::FromStr;

use secrecy::{ExposeSecret, SecretString};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgDatabaseError};
use sqlx::{ConnectOptions, Executor as _};

use faucet_core::FaucetError;

use super::types::SESSION_SETUP;

/// The connector name of the query source and the sink, used in errors.
pub(crate) const CONNECTOR: &str = "postgres";

/// The longest PostgreSQL identifier, in bytes (`NAMEDATALEN - 1`).
pub(crate) const MAX_IDENT_BYTES: usize = 63;

/// Parses `url` (`postgres://user:password@host:port/database?...`) without ever putting it
/// in an error message. Sessions are named `faucet` (`application_name`) unless the URL sets
/// `?application_name=...`.
///
/// # Errors
/// [`FaucetError::Config`] at `field` when the URL cannot be parsed; the message says what
/// is wrong, not what the URL is.
pub(crate) fn parse_url(url: &SecretString, field: &str) -> Result<PgConnectOptions, FaucetError> {
    let text = url.expose_secret();
    if text.trim().is_empty() {
        return Err(FaucetError::config(field, "must not be empty"));
    }
    if !(text.starts_with("postgres://") || text.starts_with("postgresql://")) {
        return Err(FaucetError::config(
            field,
            "must be a URL starting with `postgres://` or `postgresql://`",
        ));
    }
    PgConnectOptions::from_str(text)
        .map(|o| {
            // Sessions show up as `faucet` in pg_stat_activity unless the URL names them
            // (`?application_name=...`).
            let named = o.get_application_name().is_some();
            let o = o.disable_statement_logging();
            if named {
                o
            } else {
                o.application_name("faucet")
            }
        })
        .map_err(|e| {
            // sqlx's parse errors describe the part at fault, never echoing the password;
            // still, only the error kind is shown.
            let kind = match e {
                sqlx::Error::Configuration(_) => "malformed connection URL",
                _ => "unusable connection URL",
            };
            FaucetError::config(field, format!("{kind} (the URL itself is not shown)"))
        })
}

/// `user@host:port/database` — the URL without its password, for messages and logs.
pub(crate) fn describe(options: &PgConnectOptions) -> String {
    format!(
        "{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("")
    )
}

/// Opens one session and runs [`SESSION_SETUP`] on it.
///
/// # Errors
/// [`FaucetError::Connect`] naming `user@host:port/database` (never the password), with the
/// driver's error as the source.
pub(crate) async fn connect(options: &PgConnectOptions) -> Result<PgConnection, FaucetError> {
    let where_ = describe(options);
    let mut conn = options.connect().await.map_err(|e| {
        FaucetError::connect(
            CONNECTOR,
            format!("PostgreSQL at {where_}"),
            Some(Box::new(e)),
        )
    })?;
    // A plain string runs as a simple query: several statements in one round trip.
    (&mut conn).execute(SESSION_SETUP).await.map_err(|e| {
        FaucetError::connect(
            CONNECTOR,
            format!("session setup failed on {where_}"),
            Some(Box::new(e)),
        )
    })?;
    Ok(conn)
}

/// A validated table name: an optional schema and the table, each checked by
/// [`validate_ident`] (1 to 63 bytes, no NUL, no `.`). This is the one table-name rule of
/// every PostgreSQL connector (query source, sink, `postgres-cdc`, `faucet replicate`).
/// Names are matched exactly (case-sensitively) against the catalog and always quoted
/// ([`faucet_core::util::quote_ident`]), so any name PostgreSQL stores works — non-ASCII,
/// spaces, quotes, `;` — and a table created as `Orders` without quotes is stored, and must
/// be configured, as `orders`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TableName {
    /// The schema, when the name was qualified.
    pub(crate) schema: Option<String>,
    /// The table.
    pub(crate) table: String,
}

impl TableName {
    /// Parses `schema.table` or `table`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field` naming the offending part.
    pub(crate) fn parse(name: &str, field: &str) -> Result<Self, FaucetError> {
        let parts: Vec<&str> = name.split('.').collect();
        let (schema, table) = match parts.as_slice() {
            [table] => (None, *table),
            [schema, table] => (Some(*schema), *table),
            _ => {
                return Err(FaucetError::config(
                    field,
                    format!(
                        "`{name}` is not `table` or `schema.table` (a name holding a `.` \
                         cannot be configured)"
                    ),
                ));
            }
        };
        for part in schema.iter().chain(std::iter::once(&table)) {
            validate_ident(part, field)?;
        }
        Ok(Self {
            schema: schema.map(str::to_owned),
            table: table.to_owned(),
        })
    }

    /// Parses `schema.table`, the schema required (`postgres-cdc`'s `tables`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field` for an unqualified or invalid name.
    pub(crate) fn parse_qualified(name: &str, field: &str) -> Result<Self, FaucetError> {
        if !name.contains('.') {
            return Err(FaucetError::config(
                field,
                format!(
                    "`{name}` is not schema-qualified; write it as `schema.table`, e.g. \
                     `public.{name}`"
                ),
            ));
        }
        Self::parse(name, field)
    }

    /// The quoted SQL form: `"schema"."table"` or `"table"`.
    pub(crate) fn quoted(&self) -> String {
        use faucet_core::util::quote_ident;
        match &self.schema {
            Some(s) => format!("{}.{}", quote_ident(s), quote_ident(&self.table)),
            None => quote_ident(&self.table),
        }
    }

    /// A sibling table in the same schema (`faucet_commit_tokens` beside the target).
    pub(crate) fn sibling(&self, table: &str) -> Self {
        Self {
            schema: self.schema.clone(),
            table: table.to_owned(),
        }
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

/// Checks one schema or table name: 1 to [`MAX_IDENT_BYTES`] bytes (PostgreSQL would
/// silently truncate a longer one), without NUL (PostgreSQL cannot store it) and without
/// `.` (the separator of `schema.table`). Any other character is allowed: names are
/// always quoted.
///
/// # Errors
/// [`FaucetError::Config`] at `field`, naming the name, its byte length and the limit.
pub(crate) fn validate_ident(ident: &str, field: &str) -> Result<(), FaucetError> {
    if ident.is_empty() || ident.contains(['\0', '.']) {
        return Err(FaucetError::config(
            field,
            format!(
                "`{ident}` is not a valid name: a schema or table name is 1 to \
                 {MAX_IDENT_BYTES} bytes without NUL or `.` (any other character works; \
                 names are quoted and case-sensitive)"
            ),
        ));
    }
    check_ident_length(ident, field, "name")
}

/// Checks that `ident` fits PostgreSQL's identifier limit (`NAMEDATALEN - 1` =
/// [`MAX_IDENT_BYTES`] bytes); `what` names it in the message ("name", "field").
///
/// # Errors
/// [`FaucetError::Config`] at `field` naming the identifier, its byte length and the limit.
pub(crate) fn check_ident_length(ident: &str, field: &str, what: &str) -> Result<(), FaucetError> {
    if ident.len() > MAX_IDENT_BYTES {
        return Err(FaucetError::config(
            field,
            format!(
                "{what} `{ident}` is {} bytes, longer than PostgreSQL's limit of \
                 {MAX_IDENT_BYTES} bytes (NAMEDATALEN - 1), which would truncate it; use a \
                 shorter name",
                ident.len()
            ),
        ));
    }
    Ok(())
}

/// Checks a column name given in a config (a key column): any text of 1 to 63 bytes
/// without NUL; it is always quoted, so any such name is safe and matched exactly.
///
/// # Errors
/// [`FaucetError::Config`] at `field`.
pub(crate) fn validate_column(name: &str, field: &str) -> Result<(), FaucetError> {
    if name.is_empty() || name.contains('\0') {
        return Err(FaucetError::config(
            field,
            format!("`{name}` must be 1 to {MAX_IDENT_BYTES} bytes without NUL"),
        ));
    }
    check_ident_length(name, field, "column")
}

/// The server's error, when `e` is one (SQLSTATE, message, detail, context).
pub(crate) fn db_error(e: &sqlx::Error) -> Option<&PgDatabaseError> {
    match e {
        sqlx::Error::Database(d) => d.try_downcast_ref::<PgDatabaseError>(),
        _ => None,
    }
}

/// Whether `e` means the session is gone (I/O, protocol, or the server ending it: SQLSTATE
/// class 08 connection exception, 57P01..57P03 shutdown), so the outcome of a statement in
/// flight is unknown and the session must not be used again.
pub(crate) fn is_connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(_) => db_error(e).is_some_and(|d| {
            let code = d.code();
            code.starts_with("08") || code.starts_with("57P")
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        let t = TableName::parse("public.orders", "f").expect("ok");
        assert_eq!(t.quoted(), "\"public\".\"orders\"");
        assert_eq!(t.to_string(), "public.orders");
        assert_eq!(
            TableName::parse("Orders_$1", "f").expect("ok").quoted(),
            "\"Orders_$1\""
        );
        for odd in ["1abc", "a b", "a;drop", "\"x\"", "Bestellungen_ü"] {
            let t = TableName::parse(&format!("s.{odd}"), "f").expect(odd);
            assert_eq!(t.table, odd);
        }
        assert_eq!(
            TableName::parse("s.a\"b", "f").expect("ok").quoted(),
            "\"s\".\"a\"\"b\""
        );
        for bad in [
            "",
            "a.b.c",
            "a.",
            ".a",
            "a\0b",
            &"x".repeat(64),
            &"é".repeat(32),
        ] {
            assert!(TableName::parse(bad, "f").is_err(), "{bad}");
        }
        assert!(TableName::parse(&"é".repeat(31), "f").is_ok());
        assert!(TableName::parse_qualified("orders", "f").is_err());
        assert_eq!(
            t.sibling("faucet_commit_tokens").quoted(),
            "\"public\".\"faucet_commit_tokens\""
        );
    }

    #[test]
    fn urls_are_never_echoed() {
        let secret = SecretString::from("postgres://u:hunter2@[::1:5432/db");
        let err = parse_url(&secret, "connection_url").expect_err("bad");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err = parse_url(&SecretString::from("mysql://u:hunter2@h/db"), "f").expect_err("bad");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let ok = parse_url(&SecretString::from("postgres://u:hunter2@h:5433/db"), "f").expect("ok");
        assert_eq!(describe(&ok), "u@h:5433/db");
    }
}
