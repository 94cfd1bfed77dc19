//! Writing one page inside the caller's transaction: `append` streams the rows with
//! `COPY target (columns) FROM STDIN`; `upsert` collapses the page ([`super::changes`]),
//! then truncates, deletes and upserts through the session's staging table (COPY into it,
//! then one set-based statement per column layout); a key-changing update whose unchanged
//! TOAST values exist only in the target first renames the stored row to its new key
//! ([`faucet_core::change::Moved`]). Errors of the server about a value
//! (SQLSTATE classes 22 and 23) become [`FaucetError::Data`] naming the table, the column
//! and the page row.

use sqlx::Executor as _;
use sqlx::postgres::PgConnection;

use crate::sql::ident::quote_ident;
use faucet_core::change::{self, ChangeLayout, Moved, moved_row_missing};
use faucet_core::{FaucetError, Page, Value, fault};

use super::changes::{collapse, is_change_page};
use super::encode::write_copy_value;
use super::nul::{NulBytes, cleaned, holds_nul};
use super::second_session::SecondSession;
use super::snapshot_copy::SnapshotPath;
use super::table::{TargetTable, check_field_name};
use crate::postgres::config::CONNECTOR;
use crate::postgres::failure::{db_error, is_connection_lost};
use crate::postgres::ident::TableName;
use crate::sql::sink::statement_failed;

/// COPY data is sent in chunks of about this many bytes.
const CHUNK_BYTES: usize = 256 * 1024;

/// What a page write needs to know.
pub(crate) struct Target<'a> {
    /// The table.
    pub(crate) name: &'a TableName,
    /// Its columns.
    pub(crate) table: &'a TargetTable,
    /// The upsert key (empty for append).
    pub(crate) key: &'a [String],
    /// The configured `key` (also for append), to name a bad record by.
    pub(crate) record_key: &'a [String],
    /// What to do with U+0000 in a value.
    pub(crate) nul: NulBytes,
    /// The session's staging table of this target (`pg_temp.faucet_stage[_<n>]`).
    pub(crate) stage: &'a str,
    /// The sink's second session, that takes part of a snapshot page's plain COPY.
    pub(crate) second: &'a SecondSession,
}

/// Why a COPY failed: the server's error, or a value holding U+0000 found before sending
/// (`row`: the ordinal of the row in the COPY, `column`: the index of the column).
pub(super) enum CopyFailure {
    Sql(sqlx::Error),
    Nul { row: usize, column: usize },
}

/// The error for a value holding U+0000 at `column` of page row `row` (0-based) under the
/// `fail` policy: names the table, column, page row, the record's key or source position,
/// and the fix.
pub(super) fn nul_error(target: &Target<'_>, page: &Page, row: usize, column: &str) -> FaucetError {
    FaucetError::data(
        CONNECTOR,
        format!("{}, column {column}, page row {}", target.name, row + 1),
        format!(
            "the value of `{column}` holds U+0000 (NUL), which PostgreSQL cannot store in \
             text or jsonb; the record: {}. Remove it in the source, or set `nul_bytes: strip` \
             (drop it) or `nul_bytes: replace` (write U+FFFD) on the sink; the default, \
             `nul_bytes: fail`, writes nothing of the page",
            describe_record(page, row, target.record_key)
        ),
    )
}

