//! postgres-cdc prerequisites: each failure is a typed error whose message names the fix;
//! `check()` only reads the catalog (no slot, no publication is created, nothing consumed).
//! The `wal_level` and invalidated-slot cases run on a private server (initdb into a temp
//! directory, its own port), since they need settings the shared server must not change.

use std::time::Duration;

use faucet_connectors::postgres::cdc::{PostgresCdcConfig, PostgresCdcSource};
use faucet_core::{FaucetError, Source};
use faucet_test_support::private_pg::PrivatePostgres;

use crate::postgres_cdc::{Fixture, admin, pg_url, read_options};

async fn open_error(source: &PostgresCdcSource) -> FaucetError {
    match source.open(None, read_options(10)).await {
        Ok(_) => panic!("open must fail"),
        Err(e) => e,
    }
}

async fn slot_exists(slot: &str) -> bool {
    sqlx::query_scalar::<_, i32>("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1")
        .bind(slot)
        .fetch_optional(&mut admin().await)
        .await
        .expect("query")
        .is_some()
}

#[tokio::test]
async fn missing_publication_table_or_membership_name_the_fix() {
    let fx = Fixture::new("prereq").await;
    fx.sql("CREATE TABLE {s}.a (id int PRIMARY KEY); CREATE TABLE {s}.b (id int PRIMARY KEY)")
        .await;

    // No publication, create_publication false (the default).
    let source = PostgresCdcSource::new(fx.config(&["a"])).expect("config");
    for e in [
        source.check().await.expect_err("check"),
        open_error(&source).await,
    ] {
        let m = e.to_string();
        assert!(
            m.contains(&format!("publication `{}` does not exist", fx.publication)),
            "{m}"
        );
        assert!(
            m.contains("CREATE PUBLICATION") && m.contains("create_publication: true"),
            "{m}"
        );
        assert_eq!(e.kind(), "read");
    }
    assert!(!slot_exists(&fx.slot).await, "nothing created");

    // A table that does not exist.
    let missing = PostgresCdcSource::new(fx.config(&["a", "nope"])).expect("config");
    let m = missing.check().await.expect_err("check").to_string();
    assert!(
        m.contains(&format!("table `{}` does not exist", fx.table("nope"))),
        "{m}"
    );

    // check() passes when the publication may be created, and creates nothing.
    let mut config = fx.config(&["a"]);
    config.create_publication = true;
    let creating = PostgresCdcSource::new(config).expect("config");
    creating.check().await.expect("prerequisites hold");
    assert!(!slot_exists(&fx.slot).await, "check() creates no slot");

    // open() creates the publication for `tables` and the slot.
    let stream = creating.open(None, read_options(10)).await.expect("open");
    drop(stream);
    assert!(slot_exists(&fx.slot).await);
    fx.wait_slot_released().await;

    // A table that exists but is not in the (existing) publication.
    let outside = PostgresCdcSource::new(fx.config(&["a", "b"])).expect("config");
    for e in [
        outside.check().await.expect_err("check"),
        open_error(&outside).await,
    ] {
        let m = e.to_string();
        assert!(
            m.contains(&format!("table `{}` is not in publication", fx.table("b"))),
            "{m}"
        );
        assert!(
            m.contains("ALTER PUBLICATION") && m.contains("ADD TABLE"),
            "{m}"
        );
    }
    creating.check().await.expect("all good again");
}

#[tokio::test]
async fn a_role_without_replication_is_told_how_to_get_it() {
    let mut fx = Fixture::new("norepl").await;
    let role = format!("{}_plain", fx.slot);
    fx.roles.push(role.clone());
    fx.sql(&format!(
        "CREATE TABLE {{s}}.t (id int PRIMARY KEY); CREATE ROLE \"{role}\" LOGIN;
         CREATE PUBLICATION {{p}} FOR TABLE {{s}}.t;"
    ))
    .await;
    let mut url = url::Url::parse(&pg_url()).expect("url");
    url.set_username(&role).expect("user");
    url.set_password(None).expect("password");
    let source = PostgresCdcSource::new(PostgresCdcConfig::new(
        url.as_str(),
        fx.slot.clone(),
        fx.publication.clone(),
        [fx.table("t")],
    ))
    .expect("config");
    for e in [
        source.check().await.expect_err("check"),
        open_error(&source).await,
    ] {
        let m = e.to_string();
        assert!(m.contains("lacks the REPLICATION attribute"), "{m}");
        assert!(
            m.contains(&format!("ALTER ROLE \"{role}\" REPLICATION")),
            "{m}"
        );
    }
}

/// The private server's settings that every start adds: no fsync (a test's data does not
/// need to survive an OS crash).
const NO_FSYNC: &str = "fsync=off";

async fn private_sql(url: &str, sql: &str) {
    let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(url)
        .await
        .expect("private server");
    sqlx::raw_sql(sql)
        .execute(&mut c)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test]
async fn wal_level_and_an_invalidated_slot_are_reported_with_their_fix() {
    // wal_level = replica (initdb's default): check() names the setting and the restart.
    let server = tokio::task::spawn_blocking(|| PrivatePostgres::start(None, &[NO_FSYNC]))
        .await
        .expect("private server");
    private_sql(
        &server.url(),
        "CREATE TABLE public.t (id int PRIMARY KEY); CREATE PUBLICATION p FOR TABLE public.t;",
    )
    .await;
    let source = PostgresCdcSource::new(PostgresCdcConfig::new(
        server.url(),
        "faucet_private",
        "p",
        ["public.t"],
    ))
    .expect("config");
    for e in [
        source.check().await.expect_err("check"),
        open_error(&source).await,
    ] {
        let m = e.to_string();
        assert!(m.contains("wal_level is `replica`"), "{m}");
        assert!(
            m.contains("ALTER SYSTEM SET wal_level = logical") && m.contains("restart"),
            "{m}"
        );
    }

    // wal_level = logical with a tiny max_slot_wal_keep_size: a slot nobody reads is
    // invalidated once enough WAL passes a checkpoint; open() and check() say so, and how to
    // recover.
    let server = tokio::task::spawn_blocking(move || {
        server.restart(&[
            NO_FSYNC,
            "wal_level=logical",
            "max_slot_wal_keep_size=1MB",
            "min_wal_size=32MB",
            "max_wal_size=64MB",
        ]);
        server
    })
    .await
    .expect("restart");
    let stream = source
        .open(None, read_options(10))
        .await
        .expect("open creates the slot");
    drop(stream);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut lost = false;
    for _ in 0..10 {
        private_sql(
            &server.url(),
            "INSERT INTO public.t SELECT g FROM generate_series(1, 20000) g ON CONFLICT DO NOTHING;
             DELETE FROM public.t; SELECT pg_switch_wal(); CHECKPOINT;",
        )
        .await;
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&server.url())
            .await
            .expect("private server");
        let status: Option<String> = sqlx::query_scalar(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'faucet_private'",
        )
        .fetch_one(&mut c)
        .await
        .expect("slot");
        if status.as_deref() == Some("lost") {
            lost = true;
            break;
        }
    }
    assert!(lost, "the private server should have invalidated the slot");
    for e in [
        source.check().await.expect_err("check"),
        open_error(&source).await,
    ] {
        let m = e.to_string();
        assert!(m.contains("was invalidated (wal_status = 'lost')"), "{m}");
        assert!(
            m.contains("pg_drop_replication_slot('faucet_private')"),
            "{m}"
        );
        assert!(m.contains("delete this pipeline's bookmark"), "{m}");
    }
    drop(server);
}
