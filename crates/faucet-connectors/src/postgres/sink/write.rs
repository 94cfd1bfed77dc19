//! Writing one page inside the caller's transaction: `append` streams the rows with
//! `COPY target (columns) FROM STDIN`; `upsert` collapses the page ([`super::changes`]),
//! then truncates, deletes and upserts through the session's staging table (COPY into it,
//! then one set-based statement per column layout). Errors of the server about a value
//! (SQLSTATE classes 22 and 23) become [`FaucetError::Data`] naming the table, the column
//! and the page row.

use sqlx::Executor as _;
use sqlx::postgres::PgConnection;

use faucet_core::util::quote_ident;
use faucet_core::{FaucetError, Page, Value, fault};

use super::changes::{Slot, collapse, is_change_page};
use super::encode::write_copy_value;
use super::table::{STAGE, TargetTable, check_field_name};
use crate::postgres::config::{CONNECTOR, TableName, db_error, is_connection_lost};

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
}

/// Buffers reused from page to page.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    data: Vec<u8>,
    scratch: Vec<u8>,
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
        if code.starts_with("22") || code.starts_with("23") {
            let (line, column) = copy_context(db.r#where().unwrap_or(""));
            let column = db.column().map(str::to_owned).or(column);
            let row = match (line, rows) {
                (Some(l), Some(map)) => map.get(l.wrapping_sub(1)).map(|r| r + 1),
                (Some(l), None) => Some(l),
                _ => None,
            };
            let mut location = target.to_string();
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
            return FaucetError::data(CONNECTOR, location, message);
        }
    }
    let lost = is_connection_lost(&e);
    let message = if lost {
        format!(
            "{what} on {target}: the session was lost, so whether the page committed is \
             unknown; it is not retried (the run loop re-delivers it from the last bookmark)"
        )
    } else {
        format!("{what} on {target} failed")
    };
    FaucetError::write(CONNECTOR, message, Some(Box::new(e)))
}

/// `COPY faucet_stage, line 3, column phone: "x"` → (Some(3), Some("phone")).
fn copy_context(context: &str) -> (Option<usize>, Option<String>) {
    let line = context.split("line ").nth(1).and_then(|rest| {
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
    });
    let column = context
        .split(", column ")
        .nth(1)
        .map(|rest| rest.split(':').next().unwrap_or(rest).trim().to_owned());
    (line, column)
}

/// Checks that every column of `names` exists in the target; `changes_appended` says the
/// names are a change record's, appended as rows (the message then names the fix).
fn check_columns<'n>(
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

fn column_list<'n>(names: impl IntoIterator<Item = &'n str>) -> String {
    names
        .into_iter()
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Encodes `rows` and streams them into `COPY <into> (<cols>) FROM STDIN`, a chunk of about
/// [`CHUNK_BYTES`] at a time, so the server parses one chunk while the next is encoded.
async fn copy_in<'v, R, I>(
    conn: &mut PgConnection,
    into: &str,
    cols: &str,
    rows: R,
    bufs: &mut Buffers,
) -> Result<u64, sqlx::Error>
where
    R: Iterator<Item = I> + Send,
    I: Iterator<Item = &'v Value> + Send,
{
    let mut copy = conn
        .copy_in_raw(&format!("COPY {into} ({cols}) FROM STDIN"))
        .await?;
    bufs.data.clear();
    for row in rows {
        encode_row(&mut bufs.data, &mut bufs.scratch, row);
        if bufs.data.len() >= CHUNK_BYTES {
            if let Err(e) = copy.send(bufs.data.as_slice()).await {
                let _ = copy.abort("faucet: send failed").await;
                return Err(e);
            }
            bufs.data.clear();
        }
    }
    if !bufs.data.is_empty() {
        if let Err(e) = copy.send(bufs.data.as_slice()).await {
            let _ = copy.abort("faucet: send failed").await;
            return Err(e);
        }
        bufs.data.clear();
    }
    copy.finish().await
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
    let names: Vec<&str> = page
        .schema()
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    check_columns(names.iter().copied(), target, is_change_page(page))?;
    copy_in(
        conn,
        &target.name.quoted(),
        &column_list(names.iter().copied()),
        page.rows().map(|r| r.values().iter()),
        bufs,
    )
    .await
    .map_err(|e| classify(e, "COPY", target.name, None))?;
    fault::point(fault::MID_PAGE);
    Ok(())
}

fn encode_row<'v>(
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    values: impl Iterator<Item = &'v Value>,
) {
    for (i, v) in values.enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        write_copy_value(out, v, scratch);
    }
    out.push(b'\n');
}

