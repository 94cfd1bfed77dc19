//! SQL identifier quoting and qualified names, shared by the SQL connectors (and, through
//! `faucet_connectors::postgres` names, the PostgreSQL state store; and the tests).

/// Quotes `ident` as a PostgreSQL identifier: wrapped in double quotes, with every `"`
/// doubled (PostgreSQL manual, "Identifiers and Key Words"). `quote_ident("a\"b")` is
/// `"a""b"`. Callers validate names first; quoting keeps any name from being read as SQL.
pub fn quote_ident(ident: &str) -> String {
    quote_ident_with(ident, '"')
}

/// Quotes `ident` between two `quote` characters, every `quote` inside doubled: `"` for
/// PostgreSQL ([`quote_ident`]), `` ` `` for MySQL/MariaDB (MySQL manual, "Schema Object
/// Names": `` `a``b` ``). Callers validate names first.
pub fn quote_ident_with(ident: &str, quote: char) -> String {
    let mut out = String::with_capacity(ident.len() + 2);
    out.push(quote);
    for c in ident.chars() {
        if c == quote {
            out.push(quote);
        }
        out.push(c);
    }
    out.push(quote);
    out
}

/// Quotes a possibly schema-qualified name (`schema.table`), each part by [`quote_ident`].
pub fn quote_qualified(name: &str) -> String {
    name.split('.')
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(".")
}

/// Splits a configured table name into its optional container (`schema` in PostgreSQL,
/// `database` in MySQL: `container` names it in the message) and the table: `a.b` or `b`.
/// The parts are not validated (each system has its own identifier rules).
///
/// # Errors
/// [`faucet_core::FaucetError::Config`] at `field` for a name with more than one `.`.
pub fn split_qualified<'a>(
    name: &'a str,
    field: &str,
    container: &str,
) -> Result<(Option<&'a str>, &'a str), faucet_core::FaucetError> {
    let mut parts = name.split('.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(table), None, _) => Ok((None, table)),
        (Some(outer), Some(table), None) => Ok((Some(outer), table)),
        _ => Err(faucet_core::FaucetError::config(
            field,
            format!(
                "`{name}` is not `table` or `{container}.table` (a name holding a `.` cannot \
                 be configured)"
            ),
        )),
    }
}

/// Parses a configured table name, `a.b` or `b` ([`split_qualified`]), checking each part
/// by the system's rule `validate(part, field)`: the one parse of the SQL connectors'
/// `TableName`s (`postgres::ident`, `mysql::table`).
///
/// # Errors
/// [`faucet_core::FaucetError::Config`] at `field`, from [`split_qualified`] or `validate`.
pub(crate) fn parse_table(
    name: &str,
    field: &str,
    container: &str,
    validate: fn(&str, &str) -> Result<(), faucet_core::FaucetError>,
) -> Result<(Option<String>, String), faucet_core::FaucetError> {
    let (outer, table) = split_qualified(name, field, container)?;
    for part in outer.iter().chain(std::iter::once(&table)) {
        validate(part, field)?;
    }
    Ok((outer.map(str::to_owned), table.to_owned()))
}

/// Refuses a table name without its container (`postgres-cdc`'s and `mysql-cdc`'s `tables`):
/// `Ok` when `name` holds a `.`.
///
/// # Errors
/// [`faucet_core::FaucetError::Config`] at `field` with the text `why` gives.
pub(crate) fn require_qualified(
    name: &str,
    field: &str,
    why: impl FnOnce() -> String,
) -> Result<(), faucet_core::FaucetError> {
    if name.contains('.') {
        return Ok(());
    }
    Err(faucet_core::FaucetError::config(field, why()))
}

/// A table name's quoted SQL form, each part between `quote`s ([`quote_ident_with`]):
/// `"a"."b"` / `` `a`.`b` ``, or the table alone.
pub(crate) fn quote_table(outer: Option<&str>, table: &str, quote: char) -> String {
    match outer {
        Some(o) => format!(
            "{}.{}",
            quote_ident_with(o, quote),
            quote_ident_with(table, quote)
        ),
        None => quote_ident_with(table, quote),
    }
}

/// Writes a table name unquoted, `a.b` or `b` (the `Display` of the `TableName`s).
///
/// # Errors
/// As [`std::fmt::Formatter::write_str`].
pub(crate) fn write_table(
    f: &mut std::fmt::Formatter<'_>,
    outer: Option<&str>,
    table: &str,
) -> std::fmt::Result {
    match outer {
        Some(o) => write!(f, "{o}.{table}"),
        None => f.write_str(table),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_and_doubles() {
        assert_eq!(quote_ident("faucet_state"), "\"faucet_state\"");
        assert_eq!(
            quote_ident("a\"b; DROP TABLE x"),
            "\"a\"\"b; DROP TABLE x\""
        );
        assert_eq!(quote_qualified("public.orders"), "\"public\".\"orders\"");
        assert_eq!(
            split_qualified("public.orders", "f", "schema").expect("ok"),
            (Some("public"), "orders")
        );
        assert_eq!(
            split_qualified("orders", "f", "schema").expect("ok"),
            (None, "orders")
        );
        let err = split_qualified("a.b.c", "f", "database").expect_err("two dots");
        assert!(err.to_string().contains("`database.table`"), "{err}");
        assert_eq!(quote_ident_with("a`b", '`'), "`a``b`");
    }
}
