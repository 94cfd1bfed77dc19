//! From binlog table maps and rows events to change records.
//!
//! A change record has the fields of [`record_schema`], in order:
//!
//! | field | value |
//! |---|---|
//! | `op` | `c` insert, `u` update, `d` delete, `t` truncate, `s` schema change ([`super::shapes`]) |
//! | `table` | `database.table` |
//! | `binlog_file` | the binlog file of the change's transaction |
//! | `binlog_pos` | the offset of the transaction's first event in that file: every change of a transaction carries the same one (the commit's own position is not known until the transaction has been read to its end, which a transaction larger than a page must not wait for) |
//! | `gtid` | the transaction's GTID (MariaDB `domain-server-seq`, MySQL `uuid:n`), or null |
//! | `commit_ts` | the commit time, RFC 3339 in UTC (MySQL: the immediate commit timestamp, µs; MariaDB: the GTID event's time, whole seconds) |
//! | `before` | the whole old row for updates and deletes (`binlog_row_image=FULL`); null for inserts and truncates |
//! | `after` | the new row for inserts and updates; null for deletes and truncates |
//!
//! Table shapes come from each TABLE_MAP event, which the server writes before the rows
//! events of every transaction: a shape is replaced whenever its table map changes (a
//! column added, dropped, retyped or renamed shows in the records after it), never decoded
//! against an older one. Column names, charsets, signedness and ENUM/SET members are in the
//! table map only with `binlog_row_metadata=FULL`; without them a listed table's changes
//! stop the run (never `@0` names). Values go through the one MySQL value mapping
//! ([`crate::mysql::value`]), so a row read here serializes as the same row read by SELECT.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use mysql_async::binlog::events::{RowsEventData, TableMapEvent};
use mysql_common::io::ParseBuf;

use faucet_core::change::Op;
use faucet_core::change::schema::{Identified, announce};
use faucet_core::{DataType, FaucetError, Field, Schema, Value};

use super::CONNECTOR;
use super::events::RowsKind;
use super::position::BinlogPos;
use super::shapes::{Delivered, identify};
use super::statement::Statement;
use crate::mysql::catalog::TableCatalog;
use crate::mysql::table::TableName;
use crate::mysql::value::{Collations, MysqlColumn};
use crate::sql::table_pattern::TablePattern;

mod table_shape;
mod wire;

use table_shape::shape_of;
use wire::{Undecoded, Wire, decode};

/// The fields of a change record, in order: `op`, `table`, `binlog_file`, `binlog_pos`,
/// `gtid`, `commit_ts`, `before`, `after`.
/// Built by the shared contract ([`faucet_core::change::record_schema`]) with the binlog's
/// position fields.
pub(crate) fn record_schema() -> Arc<Schema> {
    faucet_core::change::record_schema(
        vec![
            Field::new("binlog_file", DataType::Text),
            Field::new("binlog_pos", DataType::Int),
            Field::new("gtid", DataType::Text),
        ],
        Vec::new(),
    )
}

/// One change record: the values of [`record_schema`].
pub(crate) type Record = [Value; 8];

/// What every record of a transaction shares.
#[derive(Debug, Clone)]
pub(crate) struct TxnContext {
    /// The binlog file.
    pub(crate) file: faucet_core::Text,
    /// The offset of the transaction's first event.
    pub(crate) start_pos: u64,
    /// Its GTID.
    pub(crate) gtid: Option<faucet_core::Text>,
    /// The commit time, RFC 3339 UTC (inline in its [`faucet_core::Text`] to the second and
    /// the millisecond, so copying it into every record costs no allocation).
    pub(crate) commit_ts: faucet_core::Text,
}

impl TxnContext {
    fn record(&self, op: Op, table: &str, before: Value, after: Value) -> Record {
        [
            Value::Text(op.code().into()),
            Value::Text(table.into()),
            Value::Text(self.file.clone()),
            Value::Int(i64::try_from(self.start_pos).unwrap_or(i64::MAX)),
            self.gtid.clone().map_or(Value::Null, Value::Text),
            Value::TimestampTz(self.commit_ts.clone()),
            before,
            after,
        ]
    }
}

