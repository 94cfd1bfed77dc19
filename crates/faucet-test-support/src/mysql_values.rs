//! the MySQL value table of docs/values.md as test data, one definition for every crate's tests (the
//! connectors' `mysql_values` / `mysql_cdc_values`, the CLI's `mysql_cdc_flights`): the
//! columns, three rows of values and the JSON faucet must give for each. As a macro whose
//! arms expand to string literals, so tests build `const`s with `concat!`:
//!
//! * `mysql_value_table!(columns_ddl)`: the column definitions (`ti TINYINT, …, g POINT`);
//! * `mysql_value_table!(columns)`: their names, in order;
//! * `mysql_value_table!(row 0)` … `(row 2)`: a row's values in that order (SQL), to be
//!   written under a `+05:30` session zone and `sql_mode = ''` (zero dates);
//! * `mysql_value_table!(json 0)` … `(json 2)`: the row's JSON members, without braces
//!   (zero dates `null` by the module's policy; TIMESTAMP in UTC).

/// See the module documentation ([`crate::mysql_values`]).
#[macro_export]
macro_rules! mysql_value_table {
    (columns_ddl) => {
        "ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED, i INT,
    iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
    d DECIMAL(20,4), f FLOAT, db DOUBLE, b1 BIT(1), b64 BIT(64),
    dt DATE, dtm DATETIME(6), dt0 DATETIME, ts TIMESTAMP(3) NULL, tm TIME(6), y YEAR,
    c CHAR(5) CHARACTER SET latin1, vc VARCHAR(20) CHARACTER SET utf8mb4,
    tx TEXT CHARACTER SET latin1,
    bn BINARY(4), vb VARBINARY(8), bl BLOB,
    e ENUM('small','large'), s SET('a','b','c'),
    j JSON, u UUID, i4 INET4, i6 INET6, g POINT"
    };
    (columns) => {
        "ti, tu, si, mi, i, iu, bi, bu, d, f, db, b1, b64, dt, dtm, dt0, ts, tm, y, c, vc, tx, \
         bn, vb, bl, e, s, j, u, i4, i6, g"
    };
    (row 0) => {
        "-128, 0, -32768, 0, -2147483648, 0, -9223372036854775808, 0,
  -1234567890123456.1234, 0.1, 0.1, b'0', 0,
  '1000-01-01', '1000-01-01 00:00:00.000001', '2024-02-29 13:45:00', '2024-02-29 18:15:00.123',
  '-838:59:59.000000', 0,
  'café', '日本語😀', 'Ünïcödé',
  x'0102', x'00ff', x'',
  'small', 'c,a',
  '{\"k\": [1, 2.50, \"x\"]}', '00112233-4455-6677-8899-aabbccddeeff', '192.168.0.1',
  '::ffff:1.2.3.4', ST_GeomFromText('POINT(1 2)', 4326)"
    };
    (row 1) => {
        "127, 255, 32767, 16777215, 2147483647, 4294967295, 9223372036854775807,
  18446744073709551615,
  9999999999999999.9999, -123.456, 1.7976931348623157e308, b'1', 18446744073709551615,
  '9999-12-31', '9999-12-31 23:59:59.999999', '0000-00-00 00:00:00', '2038-01-19 08:44:07.999',
  '838:59:59.000000', 2155,
  'abc', '', '',
  x'00000000', x'', x'deadbeef',
  'large', '',
  '[]', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '0.0.0.0',
  '2001:db8::1', ST_GeomFromText('POINT(0 0)')"
    };
    (row 2) => {
        "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  '0000-00-00', '2024-00-10 00:00:00', NULL, NULL, '-00:00:01.500000', NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"
    };
    (json 0) => {
        r#""ti":-128,"tu":0,"si":-32768,"mi":0,"i":-2147483648,"iu":0,"bi":-9223372036854775808,"bu":0,"d":-1234567890123456.1234,"f":0.1,"db":0.1,"b1":0,"b64":0,"dt":"1000-01-01","dtm":"1000-01-01T00:00:00.000001","dt0":"2024-02-29T13:45:00","ts":"2024-02-29T12:45:00.123Z","tm":"-838:59:59.000000","y":0,"c":"café","vc":"日本語😀","tx":"Ünïcödé","bn":"AQIAAA==","vb":"AP8=","bl":"","e":"small","s":"a,c","j":{"k":[1,2.50,"x"]},"u":"00112233-4455-6677-8899-aabbccddeeff","i4":"192.168.0.1","i6":"::ffff:1.2.3.4","g":{"srid":4326,"wkb":"AQEAAAAAAAAAAADwPwAAAAAAAABA"}"#
    };
    (json 1) => {
        r#""ti":127,"tu":255,"si":32767,"mi":16777215,"i":2147483647,"iu":4294967295,"bi":9223372036854775807,"bu":18446744073709551615,"d":9999999999999999.9999,"f":-123.456,"db":1.7976931348623157e+308,"b1":1,"b64":18446744073709551615,"dt":"9999-12-31","dtm":"9999-12-31T23:59:59.999999","dt0":null,"ts":"2038-01-19T03:14:07.999Z","tm":"838:59:59.000000","y":2155,"c":"abc","vc":"","tx":"","bn":"AAAAAA==","vb":"","bl":"3q2+7w==","e":"large","s":"","j":[],"u":"ffffffff-ffff-ffff-ffff-ffffffffffff","i4":"0.0.0.0","i6":"2001:db8::1","g":{"srid":0,"wkb":"AQEAAAAAAAAAAAAAAAAAAAAAAAAA"}"#
    };
    (json 2) => {
        r#""ti":null,"tu":null,"si":null,"mi":null,"i":null,"iu":null,"bi":null,"bu":null,"d":null,"f":null,"db":null,"b1":null,"b64":null,"dt":null,"dtm":null,"dt0":null,"ts":null,"tm":"-00:00:01.500000","y":null,"c":null,"vc":null,"tx":null,"bn":null,"vb":null,"bl":null,"e":null,"s":null,"j":null,"u":null,"i4":null,"i6":null,"g":null"#
    };
}
