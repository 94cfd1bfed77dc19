//! Schema changes in the SQL sink engine: what a schema-change record (`op: "s"`,
//! [`faucet_core::change::schema`]) does to an upsert target, decided once here for every
//! database; the statement text is the dialect's ([`SinkDialect::alter_sql`]).
//!
//! Settings (`schema_changes`, `dropped_columns` of every SQL sink, [`SchemaPolicy`]):
//!
//! | change | `apply` (default) |
//! |---|---|
//! | `add` | `ADD COLUMN`, nullable, of the type the dialect maps the column's to; nothing when the target has the column |
//! | `rename` | `RENAME COLUMN`; nothing when the target has the new name and not the old one |
//! | `type` | nothing when the target's column holds every value of the new type; a widening the target can do without losing data ([`Widening::Alter`]); anything else stops the run |
//! | `drop` | `dropped_columns: keep` (default): the column stays (a `NOT NULL` is dropped so new rows can leave it out), rows inserted later get NULL, a warning says so; `drop`: `DROP COLUMN` |
//!
//! `schema_changes: fail` stops the run at the first schema change. A stop is a
//! [`FaucetError::Data`] naming the target, the column, the change, its position in the
//! source and the fix; the page's transaction is rolled back, so nothing of it is written.
//! The DDL runs inside the page's transaction (PostgreSQL and SQLite have transactional
//! DDL), with the rows before and after it and the commit token: a change is applied
//! exactly once, and a replayed page finds it applied (each step checks the target first).
//! MySQL's DDL commits on its own: there the changes run ahead of the page's transaction,
//! each checked against the catalog first ([`super::schema_ahead`]).
//! A change of a column that is one of the sink's key columns (drop, rename) stops the run.

use serde::Deserialize;

use faucet_core::change::ChangeLayout;
use faucet_core::change::schema::{ChangeKind, ColumnChange, SchemaChange};
use faucet_core::{DataType, FaucetError, Page};

use super::SinkDialect;

/// `schema_changes`: what an upsert target does with a source's schema change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaChanges {
    /// Apply it (module docs).
    #[default]
    Apply,
    /// Stop the run with an error naming the change.
    Fail,
}

/// `dropped_columns`: what a dropped source column does to the target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DroppedColumns {
    /// The target keeps the column (rows inserted later get NULL); a warning says so.
    #[default]
    Keep,
    /// `DROP COLUMN` in the target.
    Drop,
}

/// A sink's two settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchemaPolicy {
    /// `schema_changes`.
    pub changes: SchemaChanges,
    /// `dropped_columns`.
    pub dropped: DroppedColumns,
}

/// What a dialect does with schema-change records ([`SinkDialect::schema_apply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SchemaApply {
    /// Append: into a table of change records (an audit log: it has an `op` column) a
    /// schema-change record is a row like the others; into a table of plain rows (a file or
    /// query source's, whose added fields come as `s` records,
    /// [`faucet_core::change::NewFields`]) it is applied by this policy
    /// ([`SchemaApply::for_target`]).
    Rows(SchemaPolicy),
    /// Upsert into a system that does not apply them yet: stop at one.
    Unsupported,
    /// Upsert: apply them by this policy.
    Apply(SchemaPolicy),
}

impl SchemaApply {
    /// What a sink that applies schema changes does in `mode`: appended as rows, or applied
    /// by `schema_changes` / `dropped_columns`.
    pub(crate) fn by_mode(
        mode: crate::sql::WriteMode,
        changes: SchemaChanges,
        dropped: DroppedColumns,
    ) -> Self {
        let policy = SchemaPolicy { changes, dropped };
        match mode {
            crate::sql::WriteMode::Append => Self::Rows(policy),
            crate::sql::WriteMode::Upsert => Self::Apply(policy),
        }
    }

    /// What it does into a target whose columns are `columns`: an append target without an
    /// `op` column holds plain rows, so a schema change is applied there, not stored.
    pub(crate) fn for_target(self, columns: &[TargetColumn]) -> Self {
        match self {
            Self::Rows(policy) if !columns.iter().any(|c| c.name == faucet_core::change::OP) => {
                Self::Apply(policy)
            }
            other => other,
        }
    }
}

