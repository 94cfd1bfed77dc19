//! Names made from a record's source table: the one placeholder rule every sink that routes
//! records by table uses (a bus sink's `subject` / `stream` / `topic`, a SQL sink's table).
//!
//! A [`TableTemplate`] is text with placeholders in braces:
//!
//! | placeholder | value for `public.orders` (PostgreSQL) | for `shop.orders` (MySQL `db.table`) | for `orders` |
//! |---|---|---|---|
//! | `{table}` | `orders` | `orders` | `orders` |
//! | `{schema}` | `public` | `shop` (the database) | refused |
//! | `{database}` | `public` (same as `{schema}`) | `shop` | refused |
//! | `{source_table}` | `public.orders` | `shop.orders` | `orders` |
//!
//! `{{` and `}}` are literal braces. The source table is a change record's `table` field,
//! qualified the way its source system qualifies it (PostgreSQL `schema.table`, MySQL and
//! MariaDB `database.table`); MySQL has no schemas, so `{schema}` and `{database}` both name
//! the part before the `.`, whichever system the record came from. A template without
//! placeholders is a fixed name and needs no source table (rows of a file or a query).
//!
//! Parsing is pure ([`TableTemplate::parse`]: an unknown or unclosed placeholder is a
//! [`FaucetError::Config`] naming the field); rendering ([`TableTemplate::render`]) fails only
//! for a record without the table its template needs.

use std::fmt;

use crate::error::FaucetError;

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    /// The part of the source table before its `.` (`{schema}` / `{database}`).
    Schema,
    /// The part after it (the whole name when unqualified).
    Table,
    /// The source table as the record names it.
    SourceTable,
}

/// A name template over the source table (see the module docs), parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableTemplate {
    text: String,
    parts: Vec<Part>,
}

impl TableTemplate {
    /// Parses `text`; `field` names the config field in errors (`stream`, `subject`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `field` for an empty template, an unknown placeholder, or a
    /// `{` / `}` that is neither a placeholder nor doubled.
    pub fn parse(text: &str, field: &str) -> Result<Self, FaucetError> {
        if text.is_empty() {
            return Err(FaucetError::config(field, "must not be empty"));
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, n)| n) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, n)| n) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let rest = &text[at + 1..];
                    let Some(end) = rest.find('}') else {
                        return Err(FaucetError::config(
                            field,
                            format!(
                                "`{text}` has a `{{` without its `}}` (write `{{{{` for a literal brace)"
                            ),
                        ));
                    };
                    let part = match &rest[..end] {
                        "schema" | "database" => Part::Schema,
                        "table" => Part::Table,
                        "source_table" => Part::SourceTable,
                        other => {
                            return Err(FaucetError::config(
                                field,
                                format!(
                                    "`{text}` has the unknown placeholder `{{{other}}}`; the \
                                     placeholders are {{schema}}, {{database}}, {{table}} and \
                                     {{source_table}}"
                                ),
                            ));
                        }
                    };
                    for _ in 0..=end {
                        chars.next();
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(part);
                }
                '}' => {
                    return Err(FaucetError::config(
                        field,
                        format!(
                            "`{text}` has a `}}` without its `{{` (write `}}}}` for a literal brace)"
                        ),
                    ));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Self {
            text: text.to_owned(),
            parts,
        })
    }

    /// The template as configured.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The fixed name when the template has no placeholder.
    pub fn fixed(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Text(t)] => Some(t),
            _ => None,
        }
    }

    /// The literal text before the first placeholder (the whole name when fixed), braces
    /// unescaped: the part every rendered name starts with.
    pub fn fixed_prefix(&self) -> &str {
        match self.parts.first() {
            Some(Part::Text(t)) => t,
            _ => "",
        }
    }

    /// Whether some source table renders to `name`: the template's literal text matches
    /// exactly and each placeholder a non-empty run of characters (`{schema}` / `{database}`
    /// one without a `.`, being the part before the first `.`). A fixed template matches its
    /// own name only. For finding names a template may have made earlier (a file sink's
    /// files), not for routing.
    pub fn could_render(&self, name: &str) -> bool {
        matches_parts(&self.parts, name)
    }

    /// The name for records of `source_table` (`None` for records without one: rows of a
    /// file or a query).
    ///
    /// # Errors
    /// A message for people when the template needs a source table and there is none, or
    /// needs `{schema}` of an unqualified one.
    pub fn render(&self, source_table: Option<&str>) -> Result<String, String> {
        if let Some(fixed) = self.fixed() {
            return Ok(fixed.to_owned());
        }
        let Some(name) = source_table else {
            return Err(format!(
                "the template `{}` names the source table, and these records have none (they \
                 are not change records); use a fixed name",
                self.text
            ));
        };
        let (outer, table) = match name.split_once('.') {
            Some((outer, table)) => (Some(outer), table),
            None => (None, name),
        };
        let mut out = String::with_capacity(self.text.len() + name.len());
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Table => out.push_str(table),
                Part::SourceTable => out.push_str(name),
                Part::Schema => match outer {
                    Some(o) => out.push_str(o),
                    None => {
                        return Err(format!(
                            "the template `{}` uses {{schema}}, and the source table `{name}` \
                             has no schema or database part",
                            self.text
                        ));
                    }
                },
            }
        }
        Ok(out)
    }
}

