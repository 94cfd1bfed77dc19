//! What the SQL connectors (`postgres`, `mysql`, `sqlite`) share, written once (the query
//! sources' parts under the internal feature `sql-source`, which `sqlite` does not need): a sink's `write_mode`
//! and `key` rules (`write`); and for the query sources the rules of a read's
//! configuration (`read`: `table` or `query`, `replication_method`, `replication_key`), the
//! key that orders a read and its warnings (`key`), the bookmark format and where a read
//! starts from one (`bookmark`), how far along a full read of a table is (`extent`), the warnings gathered (`warnings`), and the page cutter that keeps key ties whole
//! (`keyed_pages`); identifier quoting and `container.table` names ([`ident`]); the table
//! patterns of the change sources' `tables` (`table_pattern`); the one SQL
//! sink engine over a dialect per database (`sink`), and its routing of source tables to
//! targets ([`Route`]). Each
//! system keeps only its own: connecting, describing columns, decoding values, its quote
//! character, and the statement text.

#[cfg(feature = "sql-source")]
pub mod bookmark;
#[cfg(feature = "sql-source")]
pub(crate) mod extent;
pub mod ident;
#[cfg(feature = "sql-source")]
pub(crate) mod key;
#[cfg(feature = "sql-source")]
pub(crate) mod keyed_pages;
#[cfg(feature = "sql-source")]
pub mod query;
#[cfg(feature = "sql-source")]
pub mod read;
pub(crate) mod sink;
#[cfg(feature = "sql-source")]
pub mod table_pattern;
pub mod validated;
#[cfg(feature = "sql-source")]
pub(crate) mod warnings;
pub(crate) mod write;

#[cfg(feature = "sql-source")]
pub use read::ReplicationMethod;
pub use sink::route::{Route, RouteTarget, TargetEntry, TargetSpec, UpsertKeys};
pub use sink::schema::{DroppedColumns, SchemaChanges, SchemaPolicy};
pub use write::WriteMode;