/// What dialect `d` does with schema-change records into `table` ([`SchemaApply::for_target`]
/// of its columns); as configured while the target does not exist yet.
pub(crate) fn apply_mode<D: SinkDialect>(d: &D, table: Option<&D::Table>) -> SchemaApply {
    match table {
        Some(t) => d.schema_apply().for_target(&d.columns_of(t)),
        None => d.schema_apply(),
    }
}

/// One column of a target as the catalog has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TargetColumn {
    /// The column name.
    pub(crate) name: String,
    /// Its type as the system spells it (`bigint`, `character varying(20)`; SQLite: the
    /// affinity).
    pub(crate) sql_type: String,
    /// `NOT NULL`.
    pub(crate) not_null: bool,
}

/// Whether a target column holds a changed source column's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Widening {
    /// It holds every value of the new type: nothing to do.
    Holds,
    /// Altering it to this type (the dialect's spelling) holds them and loses nothing.
    Alter(String),
    /// It cannot without losing data, or the system cannot change it.
    No,
}

impl Widening {
    /// Whether a target column of kind `column` holds a new type `new` of kind `value`, or
    /// the widening to `new` that does: by the dialect's `holds` (whether a column of the
    /// first kind holds every value of the second). Neither way: [`Widening::No`].
    pub(crate) fn between<K>(
        column: &K,
        value: &K,
        new: String,
        holds: impl Fn(&K, &K) -> bool,
    ) -> Self {
        if holds(column, value) {
            Self::Holds
        } else if holds(value, column) {
            Self::Alter(new)
        } else {
            Self::No
        }
    }
}

/// One statement of a schema change, for [`SinkDialect::alter_sql`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Alter<'a> {
    /// `ADD COLUMN name type` (nullable).
    Add(&'a str, &'a str),
    /// `RENAME COLUMN from TO to`.
    Rename(&'a str, &'a str),
    /// `ALTER COLUMN name TYPE type`.
    Type(&'a str, &'a str),
    /// `ALTER COLUMN name DROP NOT NULL` (the column's type, for systems that restate it:
    /// MySQL's `MODIFY COLUMN name type NULL`).
    DropNotNull(
        &'a str,
        // Read by the MySQL dialect only.
        #[cfg_attr(not(feature = "mysql"), allow(dead_code))] &'a str,
    ),
    /// `DROP COLUMN name`.
    Drop(&'a str),
}

/// The schema change of record `row` of `page` (an `s` record), and where it is in the
/// source (`lsn 0/16B3748`) for messages.
///
/// # Errors
/// [`FaucetError::Data`] naming the page row when the record is not a readable schema change.
pub(crate) fn read(
    page: &Page,
    row: usize,
    connector: &str,
    target: &str,
) -> Result<(SchemaChange, String), FaucetError> {
    let err =
        |m: String| FaucetError::data(connector, format!("{target}, page row {}", row + 1), m);
    let layout = ChangeLayout::of(page.schema())
        .ok_or_else(|| err("a schema change outside change records".into()))?;
    let values = page
        .row(row)
        .map(|r| r.values().to_vec())
        .ok_or_else(|| err("no such row".into()))?;
    let change = layout.read(&values).map_err(err)?;
    let after = change
        .after
        .ok_or_else(|| err("a schema-change record without its `after` shape".into()))?;
    let parsed = SchemaChange::from_after(after).map_err(err)?;
    let position = layout
        .position_text(page.schema(), &values)
        .unwrap_or_else(|| format!("page row {}", row + 1));
    Ok((parsed, position))
}

