//! Schema changes of `postgres-cdc` (docs/change-records.md, "Schema changes").
//!
//! pgoutput carries no DDL. Before the first change of a table in a session, and again
//! before the first change after its columns changed, the server sends a Relation message:
//! the table's columns (names, types, key flags) as of that point in the stream. The
//! decoder keeps, per table, the shape it last **announced** (the shape of the table's last
//! delivered change record); when a change arrives under a Relation whose shape differs, a
//! schema-change record (`op: "s"`) goes right before it, in the same transaction unit, so
//! a page boundary never separates them and a resumed stream skips both or neither.
//!
//! **Across restarts** the announced shapes travel in the bookmark (`"shapes"`), which is
//! stored with the page that delivered them — durable exactly when the records are. A
//! resumed session starts with them, so its first Relation of a table is compared with
//! what was delivered, not taken as new: a change made while faucet was stopped is
//! announced once, and one already announced is not announced again. Replaying the
//! delivered prefix of a transaction (`in_txn`) moves the announced shape along with the
//! skipped changes, as the first time.
//!
//! **Renames** are told from a drop and an add ([`faucet_core::change::schema::diff`]) by
//! `attnum`, looked up by name in the catalog when the Relation message is read
//! ([`super::relation_types`]), and else by place: pgoutput lists columns in `attnum` order
//! and an added column comes after every existing one, so a new name with a kept column
//! after it is a renamed column. The catalog is the current one, which may be ahead of the
//! stream (a backlog, a restart after DDL): a name renamed again or dropped since is not
//! found there. What cannot be told then: the **last** column renamed (no kept column after
//! it) is a drop and an add; two renames and drops between the same two kept columns are
//! paired in order; a column dropped and another added under the same name is one column.
//! A table's first shape (the first run, or a table first seen) is taken as it is: a change
//! made before it is not announced.

use faucet_core::change::schema::{ColumnShape, Identified};
use faucet_core::{Bookmark, FaucetError};

use super::CONNECTOR;
use super::pgoutput::RelationColumn;
use crate::postgres::types::data_type_of;

pub(crate) use faucet_core::change::schema::{SHAPES, Shapes};

/// The shape of a Relation message's columns (resolved by the stream: `source_type`,
/// `decode_oid`, `attnum`).
pub(crate) fn shape_of(columns: &[RelationColumn]) -> Vec<Identified> {
    columns
        .iter()
        .map(|c| Identified {
            shape: ColumnShape {
                name: c.name.clone(),
                source_type: if c.source_type.is_empty() {
                    format!("oid {}", c.type_oid)
                } else {
                    c.source_type.clone()
                },
                data_type: data_type_of(c.decode_oid),
                key: c.key,
            },
            id: c.attnum,
        })
        .collect()
}

/// Adds `shapes` to a bookmark object (`{"lsn": …, "shapes": {"public.t": [[name, type,
/// data_type, key, attnum], …]}}`: [`faucet_core::change::schema::add_shapes_to`]).
pub(crate) fn add_to(bookmark: &mut Bookmark, shapes: &Shapes) {
    faucet_core::change::schema::add_shapes_to(bookmark, shapes);
}

/// The shapes of a bookmark (none when it has no `shapes`).
///
/// # Errors
/// [`FaucetError::Bookmark`] when `shapes` is not of the form [`add_to`] writes.
pub(crate) fn from_bookmark(bookmark: &Bookmark) -> Result<Shapes, FaucetError> {
    faucet_core::change::schema::shapes_from_bookmark(CONNECTOR, bookmark)
}

/// The shape of each of `tables` (quoted, qualified) as the catalog has it now, keyed by
/// the qualified name (`public.items`): the columns in `attnum` order, typed by
/// `format_type` as a Relation message's are, `key` for the primary key's. A table that
/// does not exist is left out.
///
/// # Errors
/// [`FaucetError::Read`] when the catalog cannot be read.
pub(crate) async fn current(
    conn: &mut sqlx::PgConnection,
    tables: &[(String, String)],
) -> Result<Shapes, FaucetError> {
    let mut out = Shapes::new();
    for (qualified, quoted) in tables {
        let rows: Vec<(String, String, i64, i64, bool)> = sqlx::query_as(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.atttypid::int8, \
               a.attnum::int8, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid \
                 AND i.indisprimary AND a.attnum = ANY(i.indkey)) \
             FROM pg_attribute a \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
        )
        .bind(quoted)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| {
            FaucetError::read(
                CONNECTOR,
                format!("cannot read the columns of {qualified}"),
                Some(Box::new(e)),
            )
        })?;
        if rows.is_empty() {
            continue;
        }
        let shape = rows
            .into_iter()
            .map(|(name, source_type, type_oid, attnum, key)| Identified {
                shape: ColumnShape {
                    name,
                    source_type,
                    data_type: data_type_of(u32::try_from(type_oid).unwrap_or(0)),
                    key,
                },
                id: attnum,
            })
            .collect();
        out.insert(qualified.clone(), shape);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn shapes_round_trip_through_the_bookmark() {
        let mut c = RelationColumn::new(true, "id".into(), 23, -1);
        c.source_type = "integer".into();
        c.attnum = 1;
        let mut shapes = Shapes::new();
        shapes.insert("public.t".into(), shape_of(&[c]));
        let mut b = json!({"lsn": "0/1"});
        add_to(&mut b, &shapes);
        assert_eq!(
            b,
            json!({"lsn": "0/1", "shapes": {"public.t": [["id", "integer", "int", true, 1]]}})
        );
        assert_eq!(from_bookmark(&b).expect("reads"), shapes);
        assert!(from_bookmark(&json!({"lsn": "0/1", "shapes": {"t": [[1]]}})).is_err());
        assert!(
            from_bookmark(&json!({"lsn": "0/1"}))
                .expect("none")
                .is_empty()
        );
    }
}
