//! What the `postgres-cdc` source's `tables` name now: the listed tables, and the tables each
//! pattern ([`crate::sql::table_pattern`]) matches in the catalog at the moment of asking.
//!
//! A pattern matches ordinary (`relkind` `r`) and partitioned (`p`) tables that are not
//! partitions themselves (`relispartition`): a partitioned table's changes are read under
//! its own name (`publish_via_partition_root`), never under its partitions'. Views,
//! materialized views, foreign tables and sequences are not matched.

use sqlx::PgConnection;

use faucet_core::FaucetError;

use super::CONNECTOR;
use super::config::TableName;
use crate::sql::table_pattern::{TablePattern, tables_matched};

/// The tables of `listed` and those `patterns` match now, listed ones first, then each
/// pattern's in name order, without repeats; and the patterns that matched nothing.
///
/// # Errors
/// [`FaucetError::Read`] when the catalog cannot be read.
pub(crate) async fn tables_now<'p>(
    conn: &mut PgConnection,
    listed: &[TableName],
    patterns: &'p [TablePattern],
) -> Result<(Vec<TableName>, Vec<&'p TablePattern>), FaucetError> {
    let mut names = Vec::with_capacity(patterns.len());
    for pattern in patterns {
        let schema = &pattern.container;
        names.push(
            sqlx::query_scalar(
                "SELECT c.relname::text FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
                 ORDER BY c.relname",
            )
            .bind(schema)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| {
                let what = format!("listing the tables of schema `{schema}` failed");
                FaucetError::read(CONNECTOR, what, Some(Box::new(e)))
            })?,
        );
    }
    Ok(tables_matched(listed, patterns, names, |schema, name| {
        TableName {
            schema: Some(schema.to_owned()),
            name,
        }
    }))
}
