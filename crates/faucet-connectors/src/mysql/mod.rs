//! MySQL and MariaDB: the connection rules ([`connection`]), object names ([`table`]) and the
//! value mapping ([`value`]) shared by every MySQL connector (the `mysql` query source,
//! `mysql-cdc`, the `mysql` sink). MariaDB 10.11 is tested; MySQL 8 paths follow its manual and are untested.

pub mod catalog;
pub mod cdc;
pub mod connection;
pub mod query;
pub mod sink;
pub mod snapshot;
pub mod table;
mod task_pages;
pub mod value;

pub use connection::{ErrorKind, MysqlConnection, SESSION_SETUP};
pub use query::{MysqlQueryConfig, MysqlQuerySource, ReplicationMethod, ValidatedQueryConfig};
pub use sink::{MysqlSink, MysqlSinkConfig, ValidatedMysqlSinkConfig, WriteMode};
pub use table::TableName;
