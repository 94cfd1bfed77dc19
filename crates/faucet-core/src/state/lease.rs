//! One runner per state key.
//!
//! Two runs of one pipeline (an overlapping cron tick, two replicas) would read the same
//! bookmark and write over each other. A run therefore takes a lease on its state key before
//! it reads the bookmark, renews it while it runs, and releases it at the end. A second run
//! of the key fails at once with [`LeaseError::Held`] naming the holder (or waits, if asked).
//! Bookmark writes go through [`super::StateStore::put_fenced`], which a store refuses once
//! the lease is no longer this runner's, so a runner that was paused past its lease never
//! moves a bookmark backwards.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Who holds (or wants) a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseHolder {
    /// Unique per run: tells two runs on one host apart.
    pub id: String,
    /// The host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// When the run started, RFC 3339 UTC.
    pub since: String,
}

impl LeaseHolder {
    /// This process, now, with a fresh id.
    pub fn this_process() -> Self {
        let now = chrono::Utc::now();
        let pid = std::process::id();
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let nanos = now.timestamp_nanos_opt().unwrap_or_default();
        Self {
            id: format!("{host}-{pid}-{nanos:x}"),
            host,
            pid,
            since: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }
}

impl fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} on host {} (since {})",
            self.pid, self.host, self.since
        )
    }
}

/// A held lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The state key it covers.
    pub key: String,
    /// This runner.
    pub holder: LeaseHolder,
    /// A fencing number that grows with every acquisition of the key (where the store has one).
    pub fence: u64,
}

/// The answer to an acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// The lease is ours.
    Acquired(Lease),
    /// Another live runner holds it.
    HeldBy(LeaseHolder),
    /// The store does not implement leasing.
    Unsupported,
}

/// A lease conflict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Another runner holds the key.
    #[error(
        "state key `{key}` is in use by another run: {holder}; wait for it to finish, or pass \
         --wait-for-lease <duration>"
    )]
    Held {
        /// The state key.
        key: String,
        /// Who holds it.
        holder: LeaseHolder,
    },
    /// This runner's lease expired or was taken; its bookmark writes are refused.
    #[error("lost the lease on state key `{key}`: {reason}; the bookmark was not written")]
    Lost {
        /// The state key.
        key: String,
        /// What happened.
        reason: String,
    },
}
