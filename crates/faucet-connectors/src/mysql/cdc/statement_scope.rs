//! Whether a data change logged as an SQL statement (a session with `binlog_format`
//! STATEMENT or MIXED; the server's global format is ROW) may have changed a listed table.
//! Which rows such a statement changed cannot be known, so the stream stops at any the
//! reader cannot prove unrelated to the listed tables, and skips only the proven ones.
//!
//! A statement is proven unrelated when all of these hold:
//! * its text names the one table it writes (`INSERT|REPLACE … [INTO] t`, a single-table
//!   `UPDATE t … SET` or `DELETE FROM t`, `LOAD DATA … INTO TABLE t`: module `statement`);
//!   a multi-table `UPDATE` / `DELETE`, `SELECT f()`, `DO`, `CALL`, `WITH …` are not;
//! * that table (in the event's default database when the text does not qualify it) is not
//!   listed (names match exactly, as table maps do);
//! * the catalog has it as a base table, not a view (a view may be over a listed table);
//! * it has no trigger (a trigger may write a listed table);
//! * no listed table has a foreign key to it with a cascading action (`ON DELETE|UPDATE
//!   CASCADE`, `SET NULL`, `SET DEFAULT`: the cascade changes the listed table's rows);
//! * the statement's text does not name a stored function (a function may write a listed
//!   table): no word of it followed by `(` is the name of a function in
//!   `information_schema.ROUTINES`.
//!
//! The catalog is read as it is when the stream passes the statement, not as it was when
//! the statement ran: a view, trigger or function dropped since is not seen (a table that is
//! no longer there is not proven unrelated). Answers are kept per table, and the function
//! names once, until the stream passes DDL ([`StatementScope::forget`]).

use std::collections::HashMap;

use mysql_async::prelude::Queryable;

use faucet_core::FaucetError;

use super::CONNECTOR;
use super::changes::ChangeDecoder;
use crate::mysql::table::TableName;

/// The cached catalog answers of [`StatementScope::concerns`].
#[derive(Debug, Default)]
pub(crate) struct StatementScope {
    /// `(database, table)` → why a statement writing it may change a listed table (`None`:
    /// it cannot).
    tables: HashMap<(String, String), Option<String>>,
    /// Lower-cased names of the server's stored functions, once read.
    functions: Option<Vec<String>>,
}

fn catalog_error(e: mysql_async::Error) -> FaucetError {
    FaucetError::read(
        CONNECTOR,
        "reading information_schema to tell whether a statement-logged change concerns a \
         listed table",
        Some(Box::new(e)),
    )
}

impl StatementScope {
    /// Forgets every answer (the stream passed DDL: a view, trigger, function or foreign key
    /// may have come or gone).
    pub(crate) fn forget(&mut self) {
        self.tables.clear();
        self.functions = None;
    }

    /// Why the statement `sql` (default database `schema`), which writes `target` when its
    /// text says (module `statement`), may have changed a listed table of `decoder`; `None`
    /// when it is proven unrelated (the rules of this module).
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the catalog cannot be read.
    pub(crate) async fn concerns(
        &mut self,
        conn: &mut mysql_async::Conn,
        decoder: &ChangeDecoder,
        schema: &str,
        sql: &str,
        target: Option<&TableName>,
    ) -> Result<Option<String>, FaucetError> {
        let Some(target) = target else {
            return Ok(Some(
                "its text does not name the one table it writes (several tables, or a \
                 call), so it may be a listed one"
                    .to_owned(),
            ));
        };
        let database = match target.database.as_deref() {
            Some(db) => db.to_owned(),
            None if !schema.is_empty() => schema.to_owned(),
            None => {
                return Ok(Some(format!(
                    "it writes `{}` with no database named and none selected",
                    target.table
                )));
            }
        };
        let name = format!("{database}.{}", target.table);
        if decoder.listed(&database, &target.table) {
            return Ok(Some(format!("it writes {name}")));
        }
        let key = (database, target.table.clone());
        if !self.tables.contains_key(&key) {
            let answer = table_concerns(conn, decoder, &key.0, &key.1, &name).await?;
            self.tables.insert(key.clone(), answer);
        }
        if let Some(why) = self.tables.get(&key).cloned().flatten() {
            return Ok(Some(why));
        }
        if self.functions.is_none() {
            let names: Vec<String> = conn
                .query(
                    "SELECT ROUTINE_NAME FROM information_schema.ROUTINES \
                     WHERE ROUTINE_TYPE = 'FUNCTION'",
                )
                .await
                .map_err(catalog_error)?;
            self.functions = Some(names.into_iter().map(|n| n.to_lowercase()).collect());
        }
        let called = self
            .functions
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|f| calls(sql, f));
        Ok(called
            .map(|f| format!("it calls `{f}`, a stored function, which may write a listed table")))
    }
}

