//! The schema-change record (`op: "s"`, docs/change-records.md, "Schema changes"): a source
//! table's columns changed between the records before it and the records after it.
//!
//! It has the fields of every change record; `before` and `after` hold the table's shape
//! instead of a row:
//!
//! | field | value |
//! |---|---|
//! | `before` | `{"columns": [...]}`: the columns before the change |
//! | `after` | `{"columns": [...], "changes": [...]}`: the columns after it and what changed |
//!
//! A column is `{"name", "type", "data_type", "key"}`: `type` the source system's own
//! spelling (`character varying(20)`), `data_type` faucet's ([`data_type_name`], what a
//! sink maps to its own column type), `key` whether it is part of the source's key (replica
//! identity). A change is `{"kind", "column", "from", "to", "type", "data_type"}`:
//!
//! | `kind` | `column` | `from` / `to` | `type` / `data_type` |
//! |---|---|---|---|
//! | `add` | the new column | null | its type |
//! | `drop` | the dropped column | null | null |
//! | `rename` | the new name | the old and new names | its type |
//! | `type` | the column | the old and new source types | the new type |
//!
//! Changes are listed in column order: renames and type changes, then drops, then adds.
//!
//! A change source keeps the shape it last delivered per table ([`Shapes`]), compares each
//! new shape with it ([`announce`], by [`diff`]) and keeps them in its bookmark
//! ([`add_shapes_to`], [`shapes_from_bookmark`]), so a restart neither repeats nor misses a
//! change: `postgres-cdc` (Relation messages) and `mysql-cdc` (table maps) both.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value as Json, json};

use crate::FaucetError;
use crate::page::Bookmark;
use crate::value::{DataType, Field, Row, Schema, Value};

/// `kind` of one [`ColumnChange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// `add`: a column was added (it is null in the rows that existed, unless the source
    /// gave it a default: those rows produced no change record).
    Add,
    /// `drop`: a column was dropped.
    Drop,
    /// `rename`: a column was renamed (`from` → `to`).
    Rename,
    /// `type`: a column's type changed (`from` → `to`, the source's spellings).
    Type,
}

impl ChangeKind {
    /// The `kind` text.
    pub const fn code(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Drop => "drop",
            Self::Rename => "rename",
            Self::Type => "type",
        }
    }

    fn from_code(code: &str) -> Option<Self> {
        Some(match code {
            "add" => Self::Add,
            "drop" => Self::Drop,
            "rename" => Self::Rename,
            "type" => Self::Type,
            _ => return None,
        })
    }
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One column of a table's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnShape {
    /// The column name.
    pub name: String,
    /// The source system's type, as it spells it (`integer`, `character varying(20)`).
    pub source_type: String,
    /// faucet's type of its values.
    pub data_type: DataType,
    /// Part of the source's key (replica identity).
    pub key: bool,
}

/// One change of a [`SchemaChange`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnChange {
    /// What changed.
    pub kind: ChangeKind,
    /// The column (its new name for a rename, its old one for a drop).
    pub column: String,
    /// Rename: the old name; type: the old source type.
    pub from: Option<String>,
    /// Rename: the new name; type: the new source type.
    pub to: Option<String>,
    /// The column's source type after the change (`None` for a drop).
    pub source_type: Option<String>,
    /// faucet's type of its values after the change (`None` for a drop).
    pub data_type: Option<DataType>,
}

impl fmt::Display for ColumnChange {
    /// For people: ``column `w` added, text``, ``column `v` renamed to `vv` ``, ``column `v`
    /// changed type from integer to bigint``, ``column `gone` dropped``.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let or_unknown = |s: &Option<String>| s.clone().unwrap_or_else(|| "?".to_owned());
        match self.kind {
            ChangeKind::Add => write!(
                f,
                "column `{}` added, {}",
                self.column,
                or_unknown(&self.source_type)
            ),
            ChangeKind::Drop => write!(f, "column `{}` dropped", self.column),
            ChangeKind::Rename => write!(
                f,
                "column `{}` renamed to `{}`",
                or_unknown(&self.from),
                self.column
            ),
            ChangeKind::Type => write!(
                f,
                "column `{}` changed type from {} to {}",
                self.column,
                or_unknown(&self.from),
                or_unknown(&self.to)
            ),
        }
    }
}

