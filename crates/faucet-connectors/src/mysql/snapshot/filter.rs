//! The binlog after a resumed copy: the changes from the first snapshot's point C1, minus
//! what the copy already holds — the reasoning of `postgres::snapshot`'s filter, on binlog
//! positions.
//!
//! A snapshot taken at point P holds exactly the transactions whose first binlog event
//! starts before P (module `point`), and every change record carries its transaction's
//! start (`binlog_file`, `binlog_pos`). So a change to key k of a transaction starting at L
//! is *in the copy* when the range holding k was copied as of P with L < P, and is then
//! dropped; otherwise it is delivered. A key inside a range that was in flight at an
//! interruption (`dirty`) counts as copied as of that range's earlier point, if lower: its
//! changes since then are delivered again. Per record:
//!
//! * `c` / `d`: by the range of the new key (`after`) / the old key (`before`);
//! * `u`: by the ranges of both keys. Both in the copy: dropped. Neither: delivered. Only
//!   the new key's range in the copy (a key moved into a range copied later): delivered as
//!   a `d` of the old key. Only the old key's: delivered as a `c` of the new row (the binlog
//!   has the whole row, `binlog_row_image=FULL`);
//! * `t`: dropped when every range of the table is in the copy, delivered when none is; a
//!   TRUNCATE between the points of one table's ranges fails with [`FaucetError::Bookmark`]
//!   naming the table and the fix (rerun from scratch).
//!
//! Which range holds a key is decided by the server, as the copy's `WHERE (pk) > (...)`
//! ordered it: one query per table and page compares the record keys with the ranges'
//! boundaries as row constructors of literals of the key columns' types (`Plan::literal`),
//! text converted to the column's character set and collation.

use std::collections::HashMap;

use async_trait::async_trait;

use mysql_async::prelude::Queryable as _;

use faucet_core::{Bookmark, FaucetError, Value};

use super::CONNECTOR;
use super::bookmark::Copied;
use super::point::{SnapshotPoint, cdc_point};
use crate::copy_filter::{SourceFilter, key_tuple};
use crate::mysql::cdc::position::BinlogPos;
use crate::mysql::connection::{MysqlConnection, convert_rows};
use crate::mysql::query::ReplicationMethod;
use crate::mysql::query::Target;
use crate::mysql::query::plan::Plan;
use crate::mysql::table::TableName;
use crate::mysql::value::Kind;
use crate::sql::query::QueryColumn as _;

/// Field positions of a change record (`mysql-cdc`'s `record_schema`).
const OP: usize = 0;
const TABLE: usize = 1;
const FILE: usize = 2;
const POS: usize = 3;
const BEFORE: usize = 6;
const AFTER: usize = 7;

/// A table's primary key, as the comparisons need it.
struct KeyInfo {
    plan: Plan,
    /// `(character set, collation)` of each text key column.
    text: Vec<Option<(String, String)>>,
}

impl KeyInfo {
    fn names(&self) -> &[String] {
        self.plan.order.as_ref().map_or(&[], |o| o.names.as_slice())
    }

    /// The SQL of a key tuple: `(lit, ...)`, text in the column's collation.
    fn tuple(&self, table: &str, key: &[String]) -> Result<String, FaucetError> {
        let order = self.plan.order.as_ref().ok_or_else(|| lost_key(table))?;
        let mut out = Vec::with_capacity(key.len());
        for ((v, &i), text) in key.iter().zip(&order.indexes).zip(&self.text) {
            let column = &self.plan.columns[i];
            let literal = column.literal(v).ok_or_else(|| {
                FaucetError::read(
                    CONNECTOR,
                    format!(
                        "a changed key of {table} has `{v}` for `{}`, which faucet cannot \
                         compare with the copied ranges",
                        column.name
                    ),
                    None,
                )
            })?;
            out.push(match (text, column.kind) {
                (Some((charset, collation)), _) => {
                    format!("CONVERT({literal} USING {charset}) COLLATE {collation}")
                }
                // Two literals compare as strings: compare temporal ones as their type.
                (None, Kind::Date) => format!("CAST({literal} AS DATE)"),
                (None, Kind::DateTime | Kind::Timestamp) => {
                    format!("CAST({literal} AS DATETIME(6))")
                }
                (None, Kind::Time) => format!("CAST({literal} AS TIME(6))"),
                (None, _) => literal,
            });
        }
        Ok(format!("({})", out.join(", ")))
    }
}

fn lost_key(table: &str) -> FaucetError {
    FaucetError::bookmark(
        CONNECTOR,
        format!(
            "{table} was copied in key ranges, but has no primary key now; rerun the \
             replicate from scratch"
        ),
        None,
    )
}

/// Drops the changes a resumed copy already holds (module docs).
pub(crate) struct Filter {
    copied: Copied,
    latest: SnapshotPoint,
    connection: MysqlConnection,
    conn: Option<mysql_async::Conn>,
    keys: HashMap<String, KeyInfo>,
}

