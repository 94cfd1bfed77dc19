//! What a binlog Query event's SQL text means to the change stream: a transaction boundary
//! (`BEGIN`, `COMMIT`, `ROLLBACK`, `XA …`), DDL that empties, drops or renames tables
//! (whose rows go without rows events), a data change logged as a statement (binlog_format
//! STATEMENT or MIXED), or other DDL. What the stream makes of each is
//! [`super::changes::ChangeDecoder::ddl`].

use crate::mysql::table::TableName;

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
    /// DDL that removes every row of these tables without logging them: `TRUNCATE [TABLE]
    /// t`, `DROP TABLE [IF EXISTS] a, b` (not `DROP TEMPORARY TABLE`: a temporary table is
    /// not the listed table it may shadow, and row-format binlogs do not log its rows), and
    /// MariaDB's `CREATE OR REPLACE TABLE t …` (it drops the table it replaces). A name
    /// without a database is in the event's default database.
    Emptied(Vec<TableName>),
    /// `DROP DATABASE|SCHEMA [IF EXISTS] db`: every table of `db` is dropped.
    DroppedDatabase(String),
    /// `RENAME TABLE a TO b, c TO d` and `ALTER TABLE a … RENAME [TO|AS] b`: the renames,
    /// in the order the server applies them.
    Renamed(Vec<(TableName, TableName)>),
    /// `ALTER TABLE` clauses that move rows without logging them (`DROP`, `TRUNCATE`,
    /// `EXCHANGE` or `CONVERT PARTITION`, `CONVERT TABLE … TO PARTITION`): the tables whose
    /// rows change, and the clause's first words.
    PartitionRows(Vec<TableName>, String),
    /// A data change logged as SQL text (INSERT, UPDATE, DELETE, REPLACE, LOAD DATA), or a
    /// statement that may change data through what it calls (`SELECT f()`, `DO f()`,
    /// `CALL p()`, `WITH … UPDATE`): the one table it writes, when its text names it
    /// ([`dml_target`]), else `None`.
    Dml(Option<TableName>),
    /// Anything else (CREATE, ALTER, GRANT …): a schema change or nothing.
    Other,
}

/// Classifies `sql`, ignoring leading whitespace and comments, case-insensitively. Table
/// names are backtick-quoted (doubled backticks inside) or bare, qualified or not.
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
        "INSERT" | "UPDATE" | "DELETE" | "REPLACE" | "LOAD" => {
            Statement::Dml(dml_target(&word.to_ascii_uppercase(), after))
        }
        // Logged as statements only where they may change data (a stored function or
        // procedure that writes, under binlog_format STATEMENT or MIXED).
        "SELECT" | "DO" | "CALL" | "WITH" => Statement::Dml(None),
        "TRUNCATE" => {
            let rest = optional_words(after, &["TABLE"]);
            match qualified_name(rest) {
                Some((name, _)) => Statement::Emptied(vec![name]),
                None => Statement::Other,
            }
        }
        "DROP" => drop_statement(after),
        "CREATE" => create_statement(after),
        "RENAME" => rename_statement(after),
        "ALTER" => alter_statement(after),
        _ => Statement::Other,
    }
}