/// What a schema-change record says: the changes, and the table's columns after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChange {
    /// The changes, in the order of [`diff`].
    pub changes: Vec<ColumnChange>,
    /// The columns after the change, in table order.
    pub columns: Vec<ColumnShape>,
}

/// A column of the old shape, with what identifies it beyond its name (PostgreSQL's attnum:
/// 0 when not known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identified {
    /// The column.
    pub shape: ColumnShape,
    /// A number that stays with the column through a rename (PostgreSQL's attnum), or 0.
    pub id: i64,
}

/// The changes from `old` to `new`, both in table order (each column with its
/// [`Identified::id`]). Columns are paired, in this order:
///
/// 1. by id, when both sides know it (a different name: a rename);
/// 2. by name (where one side's id is not known, or both are the same);
/// 3. by place: an unpaired new column with a paired column after it cannot be an added
///    one (an added column comes after every existing one), so it is a renamed one — the
///    unpaired old column between the same paired neighbours (in order, when several).
///
/// An old column left unpaired was dropped, a new one added (an unpaired new column
/// after the last paired one, whose id is not known on both sides, is taken as added: a
/// rename of the last column cannot be told from a drop and an add without ids). A paired
/// column whose source type differs changed type. Empty when the shapes are the same (a
/// key flag change alone is no change).
pub fn diff(old: &[Identified], new: &[Identified]) -> Vec<ColumnChange> {
    // pair[j] = the old index paired with new column j.
    let mut pair: Vec<Option<usize>> = vec![None; new.len()];
    let mut used = vec![false; old.len()];
    for (j, n) in new.iter().enumerate() {
        if n.id != 0
            && let Some(i) = old.iter().position(|o| o.id == n.id)
        {
            pair[j] = Some(i);
            used[i] = true;
        }
    }
    for (j, n) in new.iter().enumerate() {
        if pair[j].is_some() {
            continue;
        }
        if let Some(i) = (0..old.len()).find(|&i| {
            !used[i]
                && old[i].shape.name == n.shape.name
                && (old[i].id == 0 || n.id == 0 || old[i].id == n.id)
        }) {
            pair[j] = Some(i);
            used[i] = true;
        }
    }
    // By place: each run of unpaired new columns followed by a paired one.
    let mut j = 0;
    while j < new.len() {
        if pair[j].is_some() {
            j += 1;
            continue;
        }
        let start = j;
        while j < new.len() && pair[j].is_none() {
            j += 1;
        }
        let Some(next_old) = new.get(j).and_then(|_| pair[j]) else {
            break; // the tail: added columns
        };
        let prev_old = (0..start).rev().find_map(|k| pair[k]);
        let lo = prev_old.map_or(0, |p| p + 1);
        let gap: Vec<usize> = (lo..next_old).filter(|&i| !used[i]).collect();
        for (k, i) in (start..j).zip(gap) {
            pair[k] = Some(i);
            used[i] = true;
        }
    }
    let mut changes = Vec::new();
    for (n, p) in new.iter().zip(&pair) {
        let Some(&i) = p.as_ref() else { continue };
        let o = &old[i];
        if o.shape.name != n.shape.name {
            changes.push(ColumnChange {
                kind: ChangeKind::Rename,
                column: n.shape.name.clone(),
                from: Some(o.shape.name.clone()),
                to: Some(n.shape.name.clone()),
                source_type: Some(n.shape.source_type.clone()),
                data_type: Some(n.shape.data_type.clone()),
            });
        }
        if o.shape.source_type != n.shape.source_type {
            changes.push(ColumnChange {
                kind: ChangeKind::Type,
                column: n.shape.name.clone(),
                from: Some(o.shape.source_type.clone()),
                to: Some(n.shape.source_type.clone()),
                source_type: Some(n.shape.source_type.clone()),
                data_type: Some(n.shape.data_type.clone()),
            });
        }
    }
    for (o, _) in old.iter().zip(&used).filter(|(_, u)| !**u) {
        changes.push(ColumnChange {
            kind: ChangeKind::Drop,
            column: o.shape.name.clone(),
            from: None,
            to: None,
            source_type: None,
            data_type: None,
        });
    }
    for (n, _) in new.iter().zip(&pair).filter(|(_, p)| p.is_none()) {
        changes.push(ColumnChange {
            kind: ChangeKind::Add,
            column: n.shape.name.clone(),
            from: None,
            to: None,
            source_type: Some(n.shape.source_type.clone()),
            data_type: Some(n.shape.data_type.clone()),
        });
    }
    changes
}

