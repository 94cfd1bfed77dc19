//! Schema changes of `mysql-cdc` (docs/change-records.md, "Schema changes").
//!
//! The server writes a TABLE_MAP event before the rows events of every transaction; with
//! `binlog_row_metadata=FULL` it carries the table's column names and types as of that point
//! in the binlog. The stream keeps, per table, the shape it last **delivered**; the first
//! row change whose table map's shape differs gets a schema-change record (`op: "s"`) right
//! before it, in its transaction ([`faucet_core::change::schema::announce`], the comparison
//! `postgres-cdc` makes with Relation messages).
//!
//! **Renames** are told from a drop and an add by the `ALTER TABLE … RENAME COLUMN a TO b`
//! or `CHANGE [COLUMN] a b …` statement in the Query event before the new table map
//! ([`super::statement::column_renames`]): its renames are kept per table ([`Delivered`])
//! until the table's next shape is compared, and pair the old and new columns by giving
//! them the same id. Without such a statement (an `ALTER` this stream did not read: a
//! first run, or `tables` changed) the columns are paired by name and place, as
//! [`faucet_core::change::schema::diff`] does without ids: the **last** column renamed is
//! then a drop and an add.
//!
//! **Across restarts** the delivered shapes and the pending renames travel in the bookmark
//! (`"shapes"`, `"column_renames"`). Inside a transaction the bookmark carries them as of
//! the transaction's start, so a resume replays the transaction from its first event with
//! the same shapes and makes the same records (the schema-change records included), of
//! which `in_txn.skip` were delivered: nothing repeated, nothing missed.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

use faucet_core::change::schema::{
    ColumnShape, Identified, Shapes, add_shapes_to, shapes_from_bookmark,
};
use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use crate::mysql::catalog::spelled_types;
use crate::mysql::connection::MysqlConnection;
use crate::mysql::table::TableName;
use crate::mysql::value::{Kind, MysqlColumn};

/// The bookmark member holding the column renames not yet compared.
pub(crate) const COLUMN_RENAMES: &str = "column_renames";

/// What the stream delivered: each table's last shape, and the column renames (`from`,
/// `to`, in statement order) read since, by qualified table name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Delivered {
    /// The shapes (ids 0: MySQL has no column id; renames come from `renames`).
    pub(crate) shapes: Shapes,
    /// Column renames read from `ALTER TABLE` statements, not compared yet.
    pub(crate) renames: BTreeMap<String, Vec<(String, String)>>,
}

impl Delivered {
    /// Adds `shapes` and `column_renames` to a bookmark object.
    pub(crate) fn add_to(&self, bookmark: &mut Bookmark) {
        add_shapes_to(bookmark, &self.shapes);
        if self.renames.is_empty() {
            return;
        }
        let Some(obj) = bookmark.as_object_mut() else {
            return;
        };
        let mut out = Map::new();
        for (table, pairs) in &self.renames {
            out.insert(
                table.clone(),
                Json::Array(
                    pairs
                        .iter()
                        .map(|(f, t)| Json::Array(vec![f.as_str().into(), t.as_str().into()]))
                        .collect(),
                ),
            );
        }
        obj.insert(COLUMN_RENAMES.into(), Json::Object(out));
    }

    /// What a bookmark says was delivered (nothing when it has neither member).
    ///
    /// # Errors
    /// [`FaucetError::Bookmark`] when a member is not of the form [`Delivered::add_to`]
    /// writes.
    pub(crate) fn from_bookmark(bookmark: &Bookmark) -> Result<Self, FaucetError> {
        let shapes = shapes_from_bookmark(CONNECTOR, bookmark)?;
        let mut renames = BTreeMap::new();
        if let Some(r) = bookmark.as_object().and_then(|o| o.get(COLUMN_RENAMES)) {
            let invalid = || {
                FaucetError::bookmark(
                    CONNECTOR,
                    format!(
                        "the bookmark's `{COLUMN_RENAMES}` is not of the form \
                         {{\"db.table\": [[from, to], …]}}"
                    ),
                    None,
                )
            };
            for (table, pairs) in r.as_object().ok_or_else(invalid)? {
                let mut out = Vec::new();
                for p in pairs.as_array().ok_or_else(invalid)? {
                    match p.as_array().map(Vec::as_slice) {
                        Some([Json::String(f), Json::String(t)]) => {
                            out.push((f.clone(), t.clone()))
                        }
                        _ => return Err(invalid()),
                    }
                }
                renames.insert(table.clone(), out);
            }
        }
        Ok(Self { shapes, renames })
    }
}

