//! [`CsvSourceConfig`]: the `csv` source's configuration, its column types and `validate()`.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;

use faucet_core::{DataType, FaucetError};

use crate::files::last_line::{UnterminatedLastLine, default_max_bytes};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Configuration of the `csv` source (`type: csv`).
///
/// ```yaml
/// source:
///   type: csv
///   config:
///     path: ./weather.csv
///     null_values: ["", "NA"]
///     columns: { year: int, temp: float, time_hour: timestamptz }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvSourceConfig {
    /// The CSV file. A relative path is relative to the process's current directory (the
    /// CLI resolves it against the config file's directory first). A `*` in the file name
    /// (`exports/orders-*.csv`, not in a directory) reads every matching file of the
    /// directory in name order, each with its own header; a later file may add columns.
    pub path: PathBuf,
    /// Whether the first record holds the column names. Default `true`. A UTF-8 byte order
    /// mark at byte 0 is never part of the first name. Without a header, `columns` must
    /// name the columns in file order.
    #[serde(default = "default_has_header")]
    pub has_header: bool,
    /// The field separator: one ASCII character. Default `","`.
    #[serde(default = "default_delimiter")]
    pub delimiter: String,
    /// The quote character: one ASCII character, other than the delimiter. Default `"\""`.
    /// Inside a quoted field a doubled quote is one quote; delimiters and line breaks
    /// (LF, CRLF) are data (RFC 4180).
    #[serde(default = "default_quote")]
    pub quote: String,
    /// Field texts that mean null, e.g. `["", "NA"]`. Default `[]` (nothing is null).
    /// Only an *unquoted* field is compared, as PostgreSQL's `COPY ... CSV` does: a quoted
    /// `""` stays the empty string.
    #[serde(default)]
    pub null_values: Vec<String>,
    /// Column types by name, as a map (`{id: int, name: string}`) or a list (`[id, {amount:
    /// numeric}]`, a bare name is a string). Columns not listed are strings. With a header,
    /// every listed name must be in it; without one, the list (or the map, in its order)
    /// names every column in file order. With a `path` pattern, a listed name may be
    /// missing from a file's header (it may come in a later file; a run warns when no
    /// matching file has it).
    #[serde(default)]
    pub columns: Option<Columns>,
    /// What to do with a last record that does not end in a line break: `wait` (the
    /// default: not read until it has one, so a file still being written is never read
    /// half-way) or `read` (the file is complete; read it as the last record). See
    /// [`UnterminatedLastLine`]. A quoted field still open at the end of the file (a field
    /// spanning lines, half written) is held back with `wait`, an error naming the line of
    /// its quote with `read`.
    #[serde(default)]
    pub unterminated_last_line: UnterminatedLastLine,
    /// The longest field, in bytes after unquoting; a longer one is an error naming
    /// `file:line` and the column (it is usually a quote never closed). Default 16 MiB
    /// (16777216); memory for one record stays within a few times this.
    #[serde(default = "default_max_bytes")]
    pub max_field_bytes: u64,
}

fn default_has_header() -> bool {
    true
}

fn default_delimiter() -> String {
    ",".to_owned()
}

fn default_quote() -> String {
    "\"".to_owned()
}

impl CsvSourceConfig {
    /// A configuration reading `path` with every other field at its default.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            has_header: default_has_header(),
            delimiter: default_delimiter(),
            quote: default_quote(),
            null_values: Vec::new(),
            columns: None,
            unterminated_last_line: UnterminatedLastLine::default(),
            max_field_bytes: default_max_bytes(),
        }
    }

    /// Checks the configuration without touching the file system.
    ///
    /// # Errors
    /// [`FaucetError::Config`] with `field` one of `path`, `delimiter`, `quote`, `columns`,
    /// `max_field_bytes` (relative names; the CLI prefixes them) and what would be right.
    pub fn validate(&self) -> Result<(), FaucetError> {
        if self.path.as_os_str().is_empty() {
            return Err(FaucetError::config("path", "must name a CSV file"));
        }
        if self
            .path
            .parent()
            .is_some_and(|d| d.to_string_lossy().contains('*'))
        {
            return Err(FaucetError::config(
                "path",
                "may hold `*` in its file name only (`exports/orders-*.csv`), not in a \
                 directory",
            ));
        }
        if self.max_field_bytes == 0 {
            return Err(FaucetError::config(
                "max_field_bytes",
                "must be at least 1 (the default is 16777216, 16 MiB)",
            ));
        }
        let delimiter = one_ascii_char("delimiter", &self.delimiter)?;
        let quote = one_ascii_char("quote", &self.quote)?;
        if delimiter == quote {
            return Err(FaucetError::config(
                "quote",
                format!("must differ from the delimiter (both are {:?})", self.quote),
            ));
        }
        match &self.columns {
            Some(columns) => columns.validate()?,
            None if !self.has_header => {
                return Err(FaucetError::config(
                    "columns",
                    "is required when has_header is false: list the column names in file \
                     order, e.g. [id, name, {amount: numeric}]",
                ));
            }
            None => {}
        }
        if !self.has_header && self.columns.as_ref().is_some_and(|c| c.is_empty()) {
            return Err(FaucetError::config(
                "columns",
                "must name at least one column when has_header is false",
            ));
        }
        Ok(())
    }

    /// The delimiter byte (after [`CsvSourceConfig::validate`]).
    pub(super) fn delimiter_byte(&self) -> Result<u8, FaucetError> {
        one_ascii_char("delimiter", &self.delimiter)
    }

    /// The quote byte (after [`CsvSourceConfig::validate`]).
    pub(super) fn quote_byte(&self) -> Result<u8, FaucetError> {
        one_ascii_char("quote", &self.quote)
    }
}

