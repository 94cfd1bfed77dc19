//! The `postgres-cdc` source's configuration (the `source.config` block of the seed
//! `004_*`, docs/config.md), and its pure validation.

use secrecy::SecretString;
use serde::Deserialize;

use faucet_core::FaucetError;

use crate::postgres::connection::PostgresUrl;
use crate::postgres::ident::MAX_IDENT_BYTES;
/// The tables of `tables`: [`crate::postgres::ident::TableName`]s with the schema present.
pub(crate) use crate::postgres::ident::TableName;
use crate::sql::table_pattern::{TablePattern, split_tables};

/// A [`PostgresCdcConfig`] that passed [`PostgresCdcConfig::validate`], with what validation
/// parsed.
pub type ValidatedCdcConfig =
    crate::sql::validated::ValidatedCdcConfig<PostgresCdcConfig, PostgresUrl, TableName>;

/// Configuration of a [`super::PostgresCdcSource`].
///
/// ```yaml
/// source:
///   type: postgres-cdc
///   config:
///     connection_url: ${env:SOURCE_PG_URL}
///     slot_name: faucet_slot
///     publication: faucet_pub
///     tables: [public.orders]
/// ```
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresCdcConfig {
    /// The source database, `postgres://user:password@host:port/database` (a Unix socket
    /// directory goes in `?host=/run/postgresql`). A secret: never printed; `Debug` shows
    /// `[redacted]`. The role needs the REPLICATION attribute (or superuser). TLS is not
    /// compiled in: `sslmode=require` and stronger are rejected, `prefer`/`allow`/`disable`
    /// connect in plain text.
    pub connection_url: SecretString,
    /// The logical replication slot (plugin `pgoutput`), created when missing. PostgreSQL's
    /// rule for slot names: lower-case letters, digits and `_`, at most 63 bytes.
    pub slot_name: String,
    /// The publication whose changes are read. Lower-case letters, digits and `_`, not
    /// starting with a digit, at most 63 bytes (the name is passed to pgoutput unquoted).
    pub publication: String,
    /// The tables to emit changes of, schema-qualified (`public.orders`), matched exactly
    /// (case-sensitively) against the catalog; each part 1 to 63 bytes without NUL or `.`
    /// (any other character works: names are always quoted). An entry with a `*` is a
    /// pattern ([`crate::sql::table_pattern`]): `public.*` (every table of the schema) or
    /// `public.order_*`; it matches ordinary and partitioned tables (not partitions, views
    /// or foreign tables) that exist at start, and tables created later that the
    /// publication shows, when the stream first meets them. Changes of other tables in the
    /// publication are skipped. Each table must be in the publication.
    pub tables: Vec<String>,
    /// When the publication does not exist: create it (true) `FOR TABLES IN SCHEMA` each
    /// schema a `schema.*` entry names (PostgreSQL 15+: tables created there later are
    /// published without anyone's help) and `FOR TABLE` the other tables, or fail with the
    /// statement to run (false, the default). An existing publication is never altered.
    #[serde(default = "default_create_publication")]
    pub create_publication: bool,
    /// `false` (the default): a run catches up to the WAL position it saw at start
    /// (`pg_current_wal_lsn()`) and ends. `true`: follow the stream until the run is
    /// cancelled (SIGINT/SIGTERM), then finish the page in hand and end.
    #[serde(default = "default_continuous")]
    pub continuous: bool,
    /// What a run does when the slot is still active in another process when it starts —
    /// typically the walsender of a previous owner that was paused (SIGSTOP) or cut off,
    /// which keeps the slot until the server's `wal_sender_timeout`: `wait` (the default)
    /// for it to end, briefly, then fail naming it (a `faucet serve` row retries); or
    /// `terminate` it with `pg_terminate_backend` (needs the privilege to signal that
    /// session). The run loop opens the source only once it holds the pipeline's lease, so
    /// with a state store that has leases the holder being ended is a previous owner.
    #[serde(default)]
    pub slot_in_use: SlotInUse,
}

/// `slot_in_use`: what to do about a slot held by another session at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotInUse {
    /// Wait a few seconds for the holder to let go, then fail naming it.
    #[default]
    Wait,
    /// End the holder's session (`pg_terminate_backend(active_pid)`) and take the slot.
    Terminate,
}

fn default_create_publication() -> bool {
    false
}

fn default_continuous() -> bool {
    false
}

impl std::fmt::Debug for PostgresCdcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresCdcConfig")
            .field("connection_url", &"[redacted]")
            .field("slot_name", &self.slot_name)
            .field("publication", &self.publication)
            .field("tables", &self.tables)
            .field("create_publication", &self.create_publication)
            .field("continuous", &self.continuous)
            .field("slot_in_use", &self.slot_in_use)
            .finish()
    }
}

