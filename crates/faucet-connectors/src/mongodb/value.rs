//! The BSON → faucet value mapping, the one definition every MongoDB read path uses (the
//! change stream's documents, their keys, `updateDescription`).
//!
//! | BSON | faucet value | JSON (jsonl) |
//! |---|---|---|
//! | Double | `Float` | shortest round-trip number; NaN, ±Inf as `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | String, Symbol | `Text` | string |
//! | Document | `Row` (the document's own fields, in its order) | object |
//! | Array | `Array` | array |
//! | Binary, subtype 0 (generic) or 2 (old binary) | `Bytes` | base64 string |
//! | Binary, subtype 4 (UUID), 16 bytes | `Text`, the canonical UUID form | `"0f8fad5b-d9cb-469f-a165-70867728950e"` |
//! | Binary, any other subtype (1, 3, 5–8, 0x80–0xff) | `Json`, Extended JSON | `{"$binary":{"base64":"…","subType":"05"}}` |
//! | ObjectId | `Text`, 24 lower-case hex digits | `"65f1c0ffee00000000000001"` |
//! | Boolean | `Bool` | `true` / `false` |
//! | Date | `TimestampTz`, milliseconds, UTC, ISO 8601 with expanded years | `"2024-02-29T12:45:00.123Z"`, `"1969-07-20T20:17:40.000Z"`, `"+10000-01-01T00:00:00.000Z"`, `"-0001-12-31T23:59:59.999Z"` |
//! | Null | `Null` | `null` (a field that is missing is absent from its document) |
//! | Undefined (deprecated) | `Null` | `null` |
//! | Regex | `Json`, Extended JSON | `{"$regularExpression":{"pattern":"^a","options":"i"}}` |
//! | JavaScript code | `Json`, Extended JSON | `{"$code":"function(){}"}` |
//! | JavaScript code with scope | `Json`, Extended JSON | `{"$code":"…","$scope":{…}}` |
//! | Int32, Int64 | `Int`, exact | number |
//! | Timestamp | `Json`, Extended JSON | `{"$timestamp":{"t":1700000000,"i":1}}` |
//! | Decimal128 | `Numeric`, exactly its digits (`1.10`, `-0`, `1.0E+3`, `NaN`, `Infinity`) | number (a string for NaN, ±Infinity) |
//! | MinKey, MaxKey | `Json`, Extended JSON | `{"$minKey":1}`, `{"$maxKey":1}` |
//! | DBPointer (deprecated) | `Json`, Extended JSON | `{"$dbPointer":{…}}` |
//!
//! Documents are schemaless: every document becomes a [`Value::Row`] with a schema of its own
//! (its field names in its order, each typed by its value), so one page holds documents of
//! any shape side by side in its `before` / `after` fields, and a document that lacks a field
//! (missing) is told apart from one that holds null. The Extended JSON forms are MongoDB's
//! canonical ones (the `bson` crate's `into_canonical_extjson`), so a type that has no faucet
//! counterpart is kept with its type, not flattened into a string.

use std::sync::Arc;

use faucet_core::value::{Field, Schema, Text, Value};
use mongodb::bson::{Bson, Document, spec::BinarySubtype};

/// A document as a [`Value::Row`] of its fields, in the document's order (see the module's
/// table for each field's value).
pub fn document(doc: Document) -> Value {
    let mut fields = Vec::with_capacity(doc.len());
    let mut values = Vec::with_capacity(doc.len());
    for (name, bson) in doc {
        let value = value(bson);
        fields.push(Field::new(name, value.data_type()));
        values.push(value);
    }
    Value::row(Arc::new(Schema::new(fields)), values)
}

/// One BSON value as a faucet [`Value`], by the module's table.
pub fn value(bson: Bson) -> Value {
    match bson {
        Bson::Double(f) => Value::Float(f),
        Bson::String(s) | Bson::Symbol(s) => Value::Text(s.into()),
        Bson::Document(doc) => document(doc),
        Bson::Array(items) => Value::Array(items.into_iter().map(value).collect()),
        Bson::Boolean(b) => Value::Bool(b),
        Bson::Null | Bson::Undefined => Value::Null,
        Bson::Int32(i) => Value::Int(i64::from(i)),
        Bson::Int64(i) => Value::Int(i),
        Bson::ObjectId(oid) => Value::Text(oid.to_hex().into()),
        Bson::DateTime(at) => Value::TimestampTz(date_text(at.timestamp_millis())),
        // The spec's string form is a decimal number (`1.0E+3`, `-0`) or NaN/±Infinity, all
        // of which `Value::numeric` accepts.
        Bson::Decimal128(d) => {
            Value::numeric(&d.to_string()).unwrap_or_else(|text| Value::Text(text.into()))
        }
        Bson::Binary(bin) => match bin.subtype {
            BinarySubtype::Generic | BinarySubtype::BinaryOld => Value::Bytes(bin.bytes),
            BinarySubtype::Uuid if bin.bytes.len() == 16 => Value::Text(uuid_text(&bin.bytes)),
            _ => extended_json(Bson::Binary(bin)),
        },
        other @ (Bson::RegularExpression(_)
        | Bson::JavaScriptCode(_)
        | Bson::JavaScriptCodeWithScope(_)
        | Bson::Timestamp(_)
        | Bson::MaxKey
        | Bson::MinKey
        | Bson::DbPointer(_)) => extended_json(other),
    }
}

