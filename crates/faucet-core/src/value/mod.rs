//! Typed values, fields and schemas (docs/values.md).
//!
//! A [`Value`] keeps the type the source gave it, so a typed sink can create and fill typed
//! columns and JSON output stays exact: integers never pass through `f64`, a numeric keeps
//! exactly the digits the database gave, temporal values are already normalised text
//! (`2024-02-29T12:45:00.123456Z` for timestamptz), infinities and NaN are spelled out.
//! [`json`] writes values in the JSON form of docs/values.md.

pub mod json;
mod json_text;

use std::sync::Arc;

pub use json_text::Json;

/// The text of a [`Value::Text`], a [`Value::Numeric`] and the temporal variants
/// ([`Value::Date`] … [`Value::Interval`]): a string that keeps up to 24 bytes inline, so
/// short values (most CSV fields, keys, codes, decimals, dates, timestamps to the
/// millisecond, `…Z` to the second) cost no allocation; a longer one (a DATETIME(6) text is
/// 26 bytes) is one allocation, as a `String`. It derefs
/// to `str`; build it with `From<&str>` / `From<String>` (a `String` longer than 24 bytes
/// keeps its buffer). Currently `compact_str::CompactString`, re-exported so connectors
/// need no direct dependency.
pub type Text = compact_str::CompactString;

/// One typed value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// SQL NULL, a CSV null value; JSON `null`.
    Null,
    /// boolean.
    Bool(bool),
    /// smallint, integer, bigint: exact.
    Int(i64),
    /// real, double precision: JSON shortest round-trip; NaN and infinities as strings.
    Float(f64),
    /// numeric/decimal as the database spelled it (`"1.10"`, `"-0.0001"`, `"NaN"`,
    /// `"Infinity"`, `"-Infinity"`), a [`Text`] (up to 24 digits inline, no allocation).
    /// Build with [`Value::numeric`], which checks the shape.
    Numeric(Text),
    /// text, varchar, char, uuid, enum. A [`Text`]: up to 24 bytes are stored inline
    /// (no allocation), which is most CSV fields and keys; build with `"...".into()` or
    /// `String::into()`.
    Text(Text),
    /// bytea; JSON base64.
    Bytes(Vec<u8>),
    /// json, jsonb: the value as its compact JSON text (a [`Json`]: one allocation, numbers
    /// and key order exactly as the source gave them), embedded as itself in JSON output.
    Json(Json),
    /// date: `2024-02-29`, `infinity`, `-infinity`.
    Date(Text),
    /// timestamp without time zone: `2024-02-29T13:45:00.123456`.
    Timestamp(Text),
    /// timestamptz, in UTC: `2024-02-29T12:45:00.123456Z`.
    TimestampTz(Text),
    /// time: `13:45:00`.
    Time(Text),
    /// timetz: `13:45:00+01:00`.
    TimeTz(Text),
    /// A signed duration, as the source system writes it — one of two forms, both read by
    /// PostgreSQL's `interval` input:
    /// * PostgreSQL `interval`: an ISO 8601 duration, `P1Y2M3DT4H5M6.5S`;
    /// * MySQL/MariaDB `TIME(p)` (a duration up to ±838:59:59, not a time of day): MySQL's
    ///   own text, `[-]H:MM:SS[.f…]` with hours past 24 kept and p fraction digits,
    ///   `-838:59:59.000000` (the MySQL value table of docs/values.md).
    ///
    /// A sink for a system with another duration type says what it accepts (the `mysql` sink
    /// writes the MySQL form into `TIME` and refuses an ISO duration there, naming the row
    /// and column).
    Interval(Text),
    /// An array; elements follow the same rules. Multi-dimensional arrays nest.
    Array(Vec<Value>),
    /// A nested row with its own schema (a change record's `before` / `after`): the schema
    /// shared, the values in one allocation of their own ([`Row`] is 24 bytes, so it fits
    /// the value's size).
    Row(Row),
}

// A page holds batch_size × fields values: their size is the page's memory.
const _: () = assert!(std::mem::size_of::<Value>() == 32);

/// A nested row: a schema and one value per field, in the schema's order. One allocation
/// (the values); the schema is shared with the other rows of its table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The field names and types.
    pub schema: Arc<Schema>,
    /// One value per field of `schema`.
    pub values: Box<[Value]>,
}

impl Value {
    /// A numeric from its decimal text. Accepts an optional sign, digits with an optional
    /// fraction and exponent, and `NaN`, `Infinity`, `-Infinity`.
    ///
    /// # Errors
    /// Returns the text back when it is not a decimal number.
    pub fn numeric(text: &str) -> Result<Self, String> {
        if is_decimal_text(text) || matches!(text, "NaN" | "Infinity" | "-Infinity") {
            Ok(Self::Numeric(Text::from(text)))
        } else {
            Err(text.to_owned())
        }
    }

