//! What a read will do, worked out against the database before any row moves: the columns
//! and their decoders, the ordering key (the replication key, or the primary key of a full
//! read of a table), whether that key is known unique, and the one `COPY (SELECT ...) TO
//! STDOUT` statement that streams the rows after a bookmark.
//!
//! Bookmarks (opaque to everything but this module):
//! * incremental: `{"replication_key": ["updated_at","id"], "values": ["2026-06-12
//!   16:31:32.869","2"]}` — the key tuple of the last row delivered, as the exact text
//!   PostgreSQL printed, bound back as literals cast to each column's type, so they compare
//!   exactly;
//! * full table, mid-read (a table with a primary key): `{"full_table":"in_progress","key":
//!   ["id"],"values":["42"]}`; a finished read: `{"full_table":"done"}`, after which the next
//!   run reads the whole table again.

use std::sync::Arc;

use serde_json::json;
use sqlx::Statement as _;
use sqlx::postgres::PgConnection;
use sqlx::{Column as _, Executor as _};

use faucet_core::util::quote_ident;
use faucet_core::{Bookmark, FaucetError, Field, Schema};

use super::config::{ReplicationMethod, Target};
use crate::postgres::config::CONNECTOR;
use crate::postgres::type_catalog::DecodeOids;
use crate::postgres::types::{self, oid};

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

/// Which key orders the read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// The configured replication key of an incremental read.
    Replication,
    /// The primary key of a table read in full.
    PrimaryKey,
}

/// The key that orders a read.
#[derive(Debug, Clone)]
pub(crate) struct OrderKey {
    /// What the key is.
    pub(crate) kind: KeyKind,
    /// The key's column names, in order.
    pub(crate) names: Vec<String>,
    /// Their positions among the output columns.
    pub(crate) indexes: Vec<usize>,
    /// `format_type` of each key column (`timestamp without time zone`), for casts; `None`
    /// when unknown (the literal is then left for PostgreSQL to type).
    pub(crate) type_names: Vec<Option<String>>,
    /// Whether the key tuple is known unique (a primary key or unique index within it).
    pub(crate) unique: bool,
}