/// The canonical Extended JSON of a value that has no faucet counterpart, as [`Value::Json`].
fn extended_json(bson: Bson) -> Value {
    Value::json(bson.into_canonical_extjson())
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` of 16 bytes.
fn uuid_text(bytes: &[u8]) -> Text {
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out.into()
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A BSON date (milliseconds since the Unix epoch, any `i64`) as UTC ISO 8601 text with
/// three fraction digits; years outside 0000–9999 in the expanded form (`+10000`, `-0001`:
/// astronomical numbering, 1 BC is year 0), which PostgreSQL's `timestamptz` input also
/// reads within its range.
pub fn date_text(millis: i64) -> Text {
    let days = millis.div_euclid(86_400_000);
    let ms_of_day = millis.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, ms) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    );
    let year = if year < 0 {
        format!("-{:04}", -year)
    } else if year > 9999 {
        format!("+{year}")
    } else {
        format!("{year:04}")
    };
    format!("{year}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{ms:03}Z").into()
}

/// The proleptic Gregorian (year, month, day) of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, exact for every `i64` day count a BSON date can give).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = i128::from(days) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i128::from(month <= 2);
    // |year| < 2^40 for |days| < 2^63 / 86_400_000 · 400: fits an i64.
    (
        i64::try_from(year).unwrap_or(i64::MAX),
        i64::try_from(month).unwrap_or(1),
        i64::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{
        Binary, DateTime, Decimal128, JavaScriptCodeWithScope, Regex, Timestamp, doc, oid::ObjectId,
    };

    /// The JSON text faucet writes for `bson`.
    fn json(bson: Bson) -> String {
        let schema = Schema::new(vec![Field::new("v", faucet_core::value::DataType::Unknown)]);
        let mut out = Vec::new();
        faucet_core::value::json::write_object(&mut out, &schema, &[value(bson)]);
        let text = String::from_utf8(out).expect("utf-8");
        text.strip_prefix("{\"v\":")
            .and_then(|t| t.strip_suffix('}'))
            .expect("one field")
            .to_owned()
    }

    #[test]
    fn object_ids_are_their_hex() {
        let oid = ObjectId::parse_str("65f1c0ffee00000000000001").expect("oid");
        assert_eq!(
            value(Bson::ObjectId(oid)),
            Value::Text("65f1c0ffee00000000000001".into())
        );
        assert_eq!(json(Bson::ObjectId(oid)), r#""65f1c0ffee00000000000001""#);
    }

    #[test]
    fn integers_are_exact() {
        assert_eq!(value(Bson::Int32(i32::MIN)), Value::Int(-2_147_483_648));
        assert_eq!(value(Bson::Int64(i64::MAX)), Value::Int(i64::MAX));
        assert_eq!(json(Bson::Int64(9_007_199_254_740_993)), "9007199254740993");
    }

    #[test]
    fn doubles_are_shortest_and_specials_are_strings() {
        assert_eq!(json(Bson::Double(0.1)), "0.1");
        assert_eq!(json(Bson::Double(1e300)), "1e+300");
        assert_eq!(json(Bson::Double(-0.0)), "-0.0");
        assert_eq!(json(Bson::Double(f64::NAN)), r#""NaN""#);
        assert_eq!(json(Bson::Double(f64::INFINITY)), r#""Infinity""#);
        assert_eq!(json(Bson::Double(f64::NEG_INFINITY)), r#""-Infinity""#);
    }

    #[test]
    fn decimals_keep_their_digits() {
        for (text, out) in [
            ("1.10", "1.10"),
            ("-0", "-0"),
            (
                "12345678901234567890.1234567890123",
                "12345678901234567890.1234567890123",
            ),
            ("1.0E+3", "1.0E+3"),
            ("1E-6176", "1E-6176"),
        ] {
            let d: Decimal128 = text.parse().expect("decimal");
            assert_eq!(
                value(Bson::Decimal128(d)),
                Value::Numeric(out.into()),
                "{text}"
            );
            assert_eq!(json(Bson::Decimal128(d)), out, "{text}");
        }
        for special in ["NaN", "Infinity", "-Infinity"] {
            let d: Decimal128 = special.parse().expect("decimal");
            assert_eq!(json(Bson::Decimal128(d)), format!("\"{special}\""));
        }
    }

    #[test]
    fn dates_are_milliseconds_in_utc_with_expanded_years() {
        for (ms, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_709_210_700_123, "2024-02-29T12:45:00.123Z"),
            (-14_182_940_000, "1969-07-20T20:17:40.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "+10000-01-01T00:00:00.000Z"),
            (-62_135_596_800_000, "0001-01-01T00:00:00.000Z"),
            (-62_135_596_800_001, "0000-12-31T23:59:59.999Z"),
            (-62_198_755_200_000, "-0001-01-01T00:00:00.000Z"),
        ] {
            let v = value(Bson::DateTime(DateTime::from_millis(ms)));
            assert_eq!(v, Value::TimestampTz(text.into()), "{ms}");
        }
        // The extremes of the i64 range do not overflow.
        assert_eq!(&*date_text(i64::MAX), "+292278994-08-17T07:12:55.807Z");
        assert_eq!(&*date_text(i64::MIN), "-292275055-05-16T16:47:04.192Z");
    }

    #[test]
    fn timestamps_are_extended_json() {
        let ts = Timestamp {
            time: 1_700_000_000,
            increment: 7,
        };
        assert_eq!(
            json(Bson::Timestamp(ts)),
            r#"{"$timestamp":{"t":1700000000,"i":7}}"#
        );
    }

    #[test]
    fn binaries_keep_their_subtype() {
        let generic = Binary {
            subtype: BinarySubtype::Generic,
            bytes: vec![0, 1, 255],
        };
        assert_eq!(value(Bson::Binary(generic)), Value::Bytes(vec![0, 1, 255]));
        let old = Binary {
            subtype: BinarySubtype::BinaryOld,
            bytes: vec![9],
        };
        assert_eq!(value(Bson::Binary(old)), Value::Bytes(vec![9]));
        let md5 = Binary {
            subtype: BinarySubtype::Md5,
            bytes: vec![0, 1, 255],
        };
        assert_eq!(
            json(Bson::Binary(md5)),
            r#"{"$binary":{"base64":"AAH/","subType":"05"}}"#
        );
        let user = Binary {
            subtype: BinarySubtype::UserDefined(0x80),
            bytes: vec![1],
        };
        assert_eq!(
            json(Bson::Binary(user)),
            r#"{"$binary":{"base64":"AQ==","subType":"80"}}"#
        );
        let old_uuid = Binary {
            subtype: BinarySubtype::UuidOld,
            bytes: vec![7; 16],
        };
        assert_eq!(
            json(Bson::Binary(old_uuid)),
            r#"{"$binary":{"base64":"BwcHBwcHBwcHBwcHBwcHBw==","subType":"03"}}"#
        );
    }

    #[test]
    fn uuids_are_their_canonical_text() {
        let bytes = [
            0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28,
            0x95, 0x0e,
        ];
        let uuid = Binary {
            subtype: BinarySubtype::Uuid,
            bytes: bytes.to_vec(),
        };
        assert_eq!(
            value(Bson::Binary(uuid)),
            Value::Text("0f8fad5b-d9cb-469f-a165-70867728950e".into())
        );
        // A subtype-4 binary that is not 16 bytes is not a UUID: kept with its subtype.
        let short = Binary {
            subtype: BinarySubtype::Uuid,
            bytes: vec![1, 2],
        };
        assert_eq!(
            json(Bson::Binary(short)),
            r#"{"$binary":{"base64":"AQI=","subType":"04"}}"#
        );
    }

    #[test]
    fn regexes_and_code_are_extended_json() {
        let re = Regex {
            pattern: "^a.*".into(),
            options: "im".into(),
        };
        assert_eq!(
            json(Bson::RegularExpression(re)),
            r#"{"$regularExpression":{"pattern":"^a.*","options":"im"}}"#
        );
        assert_eq!(
            json(Bson::JavaScriptCode("function(){}".into())),
            r#"{"$code":"function(){}"}"#
        );
        let scoped = JavaScriptCodeWithScope {
            code: "x".into(),
            scope: doc! {"a": 1},
        };
        assert_eq!(
            json(Bson::JavaScriptCodeWithScope(scoped)),
            r#"{"$code":"x","$scope":{"a":{"$numberInt":"1"}}}"#
        );
    }

    #[test]
    fn min_and_max_keys_are_extended_json() {
        assert_eq!(json(Bson::MinKey), r#"{"$minKey":1}"#);
        assert_eq!(json(Bson::MaxKey), r#"{"$maxKey":1}"#);
    }

    #[test]
    fn strings_booleans_and_symbols() {
        assert_eq!(json(Bson::String("é\"".into())), r#""é\"""#);
        assert_eq!(json(Bson::Symbol("sym".into())), r#""sym""#);
        assert_eq!(json(Bson::Boolean(true)), "true");
    }

    #[test]
    fn nested_documents_and_arrays_keep_order_and_types() {
        let d = doc! {"z": 1_i64, "a": {"b": [1_i32, "x", {"c": 2.5}], "n": Bson::Null}};
        assert_eq!(
            json(Bson::Document(d)),
            r#"{"z":1,"a":{"b":[1,"x",{"c":2.5}],"n":null}}"#
        );
    }

    #[test]
    fn null_and_missing_differ() {
        let with_null = document(doc! {"_id": 1, "x": Bson::Null});
        let missing = document(doc! {"_id": 1});
        let (Value::Row(with_null), Value::Row(missing)) = (with_null, missing) else {
            panic!("rows");
        };
        assert_eq!(with_null.schema.index_of("x"), Some(1));
        assert_eq!(with_null.values[1], Value::Null);
        assert_eq!(missing.schema.index_of("x"), None);
        assert_eq!(value(Bson::Undefined), Value::Null);
    }
}