/// The one table a data-changing statement writes, from its text after the first word
/// `word` (upper case); `None` when the text does not say (a multi-table `UPDATE a, b` /
/// `UPDATE a JOIN b`, `DELETE a FROM …`, `DELETE FROM a USING …`, anything unexpected):
/// * `INSERT|REPLACE [LOW_PRIORITY|DELAYED|HIGH_PRIORITY] [IGNORE] [INTO] t` followed by
///   `(`, `VALUES`, `VALUE`, `SELECT`, `SET`, `PARTITION`, `WITH` or the end;
/// * `UPDATE [LOW_PRIORITY] [IGNORE] t [[AS] alias] SET`;
/// * `DELETE [LOW_PRIORITY] [QUICK] [IGNORE] FROM t [[AS] alias]` followed by `WHERE`,
///   `ORDER`, `LIMIT`, `PARTITION`, `RETURNING` or the end;
/// * `LOAD DATA|XML … INTO TABLE t`.
pub(crate) fn dml_target(word: &str, after: &str) -> Option<TableName> {
    let mut rest = skip_space_and_comments(after);
    for modifier in [
        "LOW_PRIORITY",
        "DELAYED",
        "HIGH_PRIORITY",
        "QUICK",
        "IGNORE",
    ] {
        rest = optional_words(rest, &[modifier]);
    }
    let next_word = |s: &str| keyword(skip_space_and_comments(s)).0.to_ascii_uppercase();
    match word {
        "INSERT" | "REPLACE" => {
            rest = optional_words(rest, &["INTO"]);
            let (name, after) = qualified_name(rest)?;
            let after = skip_space_and_comments(after);
            let follows = after.is_empty()
                || after.starts_with('(')
                || matches!(
                    next_word(after).as_str(),
                    "VALUES" | "VALUE" | "SELECT" | "SET" | "PARTITION" | "WITH"
                );
            follows.then_some(name)
        }
        "UPDATE" => {
            let (name, after) = qualified_name(rest)?;
            let after = skip_alias(after, &["SET"]);
            (next_word(after) == "SET").then_some(name)
        }
        "DELETE" => {
            let (from, after_from) = keyword(rest);
            if !from.eq_ignore_ascii_case("FROM") {
                return None;
            }
            let (name, after) = qualified_name(skip_space_and_comments(after_from))?;
            let ends = ["WHERE", "ORDER", "LIMIT", "PARTITION", "RETURNING"];
            let after = skip_space_and_comments(skip_alias(after, &ends));
            (after.is_empty() || ends.contains(&next_word(after).as_str())).then_some(name)
        }
        "LOAD" => {
            let at = find_word(rest, "INTO")?;
            let after_into = optional_words(&rest[at + 4..], &["TABLE"]);
            qualified_name(after_into).map(|(name, _)| name)
        }
        _ => None,
    }
}

/// `s` after an optional table alias (`[AS] x`) that is not one of the keywords `next`.
fn skip_alias<'a>(s: &'a str, next: &[&str]) -> &'a str {
    let rest = skip_space_and_comments(s);
    let rest = optional_words(rest, &["AS"]);
    match identifier(rest) {
        Some((alias, after))
            if !rest.starts_with('`') && next.iter().any(|n| alias.eq_ignore_ascii_case(n)) =>
        {
            let _ = after;
            rest
        }
        Some((_, after)) => after,
        None => rest,
    }
}

/// `DROP …` after the `DROP`.
fn drop_statement(after: &str) -> Statement {
    let (what, rest) = keyword(skip_space_and_comments(after));
    match what.to_ascii_uppercase().as_str() {
        "TABLE" | "TABLES" => {
            let rest = optional_words(rest, &["IF", "EXISTS"]);
            match name_list(rest) {
                Some(names) if !names.is_empty() => Statement::Emptied(names),
                _ => Statement::Other,
            }
        }
        "DATABASE" | "SCHEMA" => {
            let rest = optional_words(rest, &["IF", "EXISTS"]);
            match identifier(rest) {
                Some((db, _)) => Statement::DroppedDatabase(db),
                None => Statement::Other,
            }
        }
        // DROP TEMPORARY TABLE, DROP VIEW, DROP INDEX …: no listed table loses rows.
        _ => Statement::Other,
    }
}

/// `CREATE …` after the `CREATE`: only MariaDB's `CREATE OR REPLACE [TEMPORARY] TABLE`
/// concerns an existing table (a temporary one replaces nothing listed).
fn create_statement(after: &str) -> Statement {
    let rest = skip_space_and_comments(after);
    let (or, rest) = keyword(rest);
    if !or.eq_ignore_ascii_case("OR") {
        return Statement::Other;
    }
    let (replace, rest) = keyword(skip_space_and_comments(rest));
    let (table, rest) = keyword(skip_space_and_comments(rest));
    if !replace.eq_ignore_ascii_case("REPLACE") || !table.eq_ignore_ascii_case("TABLE") {
        return Statement::Other;
    }
    match qualified_name(skip_space_and_comments(rest)) {
        Some((name, _)) => Statement::Emptied(vec![name]),
        None => Statement::Other,
    }
}

