use super::*;

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

#[test]
fn integers_are_exact() {
    assert_eq!(decode_text(oid::INT2, "-32768"), Ok(Value::Int(-32768)));
    assert_eq!(decode_text(oid::INT4, "42"), Ok(Value::Int(42)));
    assert_eq!(
        decode_text(oid::INT8, "9223372036854775807"),
        Ok(Value::Int(i64::MAX))
    );
    assert_eq!(
        decode_text(oid::INT8, "-9223372036854775808"),
        Ok(Value::Int(i64::MIN))
    );
    assert_eq!(
        decode_text(oid::OID, "4294967295"),
        Ok(Value::Int(4294967295))
    );
    assert!(decode_text(oid::INT4, "1.5").is_err());
}

#[test]
fn numerics_keep_their_digits_and_specials() {
    // case 04: every value exactly as PostgreSQL printed it.
    for n in [
        "0.00000000000000006938893903907228",
        "12345678901234567890.123456789",
        "-99999999999999999.999999999999999999",
        "-9223372036854775809",
        "9007199254740993",
        "1.10",
        "0.1000",
        "0",
        "NaN",
        "Infinity",
        "-Infinity",
    ] {
        assert_eq!(
            decode_text(oid::NUMERIC, n),
            Ok(Value::numeric(n).expect("numeric")),
            "{n}"
        );
    }
    assert!(decode_text(oid::NUMERIC, "1,5").is_err());
}