/// The bookmark member holding the delivered shapes.
pub const SHAPES: &str = "shapes";

/// The shape each table was last delivered with, by qualified name (`public.items`,
/// `shop.orders`).
pub type Shapes = BTreeMap<String, Vec<Identified>>;

/// The `before` and `after` values of the schema-change record of `table` going from the
/// shape `old` to `new` ([`diff`]), or `None` when they are the same. Logs the change, and
/// warns when columns were added (rows that existed got the source's default without a
/// change record). `at` names the position for the log (`lsn 0/16B3748`).
pub fn announce(
    table: &str,
    at: &str,
    old: &[Identified],
    new: &[Identified],
) -> Option<(Value, Value)> {
    let changes = diff(old, new);
    if changes.is_empty() {
        return None;
    }
    tracing::info!(
        table,
        at,
        changes = ?changes.iter().map(|c| format!("{} {}", c.kind, c.column)).collect::<Vec<_>>(),
        "the table's columns changed: a schema-change record goes before its next change"
    );
    let added: Vec<&str> = changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Add)
        .map(|c| c.column.as_str())
        .collect();
    if !added.is_empty() {
        tracing::warn!(
            table,
            added = ?added,
            "columns were added mid-stream: rows that existed got their default in the \
             source without any change record, so a target has NULL there until a row \
             changes; resync the table if the sink needs those values"
        );
    }
    let change = SchemaChange {
        changes,
        columns: new.iter().map(|c| c.shape.clone()).collect(),
    };
    let old: Vec<ColumnShape> = old.iter().map(|c| c.shape.clone()).collect();
    Some((before_value(&old), change.after_value()))
}

/// Adds `shapes` to a bookmark object (`{…, "shapes": {"public.t": [[name, type,
/// data_type, key, id], …]}}`); nothing when there are none or the bookmark is no object.
pub fn add_shapes_to(bookmark: &mut Bookmark, shapes: &Shapes) {
    if shapes.is_empty() {
        return;
    }
    let Some(obj) = bookmark.as_object_mut() else {
        return;
    };
    let mut out = Map::new();
    for (table, columns) in shapes {
        let cols: Vec<Json> = columns
            .iter()
            .map(|c| {
                json!([
                    c.shape.name,
                    c.shape.source_type,
                    data_type_name(&c.shape.data_type),
                    c.shape.key,
                    c.id
                ])
            })
            .collect();
        out.insert(table.clone(), Json::Array(cols));
    }
    obj.insert(SHAPES.into(), Json::Object(out));
}

