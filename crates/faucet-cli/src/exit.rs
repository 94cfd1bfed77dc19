//! The process exit codes, and which error gives which.

use faucet_core::FaucetError;
use faucet_core::state::LeaseError;

/// What the process exits with (documented in `faucet --help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 0: every run succeeded (a run cancelled by SIGINT/SIGTERM after persisting its page
    /// also counts).
    Success,
    /// 1: a run failed (connect, read, write or state error, bad data).
    RunFailed,
    /// 2: the config file or the command line is invalid.
    Usage,
    /// 3: the requested delivery (`effectively_once`) cannot be met by this topology.
    DeliveryUnmet,
    /// 4: another run holds the state key's lease.
    LeaseHeld,
}

/// The code of a second SIGINT/SIGTERM: exit at once, the page in hand is not finished.
pub(crate) const INTERRUPTED: i32 = 130;

impl Exit {
    /// The classification of `e`.
    pub(crate) fn of(e: &FaucetError) -> Self {
        match e {
            FaucetError::Config { .. } => Self::Usage,
            FaucetError::Delivery(_) => Self::DeliveryUnmet,
            FaucetError::Lease(LeaseError::Held { .. }) => Self::LeaseHeld,
            _ => Self::RunFailed,
        }
    }

    /// The numeric code.
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::RunFailed => 1,
            Self::Usage => 2,
            Self::DeliveryUnmet => 3,
            Self::LeaseHeld => 4,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        Self::from(e.code())
    }
}

/// The exit codes, for `--help`.
pub(crate) const HELP: &str = "\
Exit codes:
  0    success (also: cancelled by SIGINT/SIGTERM after persisting the page in hand)
  1    a run failed (connection, read, write, state store, bad data)
  2    invalid config file or command line
  3    the requested delivery (effectively_once / exactly_once) cannot be met
  4    another run holds the state key's lease (see --wait-for-lease)
  130  a second SIGINT/SIGTERM: exited at once
  doctor exits with the number of failed probes.";