#[test]
fn floats_round_trip_and_specials() {
    assert_eq!(decode_text(oid::FLOAT8, "0.1"), Ok(Value::Float(0.1)));
    assert_eq!(decode_text(oid::FLOAT8, "1e+300"), Ok(Value::Float(1e300)));
    assert_eq!(
        decode_text(oid::FLOAT8, "2.5e-308"),
        Ok(Value::Float(2.5e-308))
    );
    assert_eq!(decode_text(oid::FLOAT4, "1e-45"), Ok(Value::Float(1e-45)));
    assert_eq!(
        decode_text(oid::FLOAT8, "Infinity"),
        Ok(Value::Float(f64::INFINITY))
    );
    assert_eq!(
        decode_text(oid::FLOAT4, "-Infinity"),
        Ok(Value::Float(f64::NEG_INFINITY))
    );
    match decode_text(oid::FLOAT8, "NaN") {
        Ok(Value::Float(f)) => assert!(f.is_nan()),
        other => panic!("{other:?}"),
    }
    match decode_text(oid::FLOAT8, "-0") {
        Ok(Value::Float(f)) => assert!(f == 0.0 && f.is_sign_negative()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn booleans_and_texts() {
    assert_eq!(decode_text(oid::BOOL, "t"), Ok(Value::Bool(true)));
    assert_eq!(decode_text(oid::BOOL, "f"), Ok(Value::Bool(false)));
    assert!(decode_text(oid::BOOL, "true").is_err());
    for o in [
        oid::TEXT,
        oid::VARCHAR,
        oid::BPCHAR,
        oid::NAME,
        oid::UUID,
        oid::CHAR,
    ] {
        assert_eq!(decode_text(o, "a b"), Ok(text("a b")));
    }
    // An enum or an extension type (citext) has an OID faucet does not know.
    assert_eq!(decode_text(987_654, "happy"), Ok(text("happy")));
}

#[test]
fn temporal_values() {
    assert_eq!(
        decode_text(oid::DATE, "2024-02-29"),
        Ok(Value::Date("2024-02-29".into()))
    );
    assert_eq!(
        decode_text(oid::DATE, "-infinity"),
        Ok(Value::Date("-infinity".into()))
    );
    assert_eq!(
        decode_text(oid::DATE, "0044-03-15 BC"),
        Ok(Value::Date("-0043-03-15".into()))
    );
    assert_eq!(
        decode_text(oid::DATE, "10000-01-01"),
        Ok(Value::Date("+10000-01-01".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMPTZ, "4713-01-01 00:00:00+00 BC"),
        Ok(Value::TimestampTz("-4712-01-01T00:00:00Z".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMPTZ, "294276-12-31 23:59:59.999999+00"),
        Ok(Value::TimestampTz("+294276-12-31T23:59:59.999999Z".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMPTZ, "4713-01-01 05:30:00+05:30 BC"),
        Ok(Value::TimestampTz("-4712-01-01T00:00:00Z".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMPTZ, "10000-01-01 05:30:00+05:30"),
        Ok(Value::TimestampTz("+10000-01-01T00:00:00Z".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMP, "2024-02-29 13:45:00.123456"),
        Ok(Value::Timestamp("2024-02-29T13:45:00.123456".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMP, "infinity"),
        Ok(Value::Timestamp("infinity".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMP, "0044-03-15 12:00:00 BC"),
        Ok(Value::Timestamp("-0043-03-15T12:00:00".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMPTZ, "2024-02-29 12:45:00.123456+00"),
        Ok(Value::TimestampTz("2024-02-29T12:45:00.123456Z".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMPTZ, "2026-01-01 00:00:00+00"),
        Ok(Value::TimestampTz("2026-01-01T00:00:00Z".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMPTZ, "2024-03-01 01:15:00.5+05:30"),
        Ok(Value::TimestampTz("2024-02-29T19:45:00.5Z".into()))
    );
    assert_eq!(
        decode_text(oid::TIMESTAMPTZ, "2024-12-31 20:00:00-08"),
        Ok(Value::TimestampTz("2025-01-01T04:00:00Z".into()))
    );
    for s in ["infinity", "-infinity"] {
        assert_eq!(
            decode_text(oid::TIMESTAMPTZ, s),
            Ok(Value::TimestampTz(s.into()))
        );
    }
    assert_eq!(
        decode_text(oid::TIME, "13:45:00"),
        Ok(Value::Time("13:45:00".into()))
    );
    assert_eq!(
        decode_text(oid::TIMETZ, "13:45:00+01"),
        Ok(Value::TimeTz("13:45:00+01:00".into()))
    );
    assert_eq!(
        decode_text(oid::TIMETZ, "13:45:00.25-05:30"),
        Ok(Value::TimeTz("13:45:00.25-05:30".into()))
    );
    assert_eq!(
        decode_text(oid::INTERVAL, "P1Y2M3DT4H5M6.5S"),
        Ok(Value::Interval("P1Y2M3DT4H5M6.5S".into()))
    );
}

#[test]
fn json_is_kept_as_the_server_sent_it() {
    for text in [
        r#"{"a": 12345678901234567890.5, "b": [1, null]}"#,
        "{\"dup\":1,\"dup\":2, \"sp\" :  1}",
    ] {
        for o in [oid::JSON, oid::JSONB] {
            let Ok(Value::Json(j)) = decode_text(o, text) else {
                panic!("{text}")
            };
            assert_eq!(j.as_str(), text);
        }
    }
    assert!(decode_text(oid::JSON, "{").is_err());
}

#[test]
fn bytea_hex_and_escape_forms() {
    // case 24
    assert_eq!(
        decode_text(oid::BYTEA, r"\xdeadbeef"),
        Ok(Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef]))
    );
    assert_eq!(
        decode_text(oid::BYTEA, r"\x00015c7f80ff"),
        Ok(Value::Bytes(vec![0, 1, 0x5c, 0x7f, 0x80, 0xff]))
    );
    assert_eq!(decode_text(oid::BYTEA, r"\x"), Ok(Value::Bytes(vec![])));
    assert_eq!(
        decode_bytea(r"\336\255\276\357"),
        Ok(vec![0xde, 0xad, 0xbe, 0xef])
    );
    assert_eq!(
        decode_bytea(r"\\\\\000\377"),
        Ok(vec![0x5c, 0x5c, 0x00, 0xff])
    );
    assert_eq!(decode_bytea(r#"{"k":"v"}"#), Ok(br#"{"k":"v"}"#.to_vec()));
    assert_eq!(decode_bytea(""), Ok(vec![]));
    assert!(decode_bytea(r"\x0").is_err());
    assert!(decode_bytea(r"\xzz").is_err());
    assert!(decode_bytea(r"\9").is_err());
}

fn arr(items: Vec<Value>) -> Value {
    Value::Array(items)
}

#[test]
fn arrays_follow_the_literal_grammar() {
    // case 23, row by row.
    assert_eq!(
        decode_text(oid::TEXT_ARRAY, r#"{"a,b",c}"#),
        Ok(arr(vec![text("a,b"), text("c")]))
    );
    assert_eq!(
        decode_text(1007, "{1,2,3}"),
        Ok(arr(vec![Value::Int(1), Value::Int(2), Value::Int(3)]))
    );
    assert_eq!(
        decode_text(oid::TEXT_ARRAY, r#"{"NULL",NULL,""}"#),
        Ok(arr(vec![text("NULL"), Value::Null, text("")]))
    );
    assert_eq!(
        decode_text(1007, "{NULL,4}"),
        Ok(arr(vec![Value::Null, Value::Int(4)]))
    );
    assert_eq!(
        decode_text(
            oid::TEXT_ARRAY,
            r#"{"say \"hi\"","back\\slash","two words","{brace}"}"#
        ),
        Ok(arr(vec![
            text("say \"hi\""),
            text("back\\slash"),
            text("two words"),
            text("{brace}")
        ]))
    );
    assert_eq!(decode_text(1007, "{}"), Ok(arr(vec![])));
    assert_eq!(
        decode_text(1007, "{{1,2},{3,4}}"),
        Ok(arr(vec![
            arr(vec![Value::Int(1), Value::Int(2)]),
            arr(vec![Value::Int(3), Value::Int(4)])
        ]))
    );
    assert_eq!(
        decode_text(oid::TEXT_ARRAY, "[0:1]={x,y}"),
        Ok(arr(vec![text("x"), text("y")]))
    );
    assert_eq!(
        decode_text(1007, "[3:4]={7,8}"),
        Ok(arr(vec![Value::Int(7), Value::Int(8)]))
    );
    assert_eq!(
        decode_text(1231, "{1.10,NaN,-Infinity}"),
        Ok(arr(vec![
            Value::numeric("1.10").expect("n"),
            Value::numeric("NaN").expect("n"),
            Value::numeric("-Infinity").expect("n")
        ]))
    );
    assert_eq!(
        decode_text(1001, r#"{"\\xdead",NULL}"#),
        Ok(arr(vec![Value::Bytes(vec![0xde, 0xad]), Value::Null]))
    );
    assert_eq!(
        decode_text(1185, r#"{"2024-02-29 12:45:00+00",infinity}"#),
        Ok(arr(vec![
            Value::TimestampTz("2024-02-29T12:45:00Z".into()),
            Value::TimestampTz("infinity".into())
        ]))
    );
    assert_eq!(
        decode_text(3807, r#"{"{\"a\": 1}",null}"#),
        Ok(arr(vec![
            Value::Json(Json::verbatim(r#"{"a": 1}"#).expect("json")),
            Value::Null
        ]))
    );
    for bad in ["{", "{1,2", "{\"a}", "{1}}", "x"] {
        assert!(decode_text(1007, bad).is_err(), "{bad}");
    }
}

#[test]
fn type_tables_agree() {
    assert_eq!(data_type_of(oid::INT4), DataType::Int);
    assert_eq!(data_type_of(oid::NUMERIC), DataType::Numeric);
    assert_eq!(data_type_of(oid::FLOAT4), DataType::Float);
    assert_eq!(data_type_of(oid::BOOL), DataType::Bool);
    assert_eq!(data_type_of(oid::UUID), DataType::Text);
    assert_eq!(data_type_of(oid::BYTEA), DataType::Bytes);
    assert_eq!(data_type_of(oid::JSON), DataType::Json);
    assert_eq!(data_type_of(oid::TIMESTAMPTZ), DataType::TimestampTz);
    assert_eq!(data_type_of(oid::INTERVAL), DataType::Interval);
    assert_eq!(data_type_of(1007), DataType::Array(Box::new(DataType::Int)));
    assert_eq!(data_type_of(123_456), DataType::Text);
    for (array, elem) in ARRAYS {
        assert_eq!(element_oid(*array), Some(*elem));
        assert_eq!(array_oid_of(*elem), Some(*array));
    }
    assert_eq!(sql_type_of(&DataType::Int), "bigint");
    assert_eq!(sql_type_of(&DataType::Float), "double precision");
    assert_eq!(sql_type_of(&DataType::Unknown), "text");
    assert_eq!(
        sql_type_of(&DataType::Array(Box::new(DataType::Array(Box::new(
            DataType::Numeric
        ))))),
        "numeric[]"
    );
    for t in [
        DataType::Bool,
        DataType::Int,
        DataType::Float,
        DataType::Numeric,
        DataType::Text,
        DataType::Bytes,
        DataType::Json,
        DataType::Date,
        DataType::Timestamp,
        DataType::TimestampTz,
        DataType::Time,
        DataType::TimeTz,
        DataType::Interval,
    ] {
        assert!(!sql_type_of(&t).is_empty());
        assert!(
            sql_type_of(&DataType::Array(Box::new(t.clone()))).ends_with("[]"),
            "{t:?}"
        );
    }
}
