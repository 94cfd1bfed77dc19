//! The target table: what the catalog says about it (columns and their declared types, the
//! columns an `INSERT` must name, the unique column sets, the engine), and creating it from a
//! page (`create_table: true`) with the type mapping of README's "mysql sink" table.

use mysql_async::Conn;
use mysql_async::prelude::Queryable as _;

use faucet_core::change::ChangeLayout;
use faucet_core::{DataType, FaucetError, Page, Value};

use super::config::CONNECTOR;
use super::encode::{ColumnType, is_mysql_time};
use crate::mysql::catalog::{TableCatalog, column_precisions};
use crate::mysql::connection::{MysqlConnection, convert_rows};
use crate::mysql::table::{TableName, quote_ident};
use crate::sql::sink::schema::TargetColumn;

/// An existing target table.
#[derive(Debug, Clone)]
pub(crate) struct TargetTable {
    /// (column, its type and exactness rule), in table order.
    pub(crate) columns: Vec<(String, ColumnType)>,
    /// Columns an `INSERT` must give a value: NOT NULL, no default, not generated or
    /// AUTO_INCREMENT.
    pub(crate) required: Vec<String>,
    /// Column sets of the primary key and every unique index without a prefix part.
    pub(crate) unique_sets: Vec<Vec<String>>,
    /// The names of the triggers on the table: a value error the server raises may then be
    /// about a table a trigger writes (MySQL's messages name a column, not its table).
    pub(crate) triggers: Vec<String>,
    /// Each column's `COLUMN_TYPE` (lower case; `json` for MariaDB's JSON) and NOT NULL, in
    /// table order, for schema changes ([`super::alter`]).
    pub(crate) declared: Vec<TargetColumn>,
}

impl TargetTable {
    /// The column names, in table order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> + Clone {
        self.columns.iter().map(|(n, _)| n.as_str())
    }

    /// The declared type of `column` (lower case), if it is a column.
    pub(crate) fn type_of(&self, column: &str) -> Option<&str> {
        self.column(column).map(|t| t.data_type.as_str())
    }

    /// The type of `column` with its exactness rule ([`ColumnType`]), if it is a column.
    pub(crate) fn column(&self, column: &str) -> Option<&ColumnType> {
        self.columns
            .iter()
            .find(|(n, _)| n == column)
            .map(|(_, t)| t)
    }
}

/// A catalog error of this sink: a [`FaucetError::Write`] (the shared catalog reader says
/// `Read`, which is a source's word).
pub(crate) fn as_write(e: FaucetError) -> FaucetError {
    match e {
        FaucetError::Read {
            connector,
            message,
            source,
        } => FaucetError::Write {
            connector,
            message,
            source,
        },
        other => other,
    }
}

/// The engine of a table and whether it is transactional, from `information_schema`
/// (`ENGINES.TRANSACTIONS`); `None` when the table does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Engine {
    /// `InnoDB`, `MyISAM`, `Aria`, …; empty for a view.
    pub(crate) name: String,
    /// Whether a ROLLBACK undoes its rows.
    pub(crate) transactional: bool,
}

/// The engine of `name`, or `None` when there is no such table.
///
/// # Errors
/// [`FaucetError::Write`] when the catalog cannot be read.
pub(crate) async fn engine(
    conn: &mut Conn,
    connection: &MysqlConnection,
    name: &TableName,
) -> Result<Option<Engine>, FaucetError> {
    let db = name.database.as_deref().unwrap_or(connection.database());
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT COALESCE(t.ENGINE, ''), COALESCE(e.TRANSACTIONS, 'NO') \
             FROM information_schema.TABLES t \
             LEFT JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE \
             WHERE t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ?",
            (db, &name.table),
        )
        .await
        .map_err(|e| as_write(connection.error(&format!("looking up table {name}"), e)))?;
    let rows = convert_rows::<(String, String)>(rows)
        .map_err(|m| FaucetError::write(CONNECTOR, m, None))?;
    Ok(rows.into_iter().next().map(|(name, tx)| Engine {
        transactional: tx.eq_ignore_ascii_case("YES"),
        name,
    }))
}

