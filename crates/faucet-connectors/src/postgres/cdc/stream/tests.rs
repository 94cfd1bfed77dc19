use super::*;
use crate::postgres::cdc::changes::record_schema;
use crate::postgres::cdc::config::TableName;
use crate::postgres::cdc::pgoutput::Datum;

const X: Lsn = Lsn(0x3000);

/// A stream without a session, fed events by hand, resuming 3 changes into
/// transaction 77 committed at X.
fn resumed() -> CdcPageStream {
    let mut s = CdcPageStream::new(StreamStart {
        client: None,
        decoder: ChangeDecoder::new(&[TableName::parse("public.t", "t").expect("valid")], &[]),
        types: RelationTypes::new(
            crate::postgres::connection::PostgresUrl::parse_str(
                "postgres://u@localhost/db",
                "connection_url",
            )
            .expect("url"),
        ),
        schema: record_schema(),
        batch_size: 100,
        max_page_delay: Duration::from_millis(50),
        cancel: CancellationToken::new(),
        target: None,
        from: CdcBookmark {
            lsn: Lsn(0x1000),
            in_txn: Some(InTxn {
                final_lsn: X,
                xid: 77,
                skip: 3,
            }),
        },
    });
    s.phase = Phase::Streaming;
    s.message(
        Message::Relation {
            oid: 1,
            namespace: "public".into(),
            name: "t".into(),
            replica_identity: b'd',
            columns: vec![RelationColumn::new(true, "id".into(), 23, -1)],
        },
        &mut PageBuilder::new(record_schema(), 1),
    )
    .expect("relation");
    s
}

fn begin(s: &mut CdcPageStream, final_lsn: Lsn, xid: u32) -> Result<(), FaucetError> {
    let mut page = PageBuilder::new(record_schema(), 1);
    s.apply(
        ReplicationEvent::Begin {
            final_lsn,
            xid,
            commit_time_micros: 0,
        },
        &mut page,
    )
}

#[test]
fn resuming_inside_a_transaction_skips_exactly_what_was_delivered() {
    let mut s = resumed();
    begin(&mut s, X, 77).expect("begin");
    // Nothing consumed again yet: a page handed over now must still carry the skip.
    assert_eq!(s.bookmark().in_txn.map(|t| t.skip), Some(3));
    let mut page = PageBuilder::new(record_schema(), 10);
    for id in 1..=5u8 {
        let text = [b'0' + id];
        s.message(
            Message::Insert {
                oid: 1,
                new: vec![Datum::Text(&text)],
            },
            &mut page,
        )
        .expect("insert");
    }
    let page = page.finish(None);
    let ids: Vec<_> = page.rows().map(|r| r.values()[5].clone()).collect();
    assert_eq!(ids.len(), 2, "changes 4 and 5 only");
    assert_eq!(s.bookmark().in_txn.map(|t| t.skip), Some(5));
    let mut page = PageBuilder::new(record_schema(), 1);
    s.apply(
        ReplicationEvent::Commit {
            lsn: X,
            end_lsn: Lsn(0x3100),
            commit_time_micros: 0,
        },
        &mut page,
    )
    .expect("commit");
    assert_eq!(
        s.bookmark(),
        CdcBookmark {
            lsn: Lsn(0x3100),
            in_txn: None
        }
    );
}

#[test]
fn a_resume_point_the_slot_no_longer_has_is_an_error() {
    // A later transaction first: the bookmark's was skipped by the server.
    let mut s = resumed();
    assert!(matches!(
        begin(&mut s, Lsn(0x4000), 78),
        Err(FaucetError::Bookmark { .. })
    ));
    // An earlier one: not this slot's bookmark.
    let mut s = resumed();
    assert!(matches!(
        begin(&mut s, Lsn(0x2000), 76),
        Err(FaucetError::Bookmark { .. })
    ));
    // The right position, another transaction id.
    let mut s = resumed();
    assert!(matches!(
        begin(&mut s, X, 99),
        Err(FaucetError::Bookmark { .. })
    ));
    // The server's WAL end passed the transaction without replaying it.
    let mut s = resumed();
    let mut page = PageBuilder::new(record_schema(), 1);
    let keepalive = ReplicationEvent::KeepAlive {
        wal_end: Lsn(0x5000),
        reply_requested: false,
        server_time_micros: 0,
    };
    assert!(matches!(
        s.apply(keepalive, &mut page),
        Err(FaucetError::Bookmark { .. })
    ));
}

#[test]
fn keepalives_move_the_position_only_between_transactions() {
    let mut s = resumed();
    s.resume = None;
    let mut page = PageBuilder::new(record_schema(), 1);
    let keepalive = |at| ReplicationEvent::KeepAlive {
        wal_end: Lsn(at),
        reply_requested: false,
        server_time_micros: 0,
    };
    s.apply(keepalive(0x2000), &mut page).expect("keepalive");
    assert_eq!(s.position, Lsn(0x2000));
    begin(&mut s, X, 80).expect("begin");
    s.apply(keepalive(0x2800), &mut page).expect("keepalive");
    assert_eq!(s.position, Lsn(0x2000), "inside a transaction: unchanged");
}

#[test]
fn commit_times() {
    assert_eq!(commit_ts_text(0), "2000-01-01T00:00:00Z");
    assert_eq!(commit_ts_text(250_000), "2000-01-01T00:00:00.25Z");
    assert_eq!(commit_ts_text(-1), "1999-12-31T23:59:59.999999Z");
    assert_eq!(commit_ts_text(849_333_600_000_000), "2026-11-30T06:00:00Z");
}
