//! What a read will do, worked out against the database before any row moves: the columns
//! and their decoders, the ordering key (the replication key, or the primary key of a full
//! read of a table), whether that key is known unique, and the one `COPY (SELECT ...) TO
//! STDOUT` statement that streams the rows after a bookmark.
//!
//! Bookmarks: the one format of [`crate::sql::bookmark`]; key values are the exact text
//! PostgreSQL printed, bound back as literals cast to each column's type, so they compare
//! exactly.

use std::sync::Arc;

use sqlx::Statement as _;
use sqlx::postgres::PgConnection;
use sqlx::{Column as _, Executor as _};

use crate::sql::ident::quote_ident;
use faucet_core::{Bookmark, FaucetError, Field, Schema};

use super::config::Target;
use crate::postgres::config::CONNECTOR;
use crate::postgres::type_catalog::DecodeOids;
use crate::postgres::types::{self, oid};
use crate::sql::ReplicationMethod;
use crate::sql::bookmark;
pub(crate) use crate::sql::bookmark::Start;
use crate::sql::key::{self, Columns, KeyFacts};
pub(crate) use crate::sql::key::{KeyKind, OrderKey};

/// One output column.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    /// The column name.
    pub(crate) name: String,
    /// The type OID `decode_text` reads it as ([`crate::postgres::type_catalog`]: domains
    /// by their base type, arrays by their element's, enums and composites as text).
    pub(crate) decode_oid: u32,
    /// The declared type OID, when the driver knows it (used to cast bookmark literals).
    pub(crate) type_oid: Option<u32>,
}

/// The worked-out read.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// `"schema"."table"` or `(<query>) AS faucet_q`.
    from_sql: String,
    /// A name for messages: the table, or `query`.
    pub(crate) label: String,
    /// The output columns.
    pub(crate) columns: Vec<Column>,
    /// The page schema (one field per column).
    pub(crate) schema: Arc<Schema>,
    /// The ordering key, when the read is ordered.
    pub(crate) order: Option<OrderKey>,
    /// `format_type` of each key column (`timestamp without time zone`), for casting
    /// bookmark literals; `None` when unknown (the literal is then left for PostgreSQL to
    /// type). One per column of `order`.
    pub(crate) key_types: Vec<Option<String>>,
    /// How the source reads.
    pub(crate) method: ReplicationMethod,
    /// Things the user should know (a key not known unique, a nullable key column).
    pub(crate) warnings: Vec<String>,
}

fn read_err(message: String, e: sqlx::Error) -> FaucetError {
    FaucetError::read(CONNECTOR, message, Some(Box::new(e)))
}

