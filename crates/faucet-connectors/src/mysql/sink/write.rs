//! Writing one page inside the caller's transaction: `append` inserts the rows with
//! multi-row prepared `INSERT`s; `upsert` collapses the page ([`super::changes`]), then
//! deletes every row (`t`), deletes by key (`d`) and upserts (`INSERT … ON DUPLICATE KEY
//! UPDATE`, one statement per column layout and chunk); a key-changing update whose unchanged
//! TOAST values exist only in the target first renames the stored row to its new key
//! ([`faucet_core::change::Moved`]). Every writing statement runs through
//! [`super::statement`]'s `run`, which turns a server error or warning about a value into a
//! [`FaucetError::Data`] naming the table, the column and the page row: nothing is coerced
//! silently.

use mysql_async::prelude::Queryable as _;
use mysql_async::{Conn, Value as MyValue};

use faucet_core::change::{ChangeLayout, Moved, moved_row_missing};
use faucet_core::{FaucetError, Page, Value, fault};

use super::changes::collapse;
use super::config::CONNECTOR;
use super::encode::{ColumnType, UNKNOWN_COLUMN, param, wire_size};
use super::statement::{Batch, classify, run, value_error};
use super::table::TargetTable;
use crate::mysql::table::{TableName, quote_ident};

/// At most this many rows per statement (and never more than 65,535 placeholders).
const MAX_ROWS: usize = 2_000;
/// A statement's parameters are cut at about this many bytes, or below the server's
/// `max_allowed_packet` when that is smaller ([`Target::max_packet`]).
const MAX_BYTES: usize = 4 * 1024 * 1024;
/// The bytes of a `COM_STMT_EXECUTE` packet beside its rows (header, statement id, flags),
/// with room to spare.
const PACKET_OVERHEAD: usize = 1024;
/// The most placeholders one prepared statement may have.
const MAX_PLACEHOLDERS: usize = 65_535;

/// How an upsert refers to the row it proposed: `VALUES(c)` (MariaDB, which has no row
/// alias, and MySQL before 8.0.19) or a row alias `AS faucet_new … faucet_new.c` (MySQL
/// 8.0.19+, where `VALUES()` is deprecated; untested here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpsertSyntax {
    /// `c = VALUES(c)`.
    Values,
    /// `AS faucet_new ON DUPLICATE KEY UPDATE c = faucet_new.c`.
    RowAlias,
}

impl UpsertSyntax {
    /// The syntax for a server whose `VERSION()` is `version`.
    pub(crate) fn for_version(version: &str) -> Self {
        if version.contains("MariaDB") {
            return Self::Values;
        }
        let mut parts = version
            .split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let v = (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        if v >= (8, 0, 19) {
            Self::RowAlias
        } else {
            Self::Values
        }
    }
}

/// What the sink learns about its server when a session opens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Server {
    /// The upsert syntax.
    pub(crate) syntax: UpsertSyntax,
    /// The session's `max_allowed_packet`, in bytes: no statement's packet may be larger.
    pub(crate) max_packet: usize,
}

/// What a page write needs to know.
pub(crate) struct Target<'a> {
    /// The table.
    pub(crate) name: &'a TableName,
    /// Its columns.
    pub(crate) table: &'a TargetTable,
    /// The upsert key (empty for append).
    pub(crate) key: &'a [String],
    /// The server's upsert syntax.
    pub(crate) syntax: UpsertSyntax,
    /// The server's `max_allowed_packet` ([`Server::max_packet`]).
    pub(crate) max_packet: usize,
}

impl Target<'_> {
    /// The most bytes of rows one statement may carry: under `max_allowed_packet`.
    fn packet_room(&self) -> usize {
        self.max_packet.saturating_sub(PACKET_OVERHEAD)
    }

    /// Where statements are cut: [`MAX_BYTES`], or less when the server takes less.
    fn cut_bytes(&self) -> usize {
        MAX_BYTES.min(self.packet_room())
    }
}

