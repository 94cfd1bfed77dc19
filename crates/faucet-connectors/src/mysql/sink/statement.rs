//! One statement of a page and what the server says about it: a server error about a value
//! (SQLSTATE classes 22 and 23, and the strict-mode errors MySQL files under HY000) and any
//! warning a statement leaves (a DECIMAL rounded, a string truncated: MySQL's notes) become a
//! [`FaucetError::Data`] naming the table, the column and the page row; any other failure is
//! a write error, a lost session told apart (its statement's outcome is unknown).

use mysql_async::prelude::Queryable as _;
use mysql_async::{Conn, Value as MyValue};

use faucet_core::FaucetError;

use super::config::CONNECTOR;
use super::write::Target;
use crate::mysql::connection::ErrorKind;
use crate::mysql::table::TableName;
use crate::sql::sink::statement_failed;

/// The warning MySQL 8.0.20+ gives for `VALUES()` in `ON DUPLICATE KEY UPDATE`, which is not
/// about a value.
const DEPRECATED_SYNTAX: u16 = 1287;

/// The data error for a value at `column` of page row `row` (0-based).
pub(super) fn value_error(
    target: &Target<'_>,
    row: Option<usize>,
    column: Option<&str>,
    message: String,
) -> FaucetError {
    // MySQL's messages name a column, never its table: with triggers on the target, the
    // column may be a table's a trigger writes, so it is not put on the target.
    let triggers = &target.table.triggers;
    let (column, elsewhere) = match column {
        Some(c) if !triggers.is_empty() || target.table.type_of(c).is_none() => (None, Some(c)),
        c => (c, None),
    };
    let mut location = target.name.to_string();
    if let Some(c) = column {
        location.push_str(&format!(", column {c}"));
    }
    if let Some(r) = row {
        location.push_str(&format!(", page row {}", r + 1));
    }
    let mut message = message;
    match elsewhere {
        Some(c) if !triggers.is_empty() => message.push_str(&format!(
            " — the server names column `{c}` without its table, and {} has triggers ({}) \
             that may write other tables: the column may be one of theirs",
            target.name,
            triggers.join(", ")
        )),
        Some(c) => message.push_str(&format!(
            " — the server names column `{c}`, which {} does not have (another table's)",
            target.name
        )),
        None => {}
    }
    FaucetError::data(
        CONNECTOR,
        location,
        format!("{message}; nothing of this page was committed"),
    )
}

/// The column a server message names: `for column 'c'`, `` column `db`.`t`.`c` ``,
/// `Column 'c' cannot be null`, `Field 'c' doesn't have a default value`.
fn column_in(message: &str) -> Option<String> {
    for quoted in ["column '", "Column '", "Field '"] {
        if let Some(rest) = message.split(quoted).nth(1) {
            return rest.split('\'').next().map(str::to_owned);
        }
    }
    if let Some(rest) = message.split("column `").nth(1) {
        let name = rest.split(' ').next().unwrap_or(rest);
        return name
            .trim_end_matches('`')
            .rsplit("`.`")
            .next()
            .map(|c| c.trim_matches('`').to_owned());
    }
    None
}

/// `… at row 3` → 3.
fn row_in(message: &str) -> Option<usize> {
    message
        .rsplit("at row ")
        .next()
        .filter(|_| message.contains("at row "))
        .and_then(|r| r.trim().parse().ok())
}

/// Whether a server error is about a value (SQLSTATE class 22 or 23, or one of the
/// strict-mode errors MySQL files under HY000).
fn is_value_error(code: u16, state: &str) -> bool {
    state.starts_with("22")
        || state.starts_with("23")
        || matches!(
            code,
            1048 | 1101 | 1265 | 1292 | 1364 | 1366 | 1367 | 1406 | 3140 | 4025
        )
}

/// Why a statement failed, told apart for the caller: a bad value, a failure with a known
/// outcome, or a lost session (outcome unknown).
pub(crate) fn classify(e: mysql_async::Error, what: &str, target: &TableName) -> FaucetError {
    let lost = ErrorKind::of(&e) == ErrorKind::ConnectionLost;
    statement_failed(CONNECTOR, what, target, lost, Box::new(e))
}

/// Whether `e` says the session is gone (the outcome of a statement in flight is unknown).
pub(crate) fn is_lost(e: &FaucetError) -> bool {
    matches!(e, FaucetError::Write { source: Some(s), .. }
        if s.downcast_ref::<mysql_async::Error>()
            .is_some_and(|e| ErrorKind::of(e) == ErrorKind::ConnectionLost))
}

/// One statement's rows: the page row of each, for error messages, and the parameters (a
/// statement row's after another's).
#[derive(Default)]
pub(super) struct Batch {
    pub(super) rows: Vec<usize>,
    pub(super) params: Vec<MyValue>,
    pub(super) bytes: usize,
}

/// What is left of a [`Batch`] once its parameters went to the server: where its errors
/// point.
struct Sent<'c> {
    /// The page row of each statement row.
    rows: Vec<usize>,
    /// The columns of a statement row, in parameter order (empty: not looked at).
    columns: &'c [&'c str],
    /// For each of `columns`, the first statement row holding NULL there (for error 1048,
    /// whose message names the column but no row); empty for a statement of one row.
    first_null: Vec<Option<usize>>,
}

