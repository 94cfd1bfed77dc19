//! What a read will do, worked out against the server before any row moves: the columns and
//! their [`MysqlColumn`] models, the ordering key (the replication key, or the primary key
//! of a full read of a table), whether that key is known unique, and the one `SELECT` that
//! streams the rows after a bookmark.
//!
//! Bookmarks: the one format of [`crate::sql::bookmark`]; key values are each key column's
//! exact MySQL literal text ([`key_text`]), written back into the statement as a typed literal
//! ([`Plan::literal`]) so they compare exactly.

use std::fmt::Write as _;
use std::sync::Arc;

use mysql_async::Value as MyValue;
use mysql_async::prelude::Queryable as _;

use faucet_core::{Bookmark, FaucetError, Field, Schema};

use super::config::{CONNECTOR, Target};
use crate::mysql::catalog::TableCatalog;
use crate::mysql::connection::MysqlConnection;
use crate::mysql::table::quote_ident;
use crate::mysql::value::{Collations, Kind, MysqlColumn};
use crate::sql::ReplicationMethod;
use crate::sql::bookmark;
pub(crate) use crate::sql::bookmark::Start;
use crate::sql::key::{self, Columns, KeyFacts};
pub(crate) use crate::sql::key::{KeyKind, OrderKey};

/// The worked-out read.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// `` `db`.`table` `` or `(<query>) AS faucet_q`.
    from_sql: String,
    /// A name for messages: `db.table`, or `query`.
    pub(crate) label: String,
    /// The output columns.
    pub(crate) columns: Vec<MysqlColumn>,
    /// The page schema (one field per column).
    pub(crate) schema: Arc<Schema>,
    /// The ordering key, when the read is ordered.
    pub(crate) order: Option<OrderKey>,
    /// How the source reads.
    pub(crate) method: ReplicationMethod,
    /// Things the user should know (a key not known unique, a nullable key column).
    pub(crate) warnings: Vec<String>,
}

