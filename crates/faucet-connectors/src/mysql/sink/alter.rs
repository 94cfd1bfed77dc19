//! MySQL's side of schema changes ([`crate::sql::sink::schema`], applied ahead of the page's
//! transaction: [`crate::sql::sink::schema_ahead`]): the `ALTER TABLE` text, and which type
//! changes are widenings MySQL does without losing data.
//!
//! Types are compared in `COLUMN_TYPE`'s spelling (lower case, `int(11)`, `varchar(20)`,
//! `decimal(10,2)`, `bigint(20) unsigned`). A source type is taken in MySQL's spelling
//! (`mysql-cdc`) or PostgreSQL's (`integer`, `character varying(20)`, `numeric(12,2)`,
//! `double precision`: `postgres-cdc`), else mapped from faucet's type as `create_table`
//! maps it ([`super::table::column_type`]). A column holds a new type when every value of
//! it fits: a wider integer (signed ones wider than unsigned ones), a decimal with as many
//! integer and fraction digits, `double` ⊃ `float`, a longer `varchar`/`char` or a text type
//! long enough (4 bytes a character), a longer text type. A change the target does not hold
//! is altered to the new type when that holds the old one (a widening: `int` → `bigint`,
//! `varchar(10)` → `varchar(20)` or `text`, `decimal(10,2)` → `decimal(12,2)`, `float` →
//! `double`), else refused. `MODIFY COLUMN` restates the column: a widened column is
//! nullable afterwards unless it is part of the primary key.

use faucet_core::DataType;

use super::table::column_type;
use crate::mysql::catalog::canonical_type;
use crate::mysql::table::{TableName, quote_ident};
use crate::sql::sink::schema::{Alter, Widening};

/// A MySQL type, as far as widening goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// An integer of this many bytes; unsigned.
    Int(u8, bool),
    /// `varchar(n)` / `char(n)`: n characters.
    Chars(u64),
    /// A text type holding this many bytes.
    Text(u64),
    /// `decimal(p,s)`.
    Decimal(u64, u64),
    /// A float of this many bytes.
    Float(u8),
    /// Anything else, by its spelling.
    Other(String),
}

/// The kind of a type spelled by MySQL (`COLUMN_TYPE` or a table map's spelling, the same
/// after [`canonical_type`]: `int(11)` is `int`) or PostgreSQL, with MySQL's spelling of it.
fn kind(spelled: &str) -> (Kind, String) {
    let t = canonical_type(spelled).to_ascii_lowercase();
    let unsigned = t.ends_with(" unsigned");
    let base = t.trim_end_matches(" unsigned").trim();
    let (name, args) = match base.split_once('(') {
        Some((n, rest)) => (
            n.trim(),
            rest.trim_end_matches(')')
                .split(',')
                .map(|a| a.trim().parse::<u64>().ok())
                .collect::<Option<Vec<u64>>>(),
        ),
        None => (base, Some(Vec::new())),
    };
    let args = args.unwrap_or_default();
    let u = if unsigned { " unsigned" } else { "" };
    let int = |bytes: u8, name: &str| (Kind::Int(bytes, unsigned), format!("{name}{u}"));
    match (name, args.as_slice()) {
        ("tinyint", _) => int(1, "tinyint"),
        ("smallint", _) => int(2, "smallint"),
        ("mediumint", _) => int(3, "mediumint"),
        ("int" | "integer", _) => int(4, "int"),
        ("bigint", _) => int(8, "bigint"),
        ("varchar" | "character varying", [n]) => (Kind::Chars(*n), format!("varchar({n})")),
        ("char" | "character", [n]) => (Kind::Chars(*n), format!("char({n})")),
        ("tinytext", []) => (Kind::Text(255), "tinytext".into()),
        ("text", []) => (Kind::Text(65_535), "text".into()),
        ("mediumtext", []) => (Kind::Text(16_777_215), "mediumtext".into()),
        ("longtext" | "character varying", []) => {
            (Kind::Text(u64::from(u32::MAX)), "longtext".into())
        }
        ("decimal" | "numeric", [p]) => (Kind::Decimal(*p, 0), format!("decimal({p},0){u}")),
        ("decimal" | "numeric", [p, s]) => (Kind::Decimal(*p, *s), format!("decimal({p},{s}){u}")),
        ("float" | "real", []) => (Kind::Float(4), "float".into()),
        ("double" | "double precision", []) => (Kind::Float(8), "double".into()),
        _ => (Kind::Other(t.clone()), t.clone()),
    }
}

/// The decimal digits every value of an integer of `bytes` bytes fits in.
fn int_digits(bytes: u8, unsigned: bool) -> u64 {
    match (bytes, unsigned) {
        (1, _) => 3,
        (2, _) => 5,
        (3, false) => 7,
        (3, true) => 8,
        (4, _) => 10,
        (_, false) => 19,
        (_, true) => 20,
    }
}

