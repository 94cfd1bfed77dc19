//! What validating a SQL connector's config keeps: the config as written and what was parsed
//! of it, one shape for every database (the database's config, connection and table name
//! types are the parameters). Made only by the configs' `validate`, taken by the
//! connectors' `from_validated`, so a config is parsed once.

use std::fmt;

use super::sink::route::Route;
#[cfg(feature = "sql-source")]
use super::table_pattern::TablePattern;

/// A change source's config that passed validation (`postgres-cdc`, `mysql-cdc`).
#[derive(Clone)]
#[cfg(feature = "sql-source")]
pub struct ValidatedCdcConfig<C, Conn, T> {
    pub(crate) config: C,
    pub(crate) connection: Conn,
    /// The listed tables.
    pub(crate) tables: Vec<T>,
    /// The pattern entries of `tables` (`shop.*`), resolved at start.
    pub(crate) patterns: Vec<TablePattern>,
}

#[cfg(feature = "sql-source")]
impl<C, Conn, T> ValidatedCdcConfig<C, Conn, T> {
    /// The configuration as written.
    pub fn config(&self) -> &C {
        &self.config
    }
}

#[cfg(feature = "sql-source")]
impl<C: fmt::Debug, Conn, T: fmt::Debug> fmt::Debug for ValidatedCdcConfig<C, Conn, T> {
    /// The config (its URL redacted) and the tables; the connection parameters, which hold
    /// the password, are left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidatedCdcConfig")
            .field("config", &self.config)
            .field("tables", &self.tables)
            .field("patterns", &self.patterns)
            .finish_non_exhaustive()
    }
}

/// A SQL sink's config that passed validation (`postgres`, `mysql`).
#[derive(Clone)]
pub struct ValidatedSinkConfig<C, Conn, T> {
    pub(crate) config: C,
    pub(crate) connection: Conn,
    /// The one target, qualified where the database qualifies names; for a routed sink,
    /// where its commit token and fence tables live ([`Route::home`], else the URL's
    /// database or schema) and how messages name it.
    pub(crate) table: T,
    /// The route, when `table` is a template or `tables:` is given.
    pub(crate) route: Option<Route>,
}

impl<C, Conn, T> ValidatedSinkConfig<C, Conn, T> {
    /// The route, when the sink writes each source table into its own target (`table`
    /// with a placeholder, or `tables:`).
    pub fn route(&self) -> Option<&Route> {
        self.route.as_ref()
    }

    /// The configuration as written.
    pub fn config(&self) -> &C {
        &self.config
    }
}

impl<C: fmt::Debug, Conn, T> fmt::Debug for ValidatedSinkConfig<C, Conn, T> {
    /// The config (its URL redacted); the connection options, which hold the password, are
    /// left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidatedSinkConfig")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