/// `old` and `new` with ids that pair the columns `renames` (in order) renamed: the old
/// columns numbered from 1, a new column the number of the old one it is (by name after
/// the renames), or a number no old column has. Both unchanged (ids 0: paired by name and
/// place) when there are no renames.
pub(crate) fn identify(
    old: &[Identified],
    new: &[Identified],
    renames: &[(String, String)],
) -> (Vec<Identified>, Vec<Identified>) {
    if renames.is_empty() {
        return (old.to_vec(), new.to_vec());
    }
    let mut current: Vec<&str> = old.iter().map(|c| c.shape.name.as_str()).collect();
    for (from, to) in renames {
        if let Some(name) = current.iter_mut().find(|n| **n == from.as_str()) {
            *name = to.as_str();
        }
    }
    let number = |i: usize| i64::try_from(i).unwrap_or(i64::MAX - 1) + 1;
    let old_ids = old
        .iter()
        .enumerate()
        .map(|(i, c)| Identified {
            shape: c.shape.clone(),
            id: number(i),
        })
        .collect();
    let fresh = number(old.len());
    let new_ids = new
        .iter()
        .enumerate()
        .map(|(j, c)| Identified {
            shape: c.shape.clone(),
            id: current
                .iter()
                .position(|n| *n == c.shape.name)
                .map_or_else(|| fresh + number(j), number),
        })
        .collect();
    (old_ids, new_ids)
}

/// Each of `tables`' columns in the catalog now, shaped as the binlog path shapes a table
/// map's (`changes::table_shape`), keyed `db.table` as the stream keys them, for `faucet
/// doctor`'s drift line: the type is `COLUMN_TYPE` in the table map's spelling
/// ([`crate::mysql::catalog::canonical_type`]; `json` for MariaDB's JSON, a LONGTEXT the
/// catalog declares JSON), faucet's type that of the result set's column with its declared
/// type (the query source's `describe`), the key the primary key's. A table the catalog
/// does not show (not created yet) is left out.
///
/// # Errors
/// [`FaucetError::Read`] / [`FaucetError::Connect`] when the catalog cannot be read, or a
/// column's type is one faucet cannot read.
pub(crate) async fn current(
    conn: &mut mysql_async::Conn,
    connection: &MysqlConnection,
    tables: &[TableName],
) -> Result<Shapes, FaucetError> {
    let mut out = Shapes::new();
    let collations = crate::mysql::query::plan::load_collations(conn, connection).await?;
    for t in tables {
        let db = t.database.as_deref().unwrap_or(connection.database());
        let spelled = spelled_types(conn, connection, db, &t.table).await?;
        if spelled.is_empty() {
            continue;
        }
        let target = crate::mysql::query::Target::Table(t.clone());
        let described =
            crate::mysql::query::plan::describe_with(conn, connection, &target, &collations)
                .await?;
        let key = described
            .keys
            .and_then(|k| k.primary_key)
            .unwrap_or_default();
        let columns = described
            .columns
            .iter()
            .map(|c| Identified {
                shape: ColumnShape {
                    name: c.name.clone(),
                    source_type: if c.kind == Kind::Json {
                        "json".to_owned()
                    } else {
                        spelled
                            .iter()
                            .find(|(n, _)| *n == c.name)
                            .map(|(_, s)| s.clone())
                            .unwrap_or_default()
                    },
                    data_type: c.data_type(),
                    key: key.contains(&c.name),
                },
                id: 0,
            })
            .collect();
        out.insert(format!("{db}.{}", t.table), columns);
    }
    Ok(out)
}

/// A column's type in MySQL's spelling (`int unsigned`, `varchar(20)`, `decimal(10,2)`,
/// `mediumtext`, `datetime(6)`), from its table map entry (`meta`: the type's metadata
/// bytes). Character lengths are the table map's byte lengths over the charset's widest
/// character ([`MysqlColumn::max_len`], the server's `CHARACTER_SETS.MAXLEN`).
pub(crate) fn type_spelling(column: &MysqlColumn, meta: &[u8]) -> String {
    let unsigned = if column.unsigned { " unsigned" } else { "" };
    let chars = |bytes: u32| bytes / u32::from(column.max_len.max(1));
    let fraction = |base: &str| {
        if column.fraction > 0 {
            format!("{base}({})", column.fraction)
        } else {
            base.to_owned()
        }
    };
    let members = || {
        column
            .members
            .iter()
            .map(|m| format!("'{}'", m.replace('\'', "''")))
            .collect::<Vec<_>>()
            .join(",")
    };
    match column.kind {
        Kind::TinyInt => format!("tinyint{unsigned}"),
        Kind::SmallInt => format!("smallint{unsigned}"),
        Kind::MediumInt => format!("mediumint{unsigned}"),
        Kind::Int => format!("int{unsigned}"),
        Kind::BigInt => format!("bigint{unsigned}"),
        Kind::Float => "float".into(),
        Kind::Double => "double".into(),
        Kind::Decimal => match meta {
            [p, s, ..] => format!("decimal({p},{s}){unsigned}"),
            _ => "decimal".into(),
        },
        Kind::Bit => format!("bit({})", column.bits),
        Kind::Date => "date".into(),
        Kind::DateTime => fraction("datetime"),
        Kind::Timestamp => fraction("timestamp"),
        Kind::Time => fraction("time"),
        Kind::Year => "year".into(),
        Kind::Char => {
            let base = if column.is_binary() { "binary" } else { "char" };
            format!("{base}({})", chars(column.length))
        }
        Kind::VarChar => {
            let bytes = match meta {
                [lo, hi, ..] => u32::from(u16::from_le_bytes([*lo, *hi])),
                _ => 0,
            };
            if column.is_binary() {
                format!("varbinary({bytes})")
            } else {
                format!("varchar({})", chars(bytes))
            }
        }
        Kind::Blob => {
            let size = match meta.first() {
                Some(1) => "tiny",
                Some(3) => "medium",
                Some(4) => "long",
                _ => "",
            };
            let base = if column.is_binary() { "blob" } else { "text" };
            format!("{size}{base}")
        }
        Kind::Enum => format!("enum({})", members()),
        Kind::Set => format!("set({})", members()),
        Kind::Json => "json".into(),
        Kind::Geometry => "geometry".into(),
        Kind::Uuid => "uuid".into(),
        Kind::Inet4 => "inet4".into(),
        Kind::Inet6 => "inet6".into(),
        Kind::Null => "null".into(),
    }
}

