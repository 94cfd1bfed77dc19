use super::table_shape::as_of_event;
use super::wire::*;
use super::*;
use crate::mysql::cdc::statement::classify;
use crate::mysql::value::*;
use mysql_async::consts::ColumnType;

fn decoder(tables: &[&str]) -> ChangeDecoder {
    let tables: Vec<TableName> = tables
        .iter()
        .map(|t| TableName::parse_qualified(t, "tables").expect("name"))
        .collect();
    ChangeDecoder::new(&tables, &[], Collations::builtin())
}

fn ddl(d: &ChangeDecoder, sql: &str) -> Result<Vec<String>, String> {
    let txn = TxnContext {
        file: "bin.000001".into(),
        start_pos: 4,
        gtid: None,
        commit_ts: commit_ts_text(0),
    };
    let at = BinlogPos::new("bin.000001", 4);
    d.ddl(&classify(sql), "shop", sql, &txn, &at)
        .map(|records| {
            records
                .iter()
                .map(|r| match (&r[0], &r[1]) {
                    (Value::Text(op), Value::Text(t)) => format!("{op} {t}"),
                    other => format!("{other:?}"),
                })
                .collect()
        })
        .map_err(|e| e.to_string())
}

#[test]
fn ddl_of_listed_tables_is_truncates_or_an_error() {
    let d = decoder(&["shop.a", "shop.b", "other.c"]);
    assert_eq!(
        ddl(&d, "DROP TABLE a, x, other.c"),
        Ok(vec!["t shop.a".into(), "t other.c".into()])
    );
    assert_eq!(ddl(&d, "DROP DATABASE other"), Ok(vec!["t other.c".into()]));
    assert_eq!(
        ddl(&d, "RENAME TABLE a TO a_old"),
        Ok(vec!["t shop.a".into()])
    );
    assert_eq!(ddl(&d, "RENAME TABLE a TO x, x TO a"), Ok(vec![]));
    assert_eq!(ddl(&d, "RENAME TABLE x TO y"), Ok(vec![]));
    // A swap of two listed tables: each now holds the other's rows.
    let swap = ddl(&d, "RENAME TABLE a TO tmp, b TO a, tmp TO b").expect_err("a swap");
    assert!(
        swap.contains("the listed table shop.a is shop.b renamed"),
        "{swap}"
    );
    let cut = ddl(&d, "ALTER TABLE _a_gho RENAME TO a").expect_err("a rename in");
    assert!(cut.contains("shop.a is shop._a_gho renamed"), "{cut}");
    let moved = ddl(&d, "ALTER TABLE x EXCHANGE PARTITION p WITH TABLE a").expect_err("rows move");
    assert!(
        moved.contains("EXCHANGE PARTITION moves rows of the listed table shop.a"),
        "{moved}"
    );
    assert_eq!(ddl(&d, "ALTER TABLE x TRUNCATE PARTITION p"), Ok(vec![]));
}

#[test]
fn mariadb_types_come_from_the_catalog_only_where_it_matches_the_binlog() {
    let c = Collations::builtin();
    let binary16 = || {
        MysqlColumn::from_binlog(
            "c",
            ColumnType::MYSQL_TYPE_STRING,
            &[0xfe, 16],
            false,
            63,
            vec![],
            &c,
        )
        .expect("BINARY(16)")
    };
    let varchar = || {
        MysqlColumn::from_binlog(
            "c",
            ColumnType::MYSQL_TYPE_VARCHAR,
            &[160, 0],
            false,
            45,
            vec![],
            &c,
        )
        .expect("VARCHAR(40)")
    };
    let catalog = |t: &str| TableCatalog {
        columns: vec![("c".into(), t.into(), true)],
        ..TableCatalog::default()
    };
    let kind = |r: Result<MysqlColumn, String>| r.map(|c| c.kind);
    assert_eq!(
        kind(as_of_event(
            binary16(),
            &[0xfe, 16],
            &catalog("inet6"),
            true
        )),
        Ok(Kind::Inet6)
    );
    assert_eq!(
        kind(as_of_event(binary16(), &[0xfe, 16], &catalog("uuid"), true)),
        Ok(Kind::Uuid)
    );
    assert_eq!(
        kind(as_of_event(
            binary16(),
            &[0xfe, 16],
            &catalog("binary"),
            true
        )),
        Ok(Kind::Char)
    );
    // VARCHAR in the binlog, INET6 now: the event predates the ALTER.
    assert_eq!(
        kind(as_of_event(varchar(), &[160, 0], &catalog("inet6"), true)),
        Ok(Kind::VarChar)
    );
    let e = as_of_event(binary16(), &[0xfe, 16], &catalog("varchar"), true).expect_err("retyped");
    assert!(e.contains("declares it VARCHAR"), "{e}");
    // The column is gone now: the binlog's storage type.
    assert_eq!(
        kind(as_of_event(
            binary16(),
            &[0xfe, 16],
            &TableCatalog::default(),
            true
        )),
        Ok(Kind::Char)
    );
    // MySQL has no such types: the binlog's.
    assert_eq!(
        kind(as_of_event(
            binary16(),
            &[0xfe, 16],
            &TableCatalog::default(),
            false
        )),
        Ok(Kind::Char)
    );
}