/// `RENAME TABLE[S] [IF EXISTS] a [WAIT n | NOWAIT] TO b, …` after the `RENAME`.
fn rename_statement(after: &str) -> Statement {
    let (what, mut rest) = keyword(skip_space_and_comments(after));
    if !(what.eq_ignore_ascii_case("TABLE") || what.eq_ignore_ascii_case("TABLES")) {
        return Statement::Other;
    }
    rest = optional_words(rest, &["IF", "EXISTS"]);
    let mut pairs = Vec::new();
    loop {
        let Some((from, after_from)) = qualified_name(rest) else {
            return Statement::Other;
        };
        let after_wait = skip_wait(after_from);
        let (to_kw, after_to) = keyword(skip_space_and_comments(after_wait));
        if !to_kw.eq_ignore_ascii_case("TO") {
            return Statement::Other;
        }
        let Some((to, after_name)) = qualified_name(skip_space_and_comments(after_to)) else {
            return Statement::Other;
        };
        pairs.push((from, to));
        match skip_space_and_comments(after_name).strip_prefix(',') {
            Some(next) => rest = skip_space_and_comments(next),
            None => return Statement::Renamed(pairs),
        }
    }
}

/// `ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] t [WAIT n | NOWAIT] clause, …` after the
/// `ALTER`: a `RENAME [TO|AS] u` clause (not `RENAME COLUMN|INDEX|KEY`) renames `t`; a
/// partition clause that moves rows is [`Statement::PartitionRows`].
fn alter_statement(after: &str) -> Statement {
    let mut rest = optional_words(after, &["ONLINE"]);
    rest = optional_words(rest, &["IGNORE"]);
    let (table, after_table) = keyword(rest);
    if !table.eq_ignore_ascii_case("TABLE") {
        return Statement::Other;
    }
    rest = optional_words(after_table, &["IF", "EXISTS"]);
    let Some((name, after_name)) = qualified_name(rest) else {
        return Statement::Other;
    };
    let mut renamed = None;
    for clause in top_level_clauses(skip_wait(after_name)) {
        let clause = skip_space_and_comments(clause);
        let (first, after_first) = keyword(clause);
        let (second, after_second) = keyword(skip_space_and_comments(after_first));
        let first = first.to_ascii_uppercase();
        let second = second.to_ascii_uppercase();
        match (first.as_str(), second.as_str()) {
            ("RENAME", "COLUMN" | "INDEX" | "KEY") => {}
            ("RENAME", _) => {
                let target = optional_words(after_first, &["TO"]);
                let target = optional_words(target, &["AS"]);
                if let Some((to, _)) = qualified_name(target) {
                    renamed = Some(to);
                }
            }
            ("DROP" | "TRUNCATE" | "EXCHANGE" | "CONVERT", "PARTITION") => {
                let mut tables = vec![name.clone()];
                // EXCHANGE PARTITION p WITH TABLE u, CONVERT PARTITION p TO TABLE u.
                if let Some(i) = find_word(after_second, "TABLE")
                    && let Some((other, _)) =
                        qualified_name(skip_space_and_comments(&after_second[i + 5..]))
                {
                    tables.push(other);
                }
                return Statement::PartitionRows(tables, format!("{first} {second}"));
            }
            // CONVERT TABLE u TO PARTITION p (MariaDB 10.7+): u's rows move into the table.
            ("CONVERT", "TABLE") => {
                let mut tables = vec![name.clone()];
                if let Some((other, _)) = qualified_name(skip_space_and_comments(after_second)) {
                    tables.push(other);
                }
                return Statement::PartitionRows(tables, "CONVERT TABLE".to_owned());
            }
            _ => {}
        }
    }
    match renamed {
        Some(to) => Statement::Renamed(vec![(name, to)]),
        None => Statement::Other,
    }
}

