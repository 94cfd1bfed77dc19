//! How the postgres sink applies change records: through the one contract of
//! [`faucet_core::change`] (recognising a change page, collapsing it to the final operation
//! per key), with the key identity the target holds: a key's COPY text after the sink's
//! U+0000 policy, so keys that differ only by U+0000 are one key once it is stripped.

use faucet_core::change::{self, Collapsed, KeyIdentity};
use faucet_core::{FaucetError, Page, Value};

use super::encode::write_copy_value;
use super::nul::{NulBytes, cleaned, holds_nul};
use crate::postgres::config::CONNECTOR;

/// Whether `page` holds change records rather than plain rows.
pub(crate) fn is_change_page(page: &Page) -> bool {
    change::ChangeLayout::of(page.schema()).is_some()
}

/// Collapses `page` by `key` ([`faucet_core::change::collapse`]), telling keys apart as the
/// target will hold them under the `nul` policy. `source_table` remembers the `table` of the
/// change records seen by this writer: one sink table takes the changes of one source table.
///
/// # Errors
/// [`FaucetError::Data`] naming the page row when a record lacks a key column, has an
/// unknown `op`, or comes from another source table than earlier records.
pub(crate) fn collapse<'a>(
    page: &'a Page,
    key: &[String],
    target: &str,
    source_table: &mut Option<String>,
    nul: NulBytes,
) -> Result<Collapsed<'a>, FaucetError> {
    let mut ids = KeyIds::new(nul);
    change::collapse(page, key, CONNECTOR, target, source_table, &mut ids)
}

/// Key identities, as the target will hold them: for collapsing, and for parting a snapshot
/// page between two sessions ([`super::snapshot_copy`]).
pub(crate) struct KeyIds {
    scratch: Vec<u8>,
    /// The sink's U+0000 policy: keys that differ only by U+0000 are one key once it is
    /// stripped or replaced (`x\0` and `x` under `strip`).
    nul: NulBytes,
}

impl KeyIds {
    /// Key identities under the sink's U+0000 policy `nul`.
    pub(crate) fn new(nul: NulBytes) -> Self {
        Self {
            scratch: Vec::new(),
            nul,
        }
    }
}

impl KeyIdentity for KeyIds {
    /// The key's COPY text (types and all), after the NUL policy, fields split by a tab.
    fn identify(&mut self, key: &[&Value], out: &mut Vec<u8>) {
        for (i, v) in key.iter().enumerate() {
            if i > 0 {
                out.push(b'\t');
            }
            if self.nul != NulBytes::Fail && holds_nul(v) {
                write_copy_value(out, &cleaned(v, self.nul), &mut self.scratch);
            } else {
                write_copy_value(out, v, &mut self.scratch);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use faucet_core::{DataType, Field, PageBuilder, Schema};

    use super::*;

    #[test]
    fn keys_that_differ_only_by_nul_are_one_key_once_it_is_stripped() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Text),
            Field::new("v", DataType::Text),
        ]));
        let mut b = PageBuilder::new(schema, 2);
        b.push_row([Value::Text("x\0".into()), Value::Text("a".into())]);
        b.push_row([Value::Text("x".into()), Value::Text("b".into())]);
        let page = b.finish(None);
        for (policy, slots) in [
            (NulBytes::Fail, 2),
            (NulBytes::Strip, 1),
            (NulBytes::Replace, 2),
        ] {
            let c = collapse(&page, &["id".into()], "t", &mut None, policy).expect("collapse");
            assert_eq!(c.slots.len(), slots, "{policy:?}");
        }
    }

    #[test]
    fn the_sink_names_itself_when_a_second_source_table_arrives() {
        let schema = faucet_core::change::record_schema(Vec::new(), Vec::new());
        let after = Value::row(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int)])),
            vec![Value::Int(1)],
        );
        let mut b = PageBuilder::new(schema, 1);
        b.push_row([
            Value::Text("c".into()),
            Value::Text("public.device".into()),
            Value::Null,
            Value::Null,
            after,
        ]);
        let page = b.finish(None);
        let mut seen = Some("public.other".to_owned());
        let err = collapse(&page, &["id".into()], "t", &mut seen, NulBytes::Fail)
            .expect_err("two source tables");
        assert!(
            err.to_string()
                .contains("the postgres sink writes one table"),
            "{err}"
        );
    }
}