/// The plans read here give exactly what mysql_common's generic `BinlogValue` path gives
/// for the same bytes — every integer width signed and UNSIGNED (BIGINT UNSIGNED above
/// i64::MAX), DATETIME2 and TIMESTAMP2 of every precision, over random and extreme bytes
/// — except a negative signed MEDIUMINT, which mysql_common reads without its sign and
/// the plan sign-extends (as SELECT gives it), and a TIMESTAMP2 from 2038-01-19 on
/// ([`timestamps_after_2038_keep_their_date`]).
#[test]
fn fast_plans_decode_as_mysql_common_does() {
    let c = Collations::builtin();
    let mut next = crate::test_rng();
    let outcome = |r: Result<Value, Undecoded>| match r {
        Ok(v) => Ok(v),
        Err(Undecoded::Truncated) => Err("truncated".to_owned()),
        Err(Undecoded::Data(why)) => Err(why),
    };
    let cases: [(ColumnType, &[u8], usize); 19] = [
        (ColumnType::MYSQL_TYPE_TINY, &[], 1),
        (ColumnType::MYSQL_TYPE_SHORT, &[], 2),
        (ColumnType::MYSQL_TYPE_INT24, &[], 3),
        (ColumnType::MYSQL_TYPE_LONG, &[], 4),
        (ColumnType::MYSQL_TYPE_LONGLONG, &[], 8),
        (ColumnType::MYSQL_TYPE_DATETIME2, &[0], 5),
        (ColumnType::MYSQL_TYPE_DATETIME2, &[1], 6),
        (ColumnType::MYSQL_TYPE_DATETIME2, &[2], 6),
        (ColumnType::MYSQL_TYPE_DATETIME2, &[3], 7),
        (ColumnType::MYSQL_TYPE_DATETIME2, &[4], 7),
        (ColumnType::MYSQL_TYPE_DATETIME2, &[5], 8),
        (ColumnType::MYSQL_TYPE_DATETIME2, &[6], 8),
        (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[0], 4),
        (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[1], 5),
        (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[2], 5),
        (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[3], 6),
        (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[4], 6),
        (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[5], 7),
        (ColumnType::MYSQL_TYPE_TIMESTAMP2, &[6], 7),
    ];
    let mut checked = 0;
    for (ty, meta, len) in cases {
        for unsigned in [false, true] {
            let column = MysqlColumn::from_binlog("c", ty, meta, unsigned, 63, vec![], &c)
                .expect("a column");
            let fast = Wire::of(&column, ty, meta);
            assert!(!matches!(fast, Wire::Generic(..)), "{ty:?} {fast:?}");
            let generic = Wire::Generic(ty, meta.to_vec(), unsigned);
            let mut inputs: Vec<Vec<u8>> = vec![
                vec![0; len],
                vec![0xff; len],
                std::iter::once(0x80).chain(vec![0; len - 1]).collect(),
                std::iter::once(0x7f).chain(vec![0xff; len - 1]).collect(),
                vec![0; len - 1].into_iter().chain([0x80]).collect(),
                vec![0xff; len - 1].into_iter().chain([0x7f]).collect(),
            ];
            inputs.extend((0..3000).map(|_| (0..len).map(|_| next() as u8).collect()));
            if ty == ColumnType::MYSQL_TYPE_DATETIME2 {
                // The server writes a DATETIME2 with its top bit set (a packed value ≥ 0);
                // mysql_common overflows on the most negative one.
                inputs.iter_mut().for_each(|b| b[0] |= 0x80);
            }
            if ty == ColumnType::MYSQL_TYPE_TIMESTAMP2 {
                // Seconds before 2038 (mysql_common's i32 reads later ones as before
                // 1970), and a fraction the server can write (below 100, 10⁴, 10⁶).
                for b in &mut inputs {
                    b[0] &= 0x7f;
                    let (limit, at) = match len - 4 {
                        1 => (100, 7),
                        2 => (10_000, 6),
                        3 => (1_000_000, 5),
                        _ => continue,
                    };
                    let f = u32::from_be_bytes([
                        0,
                        b[4],
                        *b.get(5).unwrap_or(&0),
                        *b.get(6).unwrap_or(&0),
                    ]) % limit;
                    b[4..].copy_from_slice(&f.to_be_bytes()[at - 4..]);
                }
            }
            for bytes in &inputs {
                // A byte after the value: each path must take exactly its own bytes.
                let mut with_next = bytes.clone();
                with_next.push(0xaa);
                let mut a = ParseBuf(&with_next);
                let mut b = ParseBuf(&with_next);
                let fast_value = outcome(decode(&column, &fast, &mut a));
                let mut generic_value = outcome(decode(&column, &generic, &mut b));
                // mysql_common reads a signed MEDIUMINT without its sign: what it means.
                if ty == ColumnType::MYSQL_TYPE_INT24
                    && !unsigned
                    && let Ok(Value::Int(v)) = generic_value
                    && v >= 0x80_0000
                {
                    generic_value = Ok(Value::Int(v - 0x100_0000));
                }
                assert_eq!(
                    fast_value, generic_value,
                    "{ty:?} unsigned {unsigned} {bytes:?}"
                );
                assert_eq!(a.0, b.0, "{ty:?} {bytes:?}: the same bytes left");
                checked += 1;
            }
        }
    }
    assert!(checked > 70_000, "{checked}");
    // What each path gives (not only that they agree).
    let int = |ty, unsigned, bytes: &[u8]| {
        let column = MysqlColumn::from_binlog("c", ty, &[], unsigned, 63, vec![], &c).expect("int");
        let wire = Wire::of(&column, ty, &[]);
        outcome(decode(&column, &wire, &mut ParseBuf(bytes)))
    };
    let medium = ColumnType::MYSQL_TYPE_INT24;
    assert_eq!(
        int(medium, false, &[0, 0, 0x80]),
        Ok(Value::Int(-8_388_608))
    );
    assert_eq!(
        int(medium, true, &[0xff, 0xff, 0xff]),
        Ok(Value::Int(16_777_215))
    );
    assert_eq!(
        int(ColumnType::MYSQL_TYPE_LONGLONG, true, &[0xff; 8]),
        Ok(Value::Numeric("18446744073709551615".into()))
    );
    assert_eq!(
        int(ColumnType::MYSQL_TYPE_LONGLONG, false, &[0xff; 8]),
        Ok(Value::Int(-1))
    );
    assert_eq!(
        int(ColumnType::MYSQL_TYPE_TINY, false, &[1, 2]),
        Ok(Value::Int(1))
    );
    assert_eq!(
        int(ColumnType::MYSQL_TYPE_SHORT, false, &[1]),
        Err("truncated".to_owned())
    );
}

