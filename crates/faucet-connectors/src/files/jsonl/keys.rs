//! The keys of a jsonl line, encoded once per schema: `"name":` for every field of the
//! page's schema, and of the nested rows' schemas (a change record's `before` / `after`),
//! so the names are not escaped again for every line. The bytes are exactly
//! [`faucet_core::value::json::write_object`]'s.

use std::sync::Arc;

use faucet_core::value::json::{write_str, write_value};
use faucet_core::{Schema, Value};

/// Per field of `schema`: `"name":` as [`write_str`] writes the name, with a leading `,`
/// after the first field, so a line is `{` + key + value + … + `}`.
pub(super) fn encoded_keys(schema: &Schema) -> Vec<Vec<u8>> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut key = Vec::with_capacity(f.name.len() + 4);
            if i > 0 {
                key.push(b',');
            }
            write_str(&mut key, &f.name);
            key.push(b':');
            key
        })
        .collect()
}

/// The encoded keys of the nested row schemas met so far (a change record's `before` and
/// `after` share their table's schema, so a page needs one or a few), so a nested row is
/// written as [`write_value`] writes it without escaping its field names again per row.
#[derive(Debug, Default)]
pub(super) struct NestedKeys {
    schemas: Vec<(Arc<Schema>, Vec<Vec<u8>>)>,
}

impl NestedKeys {
    /// The most schemas kept; past it the cache starts over (a stream of many tables).
    const MAX: usize = 16;

    /// Appends `value` as [`write_value`] does (the same bytes).
    pub(super) fn write_value(&mut self, out: &mut Vec<u8>, value: &Value) {
        let Value::Row(row) = value else {
            write_value(out, value);
            return;
        };
        let keys = self.keys(&row.schema);
        out.push(b'{');
        for (key, value) in keys.iter().zip(&row.values) {
            out.extend_from_slice(key);
            // Deeper rows (rare) go through the plain writer.
            write_value(out, value);
        }
        out.push(b'}');
    }

    fn keys(&mut self, schema: &Arc<Schema>) -> &[Vec<u8>] {
        let at = match self
            .schemas
            .iter()
            .position(|(s, _)| Arc::ptr_eq(s, schema))
        {
            Some(i) => i,
            None => match self.schemas.iter().position(|(s, _)| **s == **schema) {
                // An equal schema in another Arc: the next rows likely share this one.
                Some(i) => {
                    self.schemas[i].0 = schema.clone();
                    i
                }
                None => {
                    if self.schemas.len() >= Self::MAX {
                        self.schemas.clear();
                    }
                    self.schemas.push((schema.clone(), encoded_keys(schema)));
                    self.schemas.len() - 1
                }
            },
        };
        &self.schemas[at].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faucet_core::{DataType, Field};

    fn schema(names: &[&str]) -> Arc<Schema> {
        Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Text))
                .collect(),
        ))
    }

    #[test]
    fn nested_rows_are_written_as_write_value_writes_them() {
        let shared = schema(&["id", "na\"me", "tab\tle"]);
        let inner = schema(&["x"]);
        let deep = Value::row(inner, vec![Value::Int(7)]);
        let mut values = vec![
            Value::row(shared.clone(), vec![Value::Int(1), Value::Null, deep]),
            Value::row(shared.clone(), vec![Value::Int(2), Value::Text("b".into())]),
            // An equal schema in another Arc, then the first again.
            Value::row(
                schema(&["id", "na\"me", "tab\tle"]),
                vec![Value::Int(3), Value::Null, Value::Bool(true)],
            ),
            Value::row(shared, vec![Value::Int(4), Value::Null, Value::Null]),
            Value::Text("not a row".into()),
        ];
        // More schemas than the cache keeps.
        for i in 0..(NestedKeys::MAX * 2) {
            values.push(Value::row(
                schema(&[&format!("f{i}")]),
                vec![Value::Int(i as i64)],
            ));
        }
        let mut cache = NestedKeys::default();
        for value in values.iter().chain(values.iter()) {
            let (mut plain, mut cached) = (Vec::new(), Vec::new());
            write_value(&mut plain, value);
            cache.write_value(&mut cached, value);
            assert_eq!(String::from_utf8(cached), String::from_utf8(plain));
        }
    }
}
