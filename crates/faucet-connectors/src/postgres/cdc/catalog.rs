//! The `postgres-cdc` prerequisites, read from the catalog over an ordinary connection, each
//! failure with its fix: `wal_level`, the role's REPLICATION attribute, the publication and
//! its tables, and the replication slot (plugin, database, `active_pid`, `wal_status`).
//!
//! [`check`] only reads; [`prepare`] also creates what is missing and allowed (the slot
//! always, the publication when `create_publication` is set). Neither consumes changes.

use std::time::{Duration, Instant};

use pgwire_replication::Lsn;
use sqlx::PgConnection;

use crate::sql::ident::quote_ident;
use faucet_core::FaucetError;

use super::CONNECTOR;
use super::client::parse_lsn;
use super::config::{SlotInUse, TableName};
use crate::postgres::connection::PostgresUrl;
use crate::sql::table_pattern::TablePattern;

/// How long [`prepare`] waits for an active slot to be released (a session of this process
/// that just ended takes a moment to let go of it) before failing.
const SLOT_RELEASE_GRACE: Duration = Duration::from_secs(3);
/// With `slot_in_use: terminate`, how long a holder may be ending by itself before it is
/// ended.
const TERMINATE_AFTER: Duration = Duration::from_millis(500);

/// What the source needs to know to start reading.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Prepared {
    /// The slot's `confirmed_flush_lsn`: where a read without a bookmark starts.
    pub(crate) confirmed_flush: Lsn,
    /// `pg_current_wal_lsn()` once the slot exists: a bounded run's target.
    pub(crate) wal_position: Lsn,
}

/// What the checks need from the configuration.
pub(crate) struct Wanted<'a> {
    pub(crate) database: &'a str,
    pub(crate) slot: &'a str,
    pub(crate) publication: &'a str,
    /// The tables to read now: the listed ones and those the patterns match.
    pub(crate) tables: &'a [TableName],
    /// The pattern entries of `tables`: a `schema.*` one publishes its whole schema when
    /// faucet creates the publication.
    pub(crate) patterns: &'a [TablePattern],
    pub(crate) create_publication: bool,
    /// What to do about a slot active in another session.
    pub(crate) slot_in_use: SlotInUse,
}

fn failed(message: impl Into<String>) -> FaucetError {
    FaucetError::read(CONNECTOR, message, None)
}

fn query_failed(what: &str, e: sqlx::Error) -> FaucetError {
    FaucetError::read(CONNECTOR, format!("{what} failed"), Some(Box::new(e)))
}

/// Verifies every prerequisite without changing anything (for `faucet doctor`).
///
/// # Errors
/// The first failing prerequisite, as [`FaucetError::Read`] (or [`FaucetError::Connect`] for
/// a slot held by another process), with the fix in the message.
pub(crate) async fn check(conn: &mut PgConnection, want: &Wanted<'_>) -> Result<(), FaucetError> {
    check_server(conn).await?;
    check_publication(conn, want, false).await?;
    match slot_row(conn, want.slot).await? {
        Some(slot) => {
            slot.usable(want)?;
            if let Some(pid) = slot.active_pid {
                return Err(slot_active(conn, want.slot, pid).await);
            }
        }
        None => check_free_slot(conn, want.slot).await?,
    }
    Ok(())
}