/// A TIMESTAMP2's seconds are unsigned (MySQL's `my_timestamp_from_binary`): from
/// 2038-01-19T03:14:08Z (2³¹ s) to 2106-02-07T06:28:15Z (2³² − 1 s), which MariaDB 11.5+
/// stores, keep their date. mysql_common's generic path reads them as an `i32`, before
/// 1970: that is what the plan replaces.
#[test]
fn timestamps_after_2038_keep_their_date() {
    let c = Collations::builtin();
    let ty = ColumnType::MYSQL_TYPE_TIMESTAMP2;
    let read = |fsp: u8, bytes: &[u8], generic: bool| {
        let column =
            MysqlColumn::from_binlog("c", ty, &[fsp], false, 63, vec![], &c).expect("a column");
        let wire = if generic {
            Wire::Generic(ty, vec![fsp], false)
        } else {
            Wire::of(&column, ty, &[fsp])
        };
        let mut buf = ParseBuf(bytes);
        match decode(&column, &wire, &mut buf) {
            Ok(v) => Ok((v, buf.0.len())),
            Err(Undecoded::Truncated) => Err("truncated".to_owned()),
            Err(Undecoded::Data(why)) => Err(why),
        }
    };
    let ts = |s: &str| Value::TimestampTz(s.into());
    assert_eq!(
        read(0, &[0x80, 0, 0, 0], false),
        Ok((ts("2038-01-19T03:14:08Z"), 0))
    );
    assert_eq!(
        read(0, &[0x80, 0, 0, 0], true),
        Ok((ts("1901-12-13T20:45:52Z"), 0)),
        "mysql_common's i32 (the reason for the plan)"
    );
    // 2106-02-07T06:28:15.123456Z, then a byte of the next value.
    let micros = 123_456u32.to_be_bytes();
    assert_eq!(
        read(
            6,
            &[
                0xff, 0xff, 0xff, 0xff, micros[1], micros[2], micros[3], 0xaa
            ],
            false
        ),
        Ok((ts("2106-02-07T06:28:15.123456Z"), 1))
    );
    assert_eq!(
        read(2, &[0xff, 0xff, 0xff, 0xff, 50], false),
        Ok((ts("2106-02-07T06:28:15.50Z"), 0))
    );
    assert_eq!(
        read(3, &[0x69, 0xe0, 0x0b, 0x5c, 0x11, 0xd0], false),
        Ok((ts("2026-04-15T22:04:12.456Z"), 0))
    );
    // The zero TIMESTAMP is NULL; a value cut short is an error, not a guess.
    assert_eq!(read(0, &[0, 0, 0, 0], false), Ok((Value::Null, 0)));
    assert_eq!(
        read(6, &[0x80, 0, 0, 0, 1], false),
        Err("truncated".to_owned())
    );
}

#[test]
fn commit_times_are_utc() {
    assert_eq!(commit_ts_text(0), "1970-01-01T00:00:00Z");
    assert_eq!(
        commit_ts_text(1_764_568_800_250_000),
        "2025-12-01T06:00:00.25Z"
    );
}
