//! MySQL/MariaDB object names: [`TableName`] (`db.table` or `table`) and the checks of a
//! configured column name, one rule for every MySQL connector. Names are always quoted with
//! backticks ([`quote_ident`]), so any name the server stores works (spaces, `;`, quotes,
//! non-ASCII) and no name can be read as SQL.

use faucet_core::FaucetError;

use crate::sql::ident;

/// The longest MySQL/MariaDB database, table or column name, in characters (MySQL manual,
/// "Identifier Length Limits").
pub const MAX_IDENT_CHARS: usize = 64;

/// `ident` between backticks, every backtick doubled: `` a`b `` → `` `a``b` ``.
pub fn quote_ident(ident: &str) -> String {
    ident::quote_ident_with(ident, '`')
}

/// A validated table name: an optional database and the table, each checked by
/// [`validate_ident`]. Displayed as `db.table`; quoted as `` `db`.`table` ``. Whether names
/// are case-sensitive is the server's `lower_case_table_names`; they are passed as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    /// The database, when the name was qualified.
    pub database: Option<String>,
    /// The table.
    pub table: String,
}

impl TableName {
    /// Parses `db.table` or `table`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field` naming the offending part.
    pub fn parse(name: &str, field: &str) -> Result<Self, FaucetError> {
        let (database, table) = ident::parse_table(name, field, "database", validate_ident)?;
        Ok(Self { database, table })
    }

    /// Parses `db.table`, the database required (`mysql-cdc`'s `tables`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field` for an unqualified or invalid name.
    pub fn parse_qualified(name: &str, field: &str) -> Result<Self, FaucetError> {
        ident::require_qualified(name, field, || {
            format!("`{name}` names no database; write it as `database.{name}`")
        })?;
        Self::parse(name, field)
    }

    /// The name with `database` filled in when it was not qualified.
    pub fn qualified_in(&self, database: &str) -> Self {
        Self {
            database: Some(self.database.clone().unwrap_or_else(|| database.to_owned())),
            table: self.table.clone(),
        }
    }

    /// The quoted SQL form: `` `db`.`table` `` or `` `table` ``.
    pub fn quoted(&self) -> String {
        ident::quote_table(self.database.as_deref(), &self.table, '`')
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        ident::write_table(f, self.database.as_deref(), &self.table)
    }
}

/// Checks one database or table name: 1 to [`MAX_IDENT_CHARS`] characters, no NUL (the
/// server rejects it), no `.` (the separator), not ending in a space (the server rejects
/// it). Any other character works: names are always quoted.
///
/// # Errors
/// [`FaucetError::Config`] at `field` naming the name and the rule.
pub fn validate_ident(ident: &str, field: &str) -> Result<(), FaucetError> {
    if ident.is_empty() || ident.contains(['\0', '.']) || ident.ends_with(' ') {
        return Err(FaucetError::config(
            field,
            format!(
                "`{ident}` is not a valid name: a database or table name is 1 to \
                 {MAX_IDENT_CHARS} characters without NUL or `.`, not ending in a space (any \
                 other character works; names are quoted)"
            ),
        ));
    }
    validate_column(ident, field)
}

/// Checks a column name given in a config (a key column) ([`name_problem`]); always quoted.
///
/// # Errors
/// [`FaucetError::Config`] at `field`.
pub fn validate_column(name: &str, field: &str) -> Result<(), FaucetError> {
    match name_problem(name) {
        None => Ok(()),
        Some(problem) => Err(FaucetError::config(field, problem)),
    }
}

/// Why `name` cannot be a MySQL or MariaDB name (database, table, column), if it cannot:
/// empty, holding NUL, over [`MAX_IDENT_CHARS`] characters, or holding a character outside
/// the Basic Multilingual Plane (names are utf8mb3: an emoji is refused by the server with
/// "Invalid utf8mb4 character string" or an "Illegal mix of collations").
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.contains('\0') {
        return Some(format!(
            "`{name}` must be 1 to {MAX_IDENT_CHARS} characters without NUL"
        ));
    }
    if let Some(c) = name.chars().find(|c| u32::from(*c) > 0xFFFF) {
        return Some(format!(
            "`{name}` holds {c:?}, outside the Basic Multilingual Plane, which no MySQL name \
             can hold"
        ));
    }
    let chars = name.chars().count();
    (chars > MAX_IDENT_CHARS).then(|| {
        format!("`{name}` is {chars} characters, longer than MySQL's limit of {MAX_IDENT_CHARS}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        let t = TableName::parse("shop.orders", "f").expect("ok");
        assert_eq!(t.quoted(), "`shop`.`orders`");
        assert_eq!(t.to_string(), "shop.orders");
        let bare = TableName::parse("Orders $1", "f").expect("ok");
        assert_eq!(bare.quoted(), "`Orders $1`");
        assert_eq!(bare.qualified_in("test").quoted(), "`test`.`Orders $1`");
        assert_eq!(t.qualified_in("test"), t);
        assert_eq!(
            TableName::parse("s.a`b", "f").expect("ok").quoted(),
            "`s`.`a``b`"
        );
        for odd in ["1abc", "a;drop", "\"x\"", "Bestellungen_ü", &"é".repeat(64)] {
            assert_eq!(
                TableName::parse(&format!("s.{odd}"), "f").expect(odd).table,
                odd
            );
        }
        for bad in [
            "",
            "a.b.c",
            "a.",
            ".a",
            "a\0b",
            "trailing ",
            &"x".repeat(65),
            "s.emoji😀",
        ] {
            assert!(
                matches!(TableName::parse(bad, "f"), Err(FaucetError::Config { field, .. }) if field == "f"),
                "{bad}"
            );
        }
        assert!(TableName::parse_qualified("orders", "f").is_err());
        assert!(validate_column("a b`c", "k").is_ok());
        assert!(validate_column("", "k").is_err());
        assert!(validate_column("a😀", "k").is_err());
    }
}