impl Filter {
    /// A filter for `copied`; `None` when nothing needs filtering after `start` (everything
    /// was copied as of points at or before it).
    pub(crate) fn new(
        copied: Copied,
        start: SnapshotPoint,
        connection: MysqlConnection,
    ) -> Option<Self> {
        let latest = copied.latest_point()?;
        (latest > start).then(|| Self {
            copied,
            latest,
            connection,
            conn: None,
            keys: HashMap::new(),
        })
    }

    async fn conn(&mut self) -> Result<&mut mysql_async::Conn, FaucetError> {
        if self.conn.is_none() {
            self.conn = Some(self.connection.connect().await?);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| FaucetError::connect(CONNECTOR, "no session", None))
    }

    async fn key_info(&mut self, table: &str) -> Result<&KeyInfo, FaucetError> {
        if !self.keys.contains_key(table) {
            let name = TableName::parse_qualified(table, "tables")?;
            let connection = self.connection.clone();
            let conn = self.conn().await?;
            let plan = Plan::describe(
                conn,
                &connection,
                &Target::Table(name.clone()),
                ReplicationMethod::FullTable,
                &[],
            )
            .await?;
            let order = plan.order.as_ref().ok_or_else(|| lost_key(table))?;
            let mut text = Vec::with_capacity(order.names.len());
            for &i in &order.indexes {
                let column = &plan.columns[i];
                let textual = matches!(
                    column.kind,
                    Kind::Char
                        | Kind::VarChar
                        | Kind::Blob
                        | Kind::Uuid
                        | Kind::Inet4
                        | Kind::Inet6
                ) && !column.is_binary();
                text.push(if textual {
                    collation_of(conn, &connection, &name, &column.name).await?
                } else {
                    None
                });
            }
            self.keys.insert(table.to_owned(), KeyInfo { plan, text });
        }
        Ok(&self.keys[table])
    }
}

#[async_trait]
impl SourceFilter for Filter {
    type Point = SnapshotPoint;
    const CONNECTOR: &'static str = CONNECTOR;
    const OP: usize = OP;
    const TABLE: usize = TABLE;
    const BEFORE: usize = BEFORE;
    const AFTER: usize = AFTER;

    fn copied(&self) -> &Copied {
        &self.copied
    }

    fn latest(&self) -> &SnapshotPoint {
        &self.latest
    }

    fn stream_point(bookmark: &Bookmark) -> Option<SnapshotPoint> {
        cdc_point(bookmark)
    }

    /// The start of the record's transaction.
    fn position(v: &[Value]) -> Result<SnapshotPoint, FaucetError> {
        match (&v[FILE], &v[POS]) {
            (Value::Text(f), Value::Int(p)) if *p >= 0 => Ok(SnapshotPoint(BinlogPos::new(
                f.as_str(),
                u64::try_from(*p).unwrap_or_default(),
            ))),
            _ => Err(FaucetError::read(
                CONNECTOR,
                format!(
                    "a change record has no binlog position: {:?}:{:?}",
                    v[FILE], v[POS]
                ),
                None,
            )),
        }
    }

    fn truncated(table: &str, at: &SnapshotPoint) -> FaucetError {
        FaucetError::bookmark(
            CONNECTOR,
            format!(
                "{table} was truncated at {} while its copy was resumed: part of it was copied \
                 before the TRUNCATE and part after, which a change stream cannot reconcile. \
                 Rerun from scratch: delete this pipeline's state entry, empty the target, and \
                 run `faucet replicate` again",
                at.0
            ),
            None,
        )
    }

    async fn key_names(&mut self, table: &str) -> Result<Vec<String>, FaucetError> {
        Ok(self.key_info(table).await?.names().to_vec())
    }

    /// The key in the copy's key text ([`key_text`]).
    fn key_of(
        row: &Value,
        names: &[String],
        table: &str,
        _: bool,
        at: &SnapshotPoint,
    ) -> Result<Vec<String>, FaucetError> {
        let missing = |what: &str| {
            FaucetError::read(
                CONNECTOR,
                format!(
                    "a change of {table} in the transaction at {} has no {what}, which is \
                     needed to tell whether the resumed copy holds it",
                    at.0
                ),
                None,
            )
        };
        key_tuple(row, names, table, CONNECTOR, &missing, key_text)
    }