/// The column renames of an `ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] t …` statement, in
/// its clause order: `RENAME COLUMN a TO b` and `CHANGE [COLUMN] [IF EXISTS] a b type …`
/// with two different names (module `super::shapes`). `None` for any other statement, or
/// one without such a clause.
pub(crate) fn column_renames(sql: &str) -> Option<(TableName, Vec<(String, String)>)> {
    let (word, after) = keyword(skip_space_and_comments(sql));
    if !word.eq_ignore_ascii_case("ALTER") {
        return None;
    }
    let mut rest = optional_words(after, &["ONLINE"]);
    rest = optional_words(rest, &["IGNORE"]);
    let (table, after_table) = keyword(rest);
    if !table.eq_ignore_ascii_case("TABLE") {
        return None;
    }
    rest = optional_words(after_table, &["IF", "EXISTS"]);
    let (name, after_name) = qualified_name(rest)?;
    let mut renames = Vec::new();
    for clause in top_level_clauses(skip_wait(after_name)) {
        let (first, after_first) = keyword(skip_space_and_comments(clause));
        let pair = if first.eq_ignore_ascii_case("RENAME") {
            let (second, after_second) = keyword(skip_space_and_comments(after_first));
            if !second.eq_ignore_ascii_case("COLUMN") {
                continue;
            }
            identifier(skip_space_and_comments(after_second)).and_then(|(from, after_from)| {
                identifier(optional_words(after_from, &["TO"])).map(|(to, _)| (from, to))
            })
        } else if first.eq_ignore_ascii_case("CHANGE") {
            let mut rest = optional_words(after_first, &["COLUMN"]);
            rest = optional_words(rest, &["IF", "EXISTS"]);
            identifier(rest).and_then(|(from, after_from)| {
                identifier(skip_space_and_comments(after_from)).map(|(to, _)| (from, to))
            })
        } else {
            None
        };
        if let Some((from, to)) = pair.filter(|(f, t)| f != t) {
            renames.push((from, to));
        }
    }
    (!renames.is_empty()).then_some((name, renames))
}

/// `s` after the optional keywords `words`, all of them or none (`IF EXISTS`).
fn optional_words<'a>(s: &'a str, words: &[&str]) -> &'a str {
    let mut rest = skip_space_and_comments(s);
    for word in words {
        let (w, after) = keyword(rest);
        if !w.eq_ignore_ascii_case(word) {
            return skip_space_and_comments(s);
        }
        rest = skip_space_and_comments(after);
    }
    rest
}

/// `s` after an optional `WAIT n` or `NOWAIT` (MariaDB).
fn skip_wait(s: &str) -> &str {
    let rest = skip_space_and_comments(s);
    let (w, after) = keyword(rest);
    if w.eq_ignore_ascii_case("NOWAIT") {
        return after;
    }
    if w.eq_ignore_ascii_case("WAIT") {
        let (_, after_n) = keyword(skip_space_and_comments(after));
        return after_n;
    }
    rest
}

/// `a, b, c`: qualified names separated by commas.
fn name_list(mut s: &str) -> Option<Vec<TableName>> {
    let mut names = Vec::new();
    loop {
        let (name, rest) = qualified_name(skip_space_and_comments(s))?;
        names.push(name);
        match skip_space_and_comments(rest).strip_prefix(',') {
            Some(next) => s = next,
            None => return Some(names),
        }
    }
}

