//! The README's connector table (section "A pipeline file") lists every registered type: a
//! row `| source | `csv` | … |` per source and sink, and the `| state | `memory`, … |` row
//! naming every state store. A connector added to the registry without its row fails
//! `the_readme_lists_every_registered_type`; so does a row for a type the registry lacks.

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use crate::registry::{SinkType, SourceType, StateType};

    const README: &str = include_str!("../../../../README.md");

    /// `(kind, type)` of every backticked type in the README rows whose first cell is
    /// `source`, `sink` or `state` (a state row may name several).
    fn documented() -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for line in README.lines().filter(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let [_, kind, types, ..] = cells[..] else {
                continue;
            };
            if !matches!(kind, "source" | "sink" | "state") {
                continue;
            }
            for ty in types.split(',') {
                if let Some(ty) = ty
                    .trim()
                    .strip_prefix('`')
                    .and_then(|t| t.strip_suffix('`'))
                {
                    out.insert((kind.to_owned(), ty.to_owned()));
                }
            }
        }
        out
    }

    #[test]
    fn the_readme_lists_every_registered_type() {
        let registered: BTreeSet<(String, String)> = SourceType::ALL
            .iter()
            .map(|k| ("source", k.name()))
            .chain(SinkType::ALL.iter().map(|k| ("sink", k.name())))
            .chain(StateType::ALL.iter().map(|k| ("state", k.name())))
            .map(|(k, t)| (k.to_owned(), t.to_owned()))
            .collect();
        let documented = documented();
        let missing: Vec<_> = registered.difference(&documented).collect();
        assert!(
            missing.is_empty(),
            "registered types without a row in README.md's connector table: {missing:?}"
        );
        let extra: Vec<_> = documented.difference(&registered).collect();
        assert!(
            extra.is_empty(),
            "README.md's connector table lists types the registry lacks: {extra:?}"
        );
    }
}
