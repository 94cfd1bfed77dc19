//! A listed table's shape from its table map, refined by the catalog where MariaDB logs
//! a type as its storage (UUID, INET4, INET6, JSON).

use std::sync::Arc;

use mysql_async::binlog::events::TableMapEvent;

use faucet_core::change::schema::{ColumnShape, Identified};
use faucet_core::{FaucetError, Field, Schema};

use super::{TableShape, Wire};
use crate::mysql::catalog::TableCatalog;
use crate::mysql::cdc::CONNECTOR;
use crate::mysql::cdc::position::BinlogPos;
use crate::mysql::cdc::shapes::type_spelling;
use crate::mysql::value::{Collations, Kind, MysqlColumn, columns_of_table_map};

/// The shape of a listed table from its table map ([`columns_of_table_map`]), its MariaDB
/// UUID/INET/JSON columns refined by the catalog ([`as_of_event`]).
pub(super) fn shape_of(
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
pub(super) fn as_of_event(
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
