//! The one type resolver of every PostgreSQL read path: a column's type OID → the built-in
//! type OID [`types::decode_text`] reads its text as (its *decode OID*), decided by the
//! type's base type, from `pg_type` (docs/values.md; README,
//! "Values").
//!
//! | `pg_type` of the column's type | decode OID |
//! |---|---|
//! | a type `decode_text` knows (int4, numeric, jsonb, `_int4`, ...) | itself, no lookup |
//! | domain (`typtype = 'd'`) | the decode OID of its base type (`typbasetype`), recursively |
//! | array (`typcategory = 'A'`, and its `typelem`'s array type is this one) | the array type of its element's decode OID (`_int4` for an array of a domain over int); `text[]` when that element is not one `decode_text` reads (an array of enums, composites, ranges, inet) |
//! | enum, composite, range, multirange, any other base or pseudo type | `text`: the value's text form, as PostgreSQL prints it |
//!
//! So a domain over `integer` is a number, an array of a domain over `integer` an array of
//! numbers, an enum a string, an array of enums an array of strings, a composite its text
//! literal (`(1,"a b")`) and an array of composites an array of those literals — on the
//! `postgres` source, on `postgres-cdc` and in `faucet replicate`'s snapshot alike, since
//! all three ask this module. (`int2vector` and `oidvector` have category `A` but are not
//! arrays of the array grammar: their element's array type is another one, so they are
//! text.)

use std::collections::HashMap;

use sqlx::postgres::PgConnection;

use super::types::{self, oid};

/// How deep domains over domains (over arrays of domains ...) are followed; PostgreSQL has
/// no cycles here, this only bounds a corrupt catalog.
const MAX_DEPTH: usize = 32;

/// What `pg_type` says about one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TypeRow {
    /// `typtype`: `b` base, `c` composite, `d` domain, `e` enum, `p` pseudo, `r` range, `m`
    /// multirange.
    kind: u8,
    /// `typbasetype` (domains), else 0.
    base: u32,
    /// `typelem` when the type is a true array type, else 0.
    elem: u32,
}

/// Resolved decode OIDs by type OID. Type OIDs are never reused for another type while the
/// type exists, so a cache lives as long as the session that asks (a new OID, e.g. a column
/// of a new type added mid-stream, is looked up when first seen).
#[derive(Debug, Default, Clone)]
pub(crate) struct DecodeOids(HashMap<u32, u32>);

impl DecodeOids {
    /// The decode OID of `type_oid`, if known here (always for the built-in types).
    pub(crate) fn get(&self, type_oid: u32) -> Option<u32> {
        if types::is_decoded(type_oid) {
            return Some(type_oid);
        }
        self.0.get(&type_oid).copied()
    }

    /// Looks up every OID of `type_oids` not known yet, in one query per level of nesting
    /// (domain → base, array → element), and remembers their decode OIDs. An OID the
    /// catalog does not have (a type dropped since) is read as `text`, with a warning.
    ///
    /// # Errors
    /// The driver's error when a catalog query fails.
    pub(crate) async fn resolve(
        &mut self,
        conn: &mut PgConnection,
        type_oids: &[u32],
    ) -> Result<(), sqlx::Error> {
        let mut rows: HashMap<u32, TypeRow> = HashMap::new();
        let mut wanted: Vec<u32> = type_oids
            .iter()
            .copied()
            .filter(|&o| self.get(o).is_none())
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let asked = wanted.clone();
        for _ in 0..MAX_DEPTH {
            if wanted.is_empty() {
                break;
            }
            let fetched = fetch(conn, &wanted).await?;
            let mut next = Vec::new();
            for (o, row) in fetched {
                for r in [row.base, row.elem] {
                    if r != 0 && self.get(r).is_none() && !rows.contains_key(&r) {
                        next.push(r);
                    }
                }
                rows.insert(o, row);
            }
            next.sort_unstable();
            next.dedup();
            wanted = next;
        }
        for o in asked {
            if !rows.contains_key(&o) {
                tracing::warn!(
                    type_oid = o,
                    "type OID not found in pg_type (dropped since?); its values are read as text"
                );
            }
            let d = self.decode_of(o, &rows, 0);
            self.0.insert(o, d);
        }
        Ok(())
    }

