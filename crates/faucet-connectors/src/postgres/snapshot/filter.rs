//! The change stream after a resumed copy: the slot's changes from its consistent point C1,
//! minus what the copy already holds.
//!
//! A resumed copy read some key ranges as of later consistent points (module
//! [`super::bookmark`]). The snapshot of a slot created at consistent point P holds exactly
//! the transactions whose commit record starts before P, and a change record's `lsn` is
//! its transaction's commit LSN (the start of the commit record: pgoutput Begin's
//! `final_lsn`), so a change to key k with commit LSN L is *in the copy* when the range
//! holding k was copied as of P with L < P, and is then dropped; otherwise it is delivered
//! (the test `the_copy_holds_exactly_the_transactions_committed_before_its_point` checks
//! `<` against the server). A key inside a range that was in flight at an interruption
//! (module [`super::bookmark`], `dirty`) counts as copied as of that range's earlier point,
//! if that is lower: its changes since then are delivered again. Per record:
//!
//! * `c` / `d`: by the range of the new key (`after`) / the old key (`before`);
//! * `u`: by the ranges of both keys. Both in the copy: dropped. Neither: delivered. The old
//!   key's range not in the copy but the new key's is (a key moved into a range copied
//!   later): delivered as a `d` of the old key. The reverse: delivered as a `c` of the new
//!   row — refused with [`FaucetError::Read`] if its `after` lacks unchanged TOASTed values;
//! * `t`: dropped when every range of the table is in the copy, delivered when none is; a
//!   TRUNCATE between the points of one table's ranges cannot be represented and fails with
//!   [`FaucetError::Bookmark`] naming the table and the fix (rerun from scratch).
//!
//! Which range holds a key is decided by the server, not by Rust: one query per table and
//! page compares the record keys with the ranges' boundaries as row constructors of the
//! primary-key columns' types and collations (`pg_attribute`, `pg_collation`), the ordering
//! the copy's `WHERE (pk) > (...)` used. Records of tables whose ranges were all copied as
//! of one point, and records committed at or after the latest point, need no query.

use std::collections::HashMap;

use pgwire_replication::Lsn;
use sqlx::PgConnection;

use crate::sql::ident::quote_ident;
use faucet_core::{Bookmark, FaucetError, Value};

use super::CONNECTOR;
use super::bookmark::{Copied, TableCopy, cdc_position};
use crate::copy_filter::{SourceFilter, key_tuple, text};
use crate::postgres::cdc::client::{lsn_text, parse_lsn};
use crate::postgres::connection::PostgresUrl;
use crate::postgres::ident::quote_literal;

/// Field positions of a change record (`record_schema`).
const OP: usize = 0;
const TABLE: usize = 1;
const LSN: usize = 2;
const BEFORE: usize = 4;
const AFTER: usize = 5;
const UNCHANGED: usize = 6;

/// A table's primary key, as the comparisons need it.
struct KeyInfo {
    names: Vec<String>,
    /// `format_type` of each column (no modifier, as the copy's casts).
    types: Vec<String>,
    /// `"schema"."collation"` of each collatable column.
    collations: Vec<Option<String>>,
}

/// Drops the changes a resumed copy already holds (module docs).
pub(crate) struct Filter {
    copied: Copied,
    latest: Lsn,
    sql: PostgresUrl,
    conn: Option<PgConnection>,
    keys: HashMap<String, KeyInfo>,
}

impl Filter {
    /// A filter for `copied`; `None` when nothing needs filtering after `start` (everything
    /// was copied as of points at or before it).
    pub(crate) fn new(copied: Copied, start: Lsn, sql: PostgresUrl) -> Option<Self> {
        let latest = copied.latest_point()?;
        (latest > start).then(|| Self {
            copied,
            latest,
            sql,
            conn: None,
            keys: HashMap::new(),
        })
    }

    async fn key_info(&mut self, table: &str) -> Result<&KeyInfo, FaucetError> {
        if !self.keys.contains_key(table) {
            let info = load_key(self.conn().await?, table).await?;
            self.keys.insert(table.to_owned(), info);
        }
        Ok(&self.keys[table])
    }

    async fn conn(&mut self) -> Result<&mut PgConnection, FaucetError> {
        if self.conn.is_none() {
            self.conn = Some(
                self.sql
                    .open_session(crate::postgres::config::CONNECTOR)
                    .await?,
            );
        }
        self.conn
            .as_mut()
            .ok_or_else(|| FaucetError::connect(CONNECTOR, "no session", None))
    }
}

#[async_trait::async_trait]
impl SourceFilter for Filter {
    type Point = Lsn;
    const CONNECTOR: &'static str = CONNECTOR;
    const OP: usize = OP;
    const TABLE: usize = TABLE;
    const BEFORE: usize = BEFORE;
    const AFTER: usize = AFTER;

    fn copied(&self) -> &Copied {
        &self.copied
    }

    fn latest(&self) -> &Lsn {
        &self.latest
    }