    /// A json value from a `serde_json` tree, held as its compact text
    /// ([`Json::from_value`]).
    pub fn json(value: serde_json::Value) -> Self {
        Self::Json(Json::from_value(&value))
    }

    /// A nested row of `values`, one per field of `schema`. Give a `Vec` whose capacity is
    /// its length (`Vec::with_capacity(schema.len())`, or `collect` from an exact-size
    /// iterator), and its buffer becomes the row's without a copy.
    pub fn row(schema: Arc<Schema>, values: Vec<Value>) -> Self {
        Self::Row(Row {
            schema,
            values: values.into_boxed_slice(),
        })
    }

    /// The value's type, for a sink that creates columns.
    pub fn data_type(&self) -> DataType {
        match self {
            Self::Null => DataType::Unknown,
            Self::Bool(_) => DataType::Bool,
            Self::Int(_) => DataType::Int,
            Self::Float(_) => DataType::Float,
            Self::Numeric(_) => DataType::Numeric,
            Self::Text(_) => DataType::Text,
            Self::Bytes(_) => DataType::Bytes,
            Self::Json(_) => DataType::Json,
            Self::Date(_) => DataType::Date,
            Self::Timestamp(_) => DataType::Timestamp,
            Self::TimestampTz(_) => DataType::TimestampTz,
            Self::Time(_) => DataType::Time,
            Self::TimeTz(_) => DataType::TimeTz,
            Self::Interval(_) => DataType::Interval,
            Self::Array(items) => DataType::Array(Box::new(
                items
                    .iter()
                    .map(Value::data_type)
                    .find(|t| *t != DataType::Unknown)
                    .unwrap_or(DataType::Unknown),
            )),
            Self::Row(_) => DataType::Json,
        }
    }

    /// Whether this is [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }
}

/// `-?digits(.digits)?([eE][+-]?digits)?` — the JSON number grammar, also accepting a leading
/// zero run (`007`) is *not* allowed, as in JSON.
fn is_decimal_text(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    if b.first() == Some(&b'-') {
        i = 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_len = i - int_start;
    if int_len == 0 || (int_len > 1 && b[int_start] == b'0') {
        return false;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == frac_start {
            return false;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let exp_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == exp_start {
            return false;
        }
    }
    i == b.len()
}

/// The type of a field, as far as the source knows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataType {
    /// Not known (a CSV column without a declared type reads as [`DataType::Text`]).
    Unknown,
    /// boolean
    Bool,
    /// 64-bit integer
    Int,
    /// 64-bit float
    Float,
    /// arbitrary-precision decimal
    Numeric,
    /// text
    Text,
    /// bytes
    Bytes,
    /// json / jsonb
    Json,
    /// date
    Date,
    /// timestamp without time zone
    Timestamp,
    /// timestamp with time zone
    TimestampTz,
    /// time
    Time,
    /// time with time zone
    TimeTz,
    /// interval
    Interval,
    /// array of the element type
    Array(Box<DataType>),
}

/// A named, typed field of a [`Schema`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field {
    /// The field name, as the source gave it.
    pub name: String,
    /// Its type.
    pub data_type: DataType,
}

impl Field {
    /// A field named `name` of type `data_type`.
    pub fn new(name: impl Into<String>, data_type: DataType) -> Self {
        Self {
            name: name.into(),
            data_type,
        }
    }
}

/// The ordered fields shared by every record of a page (field names are not allocated again
/// for every row).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Schema {
    fields: Vec<Field>,
}

impl Schema {
    /// A schema of `fields`, in order.
    pub fn new(fields: Vec<Field>) -> Self {
        Self { fields }
    }

    /// The fields in order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The field names in order (the columns a page of this schema writes, as messages list
    /// them).
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + Clone + '_ {
        self.fields.iter().map(|f| f.name.as_str())
    }

    /// The number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The position of the field called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_stays_small() {
        // A page holds batch_size × fields values: their size is the page's memory.
        assert!(
            std::mem::size_of::<Value>() <= 32,
            "{}",
            std::mem::size_of::<Value>()
        );
    }

    #[test]
    fn numeric_accepts_decimal_text_and_specials_only() {
        for ok in [
            "0",
            "1.10",
            "-0.0001",
            "12345678901234567890.123456789",
            "1e-45",
            "NaN",
            "Infinity",
            "-Infinity",
        ] {
            assert!(Value::numeric(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-", "1.", ".5", "01", "1e", "abc", "1,5", "+1", "nan"] {
            assert!(Value::numeric(bad).is_err(), "{bad}");
        }
    }
}