/// Names record `row` (0-based) of `page` for people: its key values (`key`, read from a
/// change record's `after` or `before`), a change record's op, table and LSN, and its source
/// position as far as the page's bookmark tells it (a file source's record number).
fn describe_record(page: &Page, row: usize, key: &[String]) -> String {
    use faucet_core::value::json::write_value;
    let text = |v: &Value| {
        let mut out = Vec::new();
        write_value(&mut out, v);
        String::from_utf8_lossy(&out).into_owned()
    };
    let schema = page.schema();
    let Some(values) = page.row(row) else {
        return format!("page row {}", row + 1);
    };
    let values = values.values();
    let field = |name: &str| schema.index_of(name).map(|i| &values[i]);
    let mut parts: Vec<String> = Vec::new();
    let change = ChangeLayout::of(schema);
    let nested = |name: &str| match field(name) {
        Some(Value::Row(r)) => Some(r),
        _ => None,
    };
    let keyed: Vec<String> = key
        .iter()
        .filter_map(|k| {
            let v = if change.is_some() {
                [nested(change::AFTER), nested(change::BEFORE)]
                    .into_iter()
                    .flatten()
                    .find_map(|r| r.schema.index_of(k).map(|i| &r.values[i]))
            } else {
                field(k)
            }?;
            Some(format!("{k} = {}", text(v)))
        })
        .collect();
    if !keyed.is_empty() {
        parts.push(format!("key {}", keyed.join(", ")));
    }
    if let Some(layout) = &change {
        let get = |n: &str| field(n).map(text).unwrap_or_default();
        let at: Vec<String> = layout
            .position_fields()
            .iter()
            .map(|&i| format!("{} {}", schema.fields()[i].name, text(&values[i])))
            .collect();
        let at = if at.is_empty() {
            String::new()
        } else {
            format!(" at {}", at.join(", "))
        };
        parts.push(format!(
            "change {} of {}{at}",
            get(change::OP),
            get(change::TABLE)
        ));
    } else if let Some(b) = page.bookmark() {
        let records = b
            .get("records")
            .and_then(faucet_core::serde_json::Value::as_u64);
        match (b.get("file").and_then(|f| f.as_str()), records) {
            (Some(file), Some(records)) => {
                let n = records.saturating_sub(page.len() as u64) + row as u64 + 1;
                parts.push(format!("record {n} of {file}"));
            }
            _ => parts.push(format!("in the page that ends at source position {b}")),
        }
    }
    if parts.is_empty() {
        parts.push(format!("page row {}", row + 1));
    }
    parts.join(", ")
}

/// Buffers reused from page to page.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    data: Vec<u8>,
    scratch: Vec<u8>,
}

/// Whether SQLSTATE `code` is the server refusing a row's value rather than the statement or
/// the session failing: class 22 (data exception) or 23 (integrity constraint violation),
/// the PostgreSQL manual's appendix A.
pub(super) fn refuses_a_value(code: &str) -> bool {
    code.starts_with("22") || code.starts_with("23")
}

