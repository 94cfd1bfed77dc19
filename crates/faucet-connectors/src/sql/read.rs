//! A SQL read's configuration rules, the same for every system: exactly one of `table` and
//! `query`; `replication_key` required by `incremental` and refused by `full_table`, each
//! column once; no NUL in a query's text; the warning that a query's key cannot be checked for uniqueness.

use serde::Deserialize;

use faucet_core::FaucetError;

/// How a SQL query source (`postgres`, `mysql`) reads: the seeds' `replication_method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicationMethod {
    /// Every run reads the whole table or query. The bookmark marks a finished read
    /// (`{"full_table":"done"}`); a table with a primary key is read in key order and every
    /// page's bookmark holds the last key read, so a crash mid-table resumes mid-table.
    #[default]
    FullTable,
    /// Each run reads the rows whose `replication_key` tuple is above the bookmark's, in
    /// that order, and every page's bookmark holds the last tuple read.
    Incremental,
}

/// What a read reads: a validated table name of the system (`T`), or a query.
#[derive(Debug, Clone)]
pub enum Target<T> {
    /// A table; its primary key can order a full read.
    Table(T),
    /// A query (no trailing `;`), read as a derived table.
    Query(String),
}

/// The read fields of a query source's config, as written.
pub(crate) struct ReadFields<'a> {
    /// `table`.
    pub(crate) table: Option<&'a str>,
    /// `query`.
    pub(crate) query: Option<&'a str>,
    /// `replication_method`.
    pub(crate) method: ReplicationMethod,
    /// `replication_key`.
    pub(crate) replication_key: &'a [String],
}

impl ReadFields<'_> {
    /// Checks the fields without I/O and returns the target, parsing a table name with the
    /// system's `parse_table(text, field)` and each key column with its
    /// `validate_column(name, field)`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field relative to the source's config (`table`,
    /// `query`, `replication_key`, `replication_key[1]`).
    pub(crate) fn validate<T>(
        &self,
        parse_table: impl FnOnce(&str, &str) -> Result<T, FaucetError>,
        validate_column: impl Fn(&str, &str) -> Result<(), FaucetError>,
    ) -> Result<Target<T>, FaucetError> {
        let target = match (self.table, self.query) {
            (Some(t), None) => Target::Table(parse_table(t, "table")?),
            (None, Some(q)) => {
                let q = q.trim().trim_end_matches(';').trim();
                if q.is_empty() {
                    return Err(FaucetError::config("query", "is empty"));
                }
                // Neither server's protocol carries a NUL inside a statement's text (the
                // PostgreSQL wire ends a string at it: "insufficient data left in message").
                if q.contains('\0') {
                    return Err(FaucetError::config(
                        "query",
                        "contains a NUL character (`\\0`), which no SQL server accepts in a \
                         statement's text; remove it",
                    ));
                }
                Target::Query(q.to_owned())
            }
            (Some(_), Some(_)) => {
                return Err(FaucetError::config(
                    "query",
                    "give either `table` or `query`, not both",
                ));
            }
            (None, None) => {
                return Err(FaucetError::config(
                    "table",
                    "one of `table` or `query` is required",
                ));
            }
        };
        match self.method {
            ReplicationMethod::Incremental if self.replication_key.is_empty() => {
                return Err(FaucetError::config(
                    "replication_key",
                    "is required for `replication_method: incremental`, e.g. \
                     `[updated_at, id]` (end it with the primary key so it is unique)",
                ));
            }
            ReplicationMethod::FullTable if !self.replication_key.is_empty() => {
                return Err(FaucetError::config(
                    "replication_key",
                    "is only used by `replication_method: incremental`; remove it or \
                     switch to incremental",
                ));
            }
            _ => {}
        }
        super::write::distinct_columns(self.replication_key, "replication_key", validate_column)?;
        Ok(target)
    }

    /// Warnings a user should see without connecting (`faucet validate`): an incremental
    /// read of a query, whose key cannot be checked for uniqueness.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.method == ReplicationMethod::Incremental && self.query.is_some() {
            out.push(format!(
                "replication_key {:?} orders a query, whose uniqueness cannot be checked: if \
                 two rows can share a key tuple, a resumed read may deliver some of them \
                 again; end the key with a unique column (the primary key)",
                self.replication_key
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(
        table: Option<&'a str>,
        query: Option<&'a str>,
        method: ReplicationMethod,
        key: &'a [String],
    ) -> ReadFields<'a> {
        ReadFields {
            table,
            query,
            method,
            replication_key: key,
        }
    }

    fn field_of(f: &ReadFields<'_>) -> String {
        match f.validate(|t, _| Ok(t.to_owned()), |_, _| Ok(())) {
            Err(FaucetError::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn each_rule_names_its_field() {
        let key = vec!["a".to_owned(), "a".to_owned()];
        let none: &[String] = &[];
        use ReplicationMethod::*;
        assert_eq!(field_of(&fields(None, None, FullTable, none)), "table");
        assert_eq!(
            field_of(&fields(Some("t"), Some("q"), FullTable, none)),
            "query"
        );
        assert_eq!(
            field_of(&fields(None, Some(" ; "), FullTable, none)),
            "query"
        );
        assert_eq!(
            field_of(&fields(None, Some("select 1\0"), FullTable, none)),
            "query"
        );
        assert_eq!(
            field_of(&fields(Some("t"), None, Incremental, none)),
            "replication_key"
        );
        assert_eq!(
            field_of(&fields(Some("t"), None, FullTable, &key[..1])),
            "replication_key"
        );
        assert_eq!(
            field_of(&fields(Some("t"), None, Incremental, &key)),
            "replication_key[1]"
        );
    }

    #[test]
    fn a_query_loses_its_trailing_semicolon_and_its_key_warns() {
        let key = vec!["id".to_owned()];
        let f = fields(
            None,
            Some(" SELECT 1 ;; "),
            ReplicationMethod::Incremental,
            &key,
        );
        let target = f
            .validate(|t, _| Ok(t.to_owned()), |_, _| Ok(()))
            .expect("a value");
        assert!(matches!(target, Target::Query(q) if q == "SELECT 1"));
        assert_eq!(f.warnings().len(), 1);
        let table = fields(Some("t"), None, ReplicationMethod::Incremental, &key);
        assert!(table.warnings().is_empty());
    }
}
