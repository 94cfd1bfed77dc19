//! Helpers shared by the SQL connectors and state stores.

/// Quotes `ident` as a PostgreSQL identifier: wrapped in double quotes, with every `"`
/// doubled (PostgreSQL manual, "Identifiers and Key Words"). `quote_ident("a\"b")` is
/// `"a""b"`. Callers validate names first; quoting keeps any name from being read as SQL.
pub fn quote_ident(ident: &str) -> String {
    let mut out = String::with_capacity(ident.len() + 2);
    out.push('"');
    for c in ident.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Quotes a possibly schema-qualified name (`schema.table`), each part by [`quote_ident`].
pub fn quote_qualified(name: &str) -> String {
    name.split('.')
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(".")
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
    }
}