/// Applies `change` (at `position`) to the target `table` of dialect `d` inside the open page
/// transaction, by the dialect's [`SchemaPolicy`]: the target as it is afterwards, when a
/// statement ran (`None`: it already had the change).
///
/// # Errors
/// [`FaucetError::Data`] naming target, column, change, position and fix for a change the
/// policy or the target refuses; [`FaucetError::Write`] when a statement fails.
pub(crate) async fn apply<D: SinkDialect>(
    d: &D,
    conn: &mut D::Conn,
    table: &D::Table,
    scratch: &mut D::Scratch,
    change: &SchemaChange,
    position: &str,
) -> Result<Option<D::Table>, FaucetError> {
    let Some((statements, _)) = plan(d, table, change, position)? else {
        return Ok(None);
    };
    if statements.is_empty() {
        return Ok(None);
    }
    let target = d.target_name();
    for sql in statements {
        tracing::info!(sink = d.connector(), target = %target, position, %sql, "applying a schema change");
        d.execute_ddl(conn, &sql).await?;
    }
    d.reload_target(conn, scratch).await.map(Some)
}

/// The statements of a schema change, in order, and the target's columns after them
/// ([`plan`]).
pub(crate) type Plan = (Vec<String>, Vec<TargetColumn>);

/// What [`apply`] would do with `change` (at `position`) to the target `table`, without
/// doing it: `None` when the target stores schema changes as rows (an audit log), else
/// the statements it would run, in order (empty: the target already has the change), and
/// the target's columns after them.
///
/// # Errors
/// As [`apply`]: the error a run stops with, for a change the policy or the target refuses
/// or the dialect cannot express.
pub(crate) fn plan<D: SinkDialect>(
    d: &D,
    table: &D::Table,
    change: &SchemaChange,
    position: &str,
) -> Result<Option<Plan>, FaucetError> {
    let target = d.target_name();
    let stop = |c: &ColumnChange, why: String, fix: &str| {
        FaucetError::data(
            d.connector(),
            format!("{target}, column {}", c.column),
            format!(
                "the source's schema changed at {position} ({}): {why}; nothing of this page \
                 was written. {fix}",
                c
            ),
        )
    };
    let mut columns = d.columns_of(table);
    let policy = match d.schema_apply().for_target(&columns) {
        SchemaApply::Rows(_) => return Ok(None),
        SchemaApply::Apply(p) => p,
        SchemaApply::Unsupported => {
            let Some(c) = change.changes.first() else {
                return Ok(Some((Vec::new(), columns)));
            };
            return Err(stop(
                c,
                format!(
                    "the {} sink does not apply schema changes yet",
                    d.connector()
                ),
                "Apply the change to the target by hand and write the table with \
                 `write_mode: append`, or replicate into a postgres or sqlite target",
            ));
        }
    };
    let has = |cols: &[TargetColumn], name: &str| cols.iter().any(|c| c.name == name);
    let mut statements = Vec::new();
    for c in &change.changes {
        if policy.changes == SchemaChanges::Fail {
            return Err(stop(
                c,
                "`schema_changes: fail` is set".into(),
                "Apply the change to the target yourself, or set `schema_changes: apply`, then \
                 run again (the page is read again from its bookmark)",
            ));
        }
        let key = d
            .schema_key()
            .iter()
            .any(|k| *k == c.column || Some(k) == c.from.as_ref());
        if matches!(c.kind, ChangeKind::Add | ChangeKind::Rename)
            && let Some(problem) = d.column_name_problem(&c.column)
        {
            return Err(stop(
                c,
                problem,
                "Rename the column in the source (or set `schema_changes: fail` and alter the \
                 target by hand), then run again",
            ));
        }
        match c.kind {
            ChangeKind::Add => {
                if !has(&columns, &c.column) {
                    let ty = d.new_column_type(
                        c.data_type.as_ref().unwrap_or(&DataType::Text),
                        c.source_type.as_deref().unwrap_or(""),
                    );
                    statements.push(d.alter_sql(&Alter::Add(&c.column, &ty)));
                    columns.push(TargetColumn {
                        name: c.column.clone(),
                        sql_type: ty,
                        not_null: false,
                    });
                }
            }
            ChangeKind::Rename => {
                let from = c.from.as_deref().unwrap_or_default();
                if key {
                    return Err(stop(
                        c,
                        "it renames a key column of the target".into(),
                        "Rename the column in the target and in the sink's `key`, then run \
                         again",
                    ));
                }
                match (has(&columns, from), has(&columns, &c.column)) {
                    (true, false) => {
                        statements.push(d.alter_sql(&Alter::Rename(from, &c.column)));
                        if let Some(t) = columns.iter_mut().find(|t| t.name == from) {
                            t.name.clone_from(&c.column);
                        }
                    }
                    (false, true) => {}
                    (true, true) => {
                        return Err(stop(
                            c,
                            format!("the target has both `{from}` and `{}`", c.column),
                            "Drop or rename one of them in the target, then run again",
                        ));
                    }
                    (false, false) => {
                        return Err(stop(
                            c,
                            format!("the target has neither `{from}` nor `{}`", c.column),
                            "Add the column to the target, then run again",
                        ));
                    }
                }
            }
            ChangeKind::Type => {
                let Some(t) = columns.iter().find(|t| t.name == c.column) else {
                    return Err(stop(
                        c,
                        "the target has no such column".into(),
                        "Add the column to the target, then run again",
                    ));
                };
                let data_type = c.data_type.as_ref().unwrap_or(&DataType::Text);
                match d.widen(
                    &t.sql_type,
                    data_type,
                    c.source_type.as_deref().unwrap_or(""),
                ) {
                    Widening::Holds => {}
                    Widening::Alter(ty) => {
                        statements.push(d.alter_sql(&Alter::Type(&c.column, &ty)));
                        if let Some(t) = columns.iter_mut().find(|t| t.name == c.column) {
                            t.sql_type = ty;
                        }
                    }
                    Widening::No => {
                        return Err(stop(
                            c,
                            format!(
                                "the target's column is {}, which cannot take the new type \
                                 without losing data (only widenings are applied)",
                                t.sql_type
                            ),
                            "Change the target column's type yourself (or re-copy the table), \
                             then run again",
                        ));
                    }
                }
            }
            ChangeKind::Drop => {
                if key {
                    return Err(stop(
                        c,
                        "it drops a key column of the target".into(),
                        "Re-key the target and the sink's `key`, or re-copy the table",
                    ));
                }
                let Some(t) = columns.iter().find(|t| t.name == c.column).cloned() else {
                    continue;
                };
                match policy.dropped {
                    DroppedColumns::Drop => {
                        statements.push(d.alter_sql(&Alter::Drop(&c.column)));
                        columns.retain(|t| t.name != c.column);
                    }
                    DroppedColumns::Keep => {
                        tracing::warn!(
                            target = %target,
                            column = %c.column,
                            position,
                            "a source column was dropped; the target keeps it \
                             (`dropped_columns: keep`): rows inserted from here on get NULL \
                             in it, updated rows keep their value"
                        );
                        if t.not_null {
                            let sql = d.alter_sql(&Alter::DropNotNull(&c.column, &t.sql_type));
                            if sql.is_none() {
                                return Err(stop(
                                    c,
                                    "the target column is NOT NULL and this system cannot \
                                     drop the constraint in place"
                                        .into(),
                                    "Set `dropped_columns: drop`, or remove the constraint \
                                     yourself, then run again",
                                ));
                            }
                            statements.push(sql);
                            if let Some(t) = columns.iter_mut().find(|t| t.name == c.column) {
                                t.not_null = false;
                            }
                        }
                    }
                }
            }
        }
    }
    let statements = statements
        .into_iter()
        .map(|sql| {
            sql.ok_or_else(|| {
                FaucetError::data(
                    d.connector(),
                    target.clone(),
                    format!(
                        "the source's schema changed at {position}, and the {} sink cannot \
                         apply such a change; nothing of this page was written. Apply it to \
                         the target yourself, then run again",
                        d.connector()
                    ),
                )
            })
        })
        .collect::<Result<Vec<String>, FaucetError>>()?;
    Ok(Some((statements, columns)))
}
