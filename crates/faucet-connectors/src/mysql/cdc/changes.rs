//! From binlog table maps and rows events to change records.
//!
//! A change record has the fields of [`record_schema`], in order:
//!
//! | field | value |
//! |---|---|
//! | `op` | `c` insert, `u` update, `d` delete, `t` truncate |
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

use std::collections::HashMap;
use std::sync::Arc;

use mysql_async::Value as MyValue;
use mysql_async::binlog::events::{RowsEventData, TableMapEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::ColumnType;
use mysql_common::io::ParseBuf;

use faucet_core::change::Op;
use faucet_core::{DataType, FaucetError, Field, Schema, Value};

use super::CONNECTOR;
use super::events::RowsKind;
use super::position::BinlogPos;
use super::statement::Statement;
use crate::mysql::catalog::TableCatalog;
use crate::mysql::table::TableName;
use crate::mysql::value::{
    Collations, Kind, MysqlColumn, columns_of_table_map, decimal_bin_size, decimal_text,
    from_binlog, text_value, time2_hundredths,
};

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
    /// The commit time, RFC 3339 UTC.
    pub(crate) commit_ts: String,
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
    /// Per column, what the binlog's value decoder needs: the real type, the table map's
    /// metadata bytes, UNSIGNED.
    wire: Vec<(ColumnType, Vec<u8>, bool)>,
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
    collations: Collations,
    maps: HashMap<u64, Mapped>,
}

impl ChangeDecoder {
    /// A decoder that emits records of `tables`, decoding text by `collations` (the server's).
    pub(crate) fn new(tables: &[TableName], collations: Collations) -> Self {
        Self {
            wanted: tables.to_vec(),
            collations,
            maps: HashMap::new(),
        }
    }

    /// Whether `database.table` is listed.
    pub(crate) fn listed(&self, database: &str, table: &str) -> bool {
        self.wanted
            .iter()
            .any(|t| t.database.as_deref() == Some(database) && t.table == table)
    }

    /// The first listed table whose name occurs in `sql` (case-insensitively), as
    /// `database.table`: a statement-logged change that may concern it.
    pub(crate) fn named_in(&self, sql: &str) -> Option<String> {
        let lower = sql.to_lowercase();
        self.wanted
            .iter()
            .find(|t| lower.contains(&t.table.to_lowercase()))
            .map(|t| t.to_string())
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

    /// The records of one rows event of a listed table, in the event's order.
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
        out: &mut Vec<Record>,
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
            out.push(txn.record(op, &shape.table, before, after));
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
        for (k, (column, (ty, meta, unsigned))) in shape.columns.iter().zip(&shape.wire).enumerate()
        {
            if (nulls[k / 8] >> (k % 8)) & 1 == 1 {
                values.push(Value::Null);
                continue;
            }
            let value = decode(column, (*ty, meta, *unsigned), buf).map_err(|e| match e {
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

/// One non-null value of `column` (its binlog type, table map metadata and UNSIGNED in
/// `wire`) from a row image, by the one MySQL value mapping ([`from_binlog`]). Three kinds
/// are read here rather than by mysql_common's `BinlogValue`, to the same result:
/// * TIME(1), TIME(2), which mysql_common mis-decodes when negative ([`time2_hundredths`]);
/// * DECIMAL, its text straight from the stored digits ([`decimal_text`]) instead of
///   through mysql_common's `Decimal` and its `Display` (three allocations per value);
/// * VARCHAR and the BLOB/TEXT types, whose bytes stay borrowed from the event: text goes
///   to [`text_value`] without a copy of its own (binary values are copied once, as
///   before).
fn decode<'a>(
    column: &MysqlColumn,
    (ty, meta, unsigned): (ColumnType, &'a [u8], bool),
    buf: &mut ParseBuf<'a>,
) -> Result<Value, Undecoded> {
    let raw: BinlogValue<'a> =
        if ty == ColumnType::MYSQL_TYPE_TIME2 && matches!(meta.first(), Some(1 | 2)) {
            let bytes = buf.checked_eat(4).ok_or(Undecoded::Truncated)?;
            BinlogValue::Value(time2_hundredths([bytes[0], bytes[1], bytes[2], bytes[3]]))
        } else if ty == ColumnType::MYSQL_TYPE_NEWDECIMAL
            && let [precision, scale, ..] = meta[..]
        {
            let (precision, scale) = (usize::from(precision), usize::from(scale));
            let bytes = buf
                .checked_eat(decimal_bin_size(precision, scale))
                .ok_or(Undecoded::Truncated)?;
            let text = decimal_text(bytes, precision, scale).map_err(Undecoded::Data)?;
            BinlogValue::Value(MyValue::Bytes(text.into_bytes()))
        } else if let Some(prefix) = length_prefix(ty, meta) {
            let len = buf.checked_eat(prefix).ok_or(Undecoded::Truncated)?;
            let n = len
                .iter()
                .rev()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            let bytes = buf.checked_eat(n).ok_or(Undecoded::Truncated)?;
            if let Some(text) = text_value(column, bytes) {
                return text.map_err(Undecoded::Data);
            }
            BinlogValue::Value(MyValue::Bytes(bytes.to_vec()))
        } else {
            buf.parse((ty, meta, unsigned, false))
                .map_err(|e| Undecoded::Data(format!("the binlog value does not decode: {e}")))?
        };
    from_binlog(column, raw).map_err(Undecoded::Data)
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
        let meta = tme.get_column_metadata(i).unwrap_or(&[]).to_vec();
        wire.push((ty, meta, c.unsigned));
    }
    Ok(TableShape {
        table: table.to_owned(),
        columns,
        schema,
        wire,
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
pub(crate) fn commit_ts_text(micros: u64) -> String {
    let secs = i64::try_from(micros / 1_000_000).unwrap_or(i64::MAX);
    let frac = (micros % 1_000_000) as u32;
    let Some(at) = chrono::DateTime::from_timestamp(secs, frac * 1_000) else {
        return "infinity".to_owned();
    };
    let mut out = at.format("%Y-%m-%dT%H:%M:%S").to_string();
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
        ChangeDecoder::new(&tables, Collations::builtin())
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

    #[test]
    fn commit_times_are_utc() {
        assert_eq!(commit_ts_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            commit_ts_text(1_764_568_800_250_000),
            "2025-12-01T06:00:00.25Z"
        );
    }
}