impl PostgresCdcConfig {
    /// A configuration with the defaults for the optional fields.
    pub fn new(
        connection_url: impl Into<String>,
        slot_name: impl Into<String>,
        publication: impl Into<String>,
        tables: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            connection_url: SecretString::from(connection_url.into()),
            slot_name: slot_name.into(),
            publication: publication.into(),
            tables: tables.into_iter().map(Into::into).collect(),
            create_publication: default_create_publication(),
            continuous: default_continuous(),
            slot_in_use: SlotInUse::default(),
        }
    }

    /// Checks the fields without any I/O, and keeps what checking parsed (the connection
    /// parameters, the split table names) for [`super::PostgresCdcSource::from_validated`].
    ///
    /// # Errors
    /// [`FaucetError::Config`] naming the field (`connection_url`, `slot_name`,
    /// `publication`, `tables`) and what a valid value looks like.
    pub fn validate(&self) -> Result<ValidatedCdcConfig, FaucetError> {
        let connection = PostgresUrl::parse(&self.connection_url, "connection_url")?;
        if connection.requires_tls() {
            return Err(FaucetError::config(
                "connection_url",
                "TLS (sslmode=require/verify-ca/verify-full) is not compiled into faucet; \
                 use sslmode=disable or prefer on a trusted network",
            ));
        }
        validate_slot_name(&self.slot_name)?;
        validate_publication(&self.publication)?;
        let (tables, patterns) = self.table_names()?;
        Ok(ValidatedCdcConfig {
            config: self.clone(),
            connection,
            tables,
            patterns,
        })
    }

    /// The `tables`, split and checked: the names, and the patterns.
    pub(crate) fn table_names(&self) -> Result<(Vec<TableName>, Vec<TablePattern>), FaucetError> {
        split_tables(
            &self.tables,
            "schema",
            "name at least one schema-qualified table, e.g. [public.orders]",
            TableName::parse,
            TableName::parse_qualified,
        )
    }
}

/// Whether `name` is 1 to [`MAX_IDENT_BYTES`] bytes of lower-case letters, digits and `_`,
/// and, unless `leading_digit`, does not start with a digit.
fn lower_snake(name: &str, leading_digit: bool) -> bool {
    !name.is_empty()
        && name.len() <= MAX_IDENT_BYTES
        && (leading_digit || !name.as_bytes()[0].is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// PostgreSQL's rule for replication slot names (`ReplicationSlotValidateName`).
fn validate_slot_name(name: &str) -> Result<(), FaucetError> {
    if lower_snake(name, true) {
        return Ok(());
    }
    Err(FaucetError::config(
        "slot_name",
        format!(
            "`{name}` is not a valid replication slot name: use lower-case letters, digits \
             and `_`, at most {MAX_IDENT_BYTES} bytes"
        ),
    ))
}

/// Publication names are passed to pgoutput's `publication_names` unquoted, where the server
/// folds them to lower case; so only names that need no quoting are accepted.
fn validate_publication(name: &str) -> Result<(), FaucetError> {
    if lower_snake(name, false) {
        return Ok(());
    }
    Err(FaucetError::config(
        "publication",
        format!(
            "`{name}` is not accepted as a publication name: use lower-case letters, \
             digits and `_`, not starting with a digit, at most {MAX_IDENT_BYTES} bytes"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use faucet_core::testing::config_field as field_of;

    fn config(yaml_like: serde_json::Value) -> Result<PostgresCdcConfig, serde_json::Error> {
        serde_json::from_value(yaml_like)
    }

    #[test]
    fn defaults_and_strictness() {
        let c = config(serde_json::json!({
            "connection_url": "postgres://u:hunter2@localhost/db",
            "slot_name": "s1", "publication": "p1", "tables": ["public.orders"]
        }))
        .expect("valid");
        assert!(!c.create_publication);
        assert!(!c.continuous);
        let valid = c.validate().expect("valid");
        // What validation parsed is kept, for the source to take without parsing again.
        assert_eq!(valid.connection.database(), "db");
        assert_eq!(
            valid.tables,
            [TableName::parse("public.orders", "t").expect("valid")]
        );
        assert!(!format!("{valid:?}").contains("hunter2"));
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2"), "{debug}");

        let unknown = config(serde_json::json!({
            "connection_url": "postgres://localhost/db", "slot_name": "s",
            "publication": "p", "tables": ["public.t"], "slot": "x"
        }));
        assert!(unknown.is_err());
    }

    #[test]
    fn names_are_checked() {
        let base = PostgresCdcConfig::new("postgres://localhost/db", "s", "p", ["public.t"]);
        let mut c = base.clone();
        c.slot_name = "Bad-Slot".into();
        assert_eq!(field_of(c.validate().expect_err("bad slot")), "slot_name");
        let mut c = base.clone();
        c.publication = "1pub".into();
        assert_eq!(field_of(c.validate().expect_err("bad pub")), "publication");
        let mut c = base.clone();
        c.tables = vec!["orders".into()];
        assert_eq!(
            field_of(c.validate().expect_err("unqualified")),
            "tables[0]"
        );
        let mut c = base.clone();
        c.tables = vec!["public.t".into(), "public.t".into()];
        assert_eq!(field_of(c.validate().expect_err("dup")), "tables[1]");
        let mut c = base.clone();
        c.tables = vec![];
        assert_eq!(field_of(c.validate().expect_err("empty")), "tables");
        let mut c = base.clone();
        c.tables = vec!["public.t".into(), "public.*x*".into()];
        assert_eq!(field_of(c.validate().expect_err("pattern")), "tables[1]");
        let mut c = base.clone();
        c.tables = vec!["s.*".into(), "s.*".into()];
        assert_eq!(
            field_of(c.validate().expect_err("dup pattern")),
            "tables[1]"
        );
        let mut c = base.clone();
        c.tables = vec!["s.*".into(), "public.t".into()];
        let v = c.validate().expect("a pattern and a name");
        assert_eq!(v.patterns[0].to_string(), "s.*");
        assert_eq!(v.tables.len(), 1);
        let mut c = base.clone();
        c.connection_url = SecretString::from("mysql://localhost/db");
        assert_eq!(
            field_of(c.validate().expect_err("scheme")),
            "connection_url"
        );
        let mut c = base;
        c.connection_url = SecretString::from("postgres://u:secret@h/db?sslmode=require");
        let e = c.validate().expect_err("tls");
        assert!(
            e.to_string().contains("TLS") && !e.to_string().contains("secret"),
            "{e}"
        );
        assert_eq!(field_of(e), "connection_url");
    }
}