/// Verifies the prerequisites and creates the slot (and, when allowed, the publication) if
/// missing; waits briefly for a slot still held by a session that is ending.
///
/// # Errors
/// As [`check`]; creating the slot or publication may fail with the server's reason.
pub(crate) async fn prepare(
    conn: &mut PgConnection,
    want: &Wanted<'_>,
    connection: &PostgresUrl,
) -> Result<Prepared, FaucetError> {
    check_server(conn).await?;
    check_publication(conn, want, true).await?;
    let started = Instant::now();
    let mut waiting_logged = false;
    let slot = loop {
        let slot = match slot_row(conn, want.slot).await? {
            Some(slot) => slot,
            None => {
                create_slot(conn, want.slot, connection).await?;
                slot_row(conn, want.slot).await?.ok_or_else(|| {
                    failed(format!(
                        "replication slot `{}` vanished right after it was created",
                        want.slot
                    ))
                })?
            }
        };
        slot.usable(want)?;
        match (slot.active_pid, want.slot_in_use) {
            (None, _) => break slot,
            (Some(pid), SlotInUse::Terminate) if started.elapsed() >= TERMINATE_AFTER => {
                terminate_holder(conn, want.slot, pid).await?;
            }
            (Some(pid), SlotInUse::Wait) if started.elapsed() >= SLOT_RELEASE_GRACE => {
                return Err(slot_active(conn, want.slot, pid).await);
            }
            (Some(pid), _) => {
                if !waiting_logged {
                    waiting_logged = true;
                    tracing::info!(
                        slot = want.slot,
                        pid,
                        "the replication slot is active in another session; waiting for it to end"
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let wal_position: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| query_failed("reading pg_current_wal_lsn()", e))?;
    Ok(Prepared {
        confirmed_flush: slot.confirmed_flush.unwrap_or(Lsn(0)),
        wal_position: parse_lsn(&wal_position)
            .ok_or_else(|| failed(format!("pg_current_wal_lsn() returned `{wal_position}`")))?,
    })
}

pub(crate) async fn check_server(conn: &mut PgConnection) -> Result<(), FaucetError> {
    let wal_level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| query_failed("reading wal_level", e))?;
    if wal_level != "logical" {
        return Err(failed(format!(
            "wal_level is `{wal_level}`, but logical decoding needs `logical`: run \
             `ALTER SYSTEM SET wal_level = logical` as a superuser and restart PostgreSQL"
        )));
    }
    let (role, replication): (String, bool) = sqlx::query_as(
        "SELECT rolname::text, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| query_failed("reading the role's attributes", e))?;
    if !replication {
        return Err(failed(format!(
            "role `{role}` lacks the REPLICATION attribute: run `ALTER ROLE {} REPLICATION` as a \
             superuser, or connect as a role that has it",
            quote_ident(&role)
        )));
    }
    Ok(())
}

pub(crate) async fn check_publication(
    conn: &mut PgConnection,
    want: &Wanted<'_>,
    create: bool,
) -> Result<(), FaucetError> {
    let mut partitioned: Vec<&TableName> = Vec::new();
    for table in want.tables {
        let kind: Option<String> = sqlx::query_scalar(
            "SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2",
        )
        .bind(&table.schema)
        .bind(&table.name)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| query_failed("looking up a table", e))?;
        match kind.as_deref() {
            Some("r") => {}
            Some("p") => partitioned.push(table),
            Some(other) => {
                return Err(failed(format!(
                    "`{}` is not a table (relkind `{other}`): only tables can be published; fix `tables`",
                    table.qualified()
                )));
            }
            None => {
                return Err(failed(format!(
                    "table `{}` does not exist in database `{}` (names are matched exactly, \
                     case-sensitively): create it, or fix `tables`",
                    table.qualified(),
                    want.database
                )));
            }
        }
    }
    let flags: Option<(bool, bool, bool, bool, bool)> = sqlx::query_as(
        "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot FROM pg_publication \
         WHERE pubname = $1",
    )
    .bind(want.publication)
    .fetch_optional(&mut *conn)
    .await
    .map_err(|e| query_failed("looking up the publication", e))?;
    let Some((insert, update, delete, truncate, via_root)) = flags else {
        let statement = create_statement(want, !partitioned.is_empty());
        if !want.create_publication {
            return Err(failed(format!(
                "publication `{}` does not exist: run `{statement}`, or set \
                 `create_publication: true` to let faucet create it",
                want.publication
            )));
        }
        check_may_create_publication(conn, want, &statement).await?;
        if create {
            create_publication(conn, &statement).await?;
        }
        return Ok(());
    };
    warn_schemas_not_published(conn, want).await;
    if let Some(table) = partitioned.first().filter(|_| !via_root) {
        return Err(failed(format!(
            "`{}` is partitioned, and publication `{}` publishes its changes under the \
             partitions' names: run `ALTER PUBLICATION {} SET (publish_via_partition_root = \
             true)`",
            table.qualified(),
            want.publication,
            quote_ident(want.publication)
        )));
    }
    let missing_ops: Vec<&str> = [
        (insert, "insert"),
        (update, "update"),
        (delete, "delete"),
        (truncate, "truncate"),
    ]
    .into_iter()
    .filter(|(on, _)| !on)
    .map(|(_, op)| op)
    .collect();
    if !missing_ops.is_empty() {
        tracing::warn!(
            publication = want.publication,
            not_published = ?missing_ops,
            "the publication does not publish every operation; those changes will not be read"
        );
    }
    for table in want.tables {
        let published: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
        )
        .bind(want.publication)
        .bind(&table.schema)
        .bind(&table.name)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| query_failed("reading pg_publication_tables", e))?;
        if published.is_none() {
            return Err(failed(format!(
                "table `{}` is not in publication `{}`: run `ALTER PUBLICATION {} ADD TABLE {}`",
                table.qualified(),
                want.publication,
                quote_ident(want.publication),
                table_list(std::slice::from_ref(table))
            )));
        }
    }
    Ok(())
}

/// The schemas whose every table `tables` takes (`schema.*` entries), in entry order.
fn whole_schemas<'a>(want: &Wanted<'a>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for p in want.patterns.iter().filter(|p| p.is_whole()) {
        if !out.contains(&p.container.as_str()) {
            out.push(&p.container);
        }
    }
    out
}

