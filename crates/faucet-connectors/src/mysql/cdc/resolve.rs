//! What the `mysql-cdc` source's `tables` name now: the listed tables, and the tables each
//! pattern ([`crate::sql::table_pattern`]) matches in `information_schema.TABLES` at the
//! moment of asking.
//!
//! A pattern matches base tables (`TABLE_TYPE` `BASE TABLE`, and MariaDB's `SYSTEM
//! VERSIONED`), not views or sequences; the database is compared byte for byte (`BINARY`),
//! as the binlog's table maps name it, and the name prefix likewise.

use mysql_async::prelude::Queryable as _;

use faucet_core::FaucetError;

use crate::mysql::connection::MysqlConnection;
use crate::mysql::table::TableName;
use crate::sql::table_pattern::{TablePattern, tables_matched};

/// The tables of `listed` and those `patterns` match now, listed ones first, then each
/// pattern's in name order, without repeats; and the patterns that matched nothing.
///
/// # Errors
/// [`FaucetError::Read`] / [`FaucetError::Connect`] when the catalog cannot be read.
pub(crate) async fn tables_now<'p>(
    conn: &mut mysql_async::Conn,
    connection: &MysqlConnection,
    listed: &[TableName],
    patterns: &'p [TablePattern],
) -> Result<(Vec<TableName>, Vec<&'p TablePattern>), FaucetError> {
    let mut names = Vec::with_capacity(patterns.len());
    for pattern in patterns {
        let database = &pattern.container;
        names.push(
            conn.exec(
                "SELECT TABLE_NAME FROM information_schema.TABLES \
                 WHERE BINARY TABLE_SCHEMA = ? AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') \
                 ORDER BY BINARY TABLE_NAME",
                (database,),
            )
            .await
            .map_err(|e| {
                connection.error(&format!("listing the tables of database `{database}`"), e)
            })?,
        );
    }
    Ok(tables_matched(
        listed,
        patterns,
        names,
        |database, table| TableName {
            database: Some(database.to_owned()),
            table,
        },
    ))
}
