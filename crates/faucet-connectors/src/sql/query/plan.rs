//! What a read will do, worked out against the database before any row moves: the columns
//! and their decoders (the dialect's [`QueryColumn`]s), the ordering key (the replication
//! key, or the primary key of a full read of a table), whether that key is known unique,
//! and the one statement that streams the rows after a bookmark.
//!
//! Bookmarks: the one format of [`crate::sql::bookmark`]; key values are the exact text the
//! database printed, written back into the statement as a typed literal
//! ([`QueryColumn::literal`]) so they compare exactly.

use std::sync::Arc;

use faucet_core::{Bookmark, DataType, FaucetError, Field, Schema};

use super::QueryDialect;
use crate::sql::ReplicationMethod;
use crate::sql::bookmark::{self, Start};
use crate::sql::key::{self, Columns, KeyFacts, KeyKind, OrderKey};
use crate::sql::read::Target;

/// One output column of a read, as a dialect describes it.
pub trait QueryColumn: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The column name.
    fn name(&self) -> &str;

    /// The type of its values in a page.
    fn data_type(&self) -> DataType;

    /// Why the column cannot order a read (no exact comparison against a bookmark), or
    /// `None` when it can.
    fn key_unsupported(&self) -> Option<&'static str> {
        None
    }

    /// The SQL literal of key text `text` (as the reader printed it) for this column;
    /// `None` when the text is not a value of the column's type (a tampered or foreign
    /// bookmark).
    fn literal(&self, text: &str) -> Option<String>;
}

/// What the catalog says about a table's keys.
#[derive(Debug, Clone, Default)]
pub struct KeyCatalog {
    /// The primary key's columns, in key order.
    pub primary_key: Option<Vec<String>>,
    /// Column sets of the primary key and every plain unique index.
    pub unique_sets: Vec<Vec<String>>,
    /// Columns that may be NULL.
    pub nullable: Vec<String>,
}

/// A dialect's description of a read ([`QueryDialect::describe`]).
#[derive(Debug, Clone)]
pub struct Described<C> {
    /// The `FROM` text: a quoted table, or `(<query>) AS faucet_q`.
    pub from_sql: String,
    /// A name for messages: the table, or `query`.
    pub label: String,
    /// The output columns, in order.
    pub columns: Vec<C>,
    /// The table's keys (`None` for a query).
    pub keys: Option<KeyCatalog>,
}

/// The `FROM` text and label of a query: `(<query>) AS faucet_q`, `query`.
pub(crate) fn query_from(query: &str) -> (String, String) {
    (format!("({query}) AS faucet_q"), "query".to_owned())
}

/// What [`key_of`] works out from the described columns.
struct Keyed {
    /// The page schema (one field per column).
    schema: Arc<Schema>,
    /// The ordering key, when the read is ordered.
    order: Option<OrderKey>,
    /// Things the user should know.
    warnings: Vec<String>,
}

/// The page schema, ordering key and warnings of a read of `columns` (refusing two columns
/// of one name).
fn key_of<C: QueryColumn>(
    label: &str,
    columns: &[C],
    keys: Option<&KeyCatalog>,
    method: ReplicationMethod,
    replication_key: &[String],
) -> Result<Keyed, FaucetError> {
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].iter().any(|p| p.name() == c.name()) {
            return Err(FaucetError::config(
                "query",
                format!(
                    "returns two columns named `{}`; give them distinct aliases",
                    c.name()
                ),
            ));
        }
    }
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(c.name().to_owned(), c.data_type()))
            .collect(),
    ));
    let unsupported = |i: usize| columns[i].key_unsupported();
    let cols = Columns {
        label,
        names: columns.iter().map(QueryColumn::name).collect(),
        unsupported: &unsupported,
    };
    let nullable = |n: &str| keys.is_some_and(|c| c.nullable.iter().any(|x| x == n));
    let facts = keys.map(|c| KeyFacts {
        primary_key: c.primary_key.as_deref(),
        unique_sets: &c.unique_sets,
        nullable: &nullable,
    });
    let mut warnings = Vec::new();
    let order = key::choose(
        method,
        replication_key,
        &cols,
        facts.as_ref(),
        &mut warnings,
    )?;
    Ok(Keyed {
        schema,
        order,
        warnings,
    })
}

/// The worked-out read.
pub struct Plan<D: QueryDialect> {
    /// A quoted table, or `(<query>) AS faucet_q`.
    pub(crate) from_sql: String,
    /// A name for messages: the table, or `query`.
    pub(crate) label: String,
    /// The output columns.
    pub(crate) columns: Vec<D::Column>,
    /// The page schema (one field per column).
    pub(crate) schema: Arc<Schema>,
    /// The ordering key, when the read is ordered.
    pub(crate) order: Option<OrderKey>,
    /// How the source reads.
    pub(crate) method: ReplicationMethod,
    /// Things the user should know (a key not known unique, a nullable key column).
    pub(crate) warnings: Vec<String>,
}