/// The comma-separated clauses of `s` outside parentheses, quotes and comments.
fn top_level_clauses(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'\'' | b'"' | b'`') => {
                i += 1;
                while i < bytes.len() {
                    if bytes[i] == b'\\' && q != b'`' {
                        i += 1;
                    } else if bytes[i] == q {
                        if bytes.get(i + 1) == Some(&q) {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = s[i + 2..].find("*/").map_or(bytes.len(), |e| i + 2 + e + 1);
            }
            b'(' => depth += 1,
            b')' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&s[start.min(s.len())..]);
    out
}

/// The byte offset of the keyword `word` (a whole word, any case) in `s`.
fn find_word(s: &str, word: &str) -> Option<usize> {
    let upper = s.to_ascii_uppercase();
    let mut from = 0;
    while let Some(i) = upper[from..].find(word) {
        let at = from + i;
        let before = upper[..at].chars().next_back();
        let after = upper[at + word.len()..].chars().next();
        let boundary = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if boundary(before) && boundary(after) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

fn skip_space_and_comments(mut s: &str) -> &str {
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix("/*!").or_else(|| s.strip_prefix("/*M!")) {
            // An executable comment (`/*!40005 TEMPORARY */`, MariaDB's `/*M!100000 … */`) is
            // SQL to the server that runs it: its text is read, its marks skipped.
            s = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        } else if let Some(rest) = s.strip_prefix("*/") {
            // The end of an executable comment.
            s = rest;
        } else if let Some(rest) = s.strip_prefix("/*") {
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

fn qualified_name(s: &str) -> Option<(TableName, &str)> {
    let (first, rest) = identifier(s)?;
    match skip_space_and_comments(rest).strip_prefix('.') {
        Some(after_dot) => {
            let (second, rest) = identifier(skip_space_and_comments(after_dot))?;
            Some((
                TableName {
                    database: Some(first),
                    table: second,
                },
                rest,
            ))
        }
        None => Some((
            TableName {
                database: None,
                table: first,
            },
            rest,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(db: Option<&str>, table: &str) -> TableName {
        TableName {
            database: db.map(str::to_owned),
            table: table.to_owned(),
        }
    }

    #[test]
    fn statements_are_classified() {
        assert_eq!(classify("BEGIN"), Statement::Begin);
        assert_eq!(classify("  commit"), Statement::Commit);
        assert_eq!(classify("ROLLBACK"), Statement::Rollback);
        assert_eq!(classify("ROLLBACK TO SAVEPOINT s1"), Statement::Other);
        assert_eq!(classify("XA START 'x'"), Statement::Xa);
        assert_eq!(
            classify("truncate t1"),
            Statement::Emptied(vec![name(None, "t1")])
        );
        assert_eq!(
            classify("/* c */ TRUNCATE TABLE `shop`.`we``ird`"),
            Statement::Emptied(vec![name(Some("shop"), "we`ird")])
        );
        assert_eq!(
            classify("TRUNCATE TABLE shop . orders"),
            Statement::Emptied(vec![name(Some("shop"), "orders")])
        );
        assert_eq!(
            classify("insert into t values (1)"),
            Statement::Dml(Some(name(None, "t")))
        );
        assert_eq!(classify("ALTER TABLE t ADD c INT"), Statement::Other);
        assert_eq!(classify(""), Statement::Other);
        assert_eq!(classify("/* unterminated"), Statement::Other);
    }

    #[test]
    fn drops_name_every_table_they_empty() {
        // MariaDB logs a DROP TABLE as `DROP TABLE `a`,`b` /* generated by server */`.
        assert_eq!(
            classify("DROP TABLE `a`,`shop`.`b c` /* generated by server */"),
            Statement::Emptied(vec![name(None, "a"), name(Some("shop"), "b c")])
        );
        assert_eq!(
            classify("drop table if exists shop.a , b"),
            Statement::Emptied(vec![name(Some("shop"), "a"), name(None, "b")])
        );
        assert_eq!(
            classify("DROP /*!40005 TEMPORARY */ TABLE IF EXISTS `a`"),
            Statement::Other,
            "MySQL logs a temporary table's DROP so: the executable comment is SQL"
        );
        assert_eq!(
            classify("/*!40000 TRUNCATE TABLE a */"),
            Statement::Emptied(vec![name(None, "a")])
        );
        assert_eq!(
            classify("DROP TEMPORARY TABLE IF EXISTS `a` /* generated by server */"),
            Statement::Other
        );
        assert_eq!(classify("DROP VIEW v"), Statement::Other);
        assert_eq!(classify("DROP INDEX i ON t"), Statement::Other);
        assert_eq!(
            classify("DROP DATABASE IF EXISTS `shop`"),
            Statement::DroppedDatabase("shop".into())
        );
        assert_eq!(
            classify("DROP SCHEMA shop"),
            Statement::DroppedDatabase("shop".into())
        );
        assert_eq!(
            classify("CREATE OR REPLACE TABLE `shop`.`a` (id INT)"),
            Statement::Emptied(vec![name(Some("shop"), "a")])
        );
        assert_eq!(classify("CREATE TABLE a (id INT)"), Statement::Other);
        assert_eq!(
            classify("CREATE OR REPLACE TEMPORARY TABLE a (id INT)"),
            Statement::Other
        );
    }

    #[test]
    fn column_renames_are_read_from_alter_table() {
        assert_eq!(
            column_renames(
                "ALTER TABLE shop.`t` ADD w INT, RENAME COLUMN v TO `vv`, \
                 CHANGE COLUMN x y BIGINT NOT NULL, CHANGE z z TEXT, RENAME INDEX i TO j"
            ),
            Some((
                name(Some("shop"), "t"),
                vec![("v".into(), "vv".into()), ("x".into(), "y".into())]
            ))
        );
        assert_eq!(column_renames("ALTER TABLE t ADD w INT"), None);
        assert_eq!(column_renames("ALTER TABLE t RENAME TO u"), None);
        assert_eq!(column_renames("RENAME TABLE t TO u"), None);
    }

    #[test]
    fn renames_are_read_in_order() {
        assert_eq!(
            classify("RENAME TABLE `a` TO `_a_old`, `_a_new` TO `a`"),
            Statement::Renamed(vec![
                (name(None, "a"), name(None, "_a_old")),
                (name(None, "_a_new"), name(None, "a")),
            ])
        );
        assert_eq!(
            classify("rename table if exists shop.a nowait to other.b"),
            Statement::Renamed(vec![(name(Some("shop"), "a"), name(Some("other"), "b"))])
        );
        assert_eq!(
            classify("ALTER TABLE `a` ADD x INT, RENAME TO `b`"),
            Statement::Renamed(vec![(name(None, "a"), name(None, "b"))])
        );
        assert_eq!(
            classify("ALTER ONLINE TABLE IF EXISTS shop.a RENAME AS shop.b"),
            Statement::Renamed(vec![(name(Some("shop"), "a"), name(Some("shop"), "b"))])
        );
        assert_eq!(
            classify("ALTER TABLE a RENAME b"),
            Statement::Renamed(vec![(name(None, "a"), name(None, "b"))])
        );
        assert_eq!(
            classify("ALTER TABLE a RENAME COLUMN x TO y, RENAME INDEX i TO j"),
            Statement::Other
        );
        assert_eq!(
            classify("ALTER TABLE a ADD c VARCHAR(9) DEFAULT 'x, RENAME TO b', ADD d INT"),
            Statement::Other,
            "a comma inside a string is not a clause"
        );
        assert_eq!(
            classify("ALTER TABLE a EXCHANGE PARTITION p0 WITH TABLE `shop`.`b`"),
            Statement::PartitionRows(
                vec![name(None, "a"), name(Some("shop"), "b")],
                "EXCHANGE PARTITION".into()
            )
        );
        assert_eq!(
            classify("ALTER TABLE a TRUNCATE PARTITION p0, p1"),
            Statement::PartitionRows(vec![name(None, "a")], "TRUNCATE PARTITION".into())
        );
        assert_eq!(
            classify("ALTER TABLE a CONVERT TABLE b TO PARTITION p2 VALUES LESS THAN (9)"),
            Statement::PartitionRows(
                vec![name(None, "a"), name(None, "b")],
                "CONVERT TABLE".into()
            )
        );
        assert_eq!(
            classify("ALTER TABLE a ADD PARTITION (PARTITION p3 VALUES LESS THAN (10))"),
            Statement::Other
        );
    }

    /// The one table a statement-logged change writes, read from its text; any other shape
    /// (several tables, a call) says none, which the stream takes as "may be a listed one".
    #[test]
    fn the_target_of_a_statement_logged_change() {
        let target = |sql: &str| match classify(sql) {
            Statement::Dml(t) => t,
            other => panic!("{sql}: {other:?}"),
        };
        let t = |db: Option<&str>, n: &str| Some(name(db, n));
        assert_eq!(target("INSERT INTO t VALUES (1)"), t(None, "t"));
        assert_eq!(
            target("insert ignore into `d`.`t` (a) values (1)"),
            t(Some("d"), "t")
        );
        assert_eq!(
            target("INSERT d.t SELECT * FROM d.orders"),
            t(Some("d"), "t")
        );
        assert_eq!(target("REPLACE INTO t SET a = 1"), t(None, "t"));
        assert_eq!(
            target("/* c */ UPDATE d.v SET v = 42 WHERE id = 1"),
            t(Some("d"), "v")
        );
        assert_eq!(
            target("UPDATE LOW_PRIORITY t AS x SET x.a = 1"),
            t(None, "t")
        );
        assert_eq!(target("DELETE FROM d.t WHERE id = 1"), t(Some("d"), "t"));
        assert_eq!(target("DELETE QUICK FROM t"), t(None, "t"));
        assert_eq!(
            target("LOAD DATA INFILE '/x.csv' INTO TABLE d.t FIELDS TERMINATED BY ','"),
            t(Some("d"), "t")
        );
        for unknown in [
            "UPDATE a, b SET a.x = b.x",
            "UPDATE a JOIN b ON a.id = b.id SET a.x = 1",
            "DELETE a FROM a JOIN b ON a.id = b.id",
            "DELETE FROM a USING a JOIN b",
            "SELECT f(1)",
            "CALL p()",
            "DO f()",
            "WITH x AS (SELECT 1) UPDATE t SET a = 1",
            "INSERT INTO t, u VALUES (1)",
        ] {
            assert_eq!(target(unknown), None, "{unknown}");
        }
    }
}