#[cfg(test)]
mod tests {
    use faucet_core::DataType;
    use faucet_core::change::schema::{ChangeKind, ColumnShape, diff};
    use serde_json::json;

    use super::*;

    fn col(name: &str, ty: &str) -> Identified {
        Identified {
            shape: ColumnShape {
                name: name.into(),
                source_type: ty.into(),
                data_type: DataType::Int,
                key: false,
            },
            id: 0,
        }
    }

    fn kinds(
        old: &[Identified],
        new: &[Identified],
        renames: &[(String, String)],
    ) -> Vec<(ChangeKind, String)> {
        let (o, n) = identify(old, new, renames);
        diff(&o, &n)
            .into_iter()
            .map(|c| (c.kind, c.column))
            .collect()
    }

    #[test]
    fn a_rename_statement_tells_the_last_column_renamed_from_a_drop_and_an_add() {
        let old = [col("id", "int"), col("v", "int")];
        let new = [col("id", "int"), col("vv", "int")];
        // Without the statement: a drop and an add.
        assert_eq!(
            kinds(&old, &new, &[]),
            [
                (ChangeKind::Drop, "v".into()),
                (ChangeKind::Add, "vv".into())
            ]
        );
        let r = [("v".to_owned(), "vv".to_owned())];
        assert_eq!(kinds(&old, &new, &r), [(ChangeKind::Rename, "vv".into())]);
        // Renamed away and a column of the old name added: a rename and an add.
        let new = [col("id", "int"), col("vv", "int"), col("v", "text")];
        assert_eq!(
            kinds(&old, &new, &r),
            [
                (ChangeKind::Rename, "vv".into()),
                (ChangeKind::Add, "v".into())
            ]
        );
        // Two renames in a row are one; with a type change.
        let r = [
            ("v".to_owned(), "w".to_owned()),
            ("w".to_owned(), "x".to_owned()),
        ];
        let new = [col("id", "int"), col("x", "bigint")];
        assert_eq!(
            kinds(&old, &new, &r),
            [
                (ChangeKind::Rename, "x".into()),
                (ChangeKind::Type, "x".into())
            ]
        );
    }

    #[test]
    fn the_delivered_state_round_trips_through_the_bookmark() {
        let mut d = Delivered::default();
        d.shapes.insert("test.t".into(), vec![col("id", "int")]);
        d.renames
            .insert("test.t".into(), vec![("v".into(), "vv".into())]);
        let mut b = json!({"binlog_file": "f.000001", "binlog_pos": 4});
        d.add_to(&mut b);
        assert_eq!(b["column_renames"], json!({"test.t": [["v", "vv"]]}));
        assert_eq!(Delivered::from_bookmark(&b).expect("reads"), d);
        assert!(Delivered::from_bookmark(&json!({"column_renames": {"t": [1]}})).is_err());
    }

    #[test]
    fn types_are_spelled_as_mysql_does() {
        let mut c = MysqlColumn::new("v", Kind::VarChar, crate::mysql::value::Origin::Binlog);
        assert_eq!(type_spelling(&c, &80u16.to_le_bytes()), "varchar(20)");
        // utf8mb3: 3 bytes a character, whatever the byte length is a multiple of (12
        // bytes are varchar(4), not the varchar(3) of utf8mb4's width).
        c.max_len = 3;
        assert_eq!(type_spelling(&c, &12u16.to_le_bytes()), "varchar(4)");
        assert_eq!(type_spelling(&c, &15u16.to_le_bytes()), "varchar(5)");
        // utf16: MAXLEN 4 (a supplementary character is a surrogate pair), not 2.
        c.max_len = 4;
        assert_eq!(type_spelling(&c, &40u16.to_le_bytes()), "varchar(10)");
        c.max_len = 1;
        assert_eq!(type_spelling(&c, &12u16.to_le_bytes()), "varchar(12)");
        c.kind = Kind::Decimal;
        assert_eq!(type_spelling(&c, &[12, 2]), "decimal(12,2)");
        c.kind = Kind::Int;
        c.unsigned = true;
        assert_eq!(type_spelling(&c, &[]), "int unsigned");
        c.kind = Kind::Blob;
        c.unsigned = false;
        assert_eq!(type_spelling(&c, &[2]), "text");
    }
}
