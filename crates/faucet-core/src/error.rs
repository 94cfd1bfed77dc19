//! The one classified error of the faucet libraries.
//!
//! Each variant says *what* failed and *whose fault it is*: a user's config, a connection, a
//! read from a source, a write to a sink, the state store, a stored bookmark the source
//! cannot resume from, a bad input value, a delivery request that cannot be met, or a lease
//! held by another runner. The cause is chained with
//! `#[source]`, never formatted into the message. The run loop reads [`FaucetError::is_retryable`].

use crate::delivery::DeliveryError;
use crate::state::lease::LeaseError;

/// A boxed cause, chained as the `source()` of a [`FaucetError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Every error a faucet library returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FaucetError {
    /// The configuration is invalid; `field` is its path (`pipeline.source.config.path`).
    #[error("invalid configuration at `{field}`: {message}")]
    Config {
        /// Dotted path of the offending field.
        field: String,
        /// What is wrong and, where possible, what would be right.
        message: String,
    },
    /// A connection to an external system could not be opened or was lost.
    #[error("{connector}: cannot connect: {message}")]
    Connect {
        /// The connector or store (`postgres`, `redis`, `csv`).
        connector: String,
        /// What failed, with the fix where known.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// Reading from a source failed.
    #[error("{connector}: read failed: {message}")]
    Read {
        /// The source connector.
        connector: String,
        /// What failed.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// Writing to or flushing a sink failed.
    #[error("{connector}: write failed: {message}")]
    Write {
        /// The sink connector.
        connector: String,
        /// What failed.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The state store failed, or its entry cannot be used as stored (torn, or delivered to
    /// another sink). `store` is always a store; a bookmark that the *source* cannot use is
    /// [`FaucetError::Bookmark`].
    #[error("state store {store}: {message}")]
    State {
        /// The store (`memory`, `file`, `postgres`, `redis`).
        store: String,
        /// What failed; names the file, key or table.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The source cannot resume from the stored bookmark: it is not one this source, so
    /// configured, made (another source type, `replication_key` or method, a malformed
    /// value), or what it points into has changed so that resuming would skip or repeat
    /// records (a file replaced, a slot recreated, a table's primary key changed). It
    /// repeats until a person acts; `message` says what to restore or how to start over.
    #[error("{connector}: cannot resume: {message}")]
    Bookmark {
        /// The source connector (`csv`, `postgres-cdc`).
        connector: String,
        /// Why, and the fix.
        message: String,
        /// The underlying error (a decoding error of the bookmark's JSON).
        #[source]
        source: Option<BoxError>,
    },
    /// Input data is malformed; `location` names the file and line, or the table and key.
    #[error("{connector}: bad data at {location}: {message}")]
    Data {
        /// The connector that read it.
        connector: String,
        /// File and line (`weather.csv:17`), or another precise location.
        location: String,
        /// What is wrong with it.
        message: String,
    },
    /// A delivery request cannot be met by this topology (invariant 5 of docs/run-loop.md).
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
    /// Another runner holds the state key, or this runner lost its lease.
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

impl FaucetError {
    /// A [`FaucetError::Config`] for `field`.
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Config {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A [`FaucetError::State`] without an underlying cause.
    pub fn state(store: impl Into<String>, message: impl Into<String>) -> Self {
        Self::State {
            store: store.into(),
            message: message.into(),
            source: None,
        }
    }

    /// A [`FaucetError::State`] caused by `source`.
    pub fn state_io(
        store: impl Into<String>,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::State {
            store: store.into(),
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A [`FaucetError::Read`] caused by `source`.
    pub fn read(
        connector: impl Into<String>,
        message: impl Into<String>,
        source: Option<BoxError>,
    ) -> Self {
        Self::Read {
            connector: connector.into(),
            message: message.into(),
            source,
        }
    }

    /// A [`FaucetError::Write`] caused by `source`.
    pub fn write(
        connector: impl Into<String>,
        message: impl Into<String>,
        source: Option<BoxError>,
    ) -> Self {
        Self::Write {
            connector: connector.into(),
            message: message.into(),
            source,
        }
    }

    /// A [`FaucetError::Connect`] caused by `source`.
    pub fn connect(
        connector: impl Into<String>,
        message: impl Into<String>,
        source: Option<BoxError>,
    ) -> Self {
        Self::Connect {
            connector: connector.into(),
            message: message.into(),
            source,
        }
    }

    /// A [`FaucetError::Bookmark`]: `connector` cannot resume from the stored bookmark.
    pub fn bookmark(
        connector: impl Into<String>,
        message: impl Into<String>,
        source: Option<BoxError>,
    ) -> Self {
        Self::Bookmark {
            connector: connector.into(),
            message: message.into(),
            source,
        }
    }

    /// A [`FaucetError::Data`] at `location`.
    pub fn data(
        connector: impl Into<String>,
        location: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::Data {
            connector: connector.into(),
            location: location.into(),
            message: message.into(),
        }
    }

    /// The same error with `what: ` put before its message (for example `check: `, so a
    /// `faucet doctor` line says which operation failed). Delivery and lease errors, whose
    /// messages are fixed, are returned unchanged.
    pub fn with_context(self, what: &str) -> Self {
        let prefixed = |m: String| format!("{what}: {m}");
        match self {
            Self::Config { field, message } => Self::Config {
                field,
                message: prefixed(message),
            },
            Self::Connect {
                connector,
                message,
                source,
            } => Self::Connect {
                connector,
                message: prefixed(message),
                source,
            },
            Self::Read {
                connector,
                message,
                source,
            } => Self::Read {
                connector,
                message: prefixed(message),
                source,
            },
            Self::Write {
                connector,
                message,
                source,
            } => Self::Write {
                connector,
                message: prefixed(message),
                source,
            },
            Self::State {
                store,
                message,
                source,
            } => Self::State {
                store,
                message: prefixed(message),
                source,
            },
            Self::Bookmark {
                connector,
                message,
                source,
            } => Self::Bookmark {
                connector,
                message: prefixed(message),
                source,
            },
            Self::Data {
                connector,
                location,
                message,
            } => Self::Data {
                connector,
                location,
                message: prefixed(message),
            },
            other => other,
        }
    }

    /// Whether retrying the same operation may succeed (a dropped connection), as opposed to
    /// a fault that repeats until a person fixes it (bad config, bad data, a lost lease).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Connect { .. })
    }

    /// A short, stable name of the kind: `config`, `connect`, `read`, `write`, `state`,
    /// `data`, `delivery`, `lease`. Used in `--output json`. A [`FaucetError::Bookmark`] is
    /// `state` (a fault of what is stored, as before it had its own variant).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config { .. } => "config",
            Self::Connect { .. } => "connect",
            Self::Read { .. } => "read",
            Self::Write { .. } => "write",
            Self::State { .. } | Self::Bookmark { .. } => "state",
            Self::Data { .. } => "data",
            Self::Delivery(_) => "delivery",
            Self::Lease(_) => "lease",
        }
    }
}
