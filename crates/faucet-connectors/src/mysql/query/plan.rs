//! MySQL's half of a read's plan ([`crate::sql::query::Plan`]): its columns and their
//! [`MysqlColumn`] models (declared types from the catalog), which columns can order a read,
//! and the key text of a value and its literal.
//!
//! Bookmarks: key values are each key column's exact MySQL literal text ([`key_text`]),
//! written back into the statement as a typed literal ([`QueryColumn::literal`]) so they
//! compare exactly.

use std::fmt::Write as _;

use mysql_async::Value as MyValue;
use mysql_async::prelude::Queryable as _;

use faucet_core::{DataType, FaucetError};

use super::{CONNECTOR, Mysql, Target};
use crate::mysql::catalog::TableCatalog;
use crate::mysql::connection::MysqlConnection;
use crate::mysql::value::{Collations, Kind, MysqlColumn};
pub(crate) use crate::sql::bookmark::Start;
use crate::sql::query::plan::query_from;
use crate::sql::query::{Described, KeyCatalog, QueryColumn};

/// The plan of a `mysql` read.
pub(crate) type Plan = crate::sql::query::Plan<Mysql>;

impl QueryColumn for MysqlColumn {
    fn name(&self) -> &str {
        &self.name
    }

    fn data_type(&self) -> DataType {
        MysqlColumn::data_type(self)
    }

    fn key_unsupported(&self) -> Option<&'static str> {
        key_unsupported(self)
    }

    /// The SQL literal of key text `text` for `column`, `None` when the text is not a value
    /// of the column's type (a tampered or foreign bookmark): numbers unquoted (exact-value
    /// literals), temporal values quoted (compared as their type), text as `_utf8mb4 X'…'`
    /// (compared in the column's collation, no escaping to get wrong), binary as `X'…'`.
    fn literal(&self, text: &str) -> Option<String> {
        let column = self;
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

/// Describes the read of `target` on `conn` ([`crate::sql::query::QueryDialect::describe`]):
/// a table's catalog first (a missing table is named as such), then the columns of the
/// prepared `SELECT`, with the declared types the result set does not carry.
///
/// # Errors
/// [`FaucetError::Read`] when the table or query cannot be described (missing, no
/// permission, a syntax error, a column type faucet cannot read).
pub(crate) async fn describe(
    conn: &mut mysql_async::Conn,
    connection: &MysqlConnection,
    target: &Target,
) -> Result<Described<MysqlColumn>, FaucetError> {
    let collations = load_collations(conn, connection).await?;
    describe_with(conn, connection, target, &collations).await
}

/// The server's collations ([`Collations::load`]), for [`describe_with`]: read once for
/// many descriptions.
///
/// # Errors
/// [`FaucetError::Read`] / [`FaucetError::Connect`] when they cannot be read.
pub(crate) async fn load_collations(
    conn: &mut mysql_async::Conn,
    connection: &MysqlConnection,
) -> Result<Collations, FaucetError> {
    Collations::load(conn)
        .await
        .map_err(|e| connection.error("reading the server's collations", e))
}

/// [`describe`] with the server's collations already read.
///
/// # Errors
/// As [`describe`].
pub(crate) async fn describe_with(
    conn: &mut mysql_async::Conn,
    connection: &MysqlConnection,
    target: &Target,
    collations: &Collations,
) -> Result<Described<MysqlColumn>, FaucetError> {
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
        Target::Query(q) => {
            let (from_sql, label) = query_from(q);
            (from_sql, label, None)
        }
    };
    let statement = conn
        .prep(format!("SELECT * FROM {from_sql}"))
        .await
        .map_err(|e| connection.error(&format!("describing {label}"), e))?;
    let mut columns = Vec::with_capacity(statement.columns().len());
    for c in statement.columns().iter() {
        let mut model = MysqlColumn::from_result_column(c, collations).map_err(|m| {
            FaucetError::read(
                CONNECTOR,
                format!("{label}, column {}: {m}", c.name_str()),
                None,
            )
        })?;
        if let Some(cat) = &catalog {
            if let Some((_, data_type, _)) = cat.columns.iter().find(|(n, _, _)| *n == model.name) {
                model = model.with_declared_type(data_type);
            }
            if cat.json.contains(&model.name) {
                model = model.with_declared_type("json");
            }
        }
        columns.push(model);
    }
    let _ = conn.close(statement).await;
    let keys = catalog.map(|c| KeyCatalog {
        nullable: c
            .columns
            .iter()
            .filter(|(_, _, null)| *null)
            .map(|(n, _, _)| n.clone())
            .collect(),
        primary_key: c.primary_key,
        unique_sets: c.unique_sets,
    });
    Ok(Described {
        from_sql,
        label,
        columns,
        keys,
    })
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
    use std::sync::Arc;

    use super::*;
    use crate::mysql::value::{Charset, Origin};
    use crate::sql::ReplicationMethod;
    use crate::sql::key::{KeyKind, OrderKey};
    use faucet_core::Schema;
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
            p.columns[2].literal("it's \\ é").as_deref(),
            Some("_utf8mb4 X'69742773205C20C3A9'")
        );
        assert_eq!(p.columns[3].literal("00FF").as_deref(), Some("X'00FF'"));
        assert_eq!(p.columns[3].literal("0G"), None);
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
        assert_eq!(t.literal(&out).as_deref(), Some("'-838:59:59.000000'"));
    }
}