/// Whether `parts` match all of `name` ([`TableTemplate::could_render`]): backtracking over
/// the placeholders, each taking one or more characters.
fn matches_parts(parts: &[Part], name: &str) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return name.is_empty();
    };
    match first {
        Part::Text(t) => name
            .strip_prefix(t.as_str())
            .is_some_and(|after| matches_parts(rest, after)),
        Part::Schema | Part::Table | Part::SourceTable => {
            let dotless = *first == Part::Schema;
            for (at, c) in name.char_indices() {
                if dotless && c == '.' {
                    return false;
                }
                let end = at + c.len_utf8();
                if matches_parts(rest, &name[end..]) {
                    return true;
                }
            }
            false
        }
    }
}

impl fmt::Display for TableTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_take_the_parts_of_the_source_table() {
        let t = TableTemplate::parse("cdc.{schema}.{table}", "subject").expect("parse");
        assert_eq!(
            t.render(Some("public.orders")).as_deref(),
            Ok("cdc.public.orders")
        );
        let t = TableTemplate::parse("{database}_{table}:{source_table}", "s").expect("parse");
        assert_eq!(
            t.render(Some("shop.orders")).as_deref(),
            Ok("shop_orders:shop.orders")
        );
        let t = TableTemplate::parse("t.{table}", "s").expect("parse");
        assert_eq!(t.render(Some("orders")).as_deref(), Ok("t.orders"));
        assert!(
            t.render(None)
                .expect_err("no table")
                .contains("not change records")
        );
        let t = TableTemplate::parse("{schema}", "s").expect("parse");
        assert!(t.render(Some("orders")).is_err());
    }

    #[test]
    fn fixed_names_and_literal_braces() {
        let t = TableTemplate::parse("events", "stream").expect("parse");
        assert_eq!(t.fixed(), Some("events"));
        assert_eq!(t.render(None).as_deref(), Ok("events"));
        let t = TableTemplate::parse("a{{b}}", "stream").expect("parse");
        assert_eq!(t.fixed(), Some("a{b}"));
    }

    #[test]
    fn could_render_matches_what_some_source_table_renders() {
        let t = TableTemplate::parse("out/{table}.jsonl", "path").expect("parse");
        assert_eq!(t.fixed_prefix(), "out/");
        assert!(t.could_render("out/orders.jsonl"));
        assert!(t.could_render("out/a.b.jsonl"));
        assert!(!t.could_render("out/.jsonl"));
        assert!(!t.could_render("out/orders.json"));
        assert!(!t.could_render("other/orders.jsonl"));
        let t = TableTemplate::parse("{schema}_{table}", "path").expect("parse");
        assert_eq!(t.fixed_prefix(), "");
        assert!(t.could_render("public_orders"));
        assert!(t.could_render("a_b_c"));
        assert!(!t.could_render("a.b_c"));
        assert!(!t.could_render("public_"));
        let t = TableTemplate::parse("a{{b}}", "path").expect("parse");
        assert!(t.could_render("a{b}") && !t.could_render("a{{b}}"));
        assert_eq!(t.fixed_prefix(), "a{b}");
    }

    #[test]
    fn bad_templates_name_the_field() {
        for bad in ["", "x.{tabel}", "x.{table", "x}"] {
            let err = TableTemplate::parse(bad, "subject").expect_err(bad);
            assert!(
                matches!(&err, FaucetError::Config { field, .. } if field == "subject"),
                "{bad}: {err}"
            );
        }
        let err = TableTemplate::parse("x.{tabel}", "subject").expect_err("unknown");
        assert!(err.to_string().contains("{source_table}"), "{err}");
    }
}