/// A listed table's shape, from one table map.
#[derive(Debug)]
pub(crate) struct TableShape {
    /// `database.table`.
    pub(crate) table: String,
    /// How to decode each column.
    pub(crate) columns: Vec<MysqlColumn>,
    /// The row schema of `before` / `after`.
    pub(crate) schema: Arc<Schema>,
    /// Per column, how its values are read from a row image ([`Wire::of`]).
    wire: Vec<Wire>,
    /// The columns as a schema-change record shows them ([`super::shapes`]).
    identified: Vec<Identified>,
}

struct Mapped {
    /// The table map's bytes, to tell whether a new one changes anything.
    raw: Vec<u8>,
    /// `None` for a table that is not listed.
    shape: Option<Arc<TableShape>>,
}

/// Turns table maps and rows events into change records of the listed tables.
pub(crate) struct ChangeDecoder {
    wanted: Vec<TableName>,
    /// The `tables` patterns: a table they match is read as a listed one, also one created
    /// after the start, from its first table map on.
    patterns: Vec<TablePattern>,
    collations: Collations,
    maps: HashMap<u64, Mapped>,
    /// The shapes delivered and the column renames read since ([`super::shapes`]), shared
    /// with the snapshot a transaction's bookmark carries.
    delivered: Arc<Delivered>,
    /// Per table, the shape last compared with the delivered one (a rows event of the same
    /// table map is not compared again).
    compared: HashMap<String, Arc<TableShape>>,
}

impl ChangeDecoder {
    /// A decoder that emits records of `tables` and of the tables `patterns` match, decoding
    /// text by `collations` (the server's).
    pub(crate) fn new(
        tables: &[TableName],
        patterns: &[TablePattern],
        collations: Collations,
    ) -> Self {
        Self {
            wanted: tables.to_vec(),
            patterns: patterns.to_vec(),
            collations,
            maps: HashMap::new(),
            delivered: Arc::new(Delivered::default()),
            compared: HashMap::new(),
        }
    }

    /// This decoder, resuming with what a bookmark says was delivered ([`super::shapes`]).
    pub(crate) fn with_delivered(mut self, delivered: Delivered) -> Self {
        self.delivered = Arc::new(delivered);
        self
    }

    /// The shapes delivered and the renames read so far (counting the records decoded: the
    /// stream's bookmark takes it between transactions, or as of a transaction's start).
    pub(crate) fn delivered(&self) -> Arc<Delivered> {
        self.delivered.clone()
    }

    /// Keeps the column renames of an `ALTER TABLE` of `table` (`database.table`) for the
    /// comparison of its next shape, when the table is listed.
    pub(crate) fn column_renames(&mut self, table: &TableName, renames: Vec<(String, String)>) {
        let Some(database) = table.database.as_deref() else {
            return;
        };
        if renames.is_empty() || !self.listed(database, &table.table) {
            return;
        }
        Arc::make_mut(&mut self.delivered)
            .renames
            .entry(format!("{database}.{}", table.table))
            .or_default()
            .extend(renames);
    }

    /// The schema-change record to deliver before the changes of `shape` (a rows event's
    /// table map) in `txn`, when the table's shape differs from the one delivered last. A
    /// table's first shape is taken as it is.
    pub(crate) fn shape_change(
        &mut self,
        shape: &Arc<TableShape>,
        txn: &TxnContext,
        at: &BinlogPos,
    ) -> Option<Record> {
        if self
            .compared
            .get(&shape.table)
            .is_some_and(|s| Arc::ptr_eq(s, shape))
        {
            return None;
        }
        self.compared.insert(shape.table.clone(), shape.clone());
        if self
            .delivered
            .shapes
            .get(&shape.table)
            .is_some_and(|old| *old == shape.identified)
            && !self.delivered.renames.contains_key(&shape.table)
        {
            return None;
        }
        let delivered = Arc::make_mut(&mut self.delivered);
        let renames = delivered.renames.remove(&shape.table).unwrap_or_default();
        let stored: Vec<Identified> = shape.identified.clone();
        let old = delivered.shapes.insert(shape.table.clone(), stored)?;
        let (old, new) = identify(&old, &shape.identified, &renames);
        let (before, after) = announce(&shape.table, &format!("binlog {at}"), &old, &new)?;
        Some(txn.record(Op::Schema, &shape.table, before, after))
    }

