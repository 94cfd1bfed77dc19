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
use std::time::Duration;

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
    /// What tells the holder's process apart from every other process of its host, before
    /// and after (Linux; `None` elsewhere and in leases written by older versions): lets a
    /// later run on the same host see that the holder is gone and take its lease at once
    /// instead of waiting for it to expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<Box<ProcessIdentity>>,
}

/// A process's identity on its host: the kernel's boot id, its pid namespace and its start
/// time. A pid is reused, but not together with its start time within one boot; another
/// pid namespace (a container) has its own pids, so its identity never matches.
///
/// Read from `/proc` (proc(5): `/proc/sys/kernel/random/boot_id`, the `/proc/PID/ns/pid`
/// link, and field 22 `starttime` of `/proc/PID/stat`, in clock ticks after boot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// The pid namespace, as the `/proc/self/ns/pid` link reads (`pid:[4026531836]`).
    pub pid_ns: String,
    /// The process's start time, clock ticks after boot.
    pub start_ticks: u64,
}

impl ProcessIdentity {
    /// This process's identity, or `None` where `/proc` does not tell it.
    pub fn this_process() -> Option<Self> {
        Some(Self {
            boot_id: boot_id()?,
            pid_ns: pid_namespace()?,
            start_ticks: start_ticks(std::process::id())?,
        })
    }
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned())
}

fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    Some(link.to_string_lossy().into_owned())
}

/// Field 22 of `/proc/PID/stat`, or `None` when there is no such process (or no `/proc`).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so count from the
    // last `)`; the field after it is field 3, so field 22 is the 20th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether this machine has a `/proc` that tells processes apart.
fn proc_readable() -> bool {
    start_ticks(std::process::id()).is_some()
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
            process: ProcessIdentity::this_process().map(Box::new),
        }
    }

    /// Whether this holder is a process of this host (same host name, boot and pid
    /// namespace) that no longer runs: its pid is gone, or belongs to a process started at
    /// another time. Always `false` when that cannot be known for sure (another host or
    /// container, no `/proc`, a lease written without a [`ProcessIdentity`]), and for a
    /// stopped (SIGSTOP) holder, which still exists.
    pub fn is_gone_from_this_host(&self) -> bool {
        let Some(theirs) = &self.process else {
            return false;
        };
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        if host != self.host
            || boot_id().as_deref() != Some(theirs.boot_id.as_str())
            || pid_namespace().as_deref() != Some(theirs.pid_ns.as_str())
            || !proc_readable()
        {
            return false;
        }
        start_ticks(self.pid) != Some(theirs.start_ticks)
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

/// What a runner asks of [`super::StateStore::acquire_lease`]: the lease on `key` for `ttl`
/// as `holder` — and, with `gone` set, taken over from that holder, known to have exited
/// ([`LeaseHolder::is_gone_from_this_host`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The state key to lease.
    pub key: String,
    /// This runner.
    pub holder: LeaseHolder,
    /// How long the lease lasts without a renewal.
    pub ttl: Duration,
    /// The holder to take the lease over from: the store takes it, as it would take an
    /// expired lease, only while this holder (by its id) still holds it, with a new fence.
    pub gone: Option<LeaseHolder>,
}

impl LeaseRequest {
    /// The lease on `key` for `ttl` as `holder`, unless another live holder has it.
    #[must_use]
    pub fn new(key: &str, holder: &LeaseHolder, ttl: Duration) -> Self {
        Self {
            key: key.to_owned(),
            holder: holder.clone(),
            ttl,
            gone: None,
        }
    }

    /// The id of the holder to take the lease over from, if any.
    #[must_use]
    pub fn gone_id(&self) -> Option<&str> {
        self.gone.as_ref().map(|g| g.id.as_str())
    }

    /// The same request, taking the lease over from `gone`.
    #[must_use]
    pub fn taking_over(mut self, gone: &LeaseHolder) -> Self {
        self.gone = Some(gone.clone());
        self
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
    /// The sink refused a page of this runner: a newer run of the key (a larger fence) has
    /// written to the target since this runner's lease was taken from it. The page was
    /// rolled back and the bookmark not written.
    #[error(
        "the sink refused a page of state key `{key}`: a newer run (fence {newer}) writes to \
         {target} since this run's lease (fence {fence}) was taken; the page was rolled back \
         and the bookmark not written"
    )]
    Fenced {
        /// The state key.
        key: String,
        /// This runner's fence.
        fence: u64,
        /// The larger fence the target has seen.
        newer: u64,
        /// The sink's target, for people.
        target: String,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_not_gone_and_an_exited_child_is() {
        let me = LeaseHolder::this_process();
        if me.process.is_none() {
            // No /proc here: nothing can be told, and nothing is ever taken over.
            assert!(!me.is_gone_from_this_host());
            return;
        }
        assert!(!me.is_gone_from_this_host());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let live = LeaseHolder {
            pid,
            process: Some(Box::new(ProcessIdentity {
                start_ticks: start_ticks(pid).expect("the child's start time"),
                ..*me.process.clone().expect("identity")
            })),
            ..me.clone()
        };
        assert!(!live.is_gone_from_this_host(), "a running child is alive");
        child.kill().expect("kill");
        child.wait().expect("wait");
        assert!(live.is_gone_from_this_host(), "an exited child is gone");
        // The same pid with another start time is another process: its holder is gone.
        let reused = LeaseHolder {
            process: Some(Box::new(ProcessIdentity {
                start_ticks: me.process.as_ref().expect("identity").start_ticks + 1,
                ..*me.process.clone().expect("identity")
            })),
            ..me.clone()
        };
        assert!(reused.is_gone_from_this_host());
        // Another host, boot or namespace: never judged.
        for other in [
            LeaseHolder {
                host: format!("{}-elsewhere", me.host),
                ..live.clone()
            },
            LeaseHolder {
                process: Some(Box::new(ProcessIdentity {
                    boot_id: "another-boot".into(),
                    ..*live.process.clone().expect("identity")
                })),
                ..live.clone()
            },
            LeaseHolder {
                process: Some(Box::new(ProcessIdentity {
                    pid_ns: "pid:[1]".into(),
                    ..*live.process.clone().expect("identity")
                })),
                ..live.clone()
            },
            LeaseHolder {
                process: None,
                ..live.clone()
            },
        ] {
            assert!(!other.is_gone_from_this_host(), "{other:?}");
        }
    }
}
