//! Table patterns in a change source's `tables` (`postgres-cdc`, `mysql-cdc`): one grammar,
//! one matcher, for both.
//!
//! An entry of `tables` holding a `*` is a pattern; any other entry is a table name. The
//! grammar, exactly:
//!
//! | entry | matches |
//! |---|---|
//! | `shop.*` | every table of schema (MySQL: database) `shop` |
//! | `shop.order_*` | the tables of `shop` whose name starts with `order_` |
//!
//! * The container (before the one `.`) is a plain name: no `*`, matched exactly,
//!   case-sensitively, as a listed table's is. `*.*` or `*.orders` (every schema) are
//!   refused: name the schemas.
//! * The table part is a prefix followed by one `*`, which ends the entry; the prefix is
//!   matched literally and case-sensitively (no other character is special: `_` and `%`
//!   are themselves). `shop.*x*`, `shop.a*b`, `shop.**`, `*` are refused with the entry named.
//! * Names are never quoted in `tables` (the source quotes them in SQL), so a table whose
//!   name holds a `*` or a `.` cannot be listed or matched.
//!
//! What a pattern matches is each source's to say from its catalog (PostgreSQL: ordinary and
//! partitioned tables, not partitions, views, foreign tables or sequences; MySQL: base tables,
//! not views), at start and, in a continuous run, when the stream first shows a table created
//! later (README, "Table patterns").

use faucet_core::FaucetError;

/// A pattern entry of a change source's `tables`: `container.prefix*` (module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TablePattern {
    /// The schema (PostgreSQL) or database (MySQL) the pattern ranges over.
    pub container: String,
    /// What a matched table's name starts with; empty: every table of `container`.
    pub prefix: String,
}

impl TablePattern {
    /// Parses `entry` of `tables` (at `field`): `Ok(None)` when it holds no `*` (a table
    /// name, for the source's own name rules), the pattern otherwise. `container` names the
    /// part before the `.` in messages (`schema`, `database`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field`, naming the entry and the grammar, for a `*`
    /// anywhere but at the end of the table part, in the container, or without a container.
    pub fn parse(entry: &str, field: &str, container: &str) -> Result<Option<Self>, FaucetError> {
        if !entry.contains('*') {
            return Ok(None);
        }
        let refuse = |why: &str| {
            Err(FaucetError::config(
                field,
                format!(
                    "`{entry}` is not a table pattern faucet matches: {why}. A pattern is \
                     `{container}.*` (every table of the {container}) or \
                     `{container}.prefix_*` (the tables whose name starts with `prefix_`): one \
                     `*`, at the end"
                ),
            ))
        };
        let Some((outer, table)) = entry.split_once('.') else {
            return refuse(&format!("it names no {container}"));
        };
        if outer.contains('*') {
            return refuse(&format!(
                "the {container} part cannot be a pattern; list each {container}"
            ));
        }
        if outer.is_empty() || outer.contains('\0') {
            return refuse(&format!("the {container} part is empty"));
        }
        if table.contains('.') {
            return refuse("it holds more than one `.`");
        }
        let Some(prefix) = table.strip_suffix('*') else {
            return refuse("the `*` is not at the end");
        };
        if prefix.contains('*') {
            return refuse("it holds more than one `*`");
        }
        if prefix.contains('\0') {
            return refuse("it holds a NUL character");
        }
        Ok(Some(Self {
            container: outer.to_owned(),
            prefix: prefix.to_owned(),
        }))
    }

    /// Whether table `table` of `container` matches (exact container, name prefix; both
    /// case-sensitive).
    pub fn matches(&self, container: &str, table: &str) -> bool {
        container == self.container && table.starts_with(&self.prefix)
    }

    /// Whether the pattern takes every table of its container (`schema.*`).
    pub fn is_whole(&self) -> bool {
        self.prefix.is_empty()
    }
}

/// The tables of `listed` and those `patterns` match, listed ones first, then each pattern's
/// in the order of `names` (the tables of each pattern's container, one list per pattern, as
/// the catalog ordered them), without repeats, each made a table by `table(container,
/// name)`; and the patterns that matched nothing. The one expansion both change sources
/// use; they differ only in the catalog query that lists a container's tables.
pub(crate) fn tables_matched<'p, T: Clone + PartialEq>(
    listed: &[T],
    patterns: &'p [TablePattern],
    names: Vec<Vec<String>>,
    table: impl Fn(&str, String) -> T,
) -> (Vec<T>, Vec<&'p TablePattern>) {
    let mut out = listed.to_vec();
    let mut empty = Vec::new();
    for (pattern, names) in patterns.iter().zip(names) {
        let mut any = false;
        for name in names {
            if !pattern.matches(&pattern.container, &name) {
                continue;
            }
            any = true;
            let table = table(&pattern.container, name);
            if !out.contains(&table) {
                out.push(table);
            }
        }
        if !any {
            empty.push(pattern);
        }
    }
    (out, empty)
}

