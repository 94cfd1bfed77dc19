//! What a binlog Query event's SQL text means to the change stream: a transaction boundary
//! (`BEGIN`, `COMMIT`, `ROLLBACK`, `XA …`), a `TRUNCATE` of a table, a data change logged as
//! a statement (binlog_format STATEMENT or MIXED), or other DDL.

/// The meaning of a Query event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Statement {
    /// `BEGIN`: a transaction's first event (MySQL; MariaDB without GTID events).
    Begin,
    /// `COMMIT`: the end of a transaction (non-transactional engines log it as a query).
    Commit,
    /// `ROLLBACK` (a transaction that changed non-transactional tables); it ends the group.
    /// `ROLLBACK TO SAVEPOINT` is [`Statement::Other`].
    Rollback,
    /// An XA statement (`XA START` …): not supported.
    Xa,
    /// `TRUNCATE [TABLE] [db.]name`: the database (or `None`: the event's default database)
    /// and table.
    Truncate(Option<String>, String),
    /// A data change logged as SQL text (INSERT, UPDATE, DELETE, REPLACE, LOAD DATA).
    Dml,
    /// Anything else (CREATE, ALTER, DROP, RENAME, GRANT …): a schema change or nothing.
    Other,
}

/// Classifies `sql`, ignoring leading whitespace and comments, case-insensitively.
pub(crate) fn classify(sql: &str) -> Statement {
    let rest = skip_space_and_comments(sql);
    let (word, after) = keyword(rest);
    match word.to_ascii_uppercase().as_str() {
        "BEGIN" => Statement::Begin,
        "COMMIT" => Statement::Commit,
        // `ROLLBACK TO [SAVEPOINT] x` stays inside the transaction.
        "ROLLBACK" => {
            let (next, _) = keyword(skip_space_and_comments(after));
            if next.eq_ignore_ascii_case("TO") {
                Statement::Other
            } else {
                Statement::Rollback
            }
        }
        "XA" => Statement::Xa,
        "INSERT" | "UPDATE" | "DELETE" | "REPLACE" | "LOAD" => Statement::Dml,
        "TRUNCATE" => {
            let mut rest = skip_space_and_comments(after);
            let (next, after_next) = keyword(rest);
            if next.eq_ignore_ascii_case("TABLE") {
                rest = skip_space_and_comments(after_next);
            }
            match qualified_name(rest) {
                Some((db, table)) => Statement::Truncate(db, table),
                None => Statement::Other,
            }
        }
        _ => Statement::Other,
    }
}

fn skip_space_and_comments(mut s: &str) -> &str {
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix("/*") {
            // MySQL's executable comments (`/*!40000 … */`) are comments to this reader too.
            match rest.find("*/") {
                Some(end) => s = &rest[end + 2..],
                None => return "",
            }
        } else if let Some(rest) = s.strip_prefix("-- ").or_else(|| s.strip_prefix('#')) {
            match rest.find('\n') {
                Some(end) => s = &rest[end + 1..],
                None => return "",
            }
        } else {
            return s;
        }
    }
}

fn keyword(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    s.split_at(end)
}

/// One identifier: `` `quoted``name` `` or a bare word.
fn identifier(s: &str) -> Option<(String, &str)> {
    if let Some(rest) = s.strip_prefix('`') {
        let mut out = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            if c == '`' {
                if rest[i + 1..].starts_with('`') {
                    out.push('`');
                    chars.next();
                } else {
                    return Some((out, &rest[i + 1..]));
                }
            } else {
                out.push(c);
            }
        }
        None
    } else {
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .unwrap_or(s.len());
        (end > 0).then(|| (s[..end].to_owned(), &s[end..]))
    }
}

fn qualified_name(s: &str) -> Option<(Option<String>, String)> {
    let (first, rest) = identifier(s)?;
    match rest.trim_start().strip_prefix('.') {
        Some(after_dot) => {
            let (second, _) = identifier(after_dot.trim_start())?;
            Some((Some(first), second))
        }
        None => Some((None, first)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_classified() {
        assert_eq!(classify("BEGIN"), Statement::Begin);
        assert_eq!(classify("  commit"), Statement::Commit);
        assert_eq!(classify("ROLLBACK"), Statement::Rollback);
        assert_eq!(classify("ROLLBACK TO SAVEPOINT s1"), Statement::Other);
        assert_eq!(classify("XA START 'x'"), Statement::Xa);
        assert_eq!(
            classify("truncate t1"),
            Statement::Truncate(None, "t1".into())
        );
        assert_eq!(
            classify("/* c */ TRUNCATE TABLE `shop`.`we``ird`"),
            Statement::Truncate(Some("shop".into()), "we`ird".into())
        );
        assert_eq!(
            classify("TRUNCATE TABLE shop . orders"),
            Statement::Truncate(Some("shop".into()), "orders".into())
        );
        assert_eq!(classify("insert into t values (1)"), Statement::Dml);
        assert_eq!(classify("ALTER TABLE t ADD c INT"), Statement::Other);
        assert_eq!(classify(""), Statement::Other);
        assert_eq!(classify("/* unterminated"), Statement::Other);
    }
}