    /// Whether `database.table` is listed, or matched by a pattern.
    pub(crate) fn listed(&self, database: &str, table: &str) -> bool {
        self.wanted
            .iter()
            .any(|t| t.database.as_deref() == Some(database) && t.table == table)
            || self.patterns.iter().any(|p| p.matches(database, table))
    }

    /// Whether a table map (`raw`: its event bytes) is of a listed table and differs from
    /// the one in hand: [`Self::table_map`] then needs the table's declared columns.
    pub(crate) fn needs_catalog(&self, tme: &TableMapEvent<'_>, raw: &[u8]) -> bool {
        self.maps.get(&tme.table_id()).is_none_or(|m| m.raw != raw)
            && self.listed(&tme.database_name(), &tme.table_name())
    }

    /// Takes a table map (`raw`: its event bytes): replaces the table id's shape when it
    /// differs from the one in hand. `catalog` is the table as `information_schema` declares
    /// it (for MariaDB's UUID, INET4, INET6 and JSON, which the binlog logs as bytes and text).
    ///
    /// # Errors
    /// [`FaucetError::Read`] when a listed table's map has no column names
    /// (`binlog_row_metadata` is not FULL) or a column type cannot be decoded.
    pub(crate) fn table_map(
        &mut self,
        tme: &TableMapEvent<'_>,
        raw: &[u8],
        at: &BinlogPos,
        catalog: &TableCatalog,
    ) -> Result<(), FaucetError> {
        let id = tme.table_id();
        if self.maps.get(&id).is_some_and(|m| m.raw == raw) {
            return Ok(());
        }
        let database = tme.database_name();
        let table = tme.table_name();
        let shape = if self.listed(&database, &table) {
            let name = TableName {
                database: Some(database.to_string()),
                table: table.to_string(),
            };
            if !self.wanted.contains(&name) {
                // Matched by a pattern, and not there at start: created since.
                tracing::info!(
                    table = %name,
                    at = %at,
                    "a table created after the start matches a `tables` pattern: its changes \
                     are read from here on"
                );
                self.wanted.push(name);
            }
            let shape = shape_of(
                tme,
                &format!("{database}.{table}"),
                &self.collations,
                catalog,
                at,
            )?;
            if let Some(old) = self
                .maps
                .values()
                .find_map(|m| m.shape.as_ref().filter(|s| s.table == shape.table))
                && old.schema != shape.schema
            {
                tracing::info!(
                    table = %shape.table,
                    at = %at,
                    columns = ?shape.schema.names().collect::<Vec<_>>(),
                    "the table's shape changed in the binlog; records after this follow it"
                );
            }
            Some(Arc::new(shape))
        } else {
            None
        };
        self.maps.insert(
            id,
            Mapped {
                raw: raw.to_vec(),
                shape,
            },
        );
        Ok(())
    }

    /// The shape for a rows event's table id: `Ok(None)` for a table that is not listed.
    ///
    /// # Errors
    /// [`FaucetError::Read`] for a rows event without a preceding table map.
    pub(crate) fn shape(
        &self,
        table_id: u64,
        at: &BinlogPos,
    ) -> Result<Option<Arc<TableShape>>, FaucetError> {
        match self.maps.get(&table_id) {
            Some(m) => Ok(m.shape.clone()),
            None => Err(FaucetError::read(
                CONNECTOR,
                format!("a rows event at {at} for table id {table_id} without its table map"),
                None,
            )),
        }
    }

    /// Forgets every table map (a new binlog file renumbers table ids).
    pub(crate) fn clear(&mut self) {
        self.maps.clear();
    }

    /// The records of one rows event of a listed table, in the event's order, appended to
    /// `out` (the stream's pending records: no list of its own per event). On an error `out`
    /// is as it was: no record of a part of the event is left in it.
    ///
    /// # Errors
    /// [`FaucetError::Data`] naming the table, column and position when a value cannot be
    /// decoded; [`FaucetError::Read`] when a row image is not complete (binlog_row_image
    /// not FULL) or the rows do not parse.
    pub(crate) fn rows(
        shape: &TableShape,
        kind: RowsKind,
        rows: &RowsEventData<'_>,
        txn: &TxnContext,
        at: &BinlogPos,
        out: &mut VecDeque<Record>,
    ) -> Result<(), FaucetError> {
        let start = out.len();
        let decoded = Self::rows_into(shape, (kind, rows), txn, at, out);
        if decoded.is_err() {
            out.truncate(start);
        }
        decoded
    }