/// The bytes one row of `params` adds to a `COM_STMT_EXECUTE` packet: each value (with its
/// length prefix), its type (2 bytes) and its bit in the NULL bitmap.
fn row_bytes(params: &[MyValue]) -> usize {
    params.iter().map(wire_size).sum::<usize>() + 2 * params.len() + params.len() / 8 + 1
}

/// Checks that one row (`params`, named by `names`, page row `row`) fits in a statement under
/// the server's `max_allowed_packet`, and returns its size ([`row_bytes`]).
///
/// # Errors
/// [`FaucetError::Data`] naming the page row, the largest column and its size, the row's
/// size and `max_allowed_packet`: the server would refuse the packet (and close the session),
/// so the page is refused before anything of it is sent.
fn fitting_row(
    target: &Target<'_>,
    row: usize,
    names: &[&str],
    params: &[MyValue],
) -> Result<usize, FaucetError> {
    let bytes = row_bytes(params);
    if bytes <= target.packet_room() {
        return Ok(bytes);
    }
    let (column, size) = params
        .iter()
        .zip(names)
        .map(|(p, n)| {
            (
                *n,
                match p {
                    MyValue::Bytes(b) => b.len(),
                    _ => 8,
                },
            )
        })
        .max_by_key(|(_, size)| *size)
        .unwrap_or(("", 0));
    Err(value_error(
        target,
        Some(row),
        (!column.is_empty()).then_some(column),
        format!(
            "the row takes about {bytes} bytes in one statement (column `{column}`: a value of \
             {size} bytes), more than the server's `max_allowed_packet` ({} bytes) allows for \
             one packet; raise it on the server (`SET GLOBAL max_allowed_packet = …` and in \
             its configuration; new sessions take the value) or make the value smaller",
            target.max_packet
        ),
    ))
}

/// The declared types of `names` in the target.
fn types<'t>(target: &'t Target<'_>, names: &[&str]) -> Vec<&'t ColumnType> {
    names
        .iter()
        .map(|n| target.table.column(n).unwrap_or(&UNKNOWN_COLUMN))
        .collect()
}

/// Checks that every column of `names` exists in the target.
fn check_columns(
    names: &[&str],
    target: &Target<'_>,
    changes_appended: bool,
) -> Result<(), FaucetError> {
    for n in names {
        if target.table.type_of(n).is_none() {
            let columns: Vec<&str> = target.table.names().collect();
            return Err(crate::sql::sink::columns::unknown_field(
                CONNECTOR,
                target.name,
                n,
                &columns,
                changes_appended,
            ));
        }
    }
    Ok(())
}

fn column_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| quote_ident(n))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A multi-row `INSERT` into the target, cut into statements of at most [`MAX_ROWS`] rows,
/// [`MAX_PLACEHOLDERS`] placeholders and about [`MAX_BYTES`] of parameters.
struct Inserter<'a> {
    head: String,
    tuple: String,
    tail: String,
    types: Vec<&'a ColumnType>,
    names: &'a [&'a str],
    max_rows: usize,
    batch: Batch,
    json: Vec<u8>,
}

