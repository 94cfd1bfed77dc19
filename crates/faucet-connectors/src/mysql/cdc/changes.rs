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

use mysql_async::Value as MyValue;
use mysql_async::binlog::events::{RowsEventData, TableMapEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::ColumnType;
use mysql_common::io::ParseBuf;

use faucet_core::change::Op;
use faucet_core::change::schema::{ColumnShape, Identified, announce};
use faucet_core::{DataType, FaucetError, Field, Schema, Value};

use super::CONNECTOR;
use super::events::RowsKind;
use super::position::BinlogPos;
use super::shapes::{Delivered, identify, type_spelling};
use super::statement::Statement;
use crate::mysql::catalog::TableCatalog;
use crate::mysql::table::TableName;
use crate::mysql::value::{
    Collations, Kind, MysqlColumn, columns_of_table_map, decimal_bin_size, decimal_text,
    from_binlog, text_value, time2_hundredths, timestamp_from_epoch, to_value,
};
use crate::sql::table_pattern::TablePattern;

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

/// How one column's values are read from a row image: chosen once per table map from the
/// column's binlog type and metadata, so a row costs no per-value dispatch on them.
#[derive(Debug)]
enum Wire {
    /// TINYINT, SMALLINT, MEDIUMINT, INT, BIGINT: a little-endian integer of `len` bytes
    /// (1, 2, 3, 4, 8): `Int` sign-extended, `UInt` when UNSIGNED, as mysql_common reads
    /// them — except that a signed MEDIUMINT is sign-extended too (mysql_common 0.37's
    /// `eat_i24_le` is not: it read -1 as 16777215, unlike SELECT).
    Int {
        /// The integer's bytes.
        len: usize,
        /// UNSIGNED.
        unsigned: bool,
    },
    /// DATETIME2 with `fsp` (0…6) fraction digits: 5 bytes, then 0…3 of fraction
    /// (mysql_common's `my_datetime_packed_from_binary`).
    DateTime2 {
        /// The table map's fraction digits.
        fsp: u8,
    },
    /// TIMESTAMP2 with `fsp` (0…6) fraction digits: the seconds since 1970 as a big-endian
    /// *unsigned* 32-bit number (MySQL's `my_timestamp_from_binary` reads them into a
    /// `uint32`; mysql_common 0.37 reads them as `i32`, wrong from 2038-01-19 03:14:08 on,
    /// which MariaDB 11.5+ stores), then 0…3 bytes of fraction as DATETIME2's.
    Timestamp2 {
        /// The table map's fraction digits.
        fsp: u8,
    },
    /// NEWDECIMAL(`precision`, `scale`): [`decimal_bin_size`] bytes, as text
    /// ([`decimal_text`]).
    Decimal {
        /// Digits in all.
        precision: usize,
        /// Digits after the point.
        scale: usize,
    },
    /// TIME(1), TIME(2): [`time2_hundredths`].
    Time2Hundredths,
    /// VARCHAR and the BLOB/TEXT types: a little-endian length of this many bytes
    /// ([`length_prefix`]), then the bytes.
    Prefixed(usize),
    /// Everything else, by mysql_common's `BinlogValue`: the real type, the table map's
    /// metadata bytes, UNSIGNED.
    Generic(ColumnType, Vec<u8>, bool),
}

impl Wire {
    /// The plan for `column`, whose binlog type is `ty` with metadata `meta`. The fast
    /// plans are taken only where the column's kind is the one the type decodes to, so every
    /// value still reaches [`from_binlog`] / [`to_value`] in the shape mysql_common gives.
    fn of(column: &MysqlColumn, ty: ColumnType, meta: &[u8]) -> Self {
        let int = |len, kind| {
            if column.kind == kind {
                Some(Self::Int {
                    len,
                    unsigned: column.unsigned,
                })
            } else {
                None
            }
        };
        let plan = match ty {
            ColumnType::MYSQL_TYPE_TINY => int(1, Kind::TinyInt),
            ColumnType::MYSQL_TYPE_SHORT => int(2, Kind::SmallInt),
            ColumnType::MYSQL_TYPE_INT24 => int(3, Kind::MediumInt),
            ColumnType::MYSQL_TYPE_LONG => int(4, Kind::Int),
            ColumnType::MYSQL_TYPE_LONGLONG => int(8, Kind::BigInt),
            ColumnType::MYSQL_TYPE_DATETIME2 if column.kind == Kind::DateTime => {
                meta.first().map(|&fsp| Self::DateTime2 { fsp })
            }
            ColumnType::MYSQL_TYPE_TIMESTAMP2 if column.kind == Kind::Timestamp => {
                meta.first().map(|&fsp| Self::Timestamp2 { fsp })
            }
            ColumnType::MYSQL_TYPE_TIME2 if matches!(meta.first(), Some(1 | 2)) => {
                Some(Self::Time2Hundredths)
            }
            ColumnType::MYSQL_TYPE_NEWDECIMAL if column.kind == Kind::Decimal => match meta {
                [precision, scale, ..] => Some(Self::Decimal {
                    precision: usize::from(*precision),
                    scale: usize::from(*scale),
                }),
                _ => None,
            },
            _ => length_prefix(ty, meta).map(Self::Prefixed),
        };
        plan.unwrap_or_else(|| Self::Generic(ty, meta.to_vec(), column.unsigned))
    }
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
                    columns = ?shape.schema.fields().iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
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
        let decoded = Self::rows_into(shape, kind, rows, txn, at, out);
        if decoded.is_err() {
            out.truncate(start);
        }
        decoded
    }

    fn rows_into(
        shape: &TableShape,
        kind: RowsKind,
        rows: &RowsEventData<'_>,
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

/// Why a value of a row image was not decoded.
enum Undecoded {
    /// The image ends before the value does.
    Truncated,
    /// The bytes are not a value of the column (the message says why).
    Data(String),
}

/// One non-null value of `column` from a row image, read by its plan `wire`, by the one
/// MySQL value mapping ([`from_binlog`] / [`to_value`]). Most kinds are read here rather
/// than by mysql_common's `BinlogValue` (whose generic dispatch and allocations were most
/// of a row's decoding), to the same result:
/// * integers and DATETIME2, read into the `mysql_common::Value` mysql_common makes of them
///   ([`Wire::Int`], [`Wire::DateTime2`]);
/// * TIME(1), TIME(2), which mysql_common mis-decodes when negative ([`time2_hundredths`]);
/// * DECIMAL, its text straight from the stored digits ([`decimal_text`], inline in its
///   [`faucet_core::Text`]) instead of through mysql_common's `Decimal` and its `Display`
///   (three allocations per value): the `Value::Numeric` a SELECT's text gives;
/// * VARCHAR and the BLOB/TEXT types, whose bytes stay borrowed from the event: text goes
///   to [`text_value`] without a copy of its own (binary values are copied once, as
///   before).
fn decode<'a>(
    column: &MysqlColumn,
    wire: &'a Wire,
    buf: &mut ParseBuf<'a>,
) -> Result<Value, Undecoded> {
    let raw: MyValue = match wire {
        Wire::Int { len, unsigned } => {
            let bytes = buf.checked_eat(*len).ok_or(Undecoded::Truncated)?;
            let bits = bytes
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            if *unsigned {
                MyValue::UInt(bits)
            } else {
                // Sign-extend from the integer's width.
                let shift = 64 - 8 * *len as u32;
                MyValue::Int(((bits << shift) as i64) >> shift)
            }
        }
        Wire::DateTime2 { fsp } => {
            let bytes = buf
                .checked_eat(5 + fraction_bytes(*fsp))
                .ok_or(Undecoded::Truncated)?;
            let packed =
                mysql_common::binlog::misc::my_datetime_packed_from_binary(bytes, u32::from(*fsp))
                    .map_err(|e| {
                        Undecoded::Data(format!("the binlog value does not decode: {e}"))
                    })?;
            mysql_common::binlog::misc::datetime_from_packed(packed)
        }
        Wire::Timestamp2 { fsp } => {
            let bytes = buf
                .checked_eat(4 + fraction_bytes(*fsp))
                .ok_or(Undecoded::Truncated)?;
            let (secs, fraction) = bytes.split_at(4);
            let secs = u32::from_be_bytes([secs[0], secs[1], secs[2], secs[3]]);
            // 0…3 big-endian bytes: hundredths, then ten-thousandths, then microseconds.
            let stored = fraction
                .iter()
                .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
            let micros = match fraction.len() {
                1 => stored * 10_000,
                2 => stored * 100,
                _ => stored,
            };
            return timestamp_from_epoch(column, i64::from(secs), micros).map_err(Undecoded::Data);
        }
        Wire::Time2Hundredths => {
            let bytes = buf.checked_eat(4).ok_or(Undecoded::Truncated)?;
            time2_hundredths([bytes[0], bytes[1], bytes[2], bytes[3]])
        }
        Wire::Decimal { precision, scale } => {
            let bytes = buf
                .checked_eat(decimal_bin_size(*precision, *scale))
                .ok_or(Undecoded::Truncated)?;
            return decimal_text(bytes, *precision, *scale)
                .map(Value::Numeric)
                .map_err(Undecoded::Data);
        }
        Wire::Prefixed(prefix) => {
            let len = buf.checked_eat(*prefix).ok_or(Undecoded::Truncated)?;
            let n = len
                .iter()
                .rev()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            let bytes = buf.checked_eat(n).ok_or(Undecoded::Truncated)?;
            if let Some(text) = text_value(column, bytes) {
                return text.map_err(Undecoded::Data);
            }
            MyValue::Bytes(bytes.to_vec())
        }
        Wire::Generic(ty, meta, unsigned) => {
            let raw: BinlogValue<'a> = buf
                .parse((*ty, &meta[..], *unsigned, false))
                .map_err(|e| Undecoded::Data(format!("the binlog value does not decode: {e}")))?;
            return from_binlog(column, raw).map_err(Undecoded::Data);
        }
    };
    to_value(column, raw).map_err(Undecoded::Data)
}

/// The bytes of fraction after a DATETIME2's or TIMESTAMP2's seconds, by its fraction digits
/// (MySQL's `my_datetime_packed_from_binary`, `my_timestamp_from_binary`).
fn fraction_bytes(fsp: u8) -> usize {
    match fsp {
        1 | 2 => 1,
        3 | 4 => 2,
        5 | 6 => 3,
        _ => 0,
    }
}

/// The bytes of the little-endian length before a VARCHAR's or a BLOB/TEXT's value, read
/// from the table map's metadata as mysql_common reads it (VARCHAR: 1 when its maximum
/// length in bytes is below 256, else 2; BLOB: the metadata byte, 1 to 4); `None` for
/// every other type.
fn length_prefix(ty: ColumnType, meta: &[u8]) -> Option<usize> {
    match ty {
        ColumnType::MYSQL_TYPE_VARCHAR | ColumnType::MYSQL_TYPE_VAR_STRING => {
            let [lo, hi, ..] = meta[..] else {
                return None;
            };
            Some(if u16::from_le_bytes([lo, hi]) < 256 {
                1
            } else {
                2
            })
        }
        ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB
        | ColumnType::MYSQL_TYPE_BLOB => match meta.first() {
            Some(&n @ 1..=4) => Some(usize::from(n)),
            _ => None,
        },
        _ => None,
    }
}

/// The shape of a listed table from its table map ([`columns_of_table_map`]), its MariaDB
/// UUID/INET/JSON columns refined by the catalog ([`as_of_event`]).
fn shape_of(
    tme: &TableMapEvent<'_>,
    table: &str,
    collations: &Collations,
    catalog: &TableCatalog,
    at: &BinlogPos,
) -> Result<TableShape, FaucetError> {
    let columns: Vec<MysqlColumn> = columns_of_table_map(tme, collations)
        .map_err(|m| FaucetError::read(CONNECTOR, format!("at {at}: {m}"), None))?
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let meta = tme.get_column_metadata(i).unwrap_or(&[]);
            as_of_event(c, meta, catalog, collations.is_mariadb()).map_err(|why| {
                FaucetError::read(CONNECTOR, format!("{table} at {at}: {why}"), None)
            })
        })
        .collect::<Result<_, _>>()?;
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(c.name.clone(), c.data_type()))
            .collect(),
    ));
    let mut wire = Vec::with_capacity(columns.len());
    for (i, c) in columns.iter().enumerate() {
        let ty = tme.get_column_type(i).ok().flatten().ok_or_else(|| {
            FaucetError::read(
                CONNECTOR,
                format!("the table map of {table} at {at}: no type for `{}`", c.name),
                None,
            )
        })?;
        let meta = tme.get_column_metadata(i).unwrap_or(&[]);
        wire.push(Wire::of(c, ty, meta));
    }
    let key = catalog.primary_key.as_deref().unwrap_or_default();
    let identified = columns
        .iter()
        .enumerate()
        .map(|(i, c)| Identified {
            shape: ColumnShape {
                name: c.name.clone(),
                source_type: type_spelling(c, tme.get_column_metadata(i).unwrap_or(&[])),
                data_type: c.data_type(),
                key: key.contains(&c.name),
            },
            id: 0,
        })
        .collect();
    Ok(TableShape {
        table: table.to_owned(),
        columns,
        schema,
        wire,
        identified,
    })
}