/// `CREATE PUBLICATION` for `want`: `FOR TABLES IN SCHEMA` each schema a `schema.*` entry
/// names (so tables created there later are published too), and `FOR TABLE` the other
/// tables; `publish_via_partition_root` when a table is partitioned or a schema is named (a
/// partitioned table created there later is then read under its own name). Changes of a
/// partitioned table are published under its own name only with that option; otherwise they
/// carry the partitions' names.
fn create_statement(want: &Wanted<'_>, partitioned: bool) -> String {
    let schemas = whole_schemas(want);
    let tables: Vec<TableName> = want
        .tables
        .iter()
        .filter(|t| !t.schema.as_deref().is_some_and(|s| schemas.contains(&s)))
        .cloned()
        .collect();
    let mut objects = Vec::new();
    if !schemas.is_empty() {
        let quoted: Vec<String> = schemas.iter().map(|s| quote_ident(s)).collect();
        objects.push(format!("TABLES IN SCHEMA {}", quoted.join(", ")));
    }
    if !tables.is_empty() {
        objects.push(format!("TABLE {}", table_list(&tables)));
    }
    let mut statement = format!("CREATE PUBLICATION {}", quote_ident(want.publication));
    if !objects.is_empty() {
        statement.push_str(" FOR ");
        statement.push_str(&objects.join(", "));
    }
    if partitioned || !schemas.is_empty() {
        statement.push_str(" WITH (publish_via_partition_root = true)");
    }
    statement
}

/// Warns about each `schema.*` entry whose schema an existing publication does not publish
/// as a whole (`FOR TABLES IN SCHEMA`, or `FOR ALL TABLES`): a table created there later is
/// read only once someone adds it to the publication. (PostgreSQL before 15 has no
/// `pg_publication_namespace`: the check is skipped.)
async fn warn_schemas_not_published(conn: &mut PgConnection, want: &Wanted<'_>) {
    for schema in whole_schemas(want) {
        let whole: Result<Option<bool>, sqlx::Error> = sqlx::query_scalar(
            "SELECT p.puballtables OR EXISTS (SELECT 1 FROM pg_publication_namespace pn \
             JOIN pg_namespace n ON n.oid = pn.pnnspid WHERE pn.pnpubid = p.oid AND n.nspname = $2) \
             FROM pg_publication p WHERE p.pubname = $1",
        )
        .bind(want.publication)
        .bind(schema)
        .fetch_optional(&mut *conn)
        .await;
        if let Ok(Some(false)) = whole {
            tracing::warn!(
                publication = want.publication,
                schema,
                "`tables` takes every table of this schema, but the publication lists its \
                 tables one by one: a table created there later is read only once it is added \
                 (`ALTER PUBLICATION … ADD TABLE …`, or `ADD TABLES IN SCHEMA …`), and its \
                 changes before that are not published"
            );
        }
    }
}

