//! PostgreSQL's half of a read's plan ([`crate::sql::query::Plan`]): its columns and their
//! decoders, the key columns' type names, and what `pg_index` says of a table's keys.
//!
//! Bookmarks: key values are the exact text PostgreSQL printed, bound back as literals cast
//! to each column's type ([`PgColumn::literal`]), so they compare exactly.

use sqlx::Statement as _;
use sqlx::postgres::PgConnection;
use sqlx::{Column as _, Executor as _};

use faucet_core::{DataType, FaucetError};

use super::Postgres;
use crate::postgres::config::CONNECTOR;
use crate::postgres::ident::{TableName, quote_literal};
use crate::postgres::type_catalog::DecodeOids;
use crate::postgres::types::{self, oid};
pub(crate) use crate::sql::bookmark::Start;
use crate::sql::query::plan::query_from;
use crate::sql::query::{Described, KeyCatalog, QueryColumn};
use crate::sql::read::Target;

/// The plan of a `postgres` read.
pub(crate) type Plan = crate::sql::query::Plan<Postgres>;

/// One output column of a `postgres` read.
#[derive(Debug, Clone)]
pub struct PgColumn {
    /// The column name.
    pub(crate) name: String,
    /// The type OID `decode_text` reads it as ([`crate::postgres::type_catalog`]: domains
    /// by their base type, arrays by their element's, enums and composites as text).
    pub(crate) decode_oid: u32,
    /// The declared type OID, when the driver knows it.
    pub(crate) type_oid: Option<u32>,
    /// `format_type` of a key column (`timestamp without time zone`), for casting bookmark
    /// literals; `None` for other columns, or when unknown (the literal is then left for
    /// PostgreSQL to type).
    pub(crate) key_type: Option<String>,
}

impl QueryColumn for PgColumn {
    fn name(&self) -> &str {
        &self.name
    }

    fn data_type(&self) -> DataType {
        types::data_type_of(self.decode_oid)
    }

    /// `'text'::type`: every text is a literal (PostgreSQL checks it against the type).
    fn literal(&self, text: &str) -> Option<String> {
        Some(match &self.key_type {
            Some(t) => format!("{}::{t}", quote_literal(text)),
            None => quote_literal(text),
        })
    }
}

fn read_err(message: String, e: sqlx::Error) -> FaucetError {
    FaucetError::read(CONNECTOR, message, Some(Box::new(e)))
}

/// Describes the read of `target` on `conn` ([`crate::sql::query::QueryDialect::describe`]).
///
/// # Errors
/// [`FaucetError::Read`] when the table or query cannot be described (missing, no
/// permission, a syntax error).
pub(crate) async fn describe(
    conn: &mut PgConnection,
    target: &Target<TableName>,
) -> Result<Described<PgColumn>, FaucetError> {
    let (from_sql, label) = match target {
        Target::Table(t) => (t.quoted(), t.to_string()),
        Target::Query(q) => query_from(q),
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
    let columns = described
        .into_iter()
        .map(|(name, type_oid)| PgColumn {
            name,
            decode_oid: type_oid.and_then(|o| decode.get(o)).unwrap_or(oid::TEXT),
            type_oid,
            key_type: None,
        })
        .collect();
    let keys = match target {
        Target::Table(t) => Some(table_keys(conn, &t.quoted()).await?),
        Target::Query(_) => None,
    };
    Ok(Described {
        from_sql,
        label,
        columns,
        keys,
    })
}

/// Fills in `format_type` of the key columns at `indexes`, for casting bookmark literals.
pub(crate) async fn type_names(
    conn: &mut PgConnection,
    columns: &mut [PgColumn],
    indexes: &[usize],
) -> Result<(), FaucetError> {
    for &i in indexes {
        if let Some(o) = columns[i].type_oid {
            columns[i].key_type = Some(
                sqlx::query_scalar::<_, String>("SELECT format_type($1::bigint::oid, NULL)")
                    .bind(i64::from(o))
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(|e| read_err("cannot look up a key column's type".into(), e))?,
            );
        }
    }
    Ok(())
}

/// What `pg_index` says about the keys of `quoted` (a quoted, qualified table name): the
/// primary key, every plain unique index (no predicate, no expression), and the nullable
/// columns (also `postgres-cdc`'s, for the upsert-key rule of `faucet_core::keys`).
///
/// # Errors
/// [`FaucetError::Read`] when the catalog cannot be read (the table does not exist).
pub(crate) async fn table_keys(
    conn: &mut PgConnection,
    quoted: &str,
) -> Result<KeyCatalog, FaucetError> {
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
    Ok(KeyCatalog {
        primary_key: rows.iter().find(|(pk, _)| *pk).map(|(_, c)| c.clone()),
        unique_sets: rows.into_iter().map(|(_, c)| c).collect(),
        nullable,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sql::ReplicationMethod;
    use crate::sql::key::{KeyKind, OrderKey};
    use faucet_core::Schema;
    use serde_json::json;

    fn column(name: &str, key_type: &str) -> PgColumn {
        PgColumn {
            name: name.into(),
            decode_oid: oid::TEXT,
            type_oid: None,
            key_type: Some(key_type.into()),
        }
    }

    fn plan(method: ReplicationMethod, order: Option<OrderKey>) -> Plan {
        let columns = match order.as_ref().map(|o| o.names.len()) {
            Some(2) => vec![
                column("updated_at", "timestamp without time zone"),
                column("id", "integer"),
            ],
            _ => vec![column("id", "integer")],
        };
        Plan {
            from_sql: "\"public\".\"orders\"".into(),
            label: "public.orders".into(),
            columns,
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
            p.read_sql(&Start::Beginning),
            "COPY (SELECT * FROM \"public\".\"orders\" WHERE \"updated_at\" IS NOT NULL AND \
             \"id\" IS NOT NULL ORDER BY \"updated_at\", \"id\") TO STDOUT"
        );
        let after = Start::After(vec!["2026-06-12 16:31:32.869".into(), "2".into()]);
        assert_eq!(
            p.read_sql(&after),
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
        k.indexes = vec![0];
        let p = plan(ReplicationMethod::FullTable, Some(k));
        assert_eq!(
            p.read_sql(&Start::After(vec!["4'2".into()])),
            "COPY (SELECT * FROM \"public\".\"orders\" WHERE \"id\" > '4''2'::integer \
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
            unordered.read_sql(&Start::Beginning),
            "COPY (SELECT * FROM \"public\".\"orders\") TO STDOUT"
        );
        assert_eq!(unordered.bookmark_after(&["1".into()]), None);
        assert!(unordered.start(Some(&mid)).is_err());
    }
}