/// The shapes of a bookmark of `connector` (none when it has no `shapes`).
///
/// # Errors
/// [`FaucetError::Bookmark`] when `shapes` is not of the form [`add_shapes_to`] writes.
pub fn shapes_from_bookmark(connector: &str, bookmark: &Bookmark) -> Result<Shapes, FaucetError> {
    let Some(shapes) = bookmark.as_object().and_then(|o| o.get(SHAPES)) else {
        return Ok(Shapes::new());
    };
    let invalid = |why: &str| {
        FaucetError::bookmark(
            connector,
            format!(
                "the bookmark's `shapes` {why}; expected {{\"schema.table\": [[name, type, \
                 data_type, key, id], …]}}"
            ),
            None,
        )
    };
    let obj = shapes
        .as_object()
        .ok_or_else(|| invalid("is not an object"))?;
    let mut out = Shapes::new();
    for (table, columns) in obj {
        let columns = columns
            .as_array()
            .ok_or_else(|| invalid(&format!("of {table} is not an array")))?;
        let mut shape = Vec::with_capacity(columns.len());
        for c in columns {
            let parts = c.as_array().map(Vec::as_slice).unwrap_or_default();
            let [name, ty, dt, key, id] = parts else {
                return Err(invalid(&format!(
                    "of {table} has a column that is not 5 items"
                )));
            };
            let (Some(name), Some(ty), Some(dt), Some(key), Some(id)) = (
                name.as_str(),
                ty.as_str(),
                dt.as_str().and_then(parse_data_type),
                key.as_bool(),
                id.as_i64(),
            ) else {
                return Err(invalid(&format!(
                    "of {table} has a column of the wrong types"
                )));
            };
            shape.push(Identified {
                shape: ColumnShape {
                    name: name.to_owned(),
                    source_type: ty.to_owned(),
                    data_type: dt,
                    key,
                },
                id,
            });
        }
        out.insert(table.clone(), shape);
    }
    Ok(out)
}

fn column_schema() -> Arc<Schema> {
    static S: OnceLock<Arc<Schema>> = OnceLock::new();
    S.get_or_init(|| {
        Arc::new(Schema::new(vec![
            Field::new("name", DataType::Text),
            Field::new("type", DataType::Text),
            Field::new("data_type", DataType::Text),
            Field::new("key", DataType::Bool),
        ]))
    })
    .clone()
}

fn change_schema() -> Arc<Schema> {
    static S: OnceLock<Arc<Schema>> = OnceLock::new();
    S.get_or_init(|| {
        Arc::new(Schema::new(vec![
            Field::new("kind", DataType::Text),
            Field::new("column", DataType::Text),
            Field::new("from", DataType::Text),
            Field::new("to", DataType::Text),
            Field::new("type", DataType::Text),
            Field::new("data_type", DataType::Text),
        ]))
    })
    .clone()
}

fn shape_schema(with_changes: bool) -> Arc<Schema> {
    static BEFORE: OnceLock<Arc<Schema>> = OnceLock::new();
    static AFTER: OnceLock<Arc<Schema>> = OnceLock::new();
    let columns = Field::new("columns", DataType::Array(Box::new(DataType::Json)));
    if with_changes {
        AFTER
            .get_or_init(|| {
                Arc::new(Schema::new(vec![
                    columns.clone(),
                    Field::new("changes", DataType::Array(Box::new(DataType::Json))),
                ]))
            })
            .clone()
    } else {
        BEFORE
            .get_or_init(|| Arc::new(Schema::new(vec![columns.clone()])))
            .clone()
    }
}

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

fn opt_text(s: Option<&str>) -> Value {
    s.map_or(Value::Null, text)
}

fn columns_value(columns: &[ColumnShape]) -> Value {
    Value::Array(
        columns
            .iter()
            .map(|c| {
                Value::row(
                    column_schema(),
                    vec![
                        text(&c.name),
                        text(&c.source_type),
                        text(&data_type_name(&c.data_type)),
                        Value::Bool(c.key),
                    ],
                )
            })
            .collect(),
    )
}

/// The `before` value of a schema-change record: `{"columns": [...]}` of `old`.
pub fn before_value(old: &[ColumnShape]) -> Value {
    Value::row(shape_schema(false), vec![columns_value(old)])
}

impl SchemaChange {
    /// The `after` value of its record: `{"columns": [...], "changes": [...]}`.
    pub fn after_value(&self) -> Value {
        let changes = self
            .changes
            .iter()
            .map(|c| {
                Value::row(
                    change_schema(),
                    vec![
                        text(c.kind.code()),
                        text(&c.column),
                        opt_text(c.from.as_deref()),
                        opt_text(c.to.as_deref()),
                        opt_text(c.source_type.as_deref()),
                        c.data_type
                            .as_ref()
                            .map_or(Value::Null, |t| text(&data_type_name(t))),
                    ],
                )
            })
            .collect();
        Value::row(
            shape_schema(true),
            vec![columns_value(&self.columns), Value::Array(changes)],
        )
    }