impl Sent<'_> {
    /// The first statement row with NULL in `column`; when `column` is not one of the
    /// statement's (a trigger's statement failed), the first row with NULL anywhere.
    fn null_row(&self, column: Option<&str>) -> Option<usize> {
        match column.and_then(|c| self.columns.iter().position(|n| *n == c)) {
            Some(at) => self.first_null.get(at).copied().flatten(),
            None => self.first_null.iter().flatten().min().copied(),
        }
    }
}

/// For each of `width` columns, the first statement row whose parameter there is NULL.
fn first_nulls(params: &[MyValue], width: usize) -> Vec<Option<usize>> {
    let mut first = vec![None; width];
    if width == 0 {
        return first;
    }
    for (i, v) in params.iter().enumerate() {
        if matches!(v, MyValue::NULL) {
            first[i % width].get_or_insert(i / width);
        }
    }
    first
}

/// Runs `sql` with `batch`'s parameters (moved to the server, not copied), then turns an
/// error about a value, or any warning the statement left, into a [`FaucetError::Data`]
/// naming column and page row. `columns` names a statement row's parameters in order, for
/// the row of a NULL in a NOT NULL column (empty for a statement that cannot raise that).
pub(super) async fn run(
    conn: &mut Conn,
    target: &Target<'_>,
    sql: &str,
    batch: Batch,
    columns: &[&str],
    what: &str,
) -> Result<(), FaucetError> {
    let first_null = if batch.rows.len() > 1 {
        first_nulls(&batch.params, columns.len())
    } else {
        Vec::new()
    };
    let params = if batch.params.is_empty() {
        mysql_async::Params::Empty
    } else {
        mysql_async::Params::Positional(batch.params)
    };
    let sent = Sent {
        rows: batch.rows,
        columns,
        first_null,
    };
    match conn.exec_drop(sql, params).await {
        Err(mysql_async::Error::Server(s)) if is_value_error(s.code, &s.state) => {
            let column = column_in(&s.message);
            let row = locate(&sent, &s.message, s.code, column.as_deref());
            Err(value_error(
                target,
                row,
                column.as_deref(),
                format!("{} (MySQL error {})", s.message, s.code),
            ))
        }
        Err(e) => Err(classify(e, what, target.name)),
        Ok(()) if conn.get_warnings() > 0 => warned(conn, target, &sent, what).await,
        Ok(()) => Ok(()),
    }
}

/// The page row a server message points at: `at row N` of the statement, or for a NULL in
/// a NOT NULL column (no row in MySQL's message) the first row with NULL in `column`.
fn locate(sent: &Sent<'_>, message: &str, code: u16, column: Option<&str>) -> Option<usize> {
    if let Some(n) = row_in(message) {
        return sent.rows.get(n.checked_sub(1)?).copied();
    }
    if sent.rows.len() == 1 {
        return sent.rows.first().copied();
    }
    if code == 1048 {
        return sent
            .null_row(column)
            .and_then(|i| sent.rows.get(i).copied());
    }
    None
}

/// A statement succeeded with warnings: the first one that is about a value fails the page.
async fn warned(
    conn: &mut Conn,
    target: &Target<'_>,
    sent: &Sent<'_>,
    what: &str,
) -> Result<(), FaucetError> {
    let warnings: Vec<(String, u16, String)> = conn
        .query("SHOW WARNINGS")
        .await
        .map_err(|e| classify(e, "SHOW WARNINGS", target.name))?;
    let Some((level, code, message)) = warnings
        .into_iter()
        .find(|(_, c, _)| *c != DEPRECATED_SYNTAX)
    else {
        return Ok(());
    };
    let column = column_in(&message);
    let row = locate(sent, &message, code, column.as_deref());
    Err(value_error(
        target,
        row,
        column.as_deref(),
        format!(
            "{what} left {level} {code}: {message} — the value would have been changed by the \
             server, so the page is refused (faucet never lets a value be coerced silently)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_is_located_in_its_column() {
        let int = |i: i64| MyValue::Int(i);
        // Rows of (a, b): (1, NULL), (NULL, 2), (3, NULL).
        let params = [
            int(1),
            MyValue::NULL,
            MyValue::NULL,
            int(2),
            int(3),
            MyValue::NULL,
        ];
        let sent = Sent {
            rows: vec![4, 5, 6],
            columns: &["a", "b"],
            first_null: first_nulls(&params, 2),
        };
        assert_eq!(sent.null_row(Some("a")), Some(1));
        assert_eq!(sent.null_row(Some("b")), Some(0));
        // A column the statement does not have (a trigger's): the first row with any NULL.
        assert_eq!(sent.null_row(Some("c")), Some(0));
        assert_eq!(
            locate(&sent, "Column 'a' cannot be null", 1048, Some("a")),
            Some(5)
        );
        assert_eq!(first_nulls(&params, 0), Vec::<Option<usize>>::new());
    }

    #[test]
    fn server_messages_name_column_and_row() {
        assert_eq!(
            column_in("Data too long for column 'a' at row 3").as_deref(),
            Some("a")
        );
        assert_eq!(row_in("Data too long for column 'a' at row 3"), Some(3));
        assert_eq!(
            column_in("Incorrect datetime value: '2024-02-30' for column `db`.`t`.`d` at row 1")
                .as_deref(),
            Some("d")
        );
        assert_eq!(column_in("Column 'v' cannot be null").as_deref(), Some("v"));
        assert_eq!(row_in("Column 'v' cannot be null"), None);
    }
}