impl<D: QueryDialect> std::fmt::Debug for Plan<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("from_sql", &self.from_sql)
            .field("columns", &self.columns)
            .field("order", &self.order)
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

impl<D: QueryDialect> Plan<D> {
    /// Describes the read of `target` on `session`.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the table or query cannot be described (missing, no
    /// permission, a syntax error); [`FaucetError::Config`] when a key column is not among
    /// the output columns or cannot be compared exactly, or the query has two columns of one
    /// name.
    pub(crate) async fn describe(
        session: &mut D::Session,
        connection: &D::Connection,
        target: &Target<D::Table>,
        method: ReplicationMethod,
        replication_key: &[String],
    ) -> Result<Self, FaucetError> {
        let Described {
            from_sql,
            label,
            mut columns,
            keys,
        } = D::describe(session, connection, target).await?;
        let Keyed {
            schema,
            order,
            warnings,
        } = key_of(&label, &columns, keys.as_ref(), method, replication_key)?;
        if let Some(order) = &order {
            D::prepare_key(session, &mut columns, &order.indexes).await?;
        }
        for w in &warnings {
            tracing::warn!(source = D::CONNECTOR, target = %label, "{w}");
        }
        Ok(Self {
            from_sql,
            label,
            columns,
            schema,
            order,
            method,
            warnings,
        })
    }

    /// Where a read from `from` starts.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `from` is not a bookmark this configuration made
    /// (another method or key, a value that is not a literal of its column's type); the
    /// message says to delete the state entry to start over.
    pub(crate) fn start(&self, from: Option<&Bookmark>) -> Result<Start, FaucetError> {
        let start = bookmark::start(
            D::CONNECTOR,
            &self.label,
            self.method,
            self.order.as_ref(),
            from,
        )?;
        if let (Start::After(values), Some(order), Some(b)) = (&start, &self.order, from) {
            for ((name, value), &i) in order.names.iter().zip(values).zip(&order.indexes) {
                if self.columns[i].literal(value).is_none() {
                    return Err(bookmark::mismatch(
                        D::CONNECTOR,
                        b,
                        &format!("holds `{value}` for `{name}`, which is not a value of its type"),
                    ));
                }
            }
        }
        Ok(start)
    }

    /// The bookmark after a row whose key tuple is `values`, mid-read (`None` for a full read
    /// without a key: it cannot resume mid-table).
    pub(crate) fn bookmark_after(&self, values: &[String]) -> Option<Bookmark> {
        bookmark::after(self.order.as_ref(), values)
    }

    /// The bookmark of the last page of a finished read whose last key tuple is `last`.
    pub(crate) fn bookmark_done(&self, last: Option<&[String]>) -> Option<Bookmark> {
        bookmark::done(self.method, self.order.as_ref(), last)
    }

    /// `SELECT * FROM <target> LIMIT 0`: proves the target is readable.
    pub(crate) fn probe_sql(&self) -> String {
        format!("SELECT * FROM {} LIMIT 0", self.from_sql)
    }

    /// The `SELECT` reading from `start`: `WHERE k1 IS NOT NULL AND ... AND (k1, k2) > (v1,
    /// v2) ORDER BY k1, k2` (with [`QueryDialect::LEADING_KEY_BOUND`], `k1 >= v1` before the
    /// tuple comparison; a one-column key compares `k1 > v1`).
    pub(crate) fn select_sql(&self, start: &Start) -> String {
        let mut select = format!("SELECT * FROM {}", self.from_sql);
        let Some(order) = &self.order else {
            return select;
        };
        let cols: Vec<String> = order.names.iter().map(|n| D::quote_ident(n)).collect();
        let mut conditions = Vec::new();
        if order.kind == KeyKind::Replication {
            conditions.extend(cols.iter().map(|c| format!("{c} IS NOT NULL")));
        }
        if let Start::After(values) = start {
            // Validated by `start`: every value has a literal.
            let literals: Vec<String> = values
                .iter()
                .zip(&order.indexes)
                .map(|(v, &i)| self.columns[i].literal(v).unwrap_or_else(|| "NULL".into()))
                .collect();
            if cols.len() == 1 {
                conditions.push(format!("{} > {}", cols[0], literals[0]));
            } else {
                if D::LEADING_KEY_BOUND {
                    conditions.push(format!("{} >= {}", cols[0], literals[0]));
                }
                conditions.push(format!("({}) > ({})", cols.join(", "), literals.join(", ")));
            }
        }
        if !conditions.is_empty() {
            select.push_str(" WHERE ");
            select.push_str(&conditions.join(" AND "));
        }
        select.push_str(" ORDER BY ");
        select.push_str(&cols.join(", "));
        select
    }

    /// The statement that streams the read from `start` ([`QueryDialect::wrap_select`] of
    /// [`Plan::select_sql`]).
    pub(crate) fn read_sql(&self, start: &Start) -> String {
        D::wrap_select(self.select_sql(start))
    }
}