    fn decode_of(&self, type_oid: u32, rows: &HashMap<u32, TypeRow>, depth: usize) -> u32 {
        if let Some(d) = self.get(type_oid) {
            return d;
        }
        let Some(row) = rows.get(&type_oid).filter(|_| depth < MAX_DEPTH) else {
            return oid::TEXT;
        };
        decode_of_row(row, |o| self.decode_of(o, rows, depth + 1))
    }
}

/// The decode OID of a type described by `row`, given the decode OIDs of the types it
/// refers to.
fn decode_of_row(row: &TypeRow, resolve: impl Fn(u32) -> u32) -> u32 {
    if row.kind == b'd' && row.base != 0 {
        resolve(row.base)
    } else if row.elem != 0 {
        types::array_oid_of(resolve(row.elem)).unwrap_or(oid::TEXT_ARRAY)
    } else {
        oid::TEXT
    }
}

/// `pg_type` rows of `type_oids`.
async fn fetch(
    conn: &mut PgConnection,
    type_oids: &[u32],
) -> Result<Vec<(u32, TypeRow)>, sqlx::Error> {
    let oids: Vec<i64> = type_oids.iter().map(|&o| i64::from(o)).collect();
    let rows: Vec<(i64, String, i64, i64)> = sqlx::query_as(
        "SELECT t.oid::int8, t.typtype::text, t.typbasetype::int8, \
                CASE WHEN t.typcategory = 'A' AND e.typarray = t.oid \
                     THEN t.typelem ELSE 0 END::int8 \
         FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem \
         WHERE t.oid = ANY ($1::int8[]::oid[])",
    )
    .bind(&oids)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(o, kind, base, elem)| {
            Some((
                u32::try_from(o).ok()?,
                TypeRow {
                    kind: kind.bytes().next().unwrap_or(b'b'),
                    base: u32::try_from(base).unwrap_or(0),
                    elem: u32::try_from(elem).unwrap_or(0),
                },
            ))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: u8, base: u32, elem: u32) -> TypeRow {
        TypeRow { kind, base, elem }
    }

    #[test]
    fn base_types_decide() {
        let mut rows = HashMap::new();
        rows.insert(90_001, row(b'd', oid::INT4, 0)); // domain over int
        rows.insert(90_002, row(b'b', 0, 90_001)); // its array
        rows.insert(90_003, row(b'e', 0, 0)); // enum
        rows.insert(90_004, row(b'b', 0, 90_003)); // array of enum
        rows.insert(90_005, row(b'c', 0, 0)); // composite
        rows.insert(90_006, row(b'b', 0, 90_005)); // array of composite
        rows.insert(90_007, row(b'd', 90_001, 0)); // domain over the domain
        rows.insert(90_008, row(b'd', 1007, 0)); // domain over int[]
        rows.insert(90_009, row(b'r', 0, 0)); // range
        let d = DecodeOids::default();
        let of = |o| d.decode_of(o, &rows, 0);
        assert_eq!(of(oid::INT4), oid::INT4);
        assert_eq!(of(90_001), oid::INT4);
        assert_eq!(of(90_002), 1007);
        assert_eq!(of(90_003), oid::TEXT);
        assert_eq!(of(90_004), oid::TEXT_ARRAY);
        assert_eq!(of(90_005), oid::TEXT);
        assert_eq!(of(90_006), oid::TEXT_ARRAY);
        assert_eq!(of(90_007), oid::INT4);
        assert_eq!(of(90_008), 1007);
        assert_eq!(of(90_009), oid::TEXT);
        assert_eq!(of(12_345_678), oid::TEXT);
    }
}
