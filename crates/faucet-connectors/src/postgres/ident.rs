//! PostgreSQL identifiers: [`TableName`] and the one table-name rule of faucet
//! ([`validate_ident`]: 1 to 63 bytes, no NUL, no `.`; names are always quoted), used by the
//! query source, the sink, `postgres-cdc`, `faucet replicate` and, with the stricter
//! character set of seed 004, by `faucet-state-postgres` ([`TableName::parse_plain`]).

use faucet_core::FaucetError;

use crate::sql::ident;

/// The longest PostgreSQL identifier, in bytes (`NAMEDATALEN - 1`; PostgreSQL manual,
/// "Identifiers and Key Words"). The server silently truncates longer names, so they are
/// rejected instead.
pub const MAX_IDENT_BYTES: usize = 63;

/// A string literal under `standard_conforming_strings = on` (every faucet session sets it,
/// `types::SESSION_SETUP`): quotes doubled, backslashes literal.
pub(crate) fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A validated table name: an optional schema and the table, each checked by
/// [`validate_ident`] (1 to 63 bytes, no NUL, no `.`). This is the one table-name rule of
/// every PostgreSQL connector (query source, sink, `postgres-cdc`, `faucet replicate`).
/// Names are matched exactly (case-sensitively) against the catalog and always quoted
/// ([`crate::sql::ident::quote_ident`]), so any name PostgreSQL stores works — non-ASCII,
/// spaces, quotes, `;` — and a table created as `Orders` without quotes is stored, and must
/// be configured, as `orders`.
///
/// `postgres-cdc` holds its `tables` as `TableName`s made by [`TableName::parse_qualified`]
/// (the schema always present) and matches pgoutput's Relation messages against them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    /// The schema, when the name was qualified.
    pub(crate) schema: Option<String>,
    /// The table.
    pub(crate) name: String,
}

impl TableName {
    /// Parses `schema.table` or `table`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field` naming the offending part.
    pub fn parse(name: &str, field: &str) -> Result<Self, FaucetError> {
        let (schema, name) = ident::parse_table(name, field, "schema", validate_ident)?;
        Ok(Self { schema, name })
    }

    /// Parses `schema.table`, the schema required (`postgres-cdc`'s `tables`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field` for an unqualified or invalid name.
    pub fn parse_qualified(name: &str, field: &str) -> Result<Self, FaucetError> {
        ident::require_qualified(name, field, || {
            format!(
                "`{name}` is not schema-qualified; write it as `schema.table`, e.g. \
                 `public.{name}`"
            )
        })?;
        Self::parse(name, field)
    }

    /// Parses an unqualified name by seed 004's stricter rule for the state store's table
    /// ("Validated identifiers"): 1 to [`MAX_IDENT_BYTES`] characters from `[A-Za-z0-9_]`.
    /// Any such name also passes [`validate_ident`].
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field`, naming the name and what is wrong with it (empty,
    /// too long, the first character outside the set).
    pub fn parse_plain(name: &str, field: &str) -> Result<Self, FaucetError> {
        let fail = |why: String| {
            Err(FaucetError::config(
                field,
                format!("table name {name:?} {why}"),
            ))
        };
        if name.is_empty() {
            return fail(format!(
                "is empty; a table name has 1 to {MAX_IDENT_BYTES} characters from [A-Za-z0-9_]"
            ));
        }
        if name.len() > MAX_IDENT_BYTES {
            return fail(format!(
                "is {} characters long; PostgreSQL identifiers have at most {MAX_IDENT_BYTES}",
                name.len()
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
        {
            return fail(format!(
                "contains {c:?}; allowed are ASCII letters, digits and `_`"
            ));
        }
        Ok(Self {
            schema: None,
            name: name.to_owned(),
        })
    }

    /// The schema, when the name is qualified.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The table's own name, unquoted.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `schema.table` or `table`, unquoted (as change records and messages spell it; the
    /// same text as `Display`).
    pub fn qualified(&self) -> String {
        self.to_string()
    }

    /// The quoted SQL form: `"schema"."table"` or `"table"`.
    pub fn quoted(&self) -> String {
        ident::quote_table(self.schema.as_deref(), &self.name, '"')
    }

    /// A sibling table in the same schema (`faucet_commit_tokens` beside the target, the
    /// state store's lease table).
    pub fn sibling(&self, table: &str) -> Self {
        Self {
            schema: self.schema.clone(),
            name: table.to_owned(),
        }
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        ident::write_table(f, self.schema.as_deref(), &self.name)
    }
}

/// Checks one schema or table name: 1 to [`MAX_IDENT_BYTES`] bytes (PostgreSQL would
/// silently truncate a longer one), without NUL (PostgreSQL cannot store it) and without
/// `.` (the separator of `schema.table`). Any other character is allowed: names are
/// always quoted.
///
/// # Errors
/// [`FaucetError::Config`] at `field`, naming the name, its byte length and the limit.
pub fn validate_ident(ident: &str, field: &str) -> Result<(), FaucetError> {
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
pub fn check_ident_length(ident: &str, field: &str, what: &str) -> Result<(), FaucetError> {
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
pub fn validate_column(name: &str, field: &str) -> Result<(), FaucetError> {
    if name.is_empty() || name.contains('\0') {
        return Err(FaucetError::config(
            field,
            format!("`{name}` must be 1 to {MAX_IDENT_BYTES} bytes without NUL"),
        ));
    }
    check_ident_length(name, field, "column")
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
            assert_eq!(t.name(), odd);
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
    fn plain_names_of_seed_004() {
        for ok in ["faucet_state", "S", "_x9", "9lives", &"t".repeat(63)] {
            let t = TableName::parse_plain(ok, "table").expect(ok);
            assert_eq!((t.schema(), t.name()), (None, ok));
            assert!(TableName::parse(ok, "table").is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("", "is empty"),
            (&"t".repeat(64), "64 characters"),
            ("a.b", "contains '.'"),
            ("a b", "contains ' '"),
            ("é", "contains 'é'"),
        ] {
            let err = TableName::parse_plain(bad, "table").expect_err(bad);
            assert!(err.to_string().contains(why), "{err}");
            assert!(matches!(err, FaucetError::Config { ref field, .. } if field == "table"));
        }
    }
}
