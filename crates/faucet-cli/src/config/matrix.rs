//! Matrix rows: one run per row, each row deep-merged into `pipeline`.
//!
//! A row is `{id: eu, <any pipeline field>: <override>}`. Merging is recursive for mappings
//! (a row's `source: {config: {path: x}}` changes only `path`); a sequence or a scalar in the
//! row replaces the pipeline's value whole (`tables: [eu.orders]` replaces the list).

use serde::Deserialize;
use serde_json::Value;

/// One matrix row, as written. Every field but `id` overrides the pipeline's field of the
/// same name.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a matrix row: a mapping like `{ id: eu, source: { config: { path: ./eu.csv } } }`"
)]
pub(crate) struct MatrixRow {
    /// The row's id: part of the state key `{name}::{id}`, and what `--row` selects.
    pub(crate) id: String,
    /// Overrides `pipeline.source`.
    #[serde(default)]
    source: Option<Value>,
    /// Overrides `pipeline.sink`.
    #[serde(default)]
    sink: Option<Value>,
    /// Overrides `pipeline.state`.
    #[serde(default)]
    state: Option<Value>,
    /// Overrides `pipeline.delivery`.
    #[serde(default)]
    delivery: Option<Value>,
    /// Overrides `pipeline.batch_size`.
    #[serde(default)]
    batch_size: Option<Value>,
    /// Overrides `pipeline.max_page_delay`.
    #[serde(default)]
    max_page_delay: Option<Value>,
    /// Overrides `pipeline.schedule`.
    #[serde(default)]
    schedule: Option<Value>,
}

impl MatrixRow {
    /// The row's overrides as one mapping, in the pipeline's shape.
    pub(crate) fn overrides(&self) -> Value {
        let mut map = serde_json::Map::new();
        for (k, v) in [
            ("source", &self.source),
            ("sink", &self.sink),
            ("state", &self.state),
            ("delivery", &self.delivery),
            ("batch_size", &self.batch_size),
            ("max_page_delay", &self.max_page_delay),
            ("schedule", &self.schedule),
        ] {
            if let Some(v) = v {
                map.insert(k.to_owned(), v.clone());
            }
        }
        Value::Object(map)
    }
}

/// Merges `over` into `base`: mappings key by key, recursively; anything else replaces.
pub(crate) fn deep_merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => deep_merge(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// Whether the path (mapping keys and sequence indexes) exists in `tree`.
pub(crate) fn has_path(tree: &Value, path: &serde_path_to_error::Path) -> bool {
    use serde_path_to_error::Segment;
    let mut at = tree;
    for segment in path {
        let next = match (segment, at) {
            (Segment::Map { key }, Value::Object(m)) => m.get(key),
            (Segment::Seq { index }, Value::Array(a)) => a.get(*index),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mappings_merge_and_everything_else_replaces() {
        let mut base = json!({
            "source": {"type": "csv", "config": {"path": "a.csv", "delimiter": ";"}},
            "sink": {"type": "jsonl", "config": {"path": "out.jsonl"}},
            "tables": ["a", "b"],
            "batch_size": 10,
        });
        deep_merge(
            &mut base,
            &json!({"source": {"config": {"path": "eu.csv"}}, "tables": ["c"], "batch_size": 5}),
        );
        assert_eq!(
            base,
            json!({
                "source": {"type": "csv", "config": {"path": "eu.csv", "delimiter": ";"}},
                "sink": {"type": "jsonl", "config": {"path": "out.jsonl"}},
                "tables": ["c"],
                "batch_size": 5,
            })
        );
    }

    #[test]
    fn overrides_leave_out_absent_fields() {
        let row: MatrixRow =
            serde_json::from_value(json!({"id": "eu", "sink": {"config": {"path": "x"}}}))
                .expect("row");
        assert_eq!(row.overrides(), json!({"sink": {"config": {"path": "x"}}}));
        let err = serde_json::from_value::<MatrixRow>(json!({"id": "eu", "sorce": {}}))
            .expect_err("unknown field")
            .to_string();
        assert!(err.contains("sorce"), "{err}");
    }
}
