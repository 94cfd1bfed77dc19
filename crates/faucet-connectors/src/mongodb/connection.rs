//! The connection rules shared by every MongoDB connector: the `connection_url` checked
//! without I/O into [`MongoConnection`] (a secret, never printed), the client opened from it,
//! and the mapping of driver errors to [`FaucetError`]s that never carry the URL
//! ([`MongoConnection::error`]).

use std::time::Duration;

use mongodb::Client;
use mongodb::error::{Error as DriverError, ErrorKind};
use mongodb::options::ClientOptions;
use secrecy::{ExposeSecret, SecretString};

use faucet_core::FaucetError;

/// How long choosing a server (connecting, the handshake) may take before an operation fails.
const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// MongoDB's `ChangeStreamHistoryLost`: the resume point is no longer in the oplog.
pub const CHANGE_STREAM_HISTORY_LOST: i32 = 286;

/// A checked `connection_url`: `mongodb://[user:password@]host[:port][,host…]/[database][?options]`
/// (the driver's URI options, such as `?directConnection=true&replicaSet=rs0`). `mongodb+srv://`
/// is refused: this build does no DNS SRV lookups. Made once by [`MongoConnection::parse`];
/// `Debug` and [`MongoConnection::describe`] never show the user or password.
#[derive(Clone)]
pub struct MongoConnection {
    url: SecretString,
    description: String,
    connector: &'static str,
}

impl std::fmt::Debug for MongoConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongoConnection")
            .field("server", &self.description)
            .finish_non_exhaustive()
    }
}

impl MongoConnection {
    /// Checks `url` without I/O; errors name `field`.
    ///
    /// # Errors
    /// [`FaucetError::Config`] when it is not a `mongodb://` URL with a host.
    pub fn parse(
        url: &SecretString,
        field: &str,
        connector: &'static str,
    ) -> Result<Self, FaucetError> {
        let text = url.expose_secret();
        if text.starts_with("mongodb+srv://") {
            return Err(FaucetError::config(
                field,
                "mongodb+srv:// (a DNS SRV lookup) is not supported by this build; list the \
                 hosts: mongodb://host1:27017,host2:27017/?replicaSet=rs0",
            ));
        }
        let Some(rest) = text.strip_prefix("mongodb://") else {
            return Err(FaucetError::config(
                field,
                "expected a MongoDB URL, mongodb://user:password@host:27017/?replicaSet=rs0",
            ));
        };
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if hosts.is_empty() || hosts.split(',').any(str::is_empty) {
            return Err(FaucetError::config(
                field,
                "the URL names no host: mongodb://host:27017/",
            ));
        }
        Ok(Self {
            url: url.clone(),
            description: format!("mongodb://{hosts}"),
            connector,
        })
    }

    /// `mongodb://host:port[,host…]`: the servers, without credentials or options.
    pub fn describe(&self) -> &str {
        &self.description
    }

    /// A client (the driver connects lazily, on the first operation, and keeps a pool).
    ///
    /// # Errors
    /// [`FaucetError::Config`] (field `connection_url`) when the driver refuses the URL's
    /// options.
    pub async fn client(&self) -> Result<Client, FaucetError> {
        let mut options = ClientOptions::parse(self.url.expose_secret())
            .await
            .map_err(|e| {
                FaucetError::config(
                    "connection_url",
                    format!("the driver refuses the URL: {}", redact(&e.to_string())),
                )
            })?;
        options.app_name.get_or_insert_with(|| "faucet".to_owned());
        options
            .server_selection_timeout
            .get_or_insert(SERVER_SELECTION_TIMEOUT);
        Client::with_options(options).map_err(|e| self.error("open a client", &e))
    }

    /// A driver error as a [`FaucetError`] saying what `doing` was: a lost connection, a
    /// server that cannot be selected or refused authentication is [`FaucetError::Connect`]
    /// (retryable); the change stream's history lost (286) is [`FaucetError::Bookmark`];
    /// anything else [`FaucetError::Read`]. The message names the server (never its
    /// credentials) and the server's error code and name.
    pub fn error(&self, doing: &str, e: &DriverError) -> FaucetError {
        // A command error's Display also dumps the server's raw reply: keep its code and text.
        let text = match e.kind.as_ref() {
            ErrorKind::Command(c) => format!("error {} ({}): {}", c.code, c.code_name, c.message),
            _ => redact(&e.to_string()),
        };
        let message = format!("{doing} on {}: {text}", self.description);
        match e.kind.as_ref() {
            ErrorKind::Io(_)
            | ErrorKind::ServerSelection { .. }
            | ErrorKind::ConnectionPoolCleared { .. }
            | ErrorKind::Authentication { .. }
            | ErrorKind::DnsResolve { .. } => FaucetError::connect(self.connector, message, None),
            ErrorKind::Command(c) if c.code == CHANGE_STREAM_HISTORY_LOST => FaucetError::bookmark(
                self.connector,
                format!(
                    "{message}: the change stream's resume point is no longer in the oplog \
                     (ChangeStreamHistoryLost, 286) — changes after it are gone; re-snapshot \
                     the collections with `faucet replicate` from a fresh state (the target \
                     emptied), and size the oplog (or `oplogMinRetentionHours`) above the \
                     longest stop"
                ),
                None,
            ),
            _ => FaucetError::read(self.connector, message, None),
        }
    }

    /// [`MongoConnection::error`] for a writer: the same classes, but anything that is not a
    /// lost connection is a [`FaucetError::Write`]; the driver error is kept as its source,
    /// so its labels (`TransientTransactionError`) can be asked.
    pub fn write_error(&self, doing: &str, e: DriverError) -> FaucetError {
        match self.error(doing, &e) {
            FaucetError::Read { message, .. } => {
                FaucetError::write(self.connector, message, Some(Box::new(e)))
            }
            FaucetError::Connect { message, .. } => {
                FaucetError::connect(self.connector, message, Some(Box::new(e)))
            }
            other => other,
        }
    }
}

/// `text` with the user information of any `mongodb://user:password@` in it removed.
fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("mongodb://") {
        let (head, tail) = rest.split_at(i + "mongodb://".len());
        out.push_str(head);
        let end = tail.find([' ', '"', '\'']).unwrap_or(tail.len());
        let (url, after) = tail.split_at(end);
        out.push_str(url.rsplit_once('@').map_or(url, |(_, hosts)| hosts));
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<MongoConnection, FaucetError> {
        MongoConnection::parse(&SecretString::from(url), "connection_url", "mongodb-cdc")
    }

    #[test]
    fn urls_are_checked_and_never_shown() {
        let c = parse("mongodb://u:hunter2@h1:27017,h2/?replicaSet=rs0").expect("valid");
        assert_eq!(c.describe(), "mongodb://h1:27017,h2");
        assert!(!format!("{c:?}").contains("hunter2"));
        for bad in [
            "postgres://h/db",
            "mongodb://",
            "mongodb:///db",
            "mongodb://a,,b/",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let e = parse("mongodb+srv://cluster.example/").expect_err("srv");
        assert!(e.to_string().contains("not supported"), "{e}");
    }

    #[test]
    fn credentials_are_cut_from_driver_messages() {
        assert_eq!(
            redact("bad uri mongodb://u:pw@h:1/x and mongodb://h2"),
            "bad uri mongodb://h:1/x and mongodb://h2"
        );
    }
}
