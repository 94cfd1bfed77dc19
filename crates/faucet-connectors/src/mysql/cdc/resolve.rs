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
use crate::sql::table_pattern::TablePattern;

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
    let mut out = listed.to_vec();
    let mut empty = Vec::new();
    for pattern in patterns {
        let names: Vec<String> = conn
            .exec(
                "SELECT TABLE_NAME FROM information_schema.TABLES \
                 WHERE BINARY TABLE_SCHEMA = ? AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') \
                 ORDER BY BINARY TABLE_NAME",
                (pattern.container.clone(),),
            )
            .await
            .map_err(|e| {
                connection.error(
                    &format!("listing the tables of database `{}`", pattern.container),
                    e,
                )
            })?;
        let any = pattern.add_matches(names, &mut out, |table| TableName {
            database: Some(pattern.container.clone()),
            table,
        });
        if !any {
            empty.push(pattern);
        }
    }
    Ok((out, empty))
}