impl<'a> Inserter<'a> {
    fn new(target: &'a Target<'_>, names: &'a [&'a str], on_duplicate: bool) -> Self {
        let width = names.len();
        let cols = column_list(names);
        let tuple = format!("({})", vec!["?"; width].join(", "));
        let tail = if on_duplicate {
            upsert_tail(names, target.key, target.syntax)
        } else {
            String::new()
        };
        Self {
            head: format!("INSERT INTO {} ({cols}) VALUES ", target.name.quoted()),
            tuple,
            tail,
            types: types(target, names),
            names,
            max_rows: MAX_ROWS.min(MAX_PLACEHOLDERS / width.max(1)).max(1),
            batch: Batch::default(),
            json: Vec::new(),
        }
    }

    /// Adds page row `row` with `values` (in `names` order), running the statement of the
    /// rows before it first when this row would take it past [`Target::cut_bytes`].
    ///
    /// # Errors
    /// [`FaucetError::Data`] for a value the column cannot take, or a row that alone does not
    /// fit under `max_allowed_packet` ([`fitting_row`]).
    async fn push<'v>(
        &mut self,
        conn: &mut Conn,
        target: &Target<'_>,
        row: usize,
        values: impl Iterator<Item = &'v Value>,
    ) -> Result<(), FaucetError> {
        let mut params = Vec::with_capacity(self.names.len());
        for (i, v) in values.enumerate() {
            let p = param(v, self.types[i], &mut self.json)
                .map_err(|m| value_error(target, Some(row), Some(self.names[i]), m))?;
            params.push(p);
        }
        let bytes = fitting_row(target, row, self.names, &params)?;
        if !self.batch.rows.is_empty() && self.batch.bytes + bytes > target.cut_bytes() {
            self.flush(conn, target).await?;
        }
        self.batch.bytes += bytes;
        self.batch.params.extend(params);
        self.batch.rows.push(row);
        if self.batch.rows.len() >= self.max_rows {
            self.flush(conn, target).await?;
        }
        Ok(())
    }

    /// Runs the statement for the rows added since the last one.
    async fn flush(&mut self, conn: &mut Conn, target: &Target<'_>) -> Result<(), FaucetError> {
        let n = self.batch.rows.len();
        if n == 0 {
            return Ok(());
        }
        let mut sql =
            String::with_capacity(self.head.len() + n * (self.tuple.len() + 1) + self.tail.len());
        sql.push_str(&self.head);
        for i in 0..n {
            if i > 0 {
                sql.push(',');
            }
            sql.push_str(&self.tuple);
        }
        sql.push_str(&self.tail);
        let batch = std::mem::take(&mut self.batch);
        run(conn, target, &sql, batch, self.names, "INSERT").await
    }
}

/// ` ON DUPLICATE KEY UPDATE c = VALUES(c), …` for the non-key columns of `names` (the key
/// set to itself when there are none: a no-op that still reports no error).
fn upsert_tail(names: &[&str], key: &[String], syntax: UpsertSyntax) -> String {
    let others: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !key.iter().any(|k| k == n))
        .collect();
    let alias = match syntax {
        UpsertSyntax::Values => "",
        UpsertSyntax::RowAlias => " AS faucet_new",
    };
    let new = |c: &str| match syntax {
        UpsertSyntax::Values => format!("VALUES({c})"),
        UpsertSyntax::RowAlias => format!("faucet_new.{c}"),
    };
    let sets: Vec<String> = if others.is_empty() {
        key.iter()
            .take(1)
            .map(|k| format!("{0} = {0}", quote_ident(k)))
            .collect()
    } else {
        others
            .iter()
            .map(|n| {
                let q = quote_ident(n);
                format!("{q} = {}", new(&q))
            })
            .collect()
    };
    format!("{alias} ON DUPLICATE KEY UPDATE {}", sets.join(", "))
}

/// Appends every record of `page` with multi-row `INSERT`s.
///
/// # Errors
/// [`FaucetError::Data`] for a value the table cannot hold (naming column and page row), or
/// a field the table does not have; [`FaucetError::Write`] otherwise.
pub(crate) async fn append(
    conn: &mut Conn,
    target: &Target<'_>,
    page: &Page,
) -> Result<(), FaucetError> {
    let names: Vec<&str> = page.schema().names().collect();
    check_columns(&names, target, ChangeLayout::of(page.schema()).is_some())?;
    let mut ins = Inserter::new(target, &names, false);
    for (i, row) in page.rows().enumerate() {
        ins.push(conn, target, i, row.values().iter()).await?;
    }
    ins.flush(conn, target).await?;
    fault::point(fault::MID_PAGE);
    Ok(())
}