impl Plan {
    /// Describes the read of `target` on `conn`.
    ///
    /// # Errors
    /// [`FaucetError::Read`] when the table or query cannot be described (missing, no
    /// permission, a syntax error); [`FaucetError::Config`] when a key column is not among
    /// the output columns or cannot be compared exactly, or the query has two columns of one
    /// name.
    pub(crate) async fn describe(
        conn: &mut mysql_async::Conn,
        connection: &MysqlConnection,
        target: &Target,
        method: ReplicationMethod,
        replication_key: &[String],
    ) -> Result<Self, FaucetError> {
        let (from_sql, label, catalog) = match target {
            Target::Table(t) => {
                let t = t.qualified_in(connection.database());
                let db = t.database.clone().unwrap_or_default();
                let catalog = TableCatalog::load(conn, connection, &db, &t.table).await?;
                if catalog.columns.is_empty() {
                    return Err(FaucetError::read(
                        CONNECTOR,
                        format!(
                            "table {t} does not exist on {} (or the user may not see it; \
                             check `table`)",
                            connection.describe()
                        ),
                        None,
                    ));
                }
                (t.quoted(), t.to_string(), Some(catalog))
            }
            Target::Query(q) => (format!("({q}) AS faucet_q"), "query".to_owned(), None),
        };
        let collations = Collations::load(conn)
            .await
            .map_err(|e| connection.error("reading the server's collations", e))?;
        let statement = conn
            .prep(format!("SELECT * FROM {from_sql}"))
            .await
            .map_err(|e| connection.error(&format!("describing {label}"), e))?;
        let mut columns = Vec::with_capacity(statement.columns().len());
        for c in statement.columns().iter() {
            let mut model = MysqlColumn::from_result_column(c, &collations).map_err(|m| {
                FaucetError::read(
                    CONNECTOR,
                    format!("{label}, column {}: {m}", c.name_str()),
                    None,
                )
            })?;
            if let Some(cat) = &catalog {
                if let Some((_, data_type, _)) =
                    cat.columns.iter().find(|(n, _, _)| *n == model.name)
                {
                    model = model.with_declared_type(data_type);
                }
                if cat.json.contains(&model.name) {
                    model = model.with_declared_type("json");
                }
            }
            columns.push(model);
        }
        let _ = conn.close(statement).await;
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
                .map(|c| Field::new(c.name.clone(), c.data_type()))
                .collect(),
        ));
        let unsupported = |i: usize| key_unsupported(&columns[i]);
        let cols = Columns {
            label: &label,
            names: columns.iter().map(|c| c.name.as_str()).collect(),
            unsupported: &unsupported,
        };
        let nullable = |n: &str| {
            catalog
                .as_ref()
                .is_some_and(|c| c.columns.iter().any(|(cn, _, null)| cn == n && *null))
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
        for w in &warnings {
            tracing::warn!(source = CONNECTOR, target = %label, "{w}");
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
            CONNECTOR,
            &self.label,
            self.method,
            self.order.as_ref(),
            from,
        )?;
        if let (Start::After(values), Some(order), Some(b)) = (&start, &self.order, from) {
            for ((name, value), &i) in order.names.iter().zip(values).zip(&order.indexes) {
                if self.literal(&self.columns[i], value).is_none() {
                    return Err(bookmark::mismatch(
                        CONNECTOR,
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

    /// The `SELECT` reading from `start`: `WHERE k1 >= v1 AND (k1, k2) > (v1, v2) ORDER BY
    /// k1, k2` (the first conjunct lets MariaDB use an index on the key, which it does not
    /// for a row comparison alone).
    pub(crate) fn select_sql(&self, start: &Start) -> String {
        let mut select = format!("SELECT * FROM {}", self.from_sql);
        let Some(order) = &self.order else {
            return select;
        };
        let cols: Vec<String> = order.names.iter().map(|n| quote_ident(n)).collect();
        let mut conditions = Vec::new();
        if order.kind == KeyKind::Replication {
            conditions.extend(cols.iter().map(|c| format!("{c} IS NOT NULL")));
        }
        if let Start::After(values) = start {
            // Validated by `start`: every value has a literal.
            let literals: Vec<String> = values
                .iter()
                .zip(&order.indexes)
                .map(|(v, &i)| {
                    self.literal(&self.columns[i], v)
                        .unwrap_or_else(|| "NULL".into())
                })
                .collect();
            conditions.push(format!("{} >= {}", cols[0], literals[0]));
            if cols.len() == 1 {
                conditions.push(format!("{} > {}", cols[0], literals[0]));
            } else {
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

    /// The SQL literal of key text `text` for `column`, `None` when the text is not a value
    /// of the column's type (a tampered or foreign bookmark): numbers unquoted (exact-value
    /// literals), temporal values quoted (compared as their type), text as `_utf8mb4 X'…'`
    /// (compared in the column's collation, no escaping to get wrong), binary as `X'…'`.
    pub(crate) fn literal(&self, column: &MysqlColumn, text: &str) -> Option<String> {
        let numeric = |t: &str, signed: bool| {
            let digits = if signed {
                t.strip_prefix('-').unwrap_or(t)
            } else {
                t
            };
            let mut parts = digits.splitn(2, '.');
            let int = parts.next().unwrap_or("");
            let frac = parts.next();
            !int.is_empty()
                && int.bytes().all(|b| b.is_ascii_digit())
                && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        };
        match column.kind {
            Kind::TinyInt
            | Kind::SmallInt
            | Kind::MediumInt
            | Kind::Int
            | Kind::BigInt
            | Kind::Year
            | Kind::Bit => (numeric(text, true) && !text.contains('.')).then(|| text.to_owned()),
            Kind::Decimal => numeric(text, true).then(|| text.to_owned()),
            Kind::Date | Kind::DateTime | Kind::Timestamp | Kind::Time => text
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b':' | b'.' | b' '))
                .then(|| format!("'{text}'")),
            Kind::Char | Kind::VarChar | Kind::Blob if column.is_binary() => {
                let ok =
                    text.len().is_multiple_of(2) && text.bytes().all(|b| b.is_ascii_hexdigit());
                ok.then(|| format!("X'{text}'"))
            }
            Kind::Char | Kind::VarChar | Kind::Blob | Kind::Uuid | Kind::Inet4 | Kind::Inet6 => {
                let mut out = String::from("_utf8mb4 X'");
                for b in text.bytes() {
                    let _ = write!(out, "{b:02X}");
                }
                out.push('\'');
                Some(out)
            }
            _ => None,
        }
    }
}

/// Why `column` cannot be an ordering key, if it cannot.
fn key_unsupported(column: &MysqlColumn) -> Option<&'static str> {
    match column.kind {
        Kind::Float | Kind::Double => Some(
            "is FLOAT/DOUBLE, which cannot be compared exactly against a bookmark; use an \
             integer, DECIMAL, temporal or string column",
        ),
        Kind::Enum | Kind::Set => {
            Some("is an ENUM/SET, ordered by member index but compared as text; use another column")
        }
        Kind::Json | Kind::Geometry | Kind::Null => {
            Some("is a JSON, spatial or NULL-typed column, which cannot order a read")
        }
        _ => None,
    }
}

/// The key text of a raw value (before [`crate::mysql::value::to_value`] consumes it): the
/// literal form [`Plan::literal`] writes back. `None` for NULL. Text is the UTF-8 the session
/// receives; binary bytes are hex; temporal values carry all six fraction digits.
pub(crate) fn key_text(column: &MysqlColumn, value: &MyValue, out: &mut String) -> bool {
    out.clear();
    match value {
        MyValue::NULL => return false,
        MyValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        MyValue::UInt(u) => {
            let _ = write!(out, "{u}");
        }
        MyValue::Float(f) => {
            let _ = write!(out, "{f}");
        }
        MyValue::Double(d) => {
            let _ = write!(out, "{d}");
        }
        MyValue::Date(y, mo, d, h, mi, s, us) => {
            let _ = write!(out, "{y:04}-{mo:02}-{d:02}");
            if column.kind != Kind::Date {
                let _ = write!(out, " {h:02}:{mi:02}:{s:02}.{us:06}");
            }
        }
        MyValue::Time(neg, days, h, m, s, us) => {
            let hours = u64::from(*days) * 24 + u64::from(*h);
            let sign = if *neg { "-" } else { "" };
            let _ = write!(out, "{sign}{hours:02}:{m:02}:{s:02}.{us:06}");
        }
        MyValue::Bytes(b) => match column.kind {
            Kind::Bit => {
                let n = b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
                let _ = write!(out, "{n}");
            }
            _ if column.is_binary() => {
                for byte in b {
                    let _ = write!(out, "{byte:02X}");
                }
            }
            _ => out.push_str(&String::from_utf8_lossy(b)),
        },
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mysql::value::{Charset, Origin};
    use serde_json::json;

    fn plan(method: ReplicationMethod, kind: KeyKind) -> Plan {
        let mut ts = MysqlColumn::new("updated_at", Kind::DateTime, Origin::ResultSet);
        ts.fraction = 3;
        let id = MysqlColumn::new("id", Kind::BigInt, Origin::ResultSet);
        let mut name = MysqlColumn::new("name", Kind::VarChar, Origin::ResultSet);
        name.charset = Charset::Utf8;
        let mut raw = MysqlColumn::new("raw", Kind::VarChar, Origin::ResultSet);
        raw.collation = 63;
        raw.charset = Charset::Binary;
        Plan {
            from_sql: "`shop`.`orders`".into(),
            label: "shop.orders".into(),
            columns: vec![ts, id, name, raw],
            schema: Arc::new(Schema::default()),
            order: Some(OrderKey {
                kind,
                names: vec!["updated_at".into(), "id".into()],
                indexes: vec![0, 1],
                unique: true,
            }),
            method,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn incremental_statement_compares_the_whole_tuple() {
        let p = plan(ReplicationMethod::Incremental, KeyKind::Replication);
        assert_eq!(
            p.select_sql(&Start::Beginning),
            "SELECT * FROM `shop`.`orders` WHERE `updated_at` IS NOT NULL AND `id` IS NOT NULL \
             ORDER BY `updated_at`, `id`"
        );
        let b = p
            .bookmark_after(&["2026-06-12 16:31:32.869000".into(), "2".into()])
            .expect("bookmark");
        let start = p.start(Some(&b)).expect("start");
        assert_eq!(
            p.select_sql(&start),
            "SELECT * FROM `shop`.`orders` WHERE `updated_at` IS NOT NULL AND `id` IS NOT NULL \
             AND `updated_at` >= '2026-06-12 16:31:32.869000' AND (`updated_at`, `id`) > \
             ('2026-06-12 16:31:32.869000', 2) ORDER BY `updated_at`, `id`"
        );
        for wrong in [
            json!({"replication_key": ["id"], "values": ["2"]}),
            json!({"full_table": "done"}),
            json!({"replication_key": ["updated_at", "id"], "values": ["x"]}),
            json!({"replication_key": ["updated_at", "id"], "values": ["2026-01-01", "1 OR 1"]}),
            json!({"replication_key": ["updated_at", "id"], "values": ["2026'--", "1"]}),
            json!(42),
        ] {
            assert!(
                matches!(p.start(Some(&wrong)), Err(FaucetError::Bookmark { .. })),
                "{wrong}"
            );
        }
        assert_eq!(p.bookmark_done(None), None);
        assert_eq!(
            p.literal(&p.columns[2], "it's \\ é").as_deref(),
            Some("_utf8mb4 X'69742773205C20C3A9'")
        );
        assert_eq!(p.literal(&p.columns[3], "00FF").as_deref(), Some("X'00FF'"));
        assert_eq!(p.literal(&p.columns[3], "0G"), None);
    }

    #[test]
    fn full_table_bookmarks() {
        let p = plan(ReplicationMethod::FullTable, KeyKind::PrimaryKey);
        let mid = p
            .bookmark_after(&["2026-01-01 00:00:00.000000".into(), "42".into()])
            .expect("b");
        assert_eq!(
            mid,
            json!({"full_table": "in_progress", "key": ["updated_at", "id"],
                   "values": ["2026-01-01 00:00:00.000000", "42"]})
        );
        assert!(matches!(
            p.start(Some(&mid)).expect("start"),
            Start::After(_)
        ));
        let done = p.bookmark_done(None).expect("done");
        assert_eq!(p.start(Some(&done)).expect("start"), Start::Beginning);
    }

    #[test]
    fn key_texts_round_trip_as_literals() {
        let p = plan(ReplicationMethod::Incremental, KeyKind::Replication);
        let mut out = String::new();
        assert!(key_text(
            &p.columns[0],
            &MyValue::Date(2024, 2, 29, 1, 2, 3, 4),
            &mut out
        ));
        assert_eq!(out, "2024-02-29 01:02:03.000004");
        assert!(key_text(
            &p.columns[3],
            &MyValue::Bytes(vec![0, 255]),
            &mut out
        ));
        assert_eq!(out, "00FF");
        assert!(!key_text(&p.columns[1], &MyValue::NULL, &mut out));
        let t = MysqlColumn::new("t", Kind::Time, Origin::ResultSet);
        assert!(key_text(
            &t,
            &MyValue::Time(true, 34, 22, 59, 59, 0),
            &mut out
        ));
        assert_eq!(out, "-838:59:59.000000");
        assert_eq!(p.literal(&t, &out).as_deref(), Some("'-838:59:59.000000'"));
    }
}
