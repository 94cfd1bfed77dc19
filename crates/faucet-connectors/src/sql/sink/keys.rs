//! The `key` checks every SQL sink makes against a table, and the key identity of a value's
//! JSON form, written once: the messages name `key[i]`, the table and its columns.

use faucet_core::FaucetError;

/// Checks that every `key` column is one of `columns` (an existing table's, in table order).
///
/// # Errors
/// [`FaucetError::Config`] at `key[i]` naming the column, `table` and its columns.
pub(crate) fn key_columns_exist<'c>(
    key: &[String],
    columns: impl Iterator<Item = &'c str> + Clone,
    table: &dyn std::fmt::Display,
) -> Result<(), FaucetError> {
    for (i, k) in key.iter().enumerate() {
        if !columns.clone().any(|c| c == k) {
            let all: Vec<&str> = columns.collect();
            return Err(FaucetError::config(
                format!("key[{i}]"),
                format!(
                    "`{k}` is not a column of {table} (columns: {})",
                    all.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Checks that every `key` column is a field of the records a table is created from (it
/// becomes the primary key).
///
/// # Errors
/// [`FaucetError::Config`] at `key[i]`.
pub(crate) fn key_in_fields<'c>(
    key: &[String],
    fields: impl Iterator<Item = &'c str> + Clone,
) -> Result<(), FaucetError> {
    for (i, k) in key.iter().enumerate() {
        if !fields.clone().any(|c| c == k) {
            return Err(FaucetError::config(
                format!("key[{i}]"),
                format!("`{k}` is not a field of the records, so it cannot be the primary key"),
            ));
        }
    }
    Ok(())
}

/// Whether one of `unique_sets` (a table's primary key and unique indexes, as column sets)
/// is exactly the `key` columns, in any order: what an upsert's conflict target needs.
pub(crate) fn is_unique_key(unique_sets: &[Vec<String>], key: &[String]) -> bool {
    unique_sets
        .iter()
        .any(|set| set.len() == key.len() && key.iter().all(|k| set.contains(k)))
}

/// Key identities for [`faucet_core::change::collapse`]: each value's JSON form (its type
/// included: `1` and `"1"` are two keys), fields split by a tab.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
pub(crate) struct JsonKeys;

#[cfg(any(feature = "mysql", feature = "sqlite"))]
impl faucet_core::change::KeyIdentity for JsonKeys {
    fn identify(&mut self, key: &[&faucet_core::Value], out: &mut Vec<u8>) {
        for (i, v) in key.iter().enumerate() {
            if i > 0 {
                out.push(b'\t');
            }
            faucet_core::value::json::write_value(out, v);
        }
    }
}