fn one_ascii_char(field: &str, value: &str) -> Result<u8, FaucetError> {
    match value.as_bytes() {
        [b] if b.is_ascii() && *b != b'\n' && *b != b'\r' => Ok(*b),
        _ => Err(FaucetError::config(
            field,
            format!("must be exactly one ASCII character other than a line break, got {value:?}"),
        )),
    }
}

/// The type a CSV column's text is read as. Names are lower case in config; aliases are
/// given for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    /// The text as is (the default) (alias `text`) → `Value::Text`.
    #[serde(alias = "text")]
    String,
    /// A 64-bit integer (`-42`, `+7`) (aliases `integer`, `bigint`) → `Value::Int`.
    #[serde(alias = "integer", alias = "bigint")]
    Int,
    /// A 64-bit float (`1.5`, `2e-3`, `NaN`, `inf`) (alias `double`) → `Value::Float`; a
    /// finite number beyond its range (`1e400`, `1e-400`) is an error, not an infinity or 0.
    #[serde(alias = "double")]
    Float,
    /// An exact decimal, digits kept as written (`1.10`, `-0.0001`, `1e-18`, `NaN`,
    /// `Infinity`) (alias `decimal`) → `Value::Numeric`.
    #[serde(alias = "decimal")]
    Numeric,
    /// `true`/`false`, `t`/`f`, `yes`/`no`, `y`/`n`, `on`/`off`, `1`/`0`, any case (the
    /// spellings PostgreSQL accepts) (alias `boolean`) → `Value::Bool`.
    #[serde(alias = "boolean")]
    Bool,
    /// `YYYY-MM-DD`, `infinity`, `-infinity` → `Value::Date`. Years outside 1–9999 in ISO
    /// 8601's expanded form with astronomical numbering (`-4712-01-01` is 4713 BC,
    /// `0000-01-01` 1 BC, `+10000-01-01`; −262143 to +262142), as the PostgreSQL sources
    /// give them; the same for the two timestamp types.
    Date,
    /// `YYYY-MM-DD HH:MM:SS[.fraction]` (or with `T`), no offset → `Value::Timestamp`,
    /// normalised to `2024-02-29T13:45:00.123456`.
    Timestamp,
    /// RFC 3339 or `YYYY-MM-DD HH:MM:SS[.fraction]±HH[:MM]`, an offset required →
    /// `Value::TimestampTz` in UTC, `2024-02-29T12:45:00.123456Z`.
    Timestamptz,
    /// A JSON document → `Value::Json`.
    Json,
}

impl ColumnType {
    /// The [`DataType`] of values of this column.
    pub fn data_type(self) -> DataType {
        match self {
            Self::String => DataType::Text,
            Self::Int => DataType::Int,
            Self::Float => DataType::Float,
            Self::Numeric => DataType::Numeric,
            Self::Bool => DataType::Bool,
            Self::Date => DataType::Date,
            Self::Timestamp => DataType::Timestamp,
            Self::Timestamptz => DataType::TimestampTz,
            Self::Json => DataType::Json,
        }
    }
}

/// Column names with their types, in the order written in the config.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Columns(Vec<(String, ColumnType)>);

impl Columns {
    /// Columns from `(name, type)` pairs, in file order when the file has no header.
    pub fn new(columns: impl IntoIterator<Item = (String, ColumnType)>) -> Self {
        Self(columns.into_iter().collect())
    }