/// Where a read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// From the first row.
    Beginning,
    /// After the row whose key tuple is this text.
    After(Vec<String>),
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
        let mut plan = Self {
            from_sql,
            label,
            columns,
            schema,
            order: None,
            method,
            warnings: Vec::new(),
        };
        let catalog = match target {
            Target::Table(t) => Some(TableCatalog::load(conn, &t.quoted()).await?),
            Target::Query(_) => None,
        };
        match method {
            ReplicationMethod::Incremental => {
                plan.order = Some(plan.incremental_key(replication_key, catalog.as_ref())?);
            }
            ReplicationMethod::FullTable => {
                if let Some(pk) = catalog.as_ref().and_then(|c| c.primary_key.clone()) {
                    let indexes = pk
                        .iter()
                        .map(|n| plan.column_index(n))
                        .collect::<Option<Vec<_>>>();
                    if let Some(indexes) = indexes {
                        plan.order = Some(OrderKey {
                            kind: KeyKind::PrimaryKey,
                            names: pk,
                            indexes,
                            type_names: Vec::new(),
                            unique: true,
                        });
                    }
                }
            }
        }
        if let Some(order) = &mut plan.order {
            order.type_names = type_names(conn, &plan.columns, &order.indexes).await?;
        }
        for w in &plan.warnings {
            tracing::warn!(source = CONNECTOR, target = %plan.label, "{w}");
        }
        Ok(plan)
    }

    fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    fn incremental_key(
        &mut self,
        names: &[String],
        catalog: Option<&TableCatalog>,
    ) -> Result<OrderKey, FaucetError> {
        let mut indexes = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let Some(idx) = self.column_index(name) else {
                return Err(FaucetError::config(
                    format!("replication_key[{i}]"),
                    format!(
                        "`{name}` is not a column of {} (columns: {})",
                        self.label,
                        self.columns
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            };
            indexes.push(idx);
        }
        let unique = catalog.is_some_and(|c| {
            c.unique_sets
                .iter()
                .any(|set| set.iter().all(|col| names.contains(col)))
        });
        if !unique {
            let pk_hint = catalog
                .and_then(|c| c.primary_key.as_ref())
                .map(|pk| format!(" (here: [{}, {}])", names.join(", "), pk.join(", ")))
                .unwrap_or_default();
            self.warnings.push(format!(
                "replication_key [{}] of {} is not known to be unique (no primary key or \
                 unique index within it): rows sharing a key tuple are never skipped, but a \
                 run resumed after a page boundary inside such a group delivers the group's \
                 rows again; add the primary key as the last key column{pk_hint}",
                names.join(", "),
                self.label
            ));
        }
        if let Some(c) = catalog {
            let nullable: Vec<&str> = names
                .iter()
                .filter(|n| c.nullable.contains(n))
                .map(String::as_str)
                .collect();
            if !nullable.is_empty() {
                self.warnings.push(format!(
                    "replication_key column(s) {} of {} may be NULL: rows with a NULL key \
                     cannot be ordered against a bookmark and are not read incrementally; \
                     make the column(s) NOT NULL or use `full_table`",
                    nullable.join(", "),
                    self.label
                ));
            }
        }
        Ok(OrderKey {
            kind: KeyKind::Replication,
            names: names.to_vec(),
            indexes,
            type_names: Vec::new(),
            unique,
        })
    }

    /// Where a read from `from` starts.
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when `from` is not a bookmark this configuration made (another
    /// method or key); the message says to delete the state entry to start over.
    pub(crate) fn start(&self, from: Option<&Bookmark>) -> Result<Start, FaucetError> {
        let Some(bookmark) = from else {
            return Ok(Start::Beginning);
        };
        let mismatch = |what: &str| {
            FaucetError::bookmark(
                CONNECTOR,
                format!(
                    "the stored bookmark {bookmark} {what}; delete the pipeline's state entry \
                     to start over"
                ),
                None,
            )
        };
        match self.method {
            ReplicationMethod::Incremental => {
                let order = self.order.as_ref().ok_or_else(|| mismatch("has no key"))?;
                let (names, values) = key_and_values(bookmark, "replication_key")
                    .ok_or_else(|| mismatch("is not an incremental bookmark"))?;
                if names != order.names {
                    return Err(mismatch(&format!(
                        "was made for replication_key {names:?}, but the config says {:?}",
                        order.names
                    )));
                }
                Ok(Start::After(values))
            }
            ReplicationMethod::FullTable => {
                match bookmark.get("full_table").and_then(|v| v.as_str()) {
                    Some("done") => Ok(Start::Beginning),
                    Some("in_progress") => {
                        let (names, values) = key_and_values(bookmark, "key")
                            .ok_or_else(|| mismatch("is malformed"))?;
                        match &self.order {
                            Some(o) if o.names == names => Ok(Start::After(values)),
                            _ => Err(mismatch(&format!(
                                "resumes a full read ordered by {names:?}, which is not the \
                             primary key of {} any more",
                                self.label
                            ))),
                        }
                    }
                    _ => Err(mismatch("is not a full_table bookmark")),
                }
            }
        }
    }

    /// The bookmark after a row whose key tuple is `values`, mid-read (`None` for a full read
    /// without a key: it cannot resume mid-table).
    pub(crate) fn bookmark_after(&self, values: &[String]) -> Option<Bookmark> {
        let order = self.order.as_ref()?;
        Some(match order.kind {
            KeyKind::Replication => json!({"replication_key": order.names, "values": values}),
            KeyKind::PrimaryKey => {
                json!({"full_table": "in_progress", "key": order.names, "values": values})
            }
        })
    }

    /// The bookmark of the last page of a finished read whose last key tuple is `last`.
    pub(crate) fn bookmark_done(&self, last: Option<&[String]>) -> Option<Bookmark> {
        match self.method {
            ReplicationMethod::FullTable => Some(json!({"full_table": "done"})),
            ReplicationMethod::Incremental => last.and_then(|v| self.bookmark_after(v)),
        }
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
                    .zip(&order.type_names)
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

/// `{"<names_field>": [..], "values": [..]}` → (names, values), all strings.
fn key_and_values(bookmark: &Bookmark, names_field: &str) -> Option<(Vec<String>, Vec<String>)> {
    let strings = |v: &serde_json::Value| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let names = strings(bookmark.get(names_field)?)?;
    let values = strings(bookmark.get("values")?)?;
    (!names.is_empty() && names.len() == values.len()).then_some((names, values))
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

/// What the catalog says about a table's keys.
#[derive(Debug, Clone, Default)]
struct TableCatalog {
    primary_key: Option<Vec<String>>,
    /// Column sets of the primary key and every plain unique index (no predicate, no
    /// expression).
    unique_sets: Vec<Vec<String>>,
    /// Columns that may be NULL.
    nullable: Vec<String>,
}

impl TableCatalog {
    async fn load(conn: &mut PgConnection, quoted: &str) -> Result<Self, FaucetError> {
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

    fn plan(method: ReplicationMethod, order: Option<OrderKey>) -> Plan {
        Plan {
            from_sql: "\"public\".\"orders\"".into(),
            label: "public.orders".into(),
            columns: Vec::new(),
            schema: Arc::new(Schema::default()),
            order,
            method,
            warnings: Vec::new(),
        }
    }

    fn key(kind: KeyKind) -> OrderKey {
        OrderKey {
            kind,
            names: vec!["updated_at".into(), "id".into()],
            indexes: vec![0, 1],
            type_names: vec![
                Some("timestamp without time zone".into()),
                Some("integer".into()),
            ],
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
        k.type_names = vec![Some("integer".into())];
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