/// Why a statement failed, told apart for the caller: a bad value, a failure with a known
/// outcome (rolled back), or a lost session (outcome unknown).
pub(crate) fn classify(
    e: sqlx::Error,
    what: &str,
    target: &TableName,
    rows: Option<&[usize]>,
) -> FaucetError {
    if let Some(db) = db_error(&e) {
        let code = db.code();
        if refuses_a_value(code) {
            let (line, column) = copy_context(db.r#where().unwrap_or(""));
            let column = db.column().map(str::to_owned).or(column);
            let row = match (line, rows) {
                (Some(l), Some(map)) => map.get(l.wrapping_sub(1)).map(|r| r + 1),
                (Some(l), None) => Some(l),
                _ => None,
            };
            // The server names the table it refused a row of; when that is not the target
            // (nor the sink's staging table), a trigger, rule or foreign-key action on the
            // target wrote it: name the server's table, never the target's column of the
            // same name.
            let other = db
                .table()
                .filter(|t| *t != target.name && !t.starts_with("faucet_stage"))
                .map(|t| match db.schema() {
                    Some(s) => format!("{s}.{t}"),
                    None => t.to_owned(),
                });
            let mut location = other.clone().unwrap_or_else(|| target.to_string());
            if let Some(c) = column {
                location.push_str(&format!(", column {c}"));
            }
            if let Some(r) = row {
                location.push_str(&format!(", page row {r}"));
            }
            let mut message = format!("{} (SQLSTATE {code})", db.message());
            if let Some(detail) = db.detail() {
                message.push_str(": ");
                message.push_str(detail);
            }
            if let Some(other) = &other {
                let constraint = db
                    .constraint()
                    .map(|c| format!(", constraint {c}"))
                    .unwrap_or_default();
                message.push_str(&format!(
                    " — raised in table {other}{constraint}, not the target: written by a \
                     trigger, rule or foreign-key action on {target} while it took this row"
                ));
            }
            return FaucetError::data(CONNECTOR, location, message);
        }
    }
    let lost = is_connection_lost(&e);
    statement_failed(CONNECTOR, what, target, lost, Box::new(e))
}

/// The line and column of a COPY's context (`COPY faucet_stage, line 3, column phone: "x"`
/// → (Some(3), Some("phone"))), from the context line that is the COPY's: a trigger's
/// error carries its own lines first (`PL/pgSQL function f() line 2 at SQL statement`).
fn copy_context(context: &str) -> (Option<usize>, Option<String>) {
    let Some(copy) = context.lines().find(|l| l.starts_with("COPY ")) else {
        return (None, None);
    };
    let line = copy.split(", line ").nth(1).and_then(|rest| {
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
    });
    let column = copy
        .split(", column ")
        .nth(1)
        .map(|rest| rest.split(':').next().unwrap_or(rest).trim().to_owned());
    (line, column)
}

/// Checks that every column of `names` exists in the target; `changes_appended` says the
/// names are a change record's, appended as rows (the message then names the fix).
pub(super) fn check_columns<'n>(
    names: impl IntoIterator<Item = &'n str>,
    target: &Target<'_>,
    changes_appended: bool,
) -> Result<(), FaucetError> {
    for n in names {
        if !target.table.columns.iter().any(|c| c == n) {
            check_field_name(target.name, n)?;
            let hint = if changes_appended {
                " — these are change records, appended as rows (op, table, lsn, commit_ts, \
                 before, after, unchanged_toast: an audit log); to apply the changes to a copy \
                 of the source table instead, set `write_mode: upsert` with its `key`, or \
                 let `create_table: true` create the audit table under a new name"
            } else {
                ""
            };
            return Err(FaucetError::data(
                CONNECTOR,
                format!("{}, column {n}", target.name),
                format!(
                    "the records have a field `{n}` that table {} does not have (columns: \
                     {}){hint}",
                    target.name,
                    target.table.columns.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn column_list<'n>(names: impl IntoIterator<Item = &'n str>) -> String {
    names
        .into_iter()
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Encodes `rows` and streams them into `COPY <into> (<cols>) FROM STDIN`, a chunk of about
/// [`CHUNK_BYTES`] at a time, so the server parses one chunk while the next is encoded.
pub(super) async fn copy_in<'v, R, I>(
    conn: &mut PgConnection,
    into: &str,
    cols: &str,
    rows: R,
    nul: NulBytes,
    bufs: &mut Buffers,
) -> Result<u64, CopyFailure>
where
    R: Iterator<Item = I> + Send,
    I: Iterator<Item = &'v Value> + Send,
{
    let mut copy = conn
        .copy_in_raw(&format!("COPY {into} ({cols}) FROM STDIN"))
        .await
        .map_err(CopyFailure::Sql)?;
    bufs.data.clear();
    for (n, row) in rows.enumerate() {
        if let Err(column) = encode_row(&mut bufs.data, &mut bufs.scratch, row, nul) {
            bufs.data.clear();
            let _ = copy.abort("faucet: a value holds U+0000").await;
            return Err(CopyFailure::Nul { row: n, column });
        }
        if bufs.data.len() >= CHUNK_BYTES {
            if let Err(e) = copy.send(bufs.data.as_slice()).await {
                let _ = copy.abort("faucet: send failed").await;
                return Err(CopyFailure::Sql(e));
            }
            bufs.data.clear();
        }
    }
    if !bufs.data.is_empty() {
        if let Err(e) = copy.send(bufs.data.as_slice()).await {
            let _ = copy.abort("faucet: send failed").await;
            return Err(CopyFailure::Sql(e));
        }
        bufs.data.clear();
    }
    copy.finish().await.map_err(CopyFailure::Sql)
}

/// Appends every record of `page` with one COPY.
///
/// # Errors
/// [`FaucetError::Data`] for a value the table cannot hold (naming column and page row), or a
/// field the table does not have; [`FaucetError::Write`] otherwise.
pub(crate) async fn append(
    conn: &mut PgConnection,
    target: &Target<'_>,
    page: &Page,
    bufs: &mut Buffers,
) -> Result<(), FaucetError> {
    let names: Vec<&str> = page.schema().names().collect();
    check_columns(names.iter().copied(), target, is_change_page(page))?;
    copy_in(
        conn,
        &target.name.quoted(),
        &column_list(names.iter().copied()),
        page.rows().map(|r| r.values().iter()),
        target.nul,
        bufs,
    )
    .await
    .map_err(|e| match e {
        CopyFailure::Sql(e) => classify(e, "COPY", target.name, None),
        CopyFailure::Nul { row, column } => nul_error(target, page, row, names[column]),
    })?;
    fault::point(fault::MID_PAGE);
    Ok(())
}

/// Encodes one row; `Err(column index)` for a value holding U+0000 under
/// [`NulBytes::Fail`] (other policies clean the value first).
fn encode_row<'v>(
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    values: impl Iterator<Item = &'v Value>,
    nul: NulBytes,
) -> Result<(), usize> {
    for (i, v) in values.enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        if holds_nul(v) {
            if nul == NulBytes::Fail {
                return Err(i);
            }
            write_copy_value(out, &cleaned(v, nul), scratch);
        } else {
            write_copy_value(out, v, scratch);
        }
    }
    out.push(b'\n');
    Ok(())
}

/// Applies `page` as upserts and deletes by `target.key` (see [`super::changes`]); a page of
/// snapshot rows into a target that was empty takes a plain COPY instead
/// ([`super::snapshot_copy`], as `snapshot` says).
///
/// # Errors
/// As [`append`]; plus [`FaucetError::Data`] for records without the key.
pub(crate) async fn upsert(
    conn: &mut PgConnection,
    target: &Target<'_>,
    page: &Page,
    bufs: &mut Buffers,
    source_table: &mut Option<String>,
    snapshot: &mut SnapshotPath,
) -> Result<(), FaucetError> {
    if super::snapshot_copy::write(conn, target, page, snapshot, source_table, bufs).await? {
        return Ok(());
    }
    let label = target.name.to_string();
    let collapsed = collapse(page, target.key, &label, source_table, target.nul)?;
    let quoted = target.name.quoted();
    if collapsed.truncate {
        conn.execute(format!("TRUNCATE {quoted}").as_str())
            .await
            .map_err(|e| classify(e, "TRUNCATE", target.name, None))?;
    }
    let chains = collapsed.move_chains();
    if !chains.is_empty() {
        apply_moves(conn, target, page, &chains, bufs).await?;
    }
    // Deletes: stage the keys, one DELETE ... USING.
    let deletes = collapsed.deletes();
    if !deletes.is_empty() {
        check_columns(target.key.iter().map(String::as_str), target, false)?;
        let rows: Vec<usize> = deletes.iter().map(|(_, r)| *r).collect();
        let keys = deletes.iter().map(|(k, _)| k.iter().copied());
        let key_names: Vec<&str> = target.key.iter().map(String::as_str).collect();
        let staged = Staged {
            page,
            names: &key_names,
            rows: &rows,
        };
        stage(conn, target, &staged, keys, bufs).await?;
        let on: Vec<String> = target
            .key
            .iter()
            .map(|k| format!("t.{0} = s.{0}", quote_ident(k)))
            .collect();
        let sql = format!(
            "DELETE FROM {quoted} AS t USING {} AS s WHERE {}",
            target.stage,
            on.join(" AND ")
        );
        conn.execute(sql.as_str())
            .await
            .map_err(|e| classify(e, "DELETE", target.name, None))?;
    }
    // Upserts, one statement per column layout (plain rows: one layout).
    for (names, group) in &crate::sql::sink::columns::upsert_layouts(&collapsed) {
        check_columns(names.iter().copied(), target, false)?;
        let rows: Vec<usize> = group.iter().map(|(_, r)| *r).collect();
        let cols = column_list(names.iter().copied());
        let values = group.iter().map(|(c, _)| c.iter().map(|(_, v)| *v));
        let staged = Staged {
            page,
            names,
            rows: &rows,
        };
        stage(conn, target, &staged, values, bufs).await?;
        let covers_table = target
            .table
            .columns
            .iter()
            .all(|c| names.iter().any(|n| n == c));
        let into = (quoted.as_str(), target.stage);
        for sql in upsert_statements(into, &cols, names, target.key, covers_table) {
            conn.execute(sql.as_str())
                .await
                .map_err(|e| classify(e, "upsert", target.name, None))?;
        }
        fault::point(fault::MID_PAGE);
    }
    Ok(())
}

/// The session's table of the keys of a page's moves: `faucet_move_ord` 2i holds the old key
/// of move i, 2i + 1 its new key (dropped at commit).
const MOVES: &str = "pg_temp.faucet_moves";

/// Renames the stored rows that key-changing updates moved, as [`Moved`] says: stages the
/// old and new key of every rename in [`MOVES`], skips a chain whose row is already at its
/// last key (a replayed page), runs the renames of the others in source order (a stale row
/// of the new key deleted first; the key columns change, the TOAST values stay in place), and
/// checks that each of those chains left a row at its last key.
///
/// # Errors
/// [`FaucetError::Data`] ([`moved_row_missing`]) for a chain whose old row was never
/// delivered; as [`upsert`] otherwise.
async fn apply_moves(
    conn: &mut PgConnection,
    target: &Target<'_>,
    page: &Page,
    chains: &[&[Moved<'_>]],
    bufs: &mut Buffers,
) -> Result<(), FaucetError> {
    check_columns(target.key.iter().map(String::as_str), target, false)?;
    let quoted = target.name.quoted();
    let keys = column_list(target.key.iter().map(String::as_str));
    conn.execute(
        format!(
            "DROP TABLE IF EXISTS {MOVES}; CREATE TEMP TABLE faucet_moves ON COMMIT DROP AS \
             SELECT 0::int AS faucet_move_ord, {keys} FROM {quoted} WITH NO DATA"
        )
        .as_str(),
    )
    .await
    .map_err(|e| classify(e, "CREATE TABLE of moved keys", target.name, None))?;
    let moves: Vec<&Moved<'_>> = chains.iter().flat_map(|c| c.iter()).collect();
    let ords: Vec<Value> = (0..moves.len() as i64 * 2).map(Value::Int).collect();
    let rows: Vec<usize> = moves.iter().flat_map(|m| [m.row, m.row]).collect();
    let values = moves
        .iter()
        .flat_map(|m| [&m.from, &m.to])
        .zip(&ords)
        .map(|(k, ord)| std::iter::once(ord).chain(k.iter().copied()));
    let mut names = vec!["faucet_move_ord"];
    names.extend(target.key.iter().map(String::as_str));
    let cols = column_list(names.iter().copied());
    copy_in(conn, MOVES, &cols, values, target.nul, bufs)
        .await
        .map_err(|e| match e {
            CopyFailure::Sql(e) => classify(e, "COPY", target.name, Some(&rows)),
            CopyFailure::Nul { row, column } => {
                let page_row = rows.get(row).copied().unwrap_or(row);
                nul_error(target, page, page_row, names[column])
            }
        })?;
    let on = |a: &str, b: &str| -> String {
        target
            .key
            .iter()
            .map(|k| format!("{a}.{0} = {b}.{0}", quote_ident(k)))
            .collect::<Vec<_>>()
            .join(" AND ")
    };
    let sets: Vec<String> = target
        .key
        .iter()
        .map(|k| format!("{0} = n.{0}", quote_ident(k)))
        .collect();
    let (t_n, o_f, t_f, x_n) = (on("t", "n"), on("o", "f"), on("t", "f"), on("x", "n"));
    // Whether the row at the staged key `ord` exists.
    let exists = |ord: usize| {
        format!(
            "EXISTS (SELECT 1 FROM {quoted} AS t, {MOVES} AS n WHERE n.faucet_move_ord = {ord} \
             AND {t_n})"
        )
    };
    // Chains: (index of the first rename, index of the last) in `moves`.
    let mut bounds = Vec::with_capacity(chains.len());
    let mut at = 0;
    for c in chains {
        bounds.push((at, at + c.len() - 1));
        at += c.len();
    }
    let probe: Vec<String> = bounds
        .iter()
        .map(|&(first, last)| format!("{}, {}", exists(2 * last + 1), exists(2 * first)))
        .collect();
    let found: Vec<bool> = if probe.is_empty() {
        Vec::new()
    } else {
        let row = sqlx::query(&format!("SELECT {}", probe.join(", ")))
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| classify(e, "reading the moved rows", target.name, None))?;
        use sqlx::Row as _;
        // A value that does not decode as a boolean is an error, never a "no row".
        (0..probe.len() * 2)
            .map(|i| {
                row.try_get::<bool, _>(i)
                    .map_err(|e| classify(e, "reading the moved rows", target.name, None))
            })
            .collect::<Result<_, _>>()?
    };
    let mut applied: Vec<usize> = Vec::new();
    let mut lasts: Vec<usize> = Vec::new();
    for (c, &(first, last)) in bounds.iter().enumerate() {
        let (at_last, at_first) = (found[2 * c], found[2 * c + 1]);
        if at_last && (!at_first || moves[last].keep_target) {
            continue;
        }
        applied.extend(first..=last);
        lasts.push(last);
    }
    applied.sort_by_key(|&i| moves[i].row);
    let mut sql = String::new();
    for i in applied {
        let (f, n) = (2 * i, 2 * i + 1);
        let pair = format!(
            "{MOVES} AS f, {MOVES} AS n WHERE f.faucet_move_ord = {f} AND n.faucet_move_ord = {n}"
        );
        sql.push_str(&format!(
            "DELETE FROM {quoted} AS t USING {pair} AND {t_n} \
             AND EXISTS (SELECT 1 FROM {quoted} AS o WHERE {o_f}); \
             UPDATE {quoted} AS t SET {} FROM {pair} AND {t_f} \
             AND NOT EXISTS (SELECT 1 FROM {quoted} AS x WHERE {x_n}); ",
            sets.join(", ")
        ));
    }
    if sql.is_empty() {
        return Ok(());
    }
    conn.execute(sql.as_str())
        .await
        .map_err(|e| classify(e, "moving rows to their new keys", target.name, None))?;
    let last: Vec<String> = lasts.iter().map(|i| (2 * i + 1).to_string()).collect();
    let first_missing: Option<i32> = sqlx::query_scalar(&format!(
        "SELECT min(n.faucet_move_ord) FROM {MOVES} AS n WHERE n.faucet_move_ord IN ({}) \
         AND NOT EXISTS (SELECT 1 FROM {quoted} AS t WHERE {t_n})",
        last.join(", ")
    ))
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| classify(e, "checking the moved rows", target.name, None))?;
    if let Some(ord) = first_missing
        && let Some(m) = usize::try_from(ord).ok().and_then(|o| moves.get(o / 2))
    {
        return Err(moved_row_missing(CONNECTOR, &target.name.to_string(), m));
    }
    Ok(())
}

/// The statements that upsert the staged rows of one column layout into `quoted`.
///
/// When the layout has every column of the table: one `INSERT ... SELECT ... ON CONFLICT
/// (key) DO UPDATE`. When it leaves columns out (unchanged TOAST values, fields the records
/// do not carry), an `UPDATE ... FROM` of the existing rows and an `INSERT` of the missing
/// ones: PostgreSQL checks NOT NULL on the row an `INSERT ... ON CONFLICT` proposes before it
/// looks for the conflict, so a left-out NOT NULL column would fail even for a row that
/// exists. The keys of a layout are unique (the page was collapsed), so neither statement
/// meets a key twice.
fn upsert_statements(
    (quoted, stage): (&str, &str),
    cols: &str,
    names: &[&str],
    key: &[String],
    covers_table: bool,
) -> Vec<String> {
    let key_cols = column_list(key.iter().map(String::as_str));
    let others: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !key.iter().any(|k| k == n))
        .collect();
    if covers_table {
        let action = if others.is_empty() {
            "DO NOTHING".to_owned()
        } else {
            let sets: Vec<String> = others
                .iter()
                .map(|n| format!("{0} = EXCLUDED.{0}", quote_ident(n)))
                .collect();
            format!("DO UPDATE SET {}", sets.join(", "))
        };
        return vec![format!(
            "INSERT INTO {quoted} ({cols}) SELECT {cols} FROM {stage} \
             ON CONFLICT ({key_cols}) {action}"
        )];
    }
    let on: Vec<String> = key
        .iter()
        .map(|k| format!("t.{0} = s.{0}", quote_ident(k)))
        .collect();
    let on = on.join(" AND ");
    let mut out = Vec::with_capacity(2);
    if !others.is_empty() {
        let sets: Vec<String> = others
            .iter()
            .map(|n| format!("{0} = s.{0}", quote_ident(n)))
            .collect();
        out.push(format!(
            "UPDATE {quoted} AS t SET {} FROM {stage} AS s WHERE {on}",
            sets.join(", ")
        ));
    }
    let s_cols: Vec<String> = names
        .iter()
        .map(|n| format!("s.{}", quote_ident(n)))
        .collect();
    out.push(format!(
        "INSERT INTO {quoted} ({cols}) SELECT {} FROM {stage} AS s \
         WHERE NOT EXISTS (SELECT 1 FROM {quoted} AS t WHERE {on})",
        s_cols.join(", ")
    ));
    out
}

/// What is staged: the columns, and the page row of each staged row (for error messages).
struct Staged<'a> {
    page: &'a Page,
    names: &'a [&'a str],
    rows: &'a [usize],
}