    /// [`Self::rows`] of the rows event `(kind, rows)`, leaving what it appended on an error.
    fn rows_into(
        shape: &TableShape,
        (kind, rows): (RowsKind, &RowsEventData<'_>),
        txn: &TxnContext,
        at: &BinlogPos,
        out: &mut VecDeque<Record>,
    ) -> Result<(), FaucetError> {
        // The row images are decoded here, column by column with mysql_common's value
        // decoder, rather than by `RowsEventData::rows`, which builds a column definition
        // per column of every row (most of the time of a large transaction went there).
        let mut buf = ParseBuf(rows.rows_data());
        let before_cols = rows.columns_before_image().map(|c| c.count_ones());
        let after_cols = rows.columns_after_image().map(|c| c.count_ones());
        while !buf.is_empty() {
            let before = before_cols
                .map(|n| Self::image(shape, n, &mut buf, at))
                .transpose()?;
            let after = after_cols
                .map(|n| Self::image(shape, n, &mut buf, at))
                .transpose()?;
            let (op, before, after) = match (kind, before, after) {
                (RowsKind::Write, None, Some(a)) => (Op::Insert, Value::Null, a),
                (RowsKind::Update, Some(b), Some(a)) => (Op::Update, b, a),
                (RowsKind::Delete, Some(b), None) => (Op::Delete, b, Value::Null),
                _ => {
                    return Err(FaucetError::read(
                        CONNECTOR,
                        format!(
                            "a rows event of {} at {at} without the images its kind has",
                            shape.table
                        ),
                        None,
                    ));
                }
            };
            out.push_back(txn.record(op, &shape.table, before, after));
        }
        Ok(())
    }

    /// One row image of `present` columns: a null bitmap, then the non-null values.
    fn image<'a>(
        shape: &'a TableShape,
        present: usize,
        buf: &mut ParseBuf<'a>,
        at: &BinlogPos,
    ) -> Result<Value, FaucetError> {
        if present != shape.columns.len() {
            return Err(FaucetError::read(
                CONNECTOR,
                format!(
                    "a row image of {} at {at} has {present} of its {} columns: the server does \
                     not log whole rows; SET GLOBAL binlog_row_image = 'FULL'",
                    shape.table,
                    shape.columns.len()
                ),
                None,
            ));
        }
        let truncated = || {
            FaucetError::read(
                CONNECTOR,
                format!("a row image of {} at {at} ends early", shape.table),
                None,
            )
        };
        let nulls = buf.checked_eat(present.div_ceil(8)).ok_or_else(truncated)?;
        let mut values = Vec::with_capacity(present);
        for (k, (column, wire)) in shape.columns.iter().zip(&shape.wire).enumerate() {
            if (nulls[k / 8] >> (k % 8)) & 1 == 1 {
                values.push(Value::Null);
                continue;
            }
            let value = decode(column, wire, buf).map_err(|e| match e {
                Undecoded::Truncated => truncated(),
                Undecoded::Data(why) => FaucetError::data(
                    CONNECTOR,
                    format!("{}.{} at {at}", shape.table, column.name),
                    why,
                ),
            })?;
            values.push(value);
        }
        Ok(Value::row(shape.schema.clone(), values))
    }