/// Splits a change source's `tables` into the listed table names and the patterns, in the
/// order written: an entry holding a `*` is a [`TablePattern`] over `container` (`schema`,
/// `database`), whose container `parse` checks as a name; any other entry is a table name,
/// parsed by `parse_qualified` (the container required). The one reading of `tables` both
/// change sources use; they differ in `container`, their name rules, and `when_empty` (the
/// message for an empty list, with an example).
///
/// # Errors
/// [`FaucetError::Config`] at `tables` (with `when_empty`) when it is empty; at `tables[i]`
/// for an invalid name or pattern, or an entry listed twice.
pub(crate) fn split_tables<T: PartialEq>(
    entries: &[String],
    container: &str,
    when_empty: &str,
    parse: impl Fn(&str, &str) -> Result<T, FaucetError>,
    parse_qualified: impl Fn(&str, &str) -> Result<T, FaucetError>,
) -> Result<(Vec<T>, Vec<TablePattern>), FaucetError> {
    if entries.is_empty() {
        return Err(FaucetError::config("tables", when_empty));
    }
    let mut tables: Vec<T> = Vec::with_capacity(entries.len());
    let mut patterns: Vec<TablePattern> = Vec::new();
    for (i, t) in entries.iter().enumerate() {
        let field = format!("tables[{i}]");
        let twice = || {
            Err(FaucetError::config(
                &field,
                format!("`{t}` is listed twice"),
            ))
        };
        if let Some(pattern) = TablePattern::parse(t, &field, container)? {
            parse(&pattern.container, &field)?;
            if patterns.contains(&pattern) {
                return twice();
            }
            patterns.push(pattern);
            continue;
        }
        let table = parse_qualified(t, &field)?;
        if tables.contains(&table) {
            return twice();
        }
        tables.push(table);
    }
    Ok((tables, patterns))
}

impl std::fmt::Display for TablePattern {
    /// The entry as written: `shop.*`, `shop.order_*`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}*", self.container, self.prefix)
    }
}

/// Warns that patterns matched no table at start, or refuses it: a bounded run
/// (`continuous: false`) of patterns matching nothing has nothing to read, most likely a
/// typo; a continuous run waits for tables created later, and says so.
///
/// # Errors
/// [`FaucetError::Read`] of `connector` naming the patterns when `continuous` is false.
pub(crate) fn empty_match(
    connector: &str,
    empty: &[&TablePattern],
    continuous: bool,
) -> Result<(), FaucetError> {
    if empty.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = empty.iter().map(ToString::to_string).collect();
    if continuous {
        tracing::warn!(
            patterns = ?names,
            "table patterns match no table now; tables created later that match are read from \
             their creation on"
        );
        return Ok(());
    }
    Err(FaucetError::read(
        connector,
        format!(
            "the table pattern(s) {} match no table (names are matched exactly, \
             case-sensitively): fix the pattern, or set `continuous: true` to wait for tables \
             created later",
            names.join(", ")
        ),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(entry: &str) -> Result<Option<TablePattern>, FaucetError> {
        TablePattern::parse(entry, "tables[0]", "schema")
    }

    #[test]
    fn the_grammar_and_what_it_matches() {
        assert_eq!(pattern("public.orders").expect("name"), None);
        let all = pattern("public.*").expect("ok").expect("pattern");
        assert!(all.is_whole());
        assert!(all.matches("public", "orders") && all.matches("public", "x"));
        assert!(!all.matches("Public", "orders") && !all.matches("shop", "orders"));
        assert_eq!(all.to_string(), "public.*");
        let some = pattern("shop.order_*").expect("ok").expect("pattern");
        assert!(!some.is_whole());
        assert!(some.matches("shop", "order_lines") && some.matches("shop", "order_"));
        assert!(!some.matches("shop", "orders") && !some.matches("shop", "Order_x"));
        assert_eq!(some.to_string(), "shop.order_*");
    }

    #[test]
    fn anything_else_is_refused_naming_the_entry() {
        for (entry, why) in [
            ("*", "names no schema"),
            ("*.*", "cannot be a pattern"),
            ("*.orders", "cannot be a pattern"),
            ("public.*x*", "more than one `*`"),
            ("public.**", "more than one `*`"),
            ("public.a*b", "not at the end"),
            (".*", "is empty"),
            ("a.b.*", "more than one `.`"),
        ] {
            let e = pattern(entry).expect_err(entry);
            let text = e.to_string();
            assert!(
                text.contains(&format!("`{entry}`")) && text.contains(why),
                "{entry}: {text}"
            );
            assert_eq!(faucet_core::testing::config_field(e), "tables[0]");
        }
    }

    #[test]
    fn an_empty_match_fails_a_bounded_run_and_warns_a_continuous_one() {
        let p = pattern("s.t_*").expect("ok").expect("pattern");
        assert!(empty_match("c", &[], false).is_ok());
        assert!(empty_match("c", &[&p], true).is_ok());
        let e = empty_match("c", &[&p], false).expect_err("nothing to read");
        assert!(e.to_string().contains("s.t_*"), "{e}");
    }
}
