//! [`columns_of_table_map`]: every column of a binlog TABLE_MAP event as a [`MysqlColumn`]
//! (origin [`Origin::Binlog`]), from the event's types and metadata and its optional
//! metadata (`binlog_row_metadata=FULL`: column names, signedness of the numeric columns,
//! charsets of the character and of the ENUM/SET columns, ENUM/SET member strings).

use std::collections::VecDeque;

use mysql_async::binlog::events::{OptionalMetaExtractor, OptionalMetadataField, TableMapEvent};
use mysql_async::consts::ColumnType;

use super::charset::{BINARY_COLLATION, Collations};
use super::column::{MysqlColumn, Origin};

/// The columns of `event`, in table order.
///
/// # Errors
/// A message when the event has no column names (the server's `binlog_row_metadata` is not
/// `FULL`: names, charsets and ENUM/SET members would be unknown), an unknown column type,
/// or malformed optional metadata.
pub fn columns_of_table_map(
    event: &TableMapEvent<'_>,
    collations: &Collations,
) -> Result<Vec<MysqlColumn>, String> {
    let table = format!("{}.{}", event.database_name(), event.table_name());
    let bad = |what: &str, e: &dyn std::fmt::Display| format!("TABLE_MAP of {table}: {what}: {e}");
    let count = usize::try_from(event.columns_count()).map_err(|e| bad("column count", &e))?;
    let extractor = OptionalMetaExtractor::new(event.iter_optional_meta())
        .map_err(|e| bad("optional metadata", &e))?;
    let names = extractor
        .iter_column_name()
        .map(|n| n.map(|n| n.name().into_owned()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("column names", &e))?;
    if names.len() != count {
        return Err(format!(
            "TABLE_MAP of {table} carries {} column names for {count} columns: set \
             binlog_row_metadata=FULL on the server (names, charsets and ENUM/SET members are \
             only logged with it)",
            names.len()
        ));
    }
    // ENUM and SET members: one list per ENUM (resp. SET) column, in column order.
    let mut enums: VecDeque<Vec<Vec<u8>>> = VecDeque::new();
    let mut sets: VecDeque<Vec<Vec<u8>>> = VecDeque::new();
    for field in event.iter_optional_meta() {
        match field.map_err(|e| bad("optional metadata", &e))? {
            OptionalMetadataField::EnumStrValue(values) => {
                for column in values.iter_values() {
                    let column = column.map_err(|e| bad("ENUM members", &e))?;
                    enums.push_back(
                        column
                            .values()
                            .iter()
                            .map(|v| v.value_raw().to_vec())
                            .collect(),
                    );
                }
            }
            OptionalMetadataField::SetStrValue(values) => {
                for column in values.iter_values() {
                    let column = column.map_err(|e| bad("SET members", &e))?;
                    sets.push_back(
                        column
                            .values()
                            .iter()
                            .map(|v| v.value_raw().to_vec())
                            .collect(),
                    );
                }
            }
            _ => {}
        }
    }
    let mut signedness = extractor.iter_signedness();
    let mut charsets = extractor.iter_charset();
    let mut enum_charsets = extractor.iter_enum_and_set_charset();
    let mut out = Vec::with_capacity(count);
    for (i, name) in names.into_iter().enumerate() {
        let real = event
            .get_column_type(i)
            .map_err(|e| bad(&format!("column {name}"), &e))?
            .ok_or_else(|| format!("TABLE_MAP of {table}: no type for column {name}"))?;
        let raw = event
            .get_raw_column_type(i)
            .map_err(|e| bad(&format!("column {name}"), &e))?
            .unwrap_or(real);
        let meta = event.get_column_metadata(i).unwrap_or(&[]);
        let unsigned = real.is_numeric_type() && signedness.next().unwrap_or(false);
        let collation = if real.is_character_type() {
            charsets
                .next()
                .transpose()
                .map_err(|e| bad("charsets", &e))?
        } else if real == ColumnType::MYSQL_TYPE_GEOMETRY
            && collations.geometry_in_table_map_charsets()
        {
            // MariaDB lists it (binary) among the charset columns: take its entry so the
            // columns after it get theirs.
            charsets
                .next()
                .transpose()
                .map_err(|e| bad("charsets", &e))?;
            None
        } else if real.is_enum_or_set_type() {
            enum_charsets
                .next()
                .transpose()
                .map_err(|e| bad("ENUM/SET charsets", &e))?
        } else {
            None
        }
        .unwrap_or(BINARY_COLLATION);
        let members_raw = if real.is_enum_type() {
            enums.pop_front().unwrap_or_default()
        } else if real.is_set_type() {
            sets.pop_front().unwrap_or_default()
        } else {
            Vec::new()
        };
        let charset = collations.charset(collation);
        let members = members_raw
            .into_iter()
            .map(|m| charset.decode(m))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("TABLE_MAP of {table}, members of {name}: {e}"))?;
        let column = MysqlColumn::from_binlog(
            name.clone(),
            raw,
            meta,
            unsigned,
            collation,
            members,
            collations,
        )
        .map_err(|e| format!("TABLE_MAP of {table}, column {name}: {e}"))?;
        debug_assert_eq!(column.origin, Origin::Binlog);
        out.push(column);
    }
    Ok(out)
}
