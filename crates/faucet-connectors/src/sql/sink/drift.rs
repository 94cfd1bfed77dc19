//! `faucet doctor`'s drift line for every SQL sink ([`faucet_core::Sink::check_drift`]): a
//! target compared with its source table's columns now, after the schema change a run
//! will deliver first — decided by [`schema::plan`], the code a run applies it with, so
//! doctor says exactly what the run would do.

use faucet_core::change::Drift;
use faucet_core::change::schema::{ColumnShape, SchemaChange};

use super::SinkDialect;
use super::schema::{self, Alter, Widening};

/// How `table` (of dialect `d`) compares with a source table whose columns are now
/// `columns`, when a run first delivers `pending` ([`Drift`]). A target that stores change
/// records as rows (an audit log, with an `op` column) has no columns to compare.
pub(crate) fn drift<D: SinkDialect>(
    d: &D,
    table: &D::Table,
    columns: &[ColumnShape],
    pending: Option<&SchemaChange>,
) -> Drift {
    let mut out = Drift {
        target: d.target_name(),
        ..Drift::default()
    };
    let mut target = d.columns_of(table);
    if target.iter().any(|c| c.name == faucet_core::change::OP) {
        out.notes.push(
            "the target stores the change records as rows (an audit log): its columns are \
             not the source's"
                .into(),
        );
        return out;
    }
    if let Some(change) = pending {
        match schema::plan(d, table, change, "the next run's first change") {
            Ok(Some((statements, after))) => {
                out.statements = statements;
                target = after;
            }
            Ok(None) => {}
            Err(e) => {
                out.stop = Some(e.to_string());
                return out;
            }
        }
    }
    for c in columns {
        let Some(t) = target.iter().find(|t| t.name == c.name) else {
            let ty = d.new_column_type(&c.data_type, &c.source_type);
            let fix = d
                .alter_sql(&Alter::Add(&c.name, &ty))
                .map(|sql| format!("; add it: {sql}"))
                .unwrap_or_default();
            out.problems.push(format!(
                "column `{}` ({}) is in the source, not in the target: a run fails at the \
                 first row that has it{fix}",
                c.name, c.source_type
            ));
            continue;
        };
        match d.widen(&t.sql_type, &c.data_type, &c.source_type) {
            Widening::Holds => {}
            Widening::Alter(ty) => {
                let fix = d
                    .alter_sql(&Alter::Type(&c.name, &ty))
                    .map(|sql| format!("; widen it: {sql}"))
                    .unwrap_or_default();
                out.problems.push(format!(
                    "column `{}`: the target's {} does not hold every value of the source's \
                     {}{fix}",
                    c.name, t.sql_type, c.source_type
                ));
            }
            Widening::No => out.problems.push(format!(
                "column `{}`: the target's {} cannot hold the source's {}; change the \
                 target column's type, or re-copy the table",
                c.name, t.sql_type, c.source_type
            )),
        }
    }
    for t in &target {
        if columns.iter().any(|c| c.name == t.name) {
            continue;
        }
        if t.not_null {
            let fix = d
                .alter_sql(&Alter::DropNotNull(&t.name, &t.sql_type))
                .map(|sql| format!("; {sql}"))
                .unwrap_or_default();
            out.problems.push(format!(
                "column `{}` is in the target, not in the source, and NOT NULL: inserts fail{fix}",
                t.name
            ));
        } else {
            out.notes.push(format!(
                "column `{}` is in the target, not in the source: rows written leave it NULL",
                t.name
            ));
        }
    }
    out
}