/// Applies `page` as upserts and deletes by `target.key` (see [`super::changes`]).
///
/// # Errors
/// As [`append`]; plus [`FaucetError::Data`] for records without the key.
pub(crate) async fn upsert(
    conn: &mut Conn,
    target: &Target<'_>,
    page: &Page,
    source_table: &mut Option<String>,
) -> Result<(), FaucetError> {
    let label = target.name.to_string();
    let collapsed = collapse(page, target.key, &label, source_table)?;
    let quoted = target.name.quoted();
    if collapsed.truncate {
        // Not TRUNCATE: it is DDL, an implicit commit of the rows written before it.
        run(
            conn,
            target,
            &format!("DELETE FROM {quoted}"),
            Batch::default(),
            &[],
            "DELETE",
        )
        .await?;
    }
    let key_names: Vec<&str> = target.key.iter().map(String::as_str).collect();
    let chains = collapsed.move_chains();
    if !chains.is_empty() {
        check_columns(&key_names, target, false)?;
        apply_moves(conn, target, &key_names, &chains).await?;
    }
    let deletes = collapsed.deletes();
    if !deletes.is_empty() {
        check_columns(&key_names, target, false)?;
        delete(conn, target, &key_names, &deletes).await?;
    }
    for (names, group) in &crate::sql::sink::columns::upsert_layouts(&collapsed) {
        check_columns(names, target, false)?;
        let group = group.iter().copied();
        let complete = target
            .table
            .required
            .iter()
            .all(|c| names.iter().any(|n| n == c));
        if complete {
            let mut ins = Inserter::new(target, names, true);
            for (columns, row) in group {
                ins.push(conn, target, row, columns.iter().map(|(_, v)| *v))
                    .await?;
            }
            ins.flush(conn, target).await?;
        } else {
            partial(conn, target, names, group).await?;
        }
        fault::point(fault::MID_PAGE);
    }
    Ok(())
}

/// Rows that leave out a column an `INSERT` needs (a NOT NULL column without a default, e.g.
/// an unchanged TOAST value): MySQL checks the row an `INSERT … ON DUPLICATE KEY UPDATE`
/// proposes before it looks for the duplicate, so each row is an `UPDATE` of its columns;
/// a row that matched none is inserted (and fails, naming the missing column, since the
/// target cannot hold it without that value).
async fn partial<'v>(
    conn: &mut Conn,
    target: &Target<'_>,
    names: &[&str],
    group: impl Iterator<Item = (&'v [(&'v str, &'v Value)], usize)>,
) -> Result<(), FaucetError> {
    let others: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !target.key.iter().any(|k| k == n))
        .collect();
    let key_names: Vec<&str> = target.key.iter().map(String::as_str).collect();
    let sets: Vec<String> = others
        .iter()
        .map(|n| format!("{} = ?", quote_ident(n)))
        .collect();
    let wheres: Vec<String> = key_names
        .iter()
        .map(|n| format!("{} = ?", quote_ident(n)))
        .collect();
    let sql = format!(
        "UPDATE {} SET {} WHERE {}",
        target.name.quoted(),
        sets.join(", "),
        wheres.join(" AND ")
    );
    let other_types = types(target, &others);
    let key_types = types(target, &key_names);
    let mut json = Vec::new();
    let mut missing: Vec<(&[(&str, &Value)], usize)> = Vec::new();
    for (columns, row) in group {
        if others.is_empty() {
            missing.push((columns, row));
            continue;
        }
        let mut batch = Batch {
            rows: vec![row],
            ..Batch::default()
        };
        let value_of = |n: &str| columns.iter().find(|(c, _)| *c == n).map(|(_, v)| *v);
        for (n, t) in others
            .iter()
            .zip(&other_types)
            .chain(key_names.iter().zip(&key_types))
        {
            let v = value_of(n).unwrap_or(&Value::Null);
            let p =
                param(v, t, &mut json).map_err(|m| value_error(target, Some(row), Some(n), m))?;
            batch.params.push(p);
        }
        let named: Vec<&str> = others.iter().chain(&key_names).copied().collect();
        fitting_row(target, row, &named, &batch.params)?;
        run(conn, target, &sql, batch, &[], "UPDATE").await?;
        if matched_rows(&conn.info()) == Some(0) {
            missing.push((columns, row));
        }
    }
    if !missing.is_empty() {
        let mut ins = Inserter::new(target, names, true);
        for (columns, row) in missing {
            ins.push(conn, target, row, columns.iter().map(|(_, v)| *v))
                .await?;
        }
        ins.flush(conn, target).await?;
    }
    Ok(())
}