    /// The `(name, type)` pairs in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, ColumnType)> + '_ {
        self.0.iter().map(|(n, t)| (n.as_str(), *t))
    }

    /// The type declared for `name`.
    pub fn get(&self, name: &str) -> Option<ColumnType> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, t)| *t)
    }

    /// The number of columns.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no column is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn validate(&self) -> Result<(), FaucetError> {
        let mut seen = HashSet::new();
        for (name, _) in &self.0 {
            if name.is_empty() {
                return Err(FaucetError::config("columns", "a column name is empty"));
            }
            if !seen.insert(name.as_str()) {
                return Err(FaucetError::config(
                    "columns",
                    format!("the column `{name}` is listed twice"),
                ));
            }
        }
        Ok(())
    }
}

impl Serialize for Columns {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, ty) in &self.0 {
            map.serialize_entry(name, ty)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Columns {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ColumnsVisitor)
    }
}

struct ColumnsVisitor;

impl<'de> Visitor<'de> for ColumnsVisitor {
    type Value = Columns;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of column name to type, or a list of names and {name: type} maps")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Columns, A::Error> {
        let mut out = Vec::new();
        while let Some((name, ty)) = map.next_entry::<String, ColumnType>()? {
            out.push((name, ty));
        }
        Ok(Columns(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Columns, A::Error> {
        let mut out = Vec::new();
        while let Some(ColumnItem(name, ty)) = seq.next_element()? {
            out.push((name, ty));
        }
        Ok(Columns(out))
    }
}

/// One list item: `name` (a string column) or `{name: type}`.
struct ColumnItem(String, ColumnType);

impl<'de> Deserialize<'de> for ColumnItem {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ColumnItemVisitor)
    }
}

struct ColumnItemVisitor;

impl<'de> Visitor<'de> for ColumnItemVisitor {
    type Value = ColumnItem;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a column name, or a map of one column name to its type")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<ColumnItem, E> {
        Ok(ColumnItem(name.to_owned(), ColumnType::String))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ColumnItem, A::Error> {
        let Some((name, ty)) = map.next_entry::<String, ColumnType>()? else {
            return Err(de::Error::custom("an empty map: expected {name: type}"));
        };
        if map.next_key::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::custom(format!(
                "`{name}`: a list item maps exactly one column name to its type; write one \
                 item per column"
            )));
        }
        Ok(ColumnItem(name, ty))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faucet_core::testing::config_field as field_of;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<CsvSourceConfig, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_column_forms() {
        let c = parse(json!({"path": "a.csv"})).expect("config");
        assert_eq!(c, CsvSourceConfig::new("a.csv"));
        assert!(c.has_header);
        assert_eq!((c.delimiter.as_str(), c.quote.as_str()), (",", "\""));
        c.validate().expect("valid");

        let c = parse(json!({"path": "a.csv", "columns": {"b": "int", "a": "numeric"}}))
            .expect("config");
        let cols: Vec<_> = c.columns.as_ref().expect("columns").iter().collect();
        assert_eq!(
            cols,
            [("b", ColumnType::Int), ("a", ColumnType::Numeric)],
            "map order is kept"
        );

        let c = parse(json!({"path": "a.csv", "has_header": false,
            "columns": ["id", {"amount": "decimal"}, {"at": "timestamptz"}]}))
        .expect("config");
        let cols: Vec<_> = c.columns.as_ref().expect("columns").iter().collect();
        assert_eq!(
            cols,
            [
                ("id", ColumnType::String),
                ("amount", ColumnType::Numeric),
                ("at", ColumnType::Timestamptz)
            ]
        );
        c.validate().expect("valid");
    }

    #[test]
    fn bad_configs_name_the_field() {
        assert!(parse(json!({"path": "a.csv", "delimeter": ";"})).is_err());
        assert!(parse(json!({"path": "a.csv", "columns": {"a": "money"}})).is_err());
        assert!(parse(json!({"path": "a.csv", "columns": [{"a": "int", "b": "int"}]})).is_err());
        let mut c = CsvSourceConfig::new("");
        assert_eq!(field_of(c.validate().expect_err("empty path")), "path");
        c.path = "a.csv".into();
        for bad in ["", ";;", "é", "\n"] {
            c.delimiter = bad.into();
            assert_eq!(field_of(c.validate().expect_err(bad)), "delimiter");
        }
        c.delimiter = "\"".into();
        assert_eq!(field_of(c.validate().expect_err("same")), "quote");
        c.delimiter = ";".into();
        c.quote = "''".into();
        assert_eq!(field_of(c.validate().expect_err("quote")), "quote");
        c.quote = "'".into();
        c.validate().expect("valid");
        c.has_header = false;
        assert_eq!(field_of(c.validate().expect_err("no names")), "columns");
        c.columns = Some(Columns::new([
            ("a".to_owned(), ColumnType::Int),
            ("a".to_owned(), ColumnType::Int),
        ]));
        assert_eq!(field_of(c.validate().expect_err("dup")), "columns");
    }
}