impl Plan {
    /// Describes the read of `target` on `conn`.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the table or query cannot be described (missing, no
    /// permission, a syntax error); [`FaucetError::Config`] when a key column is not among
    /// the output columns, or the query has two columns of one name.
    pub(crate) async fn describe(
        conn: &mut PgConnection,
        target: &Target,
        method: ReplicationMethod,
        replication_key: &[String],
    ) -> Result<Self, FaucetError> {
        let (from_sql, label) = match target {
            Target::Table(t) => (t.quoted(), t.to_string()),
            Target::Query(q) => (format!("({q}) AS faucet_q"), "query".to_owned()),
        };
        if let Target::Table(t) = target {
            let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
                .bind(t.quoted())
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| read_err(format!("cannot look up table {t}"), e))?;
            if exists.is_none() {
                return Err(FaucetError::read(
                    CONNECTOR,
                    format!(
                        "table {t} does not exist (names are case-sensitive and matched \
                         exactly; check `table`)"
                    ),
                    None,
                ));
            }
        }
        let probe = format!("SELECT * FROM {from_sql}");
        let statement = conn
            .prepare(&probe)
            .await
            .map_err(|e| read_err(format!("cannot describe {label}"), e))?;
        let described: Vec<(String, Option<u32>)> = statement
            .columns()
            .iter()
            .map(|c| (c.name().to_owned(), c.type_info().oid().map(|o| o.0)))
            .collect();
        // The one type resolver of every read path (domains by their base type, ...).
        let mut decode = DecodeOids::default();
        let oids: Vec<u32> = described.iter().filter_map(|(_, o)| *o).collect();
        decode
            .resolve(conn, &oids)
            .await
            .map_err(|e| read_err(format!("cannot look up the column types of {label}"), e))?;
        let columns: Vec<Column> = described
            .into_iter()
            .map(|(name, type_oid)| Column {
                name,
                decode_oid: type_oid.and_then(|o| decode.get(o)).unwrap_or(oid::TEXT),
                type_oid,
            })
            .collect();
        for (i, c) in columns.iter().enumerate() {
            if columns[..i].iter().any(|p| p.name == c.name) {
                return Err(FaucetError::config(
                    "query",
                    format!(
                        "returns two columns named `{}`; give them distinct aliases",
                        c.name
                    ),
                ));
            }
        }
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(c.name.clone(), types::data_type_of(c.decode_oid)))
                .collect(),
        ));
        let catalog = match target {
            Target::Table(t) => Some(TableCatalog::load(conn, &t.quoted()).await?),
            Target::Query(_) => None,
        };
        let never = |_: usize| None;
        let cols = Columns {
            label: &label,
            names: columns.iter().map(|c| c.name.as_str()).collect(),
            unsupported: &never,
        };
        let nullable = |n: &str| {
            catalog
                .as_ref()
                .is_some_and(|c| c.nullable.iter().any(|x| x == n))
        };
        let facts = catalog.as_ref().map(|c| KeyFacts {
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
        drop(cols);
        let key_types = match &order {
            Some(o) => type_names(conn, &columns, &o.indexes).await?,
            None => Vec::new(),
        };
        for w in &warnings {
            tracing::warn!(source = CONNECTOR, target = %label, "{w}");
        }
        Ok(Self {
            from_sql,
            label,
            columns,
            schema,
            order,
            key_types,
            method,
            warnings,
        })
    }

    /// Where a read from `from` starts.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `from` is not a bookmark this configuration made (another
    /// method or key); the message says to delete the state entry to start over.
    pub(crate) fn start(&self, from: Option<&Bookmark>) -> Result<Start, FaucetError> {
        bookmark::start(
            CONNECTOR,
            &self.label,
            self.method,
            self.order.as_ref(),
            from,
        )
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

    /// The `COPY (SELECT ...) TO STDOUT` statement reading from `start`.
    pub(crate) fn copy_sql(&self, start: &Start) -> String {
        let mut select = format!("SELECT * FROM {}", self.from_sql);
        if let Some(order) = &self.order {
            let cols: Vec<String> = order.names.iter().map(|n| quote_ident(n)).collect();
            let mut conditions = Vec::new();
            if order.kind == KeyKind::Replication {
                conditions.extend(cols.iter().map(|c| format!("{c} IS NOT NULL")));
            }
            if let Start::After(values) = start {
                let literals: Vec<String> = values
                    .iter()
                    .zip(&self.key_types)
                    .map(|(v, t)| match t {
                        Some(t) => format!("{}::{t}", quote_literal(v)),
                        None => quote_literal(v),
                    })
                    .collect();
                conditions.push(format!("({}) > ({})", cols.join(", "), literals.join(", ")));
            }
            if !conditions.is_empty() {
                select.push_str(" WHERE ");
                select.push_str(&conditions.join(" AND "));
            }
            select.push_str(" ORDER BY ");
            select.push_str(&cols.join(", "));
        }
        format!("COPY ({select}) TO STDOUT")
    }
}

/// A string literal under `standard_conforming_strings = on` (set by the session setup):
/// quotes doubled, backslashes literal.
pub(crate) fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `format_type` of the key columns, for casting bookmark literals.
async fn type_names(
    conn: &mut PgConnection,
    columns: &[Column],
    indexes: &[usize],
) -> Result<Vec<Option<String>>, FaucetError> {
    let mut out = Vec::with_capacity(indexes.len());
    for &i in indexes {
        let name = match columns[i].type_oid {
            Some(o) => Some(
                sqlx::query_scalar::<_, String>("SELECT format_type($1::bigint::oid, NULL)")
                    .bind(i64::from(o))
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(|e| read_err("cannot look up a key column's type".into(), e))?,
            ),
            None => None,
        };
        out.push(name);
    }
    Ok(out)
}

/// What the catalog says about a table's keys (also `postgres-cdc`'s, for the upsert-key
/// rule of `faucet_core::keys`).
#[derive(Debug, Clone, Default)]
pub(crate) struct TableCatalog {
    /// The primary key's columns, in key order.
    pub(crate) primary_key: Option<Vec<String>>,
    /// Column sets of the primary key and every plain unique index (no predicate, no
    /// expression).
    pub(crate) unique_sets: Vec<Vec<String>>,
    /// Columns that may be NULL.
    nullable: Vec<String>,
}

impl TableCatalog {
    /// Reads the keys of `quoted` (a quoted, qualified table name) from `pg_index`.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the catalog cannot be read (the table does not exist).
    pub(crate) async fn load(conn: &mut PgConnection, quoted: &str) -> Result<Self, FaucetError> {
        let err = |e| read_err("cannot read the table's keys from the catalog".into(), e);
        let rows: Vec<(bool, Vec<String>)> = sqlx::query_as(
            "SELECT i.indisprimary, \
                    array_agg(a.attname::text ORDER BY k.ord) \
             FROM pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indisvalid \
               AND i.indpred IS NULL AND NOT (0 = ANY (i.indkey::int2[])) \
             GROUP BY i.indexrelid, i.indisprimary \
             ORDER BY i.indisprimary DESC, i.indexrelid",
        )
        .bind(quoted)
        .fetch_all(&mut *conn)
        .await
        .map_err(err)?;
        let nullable: Vec<String> = sqlx::query_scalar(
            "SELECT attname::text FROM pg_attribute \
             WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped \
               AND NOT attnotnull",
        )
        .bind(quoted)
        .fetch_all(&mut *conn)
        .await
        .map_err(err)?;
        Ok(Self {
            primary_key: rows.iter().find(|(pk, _)| *pk).map(|(_, c)| c.clone()),
            unique_sets: rows.into_iter().map(|(_, c)| c).collect(),
            nullable,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(method: ReplicationMethod, order: Option<OrderKey>) -> Plan {
        let key_types = match order.as_ref().map(|o| o.names.len()) {
            Some(2) => vec![
                Some("timestamp without time zone".into()),
                Some("integer".into()),
            ],
            Some(_) => vec![Some("integer".into())],
            None => Vec::new(),
        };
        Plan {
            from_sql: "\"public\".\"orders\"".into(),
            label: "public.orders".into(),
            columns: Vec::new(),
            schema: Arc::new(Schema::default()),
            order,
            key_types,
            method,
            warnings: Vec::new(),
        }
    }

    fn key(kind: KeyKind) -> OrderKey {
        OrderKey {
            kind,
            names: vec!["updated_at".into(), "id".into()],
            indexes: vec![0, 1],
            unique: true,
        }
    }

    #[test]
    fn incremental_statement_compares_the_whole_tuple() {
        let p = plan(
            ReplicationMethod::Incremental,
            Some(key(KeyKind::Replication)),
        );
        assert_eq!(
            p.copy_sql(&Start::Beginning),
            "COPY (SELECT * FROM \"public\".\"orders\" WHERE \"updated_at\" IS NOT NULL AND \
             \"id\" IS NOT NULL ORDER BY \"updated_at\", \"id\") TO STDOUT"
        );
        let after = Start::After(vec!["2026-06-12 16:31:32.869".into(), "2".into()]);
        assert_eq!(
            p.copy_sql(&after),
            "COPY (SELECT * FROM \"public\".\"orders\" WHERE \"updated_at\" IS NOT NULL AND \
             \"id\" IS NOT NULL AND (\"updated_at\", \"id\") > ('2026-06-12 \
             16:31:32.869'::timestamp without time zone, '2'::integer) ORDER BY \
             \"updated_at\", \"id\") TO STDOUT"
        );
        let b = p
            .bookmark_after(&["2026-06-12 16:31:32.869".into(), "2".into()])
            .expect("bookmark");
        assert_eq!(
            b,
            json!({"replication_key": ["updated_at", "id"],
                   "values": ["2026-06-12 16:31:32.869", "2"]})
        );
        assert_eq!(p.start(Some(&b)).expect("start"), after);
        assert_eq!(p.start(None).expect("start"), Start::Beginning);
        // Another key, another method: typed errors, never a silent restart.
        for wrong in [
            json!({"replication_key": ["id"], "values": ["2"]}),
            json!({"full_table": "done"}),
            json!({"replication_key": ["updated_at", "id"], "values": ["x"]}),
            json!(42),
        ] {
            assert!(
                matches!(p.start(Some(&wrong)), Err(FaucetError::Bookmark { .. })),
                "{wrong}"
            );
        }
        assert_eq!(p.bookmark_done(None), None);
    }

    #[test]
    fn full_table_bookmarks() {
        let mut k = key(KeyKind::PrimaryKey);
        k.names = vec!["id".into()];
        let p = plan(ReplicationMethod::FullTable, Some(k));
        assert_eq!(
            p.copy_sql(&Start::After(vec!["4'2".into()])),
            "COPY (SELECT * FROM \"public\".\"orders\" WHERE (\"id\") > ('4''2'::integer) \
             ORDER BY \"id\") TO STDOUT"
        );
        let mid = p.bookmark_after(&["42".into()]).expect("bookmark");
        assert_eq!(
            mid,
            json!({"full_table": "in_progress", "key": ["id"], "values": ["42"]})
        );
        assert_eq!(
            p.start(Some(&mid)).expect("start"),
            Start::After(vec!["42".into()])
        );
        let done = p.bookmark_done(Some(&["42".into()])).expect("done");
        assert_eq!(done, json!({"full_table": "done"}));
        assert_eq!(p.start(Some(&done)).expect("start"), Start::Beginning);

        let unordered = plan(ReplicationMethod::FullTable, None);
        assert_eq!(
            unordered.copy_sql(&Start::Beginning),
            "COPY (SELECT * FROM \"public\".\"orders\") TO STDOUT"
        );
        assert_eq!(unordered.bookmark_after(&["1".into()]), None);
        assert!(unordered.start(Some(&mid)).is_err());
    }
}