/// What a MariaDB column's binlog type may be the storage of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    /// BINARY(16): also UUID and INET6.
    Binary16,
    /// BINARY(4): also INET4.
    Binary4,
    /// LONGTEXT: also JSON (LONGTEXT with a `json_valid` check).
    LongText,
    /// Only what the binlog says.
    Plain,
}

impl Storage {
    fn of(column: &MysqlColumn, meta: &[u8]) -> Self {
        match column.kind {
            Kind::Char if column.is_binary() && column.length == 16 => Self::Binary16,
            Kind::Char if column.is_binary() && column.length == 4 => Self::Binary4,
            // A BLOB/TEXT's metadata is its length prefix: 4 bytes for LONGTEXT.
            Kind::Blob if !column.is_binary() && meta.first() == Some(&4) => Self::LongText,
            _ => Self::Plain,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Binary16 => "BINARY(16), the storage of UUID and INET6 too",
            Self::Binary4 => "BINARY(4), the storage of INET4 too",
            Self::LongText => "LONGTEXT, the storage of JSON too",
            Self::Plain => "its own type",
        }
    }
}

/// `column` of a table map (its metadata `meta`) with the type it had when the event was
/// written. The binlog does not name MariaDB's UUID, INET4, INET6 and JSON: it logs their
/// storage (BINARY(16), BINARY(4), LONGTEXT), so the catalog — the table as it is *now*,
/// not as of the event — says which it is. The two are compared, so a run catching up
/// across an `ALTER` never decodes an event by a newer type:
///
/// * the binlog type is no such storage (a VARCHAR that is INET6 now, an INT that is UUID
///   now): the binlog's type, which is the column's type at the event;
/// * the catalog declares a type of that storage (UUID or INET6 for BINARY(16), INET4 for
///   BINARY(4), JSON for LONGTEXT) or the storage type itself: the catalog's;
/// * the catalog declares another type (the column was retyped since): which type the
///   column had cannot be known, and the error says so;
/// * the catalog has no such column (dropped or renamed since, or the table itself): the
///   binlog's storage type, with a warning (no SELECT can show the column any more, and a
///   catch-up must not stop for good on it).
///
/// MySQL has none of these types (its JSON has a binlog type of its own): the binlog's.
/// Called once per new table map (the catalog is read once per table map id).
///
/// # Errors
/// A message naming the column, what the binlog and the catalog say, and the fix.
fn as_of_event(
    column: MysqlColumn,
    meta: &[u8],
    catalog: &TableCatalog,
    mariadb: bool,
) -> Result<MysqlColumn, String> {
    let storage = Storage::of(&column, meta);
    if !mariadb || storage == Storage::Plain {
        return Ok(column);
    }
    let declared = catalog
        .columns
        .iter()
        .find(|(name, _, _)| *name == column.name)
        .map(|(_, data_type, _)| {
            if catalog.json.contains(&column.name) {
                "json"
            } else {
                data_type.as_str()
            }
        });
    let fits = matches!(
        (storage, declared),
        (Storage::Binary16, Some("uuid" | "inet6" | "binary"))
            | (Storage::Binary4, Some("inet4" | "binary"))
            | (Storage::LongText, Some("json" | "longtext"))
    );
    match declared {
        Some(d) if fits => Ok(column.with_declared_type(d)),
        // The column is gone from the table (dropped or renamed since the event, or the table
        // itself): nothing can say whether it was UUID/INET/JSON, and no SELECT can show it
        // any more; its values come by the binlog's own type (BINARY as base64, LONGTEXT as
        // text), with a warning, rather than stopping a catch-up for good.
        None => {
            tracing::warn!(
                source = CONNECTOR,
                column = %column.name,
                "column `{}` is logged as {} and the table no longer has it (dropped or \
                 renamed since this event): its values are delivered by that storage type, \
                 as base64 or text even if it was a UUID, INET or JSON column",
                column.name,
                storage.name()
            );
            Ok(column)
        }
        Some(d) => Err(format!(
            "the binlog logs column `{}` as {}, and the table's catalog declares it {} now: the type the \
             column had when this event was written cannot be known (it changed since), and \
             decoding by today's type could deliver wrong values. Re-snapshot the table \
             (delete this pipeline's state and run `faucet replicate` again) rather than \
             replaying this part of the binlog",
            column.name,
            storage.name(),
            d.to_ascii_uppercase(),
        )),
    }
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
mod tests {
    use super::*;
    use crate::mysql::cdc::statement::classify;

    fn decoder(tables: &[&str]) -> ChangeDecoder {
        let tables: Vec<TableName> = tables
            .iter()
            .map(|t| TableName::parse_qualified(t, "tables").expect("name"))
            .collect();
        ChangeDecoder::new(&tables, &[], Collations::builtin())
    }

    fn ddl(d: &ChangeDecoder, sql: &str) -> Result<Vec<String>, String> {
        let txn = TxnContext {
            file: "bin.000001".into(),
            start_pos: 4,
            gtid: None,
            commit_ts: commit_ts_text(0),
        };
        let at = BinlogPos::new("bin.000001", 4);
        d.ddl(&classify(sql), "shop", sql, &txn, &at)
            .map(|records| {
                records
                    .iter()
                    .map(|r| match (&r[0], &r[1]) {
                        (Value::Text(op), Value::Text(t)) => format!("{op} {t}"),
                        other => format!("{other:?}"),
                    })
                    .collect()
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn ddl_of_listed_tables_is_truncates_or_an_error() {
        let d = decoder(&["shop.a", "shop.b", "other.c"]);
        assert_eq!(
            ddl(&d, "DROP TABLE a, x, other.c"),
            Ok(vec!["t shop.a".into(), "t other.c".into()])
        );
        assert_eq!(ddl(&d, "DROP DATABASE other"), Ok(vec!["t other.c".into()]));
        assert_eq!(
            ddl(&d, "RENAME TABLE a TO a_old"),
            Ok(vec!["t shop.a".into()])
        );
        assert_eq!(ddl(&d, "RENAME TABLE a TO x, x TO a"), Ok(vec![]));
        assert_eq!(ddl(&d, "RENAME TABLE x TO y"), Ok(vec![]));
        // A swap of two listed tables: each now holds the other's rows.
        let swap = ddl(&d, "RENAME TABLE a TO tmp, b TO a, tmp TO b").expect_err("a swap");
        assert!(
            swap.contains("the listed table shop.a is shop.b renamed"),
            "{swap}"
        );
        let cut = ddl(&d, "ALTER TABLE _a_gho RENAME TO a").expect_err("a rename in");
        assert!(cut.contains("shop.a is shop._a_gho renamed"), "{cut}");
        let moved =
            ddl(&d, "ALTER TABLE x EXCHANGE PARTITION p WITH TABLE a").expect_err("rows move");
        assert!(
            moved.contains("EXCHANGE PARTITION moves rows of the listed table shop.a"),
            "{moved}"
        );
        assert_eq!(ddl(&d, "ALTER TABLE x TRUNCATE PARTITION p"), Ok(vec![]));
    }

    #[test]
    fn mariadb_types_come_from_the_catalog_only_where_it_matches_the_binlog() {
        let c = Collations::builtin();
        let binary16 = || {
            MysqlColumn::from_binlog(
                "c",
                ColumnType::MYSQL_TYPE_STRING,
                &[0xfe, 16],
                false,
                63,
                vec![],
                &c,
            )
            .expect("BINARY(16)")
        };
        let varchar = || {
            MysqlColumn::from_binlog(
                "c",
                ColumnType::MYSQL_TYPE_VARCHAR,
                &[160, 0],
                false,
                45,
                vec![],
                &c,
            )
            .expect("VARCHAR(40)")
        };
        let catalog = |t: &str| TableCatalog {
            columns: vec![("c".into(), t.into(), true)],
            ..TableCatalog::default()
        };
        let kind = |r: Result<MysqlColumn, String>| r.map(|c| c.kind);
        assert_eq!(
            kind(as_of_event(
                binary16(),
                &[0xfe, 16],
                &catalog("inet6"),
                true
            )),
            Ok(Kind::Inet6)
        );
        assert_eq!(
            kind(as_of_event(binary16(), &[0xfe, 16], &catalog("uuid"), true)),
            Ok(Kind::Uuid)
        );
        assert_eq!(
            kind(as_of_event(
                binary16(),
                &[0xfe, 16],
                &catalog("binary"),
                true
            )),
            Ok(Kind::Char)
        );
        // VARCHAR in the binlog, INET6 now: the event predates the ALTER.
        assert_eq!(
            kind(as_of_event(varchar(), &[160, 0], &catalog("inet6"), true)),
            Ok(Kind::VarChar)
        );
        let e =
            as_of_event(binary16(), &[0xfe, 16], &catalog("varchar"), true).expect_err("retyped");
        assert!(e.contains("declares it VARCHAR"), "{e}");
        // The column is gone now: the binlog's storage type.
        assert_eq!(
            kind(as_of_event(
                binary16(),
                &[0xfe, 16],
                &TableCatalog::default(),
                true
            )),
            Ok(Kind::Char)
        );
        // MySQL has no such types: the binlog's.
        assert_eq!(
            kind(as_of_event(
                binary16(),
                &[0xfe, 16],
                &TableCatalog::default(),
                false
            )),
            Ok(Kind::Char)
        );
    }

    /// The plans read here give exactly what mysql_common's generic `BinlogValue` path gives
    /// for the same bytes — every integer width signed and UNSIGNED (BIGINT UNSIGNED above
    /// i64::MAX), DATETIME2 and TIMESTAMP2 of every precision, over random and extreme bytes
    /// — except a negative signed MEDIUMINT, which mysql_common reads without its sign and
    /// the plan sign-extends (as SELECT gives it), and a TIMESTAMP2 from 2038-01-19 on
    /// ([`timestamps_after_2038_keep_their_date`]).
    #[test]
    fn fast_plans_decode_as_mysql_common_does() {
        let c = Collations::builtin();
        let mut next = crate::test_rng();
        let outcome = |r: Result<Value, Undecoded>| match r {
            Ok(v) => Ok(v),
            Err(Undecoded::Truncated) => Err("truncated".to_owned()),
            Err(Undecoded::Data(why)) => Err(why),
        };
        let cases: [(ColumnType, &[u8], usize); 19] = [
            (ColumnType::MYSQL_TYPE_TINY, &[], 1),
            (ColumnType::MYSQL_TYPE_SHORT, &[], 2),
            (ColumnType::MYSQL_TYPE_INT24, &[], 3),
            (ColumnType::MYSQL_TYPE_LONG, &[], 4),
            (ColumnType::MYSQL_TYPE_LONGLONG, &[], 8),
            (ColumnType::MYSQL_TYPE_DATETIME2, &[0], 5),
            (ColumnType::MYSQL_TYPE_DATETIME2, &[1], 6),
            (ColumnType::MYSQL_TYPE_DATETIME2, &[2], 6),
            (ColumnType::MYSQL_TYPE_DATETIME2, &[3], 7),
            (ColumnType::MYSQL_TYPE_DATETIME2, &[4], 7),
            (ColumnType::MYSQL_TYPE_DATETIME2, &[5], 8),
            (ColumnType::MYSQL_TYPE_DATETIME2, &[6], 8),
            (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[0], 4),
            (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[1], 5),
            (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[2], 5),
            (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[3], 6),
            (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[4], 6),
            (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[5], 7),
            (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[6], 7),
        ];
        let mut checked = 0;
        for (ty, meta, len) in cases {
            for unsigned in [false, true] {
                let column = MysqlColumn::from_binlog("c", ty, meta, unsigned, 63, vec![], &c)
                    .expect("a column");
                let fast = Wire::of(&column, ty, meta);
                assert!(!matches!(fast, Wire::Generic(..)), "{ty:?} {fast:?}");
                let generic = Wire::Generic(ty, meta.to_vec(), unsigned);
                let mut inputs: Vec<Vec<u8>> = vec![
                    vec![0; len],
                    vec![0xff; len],
                    std::iter::once(0x80).chain(vec![0; len - 1]).collect(),
                    std::iter::once(0x7f).chain(vec![0xff; len - 1]).collect(),
                    vec![0; len - 1].into_iter().chain([0x80]).collect(),
                    vec![0xff; len - 1].into_iter().chain([0x7f]).collect(),
                ];
                inputs.extend((0..3000).map(|_| (0..len).map(|_| next() as u8).collect()));
                if ty == ColumnType::MYSQL_TYPE_DATETIME2 {
                    // The server writes a DATETIME2 with its top bit set (a packed value ≥ 0);
                    // mysql_common overflows on the most negative one.
                    inputs.iter_mut().for_each(|b| b[0] |= 0x80);
                }
                if ty == ColumnType::MYSQL_TYPE_TIMESTAMP2 {
                    // Seconds before 2038 (mysql_common's i32 reads later ones as before
                    // 1970), and a fraction the server can write (below 100, 10⁴, 10⁶).
                    for b in &mut inputs {
                        b[0] &= 0x7f;
                        let (limit, at) = match len - 4 {
                            1 => (100, 7),
                            2 => (10_000, 6),
                            3 => (1_000_000, 5),
                            _ => continue,
                        };
                        let f = u32::from_be_bytes([
                            0,
                            b[4],
                            *b.get(5).unwrap_or(&0),
                            *b.get(6).unwrap_or(&0),
                        ]) % limit;
                        b[4..].copy_from_slice(&f.to_be_bytes()[at - 4..]);
                    }
                }
                for bytes in &inputs {
                    // A byte after the value: each path must take exactly its own bytes.
                    let mut with_next = bytes.clone();
                    with_next.push(0xaa);
                    let mut a = ParseBuf(&with_next);
                    let mut b = ParseBuf(&with_next);
                    let fast_value = outcome(decode(&column, &fast, &mut a));
                    let mut generic_value = outcome(decode(&column, &generic, &mut b));
                    // mysql_common reads a signed MEDIUMINT without its sign: what it means.
                    if ty == ColumnType::MYSQL_TYPE_INT24
                        && !unsigned
                        && let Ok(Value::Int(v)) = generic_value
                        && v >= 0x80_0000
                    {
                        generic_value = Ok(Value::Int(v - 0x100_0000));
                    }
                    assert_eq!(
                        fast_value, generic_value,
                        "{ty:?} unsigned {unsigned} {bytes:?}"
                    );
                    assert_eq!(a.0, b.0, "{ty:?} {bytes:?}: the same bytes left");
                    checked += 1;
                }
            }
        }
        assert!(checked > 70_000, "{checked}");
        // What each path gives (not only that they agree).
        let int = |ty, unsigned, bytes: &[u8]| {
            let column =
                MysqlColumn::from_binlog("c", ty, &[], unsigned, 63, vec![], &c).expect("int");
            let wire = Wire::of(&column, ty, &[]);
            outcome(decode(&column, &wire, &mut ParseBuf(bytes)))
        };
        let medium = ColumnType::MYSQL_TYPE_INT24;
        assert_eq!(
            int(medium, false, &[0, 0, 0x80]),
            Ok(Value::Int(-8_388_608))
        );
        assert_eq!(
            int(medium, true, &[0xff, 0xff, 0xff]),
            Ok(Value::Int(16_777_215))
        );
        assert_eq!(
            int(ColumnType::MYSQL_TYPE_LONGLONG, true, &[0xff; 8]),
            Ok(Value::Numeric("18446744073709551615".into()))
        );
        assert_eq!(
            int(ColumnType::MYSQL_TYPE_LONGLONG, false, &[0xff; 8]),
            Ok(Value::Int(-1))
        );
        assert_eq!(
            int(ColumnType::MYSQL_TYPE_TINY, false, &[1, 2]),
            Ok(Value::Int(1))
        );
        assert_eq!(
            int(ColumnType::MYSQL_TYPE_SHORT, false, &[1]),
            Err("truncated".to_owned())
        );
    }

    /// A TIMESTAMP2's seconds are unsigned (MySQL's `my_timestamp_from_binary`): from
    /// 2038-01-19T03:14:08Z (2³¹ s) to 2106-02-07T06:28:15Z (2³² − 1 s), which MariaDB 11.5+
    /// stores, keep their date. mysql_common's generic path reads them as an `i32`, before
    /// 1970: that is what the plan replaces.
    #[test]
    fn timestamps_after_2038_keep_their_date() {
        let c = Collations::builtin();
        let ty = ColumnType::MYSQL_TYPE_TIMESTAMP2;
        let read = |fsp: u8, bytes: &[u8], generic: bool| {
            let column =
                MysqlColumn::from_binlog("c", ty, &[fsp], false, 63, vec![], &c).expect("a column");
            let wire = if generic {
                Wire::Generic(ty, vec![fsp], false)
            } else {
                Wire::of(&column, ty, &[fsp])
            };
            let mut buf = ParseBuf(bytes);
            match decode(&column, &wire, &mut buf) {
                Ok(v) => Ok((v, buf.0.len())),
                Err(Undecoded::Truncated) => Err("truncated".to_owned()),
                Err(Undecoded::Data(why)) => Err(why),
            }
        };
        let ts = |s: &str| Value::TimestampTz(s.into());
        assert_eq!(
            read(0, &[0x80, 0, 0, 0], false),
            Ok((ts("2038-01-19T03:14:08Z"), 0))
        );
        assert_eq!(
            read(0, &[0x80, 0, 0, 0], true),
            Ok((ts("1901-12-13T20:45:52Z"), 0)),
            "mysql_common's i32 (the reason for the plan)"
        );
        // 2106-02-07T06:28:15.123456Z, then a byte of the next value.
        let micros = 123_456u32.to_be_bytes();
        assert_eq!(
            read(
                6,
                &[
                    0xff, 0xff, 0xff, 0xff, micros[1], micros[2], micros[3], 0xaa
                ],
                false
            ),
            Ok((ts("2106-02-07T06:28:15.123456Z"), 1))
        );
        assert_eq!(
            read(2, &[0xff, 0xff, 0xff, 0xff, 50], false),
            Ok((ts("2106-02-07T06:28:15.50Z"), 0))
        );
        assert_eq!(
            read(3, &[0x69, 0xe0, 0x0b, 0x5c, 0x11, 0xd0], false),
            Ok((ts("2026-04-15T22:04:12.456Z"), 0))
        );
        // The zero TIMESTAMP is NULL; a value cut short is an error, not a guess.
        assert_eq!(read(0, &[0, 0, 0, 0], false), Ok((Value::Null, 0)));
        assert_eq!(
            read(6, &[0x80, 0, 0, 0, 1], false),
            Err("truncated".to_owned())
        );
    }

    #[test]
    fn commit_times_are_utc() {
        assert_eq!(commit_ts_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            commit_ts_text(1_764_568_800_250_000),
            "2025-12-01T06:00:00.25Z"
        );
    }
}