/// Renames the stored rows that key-changing updates moved, as [`Moved`] says: a chain whose
/// row is already at its last key is skipped (a replayed page); the renames of the others run
/// one at a time in source order (a stale row of the new key deleted first), and each of
/// those chains must leave a row at its last key.
///
/// # Errors
/// [`FaucetError::Data`] ([`moved_row_missing`]) for a chain whose old row was never
/// delivered; as [`upsert`] otherwise.
async fn apply_moves(
    conn: &mut Conn,
    target: &Target<'_>,
    key_names: &[&str],
    chains: &[&[Moved<'_>]],
) -> Result<(), FaucetError> {
    let quoted = target.name.quoted();
    let key_types = types(target, key_names);
    let wheres: Vec<String> = key_names
        .iter()
        .map(|n| format!("{} = ?", quote_ident(n)))
        .collect();
    let wheres = wheres.join(" AND ");
    let exists_sql = format!("SELECT 1 FROM {quoted} WHERE {wheres} LIMIT 1");
    let delete_sql = format!("DELETE FROM {quoted} WHERE {wheres}");
    let sets: Vec<String> = key_names
        .iter()
        .map(|n| format!("{} = ?", quote_ident(n)))
        .collect();
    let rename_sql = format!("UPDATE {quoted} SET {} WHERE {wheres}", sets.join(", "));
    let mut json = Vec::new();
    let mut params = |row: usize, keys: &[&[&Value]]| -> Result<Batch, FaucetError> {
        let mut batch = Batch {
            rows: vec![row],
            ..Batch::default()
        };
        let mut named = Vec::new();
        for key in keys {
            for ((v, t), n) in key.iter().zip(&key_types).zip(key_names) {
                let p = param(v, t, &mut json)
                    .map_err(|e| value_error(target, Some(row), Some(n), e))?;
                batch.params.push(p);
                named.push(*n);
            }
        }
        fitting_row(target, row, &named, &batch.params)?;
        Ok(batch)
    };
    let exists = async |conn: &mut Conn, batch: &Batch| {
        conn.exec_first::<u8, _, _>(
            exists_sql.as_str(),
            mysql_async::Params::Positional(batch.params.clone()),
        )
        .await
        .map(|r| r.is_some())
        .map_err(|e| classify(e, "SELECT of a moved row", target.name))
    };
    let mut applied: Vec<&Moved<'_>> = Vec::new();
    let mut lasts: Vec<&Moved<'_>> = Vec::new();
    for chain in chains {
        let (Some(first), Some(last)) = (chain.first(), chain.last()) else {
            continue;
        };
        let at_last = exists(conn, &params(last.row, &[&last.to])?).await?;
        let at_first = exists(conn, &params(first.row, &[&first.from])?).await?;
        if at_last && (!at_first || last.keep_target) {
            continue;
        }
        applied.extend(chain.iter());
        lasts.push(last);
    }
    applied.sort_by_key(|m| m.row);
    for m in applied {
        let from = params(m.row, &[&m.from])?;
        if !exists(conn, &from).await? {
            continue;
        }
        let to = params(m.row, &[&m.to])?;
        run(conn, target, &delete_sql, to, &[], "DELETE").await?;
        let rename = params(m.row, &[&m.to, &m.from])?;
        run(conn, target, &rename_sql, rename, &[], "UPDATE").await?;
    }
    for last in lasts {
        if !exists(conn, &params(last.row, &[&last.to])?).await? {
            return Err(moved_row_missing(CONNECTOR, &target.name.to_string(), last));
        }
    }
    Ok(())
}

/// `Rows matched: 1  Changed: 0  Warnings: 0` → 1.
fn matched_rows(info: &str) -> Option<u64> {
    info.split("Rows matched: ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Deletes the rows with `keys`, a chunk of keys per statement.
async fn delete(
    conn: &mut Conn,
    target: &Target<'_>,
    key_names: &[&str],
    keys: &[(&[&Value], usize)],
) -> Result<(), FaucetError> {
    let key_types = types(target, key_names);
    let one = if key_names.len() == 1 {
        format!("{} = ?", quote_ident(key_names[0]))
    } else {
        let parts: Vec<String> = key_names
            .iter()
            .map(|n| format!("{} = ?", quote_ident(n)))
            .collect();
        format!("({})", parts.join(" AND "))
    };
    let per = (MAX_ROWS)
        .min(MAX_PLACEHOLDERS / key_names.len().max(1))
        .max(1);
    let mut json = Vec::new();
    let mut batch = Batch::default();
    let statement = |n: usize| {
        format!(
            "DELETE FROM {} WHERE {}",
            target.name.quoted(),
            vec![one.as_str(); n].join(" OR ")
        )
    };
    for (key, row) in keys {
        let mut params = Vec::with_capacity(key_names.len());
        for ((v, t), n) in key.iter().zip(&key_types).zip(key_names) {
            let p =
                param(v, t, &mut json).map_err(|m| value_error(target, Some(*row), Some(n), m))?;
            params.push(p);
        }
        let bytes = fitting_row(target, *row, key_names, &params)?;
        if !batch.rows.is_empty()
            && (batch.rows.len() >= per || batch.bytes + bytes > target.cut_bytes())
        {
            let sql = statement(batch.rows.len());
            run(
                conn,
                target,
                &sql,
                std::mem::take(&mut batch),
                &[],
                "DELETE",
            )
            .await?;
        }
        batch.bytes += bytes;
        batch.params.extend(params);
        batch.rows.push(*row);
    }
    if !batch.rows.is_empty() {
        let sql = statement(batch.rows.len());
        run(conn, target, &sql, batch, &[], "DELETE").await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_info_gives_the_matched_rows() {
        assert_eq!(
            matched_rows("Rows matched: 1  Changed: 0  Warnings: 0"),
            Some(1)
        );
    }

    #[test]
    fn upserts_use_values_on_mariadb_and_a_row_alias_on_mysql_8() {
        let key = vec!["id".to_owned()];
        assert_eq!(
            upsert_tail(&["id", "v"], &key, UpsertSyntax::Values),
            " ON DUPLICATE KEY UPDATE `v` = VALUES(`v`)"
        );
        assert_eq!(
            upsert_tail(&["id", "v"], &key, UpsertSyntax::RowAlias),
            " AS faucet_new ON DUPLICATE KEY UPDATE `v` = faucet_new.`v`"
        );
        assert_eq!(
            upsert_tail(&["id"], &key, UpsertSyntax::Values),
            " ON DUPLICATE KEY UPDATE `id` = `id`"
        );
        assert_eq!(
            UpsertSyntax::for_version("10.11.19-MariaDB-0+deb12u1"),
            UpsertSyntax::Values
        );
        assert_eq!(UpsertSyntax::for_version("8.0.36"), UpsertSyntax::RowAlias);
        assert_eq!(UpsertSyntax::for_version("8.0.18"), UpsertSyntax::Values);
        assert_eq!(
            UpsertSyntax::for_version("5.7.44-log"),
            UpsertSyntax::Values
        );
    }
}
