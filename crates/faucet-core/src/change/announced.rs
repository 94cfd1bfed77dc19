//! [`Announced`]: the schema-change records (`op: "s"`) of a page, for people — what `faucet
//! serve`'s status shows per table ([`crate::pipeline::Progress::schema_changes`]).

use super::ChangeLayout;
use super::schema::SchemaChange;
use crate::page::Page;

/// One schema-change record a page delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announced {
    /// The source table (`public.items`; a file source's path).
    pub table: String,
    /// What changed, one item per column ([`super::schema::ColumnChange`]'s text:
    /// ``column `w` added, text``).
    pub changes: Vec<String>,
    /// Where it is in the source (`lsn 0/16B3748`; [`ChangeLayout::position_text`]),
    /// `None` for a source without position fields (a file, a query).
    pub position: Option<String>,
}

/// The schema-change records of `page`, in page order (none when its records are not
/// change records). A record whose `after` is not a readable shape is left out.
pub fn announced_in(page: &Page) -> Vec<Announced> {
    let Some(layout) = ChangeLayout::of(page.schema()) else {
        return Vec::new();
    };
    page.rows()
        .filter(|r| layout.is_schema(r.values()))
        .filter_map(|r| {
            let change = layout.read(r.values()).ok()?;
            let parsed = SchemaChange::from_after(change.after?).ok()?;
            Some(Announced {
                table: change.table.unwrap_or_default().to_owned(),
                changes: parsed.changes.iter().map(ToString::to_string).collect(),
                position: layout.position_text(page.schema(), r.values()),
            })
        })
        .collect()
}