/// The table `name`, or `None` when it does not exist.
///
/// # Errors
/// [`FaucetError::Write`] when the catalog cannot be read.
pub(crate) async fn load(
    conn: &mut Conn,
    connection: &MysqlConnection,
    name: &TableName,
) -> Result<Option<TargetTable>, FaucetError> {
    let db = name.database.as_deref().unwrap_or(connection.database());
    let catalog = TableCatalog::load(conn, connection, db, &name.table)
        .await
        .map_err(as_write)?;
    if catalog.columns.is_empty() {
        return Ok(None);
    }
    // One read of the column facts: what values each column holds exactly, and which an
    // INSERT must give.
    let precisions = column_precisions(conn, connection, db, &name.table)
        .await
        .map_err(as_write)?;
    let required = precisions
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name.clone())
        .collect();
    let json = catalog.json.clone();
    let triggers: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS \
             WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? ORDER BY 1",
            (db, &name.table),
        )
        .await
        .map_err(|e| {
            as_write(connection.error(&format!("looking up the triggers of {name}"), e))
        })?;
    let triggers = convert_rows::<(String,)>(triggers)
        .map_err(|m| FaucetError::write(CONNECTOR, m, None))?
        .into_iter()
        .map(|(t,)| t)
        .collect();
    let declared = catalog
        .columns
        .iter()
        .map(|(n, _, nullable)| TargetColumn {
            name: n.clone(),
            sql_type: if json.contains(n) {
                "json".to_owned()
            } else {
                precisions
                    .iter()
                    .find(|p| p.name == *n)
                    .map(|p| p.column_type.clone())
                    .unwrap_or_default()
            },
            not_null: !nullable,
        })
        .collect();
    Ok(Some(TargetTable {
        declared,
        columns: catalog
            .columns
            .into_iter()
            .map(|(n, t, _)| {
                let t = if json.contains(&n) {
                    "json".to_owned()
                } else {
                    t
                };
                let precision = precisions.iter().find(|p| p.name == n);
                let t = ColumnType::new(t, precision);
                (n, t)
            })
            .collect(),
        required,
        unique_sets: catalog.unique_sets,
        triggers,
    }))
}

/// One column of a table made for a page: its name, the faucet type, and the page's values
/// of it (for the types whose column depends on them: DECIMAL's scale, TIME or text).
struct Proposed<'a> {
    name: String,
    data_type: DataType,
    values: Vec<&'a Value>,
}

/// The columns of a table made for `page`: with `apply_changes` (upsert) a change page's
/// `after` columns (named by the first `after` row), otherwise the page's own fields.
fn proposed(page: &Page, apply_changes: bool) -> Option<Vec<Proposed<'_>>> {
    if apply_changes && let Some(layout) = ChangeLayout::of(page.schema()) {
        let after = layout.after_index();
        let rows: Vec<&faucet_core::value::Row> = page
            .rows()
            .filter_map(|r| match &r.values()[after] {
                // A schema-change record's `after` is the table's shape, not a row.
                _ if layout.is_schema(r.values()) => None,
                Value::Row(row) => Some(row),
                _ => None,
            })
            .collect();
        let first = rows.first()?;
        return Some(
            first
                .schema
                .fields()
                .iter()
                .map(|f| {
                    let values = rows
                        .iter()
                        .filter_map(|r| r.schema.index_of(&f.name).map(|i| &r.values[i]))
                        .collect();
                    Proposed {
                        name: f.name.clone(),
                        data_type: f.data_type.clone(),
                        values,
                    }
                })
                .collect(),
        );
    }
    Some(
        page.schema()
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| Proposed {
                name: f.name.clone(),
                data_type: f.data_type.clone(),
                values: page.rows().map(|r| &r.values()[i]).collect(),
            })
            .collect(),
    )
}

