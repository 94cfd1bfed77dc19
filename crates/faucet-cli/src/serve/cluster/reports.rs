//! The status table, beside the members table (`<members>_status`): per pipeline row (state
//! key) the report of the member that owns it ([`Report`]), written by that member at every
//! heartbeat, so that any member answers for every row. A report is read only while its
//! writer is alive — the incarnation that wrote it still holds the member name, its heartbeat
//! is younger than the ttl, it has not left — and the report itself is younger than the ttl,
//! all by the database server's clock: a dead owner's last report is never shown.
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS <members>_status (key text PRIMARY KEY, member text NOT NULL,
//!   incarnation text NOT NULL, state text NOT NULL, running boolean NOT NULL,
//!   records bigint NOT NULL, pages bigint NOT NULL, runs bigint NOT NULL,
//!   failures int NOT NULL, rate float8, lag_seconds float8, error text, last_error text,
//!   last_error_at timestamptz, retry_at timestamptz, bookmark_at timestamptz,
//!   updated_at timestamptz NOT NULL, detail jsonb)
//! ```
//!
//! `detail` ([`ReportDetail`]: records per target, progress) is added by `ALTER TABLE … ADD
//! COLUMN IF NOT EXISTS` to a table an older member made.

use std::collections::BTreeMap;
use std::time::Duration;

use faucet_connectors::postgres::TableName;
use faucet_core::FaucetError;
use sqlx::{PgPool, Row as _};

use super::membership::{create_table, db};
use crate::serve::report::{Report, ReportDetail};

/// The statements of the status table.
#[derive(Debug, Clone)]
pub(crate) struct Reports {
    table: String,
    create: String,
    add_detail: String,
    write: String,
    read: String,
}

/// The status table's name beside `members`.
pub(crate) fn table_for(members: &TableName) -> TableName {
    super::membership::beside(members, "status")
}

/// A count as PostgreSQL's `bigint`.
fn bigint(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A `bigint` read back as a count.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or_default()
}

impl Reports {
    /// The statements for `table`, whose readers join `members` (the members table).
    pub(crate) fn new(table: &TableName, members: &TableName) -> Self {
        let t = table.quoted();
        let m = members.quoted();
        Self {
            table: table.qualified(),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (key text PRIMARY KEY, member text NOT NULL, \
                 incarnation text NOT NULL, state text NOT NULL, running boolean NOT NULL, \
                 records bigint NOT NULL, pages bigint NOT NULL, runs bigint NOT NULL, \
                 failures int NOT NULL, rate float8, lag_seconds float8, error text, \
                 last_error text, last_error_at timestamptz, retry_at timestamptz, \
                 bookmark_at timestamptz, updated_at timestamptz NOT NULL, detail jsonb)"
            ),
            add_detail: format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS detail jsonb"),
            write: format!(
                "INSERT INTO {t} (key, member, incarnation, state, running, records, pages, runs, \
                 failures, rate, lag_seconds, error, last_error, last_error_at, retry_at, \
                 bookmark_at, detail, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                 $17, now()) \
                 ON CONFLICT (key) DO UPDATE SET member = EXCLUDED.member, \
                 incarnation = EXCLUDED.incarnation, state = EXCLUDED.state, \
                 running = EXCLUDED.running, records = EXCLUDED.records, pages = EXCLUDED.pages, \
                 runs = EXCLUDED.runs, failures = EXCLUDED.failures, rate = EXCLUDED.rate, \
                 lag_seconds = EXCLUDED.lag_seconds, error = EXCLUDED.error, \
                 last_error = EXCLUDED.last_error, last_error_at = EXCLUDED.last_error_at, \
                 retry_at = EXCLUDED.retry_at, bookmark_at = EXCLUDED.bookmark_at, \
                 detail = EXCLUDED.detail, updated_at = EXCLUDED.updated_at"
            ),
            read: format!(
                "SELECT s.key, s.member, s.state, s.running, s.records, s.pages, s.runs, \
                 s.failures, s.rate, s.lag_seconds, s.error, s.last_error, s.last_error_at, \
                 s.retry_at, s.bookmark_at, s.detail, \
                 EXTRACT(EPOCH FROM now() - s.updated_at)::float8 AS age \
                 FROM {t} s JOIN {m} m ON m.name = s.member AND m.incarnation = s.incarnation \
                 WHERE NOT m.leaving AND m.heartbeat_at > now() - make_interval(secs => $1) \
                 AND s.updated_at > now() - make_interval(secs => $1)"
            ),
        }
    }

    /// Creates the table when absent, and its `detail` column when an older member made it.
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn create(&self, conn: &mut sqlx::PgConnection) -> Result<(), FaucetError> {
        create_table(conn, &self.create, &self.table).await?;
        create_table(conn, &self.add_detail, &self.table).await
    }

    /// Writes the reports of `incarnation` (of member `Report::member`), one transaction.
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn write(
        &self,
        pool: &PgPool,
        incarnation: &str,
        reports: &[(String, Report)],
    ) -> Result<(), FaucetError> {
        if reports.is_empty() {
            return Ok(());
        }
        let ctx = |e| db(&format!("cannot write the status into {}", self.table), e);
        let mut tx = pool.begin().await.map_err(ctx)?;
        for (key, r) in reports {
            let (last_error, last_error_at) = match &r.last_error {
                Some((message, at)) => (Some(message.as_str()), Some(*at)),
                None => (None, None),
            };
            sqlx::query(&self.write)
                .bind(key)
                .bind(&r.member)
                .bind(incarnation)
                .bind(&r.state)
                .bind(r.running)
                .bind(bigint(r.records))
                .bind(bigint(r.pages))
                .bind(bigint(r.runs))
                .bind(i32::try_from(r.failures).unwrap_or(i32::MAX))
                .bind(r.rate)
                .bind(r.lag_seconds)
                .bind(r.error.as_deref())
                .bind(last_error)
                .bind(last_error_at)
                .bind(r.retry_at)
                .bind(r.bookmark_at)
                .bind(sqlx::types::Json(ReportDetail {
                    targets: r.targets.clone(),
                    progress: r.progress.clone(),
                    published: r.published.clone(),
                }))
                .execute(&mut *tx)
                .await
                .map_err(ctx)?;
        }
        tx.commit().await.map_err(ctx)
    }

    /// The reports written within `ttl` by live members (see the module), by state key.
    ///
    /// # Errors
    /// [`FaucetError::State`] from the server.
    pub(crate) async fn read(
        &self,
        pool: &PgPool,
        ttl: Duration,
    ) -> Result<BTreeMap<String, Report>, FaucetError> {
        let ctx = |e| db(&format!("cannot read {}", self.table), e);
        let rows = sqlx::query(&self.read)
            .bind(ttl.as_secs_f64())
            .fetch_all(pool)
            .await
            .map_err(ctx)?;
        let mut out = BTreeMap::new();
        for row in rows {
            let last_error: Option<String> = row.try_get("last_error").map_err(ctx)?;
            let last_error_at = row.try_get("last_error_at").map_err(ctx)?;
            let detail: Option<sqlx::types::Json<ReportDetail>> =
                row.try_get("detail").map_err(ctx)?;
            let detail = detail.map(|d| d.0).unwrap_or_default();
            let report = Report {
                member: row.try_get("member").map_err(ctx)?,
                state: row.try_get("state").map_err(ctx)?,
                running: row.try_get("running").map_err(ctx)?,
                records: count(row.try_get("records").map_err(ctx)?),
                pages: count(row.try_get("pages").map_err(ctx)?),
                runs: count(row.try_get("runs").map_err(ctx)?),
                failures: u32::try_from(row.try_get::<i32, _>("failures").map_err(ctx)?)
                    .unwrap_or_default(),
                rate: row.try_get("rate").map_err(ctx)?,
                lag_seconds: row.try_get("lag_seconds").map_err(ctx)?,
                error: row.try_get("error").map_err(ctx)?,
                last_error: last_error.zip(last_error_at),
                retry_at: row.try_get("retry_at").map_err(ctx)?,
                bookmark_at: row.try_get("bookmark_at").map_err(ctx)?,
                age_seconds: row.try_get::<f64, _>("age").map_err(ctx)?.max(0.0),
                targets: detail.targets,
                progress: detail.progress,
                published: detail.published,
            };
            out.insert(row.try_get("key").map_err(ctx)?, report);
        }
        Ok(out)
    }
}
