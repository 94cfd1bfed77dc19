//! How long a member waits after it starts before it takes work (its settle), and the backoff
//! of a flapping member.
//!
//! A member that starts again within [`FLAP_WINDOW`] of the first start of its window counts a
//! restart; its settle is the configured one (`--settle`) doubled per restart counted, at most
//! [`MAX_SETTLE`]. While unsettled it is placed nothing, so a member restarted five times in a
//! minute stays out for longer each time instead of pulling its rows back and forth: only its
//! own rows ever move. The window and the counts live in the members table and are judged by
//! the database server's clock.

use std::time::Duration;

/// The window within which starts count as restarts of a flapping member.
pub(crate) const FLAP_WINDOW: Duration = Duration::from_secs(60);
/// The longest settle a flapping member gets.
pub(crate) const MAX_SETTLE: Duration = Duration::from_secs(600);

/// A start's place in the flap history: restarts counted in the window, and whether the
/// window starts anew now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Start {
    /// Restarts within the window, this one included (0: the first start of a window).
    pub(crate) restarts: u32,
    /// Whether the window starts now (`false`: it keeps its start).
    pub(crate) new_window: bool,
}

/// This start, given the previous row's restarts and the age of its window (`None`: the
/// member is new).
pub(crate) fn start(previous: Option<(u32, Duration)>) -> Start {
    match previous {
        Some((restarts, window_age)) if window_age < FLAP_WINDOW => Start {
            restarts: restarts.saturating_add(1),
            new_window: false,
        },
        _ => Start {
            restarts: 0,
            new_window: true,
        },
    }
}

/// The settle of a start with `restarts` counted: `base` doubled per restart, at most
/// [`MAX_SETTLE`] (never below `base`).
pub(crate) fn settle(base: Duration, restarts: u32) -> Duration {
    let doubled = base.saturating_mul(1_u32 << restarts.min(16));
    doubled.min(MAX_SETTLE.max(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(10);

    #[test]
    fn restarts_within_the_window_double_the_settle() {
        let mut prev = None;
        let mut settles = Vec::new();
        for i in 0..6_u64 {
            let s = start(prev);
            settles.push(settle(S, s.restarts).as_secs());
            prev = Some((s.restarts, Duration::from_secs(i * 5)));
        }
        assert_eq!(settles, [10, 20, 40, 80, 160, 320]);
        assert_eq!(settle(S, 10), MAX_SETTLE);
    }

    #[test]
    fn a_start_after_the_window_is_a_first_start() {
        let s = start(Some((4, FLAP_WINDOW + Duration::from_secs(1))));
        assert_eq!(
            s,
            Start {
                restarts: 0,
                new_window: true
            }
        );
        assert_eq!(settle(S, s.restarts), S);
        assert_eq!(start(None).restarts, 0);
    }
}
