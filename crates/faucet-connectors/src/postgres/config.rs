//! The name the query source and the sink give themselves in errors. The connection URL,
//! identifiers and error classification they share with every PostgreSQL user are in
//! [`super::connection`], [`super::ident`] and [`super::failure`].

/// The connector name of the query source and the sink, used in errors.
pub(crate) const CONNECTOR: &str = "postgres";
