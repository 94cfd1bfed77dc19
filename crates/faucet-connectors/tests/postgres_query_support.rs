//! Helpers shared by the PostgreSQL query source and sink tests: the server from
//! `FAUCET_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`), one schema per
//! test, statements, COPY out as text, reading a source to the end.

pub(crate) use crate::support::{json_lines, read_pages};
use faucet_core::Page;
use faucet_core::value::json::write_value;
use sqlx::{Connection as _, Executor as _, PgConnection};

use faucet_test_support::Service;
pub(crate) use faucet_test_support::pg_url;

/// A session on the test server; fails the test, naming the service and the script that
/// starts it, when the server is unreachable.
pub(crate) async fn admin() -> PgConnection {
    Service::Postgres.expect_up(PgConnection::connect(&pg_url()).await)
}

/// A fresh schema `t_<name>_<pid>` (dropped first if left over) and a session on it.
pub(crate) struct TestDb {
    /// The session (its search_path starts with the schema).
    pub(crate) conn: PgConnection,
    /// The schema name.
    pub(crate) schema: String,
}

impl TestDb {
    /// Creates the schema.
    pub(crate) async fn new(name: &str) -> Self {
        let mut conn = admin().await;
        let schema = format!("t_{name}_{}", std::process::id());
        exec(
            &mut conn,
            &format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
                 SET search_path = {schema}, public"
            ),
        )
        .await;
        Self { conn, schema }
    }

    /// [`TestDb::new`], then `ddl` (several statements allowed) run in the schema.
    pub(crate) async fn with(name: &str, ddl: &str) -> Self {
        let mut db = Self::new(name).await;
        db.exec(ddl).await;
        db
    }

    /// `schema.table`.
    pub(crate) fn table(&self, table: &str) -> String {
        format!("{}.{table}", self.schema)
    }

    /// Runs `sql` (several statements allowed).
    pub(crate) async fn exec(&mut self, sql: &str) {
        exec(&mut self.conn, sql).await;
    }

    /// `COPY (<select>) TO STDOUT` as text.
    pub(crate) async fn copy_out(&mut self, select: &str) -> String {
        copy_out(&mut self.conn, select).await
    }

    /// Drops the schema.
    pub(crate) async fn drop(mut self) {
        let schema = self.schema.clone();
        exec(&mut self.conn, &format!("DROP SCHEMA {schema} CASCADE")).await;
    }
}

/// Runs `sql` as a simple query (several statements allowed).
pub(crate) async fn exec(conn: &mut PgConnection, sql: &str) {
    if let Err(e) = conn.execute(sql).await {
        panic!("`{sql}` failed: {e}");
    }
}

/// `COPY (<select>) TO STDOUT` in text format, as one string.
pub(crate) async fn copy_out(conn: &mut PgConnection, select: &str) -> String {
    use futures_util::StreamExt as _;
    let mut stream = conn
        .copy_out_raw(&format!("COPY ({select}) TO STDOUT"))
        .await
        .expect("copy out");
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.expect("copy chunk"));
    }
    String::from_utf8(out).expect("utf8")
}

/// Loads `path` (CSV with a header, `NA` for NULL) into `table`.
pub(crate) async fn copy_in_csv(conn: &mut PgConnection, table: &str, path: &str) {
    let data = std::fs::read(path).expect("read csv");
    let mut copy = conn
        .copy_in_raw(&format!(
            "COPY {table} FROM STDIN WITH (FORMAT csv, HEADER true, NULL 'NA')"
        ))
        .await
        .expect("copy in");
    copy.send(data).await.expect("send");
    copy.finish().await.expect("finish");
}

/// The value of `column` in every record, as JSON text.
pub(crate) fn column_json(pages: &[Page], column: &str) -> Vec<String> {
    let mut out = Vec::new();
    for page in pages {
        for row in page.rows() {
            let mut v = Vec::new();
            write_value(&mut v, row.get(column).expect("column"));
            out.push(String::from_utf8(v).expect("utf8"));
        }
    }
    out
}