    /// The records of a DDL statement (`kind`, its SQL text `sql`, default database
    /// `schema`, at `at`) that changes the rows of listed tables without rows events, in the
    /// order it changes them:
    ///
    /// * `TRUNCATE`, `DROP TABLE`, `CREATE OR REPLACE TABLE` of a listed table, `DROP
    ///   DATABASE` of a listed table's database: a `t` record each (the rows are gone; a table
    ///   of that name created later is read from its creation on).
    /// * `RENAME TABLE` / `ALTER TABLE … RENAME`: a listed table renamed away is a `t` (its
    ///   name has no rows now); renamed back in the same statement, nothing. A table renamed
    ///   *into* a listed name (pt-online-schema-change's or gh-ost's cut-over) brings rows
    ///   written under another name, which this stream never read: an error.
    /// * Partition clauses that move rows (`DROP`/`TRUNCATE`/`EXCHANGE`/`CONVERT
    ///   PARTITION`, `CONVERT TABLE … TO PARTITION`) of a listed table: an error (which rows
    ///   moved is not logged).
    ///
    /// # Errors
    /// [`FaucetError::Read`] naming the table, the statement and its position, and the fix:
    /// re-snapshot the table (`faucet replicate`, from a fresh state).
    pub(crate) fn ddl(
        &self,
        kind: &Statement,
        schema: &str,
        sql: &str,
        txn: &TxnContext,
        at: &BinlogPos,
    ) -> Result<Vec<Record>, FaucetError> {
        let full = |n: &TableName| n.qualified_in(schema);
        let is_listed = |n: &TableName| {
            let n = full(n);
            self.listed(n.database.as_deref().unwrap_or(schema), &n.table)
        };
        let truncated = |n: &TableName| {
            txn.record(Op::Truncate, &full(n).to_string(), Value::Null, Value::Null)
        };
        let unreadable = |table: &TableName, why: String| {
            FaucetError::read(
                CONNECTOR,
                format!(
                    "{why} at {at} (`{}`): the rows {} holds now were not logged as changes, so \
                     this stream cannot know them. Re-snapshot it: delete this pipeline's state \
                     (and the target's rows) and run `faucet replicate` again, from after this \
                     statement",
                    short_sql(sql),
                    full(table)
                ),
                None,
            )
        };
        Ok(match kind {
            Statement::Emptied(tables) => tables
                .iter()
                .filter(|t| is_listed(t))
                .map(truncated)
                .collect(),
            Statement::DroppedDatabase(db) => self
                .wanted
                .iter()
                .filter(|t| t.database.as_deref() == Some(db.as_str()))
                .map(truncated)
                .collect(),
            Statement::Renamed(pairs) => {
                // Where each name's rows come from after the statement, renames in order.
                let mut origin: Vec<(TableName, TableName)> = Vec::new();
                for (from, to) in pairs {
                    let (from, to) = (full(from), full(to));
                    let source = match origin.iter().position(|(name, _)| *name == from) {
                        Some(i) => origin.remove(i).1,
                        None => from.clone(),
                    };
                    origin.retain(|(name, _)| *name != to);
                    origin.push((to, source));
                }
                let mut out = Vec::new();
                for (from, _) in pairs {
                    let from = full(from);
                    if is_listed(&from)
                        && !origin.iter().any(|(name, _)| *name == from)
                        && !out
                            .iter()
                            .any(|r: &Record| r[1] == Value::Text(from.to_string().into()))
                    {
                        out.push(truncated(&from));
                    }
                }
                for (name, source) in &origin {
                    if is_listed(name) && name != source {
                        return Err(unreadable(
                            name,
                            format!("the listed table {name} is {source} renamed"),
                        ));
                    }
                }
                out
            }
            Statement::PartitionRows(tables, clause) => {
                if let Some(t) = tables.iter().find(|t| is_listed(t)) {
                    return Err(unreadable(
                        t,
                        format!("{clause} moves rows of the listed table {}", full(t)),
                    ));
                }
                Vec::new()
            }
            _ => Vec::new(),
        })
    }
}

/// The first 120 characters of a statement, for messages.
fn short_sql(sql: &str) -> String {
    let mut out: String = sql.chars().take(120).collect();
    if out.len() < sql.len() {
        out.push('…');
    }
    out
}

/// A commit time (microseconds since 1970, UTC) in RFC 3339 UTC, the fraction without
/// trailing zeros: `2026-11-30T06:00:00.25Z`.
pub(crate) fn commit_ts_text(micros: u64) -> faucet_core::Text {
    let secs = i64::try_from(micros / 1_000_000).unwrap_or(i64::MAX);
    let frac = (micros % 1_000_000) as u32;
    let Some(at) = chrono::DateTime::from_timestamp(secs, frac * 1_000) else {
        return "infinity".into();
    };
    let mut out = faucet_core::Text::from(at.format("%Y-%m-%dT%H:%M:%S").to_string());
    if frac > 0 {
        let fraction = format!("{frac:06}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests;
