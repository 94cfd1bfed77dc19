//! PostgreSQL's side of schema changes ([`crate::sql::sink::schema`]): the `ALTER TABLE`
//! text, and which type changes are widenings PostgreSQL does without losing data.
//!
//! Types are compared in `format_type`'s spelling (a MySQL source's types are spelled so
//! first: [`canonical`]). A column holds a new type when every
//! value of it fits: a wider integer (`smallint` ⊂ `integer` ⊂ `bigint` ⊂ `numeric`), a
//! longer or unbounded `character varying` or `text`, a `numeric` with as many integer and
//! fraction digits or unbounded, `double precision` ⊃ `real`, or the same type. A change the
//! target does not hold is altered to the new type when that holds the old one (a
//! widening: `integer` → `bigint`, `character varying(10)` → `(20)` or `text`,
//! `numeric(10,2)` → `numeric(12,2)`), else refused.

use faucet_core::DataType;

use crate::postgres::ident::TableName;
use crate::postgres::types::sql_type_of;
use crate::sql::ident::quote_ident;
use crate::sql::sink::schema::{Alter, Widening};

/// A PostgreSQL type, as far as widening goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// An integer of this many bytes.
    Int(u8),
    /// `character varying(n)`; `None`: unbounded.
    Varchar(Option<i64>),
    /// `text`.
    Text,
    /// `numeric(p,s)`; `None`: unbounded.
    Numeric(Option<(i64, i64)>),
    /// A float of this many bytes.
    Float(u8),
    /// Anything else, by its spelling.
    Other(String),
}

/// PostgreSQL's spelling of a MySQL type (`int(11)` → `integer`, `varchar(40)` →
/// `character varying(40)`, `decimal(12,2)` → `numeric(12,2)`, `double` → `double
/// precision`, an unsigned integer → the next wider one), or the type as it is.
fn canonical(spelled: &str) -> String {
    let t = spelled.trim().to_ascii_lowercase();
    let unsigned = t.ends_with(" unsigned");
    let base = t.trim_end_matches(" unsigned").trim();
    let (name, args) = base
        .split_once('(')
        .map_or((base, ""), |(n, a)| (n.trim(), a));
    let int = |bytes: u8| {
        let name = match bytes + u8::from(unsigned) {
            0..=2 => "smallint",
            3..=4 => "integer",
            5..=8 => "bigint",
            _ => "numeric(20,0)",
        };
        name.to_owned()
    };
    match name {
        "tinyint" => int(1),
        "smallint" if args.is_empty() => "smallint".to_owned(),
        "smallint" => int(2),
        "mediumint" => int(3),
        "int" => int(4),
        "bigint" if unsigned => int(8),
        "bigint" => "bigint".to_owned(),
        "varchar" => format!("character varying({args}"),
        "decimal" => format!("numeric({args}"),
        "double" => "double precision".to_owned(),
        "float" => "real".to_owned(),
        "tinytext" | "mediumtext" | "longtext" => "text".to_owned(),
        _ => spelled.trim().to_owned(),
    }
}

fn kind(spelled: &str) -> Kind {
    let canonical = canonical(spelled);
    let t = canonical.as_str();
    let args = |prefix: &str| -> Option<Vec<i64>> {
        let rest = t.strip_prefix(prefix)?.trim();
        let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
        inner.split(',').map(|p| p.trim().parse().ok()).collect()
    };
    match t {
        "smallint" => return Kind::Int(2),
        "integer" => return Kind::Int(4),
        "bigint" => return Kind::Int(8),
        "text" => return Kind::Text,
        "character varying" => return Kind::Varchar(None),
        "numeric" => return Kind::Numeric(None),
        "real" => return Kind::Float(4),
        "double precision" => return Kind::Float(8),
        _ => {}
    }
    if let Some(a) = args("character varying")
        && let [n] = a.as_slice()
    {
        return Kind::Varchar(Some(*n));
    }
    if let Some(a) = args("numeric") {
        match a.as_slice() {
            [p] => return Kind::Numeric(Some((*p, 0))),
            [p, s] => return Kind::Numeric(Some((*p, *s))),
            _ => {}
        }
    }
    Kind::Other(t.to_owned())
}

/// The decimal digits every value of an integer of `bytes` bytes fits in.
fn int_digits(bytes: u8) -> i64 {
    match bytes {
        2 => 5,
        4 => 10,
        _ => 19,
    }
}