/// Whether a column of type `column` holds every value of type `value`.
fn holds(column: &Kind, value: &Kind) -> bool {
    match (column, value) {
        (Kind::Int(a, ua), Kind::Int(b, ub)) => match (ua, ub) {
            (x, y) if x == y => a >= b,
            (false, true) => a > b,
            _ => false,
        },
        (Kind::Float(a), Kind::Float(b)) => a >= b,
        (Kind::Chars(n), Kind::Chars(m)) => n >= m,
        (Kind::Text(cap), Kind::Chars(m)) => 4 * m <= *cap,
        (Kind::Text(a), Kind::Text(b)) => a >= b,
        (Kind::Decimal(p, s), Kind::Decimal(p2, s2)) => p - s >= p2 - s2 && s >= s2,
        (Kind::Decimal(p, s), Kind::Int(b, u)) => p - s >= int_digits(*b, *u),
        (a, b) => a == b,
    }
}

/// The type a changed or added source column gets in the target: the source's own type in
/// MySQL's spelling when widening knows it, else `data_type` as `create_table` maps it.
pub(crate) fn new_type(data_type: &DataType, source_type: &str) -> String {
    match kind(source_type) {
        (Kind::Other(_), _) => column_type(data_type, &[], false).to_ascii_lowercase(),
        (_, spelled) => spelled,
    }
}

/// Whether a `target` column holds a changed source column, or the widening that does. A
/// target column of the source's own type holds it (`datetime(3)`, `year`, `enum('a','b')`:
/// types `create_table` would map otherwise).
pub(crate) fn widen(target: &str, data_type: &DataType, source_type: &str) -> Widening {
    let (column, _) = kind(target);
    if column == kind(source_type).0 {
        return Widening::Holds;
    }
    let new = new_type(data_type, source_type);
    let (value, _) = kind(&new);
    Widening::between(&column, &value, new, holds)
}

/// The `ALTER TABLE` of one step on `table` (MariaDB ≥ 10.5 / MySQL 8 for `RENAME COLUMN`).
pub(crate) fn sql(table: &TableName, alter: &Alter<'_>) -> String {
    let t = table.quoted();
    match *alter {
        Alter::Add(c, ty) => format!("ALTER TABLE {t} ADD COLUMN {} {ty} NULL", quote_ident(c)),
        Alter::Rename(from, to) => format!(
            "ALTER TABLE {t} RENAME COLUMN {} TO {}",
            quote_ident(from),
            quote_ident(to)
        ),
        Alter::Type(c, ty) => format!("ALTER TABLE {t} MODIFY COLUMN {} {ty}", quote_ident(c)),
        Alter::DropNotNull(c, ty) => {
            format!("ALTER TABLE {t} MODIFY COLUMN {} {ty} NULL", quote_ident(c))
        }
        Alter::Drop(c) => format!("ALTER TABLE {t} DROP COLUMN {}", quote_ident(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widenings_are_applied_and_narrowings_refused() {
        let w = |target: &str, dt: DataType, src: &str| widen(target, &dt, src);
        let alter = |t: &str| Widening::Alter(t.into());
        for (target, dt, src, want) in [
            ("int(11)", DataType::Int, "bigint", alter("bigint")),
            ("int", DataType::Int, "bigint", alter("bigint")),
            ("bigint(20)", DataType::Int, "int", Widening::Holds),
            ("bigint(20)", DataType::Int, "integer", Widening::Holds),
            (
                "varchar(10)",
                DataType::Text,
                "character varying(20)",
                alter("varchar(20)"),
            ),
            ("varchar(10)", DataType::Text, "text", alter("text")),
            ("longtext", DataType::Text, "varchar(20)", Widening::Holds),
            (
                "decimal(10,2)",
                DataType::Numeric,
                "numeric(12,2)",
                alter("decimal(12,2)"),
            ),
            (
                "decimal(12,2)",
                DataType::Numeric,
                "decimal(12,4)",
                Widening::No,
            ),
            (
                "float",
                DataType::Float,
                "double precision",
                alter("double"),
            ),
            ("bigint(20)", DataType::Text, "text", Widening::No),
            ("int(10) unsigned", DataType::Int, "bigint", alter("bigint")),
        ] {
            assert_eq!(w(target, dt, src), want, "{target} ← {src}");
        }
        assert_eq!(new_type(&DataType::Int, "oid 23"), "bigint");
        // MariaDB's COLUMN_TYPE against a table map's spelling of the same type: no change.
        for (target, dt, src) in [
            ("int(5) unsigned zerofill", DataType::Int, "int unsigned"),
            ("year(4)", DataType::Int, "year"),
            ("float(7,3)", DataType::Float, "float"),
            ("datetime(3)", DataType::Timestamp, "datetime(3)"),
            ("enum('a','b')", DataType::Text, "enum('a','b')"),
            ("point", DataType::Json, "geometry"),
        ] {
            assert_eq!(w(target, dt, src), Widening::Holds, "{target} / {src}");
        }
        assert_eq!(
            w("datetime(3)", DataType::Timestamp, "datetime(6)"),
            Widening::No
        );
    }

    #[test]
    fn statements_quote_their_names() {
        let t = TableName {
            database: Some("test".into()),
            table: "t".into(),
        };
        assert_eq!(
            sql(&t, &Alter::Rename("v", "v`v")),
            "ALTER TABLE `test`.`t` RENAME COLUMN `v` TO `v``v`"
        );
        assert_eq!(
            sql(&t, &Alter::DropNotNull("x", "int(11)")),
            "ALTER TABLE `test`.`t` MODIFY COLUMN `x` int(11) NULL"
        );
    }
}