/// What the catalog says of table `database`.`table` (`name`): why writing it may change a
/// listed table, or `None`.
async fn table_concerns(
    conn: &mut mysql_async::Conn,
    decoder: &ChangeDecoder,
    database: &str,
    table: &str,
    name: &str,
) -> Result<Option<String>, FaucetError> {
    let kind: Option<String> = conn
        .exec_first(
            "SELECT TABLE_TYPE FROM information_schema.TABLES \
             WHERE BINARY TABLE_SCHEMA = ? AND BINARY TABLE_NAME = ?",
            (database, table),
        )
        .await
        .map_err(catalog_error)?;
    match kind.as_deref() {
        None => {
            return Ok(Some(format!(
                "{name} is not in the catalog now (dropped since?), so what it was cannot be \
                 checked"
            )));
        }
        Some("VIEW") => {
            return Ok(Some(format!(
                "{name} is a view, which may be over a listed table"
            )));
        }
        Some(_) => {}
    }
    let triggers: Vec<String> = conn
        .exec(
            "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS \
             WHERE BINARY EVENT_OBJECT_SCHEMA = ? AND BINARY EVENT_OBJECT_TABLE = ?",
            (database, table),
        )
        .await
        .map_err(catalog_error)?;
    if let Some(t) = triggers.first() {
        return Ok(Some(format!(
            "{name} has trigger `{t}`, which may write a listed table"
        )));
    }
    let children: Vec<(String, String)> = conn
        .exec(
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS \
             WHERE BINARY UNIQUE_CONSTRAINT_SCHEMA = ? AND BINARY REFERENCED_TABLE_NAME = ? \
             AND (DELETE_RULE NOT IN ('RESTRICT', 'NO ACTION') \
                  OR UPDATE_RULE NOT IN ('RESTRICT', 'NO ACTION'))",
            (database, table),
        )
        .await
        .map_err(catalog_error)?;
    Ok(children
        .iter()
        .find(|(db, t)| decoder.listed(db, t))
        .map(|(db, t)| format!("listed table {db}.{t} has a cascading foreign key to {name}")))
}

/// Whether `sql` calls function `f` (lower case): the word `f`, outside quotes, followed by
/// `(` (spaces allowed between).
fn calls(sql: &str, f: &str) -> bool {
    let lower = sql.to_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(f) {
        let at = from + i;
        let end = at + f.len();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
        let before = lower[..at].chars().next_back();
        let whole = !word(before) && !word(lower[end..].chars().next());
        let quoted_ok = before != Some('\'') && before != Some('"');
        if whole
            && quoted_ok
            && lower[end..]
                .trim_start_matches('`')
                .trim_start()
                .starts_with('(')
        {
            return true;
        }
        from = end;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_call_is_a_word_followed_by_a_parenthesis() {
        assert!(calls("INSERT INTO t VALUES (bump(1))", "bump"));
        assert!(calls("INSERT INTO t VALUES (`bump` (1))", "bump"));
        assert!(calls("insert into t values (d.Bump(1))", "bump"));
        assert!(!calls("INSERT INTO t VALUES (bumper(1))", "bump"));
        assert!(!calls("INSERT INTO bump VALUES (1)", "bump"));
        assert!(!calls("INSERT INTO t VALUES ('bump')", "bump"));
    }
}