/// Empties the staging table and COPYs `values` (one iterator per row) into the staged
/// columns.
async fn stage<'v, R, I>(
    conn: &mut PgConnection,
    target: &Target<'_>,
    staged: &Staged<'_>,
    values: R,
    bufs: &mut Buffers,
) -> Result<(), FaucetError>
where
    R: Iterator<Item = I> + Send,
    I: Iterator<Item = &'v Value> + Send,
{
    conn.execute(format!("TRUNCATE {}", target.stage).as_str())
        .await
        .map_err(|e| classify(e, "TRUNCATE staging", target.name, None))?;
    let cols = column_list(staged.names.iter().copied());
    copy_in(conn, target.stage, &cols, values, target.nul, bufs)
        .await
        .map_err(|e| match e {
            CopyFailure::Sql(e) => classify(e, "COPY", target.name, Some(staged.rows)),
            CopyFailure::Nul { row, column } => {
                let page_row = staged.rows.get(row).copied().unwrap_or(row);
                nul_error(target, staged.page, page_row, staged.names[column])
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_context_is_parsed() {
        assert_eq!(
            copy_context("COPY faucet_stage, line 3, column phone: \"x\""),
            (Some(3), Some("phone".to_owned()))
        );
        assert_eq!(copy_context("COPY t, line 12"), (Some(12), None));
        assert_eq!(copy_context(""), (None, None));
        // A trigger's error: its own context lines come first, their `line` is the
        // function's; the row is the COPY's.
        assert_eq!(
            copy_context(
                "SQL statement \"INSERT INTO s.audit (v) VALUES (NEW.v)\"\nPL/pgSQL function \
                 s.log_v() line 1 at SQL statement\nCOPY t, line 3: \"3\t\\N\""
            ),
            (Some(3), None)
        );
    }

    #[test]
    fn upserts_of_whole_rows_use_on_conflict_and_partial_rows_update_then_insert() {
        let key = vec!["id".to_owned()];
        let upsert = |cols: &str, names: &[&str], whole: bool| {
            upsert_statements(("\"t\"", "pg_temp.faucet_stage"), cols, names, &key, whole)
        };
        assert_eq!(
            upsert("\"id\", \"v\"", &["id", "v"], true),
            [
                "INSERT INTO \"t\" (\"id\", \"v\") SELECT \"id\", \"v\" FROM pg_temp.faucet_stage \
              ON CONFLICT (\"id\") DO UPDATE SET \"v\" = EXCLUDED.\"v\""
            ]
        );
        assert_eq!(
            upsert("\"id\"", &["id"], true),
            [
                "INSERT INTO \"t\" (\"id\") SELECT \"id\" FROM pg_temp.faucet_stage \
              ON CONFLICT (\"id\") DO NOTHING"
            ]
        );
        assert_eq!(
            upsert("\"id\", \"v\"", &["id", "v"], false),
            [
                "UPDATE \"t\" AS t SET \"v\" = s.\"v\" FROM pg_temp.faucet_stage AS s \
                 WHERE t.\"id\" = s.\"id\"",
                "INSERT INTO \"t\" (\"id\", \"v\") SELECT s.\"id\", s.\"v\" FROM \
                 pg_temp.faucet_stage AS s WHERE NOT EXISTS (SELECT 1 FROM \"t\" AS t WHERE \
                 t.\"id\" = s.\"id\")"
            ]
        );
    }
}