/// What `CREATE PUBLICATION ... FOR TABLE` needs (PostgreSQL manual, "CREATE
/// PUBLICATION"): the CREATE privilege on the database, and ownership of every table (a
/// superuser has both). Checked before anything is created, and by `faucet doctor`.
async fn check_may_create_publication(
    conn: &mut PgConnection,
    want: &Wanted<'_>,
    statement: &str,
) -> Result<(), FaucetError> {
    let (role, create): (String, bool) = sqlx::query_as(
        "SELECT current_user::text, has_database_privilege(current_database(), 'CREATE')",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| query_failed("checking the CREATE privilege on the database", e))?;
    let run_it = format!(
        "or create the publication as a role that may (`{statement}`) and keep \
         `create_publication: true` (an existing publication is used as it is)"
    );
    if !create {
        return Err(failed(format!(
            "`create_publication: true`, but role `{role}` lacks the CREATE privilege on \
             database `{}` that creating publication `{}` needs: run `GRANT CREATE ON \
             DATABASE {} TO {}` as its owner or a superuser, {run_it}",
            want.database,
            want.publication,
            quote_ident(want.database),
            quote_ident(&role)
        )));
    }
    if !whole_schemas(want).is_empty() {
        // PostgreSQL manual, "CREATE PUBLICATION": FOR TABLES IN SCHEMA needs a superuser
        // (and exists from PostgreSQL 15 on).
        let (superuser, version): (bool, i32) = sqlx::query_as(
            "SELECT rolsuper, current_setting('server_version_num')::int FROM pg_roles \
             WHERE rolname = current_user",
        )
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| query_failed("checking the role and server version", e))?;
        if version < 150_000 {
            return Err(failed(format!(
                "`create_publication: true` with a `schema.*` entry creates the publication \
                 `FOR TABLES IN SCHEMA`, which PostgreSQL before 15 does not have (this server \
                 is {version}): create publication `{}` yourself `FOR TABLE` the tables (and add \
                 tables created later with `ALTER PUBLICATION … ADD TABLE`)",
                want.publication
            )));
        }
        if !superuser {
            return Err(failed(format!(
                "`create_publication: true` with a `schema.*` entry creates the publication \
                 `FOR TABLES IN SCHEMA`, which only a superuser may do, and role `{role}` is \
                 not one: {run_it}"
            )));
        }
    }
    for table in want.tables {
        let owns: Option<bool> = sqlx::query_scalar(
            "SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2",
        )
        .bind(&table.schema)
        .bind(&table.name)
        .fetch_optional(&mut *conn)
        .await
        .map_err(|e| query_failed("checking the ownership of a table", e))?;
        if owns == Some(false) {
            return Err(failed(format!(
                "`create_publication: true`, but role `{role}` does not own table `{}`, and \
                 adding a table to a publication needs its owner: {run_it}",
                table.qualified()
            )));
        }
    }
    Ok(())
}

fn table_list(tables: &[TableName]) -> String {
    tables
        .iter()
        .map(TableName::quoted)
        .collect::<Vec<_>>()
        .join(", ")
}

async fn create_publication(conn: &mut PgConnection, statement: &str) -> Result<(), FaucetError> {
    match sqlx::query(statement).execute(&mut *conn).await {
        Ok(_) => {
            tracing::info!(statement, "created the publication");
            Ok(())
        }
        // Created concurrently by another run: fine.
        Err(e) if sqlstate(&e).as_deref() == Some("42710") => Ok(()),
        Err(e) => Err(FaucetError::read(
            CONNECTOR,
            format!("`{statement}` failed; run it as a role that owns the tables"),
            Some(Box::new(e)),
        )),
    }
}

/// A row of `pg_replication_slots`.
struct SlotRow {
    plugin: Option<String>,
    slot_type: String,
    database: Option<String>,
    active_pid: Option<i32>,
    wal_status: Option<String>,
    confirmed_flush: Option<Lsn>,
}

impl SlotRow {
    /// Whether this slot can serve this source at all (whoever holds it).
    fn usable(&self, want: &Wanted<'_>) -> Result<(), FaucetError> {
        let slot = want.slot;
        let drop_it = format!(
            "drop it (`SELECT pg_drop_replication_slot('{slot}')`) or choose another `slot_name`"
        );
        if self.slot_type != "logical" {
            return Err(failed(format!(
                "replication slot `{slot}` is a {} slot, not a logical one: {drop_it}",
                self.slot_type
            )));
        }
        if self.plugin.as_deref() != Some("pgoutput") {
            return Err(failed(format!(
                "replication slot `{slot}` uses the output plugin `{}`, not pgoutput: {drop_it}",
                self.plugin.as_deref().unwrap_or("?")
            )));
        }
        if self.database.as_deref() != Some(want.database) {
            return Err(failed(format!(
                "replication slot `{slot}` belongs to database `{}`, not `{}`: choose another \
                 `slot_name`, or point connection_url at that database",
                self.database.as_deref().unwrap_or("?"),
                want.database
            )));
        }
        if self.wal_status.as_deref() == Some("lost") {
            return Err(failed(format!(
                "replication slot `{slot}` was invalidated (wal_status = 'lost'): the server \
                 removed WAL the slot still needed (see max_slot_wal_keep_size), so changes after \
                 the last acknowledged position are gone. Drop the slot (`SELECT \
                 pg_drop_replication_slot('{slot}')`), delete this pipeline's bookmark, and resync \
                 the tables (e.g. `faucet replicate`)"
            )));
        }
        Ok(())
    }
}