/// The largest number of fraction digits among `values`' numerics (0 when none has any),
/// counting the exponent: `1e-7` has 7, `1.25e1` has 1, `12e3` none.
fn decimal_scale(values: &[&Value]) -> usize {
    values
        .iter()
        .filter_map(|v| match v {
            Value::Numeric(n) => {
                let (mantissa, exp) = match n.split_once(['e', 'E']) {
                    Some((m, e)) => (m, e.parse::<i64>().unwrap_or(0)),
                    None => (&**n, 0),
                };
                let fraction = mantissa.split_once('.').map_or("", |(_, f)| f);
                let digits = i64::try_from(fraction.len()).unwrap_or(i64::MAX);
                Some(usize::try_from(digits.saturating_sub(exp)).unwrap_or(0))
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The MySQL column type for a field of type `declared` with the page's `values` (README,
/// "mysql sink"); `key` columns get types an index can hold (`VARCHAR(255)`,
/// `VARBINARY(255)`).
pub(crate) fn column_type(declared: &DataType, values: &[&Value], key: bool) -> String {
    let data_type = if *declared == DataType::Unknown {
        values
            .iter()
            .map(|v| v.data_type())
            .find(|t| *t != DataType::Unknown)
            .unwrap_or(DataType::Text)
    } else {
        declared.clone()
    };
    match data_type {
        DataType::Bool => "BOOLEAN".into(),
        DataType::Int => "BIGINT".into(),
        DataType::Float => "DOUBLE".into(),
        DataType::Numeric => format!("DECIMAL(65,{})", decimal_scale(values).min(30)),
        DataType::Text if key => "VARCHAR(255)".into(),
        DataType::Bytes if key => "VARBINARY(255)".into(),
        DataType::Text | DataType::Unknown => "LONGTEXT".into(),
        DataType::Bytes => "LONGBLOB".into(),
        DataType::Json | DataType::Array(_) => "JSON".into(),
        DataType::Date => "DATE".into(),
        DataType::Timestamp | DataType::TimestampTz => "DATETIME(6)".into(),
        DataType::Time => "TIME(6)".into(),
        DataType::TimeTz => "VARCHAR(32)".into(),
        DataType::Interval => {
            let mysql_form = values.iter().all(|v| match v {
                Value::Interval(s) => is_mysql_time(s),
                _ => true,
            });
            if mysql_form {
                "TIME(6)".into()
            } else {
                "VARCHAR(64)".into()
            }
        }
        // A type added to faucet later: text holds any value's text form.
        _ => "LONGTEXT".into(),
    }
}

/// The `CREATE TABLE IF NOT EXISTS` statement for `page` (see [`column_type`]), or `None`
/// when the page has no row to take the columns from (only deletes or truncates).
///
/// # Errors
/// [`FaucetError::Config`] when a key column is not a field of the page;
/// [`FaucetError::Data`] for a field name MySQL cannot take.
pub(crate) fn create_statement(
    name: &TableName,
    page: &Page,
    key: &[String],
    apply_changes: bool,
    collation: &str,
) -> Result<Option<String>, FaucetError> {
    let Some(columns) = proposed(page, apply_changes) else {
        return Ok(None);
    };
    for (i, c) in columns.iter().enumerate() {
        check_field_name(name, &c.name)?;
        let folded = c.name.to_lowercase();
        if let Some(other) = columns[..i]
            .iter()
            .find(|o| o.name.to_lowercase() == folded)
        {
            return Err(FaucetError::data(
                CONNECTOR,
                format!("{name}, fields {:?} and {:?}", other.name, c.name),
                format!(
                    "the records have fields {:?} and {:?}, which are one column name in \
                     MySQL (column names ignore case); rename one in the source, nothing was \
                     created",
                    other.name, c.name
                ),
            ));
        }
    }
    crate::sql::sink::keys::key_in_fields(key, columns.iter().map(|c| c.name.as_str()))?;
    let types: Vec<String> = columns
        .iter()
        .map(|c| column_type(&c.data_type, &c.values, key.contains(&c.name)))
        .collect();
    check_key_size(name, key, &columns, &types)?;
    let mut defs: Vec<String> = columns
        .iter()
        .zip(&types)
        .map(|(c, t)| {
            let null = if key.contains(&c.name) {
                " NOT NULL"
            } else {
                ""
            };
            format!("{} {t}{null}", quote_ident(&c.name))
        })
        .collect();
    if !key.is_empty() {
        let cols: Vec<String> = key.iter().map(|k| quote_ident(k)).collect();
        defs.push(format!("PRIMARY KEY ({})", cols.join(", ")));
    }
    Ok(Some(format!(
        "CREATE TABLE IF NOT EXISTS {} ({}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 \
         COLLATE={collation}",
        name.quoted(),
        defs.join(", ")
    )))
}

/// InnoDB's limit on the bytes of an index (a primary key) with the DYNAMIC row format.
const MAX_KEY_BYTES: usize = 3072;

/// The bytes a column of MySQL type `column_type` (as [`column_type`] makes it) takes in an
/// index, or `None` when it cannot be in one (JSON, LONGTEXT, LONGBLOB). Text counts 4
/// bytes a character (utf8mb4).
fn key_bytes(column_type: &str) -> Option<usize> {
    let length = |prefix: &str| {
        column_type
            .strip_prefix(prefix)?
            .strip_suffix(')')?
            .parse::<usize>()
            .ok()
    };
    if let Some(n) = length("VARCHAR(") {
        return Some(4 * n + 2);
    }
    if let Some(n) = length("VARBINARY(") {
        return Some(n + 2);
    }
    match column_type {
        "JSON" | "LONGTEXT" | "LONGBLOB" => None,
        _ => Some(32),
    }
}

/// Checks that the primary key `key` of the table made for `columns` (of MySQL `types`) can
/// be an InnoDB index: no JSON column, at most [`MAX_KEY_BYTES`] bytes (three text columns).
///
/// # Errors
/// [`FaucetError::Config`] at `key`, naming the columns and the fix; nothing was created.
fn check_key_size(
    name: &TableName,
    key: &[String],
    columns: &[Proposed<'_>],
    types: &[String],
) -> Result<(), FaucetError> {
    let mut total = 0;
    let mut wide = Vec::new();
    for (c, t) in columns.iter().zip(types) {
        if !key.contains(&c.name) {
            continue;
        }
        let Some(bytes) = key_bytes(t) else {
            return Err(FaucetError::config(
                "key",
                format!(
                    "key column `{}` of {name} holds {t} values (JSON, arrays or nested rows), \
                     which MySQL cannot index; key by other fields, or create the table \
                     yourself with a generated column for the key; nothing was created",
                    c.name
                ),
            ));
        };
        if bytes > 32 {
            wide.push(format!("`{}` {t}", c.name));
        }
        total += bytes;
    }
    if total > MAX_KEY_BYTES {
        return Err(FaucetError::config(
            "key",
            format!(
                "the key of {name} would take {total} bytes ({}; text is 4 bytes a character), \
                 more than the {MAX_KEY_BYTES} an InnoDB index holds; key by fewer text \
                 fields, or create the table yourself with shorter VARCHAR key columns; \
                 nothing was created",
                wide.join(", ")
            ),
        ));
    }
    Ok(())
}

/// The collation `create_table` gives text: binary and NO PAD, so keys compare byte for byte
/// — `'a'`, `'a '` and `'A'` are three keys, as in the source. MariaDB (10.2+) calls it
/// `utf8mb4_nopad_bin`, MySQL (8.0.17+) `utf8mb4_0900_bin`; `utf8mb4_bin` is PAD SPACE on
/// both (trailing spaces ignored), used only where neither exists, with a warning.
///
/// # Errors
/// [`FaucetError::Write`] when the server's collations cannot be read.
pub(crate) async fn nopad_binary_collation(
    conn: &mut mysql_async::Conn,
    name: &TableName,
) -> Result<&'static str, FaucetError> {
    use mysql_async::prelude::Queryable as _;
    let found: Vec<String> = conn
        .query(
            "SELECT COLLATION_NAME FROM information_schema.COLLATIONS \
             WHERE COLLATION_NAME IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin')",
        )
        .await
        .map_err(|e| super::statement::classify(e, "reading the server's collations", name))?;
    for c in ["utf8mb4_nopad_bin", "utf8mb4_0900_bin"] {
        if found.iter().any(|f| f == c) {
            return Ok(c);
        }
    }
    tracing::warn!(
        sink = CONNECTOR,
        table = %name,
        "the server has no NO PAD binary utf8mb4 collation: creating the table with \
         utf8mb4_bin, where text keys differing only in trailing spaces are one row"
    );
    Ok("utf8mb4_bin")
}

/// Checks that the records' field `field` can be a MySQL column name
/// ([`column_name_problem`]). Done before anything is created.
///
/// # Errors
/// [`FaucetError::Data`] at `<table>, field <field>`.
pub(crate) fn check_field_name(table: &TableName, field: &str) -> Result<(), FaucetError> {
    match column_name_problem(field) {
        None => Ok(()),
        Some(problem) => Err(FaucetError::data(
            CONNECTOR,
            format!("{table}, field {field:?}"),
            format!(
                "{problem}; rename it in the source (a header cell, a JSON key, a column \
                 alias), nothing was created"
            ),
        )),
    }
}

/// Why `name` cannot be a MySQL / MariaDB column name, if it cannot: the rule of every MySQL
/// name ([`crate::mysql::table::name_problem`]) and not ending in a space. The one rule for a
/// column `create_table` makes and a schema change adds or renames.
pub(crate) fn column_name_problem(name: &str) -> Option<String> {
    let problem = crate::mysql::table::name_problem(name).or_else(|| {
        name.ends_with(' ')
            .then(|| format!("`{name}` ends in a space, which no MySQL name can"))
    });
    problem.map(|p| format!("field {p}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_follow_the_values() {
        let n = |s: &str| Value::Numeric(s.into());
        let (a, b) = (n("12345.6789000000"), n("1"));
        assert_eq!(
            column_type(&DataType::Numeric, &[&a, &b], false),
            "DECIMAL(65,10)"
        );
        let u = n("18446744073709551615");
        assert_eq!(
            column_type(&DataType::Numeric, &[&u], false),
            "DECIMAL(65,0)"
        );
        let (t, iso) = (
            Value::Interval("-838:59:59.000000".into()),
            Value::Interval("P1DT2H".into()),
        );
        assert_eq!(column_type(&DataType::Interval, &[&t], false), "TIME(6)");
        assert_eq!(
            column_type(&DataType::Interval, &[&t, &iso], false),
            "VARCHAR(64)"
        );
        assert_eq!(column_type(&DataType::Text, &[], true), "VARCHAR(255)");
        assert_eq!(
            column_type(&DataType::Unknown, &[&Value::Null], false),
            "LONGTEXT"
        );
        assert_eq!(
            column_type(&DataType::Unknown, &[&Value::Null, &Value::Int(1)], false),
            "BIGINT"
        );
    }
}