    /// Reads the `after` row of a schema-change record.
    ///
    /// # Errors
    /// A message for people when the row does not have this shape (e.g. a record read back
    /// from a file, whose rows are JSON).
    pub fn from_after(after: &Row) -> Result<Self, String> {
        let field = |row: &Row, name: &str| -> Option<Value> {
            row.schema.index_of(name).map(|i| row.values[i].clone())
        };
        let items = |name: &str| -> Result<Vec<Row>, String> {
            match field(after, name) {
                Some(Value::Array(items)) => items
                    .into_iter()
                    .map(|v| match v {
                        Value::Row(r) => Ok(r),
                        _ => Err(format!("an item of `after.{name}` is not an object")),
                    })
                    .collect(),
                _ => Err(format!(
                    "a schema-change record without `after.{name}` (an array)"
                )),
            }
        };
        let text_of = |row: &Row, name: &str| -> Option<String> {
            match field(row, name) {
                Some(Value::Text(t)) => Some(t.to_string()),
                _ => None,
            }
        };
        let columns = items("columns")?
            .iter()
            .map(|c| {
                let name =
                    text_of(c, "name").ok_or_else(|| "a column without its `name`".to_owned())?;
                Ok(ColumnShape {
                    source_type: text_of(c, "type").unwrap_or_default(),
                    data_type: text_of(c, "data_type")
                        .and_then(|t| parse_data_type(&t))
                        .unwrap_or(DataType::Text),
                    key: matches!(field(c, "key"), Some(Value::Bool(true))),
                    name,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let changes = items("changes")?
            .iter()
            .map(|c| {
                let kind = text_of(c, "kind")
                    .and_then(|k| ChangeKind::from_code(&k))
                    .ok_or_else(|| {
                        "a change whose `kind` is not add|drop|rename|type".to_owned()
                    })?;
                Ok(ColumnChange {
                    kind,
                    column: text_of(c, "column")
                        .ok_or_else(|| "a change without its `column`".to_owned())?,
                    from: text_of(c, "from"),
                    to: text_of(c, "to"),
                    source_type: text_of(c, "type"),
                    data_type: text_of(c, "data_type").and_then(|t| parse_data_type(&t)),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { changes, columns })
    }
}

/// faucet's name of a [`DataType`] in a schema-change record: `bool`, `int`, `float`,
/// `numeric`, `text`, `bytes`, `json`, `date`, `timestamp`, `timestamptz`, `time`, `timetz`,
/// `interval`, `unknown`; an array is its element's name and `[]` (`int[]`).
pub fn data_type_name(t: &DataType) -> String {
    match t {
        DataType::Array(inner) => format!("{}[]", data_type_name(inner)),
        other => match other {
            DataType::Unknown => "unknown",
            DataType::Bool => "bool",
            DataType::Int => "int",
            DataType::Float => "float",
            DataType::Numeric => "numeric",
            DataType::Text => "text",
            DataType::Bytes => "bytes",
            DataType::Json => "json",
            DataType::Date => "date",
            DataType::Timestamp => "timestamp",
            DataType::TimestampTz => "timestamptz",
            DataType::Time => "time",
            DataType::TimeTz => "timetz",
            DataType::Interval => "interval",
            DataType::Array(_) => "array",
        }
        .to_owned(),
    }
}

/// The [`DataType`] a [`data_type_name`] names, or `None`.
pub fn parse_data_type(name: &str) -> Option<DataType> {
    if let Some(inner) = name.strip_suffix("[]") {
        return parse_data_type(inner).map(|t| DataType::Array(Box::new(t)));
    }
    Some(match name {
        "unknown" => DataType::Unknown,
        "bool" => DataType::Bool,
        "int" => DataType::Int,
        "float" => DataType::Float,
        "numeric" => DataType::Numeric,
        "text" => DataType::Text,
        "bytes" => DataType::Bytes,
        "json" => DataType::Json,
        "date" => DataType::Date,
        "timestamp" => DataType::Timestamp,
        "timestamptz" => DataType::TimestampTz,
        "time" => DataType::Time,
        "timetz" => DataType::TimeTz,
        "interval" => DataType::Interval,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: &str, id: i64) -> Identified {
        Identified {
            shape: ColumnShape {
                name: name.into(),
                source_type: ty.into(),
                data_type: DataType::Int,
                key: false,
            },
            id,
        }
    }

    #[test]
    fn renames_are_told_by_id_and_drops_adds_types_by_name() {
        let old = [
            col("id", "integer", 1),
            col("v", "integer", 2),
            col("x", "text", 3),
        ];
        let new = [
            col("id", "bigint", 1),
            col("vv", "integer", 2),
            col("w", "text", 4),
        ];
        let changes = diff(&old, &new);
        let kinds: Vec<(ChangeKind, &str)> = changes
            .iter()
            .map(|c| (c.kind, c.column.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (ChangeKind::Type, "id"),
                (ChangeKind::Rename, "vv"),
                (ChangeKind::Drop, "x"),
                (ChangeKind::Add, "w")
            ]
        );
        // Without ids: a renamed column with a kept one after it is told by its place; the
        // last column renamed is a drop and an add.
        let old = [
            col("id", "integer", 0),
            col("v", "integer", 0),
            col("x", "text", 0),
        ];
        let new = [
            col("id", "integer", 0),
            col("vv", "integer", 0),
            col("x", "text", 0),
            col("w", "text", 0),
        ];
        let changes = diff(&old, &new);
        let kinds: Vec<(ChangeKind, &str)> = changes
            .iter()
            .map(|c| (c.kind, c.column.as_str()))
            .collect();
        assert_eq!(kinds, [(ChangeKind::Rename, "vv"), (ChangeKind::Add, "w")]);
        let old = [col("id", "integer", 0), col("v", "integer", 0)];
        let new = [col("id", "integer", 0), col("vv", "integer", 0)];
        let kinds: Vec<ChangeKind> = diff(&old, &new).iter().map(|c| c.kind).collect();
        assert_eq!(kinds, [ChangeKind::Drop, ChangeKind::Add]);
        // A drop between kept columns, and one column renamed among several dropped.
        let old = [
            col("a", "int", 0),
            col("b", "int", 0),
            col("c", "int", 0),
            col("d", "int", 0),
        ];
        let new = [col("a", "int", 0), col("c", "int", 0), col("d", "int", 0)];
        let kinds: Vec<ChangeKind> = diff(&old, &new).iter().map(|c| c.kind).collect();
        assert_eq!(kinds, [ChangeKind::Drop]);
        assert!(diff(&new, &new).is_empty());
    }

    #[test]
    fn shapes_round_trip_through_the_bookmark() {
        let mut shapes = Shapes::new();
        shapes.insert("public.t".into(), vec![col("id", "integer", 1)]);
        let mut b = json!({"lsn": "0/1"});
        add_shapes_to(&mut b, &shapes);
        assert_eq!(
            b,
            json!({"lsn": "0/1", "shapes": {"public.t": [["id", "integer", "int", false, 1]]}})
        );
        assert_eq!(shapes_from_bookmark("x", &b).expect("reads"), shapes);
        assert!(shapes_from_bookmark("x", &json!({"shapes": {"t": [[1]]}})).is_err());
        assert!(
            shapes_from_bookmark("x", &json!({"lsn": "0/1"}))
                .expect("none")
                .is_empty()
        );
        assert!(
            announce(
                "t",
                "here",
                &[col("id", "integer", 1)],
                &[col("id", "integer", 1)]
            )
            .is_none()
        );
    }

    #[test]
    fn the_after_value_reads_back() {
        let change = SchemaChange {
            changes: diff(&[col("v", "integer", 2)], &[col("vv", "bigint", 2)]),
            columns: vec![col("vv", "bigint", 2).shape],
        };
        let Value::Row(after) = change.after_value() else {
            panic!("a row");
        };
        assert_eq!(SchemaChange::from_after(&after).expect("reads"), change);
        for t in [
            DataType::Int,
            DataType::Array(Box::new(DataType::TimestampTz)),
        ] {
            assert_eq!(parse_data_type(&data_type_name(&t)), Some(t));
        }
    }
}