async fn slot_row(conn: &mut PgConnection, slot: &str) -> Result<Option<SlotRow>, FaucetError> {
    #[allow(clippy::type_complexity)]
    let row: Option<(
        Option<String>,
        String,
        Option<String>,
        Option<i32>,
        Option<String>,
        Option<String>,
    )> = sqlx::query_as(
        "SELECT plugin::text, slot_type, database::text, active_pid, wal_status, \
         confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(slot)
    .fetch_optional(&mut *conn)
    .await
    .map_err(|e| query_failed("reading pg_replication_slots", e))?;
    Ok(row.map(
        |(plugin, slot_type, database, active_pid, wal_status, confirmed)| SlotRow {
            plugin,
            slot_type,
            database,
            active_pid,
            wal_status,
            confirmed_flush: confirmed.as_deref().and_then(parse_lsn),
        },
    ))
}

/// Ends the session `pid` holding `slot` (`slot_in_use: terminate`), saying so in the log.
async fn terminate_holder(
    conn: &mut PgConnection,
    slot: &str,
    pid: i32,
) -> Result<(), FaucetError> {
    let (app, addr) = holder(conn, pid).await;
    let ended: Option<bool> = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| query_failed("pg_terminate_backend on the slot's holder", e))?;
    if ended != Some(true) {
        return Err(FaucetError::connect(
            CONNECTOR,
            format!(
                "replication slot `{slot}` is active in another process (pid {pid}), and \
                 pg_terminate_backend({pid}) did not end it: this user may not signal that \
                 session (grant pg_signal_backend, or end it as its owner)"
            ),
            None,
        ));
    }
    tracing::warn!(
        slot,
        pid,
        application_name = app.as_deref().unwrap_or_default(),
        client = addr.as_deref().unwrap_or("local"),
        "terminated the walsender holding the replication slot (slot_in_use: terminate): this \
         run holds the pipeline's lease, so that holder was a previous owner"
    );
    // Let the server release the slot before it is read again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}

/// The `application_name` and client address of session `pid`, when it is still listed.
async fn holder(conn: &mut PgConnection, pid: i32) -> (Option<String>, Option<String>) {
    let who: Option<(Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT application_name, client_addr::text FROM pg_stat_activity WHERE pid = $1",
    )
    .bind(pid)
    .fetch_optional(&mut *conn)
    .await
    .ok()
    .flatten();
    who.unwrap_or((None, None))
}

async fn slot_active(conn: &mut PgConnection, slot: &str, pid: i32) -> FaucetError {
    let (app, addr) = holder(conn, pid).await;
    FaucetError::connect(
        CONNECTOR,
        format!(
            "replication slot `{slot}` is active in another process (pid {pid}, application_name \
             `{}`, client {}): stop that consumer (or `SELECT pg_terminate_backend({pid})`), or \
             give this pipeline its own `slot_name`",
            app.unwrap_or_default(),
            addr.unwrap_or_else(|| "local".into())
        ),
        None,
    )
}

async fn check_free_slot(conn: &mut PgConnection, slot: &str) -> Result<(), FaucetError> {
    let (used, max): (i64, String) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| query_failed("counting replication slots", e))?;
    if max.parse::<i64>().is_ok_and(|max| used >= max) {
        return Err(failed(format!(
            "replication slot `{slot}` does not exist and cannot be created: all {max} slots are \
             in use (max_replication_slots); drop an unused slot or raise max_replication_slots"
        )));
    }
    Ok(())
}

async fn create_slot(
    conn: &mut PgConnection,
    slot: &str,
    connection: &PostgresUrl,
) -> Result<(), FaucetError> {
    let creator: Option<i32> = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .ok();
    let creating = sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
        .bind(slot)
        .execute(&mut *conn);
    let created = super::slot_wait::while_creating(connection, slot, creator, creating).await;
    match created {
        Ok(_) => {
            tracing::info!(slot, "created the replication slot");
            Ok(())
        }
        // Created concurrently by another run: fine.
        Err(e) if sqlstate(&e).as_deref() == Some("42710") => Ok(()),
        Err(e) if sqlstate(&e).as_deref() == Some("53400") => Err(FaucetError::read(
            CONNECTOR,
            format!(
                "cannot create replication slot `{slot}`: all slots are in use; drop an unused \
                 slot or raise max_replication_slots"
            ),
            Some(Box::new(e)),
        )),
        Err(e) => Err(FaucetError::read(
            CONNECTOR,
            format!("cannot create replication slot `{slot}`"),
            Some(Box::new(e)),
        )),
    }
}

fn sqlstate(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
}