    fn stream_point(bookmark: &Bookmark) -> Option<Lsn> {
        cdc_position(bookmark)
    }

    /// The record's commit LSN.
    fn position(v: &[Value]) -> Result<Lsn, FaucetError> {
        parse_lsn(text(&v[LSN])).ok_or_else(|| {
            FaucetError::read(
                CONNECTOR,
                format!("a change record has no commit LSN: {:?}", v[LSN]),
                None,
            )
        })
    }

    fn truncated(table: &str, at: &Lsn) -> FaucetError {
        FaucetError::bookmark(
            CONNECTOR,
            format!(
                "{table} was truncated at {} while its copy was resumed: part of it was copied \
                 before the TRUNCATE and part after, which a change stream cannot reconcile. \
                 Rerun from scratch: drop the slot, delete this pipeline's state entry, empty \
                 the target, and run `faucet replicate` again",
                lsn_text(*at)
            ),
            None,
        )
    }

    async fn key_names(&mut self, table: &str) -> Result<Vec<String>, FaucetError> {
        Ok(self.key_info(table).await?.names.clone())
    }

    /// The key in PostgreSQL's text input form ([`key_text`]).
    fn key_of(
        row: &Value,
        names: &[String],
        table: &str,
        before: bool,
        at: &Lsn,
    ) -> Result<Vec<String>, FaucetError> {
        let missing = |what: &str| {
            FaucetError::read(
                CONNECTOR,
                format!(
                    "a change of {table} committed at {} has no {what} in `{}`, which is needed \
                     to tell whether the resumed copy holds it; give the table REPLICA IDENTITY \
                     DEFAULT (its primary key) or FULL",
                    lsn_text(*at),
                    if before { "before" } else { "after" }
                ),
                None,
            )
        };
        key_tuple(row, names, table, CONNECTOR, &missing, key_text)
    }

    /// For each key, the consistent point its changes are delivered from: the point of the
    /// part holding it, or the earlier point of a dirty range holding it (module
    /// `bookmark`), by the server's ordering.
    async fn points_of(
        &mut self,
        table: &str,
        keys: &[Vec<String>],
    ) -> Result<Vec<Lsn>, FaucetError> {
        let t: TableCopy = self.copied.tables[table].clone();
        let bounds = t.bounds();
        let above: Vec<Vec<bool>> = if bounds.keys.is_empty() {
            vec![Vec::new(); keys.len()]
        } else {
            self.key_info(table).await?;
            let sql = compare_sql(&self.keys[table], &bounds.keys, keys);
            let conn = self.conn().await?;
            let rows: Vec<(i32, Vec<bool>)> =
                sqlx::query_as(&sql).fetch_all(conn).await.map_err(|e| {
                    FaucetError::read(
                        CONNECTOR,
                        format!("comparing changed keys of {table} with its copied ranges failed"),
                        Some(Box::new(e)),
                    )
                })?;
            let mut out = vec![Vec::new(); keys.len()];
            for (i, gt) in rows {
                if let Ok(i) = usize::try_from(i)
                    && i < out.len()
                    && gt.len() == bounds.keys.len()
                {
                    out[i] = gt;
                }
            }
            if out.iter().any(|gt| gt.len() != bounds.keys.len()) {
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!("comparing changed keys of {table} returned an incomplete answer"),
                    None,
                ));
            }
            out
        };
        Ok(above.iter().map(|gt| bounds.point(gt, &Lsn(0))).collect())
    }

    fn as_delete(v: &[Value]) -> Vec<Value> {
        let mut r = v.to_vec();
        r[OP] = Value::Text("d".into());
        r[AFTER] = Value::Null;
        r[UNCHANGED] = Value::Array(Vec::new());
        r
    }

    /// # Errors
    /// [`FaucetError::Read`] when the new row lacks unchanged TOASTed values.
    fn as_insert(v: &[Value], table: &str, at: &Lsn) -> Result<Vec<Value>, FaucetError> {
        if matches!(&v[UNCHANGED], Value::Array(a) if !a.is_empty()) {
            return Err(FaucetError::read(
                CONNECTOR,
                format!(
                    "an update committed at {} moved a row of {table} into a key range the \
                     resumed copy had not read yet, and its new row lacks unchanged TOASTed \
                     values, so it cannot be delivered as an insert; set REPLICA IDENTITY FULL \
                     on {table} and rerun the replicate from scratch",
                    lsn_text(*at)
                ),
                None,
            ));
        }
        let mut r = v.to_vec();
        r[OP] = Value::Text("c".into());
        r[BEFORE] = Value::Null;
        Ok(r)
    }
}

