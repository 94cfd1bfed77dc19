//! The key that orders a SQL read, chosen the same way on every system: the configured
//! `replication_key` of an incremental read, or the primary key of a table read in full
//! (when it has one whose columns all compare exactly); with the warnings a user needs when
//! the key is not known unique or may be NULL.

use faucet_core::FaucetError;

use super::read::ReplicationMethod;

/// Which key orders the read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// The configured replication key of an incremental read.
    Replication,
    /// The primary key of a table read in full.
    PrimaryKey,
}

/// The key that orders a read.
#[derive(Debug, Clone)]
pub(crate) struct OrderKey {
    /// What the key is.
    pub(crate) kind: KeyKind,
    /// The key's column names, in order.
    pub(crate) names: Vec<String>,
    /// Their positions among the output columns.
    pub(crate) indexes: Vec<usize>,
    /// Whether the key tuple is known unique (a primary key or unique index within it).
    pub(crate) unique: bool,
}

/// What a table's catalog says about its keys (none for a query).
#[derive(Clone, Copy)]
pub(crate) struct KeyFacts<'a> {
    /// The primary key's columns, in order.
    pub(crate) primary_key: Option<&'a [String]>,
    /// Column sets of the primary key and every plain unique index.
    pub(crate) unique_sets: &'a [Vec<String>],
    /// Whether a column may be NULL.
    pub(crate) nullable: &'a (dyn Fn(&str) -> bool + Sync),
}

/// A read's output columns, as a key chooser sees them.
pub(crate) struct Columns<'a> {
    /// What the read is called in messages: a table's name, or `query`.
    pub(crate) label: &'a str,
    /// The output column names, in order.
    pub(crate) names: Vec<&'a str>,
    /// Why the column at an index cannot be a key (no exact comparison on this system), or
    /// `None` when it can.
    pub(crate) unsupported: &'a (dyn Fn(usize) -> Option<&'static str> + Sync),
}

/// The key ordering a read by `method`, or `None` for a full read that cannot be ordered (a
/// query, a table without a usable primary key: it cannot resume mid-table). Warnings a user
/// should see are pushed to `warnings`.
///
/// # Errors
/// [`FaucetError::Config`] naming `replication_key[i]` when a key column is not among the
/// output columns or cannot be compared exactly.
pub(crate) fn choose(
    method: ReplicationMethod,
    replication_key: &[String],
    columns: &Columns<'_>,
    facts: Option<&KeyFacts<'_>>,
    warnings: &mut Vec<String>,
) -> Result<Option<OrderKey>, FaucetError> {
    match method {
        ReplicationMethod::Incremental => {
            incremental(replication_key, columns, facts, warnings).map(Some)
        }
        ReplicationMethod::FullTable => Ok(facts.and_then(|f| primary(f, columns))),
    }
}

fn position(columns: &Columns<'_>, name: &str) -> Option<usize> {
    columns.names.iter().position(|c| *c == name)
}

/// The primary key, when every column of it is an output column that compares exactly.
fn primary(facts: &KeyFacts<'_>, columns: &Columns<'_>) -> Option<OrderKey> {
    let pk = facts.primary_key?;
    let indexes = pk
        .iter()
        .map(|n| position(columns, n))
        .collect::<Option<Vec<_>>>()?;
    indexes
        .iter()
        .all(|&i| (columns.unsupported)(i).is_none())
        .then(|| OrderKey {
            kind: KeyKind::PrimaryKey,
            names: pk.to_vec(),
            indexes,
            unique: true,
        })
}