/// Applies `page` as upserts and deletes by `target.key` (see [`super::changes`]).
///
/// # Errors
/// As [`append`]; plus [`FaucetError::Data`] for records without the key.
pub(crate) async fn upsert(
    conn: &mut PgConnection,
    target: &Target<'_>,
    page: &Page,
    bufs: &mut Buffers,
    source_table: &mut Option<String>,
) -> Result<(), FaucetError> {
    let label = target.name.to_string();
    let collapsed = collapse(page, target.key, &label, source_table)?;
    let quoted = target.name.quoted();
    let key_cols = column_list(target.key.iter().map(String::as_str));
    if collapsed.truncate {
        conn.execute(format!("TRUNCATE {quoted}").as_str())
            .await
            .map_err(|e| classify(e, "TRUNCATE", target.name, None))?;
    }
    // Deletes: stage the keys, one DELETE ... USING.
    let deletes: Vec<(&[&Value], usize)> = collapsed
        .slots
        .iter()
        .filter_map(|s| match s {
            Slot::Delete { key, row } => Some((key.as_slice(), *row)),
            Slot::Upsert { .. } => None,
        })
        .collect();
    if !deletes.is_empty() {
        check_columns(target.key.iter().map(String::as_str), target, false)?;
        let rows: Vec<usize> = deletes.iter().map(|(_, r)| *r).collect();
        let keys = deletes.iter().map(|(k, _)| k.iter().copied());
        stage(conn, target, &key_cols, keys, &rows, bufs).await?;
        let on: Vec<String> = target
            .key
            .iter()
            .map(|k| format!("t.{0} = s.{0}", quote_ident(k)))
            .collect();
        let sql = format!(
            "DELETE FROM {quoted} AS t USING {STAGE} AS s WHERE {}",
            on.join(" AND ")
        );
        conn.execute(sql.as_str())
            .await
            .map_err(|e| classify(e, "DELETE", target.name, None))?;
    }
    // Upserts, one statement per column layout (plain rows: one layout).
    let mut layouts: Vec<Vec<&str>> = Vec::new();
    for slot in &collapsed.slots {
        if let Slot::Upsert { columns, .. } = slot {
            let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
            if !layouts.contains(&names) {
                layouts.push(names);
            }
        }
    }
    for names in &layouts {
        check_columns(names.iter().copied(), target, false)?;
        let group: Vec<(&[(&str, &Value)], usize)> = collapsed
            .slots
            .iter()
            .filter_map(|s| match s {
                Slot::Upsert { columns, row }
                    if columns.len() == names.len()
                        && columns.iter().zip(names).all(|((n, _), m)| n == m) =>
                {
                    Some((columns.as_slice(), *row))
                }
                _ => None,
            })
            .collect();
        let rows: Vec<usize> = group.iter().map(|(_, r)| *r).collect();
        let cols = column_list(names.iter().copied());
        let values = group.iter().map(|(c, _)| c.iter().map(|(_, v)| *v));
        stage(conn, target, &cols, values, &rows, bufs).await?;
        let covers_table = target
            .table
            .columns
            .iter()
            .all(|c| names.iter().any(|n| n == c));
        for sql in upsert_statements(&quoted, &cols, names, target.key, covers_table) {
            conn.execute(sql.as_str())
                .await
                .map_err(|e| classify(e, "upsert", target.name, None))?;
        }
        fault::point(fault::MID_PAGE);
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
    quoted: &str,
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
            "INSERT INTO {quoted} ({cols}) SELECT {cols} FROM {STAGE} \
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
            "UPDATE {quoted} AS t SET {} FROM {STAGE} AS s WHERE {on}",
            sets.join(", ")
        ));
    }
    let s_cols: Vec<String> = names
        .iter()
        .map(|n| format!("s.{}", quote_ident(n)))
        .collect();
    out.push(format!(
        "INSERT INTO {quoted} ({cols}) SELECT {} FROM {STAGE} AS s \
         WHERE NOT EXISTS (SELECT 1 FROM {quoted} AS t WHERE {on})",
        s_cols.join(", ")
    ));
    out
}

/// Empties the staging table and COPYs `values` (one iterator per row) into its `cols`;
/// `rows` maps each staged row to its page row, for error messages.
async fn stage<'v, R, I>(
    conn: &mut PgConnection,
    target: &Target<'_>,
    cols: &str,
    values: R,
    rows: &[usize],
    bufs: &mut Buffers,
) -> Result<(), FaucetError>
where
    R: Iterator<Item = I> + Send,
    I: Iterator<Item = &'v Value> + Send,
{
    conn.execute(format!("TRUNCATE {STAGE}").as_str())
        .await
        .map_err(|e| classify(e, "TRUNCATE staging", target.name, None))?;
    copy_in(conn, STAGE, cols, values, bufs)
        .await
        .map_err(|e| classify(e, "COPY", target.name, Some(rows)))?;
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
    }

    #[test]
    fn upserts_of_whole_rows_use_on_conflict_and_partial_rows_update_then_insert() {
        let key = vec!["id".to_owned()];
        assert_eq!(
            upsert_statements("\"t\"", "\"id\", \"v\"", &["id", "v"], &key, true),
            [
                "INSERT INTO \"t\" (\"id\", \"v\") SELECT \"id\", \"v\" FROM pg_temp.faucet_stage \
              ON CONFLICT (\"id\") DO UPDATE SET \"v\" = EXCLUDED.\"v\""
            ]
        );
        assert_eq!(
            upsert_statements("\"t\"", "\"id\"", &["id"], &key, true),
            [
                "INSERT INTO \"t\" (\"id\") SELECT \"id\" FROM pg_temp.faucet_stage \
              ON CONFLICT (\"id\") DO NOTHING"
            ]
        );
        assert_eq!(
            upsert_statements("\"t\"", "\"id\", \"v\"", &["id", "v"], &key, false),
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