    /// For each key, the point its changes are delivered from: the point of the part
    /// holding it, or the earlier point of a dirty range holding it, by the server's
    /// ordering.
    async fn points_of(
        &mut self,
        table: &str,
        keys: &[Vec<String>],
    ) -> Result<Vec<SnapshotPoint>, FaucetError> {
        self.key_info(table).await?;
        let t = &self.copied.tables[table];
        let bounds = t.bounds();
        let info = &self.keys[table];
        let above: Vec<Vec<bool>> = if bounds.keys.is_empty() {
            vec![Vec::new(); keys.len()]
        } else {
            let bound_sql = bounds
                .keys
                .iter()
                .map(|b| info.tuple(table, b))
                .collect::<Result<Vec<_>, _>>()?;
            let mut selects = Vec::with_capacity(keys.len());
            for (i, k) in keys.iter().enumerate() {
                let key = info.tuple(table, k)?;
                let cmps: Vec<String> = bound_sql
                    .iter()
                    .map(|b| format!("IF({key} > {b}, '1', '0')"))
                    .collect();
                selects.push(format!("SELECT {i}, CONCAT({})", cmps.join(", ")));
            }
            let sql = selects.join(" UNION ALL ");
            let what = format!("comparing changed keys of {table} with its copied ranges");
            let conn = self
                .conn
                .as_mut()
                .ok_or_else(|| FaucetError::connect(CONNECTOR, "no session", None))?;
            let rows: Vec<mysql_async::Row> = conn
                .query(sql)
                .await
                .map_err(|e| self.connection.error(&what, e))?;
            let rows = convert_rows::<(u64, String)>(rows)
                .map_err(|m| FaucetError::read(CONNECTOR, format!("{what}: {m}"), None))?;
            let mut out = vec![Vec::new(); keys.len()];
            for (i, flags) in rows {
                if let Some(slot) = usize::try_from(i).ok().and_then(|i| out.get_mut(i)) {
                    *slot = flags.bytes().map(|b| b == b'1').collect();
                }
            }
            if out.iter().any(|gt| gt.len() != bounds.keys.len()) {
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!("{what}: the server returned an incomplete answer"),
                    None,
                ));
            }
            out
        };
        let floor = SnapshotPoint(BinlogPos::new("", 0));
        Ok(above.iter().map(|gt| bounds.point(gt, &floor)).collect())
    }

    fn as_delete(v: &[Value]) -> Vec<Value> {
        let mut r = v.to_vec();
        r[OP] = Value::Text("d".into());
        r[AFTER] = Value::Null;
        r
    }

    /// Never fails: the binlog has the whole new row (`binlog_row_image=FULL`).
    fn as_insert(v: &[Value], _: &str, _: &SnapshotPoint) -> Result<Vec<Value>, FaucetError> {
        let mut r = v.to_vec();
        r[OP] = Value::Text("c".into());
        r[BEFORE] = Value::Null;
        Ok(r)
    }
}

/// The character set and collation of a text column, from `information_schema`.
async fn collation_of(
    conn: &mut mysql_async::Conn,
    connection: &MysqlConnection,
    table: &TableName,
    column: &str,
) -> Result<Option<(String, String)>, FaucetError> {
    let what = format!("reading the collation of {table}.{column}");
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?",
            (
                table.database.as_deref().unwrap_or_default(),
                &table.table,
                column,
            ),
        )
        .await
        .map_err(|e| connection.error(&what, e))?;
    let rows = convert_rows::<(Option<String>, Option<String>)>(rows)
        .map_err(|m| FaucetError::read(CONNECTOR, format!("{what}: {m}"), None))?;
    let plain =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    Ok(match rows.into_iter().next() {
        Some((Some(cs), Some(co))) if plain(&cs) && plain(&co) => Some((cs, co)),
        _ => None,
    })
}

/// A key value in the text form the query reader's `key_text` gives (and `Plan::literal`
/// takes): integers and decimals as digits, binary as upper-case hex, temporal values
/// `YYYY-MM-DD[ HH:MM:SS.ffffff]`, text as itself.
fn key_text(v: &Value) -> Option<String> {
    Some(match v {
        Value::Int(i) => i.to_string(),
        Value::Numeric(n) => n.to_string(),
        Value::Text(s) => s.to_string(),
        Value::Bytes(b) => {
            use std::fmt::Write as _;
            let mut s = String::with_capacity(2 * b.len());
            for byte in b {
                let _ = write!(s, "{byte:02X}");
            }
            s
        }
        Value::Date(s) | Value::Time(s) => s.to_string(),
        Value::Timestamp(s) | Value::TimestampTz(s) => s
            .trim_end_matches('Z')
            .trim_end_matches("+00:00")
            .replace('T', " "),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_text_is_the_readers_literal_text() {
        assert_eq!(key_text(&Value::Int(-7)).as_deref(), Some("-7"));
        assert_eq!(
            key_text(&Value::Bytes(vec![1, 0xab])).as_deref(),
            Some("01AB")
        );
        assert_eq!(
            key_text(&Value::Timestamp("2026-01-02T03:04:05.000006".into())).as_deref(),
            Some("2026-01-02 03:04:05.000006")
        );
        assert_eq!(key_text(&Value::Array(Vec::new())), None);
    }
}