fn incremental(
    names: &[String],
    columns: &Columns<'_>,
    facts: Option<&KeyFacts<'_>>,
    warnings: &mut Vec<String>,
) -> Result<OrderKey, FaucetError> {
    let label = columns.label;
    let mut indexes = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let field = format!("replication_key[{i}]");
        let Some(idx) = position(columns, name) else {
            return Err(FaucetError::config(
                field,
                format!(
                    "`{name}` is not a column of {label} (columns: {})",
                    columns.names.join(", ")
                ),
            ));
        };
        if let Some(why) = (columns.unsupported)(idx) {
            return Err(FaucetError::config(field, format!("`{name}` {why}")));
        }
        indexes.push(idx);
    }
    let unique = facts.is_some_and(|f| {
        f.unique_sets
            .iter()
            .any(|set| set.iter().all(|col| names.contains(col)))
    });
    if !unique {
        let pk_hint = facts
            .and_then(|f| f.primary_key)
            .map(|pk| format!(" (here: [{}, {}])", names.join(", "), pk.join(", ")))
            .unwrap_or_default();
        warnings.push(format!(
            "replication_key [{}] of {label} is not known to be unique (no primary key or \
             unique index within it): rows sharing a key tuple are never skipped, but a run \
             resumed after a page boundary inside such a group delivers the group's rows \
             again; add the primary key as the last key column{pk_hint}",
            names.join(", "),
        ));
    }
    if let Some(f) = facts {
        let nullable: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| (f.nullable)(n))
            .collect();
        if !nullable.is_empty() {
            warnings.push(format!(
                "replication_key column(s) {} of {label} may be NULL: rows with a NULL key \
                 cannot be ordered against a bookmark and are not read incrementally; make the \
                 column(s) NOT NULL or use `full_table`",
                nullable.join(", "),
            ));
        }
    }
    Ok(OrderKey {
        kind: KeyKind::Replication,
        names: names.to_vec(),
        indexes,
        unique,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn an_incremental_key_is_found_checked_and_warned_about() {
        let float = |i: usize| (i == 2).then_some("is a FLOAT");
        let cols = Columns {
            label: "db.t",
            names: vec!["id", "updated_at", "score"],
            unsupported: &float,
        };
        let pk = s(&["id"]);
        let sets = vec![pk.clone()];
        let nullable = |n: &str| n == "updated_at";
        let facts = KeyFacts {
            primary_key: Some(&pk),
            unique_sets: &sets,
            nullable: &nullable,
        };
        let m = ReplicationMethod::Incremental;
        let mut w = Vec::new();
        let key = choose(m, &s(&["updated_at", "id"]), &cols, Some(&facts), &mut w)
            .expect("a value")
            .expect("a value");
        assert_eq!((key.indexes.clone(), key.unique), (vec![1, 0], true));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("updated_at") && w[0].contains("NULL"),
            "{w:?}"
        );

        let mut w = Vec::new();
        let key = choose(m, &s(&["updated_at"]), &cols, Some(&facts), &mut w)
            .expect("a value")
            .expect("a value");
        assert!(!key.unique);
        assert!(w[0].contains("(here: [updated_at, id])"), "{w:?}");

        for (key, field) in [
            (s(&["nope"]), "replication_key[0]"),
            (s(&["id", "score"]), "replication_key[1]"),
        ] {
            match choose(m, &key, &cols, Some(&facts), &mut Vec::new()) {
                Err(FaucetError::Config { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_full_read_is_ordered_by_a_usable_primary_key_only() {
        let never = |_: usize| None;
        let cols = Columns {
            label: "t",
            names: vec!["a", "b"],
            unsupported: &never,
        };
        let nullable = |_: &str| false;
        let pk = s(&["b", "a"]);
        let facts = KeyFacts {
            primary_key: Some(&pk),
            unique_sets: &[],
            nullable: &nullable,
        };
        let m = ReplicationMethod::FullTable;
        let key = choose(m, &[], &cols, Some(&facts), &mut Vec::new())
            .expect("a value")
            .expect("a value");
        assert_eq!((key.kind, key.indexes), (KeyKind::PrimaryKey, vec![1, 0]));
        assert!(
            choose(m, &[], &cols, None, &mut Vec::new())
                .expect("a value")
                .is_none()
        );
        let float = |i: usize| (i == 0).then_some("is a FLOAT");
        let cols = Columns {
            unsupported: &float,
            ..cols
        };
        assert!(
            choose(m, &[], &cols, Some(&facts), &mut Vec::new())
                .expect("a value")
                .is_none()
        );
    }
}