/// Whether a column of type `column` holds every value of type `value`.
fn holds(column: &Kind, value: &Kind) -> bool {
    match (column, value) {
        (Kind::Int(a), Kind::Int(b)) | (Kind::Float(a), Kind::Float(b)) => a >= b,
        (Kind::Text | Kind::Varchar(None), Kind::Varchar(_) | Kind::Text) => true,
        (Kind::Varchar(Some(n)), Kind::Varchar(Some(m))) => n >= m,
        (Kind::Numeric(None), Kind::Numeric(_) | Kind::Int(_)) => true,
        (Kind::Numeric(Some((p, s))), Kind::Numeric(Some((p2, s2)))) => p - s >= p2 - s2 && s >= s2,
        (Kind::Numeric(Some((p, s))), Kind::Int(b)) => p - s >= int_digits(*b),
        (a, b) => a == b,
    }
}

/// The type a changed source column would get in the target: the source's own type in
/// PostgreSQL's spelling when it is one of the types widening knows (a PostgreSQL source,
/// or a MySQL one: [`canonical`]), else `data_type` mapped as `create_table` maps it.
pub(crate) fn new_type(data_type: &DataType, source_type: &str) -> String {
    match kind(source_type) {
        Kind::Other(_) => sql_type_of(data_type).to_owned(),
        _ => canonical(source_type),
    }
}

/// Whether a `target` column holds a changed source column, or the widening that does.
pub(crate) fn widen(target: &str, data_type: &DataType, source_type: &str) -> Widening {
    let new = new_type(data_type, source_type);
    let (column, value) = (kind(target), kind(&new));
    Widening::between(&column, &value, new, holds)
}

/// The `ALTER TABLE` of one step on `table`.
pub(crate) fn sql(table: &TableName, alter: &Alter<'_>) -> String {
    let t = table.quoted();
    match *alter {
        Alter::Add(c, ty) => format!("ALTER TABLE {t} ADD COLUMN {} {ty}", quote_ident(c)),
        Alter::Rename(from, to) => format!(
            "ALTER TABLE {t} RENAME COLUMN {} TO {}",
            quote_ident(from),
            quote_ident(to)
        ),
        Alter::Type(c, ty) => {
            let c = quote_ident(c);
            format!("ALTER TABLE {t} ALTER COLUMN {c} TYPE {ty} USING {c}::{ty}")
        }
        Alter::DropNotNull(c, _) => {
            format!(
                "ALTER TABLE {t} ALTER COLUMN {} DROP NOT NULL",
                quote_ident(c)
            )
        }
        Alter::Drop(c) => format!("ALTER TABLE {t} DROP COLUMN IF EXISTS {}", quote_ident(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widenings_are_applied_and_narrowings_refused() {
        let alter = |to: &str| Widening::Alter(to.into());
        for (target, dt, src, expected) in [
            ("integer", DataType::Int, "bigint", alter("bigint")),
            ("bigint", DataType::Int, "integer", Widening::Holds),
            (
                "character varying(10)",
                DataType::Text,
                "character varying(20)",
                alter("character varying(20)"),
            ),
            (
                "text",
                DataType::Text,
                "character varying(20)",
                Widening::Holds,
            ),
            (
                "character varying(10)",
                DataType::Text,
                "text",
                alter("text"),
            ),
            (
                "numeric(10,2)",
                DataType::Numeric,
                "numeric(12,2)",
                alter("numeric(12,2)"),
            ),
            (
                "numeric",
                DataType::Numeric,
                "numeric(12,2)",
                Widening::Holds,
            ),
            (
                "numeric(12,2)",
                DataType::Numeric,
                "numeric(12,4)",
                Widening::No,
            ),
            ("bigint", DataType::Text, "text", Widening::No),
            ("text", DataType::Int, "integer", Widening::No),
            (
                "real",
                DataType::Float,
                "double precision",
                alter("double precision"),
            ),
            // MySQL's spellings (a mysql-cdc source).
            (
                "character varying(10)",
                DataType::Text,
                "varchar(40)",
                alter("character varying(40)"),
            ),
            ("bigint", DataType::Int, "int unsigned", Widening::Holds),
            (
                "numeric(10,2)",
                DataType::Numeric,
                "decimal(12,2)",
                alter("numeric(12,2)"),
            ),
        ] {
            assert_eq!(widen(target, &dt, src), expected, "{target} <- {src}");
        }
        assert_eq!(new_type(&DataType::Int, "int"), "integer");
    }
}
