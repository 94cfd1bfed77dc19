//! Rendezvous (highest-random-weight) placement: a pipeline row goes to the eligible member
//! whose weight for `(member name, state key)` is the highest.
//!
//! The weight is the first 8 bytes (big-endian) of SHA-256 over `member name`, a NUL byte and
//! the state key — the same on every member, machine and release (never std's per-process
//! `RandomState`). Removing a member moves exactly the rows it had (each to its second
//! choice); adding one moves exactly the rows it now wins, about K/(N+1) of K.

use sha2::{Digest, Sha256};

/// The weight of `member` for `key`.
pub(crate) fn weight(member: &str, key: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(member.as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    let digest = h.finalize();
    let mut first = [0_u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The member of `members` that `key` is placed on, or `None` when there is none. Ties (two
/// equal weights) go to the smaller name, so every member decides alike.
pub(crate) fn owner<'a, I>(key: &str, members: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    members
        .into_iter()
        .map(|m| (weight(m, key), m))
        .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)))
        .map(|(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("pipeline::row{i}")).collect()
    }

    fn place<'a>(keys: &'a [String], members: &[&'a str]) -> Vec<&'a str> {
        keys.iter()
            .map(|k| owner(k, members.iter().copied()).expect("a member"))
            .collect()
    }

    #[test]
    fn the_weight_is_stable_across_processes_and_releases() {
        // A fixed value: a change of the hash would move every pipeline of a running cluster
        // on upgrade.
        assert_eq!(weight("m1", "orders::eu"), 0xe89c_1268_754a_b001);
        assert_ne!(weight("m1", "orders::eu"), weight("m2", "orders::eu"));
    }

    #[test]
    fn a_leave_moves_only_the_rows_of_the_member_that_left() {
        let keys = keys(1000);
        let before = place(&keys, &["a", "b", "c", "d"]);
        let after = place(&keys, &["a", "b", "d"]);
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            if b != a {
                assert_eq!(*b, "c", "only c's rows move");
                moved += 1;
            }
        }
        assert_eq!(moved, before.iter().filter(|m| **m == "c").count());
        // About K/N: 250 of 1000, within a generous margin.
        assert!((180..=320).contains(&moved), "{moved}");
    }

    #[test]
    fn a_join_moves_only_rows_to_the_new_member() {
        let keys = keys(1000);
        let before = place(&keys, &["a", "b", "c"]);
        let after = place(&keys, &["a", "b", "c", "e"]);
        let moved: Vec<_> = before.iter().zip(&after).filter(|(b, a)| b != a).collect();
        assert!(moved.iter().all(|(_, a)| **a == "e"));
        assert!((180..=320).contains(&moved.len()), "{}", moved.len());
    }

    #[test]
    fn no_members_no_owner_and_order_does_not_matter() {
        assert_eq!(owner("k", std::iter::empty()), None);
        for k in keys(50) {
            assert_eq!(owner(&k, ["x", "y", "z"]), owner(&k, ["z", "x", "y"]));
        }
    }
}