/// `SELECT k.i, ARRAY[key i > boundary j, for each j]` over VALUES lists of typed
/// literals, comparing row constructors with the key columns' collations (the copy's
/// `WHERE (pk) > (...)` ordering).
fn compare_sql(info: &KeyInfo, bounds: &[&Vec<String>], keys: &[Vec<String>]) -> String {
    let n = info.names.len();
    let cols: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let typed = |values: &[String]| -> String {
        values
            .iter()
            .zip(&info.types)
            .map(|(v, t)| format!("{}::{t}", quote_literal(v)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let bound_rows: Vec<String> = bounds
        .iter()
        .enumerate()
        .map(|(j, b)| format!("({j}, {})", typed(b)))
        .collect();
    let key_rows: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| format!("({i}, {})", typed(k)))
        .collect();
    let left: Vec<String> = (0..n)
        .map(|i| match &info.collations[i] {
            Some(c) => format!("k.c{i} COLLATE {c}"),
            None => format!("k.c{i}"),
        })
        .collect();
    let right: Vec<String> = (0..n).map(|i| format!("b.c{i}")).collect();
    format!(
        "SELECT k.i, ARRAY(SELECT ({}) > ({}) FROM (VALUES {}) AS b(j, {}) ORDER BY b.j) \
         FROM (VALUES {}) AS k(i, {})",
        left.join(", "),
        right.join(", "),
        bound_rows.join(", "),
        cols.join(", "),
        key_rows.join(", "),
        cols.join(", ")
    )
}

/// The primary key of `table` (`schema.table`) with types and collations.
async fn load_key(conn: &mut PgConnection, table: &str) -> Result<KeyInfo, FaucetError> {
    let quoted = table.split_once('.').map_or_else(
        || quote_ident(table),
        |(s, t)| format!("{}.{}", quote_ident(s), quote_ident(t)),
    );
    let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT a.attname::text, format_type(a.atttypid, NULL), \
                CASE WHEN a.attcollation <> 0 \
                     THEN quote_ident(n.nspname) || '.' || quote_ident(c.collname) END \
         FROM pg_index i \
         CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
         LEFT JOIN pg_collation c ON c.oid = a.attcollation \
         LEFT JOIN pg_namespace n ON n.oid = c.collnamespace \
         WHERE i.indrelid = $1::regclass AND i.indisprimary \
         ORDER BY k.ord",
    )
    .bind(&quoted)
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| {
        FaucetError::read(
            CONNECTOR,
            format!("cannot read the primary key of {table}"),
            Some(Box::new(e)),
        )
    })?;
    if rows.is_empty() {
        return Err(FaucetError::bookmark(
            CONNECTOR,
            format!(
                "{table} was copied in key ranges, but has no primary key now; rerun the \
                 replicate from scratch"
            ),
            None,
        ));
    }
    let mut info = KeyInfo {
        names: Vec::new(),
        types: Vec::new(),
        collations: Vec::new(),
    };
    for (name, t, c) in rows {
        info.names.push(name);
        info.types.push(t);
        info.collations.push(c);
    }
    Ok(info)
}

/// A scalar key value in PostgreSQL's text input form (the inverse of `decode_text`).
fn key_text(v: &Value) -> Option<String> {
    Some(match v {
        Value::Int(i) => i.to_string(),
        Value::Bool(b) => if *b { "t" } else { "f" }.to_owned(),
        Value::Numeric(n) => n.to_string(),
        Value::Float(f) if f.is_nan() => "NaN".to_owned(),
        Value::Float(f) if f.is_infinite() => {
            if *f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
        }
        Value::Float(f) => faucet_core::serde_json::to_string(f).ok()?,
        Value::Text(s) => s.to_string(),
        Value::Date(s) | Value::Timestamp(s) | Value::TimestampTz(s) => {
            crate::postgres::datetime::pg_from_iso(s).into_owned()
        }
        Value::Time(s) | Value::TimeTz(s) | Value::Interval(s) => s.to_string(),
        Value::Bytes(b) => {
            let mut s = String::with_capacity(2 + 2 * b.len());
            s.push_str("\\x");
            for byte in b {
                s.push_str(&format!("{byte:02x}"));
            }
            s
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_comparison_uses_types_and_collations() {
        let info = KeyInfo {
            names: vec!["name".into(), "id".into()],
            types: vec!["text".into(), "bigint".into()],
            collations: vec![Some("pg_catalog.\"de-x-icu\"".into()), None],
        };
        let b = vec!["a'b".to_owned(), "7".to_owned()];
        let sql = compare_sql(&info, &[&b], &[vec!["z".into(), "1".into()]]);
        assert_eq!(
            sql,
            "SELECT k.i, ARRAY(SELECT (k.c0 COLLATE pg_catalog.\"de-x-icu\", k.c1) > (b.c0, \
             b.c1) FROM (VALUES (0, 'a''b'::text, '7'::bigint)) AS b(j, c0, c1) ORDER BY b.j) \
             FROM (VALUES (0, 'z'::text, '1'::bigint)) AS k(i, c0, c1)"
        );
        assert_eq!(
            key_text(&Value::Bytes(vec![1, 0xab])).as_deref(),
            Some("\\x01ab")
        );
        assert_eq!(key_text(&Value::Float(0.1)).as_deref(), Some("0.1"));
        assert_eq!(key_text(&Value::Array(Vec::new())), None);
    }
}
